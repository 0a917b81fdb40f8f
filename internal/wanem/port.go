// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// vnetHdrLen is the size of struct virtio_net_hdr, which PACKET_VNET_HDR
// puts before every frame read from the socket and expects before every
// frame written to it.
//
// The header carries the checksum state of the frame across the emulator: a
// peer with TX checksum offload on (veth's default) hands over TCP and UDP
// frames whose checksum is only partial (CHECKSUM_PARTIAL). Read without the
// header and written back as plain bytes, such a frame reaches the far host
// with a bad checksum and is dropped. Written back with the header, it stays
// partial and our egress interface (TX checksum offload off) completes the
// checksum in software on the way out.
const vnetHdrLen = 10

// Socket buffer sizes: a receive buffer deep enough for a burst while the
// receiver is descheduled (2 CPUs here), and a send buffer that the veth
// peer's backlog can hold skbs against.
const (
	rcvBuf = 16 << 20
	sndBuf = 4 << 20
)

// port is one interface of the link: its AF_PACKET socket and the XDP
// program that keeps NAPI on.
type port struct {
	name    string
	ifindex int
	f       *os.File
	rc      syscall.RawConn
	xdp     link.Link
	prog    *ebpf.Program
	drops   atomic.Uint64 // sum of PACKET_STATISTICS drops read so far
}

// openPort prepares interface name and opens its socket, in the network
// namespace of the calling thread.
func openPort(name string, log *slog.Logger) (_ *port, err error) {
	itf, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	p := &port{name: name, ifindex: itf.Index}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if itf.Flags&net.FlagUp == 0 {
		log.Warn("wanem interface is down", "if", name)
	}
	if err := offloadsOff(name); err != nil {
		return nil, err
	}
	// A bridge port has no business speaking IPv6 (router solicitations,
	// MLD, DAD) into the link it emulates. Best effort: the interface may
	// not have IPv6 at all.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0); err != nil {
		log.Debug("wanem could not disable ipv6", "if", name, "err", err)
	}
	if err := p.attachXDP(log); err != nil {
		return nil, err
	}
	if err := p.openSocket(); err != nil {
		return nil, err
	}
	return p, nil
}

// attachXDP attaches a program that returns XDP_PASS, in native mode where
// the driver has it (veth does): a veth turns NAPI on only for a native
// program, and only with NAPI on does it accept frames that XDP on its peer
// redirects into it (veth_xdp_xmit fails with -ENXIO otherwise).
func (p *port) attachXDP(log *slog.Logger) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "wanem_pass",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("load xdp pass program: %w", err)
	}
	p.prog = prog
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: p.ifindex})
	if err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			// Another XDP program is attached: it keeps NAPI on as well.
			log.Warn("wanem keeps the xdp program already on the interface", "if", p.name)
			return nil
		}
		return fmt.Errorf("attach xdp to %s: %w", p.name, err)
	}
	p.xdp = l
	return nil
}

func (p *port) openSocket() error {
	// Protocol 0 receives nothing until bind names the interface, so no
	// frame of another interface slips in between socket and bind.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open packet socket for %s: %w", p.name, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	opts := []struct {
		level, opt, val int
		what            string
	}{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
		// Frames we send come back to our own socket as PACKET_OUTGOING;
		// they must not be bridged again.
		{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf, "SO_RCVBUFFORCE"},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndBuf, "SO_SNDBUFFORCE"},
		// The kernel's receive time, so that a receiver descheduled for a
		// while does not add its lateness to the delay.
		{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS"},
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
			return fmt.Errorf("set %s on packet socket for %s: %w", o.what, p.name, err)
		}
	}
	// Promiscuous, for NICs that filter by destination MAC (a veth does
	// not); the kernel drops the membership when the socket closes.
	mreq := unix.PacketMreq{Ifindex: int32(p.ifindex), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		return fmt.Errorf("set %s promiscuous: %w", p.name, err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: p.ifindex}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("bind packet socket to %s: %w", p.name, err)
	}
	// A non-blocking fd becomes pollable: reads park in the Go poller, and
	// Close wakes them.
	p.f = os.NewFile(uintptr(fd), "packet:"+p.name)
	rc, err := p.f.SyscallConn()
	if err != nil {
		p.f.Close()
		p.f = nil
		ok = true // closed with the file
		return fmt.Errorf("packet socket for %s: %w", p.name, err)
	}
	p.rc = rc
	ok = true
	return nil
}

// rxDrops returns how many frames the kernel dropped because the socket's
// receive buffer was full. PACKET_STATISTICS resets on every read, so the
// port adds the reads up.
func (p *port) rxDrops() uint64 {
	if p == nil || p.rc == nil {
		return 0
	}
	_ = p.rc.Control(func(fd uintptr) {
		if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			p.drops.Add(uint64(st.Drops))
		}
	})
	return p.drops.Load()
}

func (p *port) closeSocket() error {
	if p.f == nil {
		return nil
	}
	err := p.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

func (p *port) close() error {
	var errs []error
	errs = append(errs, p.closeSocket())
	if p.xdp != nil {
		if err := p.xdp.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach xdp from %s: %w", p.name, err))
		}
	}
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
	}
	return errors.Join(errs...)
}

// reader reads frames from a port with recvmsg, and the time the kernel
// took each in (SO_TIMESTAMPNS). Its read function is made once, so a read
// allocates nothing.
type reader struct {
	p   *port
	buf []byte
	oob []byte
	iov unix.Iovec
	msg unix.Msghdr
	n   int
	err error
	fn  func(fd uintptr) bool
}

func (p *port) newReader(size int) *reader {
	r := &reader{p: p, buf: make([]byte, size), oob: make([]byte, unix.CmsgSpace(64))}
	r.iov.Base = &r.buf[0]
	r.iov.SetLen(len(r.buf))
	r.msg.Iov = &r.iov
	r.msg.Iovlen = 1
	r.msg.Control = &r.oob[0]
	r.fn = func(fd uintptr) bool {
		r.msg.SetControllen(len(r.oob))
		n, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.msg)), 0)
		r.n, r.err = int(n), nil
		if errno != 0 {
			r.n, r.err = 0, errno
		}
		return r.err != unix.EAGAIN
	}
	return r
}

// pollSlice is the longest one wait of a reader in poll, in ms: how long
// a closed socket may go unnoticed.
const pollSlice = 50

// read returns the next frame, virtio-net header first, and the kernel's
// receive time in Unix nanoseconds (0 when it gave none); the slice is valid
// until the next read.
func (r *reader) read() ([]byte, int64, error) {
	for {
		// Waits in poll on the calling thread (a receiver's real-time
		// one), not in the Go netpoller; in slices of pollSlice, so a
		// closed socket ends the wait.
		var done bool
		if err := r.p.rc.Control(func(fd uintptr) {
			if done = r.fn(fd); !done {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				_, _ = unix.Poll(pfd, pollSlice)
			}
		}); err != nil {
			return nil, 0, err
		}
		if !done {
			continue
		}
		switch r.err {
		case nil:
			return r.buf[:r.n], r.stamp(), nil
		case unix.EINTR:
			continue
		}
		return nil, 0, fmt.Errorf("read from %s: %w", r.p.name, r.err)
	}
}

// stamp finds the SCM_TIMESTAMPNS message of the last read.
func (r *reader) stamp() int64 {
	oob := r.oob[:r.msg.Controllen]
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Len < unix.SizeofCmsghdr || int(h.Len) > len(oob) {
			return 0
		}
		data := oob[unix.CmsgLen(0):h.Len]
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			return (*unix.Timespec)(unsafe.Pointer(&data[0])).Nano()
		}
		oob = oob[min(unix.CmsgSpace(int(h.Len)-unix.CmsgLen(0)), len(oob)):]
	}
	return 0
}

// writer sends frames on a port, one writer per goroutine.
type writer struct {
	p   *port
	buf []byte
	err error
	fn  func(fd uintptr) bool
}

func (p *port) newWriter() *writer {
	w := &writer{p: p}
	w.fn = func(fd uintptr) bool {
		_, w.err = unix.Write(int(fd), w.buf)
		return w.err != unix.EAGAIN
	}
	return w
}

// write sends one frame, virtio-net header first; it waits while the
// socket's send buffer is full.
func (w *writer) write(frame []byte) error {
	w.buf = frame
	defer func() { w.buf = nil }()
	for {
		if err := w.p.rc.Write(w.fn); err != nil {
			return err
		}
		if w.err == unix.EINTR {
			continue
		}
		if w.err != nil {
			return fmt.Errorf("send on %s: %w", w.p.name, w.err)
		}
		return nil
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ifreqData is struct ifreq with the ifr_data member of the union.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd, data uint32
}

// offloadsOff is `ethtool -K name gro off gso off tso off tx off` through
// the legacy SIOCETHTOOL commands: the emulator must see (GRO) and send
// (GSO, TSO) frames no larger than the MTU, one per emulated packet, and
// complete partial checksums itself on the way out (tx).
func offloadsOff(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	for _, c := range []struct {
		cmd  uint32
		what string
	}{
		{unix.ETHTOOL_SGRO, "gro"},
		{unix.ETHTOOL_SGSO, "gso"},
		{unix.ETHTOOL_STSO, "tso"},
		{unix.ETHTOOL_STXCSUM, "tx"},
	} {
		ev := ethtoolValue{cmd: c.cmd}
		ifr := ifreqData{data: unsafe.Pointer(&ev)}
		copy(ifr.name[:unix.IFNAMSIZ-1], name)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
		runtime.KeepAlive(&ev)
		// EOPNOTSUPP: the device cannot turn it on in the first place.
		if errno != 0 && errno != unix.EOPNOTSUPP {
			return fmt.Errorf("ethtool -K %s %s off: %w", name, c.what, errno)
		}
	}
	return nil
}
