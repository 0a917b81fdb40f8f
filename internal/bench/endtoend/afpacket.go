// SPDX-License-Identifier: Apache-2.0

package endtoend

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The AF_PACKET TX ring of the ordinary sender: TPACKET_V2 frames of
// afpFrameSize bytes, afpFrames of them, handed to the kernel
// afpBatch at a time with one send(2).
const (
	afpFrameSize = 128
	afpFrames    = 4096
	afpBatch     = 256
	// afpDataOff is where a TX frame's packet starts: TPACKET2_HDRLEN -
	// sizeof(struct sockaddr_ll), the header aligned to 16 bytes
	// (Documentation/networking/packet_mmap.rst).
	afpDataOff = (unix.SizeofTpacket2Hdr + 15) &^ 15
)

// afpSender sends one frame over and over through a PACKET_MMAP TX ring
// with the qdisc bypassed (PACKET_QDISC_BYPASS): the fastest ordinary
// sender this kernel has without pktgen.
type afpSender struct {
	fd   int
	ring []byte
	next int
}

// newAFPSender opens the ring on ifindex in the calling thread's network
// namespace, every slot holding frame.
func newAFPSender(ifindex int, frame []byte) (*afpSender, error) {
	if len(frame) > afpFrameSize-afpDataOff {
		return nil, fmt.Errorf("frame of %d bytes does not fit a %d-byte ring slot", len(frame), afpFrameSize)
	}
	// Protocol 0: the socket receives nothing, so it costs nothing on the
	// receive path.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("af_packet socket: %w", err)
	}
	s := &afpSender{fd: fd}
	req := unix.TpacketReq{Block_size: 4096, Block_nr: afpFrames * afpFrameSize / 4096, Frame_size: afpFrameSize, Frame_nr: afpFrames}
	steps := []struct {
		what string
		fn   func() error
	}{
		{"packet version", func() error { return unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2) }},
		{"qdisc bypass", func() error { return unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1) }},
		{"tx ring", func() error { return unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &req) }},
		{"bind", func() error { return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}) }},
		{"mmap", func() (err error) {
			s.ring, err = unix.Mmap(fd, 0, afpFrames*afpFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			return err
		}},
	}
	for _, st := range steps {
		if err := st.fn(); err != nil {
			s.Close()
			return nil, fmt.Errorf("af_packet %s: %w", st.what, err)
		}
	}
	for i := 0; i < afpFrames; i++ {
		copy(s.ring[i*afpFrameSize+afpDataOff:], frame)
		s.hdr(i).Len = uint32(len(frame))
	}
	return s, nil
}

func (s *afpSender) hdr(i int) *unix.Tpacket2Hdr {
	return (*unix.Tpacket2Hdr)(unsafe.Pointer(&s.ring[i*afpFrameSize]))
}

// status is the slot's tp_status, shared with the kernel.
func (s *afpSender) status(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&s.ring[i*afpFrameSize]))
}

// send hands the kernel every slot marked for sending and waits until it
// has taken them (a blocking send without MSG_DONTWAIT). A frame the
// device dropped comes back marked for sending and goes out again on the
// next call (tpacket_snd), so ENOBUFS only means "call again".
func (s *afpSender) send() error {
	_, err := unix.SendmsgN(s.fd, nil, nil, nil, 0)
	if err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("af_packet send: %w", err)
	}
	return nil
}

// run sends for d and returns the number of frames handed to the kernel.
func (s *afpSender) run(d time.Duration) (uint64, error) {
	var sent uint64
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		n := 0
		for n < afpBatch {
			st := s.status(s.next)
			v := atomic.LoadUint32(st)
			if v == unix.TP_STATUS_WRONG_FORMAT {
				return sent, errors.New("af_packet: kernel rejected a ring frame (wrong format)")
			}
			if v != unix.TP_STATUS_AVAILABLE {
				break // still queued from the last call
			}
			atomic.StoreUint32(st, unix.TP_STATUS_SEND_REQUEST)
			s.next = (s.next + 1) % afpFrames
			n++
		}
		sent += uint64(n)
		if err := s.send(); err != nil {
			return sent, err
		}
	}
	// Drain: every slot back with the application.
	for tries := 0; ; tries++ {
		busy := false
		for i := 0; i < afpFrames; i++ {
			if atomic.LoadUint32(s.status(i)) != unix.TP_STATUS_AVAILABLE {
				busy = true
				break
			}
		}
		if !busy {
			return sent, nil
		}
		if tries > 1000 {
			return sent, errors.New("af_packet: ring did not drain")
		}
		if err := s.send(); err != nil {
			return sent, err
		}
		time.Sleep(time.Millisecond)
	}
}

// Close unmaps the ring and closes the socket.
func (s *afpSender) Close() error {
	var err error
	if s.ring != nil {
		err = unix.Munmap(s.ring)
		s.ring = nil
	}
	return errors.Join(err, unix.Close(s.fd))
}
