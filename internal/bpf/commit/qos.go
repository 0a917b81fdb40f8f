// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"fmt"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// qosRound is the round the agent last set for a class index, and the
// class it set it for.
type qosRound struct {
	id    uint32
	round uint64
}

// writeQoS makes slot t's QoS classes and DSCP classes those of g. A
// class keeps the round the agent set for it (SetQoSRound) while its
// entry says it has a rate.
func (w *Writer) writeQoS(t uint32, g *Generation) error {
	o := w.o
	cur := w.slots[t]
	for i := uint32(0); i < bpf.MaxQoS; i++ {
		want := g.QoS[i]
		if r, ok := w.qosRounds[i]; ok && r.id == want.Id && want.RoundNs != 0 {
			want.RoundNs = r.round
		}
		want = want.WithDerived()
		if cur.qosKnown && cur.qos[i] == want {
			continue
		}
		if err := o.EdgeQos.Put(t*bpf.MaxQoS+i, want); err != nil {
			return fmt.Errorf("write qos class %d: %w", i, err)
		}
		cur.qos[i] = want
	}
	for d := uint32(0); d < 64; d++ {
		if cur.qosKnown && cur.qosDSCP[d] == g.QoSDSCP[d] {
			continue
		}
		if err := o.EdgeQosDscp.Put(t*64+d, g.QoSDSCP[d]); err != nil {
			return fmt.Errorf("write the class of dscp %d: %w", d, err)
		}
		cur.qosDSCP[d] = g.QoSDSCP[d]
	}
	cur.qosKnown = true
	return nil
}

// SetQoSRound sets the round (ns in which each flow earns a quantum) of
// class index idx, the class id's, in both slots where it has a rate.
func (w *Writer) SetQoSRound(idx, id uint32, round uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if idx >= bpf.MaxQoS || round == 0 {
		return fmt.Errorf("qos class index %d, round %d: out of range", idx, round)
	}
	for t, s := range w.slots {
		e := s.qos[idx]
		if !s.qosKnown || e.Id != id || e.RoundNs == 0 || e.RoundNs == round {
			continue
		}
		e.RoundNs = round
		e = e.WithDerived()
		if err := w.o.EdgeQos.Put(uint32(t)*bpf.MaxQoS+idx, e); err != nil {
			return fmt.Errorf("write qos class %d's round: %w", idx, err)
		}
		s.qos[idx] = e
	}
	w.qosRounds[idx] = qosRound{id: id, round: round}
	return nil
}
