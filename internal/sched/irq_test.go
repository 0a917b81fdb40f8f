// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestIRQsOf: an interface's IRQs are its device's MSI vectors, found
// on the nearest device up that has them; else /proc/interrupts' lines
// naming it; a veth has none; an unknown interface is an error.
func TestIRQsOf(t *testing.T) {
	root := t.TempDir()
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pci := "sys/devices/pci0000:00/0000:00:03.0"
	for _, p := range []string{pci + "/msi_irqs/38", pci + "/msi_irqs/39", pci + "/msi_irqs/37", pci + "/virtio2/net/eth0",
		"sys/devices/platform/nic1/net/eth1", "sys/devices/virtual/net/veth0", "sys/class/net", "proc"} {
		mk(p)
	}
	for name, dev := range map[string]string{"eth0": pci + "/virtio2", "eth1": "sys/devices/platform/nic1"} {
		mk("sys/class/net/" + name)
		if err := os.Symlink(filepath.Join(root, dev), filepath.Join(sys, "class/net", name, "device")); err != nil {
			t.Fatal(err)
		}
	}
	mk("sys/class/net/veth0")
	if err := os.WriteFile(filepath.Join(proc, "interrupts"), []byte("           CPU0       CPU1\n"+
		" 50:   1   2  PCI-MSI 1-edge  eth1-TxRx-0\n 51:  1  2  PCI-MSI 2-edge  eth1-TxRx-1\n 52: 0 0 PCI-MSI 3-edge eth10\nNMI: 0 0 Non-maskable interrupts\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]int{"eth0": {37, 38, 39}, "eth1": {50, 51}, "veth0": nil} {
		got, err := irqsOf(sys, proc, name)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := irqsOf(sys, proc, "nope0"); err == nil {
		t.Error("an unknown interface: no error")
	}
}

// TestEngineIRQ: a strategy's irq_affinity steers a real interface's
// IRQs to its CPUs and gives each its affinity back when the strategy
// goes, or after a crash; an interface without IRQs (lo) is named in
// the strategy's error.
func TestEngineIRQ(t *testing.T) {
	testutil.RequireRoot(t)
	if runtime.NumCPU() < 2 {
		t.Fatal("needs two CPUs")
	}
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	var nic string
	var irqs []int
	for _, e := range ents {
		if irqs, _ = irqsOf("/sys", "/proc", e.Name()); len(irqs) > 0 {
			nic = e.Name()
			break
		}
	}
	if nic == "" {
		t.Fatal("no interface of this machine has IRQs (these machines' eth0 has virtio MSI-X vectors)")
	}
	affinity := func(irq int) string {
		b, err := os.ReadFile("/proc/irq/" + strconv.Itoa(irq) + "/smp_affinity_list")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	before := map[int]string{}
	for _, irq := range irqs {
		before[irq] = affinity(irq)
	}
	t.Cleanup(func() {
		for irq, a := range before {
			_ = os.WriteFile("/proc/irq/"+strconv.Itoa(irq)+"/smp_affinity_list", []byte(a), 0)
		}
	})
	last := strconv.Itoa(runtime.NumCPU() - 1)
	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: lo, role: lan}]\nstrategies:\n  - {id: 9, command_regex: '^edgeplane-none$', selectors: {user: '0'}, cpus: '" + last + "', irq_affinity: [" + nic + ", lo]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "sched.json")
	e := New("/proc", state)
	if _, _, err := e.Sync(cfg.Strategies); err != nil {
		t.Fatal(err)
	}
	for _, irq := range irqs {
		if a := affinity(irq); a != last {
			t.Errorf("%s's IRQ %d: affinity %s, want %s", nic, irq, a, last)
		}
	}
	if msg := e.Errors[9]; !strings.Contains(msg, "lo has no IRQ") {
		t.Errorf("error %q, want lo named as without IRQs", msg)
	}
	if st := e.Status(); len(st) != 1 || !strings.Contains(st[0].Others, "IRQs ") {
		t.Errorf("status: %+v, want the IRQs steered", st)
	}
	if _, _, err := e.Sync(nil); err != nil {
		t.Fatal(err)
	}
	for _, irq := range irqs {
		if a := affinity(irq); a != before[irq] {
			t.Errorf("IRQ %d after removal: %s, want %s back", irq, a, before[irq])
		}
	}
	if _, _, err := e.Sync(cfg.Strategies); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover("/proc", state); err != nil {
		t.Fatal(err)
	}
	for _, irq := range irqs {
		if a := affinity(irq); a != before[irq] {
			t.Errorf("IRQ %d after recovery: %s, want %s back", irq, a, before[irq])
		}
	}
}
