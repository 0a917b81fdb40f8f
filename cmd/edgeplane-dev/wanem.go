// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/wanem"
)

// newWanemCmd is the lab's WAN link emulator: `edgeplane-dev wanem` runs
// it, `wanem set` and `wanem show` talk to a running one.
func newWanemCmd() *cobra.Command {
	var a, b, sock string
	var f wanemFlags
	var debug bool
	c := &cobra.Command{
		Use:   "wanem --a IF --b IF [--control SOCK] [--delay D] [--jitter J] [--loss L] [--rate R]",
		Short: "Emulate a WAN link between two interfaces (delay, jitter, loss, rate)",
		Long: `Bridges interfaces --a and --b of the current network namespace frame by
frame and impairs both directions with the settings given, until SIGTERM
or SIGINT. This kernel has no netem, so the lab runs this instead.

Loss comes first (each frame on its own), then the rate queue (tail drop
beyond --queue bytes, by default what 50 ms at the rate holds, at least
64 KiB), then delay with jitter uniform within ±J. Frames keep their order.
Change the settings while it runs with 'edgeplane-dev wanem set'.

  edgeplane-dev wanem --a a --b b --control /run/wan1.sock --delay 20ms --loss 1% --rate 50mbit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a == "" || b == "" {
				return errors.New("--a and --b name the interfaces to bridge")
			}
			imp, err := f.apply(cmd, wanem.Impairment{})
			if err != nil {
				return err
			}
			lvl := slog.LevelInfo
			if debug {
				lvl = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			return wanemRun(cmd.Context(), a, b, sock, imp, log)
		},
	}
	c.Flags().StringVar(&a, "a", "", "interface A (ab is the direction from A to B)")
	c.Flags().StringVar(&b, "b", "", "interface B")
	c.Flags().StringVar(&sock, "control", "", "unix socket to serve settings and counters on (empty: none)")
	c.Flags().BoolVar(&debug, "debug", false, "debug logging")
	f.add(c)
	c.AddCommand(newWanemSetCmd(), newWanemShowCmd())
	return c
}

// wanemRun runs the emulator and its control socket until ctx ends or
// either fails.
func wanemRun(ctx context.Context, a, b, sock string, imp wanem.Impairment, log *slog.Logger) error {
	// The emulator stands for a wire: every thread of it real-time, so
	// the load of the machine it shares never holds a frame.
	if err := wanem.RealTimeProcess(); err != nil {
		log.Warn("wanem stays at the default scheduling policy: CPU load can delay its frames", "error", err)
	}
	l, err := wanem.New(a, b, log)
	if err != nil {
		return err
	}
	l.Set(wanem.Both, imp)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctlErr := make(chan error, 1)
	if sock != "" {
		go func() {
			err := l.ServeControl(ctx, sock)
			if err != nil {
				cancel()
			}
			ctlErr <- err
		}()
	} else {
		ctlErr <- nil
	}
	err = l.Run(ctx)
	cancel()
	return errors.Join(err, <-ctlErr)
}

// wanemFlags are the impairment flags; only the flags given change a
// setting.
type wanemFlags struct {
	delay, jitter, loss, rate, queue string
}

func (f *wanemFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.delay, "delay", "0s", "one-way delay, e.g. 20ms")
	c.Flags().StringVar(&f.jitter, "jitter", "0s", "jitter: the delay varies uniformly within ±this, e.g. 2ms")
	c.Flags().StringVar(&f.loss, "loss", "0", "loss in percent, e.g. 1% (or 1)")
	c.Flags().StringVar(&f.rate, "rate", "0", "rate limit in bits/s, e.g. 50mbit, 1gbit, 500kbit (0: unlimited)")
	c.Flags().StringVar(&f.queue, "queue", "0", "rate queue limit in bytes (0: 50 ms at the rate, at least 64 KiB)")
}

// apply returns imp with the settings of the flags given on cmd.
func (f *wanemFlags) apply(cmd *cobra.Command, imp wanem.Impairment) (wanem.Impairment, error) {
	var err error
	changed := cmd.Flags().Changed
	if changed("delay") {
		if imp.Delay, err = time.ParseDuration(f.delay); err != nil {
			return imp, fmt.Errorf("--delay: %w", err)
		}
	}
	if changed("jitter") {
		if imp.Jitter, err = time.ParseDuration(f.jitter); err != nil {
			return imp, fmt.Errorf("--jitter: %w", err)
		}
	}
	if changed("loss") {
		if imp.LossPercent, err = wanem.ParseLoss(f.loss); err != nil {
			return imp, fmt.Errorf("--loss: %w", err)
		}
	}
	if changed("rate") {
		if imp.RateBps, err = wanem.ParseRate(f.rate); err != nil {
			return imp, fmt.Errorf("--rate: %w", err)
		}
	}
	if changed("queue") {
		if imp.QueueLimit, err = strconv.ParseUint(f.queue, 10, 64); err != nil {
			return imp, fmt.Errorf("--queue: want bytes: %w", err)
		}
	}
	if err := imp.Validate(); err != nil {
		return imp, err
	}
	return imp, nil
}

func newWanemSetCmd() *cobra.Command {
	var sock, dir string
	var f wanemFlags
	c := &cobra.Command{
		Use:   "set --control SOCK [--dir ab|ba|both] [--delay D] [--jitter J] [--loss L] [--rate R] [--queue BYTES]",
		Short: "Change a running emulator's settings; those not given keep their value",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := wanem.ParseDirection(dir)
			if err != nil {
				return err
			}
			cur, err := wanem.Control(sock, wanem.Request{Op: wanem.OpGet})
			if err != nil {
				return err
			}
			resp := cur
			for _, one := range []wanem.Direction{wanem.AB, wanem.BA} {
				if d != wanem.Both && d != one {
					continue
				}
				base := cur.AB.Impairment
				if one == wanem.BA {
					base = cur.BA.Impairment
				}
				imp, err := f.apply(cmd, base)
				if err != nil {
					return err
				}
				if resp, err = wanem.Control(sock, wanem.Request{Op: wanem.OpSet, Dir: one, Impairment: &imp}); err != nil {
					return err
				}
			}
			return wanemPrint(cmd.OutOrStdout(), resp)
		},
	}
	c.Flags().StringVar(&sock, "control", "", "control socket of the emulator")
	c.Flags().StringVar(&dir, "dir", "both", "direction: ab (received on A, sent on B), ba or both")
	f.add(c)
	_ = c.MarkFlagRequired("control")
	return c
}

func newWanemShowCmd() *cobra.Command {
	var sock string
	var asJSON bool
	c := &cobra.Command{
		Use:   "show --control SOCK [--json]",
		Short: "Print a running emulator's settings and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := wanem.Control(sock, wanem.Request{Op: wanem.OpGet})
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(resp)
			}
			return wanemPrint(cmd.OutOrStdout(), resp)
		},
	}
	c.Flags().StringVar(&sock, "control", "", "control socket of the emulator")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = c.MarkFlagRequired("control")
	return c
}

// wanemPrint prints the settings and counters of both directions.
func wanemPrint(out io.Writer, r wanem.Response) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DIR\tSETTINGS")
	dirs := []struct {
		name string
		s    wanem.DirStats
	}{{r.A + "->" + r.B, r.AB}, {r.B + "->" + r.A, r.BA}}
	for _, d := range dirs {
		fmt.Fprintf(w, "%s\t%s\n", d.name, d.s.Impairment)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "DIR\tFRAMES IN\tBYTES IN\tFRAMES OUT\tBYTES OUT\tLOSS DROPS\tQUEUE DROPS\tLIMIT DROPS\tTX ERRORS\tRX OVERRUNS\tPENDING\t")
	for _, d := range dirs {
		s := d.s
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", d.name, s.FramesIn, s.BytesIn, s.FramesOut, s.BytesOut,
			s.DroppedLoss, s.DroppedQueue, s.DroppedLimit, s.TxErrors, s.RxOverruns, s.Pending)
	}
	return w.Flush()
}
