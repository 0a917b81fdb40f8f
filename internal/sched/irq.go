// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/internal/config"
)

// irqsOf returns the IRQs of network interface name: the MSI or MSI-X
// vectors of its device (or of the nearest parent device that has them,
// as a virtio NIC's PCI function), else the lines of /proc/interrupts
// whose action names it ("eth0-TxRx-0"). None for veth and other
// virtual interfaces: their receive work runs where the sender runs.
func irqsOf(sys, proc, name string) ([]int, error) {
	dev, err := filepath.EvalSymlinks(filepath.Join(sys, "class", "net", name, "device"))
	if err == nil {
		for d := dev; strings.HasPrefix(d, filepath.Join(sys, "devices")); d = filepath.Dir(d) {
			ents, err := os.ReadDir(filepath.Join(d, "msi_irqs"))
			if err != nil {
				continue
			}
			var out []int
			for _, e := range ents {
				if n, err := strconv.Atoi(e.Name()); err == nil {
					out = append(out, n)
				}
			}
			slices.Sort(out)
			return out, nil
		}
	}
	// sysfs shows the network namespace of whoever mounted it, which
	// need not be this process's (nsenter): the interface is looked up
	// here, and /proc/interrupts, which is the machine's, decides.
	if _, err := os.Stat(filepath.Join(sys, "class", "net", name)); err != nil {
		if _, err := net.InterfaceByName(name); err != nil {
			return nil, fmt.Errorf("no interface %s", name)
		}
	}
	f, err := os.Open(filepath.Join(proc, "interrupts"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		irq, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		n, err := strconv.Atoi(irq)
		if !ok || err != nil {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		action := fields[len(fields)-1]
		if action == name || strings.HasPrefix(action, name+"-") {
			out = append(out, n)
		}
	}
	return out, sc.Err()
}

// syncIRQs steers the IRQs of each strategy's irq_affinity interfaces
// to its CPUs, keeping each IRQ's affinity before, and gives back those
// no strategy steers any more.
func (e *Engine) syncIRQs(strategies []config.Strategy) {
	want := map[int]string{}
	steer := map[string]int{} // interfaces without IRQs: their XDP work's CPU
	clear(e.irqBy)
	clear(e.steerBy)
	for _, s := range strategies {
		if len(s.IRQAffinity) == 0 || s.CPUs.IsZero() {
			continue
		}
		var none []string
		for _, name := range s.IRQAffinity {
			irqs, err := irqsOf(e.sys, e.root, name)
			if err != nil {
				e.addError(s.ID, "irq_affinity: "+err.Error())
				continue
			}
			if len(irqs) == 0 && e.xdpSteer != nil {
				cpu := s.CPUs.First()
				steer[name] = cpu
				e.steerBy[s.ID] = append(e.steerBy[s.ID], fmt.Sprintf("%s on CPU %d", name, cpu))
			} else if len(irqs) == 0 {
				none = append(none, name)
			}
			for _, irq := range irqs {
				want[irq] = s.CPUs.String()
				e.irqBy[s.ID] = append(e.irqBy[s.ID], irq)
			}
		}
		if len(none) > 0 {
			e.addError(s.ID, fmt.Sprintf("irq_affinity: %s has no IRQ (a veth or other virtual interface: its packets are received, "+
				"XDP included, on the CPU of the process sending to it; place that process with a strategy's cpus)", strings.Join(none, ", ")))
		}
	}
	var errs []error
	added := false
	for irq := range want {
		if _, ok := e.irqs[irq]; !ok {
			b, err := os.ReadFile(filepath.Join(e.root, "irq", strconv.Itoa(irq), "smp_affinity_list"))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			e.irqs[irq], added = strings.TrimSpace(string(b)), true
		}
	}
	// Written down before they are steered (see Sync).
	if added {
		errs = append(errs, e.save())
	}
	for irq, cpus := range want {
		file := filepath.Join(e.root, "irq", strconv.Itoa(irq), "smp_affinity_list")
		if _, ok := e.irqs[irq]; !ok {
			continue
		}
		if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != cpus {
			if err := os.WriteFile(file, []byte(cpus), 0); err != nil {
				errs = append(errs, fmt.Errorf("irq %d to cpus %s: %w", irq, cpus, err))
			}
		}
	}
	for irq, before := range e.irqs {
		if _, ok := want[irq]; !ok {
			errs = append(errs, restoreIRQ(e.root, irq, before))
			delete(e.irqs, irq)
		}
	}
	for name, cpu := range steer {
		if had, ok := e.steered[name]; ok && had == cpu {
			continue
		}
		if err := e.xdpSteer(name, cpu); err != nil {
			errs = append(errs, fmt.Errorf("steer %s's XDP work to CPU %d: %w", name, cpu, err))
			continue
		}
		e.steered[name] = cpu
	}
	for name := range e.steered {
		if _, ok := steer[name]; !ok {
			errs = append(errs, e.xdpSteer(name, -1))
			delete(e.steered, name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, s := range strategies {
			if len(s.IRQAffinity) > 0 {
				e.addError(s.ID, "irq_affinity: "+err.Error())
			}
		}
	}
}

// SetXDPSteer gives the engine the dataplane's hand-over of an
// interface's XDP work to a CPU (-1: back to the receiving CPU), for
// irq_affinity's interfaces without IRQs (veth). Without it, such an
// interface is named in the strategy's error.
func (e *Engine) SetXDPSteer(fn func(ifname string, cpu int) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.xdpSteer = fn
}

// restoreIRQ gives IRQ irq its affinity before; an IRQ gone is no error.
func restoreIRQ(proc string, irq int, before string) error {
	err := os.WriteFile(filepath.Join(proc, "irq", strconv.Itoa(irq), "smp_affinity_list"), []byte(before), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// addError adds msg to strategy id's errors of this Sync.
func (e *Engine) addError(id uint32, msg string) {
	if e.Errors[id] != "" {
		msg = e.Errors[id] + "; " + msg
	}
	e.Errors[id] = msg
}
