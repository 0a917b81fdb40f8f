// SPDX-License-Identifier: Apache-2.0

// Package wanem is a userspace WAN link emulator: it bridges two network
// interfaces at L2, frame by frame, over AF_PACKET sockets and applies delay,
// jitter, loss and a rate limit to each direction on its own. The lab needs
// it because this kernel has no netem, tbf or fq qdiscs.
//
// Impairments are applied in the order netem applies them: loss (independent
// Bernoulli per frame), then the rate queue (frames are serialized at the
// rate through a byte-bounded FIFO with tail drop), then delay plus jitter.
// Jitter is uniform in [delay-jitter, delay+jitter]. Frames never overtake
// each other within a direction: a frame's departure is never earlier than
// the previous frame's, so large jitter skews the distribution upward
// rather than reordering (netem reorders; TCP on a real WAN link rarely
// sees that, and tests would measure reordering instead of delay).
//
// Departures are timed by a goroutine per direction locked to its own OS
// thread, which sleeps with nanosleep and a 1 ns timer slack: Go timers
// wake with up to 1 ms of error on Linux (the netpoller waits in whole
// milliseconds), nanosleep here wakes about 30 µs late.
package wanem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Direction names one direction of the link, or both.
type Direction uint8

// Directions of a link between interface A and interface B.
const (
	AB   Direction = iota // frames received on A, sent on B
	BA                    // frames received on B, sent on A
	Both                  // AB and BA
)

// String returns "ab", "ba" or "both".
func (d Direction) String() string {
	switch d {
	case AB:
		return "ab"
	case BA:
		return "ba"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// ParseDirection parses "ab", "ba" or "both" (an empty string is both).
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "ab", "a2b", "a>b":
		return AB, nil
	case "ba", "b2a", "b>a":
		return BA, nil
	case "both", "":
		return Both, nil
	}
	return 0, fmt.Errorf("direction %q: want ab, ba or both", s)
}

// MarshalText implements encoding.TextMarshaler.
func (d Direction) MarshalText() ([]byte, error) {
	if d > Both {
		return nil, fmt.Errorf("invalid direction %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Direction) UnmarshalText(b []byte) error {
	v, err := ParseDirection(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Impairment is what one direction does to its frames. The zero value passes
// frames through untouched.
type Impairment struct {
	Delay  time.Duration // fixed one-way delay
	Jitter time.Duration // departure varies uniformly within ±Jitter around Delay
	// LossPercent drops each frame independently with this probability
	// (0–100).
	LossPercent float64
	// RateBps limits the direction to this many bits per second of
	// Ethernet frames (header and payload, no preamble or FCS), 0 = no limit.
	RateBps uint64
	// QueueLimit bounds the rate queue in bytes; frames that do not fit are
	// tail-dropped. 0 = what 50 ms at RateBps holds, at least 64 KiB.
	QueueLimit uint64
}

// Validate reports settings out of range.
func (i Impairment) Validate() error {
	var errs []error
	if i.Delay < 0 {
		errs = append(errs, fmt.Errorf("delay %v: must not be negative", i.Delay))
	}
	if i.Jitter < 0 {
		errs = append(errs, fmt.Errorf("jitter %v: must not be negative", i.Jitter))
	}
	if i.Delay > maxDelay || i.Jitter > maxDelay {
		errs = append(errs, fmt.Errorf("delay and jitter must be at most %v", maxDelay))
	}
	if math.IsNaN(i.LossPercent) || i.LossPercent < 0 || i.LossPercent > 100 {
		errs = append(errs, fmt.Errorf("loss %v%%: must be within 0 and 100", i.LossPercent))
	}
	return errors.Join(errs...)
}

// maxDelay bounds delay and jitter so that a frame cannot be held for hours
// by a typo (and nanosecond arithmetic cannot overflow).
const maxDelay = time.Minute

// clamp forces the settings into range, for Set, which has no error to
// return.
func (i Impairment) clamp() Impairment {
	i.Delay = min(max(i.Delay, 0), maxDelay)
	i.Jitter = min(max(i.Jitter, 0), maxDelay)
	if math.IsNaN(i.LossPercent) {
		i.LossPercent = 0
	}
	i.LossPercent = min(max(i.LossPercent, 0), 100)
	return i
}

// queueLimit returns the effective rate queue limit in bytes.
func (i Impairment) queueLimit() uint64 {
	if i.QueueLimit > 0 {
		return i.QueueLimit
	}
	return max(i.RateBps/8/20, 64<<10) // 50 ms at the rate
}

// String formats the settings the way the flags of `edgeplane-dev wanem` take
// them.
func (i Impairment) String() string {
	s := fmt.Sprintf("delay %v jitter %v loss %g%% rate %s", i.Delay, i.Jitter, i.LossPercent, FormatRate(i.RateBps))
	if i.RateBps > 0 {
		s += fmt.Sprintf(" queue %d bytes", i.queueLimit())
	}
	return s
}

type impairmentJSON struct {
	Delay       string  `json:"delay"`
	Jitter      string  `json:"jitter"`
	LossPercent float64 `json:"loss_percent"`
	RateBps     uint64  `json:"rate_bps"`
	QueueLimit  uint64  `json:"queue_limit_bytes,omitempty"`
}

// MarshalJSON writes durations as Go duration strings ("20ms").
func (i Impairment) MarshalJSON() ([]byte, error) {
	return json.Marshal(impairmentJSON{
		Delay: i.Delay.String(), Jitter: i.Jitter.String(),
		LossPercent: i.LossPercent, RateBps: i.RateBps, QueueLimit: i.QueueLimit,
	})
}

// UnmarshalJSON reads what MarshalJSON writes; a missing duration is zero.
func (i *Impairment) UnmarshalJSON(b []byte) error {
	var j impairmentJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var v Impairment
	var err error
	if j.Delay != "" {
		if v.Delay, err = time.ParseDuration(j.Delay); err != nil {
			return fmt.Errorf("delay: %w", err)
		}
	}
	if j.Jitter != "" {
		if v.Jitter, err = time.ParseDuration(j.Jitter); err != nil {
			return fmt.Errorf("jitter: %w", err)
		}
	}
	v.LossPercent, v.RateBps, v.QueueLimit = j.LossPercent, j.RateBps, j.QueueLimit
	*i = v
	return nil
}

// DirStats are the settings and counters of one direction.
type DirStats struct {
	Impairment Impairment `json:"impairment"`
	FramesIn   uint64     `json:"frames_in"` // received on the ingress interface
	BytesIn    uint64     `json:"bytes_in"`
	FramesOut  uint64     `json:"frames_out"` // sent on the egress interface
	BytesOut   uint64     `json:"bytes_out"`
	// DroppedLoss counts frames dropped by the loss setting, DroppedQueue
	// frames tail-dropped by the rate queue, DroppedLimit frames dropped
	// because MaxPending frames were already waiting, TxErrors frames
	// the egress socket refused, RxOverruns frames the kernel dropped
	// before the emulator read them (its socket buffer was full: the
	// emulator fell behind, these are not part of the emulation).
	DroppedLoss  uint64 `json:"dropped_loss"`
	DroppedQueue uint64 `json:"dropped_queue"`
	DroppedLimit uint64 `json:"dropped_limit"`
	TxErrors     uint64 `json:"tx_errors"`
	RxOverruns   uint64 `json:"rx_overruns"`
	// Pending is the number of frames waiting for their departure now.
	Pending int `json:"pending"`
}

// MaxPending bounds the frames one direction holds (in its rate queue and
// delay line together): 1 Gbit/s of full-size frames for 100 ms is about
// 8,300 frames.
const MaxPending = 32768

// Link is an emulated link between two interfaces of one network namespace.
type Link struct {
	log    *slog.Logger
	epoch  time.Time
	ports  [2]*port // A, B
	dirs   [2]*direction
	bufs   sync.Pool // *[]byte of frameBufSize
	closed sync.Once
	runs   atomic.Bool
}

// frameBufSize holds a virtio-net header and a frame of MTU 1500 with VLAN
// tags; larger frames get buffers of their own.
const frameBufSize = 2048

// New opens the link between interfaces ifA and ifB. It must run in the
// network namespace of the interfaces (for a test: on an OS thread locked
// into it); the sockets and XDP links it makes stay bound to that namespace,
// so Run and everything else may be called from any goroutine afterwards.
//
// On each interface New turns off GRO, GSO, TSO and TX checksum offload,
// disables IPv6 (so the namespace's own kernel stays silent on the wire),
// and attaches an XDP program that passes every frame: a veth only takes
// frames that an XDP program on the other side redirects into it when its
// peer (ours) has NAPI on, and with GRO off only an XDP program turns it on.
func New(ifA, ifB string, log *slog.Logger) (*Link, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ifA == ifB {
		return nil, fmt.Errorf("interfaces a and b are both %q", ifA)
	}
	l := newLink(log)
	for i, name := range []string{ifA, ifB} {
		p, err := openPort(name, log)
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		l.ports[i] = p
	}
	return l, nil
}

func newLink(log *slog.Logger) *Link {
	l := &Link{log: log, epoch: time.Now()}
	l.bufs.New = func() any { b := make([]byte, frameBufSize); return &b }
	for i := range l.dirs {
		l.dirs[i] = newDirection(uint64(time.Now().UnixNano()) + uint64(i))
	}
	return l
}

// now is the emulator's clock: nanoseconds on the monotonic clock.
func (l *Link) now() int64 { return int64(time.Since(l.epoch)) }

// Interfaces returns the names of interface A and interface B.
func (l *Link) Interfaces() (a, b string) {
	if l.ports[0] == nil || l.ports[1] == nil {
		return "", ""
	}
	return l.ports[0].name, l.ports[1].name
}

// Set changes the impairment of a direction (or both) while the link runs.
// Frames already waiting keep their departure times. Values out of range are
// clamped; Impairment.Validate tells a caller about them first.
func (l *Link) Set(dir Direction, imp Impairment) {
	imp = imp.clamp()
	for i, d := range l.dirs {
		if dir == Both || int(dir) == i {
			d.set(imp)
		}
	}
	l.log.Info("wanem settings", "dir", dir.String(), "impairment", imp.String())
}

// Stats returns the settings and counters of both directions.
func (l *Link) Stats() (ab, ba DirStats) {
	ab, ba = l.dirs[AB].stats(), l.dirs[BA].stats()
	ab.RxOverruns, ba.RxOverruns = l.ports[0].rxDrops(), l.ports[1].rxDrops()
	return ab, ba
}

// Run bridges frames until ctx ends, then closes the link (detaching its
// XDP programs). It returns nil when ctx ended it.
func (l *Link) Run(ctx context.Context) error {
	if l.ports[0] == nil || l.ports[1] == nil {
		return errors.New("link has no interfaces")
	}
	if l.runs.Swap(true) {
		return errors.New("link already runs")
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for i, d := range l.dirs {
		in, out := l.ports[i], l.ports[1-i]
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := l.receive(ctx, in, out, d); err != nil {
				errc <- err
				cancel()
			}
		}()
		go func() {
			defer wg.Done()
			l.schedule(ctx, out, d)
		}()
	}
	l.log.Info("wanem running", "a", l.ports[0].name, "b", l.ports[1].name)
	<-ctx.Done()
	// The receivers see their sockets closed within pollSlice; the
	// sockets' drop counts go with them, so read those first.
	for _, p := range l.ports {
		p.rxDrops()
		_ = p.closeSocket()
	}
	wg.Wait()
	ab, ba := l.Stats()
	l.log.Info("wanem stopped",
		"ab_in", ab.FramesIn, "ab_out", ab.FramesOut, "ab_lost", ab.DroppedLoss, "ab_queue_drops", ab.DroppedQueue, "ab_overruns", ab.RxOverruns,
		"ba_in", ba.FramesIn, "ba_out", ba.FramesOut, "ba_lost", ba.DroppedLoss, "ba_queue_drops", ba.DroppedQueue, "ba_overruns", ba.RxOverruns)
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Close releases the sockets and detaches the XDP programs. Run calls it on
// the way out; call it when New succeeded but Run is never called.
func (l *Link) Close() error {
	var errs []error
	l.closed.Do(func() {
		for _, p := range l.ports {
			if p != nil {
				errs = append(errs, p.close())
			}
		}
		for _, d := range l.dirs {
			if d != nil {
				_ = unix.Close(d.wake)
			}
		}
	})
	return errors.Join(errs...)
}

func (l *Link) getBuf(n int) *[]byte {
	if n > frameBufSize {
		b := make([]byte, n)
		return &b
	}
	return l.bufs.Get().(*[]byte)
}

func (l *Link) putBuf(b *[]byte) {
	if cap(*b) == frameBufSize {
		*b = (*b)[:frameBufSize]
		l.bufs.Put(b)
	}
}
