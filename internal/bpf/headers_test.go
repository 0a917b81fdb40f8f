// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// clangFlags are go:generate's, read from gen.go's directive (its
// -cflags and -target), so a header that compiles here compiles there.
var clangFlags = generateFlags()

// generateFlags returns the C flags of gen.go's bpf2go directive, less
// the variable a test's build adds to them, and its target.
func generateFlags() []string {
	src, err := os.ReadFile("gen.go")
	if err != nil {
		panic(err) // tests run in the package's directory
	}
	m := regexp.MustCompile(`(?m)^//go:generate go tool bpf2go .*-cflags "([^"]*)".* -target (\w+) `).FindSubmatch(src)
	if m == nil {
		panic("gen.go: no bpf2go directive with -cflags and -target")
	}
	flags := slices.DeleteFunc(strings.Fields(string(m[1])), func(f string) bool { return strings.HasPrefix(f, "$") })
	return append(flags, "-target", string(m[2]))
}

// compileC compiles src, a C file in bpf/'s include path, and returns
// clang's complaints.
func compileC(t *testing.T, name, src string) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".c")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	bpfDir, err := filepath.Abs("../../bpf")
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, clangFlags...), "-I", bpfDir, "-c", file, "-o", file+".o")
	if out, err := exec.Command("clang", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// TestHeadersCompileAlone compiles every header of bpf/ and bpf/lib/ on
// its own: each includes what it uses, so the stages form a DAG a reader
// can follow header by header, and a new stage can include just the
// layers it stands on.
func TestHeadersCompileAlone(t *testing.T) {
	testutil.RequireTool(t, "clang")
	var headers []string
	for _, pat := range []string{"../../bpf/*.h", "../../bpf/lib/*.h"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, m...)
	}
	if len(headers) < 10 {
		t.Fatalf("found %d headers: %v", len(headers), headers)
	}
	for _, h := range headers {
		rel := strings.TrimPrefix(h, "../../bpf/")
		t.Run(rel, func(t *testing.T) {
			if err := compileC(t, "alone", fmt.Sprintf("#include %q\n", rel)); err != nil {
				t.Errorf("%s does not compile on its own: %v", rel, err)
			}
		})
	}
}

// TestConstantsMatchHeaders holds the Go constants that name the
// dataplane's limits, flags, sentinels, actions and reasons to their C
// definitions: a C file asserts each Go value against the header's (an
// enum or a macro alike) and must compile.
func TestConstantsMatchHeaders(t *testing.T) {
	testutil.RequireTool(t, "clang")
	consts := []struct {
		c   string
		val uint64
	}{
		{"EDGE_MAX_GROUPS", MaxGroups},
		{"EDGE_MAX_PATHS", MaxPaths},
		{"EDGE_MAX_SERVICES", MaxServices},
		{"EDGE_MAX_MEMBERS", MaxMembers},
		{"EDGE_MAX_SERVICES", config.MaxServices},
		{"EDGE_MAX_IFACES", config.MaxInterfaces},
		{"EDGE_MAX_MEMBERS - 1", config.MaxMembers},
		{"EDGE_MAGLEV_BLOCK", MaglevBlock},
		{"EDGE_SVC_INDEX", SvcIndexSize},
		{"EDGE_SVC_PROBES", SvcProbes},
		{"EDGE_STATS_LB", StatsLB},
		{"EDGE_NO_FAR", NoFAR},
		{"EDGE_NO_PDR", NoPDR},
		{"EDGE_PF_KEY", PathFlagKey},
		{"EDGE_PF_SEQ", PathFlagSeq},
		{"EDGE_PF_DSCP_FIXED", PathFlagDSCPFixed},
		{"EDGE_KF_GRE_KEY", KeyFlagGREKey},
		{"EDGE_KF_FRAG", KeyFlagFrag},
		{"EDGE_SVC_STATELESS", SvcStateless},
		{"EDGE_SVC_GUARDED", SvcGuarded},
		{"EDGE_ACT_PASS", ActPass},
		{"EDGE_ACT_DROP", ActDrop},
		{"EDGE_ACT_REDIRECT", ActRedirect},
		{"EDGE_ACT_ENCAP", ActEncap},
		{"EDGE_ACT_DECAP", ActDecap},
		{"EDGE_ACT_NAT", ActNAT},
		{"EDGE_ACT_UNNAT", ActUnNAT},
		{"EDGE_R_MAX", ReasonMax},
		{"EDGE_DEDUP_JUMP", DedupJump},
		{"EDGE_DEDUP_CONFIRM", DedupConfirm},
		{"EDGE_PROBE_PROTO", ProbeProto},
		{"EDGE_PROBE_MAGIC", ProbeMagic},
		{"EDGE_PROBE_REQUEST", ProbeRequest},
		{"EDGE_PROBE_REPLY", ProbeReply},
		{"EDGE_PROBE_RING", ProbeRing},
		{"EDGE_PA_MAC", ProbeSecretMAC},
		{"sizeof(struct edge_probe)", ProbeLen},
		{"EDGE_MAX_QOS", MaxQoS},
		{"EDGE_MAX_CPUS", MaxCPUs},
		{"EDGE_FF_QOS_SHIFT", FFQoSShift},
		{"EDGE_FO_PROBE", FOProbe},
		{"EDGE_FO_FAIR", FOFair},
		{"EDGE_FO_RELIEF", FORelief},
		{"EDGE_QF_URLLC", QoSFlagURLLC},
		{"EDGE_QF_DROP", QoSFlagDrop},
		{"EDGE_FOD_HINT", FODHint},
		{"EDGE_FOD_ECN", FODECN},
		{"EDGE_FO_TOKEN_SHIFT", FOTokenShift},
		{"EDGE_FO_MUL_SHIFT", FOMulShift},
		{"EDGE_FO_NSB_SHIFT", FONsbShift},
		{"XDP_ABORTED", XDPAborted},
		{"XDP_DROP", XDPDrop},
		{"XDP_PASS", XDPPass},
		{"XDP_TX", XDPTx},
		{"XDP_REDIRECT", XDPRedirect},
	}
	for i, n := range dataplane.ReasonNames {
		consts = append(consts, struct {
			c   string
			val uint64
		}{"EDGE_R_" + strings.ToUpper(n), uint64(i)})
	}
	var b strings.Builder
	b.WriteString("#include <linux/bpf.h>\n#include \"edge_ctx.h\"\n")
	for _, c := range consts {
		fmt.Fprintf(&b, "_Static_assert((unsigned long long)(%s) == %dull, \"Go has %s = %d\");\n", c.c, c.val, c.c, c.val)
	}
	if err := compileC(t, "consts", b.String()); err != nil {
		t.Errorf("Go constants differ from bpf/'s headers: %v", err)
	}
}
