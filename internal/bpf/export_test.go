// SPDX-License-Identifier: Apache-2.0

package bpf

// FlowWays returns a copy of every entry of dp's flow table, with
// whether it had a packet after its first.
func (dp *Dataplane) FlowWays() ([]FTWay, []bool, error) {
	t, err := dp.flowTable()
	if err != nil {
		return nil, nil, err
	}
	defer t.unmap()
	var ws []FTWay
	var hot []bool
	t.each(func(w *FTWay, h bool) bool {
		ws = append(ws, *w)
		hot = append(hot, h)
		return true
	})
	return ws, hot, nil
}

// ClearFlows empties the ways of dp's flow table whose entry drop
// chooses, as eviction would, and returns how many.
func (dp *Dataplane) ClearFlows(drop func(*FTWay) bool) (int, error) {
	t, err := dp.flowTable()
	if err != nil {
		return 0, err
	}
	defer t.unmap()
	n := 0
	for b := range t.buckets {
		m := t.bucket(b)
		for i := range uint32(FTWays) {
			if m.Tag[i] != 0 && drop(t.way(b, i)) {
				m.Tag[i] = 0
				*t.way(b, i) = FTWay{}
				n++
			}
		}
	}
	return n, nil
}
