// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"fmt"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// maxReports bounds the Session Report Requests awaiting an answer;
// past it the oldest are forgotten (their answers then count as
// unexpected).
const maxReports = 4096

// ReportDownlink tells the SMF of session seid that downlink data for
// it is buffered (a Session Report Request of type DLDR naming PDR
// pdr): its paging trigger. It is sent once; the answer is counted
// (report_answered).
func (n *Node) ReportDownlink(seid uint64, pdr uint16) error {
	return n.report(seid, ie.NewReportType(0, 0, 0, 1), ie.NewDownlinkDataReport(ie.NewPDRID(pdr)))
}

// report sends the SMF of session seid a Session Report Request of
// type typ with ies.
func (n *Node) report(seid uint64, typ *ie.IE, ies ...*ie.IE) error {
	n.mu.Lock()
	s := n.sessions[seid]
	var p *Peer
	if s != nil {
		p = n.peers[s.CPNode]
	}
	if s == nil || p == nil {
		n.mu.Unlock()
		return fmt.Errorf("n4: no session %#x with an association to report to", seid)
	}
	n.seq = (n.seq + 1) & 0xffffff
	seq, to, cp := n.seq, p.Addr, s.CPSEID
	if len(n.reports) >= maxReports {
		for k := range n.reports {
			delete(n.reports, k)
			break
		}
	}
	n.reports[seq] = seid
	n.mu.Unlock()
	b := marshal(message.NewSessionReportRequest(0, 0, cp, seq, 0, append([]*ie.IE{typ}, ies...)...))
	if _, err := n.conn.WriteToUDPAddrPort(b, to); err != nil {
		n.count("send_failed")
		return err
	}
	n.count("report_sent")
	return nil
}

// reportAnswered takes a Session Report Response to one of the node's
// requests (false: it answers none).
func (n *Node) reportAnswered(b []byte) bool {
	seq := sequence(b)
	n.mu.Lock()
	_, ok := n.reports[seq]
	delete(n.reports, seq)
	n.mu.Unlock()
	return ok
}
