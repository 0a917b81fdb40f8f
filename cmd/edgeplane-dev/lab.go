// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// labFlags are the flags every lab subcommand takes to name its lab.
type labFlags struct {
	config string
	name   string
	bins   *bins
}

func (f *labFlags) register(c *cobra.Command) {
	c.PersistentFlags().StringVar(&f.config, "config", "", "lab config file (default: the built-in one, see `edgeplane-dev lab --help`)")
	c.PersistentFlags().StringVar(&f.name, "name", "", "lab name, overriding the config's (namespace prefix, 1-5 of a-z0-9)")
}

// lab loads the config and names the lab.
func (f *labFlags) lab() (*lab.SDWAN, error) {
	cfg, err := lab.LoadConfig(f.config)
	if err != nil {
		return nil, err
	}
	if f.name != "" {
		cfg.Name = f.name
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	bin, dev, err := f.bins.both()
	if err != nil {
		return nil, err
	}
	return lab.NewSDWAN(cfg, bin, dev), nil
}

func newLabCmd(b *bins) *cobra.Command {
	f := labFlags{bins: b}
	c := &cobra.Command{
		Use:   "lab",
		Short: "Two-site SD-WAN lab in network namespaces: two XDP gateways over two emulated WAN links",
		Long: `Builds, in network namespaces on this machine (the lab's name, "ep" by
default, prefixes every one), two sites joined by two emulated WAN links:

  host A ── gateway A ══ wan1 (5 ms) ═════════════ gateway B ── host B
   epa        epgwa  ╚══ wan2 (30 ms, 1 % loss) ══╝  epgwb       epb
                      (namespaces epwan1, epwan2)

  host A eth0 10.1.0.2/24 fd01::2/64       host B eth0 10.2.0.2/24 fd02::2/64
  gw A   lan0 10.1.0.1/24 fd01::1/64       gw B   lan0 10.2.0.1/24 fd02::1/64
         wan1 172.16.1.1  wan2 172.16.2.1         wan1 172.16.1.2  wan2 172.16.2.2

Each gateway runs an edgeplane agent with GRE path 1 over wan1 (key 1) and
path 2 over wan2 (key 2): DSCP 46 and UDP for the other site take path 2,
everything else path 1; the gateways have no kernel route to the other
site, so only the overlay connects them. Each WAN link namespace runs an
emulator (edgeplane-dev wanem) bridging veths a (toward gateway A) and b with
the link's delay, jitter, loss and rate.

Configs, logs, pid files and the emulators' control sockets are under
/run/edgeplane/lab/NAME/, the agents' pins under /sys/fs/bpf/NAMEgwa and
NAMEgwb. Run commands in a namespace with ip netns exec, e.g.
  ip netns exec epa ping 10.2.0.2

The built-in config (--config FILE overrides only the fields it sets):

` + indent(string(lab.DefaultConfigYAML), "  "),
		Args: cobra.NoArgs,
	}
	f.register(c)
	c.AddCommand(newLabUpCmd(&f), newLabDownCmd(&f), newLabStatusCmd(&f), newLabLinkCmd(&f), newLabFleetCmd(&f))
	return c
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = pre + l
	}
	return strings.Join(lines, "\n")
}

func newLabUpCmd(f *labFlags) *cobra.Command {
	var keep bool
	c := &cobra.Command{
		Use:   "up",
		Short: "Build the lab, start its emulators and agents, wait until host A reaches host B",
		Long: `Builds the lab's namespaces and links, starts one emulator per WAN link
and one agent per gateway as background processes, and returns once both
agents have committed their rules and host A reaches host B over IPv4
and IPv6.

Running up again is safe: a lab of this name that is up with the same
config is left running untouched (also the link settings changed with
lab link since); anything else under the name (other
link settings, a missing namespace or process, leftovers of a failed
run) is torn down and rebuilt from scratch. If up fails it prints the
tail of the process logs and removes what it built (unless
--keep-on-failure).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.lab()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			l.Progress = out
			l.KeepOnFailure = keep
			rebuilt, err := l.Up(cmd.Context())
			if err != nil {
				return err
			}
			if rebuilt {
				fmt.Fprintf(out, "lab %s is up: host A %s (%s, %s), host B %s (%s, %s)\n", l.Name, l.A, lab.AddrA, lab.AddrA6, l.B, lab.AddrB, lab.AddrB6)
			}
			fmt.Fprintf(out, "try: ip netns exec %s ping %s   (path 1; -Q 184 takes path 2)\n", l.A, lab.AddrB)
			fmt.Fprintf(out, "     edgeplane-dev lab status%s   edgeplane-dev lab link wan2 --loss 5%%%s   edgeplane-dev lab down%s\n", nameArg(l), nameArg(l), nameArg(l))
			return nil
		},
	}
	c.Flags().BoolVar(&keep, "keep-on-failure", false, "leave a lab that failed to come up in place, to inspect it")
	return c
}

func nameArg(l *lab.SDWAN) string {
	if l.Name == lab.DefaultConfig().Name {
		return ""
	}
	return " --name " + l.Name
}

func newLabDownCmd(f *labFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop the lab's processes, remove its pins, namespaces and run dir",
		Long: `Stops the lab's agents and emulators (found by their command lines, so
also after a failed up or without pid files), takes the dataplane off
both gateways (edgeplane down for each pin dir), deletes the namespaces
and /run/edgeplane/lab/NAME. Nothing of the lab is left afterwards; down
on a lab that does not exist succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.lab()
			if err != nil {
				return err
			}
			l.Progress = cmd.OutOrStdout()
			if err := l.Down(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s is down\n", l.Name)
			return nil
		},
	}
}

func newLabStatusCmd(f *labFlags) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Namespaces, processes, per-path counters of each gateway and each WAN link's emulator",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.lab()
			if err != nil {
				return err
			}
			st := l.Status()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printLabStatus(cmd, st)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printLabStatus(cmd *cobra.Command, st *lab.Status) error {
	out := cmd.OutOrStdout()
	if st.State == lab.StateDown {
		fmt.Fprintf(out, "lab %s: down (none of its namespaces, processes or pins exist)\n", st.Name)
		return nil
	}
	fmt.Fprintf(out, "lab %s: %s (%s)\n\n", st.Name, st.State, st.RunDir)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tROLE\tPRESENT")
	for _, n := range st.Namespaces {
		fmt.Fprintf(w, "%s\t%s\t%v\n", n.Name, n.Role, n.Present)
	}
	fmt.Fprintln(w, "\t\t")
	fmt.Fprintln(w, "PROCESS\tKIND\tPID\tLOG")
	for _, p := range st.Processes {
		pid := "not running"
		if p.Running {
			pid = strings.Trim(fmt.Sprint(p.Pids), "[]")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Name, p.Kind, pid, p.Log)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "GATEWAY\tGENERATION\tPATH\tLINK\tTX PKTS\tTX BYTES\tRX PKTS\tRX BYTES\t")
	for _, g := range st.Gateways {
		if g.Error != "" {
			fmt.Fprintf(w, "%s\t%s\t\t\t\t\t\t\t\n", g.Name, g.Error)
			continue
		}
		if len(g.Paths) == 0 {
			fmt.Fprintf(w, "%s\t%d\t-\t\t\t\t\t\t\n", g.Name, g.Generation)
		}
		for _, p := range g.Paths {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t\n", g.Name, g.Generation, p.ID, p.Link, p.TxPackets, p.TxBytes, p.RxPackets, p.RxBytes)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LINK\tDIR\tSETTINGS\tFRAMES IN\tFRAMES OUT\tLOST\tQUEUE DROPS\tPENDING")
	for _, ls := range st.Links {
		if ls.Error != "" {
			fmt.Fprintf(w, "%s\t\t%s\n", ls.Name, ls.Error)
			continue
		}
		for _, d := range []struct {
			name string
			s    *wanem.DirStats
		}{{"a->b", ls.AB}, {"b->a", ls.BA}} {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", ls.Name, d.name, d.s.Impairment, d.s.FramesIn, d.s.FramesOut,
				d.s.DroppedLoss, d.s.DroppedQueue+d.s.DroppedLimit, d.s.Pending)
		}
	}
	return w.Flush()
}

func newLabLinkCmd(f *labFlags) *cobra.Command {
	var dir string
	var delay, jitter, loss, rate string
	c := &cobra.Command{
		Use:   "link LINK [--delay D] [--jitter J] [--loss L] [--rate R] [--dir ab|ba|both]",
		Short: "Change a running WAN link's delay, jitter, loss or rate",
		Long: `Changes the emulator of a running link (wan1 or wan2) through its control
socket. Settings not given keep their current value. --dir ab changes
only gateway A -> gateway B, ba the reverse, both (default) each.

  edgeplane-dev lab link wan1 --delay 30ms --jitter 2ms --loss 1% --rate 50mbit`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := f.lab()
			if err != nil {
				return err
			}
			d, err := wanem.ParseDirection(dir)
			if err != nil {
				return err
			}
			var ch lab.LinkChange
			for _, o := range []struct {
				flag string
				v    *string
				dst  **string
			}{{"delay", &delay, &ch.Delay}, {"jitter", &jitter, &ch.Jitter}, {"loss", &loss, &ch.Loss}, {"rate", &rate, &ch.Rate}} {
				if cmd.Flags().Changed(o.flag) {
					*o.dst = o.v
				}
			}
			r, err := l.SetLink(args[0], d, ch)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s a->b: %s\n%s b->a: %s\n", args[0], r.AB.Impairment, args[0], r.BA.Impairment)
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "both", "direction: ab (gateway A to B), ba or both")
	c.Flags().StringVar(&delay, "delay", "", "one-way delay, e.g. 30ms")
	c.Flags().StringVar(&jitter, "jitter", "", "jitter around the delay, e.g. 2ms")
	c.Flags().StringVar(&loss, "loss", "", "loss in percent, e.g. 1%")
	c.Flags().StringVar(&rate, "rate", "", "rate limit, e.g. 50mbit (0: unlimited)")
	return c
}

func newLabFleetCmd(f *labFlags) *cobra.Command {
	var hold time.Duration
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Run the lab as a fleet: etcd, a controller and the two gateways under it",
		Long: `Starts a 3-member etcd cluster and a controller in this process, writes
each gateway's objects to etcd for it alone (gateway=NAMEgwa, labels
site=a; NAMEgwb, site=b), and brings the lab up with its agents joined
(agent --etcd, over a management link from the host to each gateway
namespace: 10.252.0.0/30 and 10.252.1.0/30). It then applies a rule to
both gateways by label, waits until both have committed it, and serves
the controller's API on ` + lab.FleetAPI + ` (no tokens, loopback) until
interrupted or --for has passed:

  edgeplane get gateways --server ` + lab.FleetAPI + `
  edgeplane get pdrs --server ` + lab.FleetAPI + ` --gateway epgwa
  edgeplane apply -f rule.yaml --server ` + lab.FleetAPI + ` --selector lab=ep

When it stops, etcd and the controller go; the lab stays up and its
agents keep serving their last committed state (edgeplane-dev lab down
removes it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := f.lab()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			l.Progress = out
			ctx := cmd.Context()
			fl, err := lab.StartFleet(ctx, l)
			if err != nil {
				return err
			}
			defer fl.Stop()
			// A rule for every gateway of the lab, by label: UDP to the
			// discard port dropped at both LANs.
			ops, err := api.Ops([]*pb.Operation{{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{Pdr: &pb.Pdr{
				Id: 90, Precedence: 1, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: "9"}}}}}}})
			if err != nil {
				return err
			}
			sel := &pb.Target{Selector: map[string]string{"lab": l.Name}}
			t0 := time.Now()
			rev, err := fl.Ctl.ApplyTo(sel, ops, false)
			if err != nil {
				return fmt.Errorf("apply to lab=%s: %w", l.Name, err)
			}
			if err := fl.WaitConverged(ctx, 10*time.Second); err != nil {
				return err
			}
			fmt.Fprintf(out, "applied pdr 90 (drop UDP to port 9) to lab=%s: etcd revision %d, committed by both gateways within %s\n",
				l.Name, rev, time.Since(t0).Round(time.Millisecond))
			if err := fl.PrintGateways(out); err != nil {
				return err
			}
			fmt.Fprintf(out, "try: edgeplane get gateways --server %s\n     edgeplane get pdrs --server %s --selector lab=%s\n", lab.FleetAPI, lab.FleetAPI, l.Name)
			if hold > 0 {
				fmt.Fprintf(out, "serving for %s (Ctrl-C stops sooner)\n", hold)
			} else {
				fmt.Fprintln(out, "serving until interrupted (Ctrl-C)")
			}
			var timeout <-chan time.Time
			if hold > 0 {
				timeout = time.After(hold)
			}
			select {
			case <-ctx.Done():
			case <-timeout:
			}
			fmt.Fprintf(out, "stopping etcd and the controller; the lab stays up, its agents serving their last state (edgeplane-dev lab down%s removes it)\n", nameArg(l))
			return nil
		},
	}
	c.Flags().DurationVar(&hold, "for", 0, "stop after this long (0: when interrupted)")
	return c
}
