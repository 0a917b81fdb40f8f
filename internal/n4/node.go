// SPDX-License-Identifier: Apache-2.0

// Package n4 is a user plane function's end of N4: a PFCP node (3GPP TS
// 29.244) on UDP 8805 that answers heartbeats and keeps the
// associations control plane functions (SMFs) set up with it, their
// node IDs, recovery time stamps and features.
//
// Every request is answered by the rules of the spec's error handling
// (clause 7.6): a message of another PFCP version gets a Version Not
// Supported Response; a request with a mandatory IE missing is rejected
// with "Mandatory IE missing" naming the IE (Offending IE), one whose
// IE does not decode with "Mandatory IE incorrect", or, when its IEs do
// not even delimit, "Invalid Length"; a session request from a node with
// no association with "No established PFCP Association". What cannot be
// answered (too short for a header, a length that disagrees with the
// datagram, an unknown message type, a response to nothing asked) is
// discarded. Each is counted by what happened (Stats), and a refused
// request changes nothing.
//
// An associated SMF's sessions are kept by the node and carried by its
// UserPlane (the dataplane): establishment, modification and deletion
// each change one session whole or refuse and change nothing. A node
// with no UserPlane refuses establishments "Service not supported".
package n4

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
	"golang.org/x/sys/unix"
)

// Port is PFCP's UDP port.
const Port = 8805

// Options are a node's identity and where it listens.
type Options struct {
	// Addr is the UDP address listened on (default ":8805").
	Addr string
	// NodeID is the node's ID as the SMF sees it: an IPv4 or IPv6
	// address, or an FQDN.
	NodeID string
	// Recovery is when the user plane function started, as its peers
	// must see it: a restarted agent that kept its sessions gives the
	// first start's, so no SMF takes it for a restart that lost them.
	Recovery time.Time
	// Log receives what happened to each association (nil: discarded).
	Log *slog.Logger
	// Peers are the associations a node kept before a restart: they
	// stand as if set up again (the recovery time stamp they saw is
	// Recovery, unchanged).
	Peers []Peer
	// MaxPeers bounds the associations (default DefaultMaxPeers): N4
	// is unauthenticated, and a setup from one more node is refused
	// "No resources available" rather than growing what every setup
	// writes back (Changed).
	MaxPeers int
	// HeartbeatEvery is how often the node asks each associated peer
	// (default DefaultHeartbeatEvery), HeartbeatTries how many requests
	// in a row it may leave unanswered before it is down (default
	// DefaultHeartbeatTries).
	HeartbeatEvery time.Duration
	HeartbeatTries int
	// Changed, when set, is called with the associations after each
	// change, outside the node's lock and in the order of the changes:
	// what a restart restores.
	Changed func([]Peer)
	// UserPlane carries the sessions (nil: none are accepted), N3 and
	// N3v6 are the GTP-U addresses (IPv4, IPv6; either may be unset)
	// F-TEIDs the node chooses are at, Sessions those a restart kept
	// (carried already).
	UserPlane UserPlane
	N3        netip.Addr
	N3v6      netip.Addr
	Sessions  []*Session
	// EndMarker, when set, sends a GTP-U End Marker to TEID teid at
	// peer: a modification with the SNDEM flag that moves a downlink
	// FAR's outer header elsewhere (a handover) sends one along the old
	// path after the flip.
	EndMarker func(peer netip.Addr, teid uint32) error
	// UsageEvery is how often the sessions whose URRs report more
	// than at their end are read (default DefaultUsageEvery).
	UsageEvery time.Duration
}

// DefaultMaxPeers is Options.MaxPeers' default: a UPF serves the SMFs
// of one core, a handful.
const DefaultMaxPeers = 64

// UPFeatures are the UP function features the node advertises (TS
// 29.244 8.2.25, from octet 5): FTUP (it allocates F-TEIDs on CHOOSE),
// octet 5 bit 5; ATSSS-LL (it steers multi-access sessions' downlink
// by their MARs), octet 9 bit 1. Written as they are (go-pfcp's
// constructor keeps 4 octets).
var UPFeatures = []uint8{0x10, 0, 0, 0, 0x01}

// Peer is an association with a control plane function.
type Peer struct {
	NodeID string `json:"node_id"`
	// Addr is where its last association request came from (and where
	// the node's own requests to it go).
	Addr netip.AddrPort `json:"addr"`
	// Recovery is the peer's recovery time stamp, Since when the
	// association was set up.
	Recovery time.Time `json:"recovery"`
	Since    time.Time `json:"since"`
}

// Node is a PFCP node listening on one UDP socket.
type Node struct {
	opt   Options
	conn  *net.UDPConn
	mu    sync.Mutex
	peers map[string]*Peer     // by node ID
	live  map[string]*liveness // by node ID
	seq   uint32               // of the node's own requests
	stats sync.Map             // string -> *atomic.Uint64
	// sessions by UP SEID; teids says which session each local TEID
	// is.
	sessions map[uint64]*Session
	teids    map[uint32]uint64
	// reports are the Session Report Requests sent, by sequence
	// number: the session's UP SEID.
	reports map[uint32]uint64
	// warned is when each peer's restart was last logged.
	warned map[string]time.Time
	// work serializes what changes sessions: requests, and the
	// metering loop's reports and spent quotas. meter holds each
	// session's measurements by URR ID (n.work).
	work  sync.Mutex
	meter map[uint64]map[uint32]*meter
}

// Listen opens the node's socket.
func Listen(o Options) (*Node, error) {
	if o.NodeID == "" {
		return nil, errors.New("n4: a node needs a node ID")
	}
	if o.Addr == "" {
		o.Addr = fmt.Sprintf(":%d", Port)
	}
	if o.Recovery.IsZero() {
		o.Recovery = time.Now()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if o.HeartbeatTries <= 0 {
		o.HeartbeatTries = DefaultHeartbeatTries
	}
	if o.UsageEvery <= 0 {
		o.UsageEvery = DefaultUsageEvery
	}
	ua, err := net.ResolveUDPAddr("udp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("n4: listen address %q: %w", o.Addr, err)
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("n4: %w", err)
	}
	// SMFs send requests in bursts (a core's sessions re-established
	// after a restart, many SMFs at once): the default receive buffer
	// (~200 KiB, a few hundred datagrams by their truesize) drops them.
	// Forced past net.core.rmem_max where the agent may (CAP_NET_ADMIN).
	setReadBuffer(c, rcvBuf)
	n := &Node{opt: o, conn: c, peers: map[string]*Peer{}, live: map[string]*liveness{},
		sessions: map[uint64]*Session{}, teids: map[uint32]uint64{}, reports: map[uint32]uint64{}, warned: map[string]time.Time{},
		meter: map[uint64]map[uint32]*meter{}}
	for _, p := range o.Peers {
		n.peers[p.NodeID] = &p
	}
	for _, s := range o.Sessions {
		n.keep(s)
	}
	return n, nil
}

// Addr is the address the node listens on.
func (n *Node) Addr() netip.AddrPort {
	return n.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Close closes the node's socket; Serve returns.
func (n *Node) Close() error { return n.conn.Close() }

// Serve answers datagrams, and sends the node's heartbeats to its peers,
// until ctx is done or the node is closed.
func (n *Node) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { n.conn.Close() })
	defer stop()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go n.heartbeats(hctx)
	go n.metering(hctx)
	buf := make([]byte, 65536)
	var answers []answer
	for {
		l, from, err := n.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("n4: read: %w", err)
		}
		// What else has arrived is handled with it, and the user
		// plane's journal synced once for all of them before any answer
		// leaves: requests in flight at once share a sync.
		answers = answers[:0]
		for i := 0; ; i++ {
			if out := n.Handle(buf[:l], from); out != nil {
				answers = append(answers, answer{out, from})
			}
			if i == batchMax-1 {
				break
			}
			if l, from, err = n.readNow(buf); err != nil {
				break
			}
		}
		if s, ok := n.opt.UserPlane.(Syncer); ok && len(answers) > 0 {
			if err := s.Sync(); err != nil {
				// Not durable: no answer says it is.
				n.opt.Log.Error("n4: the sessions' journal did not sync: answers withheld", "err", err, "answers", len(answers))
				n.count("sync_failed")
				continue
			}
		}
		for _, a := range answers {
			if _, err := n.conn.WriteToUDPAddrPort(a.b, a.to); err != nil {
				n.count("send_failed")
			}
		}
	}
}

// rcvBuf is the node's socket receive buffer.
const rcvBuf = 8 << 20

// setReadBuffer sizes c's receive buffer to n bytes: SO_RCVBUFFORCE,
// else as far as net.core.rmem_max allows.
func setReadBuffer(c *net.UDPConn, n int) {
	if rc, err := c.SyscallConn(); err == nil {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
		}); err == nil && serr == nil {
			return
		}
	}
	_ = c.SetReadBuffer(n)
}

// batchMax bounds the datagrams Serve handles before it answers.
const batchMax = 64

// answer is an answer waiting for the sync of its batch.
type answer struct {
	b  []byte
	to netip.AddrPort
}

// Syncer is what a UserPlane that journals adds: Sync makes every
// change Put and Delete made durable. A node serving one syncs once per
// batch of requests, before their answers leave; Put and Delete need
// not sync themselves.
type Syncer interface{ Sync() error }

// readNow reads a datagram already queued, or returns an error at once.
func (n *Node) readNow(buf []byte) (int, netip.AddrPort, error) {
	rc, err := n.conn.SyscallConn()
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	var l int
	var sa unix.Sockaddr
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		l, sa, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		return 0, netip.AddrPort{}, err
	}
	if rerr != nil {
		return 0, netip.AddrPort{}, rerr
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return l, netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), nil
	case *unix.SockaddrInet6:
		return l, netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), nil
	}
	return 0, netip.AddrPort{}, errors.New("n4: a datagram from no IP address")
}

// Peers returns the node's associations, by node ID.
func (n *Node) Peers() []Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.peersLocked()
}

// changed tells Options.Changed the associations after a change. The
// node answers one datagram at a time (Serve), so calls come in the
// order of the changes.
func (n *Node) changed() {
	if n.opt.Changed != nil {
		n.opt.Changed(n.Peers())
	}
}

func (n *Node) peersLocked() []Peer {
	out := make([]Peer, 0, len(n.peers))
	for _, p := range n.peers {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		if a.NodeID < b.NodeID {
			return -1
		}
		if a.NodeID > b.NodeID {
			return 1
		}
		return 0
	})
	return out
}

// Stats returns how many messages met each fate: "answered", a
// request refused ("cause_N" with its cause), or discarded ("short",
// "bad_length", "unknown_type", "unexpected_response"), and
// "old_version" for the Version Not Supported answers; of the node's
// own heartbeats, "heartbeat_answered", and "peer_down" for each time a
// peer stopped answering them.
func (n *Node) Stats() map[string]uint64 {
	out := map[string]uint64{}
	n.stats.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

func (n *Node) count(what string) {
	v, _ := n.stats.LoadOrStore(what, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

// headerLen is the shortest PFCP header (no SEID); a session message's
// is seidHeaderLen.
const (
	headerLen     = 8
	seidHeaderLen = 16
)

// Handle returns the answer to datagram b from from, nil when it gets
// none. It is what Serve does with each datagram, and the N4 decoder's
// fuzz target.
func (n *Node) Handle(b []byte, from netip.AddrPort) []byte {
	if len(b) < headerLen {
		n.count("short")
		return nil
	}
	seq := sequence(b)
	if v := b[0] >> 5; v != 1 {
		n.count("old_version")
		return marshal(message.NewVersionNotSupportedResponse(seq))
	}
	if b[0]&1 != 0 && len(b) < seidHeaderLen || int(binary.BigEndian.Uint16(b[2:4]))+4 != len(b) {
		n.count("bad_length")
		return nil
	}
	t := b[1]
	if !isRequest(t) {
		if t == message.MsgTypeHeartbeatResponse && n.answered(b, from) {
			n.count("heartbeat_answered")
		} else if t == message.MsgTypeSessionReportResponse && n.reportAnswered(b) {
			n.count("report_answered")
		} else if isResponse(t) {
			n.count("unexpected_response")
		} else {
			n.count("unknown_type")
		}
		return nil
	}
	n.work.Lock()
	defer n.work.Unlock()
	m, err := message.Parse(b)
	if err != nil {
		// The IEs do not delimit: nothing in the request can be
		// trusted, not even the IDs a response would echo.
		return n.refuse(t, seq, ie.CauseInvalidLength, 0, 0)
	}
	switch m := m.(type) {
	case *message.HeartbeatRequest:
		return n.heartbeat(m, from)
	case *message.AssociationSetupRequest:
		return n.associate(m, from)
	case *message.AssociationUpdateRequest:
		return n.update(m, from)
	case *message.AssociationReleaseRequest:
		return n.release(m, from)
	case *message.SessionEstablishmentRequest:
		return n.establish(m, from)
	case *message.SessionModificationRequest:
		return n.modify(m, from)
	case *message.SessionDeletionRequest:
		return n.remove(m, from)
	}
	return n.refuse(t, seq, ie.CauseServiceNotSupported, 0, 0)
}

// sequence is datagram b's sequence number (b holds a header).
func sequence(b []byte) uint32 {
	at := 4
	if b[0]&1 != 0 && len(b) >= seidHeaderLen {
		at = 12
	}
	return binary.BigEndian.Uint32(b[at:at+4]) >> 8
}

// requests are the request types the node answers.
var requests = []uint8{message.MsgTypeHeartbeatRequest, message.MsgTypeAssociationSetupRequest,
	message.MsgTypeAssociationUpdateRequest, message.MsgTypeAssociationReleaseRequest,
	message.MsgTypeSessionEstablishmentRequest, message.MsgTypeSessionModificationRequest,
	message.MsgTypeSessionDeletionRequest}

func isRequest(t uint8) bool { return slices.Contains(requests, t) }

// isResponse tells whether t is a response type a peer may send: to a
// request of this node's, of which there are none outstanding yet.
func isResponse(t uint8) bool {
	switch t {
	case message.MsgTypeHeartbeatResponse, message.MsgTypeNodeReportResponse,
		message.MsgTypeSessionReportResponse, message.MsgTypeAssociationSetupResponse,
		message.MsgTypeAssociationUpdateResponse, message.MsgTypeAssociationReleaseResponse,
		message.MsgTypePFDManagementResponse, message.MsgTypeSessionSetDeletionResponse,
		message.MsgTypeVersionNotSupportedResponse:
		return true
	}
	return false
}

func marshal(m message.Message) []byte {
	b := make([]byte, m.MarshalLen())
	if err := m.MarshalTo(b); err != nil {
		return nil
	}
	return b
}

// nodeID returns the node ID of IE i, a cause other than 0 when it is
// missing or does not decode, with the offending IE.
func nodeID(i *ie.IE) (string, uint8) {
	if i == nil {
		return "", ie.CauseMandatoryIEMissing
	}
	id, err := i.NodeID()
	if err != nil || id == "" {
		return "", ie.CauseMandatoryIEIncorrect
	}
	return id, 0
}

// refuse answers a request of type t (sequence seq) with cause c, the
// IE of type offending named when it is not 0, and the extra IEs; a
// session request's answer carries SEID seid (0 when the session is
// not known).
func (n *Node) refuse(t uint8, seq uint32, c uint8, offending uint16, seid uint64, extra ...*ie.IE) []byte {
	n.count(fmt.Sprintf("cause_%d", c))
	ies := []*ie.IE{ie.NewNodeIDHeuristic(n.opt.NodeID), ie.NewCause(c)}
	if offending != 0 {
		ies = append(ies, ie.NewOffendingIE(offending))
	}
	ies = append(ies, extra...)
	var m message.Message
	switch t {
	case message.MsgTypeHeartbeatRequest:
		// A heartbeat response has no cause: it answers liveness.
		m = message.NewHeartbeatResponse(seq, ie.NewRecoveryTimeStamp(n.opt.Recovery))
	case message.MsgTypeAssociationSetupRequest:
		m = message.NewAssociationSetupResponse(seq, append(ies, ie.NewRecoveryTimeStamp(n.opt.Recovery))...)
	case message.MsgTypeAssociationUpdateRequest:
		m = message.NewAssociationUpdateResponse(seq, ies...)
	case message.MsgTypeAssociationReleaseRequest:
		m = message.NewAssociationReleaseResponse(seq, ies[0], ies[1], ies[2:]...)
	case message.MsgTypeSessionEstablishmentRequest:
		m = message.NewSessionEstablishmentResponse(0, 0, seid, seq, 0, ies...)
	case message.MsgTypeSessionModificationRequest:
		m = message.NewSessionModificationResponse(0, 0, seid, seq, 0, ies[1:]...)
	case message.MsgTypeSessionDeletionRequest:
		m = message.NewSessionDeletionResponse(0, 0, seid, seq, 0, ies[1:]...)
	default:
		return nil
	}
	return marshal(m)
}
