// SPDX-License-Identifier: Apache-2.0

package control

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// N4Result is the user plane's control figures: PFCP session
// establishments a second from one SMF asking one at a time and from
// many SMFs with requests in flight, a modification's round trip, and
// the agent's memory with the sessions held.
type N4Result struct {
	Setup string `json:"setup"`
	// Sessions is how many the concurrent series establishes (and
	// holds for the memory figure).
	Sessions int `json:"sessions"`
	// SequentialPerSec: one SMF, one request at a time (each waits for
	// its answer, and so for its journal sync); ConcurrentPerSec:
	// Clients SMFs, InFlight requests each in flight.
	SequentialPerSec float64 `json:"establish_sequential_per_s"`
	ConcurrentPerSec float64 `json:"establish_concurrent_per_s"`
	Clients          int     `json:"clients"`
	InFlight         int     `json:"in_flight"`
	// Modify is a modification's round trip (forwarding a session's
	// downlink to its gNB), one at a time.
	Modify Latency `json:"modify"`
	// RSSMiB is the agent's resident memory before any session and with
	// Sessions held.
	RSSBeforeMiB float64 `json:"rss_before_mib"`
	RSSMiB       float64 `json:"rss_mib"`
	DeletePerSec float64 `json:"delete_concurrent_per_s"`
	// MultiAccess: the same concurrent series with every session
	// multi-access (its downlink steered by a MAR between two access
	// peers), the agent's RSS with them held, and its CPU time a second
	// while it holds them and probes the peers (every 200 ms; the
	// peers, with nothing behind their addresses, go down meanwhile).
	MAConcurrentPerSec float64 `json:"ma_establish_concurrent_per_s"`
	MARSSMiB           float64 `json:"ma_rss_mib"`
	MACPUPerSec        float64 `json:"ma_agent_cpu_s_per_s"`
}

const n4Setup = "an agent in a namespace of its own serving N4 on 127.0.0.1:8805 and N3 (limits.sessions: the power of two with room for all, journal on the temp dir's disk); " +
	"SMFs are go-pfcp clients on loopback, each with its own association; a session: uplink PDR (F-TEID CHOOSE, SDF any, QFI 9), " +
	"downlink PDR (its own UE address), their FARs (uplink forward to core, downlink forward with outer header creation), a QER"

// n4Config is the N4 agent's config, holding sessions sessions.
const n4Config = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: drop}
pdrs:
  - {id: 1, precedence: 60000, match: {in: wan0, dst: 192.0.2.0/24}, far: 1}
limits: {flows: 65536, rules: 1024, sessions: %d}
`

// RunN4 measures the N4 figures: n sessions established by clients
// SMFs with inFlight requests each outstanding, after a sequential
// series of seq, and a modification of each of those.
func RunN4(ctx context.Context, o Options, n, seq, clients, inFlight int) (*N4Result, error) {
	bin, err := o.Bins.Gateway()
	if err != nil {
		return nil, err
	}
	// Room for the series one at a time and the concurrent one (the
	// former deleted only at the end).
	limit := 4096
	for limit < n+seq+1024 {
		limit <<= 1
	}
	l := &ctlLab{o: o, bin: bin, cfg: fmt.Sprintf(n4Config, limit), args: []string{"--n4-addr", "127.0.0.1:8805", "--n3-addr", "10.2.0.1",
		"--n3-echo-interval", "200ms"}}
	defer l.close()
	if err := l.setup(ctx); err != nil {
		return nil, err
	}
	r := &N4Result{Setup: n4Setup, Sessions: n, Clients: clients, InFlight: inFlight}
	if r.RSSBeforeMiB, err = rssMiB(l.agent.Process.Pid); err != nil {
		return nil, err
	}
	smfs := make([]*smf, clients+1)
	for i := range smfs {
		if smfs[i], err = l.newSMF(i); err != nil {
			return nil, err
		}
		defer smfs[i].conn.Close()
	}
	// One at a time, then the modifications of those.
	o.Log("n4: %d sessions one at a time, each then modified", seq)
	one := smfs[clients]
	start := time.Now()
	seids := make([]uint64, seq)
	for i := range seq {
		if seids[i], err = one.establish(uint32(n + i)); err != nil {
			return nil, err
		}
	}
	r.SequentialPerSec = float64(seq) / time.Since(start).Seconds()
	d := make([]time.Duration, seq)
	for i, s := range seids {
		t0 := time.Now()
		if err := one.modify(s, uint32(n+i)); err != nil {
			return nil, err
		}
		d[i] = time.Since(t0)
	}
	r.Modify = latency("n4_modify", d, nil, 0)

	o.Log("n4: %d sessions from %d SMFs, %d requests in flight each", n, clients, inFlight)
	per := n / clients
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	all := make([][]uint64, clients)
	start = time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := smfs[c].establishMany(c*per, per, inFlight)
			all[c] = s
			errs <- err
		}()
	}
	wg.Wait()
	r.ConcurrentPerSec = float64(per*clients) / time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if r.RSSMiB, err = rssMiB(l.agent.Process.Pid); err != nil {
		return nil, err
	}
	start = time.Now()
	errs = make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- smfs[c].deleteMany(all[c], inFlight)
		}()
	}
	wg.Wait()
	r.DeletePerSec = float64(per*clients) / time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	o.Log("n4: %.0f establishments/s one at a time, %.0f/s concurrent; modify p50 %.0f us p99 %.0f us; RSS %.1f -> %.1f MiB with %d sessions",
		r.SequentialPerSec, r.ConcurrentPerSec, r.Modify.P50Us, r.Modify.P99Us, r.RSSBeforeMiB, r.RSSMiB, n)
	if err := l.multiAccess(r, smfs[:clients], per, inFlight); err != nil {
		return nil, fmt.Errorf("multi-access sessions: %w", err)
	}
	return r, nil
}

// multiAccess is RunN4's series again with multi-access sessions (per
// from each of smfs), held for the RSS and the agent's CPU, then
// deleted.
func (l *ctlLab) multiAccess(r *N4Result, smfs []*smf, per, inFlight int) error {
	l.o.Log("n4: %d multi-access sessions from %d SMFs", per*len(smfs), len(smfs))
	var wg sync.WaitGroup
	errs := make(chan error, len(smfs))
	all := make([][]uint64, len(smfs))
	start := time.Now()
	for c, s := range smfs {
		s.ma = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			all[c], err = s.establishMany(c*per, per, inFlight)
			errs <- err
		}()
	}
	wg.Wait()
	r.MAConcurrentPerSec = float64(per*len(smfs)) / time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	var err error
	if r.MARSSMiB, err = rssMiB(l.agent.Process.Pid); err != nil {
		return err
	}
	cpu0, err := cpuSeconds(l.agent.Process.Pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	cpu1, err := cpuSeconds(l.agent.Process.Pid)
	if err != nil {
		return err
	}
	r.MACPUPerSec = (cpu1 - cpu0) / time.Since(t0).Seconds()
	errs = make(chan error, len(smfs))
	for c, s := range smfs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.deleteMany(all[c], inFlight)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	l.o.Log("n4: %.0f multi-access establishments/s; RSS %.1f MiB with %d; agent CPU %.4f s/s holding them", r.MAConcurrentPerSec,
		r.MARSSMiB, per*len(smfs), r.MACPUPerSec)
	return nil
}

// cpuSeconds reads a process's user and system CPU time, in seconds.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis: utime and
	// stime are the 12th and 13th of them.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return (u + st) / 100, nil // USER_HZ
}

// rssMiB reads a process's resident set (VmRSS) in MiB.
func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// smf is one SMF: a UDP socket in the agent's namespace, associated as
// node 192.0.2.i.
type smf struct {
	conn *net.UDPConn
	id   string
	seq  uint32
	to   *net.UDPAddr
	ma   bool // its sessions are multi-access (requestMA)
}

func (l *ctlLab) newSMF(i int) (*smf, error) {
	s := &smf{id: fmt.Sprintf("192.0.%d.%d", 2+i/250, 1+i%250), to: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8805}}
	if err := l.ns.Do(func() (err error) {
		s.conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	}); err != nil {
		return nil, err
	}
	// The agent's N4 may come up after its API: ask until it answers.
	var err error
	for range 50 {
		var m message.Message
		if m, err = s.ask(message.NewAssociationSetupRequest(s.next(), ie.NewNodeID(s.id, "", ""), ie.NewRecoveryTimeStamp(time.Now()))); err == nil {
			r, ok := m.(*message.AssociationSetupResponse)
			if !ok || r.Cause == nil {
				return nil, fmt.Errorf("association of %s answered with %s", s.id, m.MessageTypeName())
			}
			if c, _ := r.Cause.Cause(); c != ie.CauseRequestAccepted {
				return nil, fmt.Errorf("association of %s refused: cause %d", s.id, c)
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("association of %s: %w", s.id, err)
}

func (s *smf) next() uint32 { s.seq = (s.seq + 1) & 0xffffff; return s.seq }

func (s *smf) send(m message.Message) error {
	b := make([]byte, m.MarshalLen())
	if err := m.MarshalTo(b); err != nil {
		return err
	}
	_, err := s.conn.WriteToUDP(b, s.to)
	return err
}

// recv reads the next answer, answering the UPF's heartbeats on the
// way.
func (s *smf) recv() (message.Message, error) {
	buf := make([]byte, 4096)
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			return nil, err
		}
		m, err := message.Parse(buf[:n])
		if err != nil {
			return nil, err
		}
		if hb, ok := m.(*message.HeartbeatRequest); ok {
			if err := s.send(message.NewHeartbeatResponse(hb.Sequence(), ie.NewRecoveryTimeStamp(time.Now()))); err != nil {
				return nil, err
			}
			continue
		}
		return m, nil
	}
}

func (s *smf) ask(m message.Message) (message.Message, error) {
	if err := s.send(m); err != nil {
		return nil, err
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 4096)
	n, _, err := s.conn.ReadFromUDP(buf)
	if err != nil {
		return nil, err
	}
	return message.Parse(buf[:n])
}

// request is session i's establishment; s.ma: a multi-access PDU
// session's, the downlink PDR naming a MAR (active-standby) between the
// gNB's FAR and an N3IWF's.
func (s *smf) request(i uint32) message.Message {
	ue := net.IPv4(10, 100+byte(i>>16), byte(i>>8), byte(i)).String()
	down := ie.NewFARID(2)
	var more []*ie.IE
	if s.ma {
		down = ie.NewMARID(1)
		more = []*ie.IE{
			ie.NewCreateFAR(ie.NewFARID(3), ie.NewApplyAction(0x02),
				ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
					ie.NewOuterHeaderCreation(0x0100, 0xa0000000|i, "10.2.0.10", "", 0, 0, 0))),
			ie.NewCreateMAR(ie.NewMARID(1), ie.NewSteeringFunctionality(ie.SteeringFunctionalityATSSSLL),
				ie.NewSteeringMode(ie.SteeringModeActiveStandby),
				ie.NewTGPPAccessForwardingActionInformation(ie.NewFARID(2), ie.NewPriority(ie.PriorityActive)),
				ie.NewNonTGPPAccessForwardingActionInformation(ie.NewFARID(3), ie.NewPriority(ie.PriorityStandby))),
		}
	}
	return message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, append([]*ie.IE{
		ie.NewNodeID(s.id, "", ""), ie.NewFSEID(uint64(i)+1, net.ParseIP(s.id), nil),
		ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x05, 0, nil, nil, 0),
				ie.NewSDFFilter("permit out ip from any to assigned", "", "", "", 0), ie.NewQFI(9)),
			ie.NewOuterHeaderRemoval(0, 0), ie.NewFARID(1), ie.NewQERID(1)),
		ie.NewCreatePDR(ie.NewPDRID(2), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x02, ue, "", 0, 0)),
			down, ie.NewQERID(1)),
		ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(0x02),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))),
		ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(0x02),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, 0x80000000|i, "10.2.0.9", "", 0, 0, 0))),
		ie.NewCreateQER(ie.NewQERID(1), ie.NewGateStatus(0, 0), ie.NewQFI(9)),
	}, more...)...)
}

// accepted reads an answer's cause and the UP SEID it gives.
func accepted(m message.Message) (uint64, error) {
	switch r := m.(type) {
	case *message.SessionEstablishmentResponse:
		if c, err := r.Cause.Cause(); err != nil || c != ie.CauseRequestAccepted {
			return 0, fmt.Errorf("establishment refused: cause %d (%v)", c, err)
		}
		f, err := r.UPFSEID.FSEID()
		if err != nil {
			return 0, err
		}
		return f.SEID, nil
	case *message.SessionModificationResponse:
		if c, err := r.Cause.Cause(); err != nil || c != ie.CauseRequestAccepted {
			return 0, fmt.Errorf("modification refused: cause %d (%v)", c, err)
		}
		return 0, nil
	case *message.SessionDeletionResponse:
		if c, err := r.Cause.Cause(); err != nil || c != ie.CauseRequestAccepted {
			return 0, fmt.Errorf("deletion refused: cause %d (%v)", c, err)
		}
		return 0, nil
	}
	return 0, fmt.Errorf("answered with %s", m.MessageTypeName())
}

func (s *smf) establish(i uint32) (uint64, error) {
	if err := s.send(s.request(i)); err != nil {
		return 0, err
	}
	m, err := s.recv()
	if err != nil {
		return 0, err
	}
	return accepted(m)
}

func (s *smf) modify(seid uint64, i uint32) error {
	m := message.NewSessionModificationRequest(0, 0, seid, s.next(), 0,
		ie.NewUpdateFAR(ie.NewFARID(2), ie.NewApplyAction(0x02), ie.NewUpdateForwardingParameters(
			ie.NewDestinationInterface(ie.DstInterfaceAccess), ie.NewOuterHeaderCreation(0x0100, 0x40000000|i, "10.2.0.10", "", 0, 0, 0))))
	if err := s.send(m); err != nil {
		return err
	}
	a, err := s.recv()
	if err != nil {
		return err
	}
	_, err = accepted(a)
	return err
}

// pipeline sends count requests made by req(k), keeping inFlight
// outstanding, and gives each answer to got.
func (s *smf) pipeline(count, inFlight int, req func(k int) message.Message, got func(message.Message) error) error {
	sent, done := 0, 0
	for done < count {
		for sent < count && sent-done < inFlight {
			if err := s.send(req(sent)); err != nil {
				return err
			}
			sent++
		}
		m, err := s.recv()
		if err != nil {
			return fmt.Errorf("%s after %d of %d answers: %w", s.id, done, count, err)
		}
		if err := got(m); err != nil {
			return err
		}
		done++
	}
	return nil
}

func (s *smf) establishMany(first, count, inFlight int) ([]uint64, error) {
	seids := make([]uint64, 0, count)
	err := s.pipeline(count, inFlight, func(k int) message.Message { return s.request(uint32(first + k)) },
		func(m message.Message) error {
			seid, err := accepted(m)
			seids = append(seids, seid)
			return err
		})
	return seids, err
}

func (s *smf) deleteMany(seids []uint64, inFlight int) error {
	return s.pipeline(len(seids), inFlight, func(k int) message.Message {
		return message.NewSessionDeletionRequest(0, 0, seids[k], s.next(), 0)
	}, func(m message.Message) error { _, err := accepted(m); return err })
}
