// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/rtloop"
)

// verdict is what the shaper decided for one frame.
type verdict uint8

const (
	pass verdict = iota
	dropLoss
	dropQueue
)

// shaper holds the impairment state of one direction. Times are nanoseconds
// on the link's clock. It is not safe for concurrent use.
type shaper struct {
	imp     Impairment
	rng     *rand.Rand
	txDone  int64 // when the rate queue finishes serializing what it holds
	lastDep int64 // departure of the previous frame that passed
}

func newShaper(seed uint64) *shaper {
	return &shaper{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// admit decides the fate of a frame of n bytes that arrived at now, and its
// departure time when it passes: loss first, then the rate queue, then delay
// and jitter, as netem orders them.
func (s *shaper) admit(now int64, n int) (dep int64, v verdict) {
	imp := &s.imp
	if imp.LossPercent > 0 && s.rng.Float64()*100 < imp.LossPercent {
		return 0, dropLoss
	}
	ready := now
	if imp.RateBps > 0 {
		// A frame starts to serialize when the one before it is done (or
		// now, on an idle link); what is still unserialized at now is the
		// queue's backlog, in bytes at the rate.
		start := max(now, s.txDone)
		ser := int64(float64(n) * 8e9 / float64(imp.RateBps))
		backlog := float64(start-now) * float64(imp.RateBps) / 8e9
		if backlog+float64(n) > float64(imp.queueLimit()) {
			return 0, dropQueue
		}
		s.txDone = start + ser
		ready = s.txDone
	}
	dep = ready + int64(imp.Delay)
	if imp.Jitter > 0 {
		dep += int64((s.rng.Float64()*2 - 1) * float64(imp.Jitter))
		// A frame cannot leave before it is serialized.
		dep = max(dep, ready)
	}
	// Keep the order: never depart before the previous frame.
	dep = max(dep, s.lastDep)
	s.lastDep = dep
	return dep, pass
}

// pending is a frame waiting for its departure.
type pending struct {
	buf *[]byte
	n   int
	dep int64
}

// fifo is a growable ring of pending frames.
type fifo struct {
	ring       []pending
	head, size int
}

func (f *fifo) len() int { return f.size }

func (f *fifo) push(p pending) {
	if f.size == len(f.ring) {
		n := max(2*len(f.ring), 64)
		r := make([]pending, n)
		for i := range f.size {
			r[i] = f.ring[(f.head+i)%len(f.ring)]
		}
		f.ring, f.head = r, 0
	}
	f.ring[(f.head+f.size)%len(f.ring)] = p
	f.size++
}

func (f *fifo) peek() *pending { return &f.ring[f.head] }

func (f *fifo) pop() pending {
	p := f.ring[f.head]
	f.ring[f.head] = pending{}
	f.head = (f.head + 1) % len(f.ring)
	f.size--
	return p
}

// direction is one direction of the link: its shaper, the frames waiting to
// depart and its counters.
type direction struct {
	mu      sync.Mutex
	sh      *shaper
	q       fifo
	sending int // frames the scheduler took from q and sends now
	// wake is an eventfd written when q becomes non-empty: the
	// scheduler blocks on it on its own thread, so the kernel wakes it
	// (a channel would wait for the Go scheduler's ordinary threads,
	// which a loaded machine runs late).
	wake int

	framesIn, bytesIn, framesOut, bytesOut atomic.Uint64
	dropLoss, dropQueue, dropLimit, txErr  atomic.Uint64
}

func newDirection(seed uint64) *direction {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		// Out of file descriptors at start: nothing to run with.
		panic(fmt.Sprintf("wanem: eventfd: %v", err))
	}
	return &direction{sh: newShaper(seed), wake: fd}
}

// signal wakes the scheduler.
func (d *direction) signal() {
	one := [8]byte{1}
	_, _ = unix.Write(d.wake, one[:]) // a full counter is still a wake-up
}

// waitSignal blocks this thread until signal, or for at most sleepChunk.
func (d *direction) waitSignal() {
	pfd := []unix.PollFd{{Fd: int32(d.wake), Events: unix.POLLIN}}
	_, _ = unix.Poll(pfd, int(sleepChunk/time.Millisecond))
	var b [8]byte
	_, _ = unix.Read(d.wake, b[:])
}

func (d *direction) set(imp Impairment) {
	d.mu.Lock()
	d.sh.imp = imp
	d.mu.Unlock()
}

func (d *direction) stats() DirStats {
	d.mu.Lock()
	imp, n := d.sh.imp, d.q.len()+d.sending
	d.mu.Unlock()
	return DirStats{
		Impairment: imp,
		FramesIn:   d.framesIn.Load(), BytesIn: d.bytesIn.Load(),
		FramesOut: d.framesOut.Load(), BytesOut: d.bytesOut.Load(),
		DroppedLoss: d.dropLoss.Load(), DroppedQueue: d.dropQueue.Load(),
		DroppedLimit: d.dropLimit.Load(), TxErrors: d.txErr.Load(),
		Pending: n,
	}
}

// receive reads frames from in until its socket closes and hands each to
// direction d, which sends it on out now or queues it for the scheduler.
func (l *Link) receive(ctx context.Context, in, out *port, d *direction) error {
	// On a thread of its own at SCHED_FIFO, blocking in the kernel
	// there: the link stands for a physical one, which the machine's
	// CPU load does not slow down (a receiver at the default policy,
	// woken through the Go scheduler, read frames tens of ms late under
	// stress-ng, and a gateway's path monitor saw that as loss).
	defer realtime(l.log, "receiver")()
	r := in.newReader(vnetHdrLen + 65536)
	w := out.newWriter()
	for {
		frame, stamp, err := r.read()
		if err != nil {
			if errors.Is(err, os.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := l.arrival(stamp)
		if len(frame) <= vnetHdrLen {
			continue
		}
		l.admit(now, frame, d, w)
	}
}

// maxStampAge bounds how far back a kernel receive time may reach: an older
// one (or one from the future) means the wall clock stepped.
const maxStampAge = int64(time.Second)

// arrival converts a kernel receive time (Unix nanoseconds, CLOCK_REALTIME)
// to the link's monotonic clock by its age; without a usable one the frame
// arrived now.
func (l *Link) arrival(stamp int64) int64 {
	t := time.Now()
	now := int64(t.Sub(l.epoch))
	if stamp == 0 {
		return now
	}
	if age := t.UnixNano() - stamp; age > 0 && age < maxStampAge {
		return now - age
	}
	return now
}

// admit runs one received frame (virtio-net header included) that arrived
// at now through d.
func (l *Link) admit(now int64, frame []byte, d *direction, w *writer) {
	n := len(frame) - vnetHdrLen
	d.framesIn.Add(1)
	d.bytesIn.Add(uint64(n))
	d.mu.Lock()
	if d.q.len()+d.sending >= MaxPending {
		// Before the shaper, so that the frame takes no place in the rate
		// queue's schedule.
		d.mu.Unlock()
		d.dropLimit.Add(1)
		return
	}
	dep, v := d.sh.admit(now, n)
	switch {
	case v == dropLoss:
		d.mu.Unlock()
		d.dropLoss.Add(1)
		return
	case v == dropQueue:
		d.mu.Unlock()
		d.dropQueue.Add(1)
		return
	case d.q.len() == 0 && d.sending == 0 && dep <= l.now():
		// Nothing waits before it: send from the receive buffer, without
		// a copy or a wake-up of the scheduler.
		d.mu.Unlock()
		l.send(w, frame, d)
		return
	}
	b := l.getBuf(len(frame))
	copy(*b, frame)
	wasEmpty := d.q.len() == 0
	d.q.push(pending{buf: b, n: len(frame), dep: dep})
	d.mu.Unlock()
	if wasEmpty {
		d.signal()
	}
}

func (l *Link) send(w *writer, frame []byte, d *direction) {
	if err := w.write(frame); err != nil {
		if !errors.Is(err, os.ErrClosed) {
			d.txErr.Add(1)
		}
		return
	}
	d.framesOut.Add(1)
	d.bytesOut.Add(uint64(len(frame) - vnetHdrLen))
}

// realtime makes the calling goroutine's thread a real-time one for
// good (rtloop.Protect: locked, SCHED_FIFO schedPriority, 1 ns of timer
// slack, a P of its own); without the privilege it stays on the default
// policy. Threads the runtime starts from it begin at the default policy
// unless the whole process is real-time (RealTimeProcess). It returns
// what gives the P back when the thread ends.
func realtime(log *slog.Logger, what string) (release func()) {
	release, err := rtloop.Protect(schedPriority)
	if err != nil {
		log.Debug("wanem "+what+" stays on the default policy", "err", err)
	}
	return release
}

// RealTimeProcess puts every thread of the calling process, and those it
// starts later, at SCHED_FIFO schedPriority (rtloop.ProtectProcess): for
// the emulator's own process (`edgeplane-dev wanem`), whose every thread
// serves the links it runs, never for a process that runs other work.
func RealTimeProcess() error {
	return rtloop.ProtectProcess(schedPriority)
}

// schedPriority is the SCHED_FIFO priority of the departure schedulers:
// low among real-time threads (kernel threads use 50 and up), above every
// ordinary one.
const schedPriority = 10

// sleepChunk bounds one sleep of the scheduler, so that it notices the end
// of the run even while a long delay is pending.
const sleepChunk = 5 * time.Millisecond

// schedule sends the frames of d on out at their departure times until ctx
// ends.
func (l *Link) schedule(ctx context.Context, out *port, d *direction) {
	// nanosleep on a thread of our own with 1 ns of timer slack wakes within
	// tens of µs; the Go timer would wake up to a millisecond late.
	//
	// The thread also asks for SCHED_FIFO, which keeps wake-ups on time
	// under CPU load (DESIGN.md: p99 88 µs against 4.4 ms for the default
	// policy); without the privilege it stays on the default policy. The
	// goroutine stays locked when it returns, so the runtime ends the
	// thread instead of handing its policy to other goroutines.
	defer realtime(l.log, "scheduler")()
	w := out.newWriter()
	batch := make([]pending, 0, 64)
	for {
		d.mu.Lock()
		if d.q.len() == 0 {
			d.mu.Unlock()
			d.waitSignal()
			if ctx.Err() != nil {
				return
			}
			continue
		}
		now := l.now()
		if wait := d.q.peek().dep - now; wait > 0 {
			d.mu.Unlock()
			// Frames that arrive meanwhile depart no earlier than this one,
			// so nothing needs to wake the sleep.
			ts := unix.NsecToTimespec(min(wait, int64(sleepChunk)))
			_ = unix.Nanosleep(&ts, nil) // EINTR just loops
			if ctx.Err() != nil {
				return
			}
			continue
		}
		for d.q.len() > 0 && d.q.peek().dep <= now && len(batch) < cap(batch) {
			batch = append(batch, d.q.pop())
		}
		d.sending = len(batch)
		d.mu.Unlock()
		for i, p := range batch {
			l.send(w, (*p.buf)[:p.n], d)
			l.putBuf(p.buf)
			batch[i] = pending{}
		}
		batch = batch[:0]
		d.mu.Lock()
		d.sending = 0
		d.mu.Unlock()
	}
}
