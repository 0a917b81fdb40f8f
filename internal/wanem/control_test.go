// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"50mbit", 50e6, true}, {"1gbit", 1e9, true}, {"500kbit", 500e3, true},
		{"1.5Mbit", 1.5e6, true}, {"64000", 64000, true}, {"100bit", 100, true},
		{"2g", 2e9, true}, {"0", 0, true}, {" 10 mbit ", 10e6, true},
		{"10mbps", 0, false}, {"fast", 0, false}, {"-1mbit", 0, false}, {"", 0, false},
	} {
		got, err := ParseRate(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
		if c.ok && c.want > 0 {
			if back, err := ParseRate(FormatRate(got)); err != nil || back != got {
				t.Errorf("ParseRate(FormatRate(%d) = %q) = %d, %v", got, FormatRate(got), back, err)
			}
		}
	}
}

func TestParseLoss(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"1%", 1, true}, {"1", 1, true}, {"0.5%", 0.5, true}, {"100", 100, true}, {"0", 0, true},
		{"101%", 0, false}, {"-1", 0, false}, {"lots", 0, false}, {"NaN", 0, false},
	} {
		got, err := ParseLoss(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseLoss(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestImpairmentJSON(t *testing.T) {
	in := Impairment{Delay: 20 * time.Millisecond, Jitter: 1500 * time.Microsecond, LossPercent: 0.5, RateBps: 50e6, QueueLimit: 100000}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"delay":"20ms"`) {
		t.Errorf("json %s: want durations as strings", b)
	}
	var out Impairment
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("round trip %s: %+v, %v", b, out, err)
	}
	if err := json.Unmarshal([]byte(`{"delay":"soon"}`), &out); err == nil {
		t.Error("bad duration accepted")
	}
	var d Direction
	if err := json.Unmarshal([]byte(`"ba"`), &d); err != nil || d != BA {
		t.Errorf("direction: %v, %v", d, err)
	}
}

func TestControl(t *testing.T) {
	l := newLink(slog.New(slog.DiscardHandler))
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.ServeControl(ctx, sock) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve control: %v", err)
		}
	}()

	var resp Response
	var err error
	for range 100 { // until it listens
		if resp, err = Control(sock, Request{Op: OpGet}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || resp.AB.Impairment != (Impairment{}) {
		t.Fatalf("get: %+v, %v", resp, err)
	}
	imp := Impairment{Delay: 30 * time.Millisecond, LossPercent: 1, RateBps: 50e6}
	resp, err = Control(sock, Request{Op: OpSet, Dir: BA, Impairment: &imp})
	if err != nil || resp.BA.Impairment != imp || resp.AB.Impairment != (Impairment{}) {
		t.Fatalf("set ba: %+v, %v", resp, err)
	}
	if ab, ba := l.Stats(); ab.Impairment != (Impairment{}) || ba.Impairment != imp {
		t.Errorf("after set ba: ab %v ba %v", ab.Impairment, ba.Impairment)
	}
	for _, bad := range []Request{
		{Op: OpSet, Dir: Both, Impairment: &Impairment{Delay: -time.Second}},
		{Op: OpSet, Dir: Both},
		{Op: "reboot"},
	} {
		if _, err := Control(sock, bad); err == nil {
			t.Errorf("request %+v accepted", bad)
		}
	}
	if ab, ba := l.Stats(); ab.Impairment != (Impairment{}) || ba.Impairment != imp {
		t.Errorf("refused requests changed settings: ab %v ba %v", ab.Impairment, ba.Impairment)
	}
}
