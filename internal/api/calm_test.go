// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/net/http2"
)

// TestCalmConnSeesGoAway writes a server's frames through calmConn in
// pieces cut at every byte: it sees the GOAWAY ENHANCE_YOUR_CALM, once
// and where it ends, and no other frame (a graceful GOAWAY, a PING or
// SETTINGS carrying the same bytes) for one.
func TestCalmConnSeesGoAway(t *testing.T) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0xb}))
	must(fr.WritePing(true, [8]byte{0, 0, 0, 0, 0, 0, 0, 0xb}))
	must(fr.WriteGoAway(1, http2.ErrCodeNo, []byte{0, 0, 0, 0xb}))
	must(fr.WriteData(1, false, []byte{0, 0, 0, 0, 0, 0, 0, 0xb}))
	must(fr.WriteData(1, false, nil))
	before := b.Len()
	must(fr.WriteGoAway(3, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings")))
	calmEnds := before + 9 + 8 // header, last stream id, code
	must(fr.WritePing(false, [8]byte{}))
	frames := b.Bytes()
	for cut := 1; cut < len(frames); cut++ {
		c := &calmConn{}
		var at []int
		for off := 0; off < len(frames); off += cut {
			end := min(off+cut, len(frames))
			if c.sawCalm(frames[off:end]) {
				at = append(at, end)
			}
		}
		if len(at) != 1 || at[0] < calmEnds || at[0]-cut >= calmEnds {
			t.Fatalf("writes of %d bytes: GOAWAY ENHANCE_YOUR_CALM seen at %v, want once, in the write that holds byte %d", cut, at, calmEnds)
		}
	}
	// And a calm connection reads no more.
	srv, cli := net.Pipe()
	defer cli.Close()
	called := 0
	c := &calmConn{Conn: srv, onCalm: func() { called++ }}
	go func() { _, _ = cli.Read(make([]byte, len(frames))) }()
	if _, err := c.Write(frames[before:calmEnds]); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 16)); n != 0 || err == nil || called != 1 {
		t.Fatalf("read after the GOAWAY: %d, %v (onCalm called %d times), want EOF", n, err, called)
	}
}
