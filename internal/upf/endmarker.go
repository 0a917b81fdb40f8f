// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// GTPUPort is GTP-U's UDP port (TS 29.281 4.4.2).
const GTPUPort = 2152

// EndMarkers sends GTP-U End Markers (TS 29.281 7.3.2), and the other
// messages the agent sends (Echo Requests to tracked peers), from the N3
// address: what a UPF tells the gNB a downlink path is leaving, after
// the last packet it sent it, when the SMF switches the path (a
// handover) and asks for them (the SNDEM flag).
type EndMarkers struct {
	conn, conn6 *net.UDPConn // from N3's IPv4, IPv6 address (nil: none)
	// Port is the peers' GTP-U port (GTPUPort; another in tests).
	Port uint16
	sent atomic.Uint64
}

// NewEndMarkers opens the sockets End Markers leave by: from each N3
// address (an IPv4 and an IPv6 one, either may be unset), port 2152
// (bound even where the address is not the host's: XDP answers N3, the
// kernel only sends).
func NewEndMarkers(n3 ...netip.Addr) (*EndMarkers, error) {
	e := &EndMarkers{Port: GTPUPort}
	for _, a := range n3 {
		if !a.IsValid() {
			continue
		}
		c, err := endMarkerConn(a)
		if err != nil {
			e.Close()
			return nil, err
		}
		if a.Is4() {
			e.conn = c
		} else {
			e.conn6 = c
		}
	}
	return e, nil
}

// endMarkerConn opens a UDP socket at a, port 2152 or, when another
// socket has it, any (a gNB reads the datagram by its TEID).
func endMarkerConn(a netip.Addr) (*net.UDPConn, error) {
	network, level, opt := "udp4", unix.SOL_IP, unix.IP_FREEBIND
	if !a.Is4() {
		network, level, opt = "udp6", unix.SOL_IPV6, unix.IPV6_FREEBIND
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), level, opt, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(a, GTPUPort).String())
	if err != nil {
		if pc, err = lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(a, 0).String()); err != nil {
			return nil, fmt.Errorf("end markers from %s: %w", a, err)
		}
	}
	return pc.(*net.UDPConn), nil
}

// Send sends an End Marker to TEID teid at peer.
func (e *EndMarkers) Send(peer netip.Addr, teid uint32) error {
	// Version 1, GTP, no optional octets; type 254; no payload.
	b := []byte{0x30, 254, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[4:], teid)
	if err := e.Write(peer, b); err != nil {
		return fmt.Errorf("end marker: %w", err)
	}
	e.sent.Add(1)
	return nil
}

// Write sends GTP-U message msg to peer's GTP-U port from N3 (the
// address of peer's family).
func (e *EndMarkers) Write(peer netip.Addr, msg []byte) error {
	peer = peer.Unmap()
	c := e.conn
	if !peer.Is4() {
		c = e.conn6
	}
	if c == nil {
		return fmt.Errorf("to %s: no N3 address of its family", peer)
	}
	if _, err := c.WriteToUDPAddrPort(msg, netip.AddrPortFrom(peer, e.Port)); err != nil {
		return fmt.Errorf("to %s: %w", peer, err)
	}
	return nil
}

// Sent counts the End Markers sent.
func (e *EndMarkers) Sent() uint64 { return e.sent.Load() }

// Close closes the sockets.
func (e *EndMarkers) Close() error {
	var err error
	for _, c := range []*net.UDPConn{e.conn, e.conn6} {
		if c != nil {
			err = errors.Join(err, c.Close())
		}
	}
	return err
}
