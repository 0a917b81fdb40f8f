// SPDX-License-Identifier: Apache-2.0

package main

// get, apply, delete, stats --server and flows are a kubectl-style client
// of one agent's control API (internal/client). Objects are read and
// written in the YAML shape of the agent's config file, so what
// `get -o yaml` prints can be edited and fed back to `apply -f`. Nothing
// here is written per kind: the kinds, their columns and fields come from
// the config package's declarations.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"gopkg.in/yaml.v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Output formats of get.
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
)

func completeKind(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return client.CompletionKinds(config.Builtin()), cobra.ShellCompDirectiveNoFileComp
}

func newGetCmd() *cobra.Command {
	var af client.Flags
	var output string
	s := config.Builtin()
	c := &cobra.Command{
		Use:   "get " + strings.Join(client.CompletionKinds(s), "|") + "|gateways|sessions [ID|NAME...]",
		Short: "Show a gateway's objects, read from its agent's control API",
		Long: `Lists the objects of one kind the agent serves, or the ones named (by id;
interfaces by name). -o yaml prints them in the config file's shape, which
apply -f reads back; -o json prints them as the API carries them.`,
		Example: `  edgeplane get pdrs
  edgeplane get pdr 10 -o yaml > pdr10.yaml
  edgeplane get services
  edgeplane get interfaces --server 10.0.0.1:50051 --tls --tls-ca ca.pem
  edgeplane get gateways --server controller:50051 --selector site=factory
  edgeplane get sessions
  edgeplane get pdrs --server controller:50051 --selector site=factory`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeKind,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if args[0] == "gateways" || args[0] == "gateway" {
				return getGateways(cmd, &af, output, args[1:])
			}
			if args[0] == "sessions" || args[0] == "session" {
				return getSessions(cmd, &af, output, args[1:])
			}
			k, err := client.ParseKind(s, args[0])
			if err != nil {
				return err
			}
			refs, err := client.ParseRefs(s, k, args[1:])
			if err != nil {
				return err
			}
			conn, err := af.Connect(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer conn.Close()
			var msgs []proto.Message
			if len(refs) == 0 {
				msgs, err = conn.List(s, "get "+s.Plural(k), k)
			} else {
				msgs, err = conn.Get(k, refs)
			}
			if err != nil {
				return err
			}
			if len(msgs) == 0 && output == outTable {
				fmt.Fprintln(cmd.ErrOrStderr(), "no "+s.Plural(k))
				return nil
			}
			if err := printObjects(cmd.OutOrStdout(), s, k, msgs, output, len(refs) == 1); err != nil {
				return err
			}
			if k == config.KindPath && output == outTable {
				return printPathStatus(cmd.OutOrStdout(), conn, msgs)
			}
			if k == config.KindStrategy && output == outTable {
				return printStrategyStatus(cmd.OutOrStdout(), conn, msgs)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", outTable, "output format: table, json or yaml")
	af.Register(c)
	return c
}

// kindNames are the singular names of the kinds the API carries, as
// CompletionKinds orders them: for usage lines.
func kindNames(s *config.Schema) []string {
	var out []string
	for _, p := range client.CompletionKinds(s) {
		k, _ := s.Lookup(p)
		out = append(out, string(k))
	}
	return out
}

func checkOutput(format string) error {
	switch format {
	case outTable, outJSON, outYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q (want table, json or yaml)", format)
}

// printObjects prints msgs, objects of kind k. single prints one object
// asked for by name as itself in JSON, not as a list.
func printObjects(w io.Writer, s *config.Schema, k config.Kind, msgs []proto.Message, format string, single bool) error {
	if format == outJSON {
		return printJSON(w, s, k, msgs, single)
	}
	cfg, err := client.Objects{k: msgs}.ToConfig(s)
	if err != nil {
		return err
	}
	if format == outYAML {
		return printYAML(w, s, k, cfg)
	}
	// The table shows objects as the config model has them, so "*" is a
	// match field that matches anything and "-" a field not set.
	return client.WriteTable(w, s, k, s.Objects(cfg, k))
}

// printJSON prints protojson with the proto (= config) field names and
// every field present, as the REST API does: the kind's list response,
// or one object.
func printJSON(w io.Writer, s *config.Schema, k config.Kind, msgs []proto.Message, single bool) error {
	var m proto.Message
	if single && len(msgs) == 1 {
		m = msgs[0]
	} else {
		m = listResponse(s, k, msgs)
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("marshal json: %w", err)
	}
	// protojson varies its white space on purpose; indenting it again
	// makes the output the same from run to run.
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return fmt.Errorf("indent json: %w", err)
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// listResponse is msgs in kind k's List response message.
func listResponse(s *config.Schema, k config.Kind, msgs []proto.Message) proto.Message {
	r := client.NewListResponse(k)
	fd := r.ProtoReflect().Descriptor().Fields().Get(0)
	l := r.ProtoReflect().Mutable(fd).List()
	for _, m := range msgs {
		l.Append(protoreflect.ValueOfMessage(m.ProtoReflect()))
	}
	return r
}

// printYAML prints the objects as the config file holds them: under their
// list's key, always as a list.
func printYAML(w io.Writer, s *config.Schema, k config.Kind, cfg *config.Config) error {
	objs := s.Objects(cfg, k)
	// An empty list prints as [], not null.
	list := reflect.MakeSlice(reflect.SliceOf(s.Type(k)), 0, len(objs))
	for _, o := range objs {
		list = reflect.Append(list, reflect.ValueOf(o))
	}
	b, err := yaml.Marshal(map[string]any{s.Plural(k): list.Interface()})
	if err != nil {
		return fmt.Errorf("marshal yaml: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// printStrategyStatus prints, under the strategies' table, the processes
// each listed strategy holds with what was applied and the CPUs they ran
// on, what it changed for the others, and why it could not apply. An
// agent that does not say (older) prints none.
func printStrategyStatus(w io.Writer, conn *client.Conn, strategies []proto.Message) error {
	r, err := conn.ListStrategyStatus(conn.Ctx, &pb.ListRequest{})
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		return nil
	}
	if err != nil {
		return conn.Err("strategy status", err)
	}
	listed := listedIDs(strategies)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSTRATEGY\tPID\tCOMM\tTHREADS\tAPPLIED\tRAN ON")
	var notes []string
	for _, st := range r.GetStrategies() {
		if !listed[st.GetStrategy()] {
			continue
		}
		if len(st.GetProcesses()) == 0 {
			fmt.Fprintf(tw, "%d\t-\t-\t0\t-\t-\n", st.GetStrategy())
		}
		for _, p := range st.GetProcesses() {
			var cpus []string
			for _, c := range p.GetRanOn() {
				cpus = append(cpus, strconv.FormatUint(uint64(c), 10))
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\n", st.GetStrategy(), p.GetPid(), p.GetComm(), p.GetThreads(),
				orDash(p.GetApplied()), orDash(strings.Join(cpus, ",")))
		}
		if o := st.GetOthers(); o != "" {
			notes = append(notes, fmt.Sprintf("strategy %d: %s", st.GetStrategy(), o))
		}
		if e := st.GetError(); e != "" {
			notes = append(notes, fmt.Sprintf("strategy %d not applied: %s", st.GetStrategy(), e))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	return nil
}

// listedIDs returns the ids of the objects listed.
func listedIDs(msgs []proto.Message) map[uint32]bool {
	out := map[uint32]bool{}
	for _, m := range msgs {
		if o, ok := m.(interface{ GetId() uint32 }); ok {
			out[o.GetId()] = true
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printPathStatus prints, under the paths' table, each listed path's
// state as the agent's monitor judges it. An agent without a monitor
// (older) prints none.
func printPathStatus(w io.Writer, conn *client.Conn, paths []proto.Message) error {
	r, err := conn.ListPathStatus(conn.Ctx, &pb.ListRequest{})
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		return nil
	}
	if err != nil {
		return conn.Err("path status", err)
	}
	listed := listedIDs(paths)
	us := func(v uint64) string {
		return (time.Duration(v) * time.Microsecond).Round(10 * time.Microsecond).String()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPATH\tSTATE\tRTT\tJITTER\tMIN RTT\tLOSS\tPROBES\tTCP RTT\tSINCE\tWHY")
	for _, p := range r.GetPaths() {
		if !listed[p.GetPath()] {
			continue
		}
		// The passive RTT from the flows' TCP timestamps, with its
		// samples; "-" before the first.
		tcp := "-"
		if n := p.GetTcpRttSamples(); n > 0 {
			tcp = fmt.Sprintf("%s (%d)", us(p.GetTcpRttUs()), n)
		}
		if !p.GetMonitored() {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t-\t-\t%s\t-\tmonitor off\n", p.GetPath(), p.GetState(), tcp)
			continue
		}
		since := p.GetSince()
		if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
			since = time.Since(t).Round(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.1f%%\t%d/%d\t%s\t%s\t%s\n", p.GetPath(), p.GetState(),
			us(p.GetRttUs()), us(p.GetJitterUs()), us(p.GetMinRttUs()), 100*p.GetLoss(),
			p.GetProbesAnswered(), p.GetProbesSent(), tcp, since, p.GetWhy())
	}
	return tw.Flush()
}

// getGateways prints a controller's gateways (those named, or all the
// selector picks).
// getSessions prints the PFCP sessions the user plane carries (those of
// the UP SEIDs named, in hex), a line per PDR with its counters.
func getSessions(cmd *cobra.Command, af *client.Flags, output string, seids []string) error {
	if output == outYAML {
		return errors.New("sessions print as a table or json")
	}
	want := map[uint64]bool{}
	for _, a := range seids {
		v, err := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
		if err != nil {
			return fmt.Errorf("session %q: want a UP SEID in hex", a)
		}
		want[v] = true
	}
	conn, err := af.Connect(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer conn.Close()
	// Page by page, the server picking the SEIDs asked for.
	q := &pb.ListSessionsRequest{UpSeid: slices.Collect(maps.Keys(want))}
	r := &pb.ListSessionsResponse{}
	for {
		page, err := conn.ListSessions(conn.Ctx, q)
		if err != nil {
			return conn.Err("get sessions", err)
		}
		r.Sessions = append(r.Sessions, page.GetSessions()...)
		if page.GetNext() == 0 {
			break
		}
		q.After = page.GetNext()
	}
	w := cmd.OutOrStdout()
	if output == outJSON {
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true}.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	if len(r.GetSessions()) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no sessions")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEID\tSMF\tPDR\tPREC\tDIR\tTEID\tUE\tQFI\tSDF\tFAR\tACTION\tTO\tPACKETS\tBYTES")
	for _, s := range r.GetSessions() {
		for _, p := range s.GetPdrs() {
			teid, to, qfi := "-", "-", "-"
			if p.GetTeid() != 0 {
				teid = fmt.Sprintf("%#x", p.GetTeid())
			}
			if p.GetOuterAddr() != "" {
				to = fmt.Sprintf("%s %#x", p.GetOuterAddr(), p.GetOuterTeid())
			}
			if p.GetQfi() != 0 {
				qfi = strconv.FormatUint(uint64(p.GetQfi()), 10)
			}
			act := p.GetAction()
			if p.GetGateClosed() {
				act += " (gate closed)"
			}
			far := strconv.FormatUint(uint64(p.GetFar()), 10)
			if p.GetMar() != 0 {
				// A multi-access PDR: its MAR and mode, each access's
				// peer and state (* the preferred one).
				far = fmt.Sprintf("MAR %d %s", p.GetMar(), p.GetSteering())
				var acc []string
				for _, a := range p.GetAccesses() {
					st := "down"
					if a.GetUp() {
						st = "up"
						if a.GetRttUs() != 0 {
							st = fmt.Sprintf("up %.1fms", float64(a.GetRttUs())/1e3)
						}
					}
					mark := ""
					if a.GetPreferred() {
						mark = "*"
					}
					acc = append(acc, fmt.Sprintf("%s%s %#x (%s)", mark, a.GetOuterAddr(), a.GetOuterTeid(), st))
				}
				to = strings.Join(acc, " | ")
			}
			fmt.Fprintf(tw, "%x\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.GetUpSeid(), orDash(s.GetCpNode()),
				p.GetId(), p.GetPrecedence(), p.GetDirection(), teid, orDash(p.GetUeIp()), qfi, orDash(strings.Join(p.GetSdf(), "; ")),
				far, act, to, p.GetPackets(), p.GetBytes())
		}
	}
	return tw.Flush()
}

func getGateways(cmd *cobra.Command, af *client.Flags, output string, names []string) error {
	if output == outYAML {
		return errors.New("gateways print as a table or json")
	}
	conn, err := af.Connect(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := conn.ListGateways(conn.Ctx, &pb.ListRequest{Target: conn.Target})
	if err != nil {
		return conn.Err("get gateways", err)
	}
	if len(names) > 0 {
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		var keep []*pb.GatewayStatus
		for _, g := range r.GetGateways() {
			if want[g.GetName()] {
				keep = append(keep, g)
				delete(want, g.GetName())
			}
		}
		if len(want) > 0 {
			return fmt.Errorf("no gateway %s", strings.Join(slices.Sorted(maps.Keys(want)), ", "))
		}
		r.Gateways = keep
	}
	w := cmd.OutOrStdout()
	if output == outJSON {
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(r)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err = w.Write(buf.Bytes())
		return err
	}
	if len(r.GetGateways()) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no gateways")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREACHABLE\tSTATE\tCOMMITTED\tDRIFT\tHEARTBEAT\tDATAPLANE\tPATHS UP/DOWN\tOBJECTS\tLABELS")
	var notes []string
	for _, g := range r.GetGateways() {
		beat := "-"
		if ms := g.GetHeartbeatUnixMs(); ms > 0 {
			beat = time.Since(time.UnixMilli(ms)).Round(100*time.Millisecond).String() + " ago"
		}
		dp := "ok"
		if !g.GetDataplaneOk() {
			dp = "FAILING"
		}
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(g.GetLabels())) {
			labels = append(labels, k+"="+g.GetLabels()[k])
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%v\t%s\t%s\t%d/%d\t%d\t%s\n", g.GetName(), g.GetReachable(), g.GetState(),
			g.GetCommittedRevision(), g.GetDrift(), beat, dp, g.GetPathsUp(), g.GetPathsDown(), g.GetObjects(), orDash(strings.Join(labels, ",")))
		if e := g.GetError(); e != "" {
			notes = append(notes, g.GetName()+": "+e)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	return nil
}
