// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// GTPUPort is GTP-U's UDP port (TS 29.281 4.4.2).
const GTPUPort = 2152

// EndMarkers sends GTP-U End Markers (TS 29.281 7.3.2) from the N3
// address: what a UPF tells the gNB a downlink path is leaving, after
// the last packet it sent it, when the SMF switches the path (a
// handover) and asks for them (the SNDEM flag).
type EndMarkers struct {
	conn *net.UDPConn
	// Port is the peers' GTP-U port (GTPUPort; another in tests).
	Port uint16
	sent atomic.Uint64
}

// NewEndMarkers opens the socket End Markers leave by: from n3, port
// 2152 (bound even where the address is not the host's: XDP answers
// N3, the kernel only sends).
func NewEndMarkers(n3 netip.Addr) (*EndMarkers, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(n3, GTPUPort).String())
	if err != nil {
		// Another socket has the port: any port will do for a
		// datagram the gNB reads by its TEID.
		if pc, err = lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(n3, 0).String()); err != nil {
			return nil, fmt.Errorf("end markers: %w", err)
		}
	}
	return &EndMarkers{conn: pc.(*net.UDPConn), Port: GTPUPort}, nil
}

// Send sends an End Marker to TEID teid at peer.
func (e *EndMarkers) Send(peer netip.Addr, teid uint32) error {
	// Version 1, GTP, no optional octets; type 254; no payload.
	b := []byte{0x30, 254, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[4:], teid)
	if _, err := e.conn.WriteToUDPAddrPort(b, netip.AddrPortFrom(peer, e.Port)); err != nil {
		return fmt.Errorf("end marker to %s: %w", peer, err)
	}
	e.sent.Add(1)
	return nil
}

// Sent counts the End Markers sent.
func (e *EndMarkers) Sent() uint64 { return e.sent.Load() }

// Close closes the socket.
func (e *EndMarkers) Close() error { return e.conn.Close() }
