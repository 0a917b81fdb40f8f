// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// bpfFTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES (linux/bpf.h):
// BPF_PROG_TEST_RUN sends what the program redirects.
const bpfFTestXDPLiveFrames = 1 << 1

// probeProgram loads (once) the probe sender (edge_xdp_probe) against
// dp's maps; dp.probeMu held.
func (dp *Dataplane) probeProgram() (*ebpf.Program, error) {
	if dp.probeProg != nil {
		return dp.probeProg, nil
	}
	var p struct {
		Prog *ebpf.Program `ebpf:"edge_xdp_probe"`
	}
	if err := dp.LoadApart(&p, "probe sender"); err != nil {
		return nil, err
	}
	dp.probeProg = p.Prog
	return p.Prog, nil
}

// SendProbe sends frame, a probe request bpf.ProbeFrame built, over its path
// from the dataplane: edge_xdp_probe stamps it as it leaves and keeps
// the stamp in the path's record (edge_path_probe), which says whether
// it left (PathProbe.Sent). It runs in the calling thread's network
// namespace, the gateway's.
func (dp *Dataplane) SendProbe(frame []byte) error {
	dp.probeMu.Lock()
	defer dp.probeMu.Unlock()
	prog, err := dp.probeProgram()
	if err != nil {
		return err
	}
	// Live mode reports no verdict: the record says what happened.
	if _, err := prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 1, Flags: bpfFTestXDPLiveFrames}); err != nil {
		return fmt.Errorf("send probe: %w", err)
	}
	return nil
}

// xdpMD is struct xdp_md, the context BPF_PROG_TEST_RUN gives an XDP
// program: what it takes of it is the ingress interface.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Inject runs the dataplane's program on frame as if it came in by
// ifindex, sending what it redirects or transmits (live frames): how
// the user plane releases the downlink packets it held. It runs in the
// calling thread's network namespace, the gateway's.
func (dp *Dataplane) Inject(frame []byte, ifindex uint32) error {
	if dp.Prog == nil {
		return fmt.Errorf("inject: no program loaded")
	}
	opts := &ebpf.RunOptions{Data: frame, Repeat: 1, Flags: bpfFTestXDPLiveFrames,
		// The kernel wants data_end to be the frame's length.
		Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: ifindex}}
	if _, err := dp.Prog.Run(opts); err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	return nil
}
