// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// HTTP/2 (RFC 9113): every frame starts with a 9-byte header (24-bit
// length, type, flags, stream id); a GOAWAY's payload is the last stream
// id and then the error code.
const (
	h2HeaderLen        = 9
	h2GoAway           = 0x7
	h2EnhanceYourCalm  = 0xb
	h2GoAwayCodeOffset = 4
)

// calmCreds wraps the gRPC server's transport credentials (TLS, or none)
// so that each connection, once handshaken, is a calmConn: the frames it
// sees are HTTP/2's, in the clear.
type calmCreds struct {
	credentials.TransportCredentials
	// onCalm is called (with the connection as accepted) when the
	// server sends a connection GOAWAY ENHANCE_YOUR_CALM.
	onCalm func(raw net.Conn)
}

func (c calmCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	return &calmConn{Conn: conn, onCalm: func() { c.onCalm(raw) }}, info, nil
}

func (c calmCreds) Clone() credentials.TransportCredentials {
	return calmCreds{TransportCredentials: c.TransportCredentials.Clone(), onCalm: c.onCalm}
}

// calmConn is a server's HTTP/2 connection that is no longer read once
// the server has sent its peer GOAWAY ENHANCE_YOUR_CALM (grpc-go sends
// it to a client that pings more often than the keepalive policy
// allows). grpc-go then waits up to a second before it closes the
// connection, reading and parsing meanwhile whatever the peer sends: 16
// connections flooding PINGs kept the agent's readers busy enough that
// other clients' valid calls took up to 9x their idle p99 and half as
// many were answered (TestAPIPingFlood). calmConn follows the frames the
// server writes to see the GOAWAY; after it, a read ends the connection
// at once (EOF), so grpc-go closes it without reading more.
type calmConn struct {
	net.Conn
	onCalm func()
	calm   atomic.Bool

	// The frame being written (Writes come from one goroutine, gRPC's
	// loopy writer): header bytes seen, payload bytes left, its type,
	// how far into its payload, a GOAWAY's error code.
	hdr  [h2HeaderLen]byte
	hdrN int
	left uint32
	typ  byte
	off  uint32
	code [4]byte
}

func (c *calmConn) Read(p []byte) (int, error) {
	if c.calm.Load() {
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

func (c *calmConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if !c.calm.Load() && c.sawCalm(p[:n]) && c.calm.CompareAndSwap(false, true) {
		// A read blocked in the kernel returns now.
		_ = c.Conn.SetReadDeadline(time.Now())
		c.onCalm()
	}
	return n, err
}

// sawCalm follows the frames in p, the next bytes the server wrote, and
// reports whether a GOAWAY ENHANCE_YOUR_CALM ended in them.
func (c *calmConn) sawCalm(p []byte) bool {
	calm := false
	for len(p) > 0 {
		if c.left == 0 {
			n := copy(c.hdr[c.hdrN:], p)
			c.hdrN += n
			p = p[n:]
			if c.hdrN < h2HeaderLen {
				break
			}
			c.hdrN = 0
			c.left = uint32(c.hdr[0])<<16 | uint32(c.hdr[1])<<8 | uint32(c.hdr[2])
			c.typ, c.off = c.hdr[3], 0
			continue
		}
		n := min(uint32(len(p)), c.left)
		if c.typ == h2GoAway {
			for i := uint32(0); i < n; i++ {
				if o := c.off + i; o >= h2GoAwayCodeOffset && o < h2GoAwayCodeOffset+4 {
					c.code[o-h2GoAwayCodeOffset] = p[i]
				}
			}
			end := uint32(h2GoAwayCodeOffset + 4)
			if c.off < end && c.off+n >= end && binary.BigEndian.Uint32(c.code[:]) == h2EnhanceYourCalm {
				calm = true
			}
		}
		c.off += n
		c.left -= n
		p = p[n:]
	}
	return calm
}
