// SPDX-License-Identifier: Apache-2.0

package sched_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// The strategy engine driven as an attacker would drive it: a local user
// (nobody, through setpriv) who names processes, makes cgroups where it
// is given them, plants files where it may write.

// nobodyUID is the unprivileged user the attacks run as.
const nobodyUID = 65534

// asNobody returns a command that runs name as nobody, with no
// supplementary groups.
func asNobody(name string, args ...string) *exec.Cmd {
	return exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", name}, args...)...)
}

// nobodyDir makes a directory nobody owns (as an operator's config
// directory the agent's state file sits beside), removed with the test.
func nobodyDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgeplane-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobodyUID, nobodyUID); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStateTempNoSymlink: whoever can write the directory of the state
// file plants a symlink at the name the engine used for its temporary
// file (STATE.tmp) pointing at a file of root's; the engine's next save
// must neither write through it nor leave the state file a link.
func TestStateTempNoSymlink(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "setpriv")
	dir := nobodyDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "gateway.yaml.sched")
	if out, err := asNobody("ln", "-s", victim, state+".tmp").CombinedOutput(); err != nil {
		t.Fatalf("nobody plants the link: %v\n%s", err, out)
	}
	tag := "edgeplane-tmp-" + testutil.UniqueName("t")
	sleeper(t, tag)
	e := sched.New("/proc", state)
	s := strategy(t, `{id: 1, command_regex: "^`+tag+` ", selectors: {user: "0"}, priority: true, policy: fifo, rt_priority: 3}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("sync: %d taken, %v (%v)", taken, err, e.Errors)
	}
	defer func() { _ = e.RevertAll() }()
	if b, _ := os.ReadFile(victim); string(b) != "root's own\n" {
		t.Errorf("the engine wrote through nobody's link: victim now %q", b)
	}
	fi, err := os.Lstat(state)
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("state file %s: %v, %v; want a regular file", state, fi.Mode(), err)
	}
	if n, err := sched.Recover("/proc", state); err != nil || n != 1 {
		t.Errorf("recover from the state file: %d, %v", n, err)
	}
}
