// SPDX-License-Identifier: Apache-2.0

package main

// get, apply, delete and stats --server are a kubectl-style client of one
// agent's control API (edgeplane.v1 over gRPC). Objects are read and
// written in the YAML shape of the agent's config file, so what
// `get -o yaml` prints can be edited and fed back to `apply -f`.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

const (
	defaultServer = "127.0.0.1:50051"
	// tokenEnv holds the bearer token when --token is not given. The flag
	// does not show it as its default, so --help never prints a secret.
	tokenEnv = "EDGEPLANE_TOKEN"
)

// Output formats of get.
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
)

// kind is an object kind as the commands name it: singular, and plural as
// the list of the config file.
type kind struct {
	name, plural string
	ref          pb.Kind
}

var (
	kindInterface = kind{"interface", "interfaces", pb.Kind_KIND_INTERFACE}
	kindPath      = kind{"path", "paths", pb.Kind_KIND_PATH}
	kindFAR       = kind{"far", "fars", pb.Kind_KIND_FAR}
	kindPDR       = kind{"pdr", "pdrs", pb.Kind_KIND_PDR}
	kindLBR       = kind{"lbr", "lbrs", pb.Kind_KIND_LBR}
	kindService   = kind{"service", "services", pb.Kind_KIND_SERVICE}
	// allKinds is in the order objects are listed, applied and printed:
	// what is referred to before what refers to it (an LBR's members are
	// FARs, a service names its LBR). The agent checks references only
	// after the whole batch, but an error about a later object is easier
	// to read when what it refers to came first.
	allKinds = []kind{kindInterface, kindPath, kindFAR, kindLBR, kindService, kindPDR}
)

// parseKind accepts a kind's singular or plural name, in any case.
func parseKind(s string) (kind, error) {
	l := strings.ToLower(s)
	for _, k := range allKinds {
		if l == k.name || l == k.plural {
			return k, nil
		}
	}
	return kind{}, fmt.Errorf("unknown kind %q (want %s)", s, kindList("or"))
}

// kindList names every kind (plural) as completionKinds orders them,
// conj before the last.
func kindList(conj string) string {
	names := completionKinds()
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

// completionKinds are the plural kind names in the reverse of allKinds:
// the rules, which are listed and changed most, first.
func completionKinds() []string {
	out := make([]string, len(allKinds))
	for i, k := range allKinds {
		out[len(allKinds)-1-i] = k.plural
	}
	return out
}

// parseRefs turns command line IDs (names for interfaces) into refs,
// dropping repeats.
func parseRefs(k kind, args []string) ([]*pb.Ref, error) {
	var refs []*pb.Ref
	seen := map[string]bool{}
	for _, a := range args {
		r := &pb.Ref{Kind: k.ref}
		if k == kindInterface {
			if a == "" {
				return nil, errors.New("empty interface name")
			}
			r.Name = a
		} else {
			id, err := strconv.ParseUint(a, 10, 32)
			if err != nil || id == 0 {
				return nil, fmt.Errorf("%s id %q: want a number 1-%d", k.name, a, uint32(1<<32-1))
			}
			r.Id = uint32(id)
			a = strconv.FormatUint(id, 10)
		}
		if !seen[a] {
			seen[a] = true
			refs = append(refs, r)
		}
	}
	return refs, nil
}

func refKey(r *pb.Ref) string {
	if r.GetKind() == pb.Kind_KIND_INTERFACE {
		return r.GetName()
	}
	return strconv.FormatUint(uint64(r.GetId()), 10)
}

func completeKind(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completionKinds(), cobra.ShellCompDirectiveNoFileComp
}

// apiFlags are the connection flags of the commands that talk to an
// agent's control API.
type apiFlags struct {
	server             string
	token              string
	tls                bool
	tlsCA              string
	insecureSkipVerify bool
	timeout            time.Duration
}

// apiOnlyFlags are the flags that mean nothing without --server on a
// command (stats) that can also work without the API.
var apiOnlyFlags = []string{"token", "tls", "tls-ca", "insecure-skip-verify", "timeout"}

func (f *apiFlags) register(c *cobra.Command) {
	fs := c.Flags()
	fs.StringVar(&f.server, "server", defaultServer, "the agent's gRPC API address (host:port)")
	fs.StringVar(&f.token, "token", "", "bearer token (default $"+tokenEnv+")")
	fs.BoolVar(&f.tls, "tls", false, "connect over TLS")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA certificate (PEM) to verify the agent with instead of the system roots (implies --tls)")
	fs.BoolVar(&f.insecureSkipVerify, "insecure-skip-verify", false, "do not verify the agent's certificate (implies --tls; for tests only)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long")
}

// secure reports whether the connection uses TLS.
func (f *apiFlags) secure() bool {
	return f.tls || f.tlsCA != "" || f.insecureSkipVerify
}

func (f *apiFlags) credentials() (credentials.TransportCredentials, error) {
	if !f.secure() {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.insecureSkipVerify}
	if f.tlsCA != "" {
		pemData, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("read tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("tls ca %s: no PEM certificate in the file", f.tlsCA)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}

// isLoopback reports whether a gRPC target is on this host: a loopback
// address, localhost or a unix socket.
func isLoopback(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	target = strings.TrimPrefix(target, "dns:///")
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// apiConn is a connection to one agent, and the context (deadline,
// token) every call of a command runs in.
type apiConn struct {
	pb.GatewayClient
	ctx      context.Context
	cancel   context.CancelFunc
	conn     *grpc.ClientConn
	flags    *apiFlags
	hasToken bool
}

// connect returns a client of the agent at --server. grpc.NewClient does
// not dial yet: a server that cannot be reached fails the first call.
func (f *apiFlags) connect(cmd *cobra.Command) (*apiConn, error) {
	creds, err := f.credentials()
	if err != nil {
		return nil, err
	}
	token := f.token
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	if token != "" && !f.secure() && !isLoopback(f.server) {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: sending the bearer token to %s unencrypted (give --tls)\n", f.server)
	}
	conn, err := grpc.NewClient(f.server, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.server, err)
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return &apiConn{GatewayClient: pb.NewGatewayClient(conn), ctx: ctx, cancel: cancel, conn: conn, flags: f, hasToken: token != ""}, nil
}

// Close ends the connection.
func (c *apiConn) Close() {
	c.cancel()
	_ = c.conn.Close()
}

// rpcError is a call the agent refused or that failed on the way.
type rpcError struct {
	op string
	st *status.Status
	// hint says what to try, when the code suggests something.
	hint string
	// ops names the object of each operation of an Apply batch ("pdr
	// 10"), added to the message lines that point into the batch.
	ops []string
}

// Error returns "op: Code: message", with the message on lines of its own
// when it is a list of field errors ("path: reason", one per line).
func (e *rpcError) Error() string {
	var b strings.Builder
	b.WriteString(e.op + ": " + e.st.Code().String() + ":")
	msg := e.st.Message()
	if strings.Contains(msg, "\n") || hasFieldViolations(e.st) {
		for _, line := range strings.Split(msg, "\n") {
			b.WriteString("\n  " + line + e.opNote(line))
		}
		if e.hint != "" {
			b.WriteString("\n(" + e.hint + ")")
		}
		return b.String()
	}
	b.WriteString(" " + msg + e.opNote(msg))
	if e.hint != "" {
		b.WriteString(" (" + e.hint + ")")
	}
	return b.String()
}

// opNote returns " (pdr 10)" for a line about "operations[N]...".
func (e *rpcError) opNote(line string) string {
	rest, ok := strings.CutPrefix(line, "operations[")
	if !ok {
		return ""
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return ""
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 || i >= len(e.ops) {
		return ""
	}
	return " (" + e.ops[i] + ")"
}

// Unwrap returns the gRPC status error.
func (e *rpcError) Unwrap() error {
	return e.st.Err()
}

func hasFieldViolations(st *status.Status) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return true
		}
	}
	return false
}

// callErr describes a failed call made for op.
func (c *apiConn) callErr(op string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	e := &rpcError{op: op, st: st}
	switch st.Code() {
	case codes.Unauthenticated:
		if !c.hasToken {
			e.hint = "give --token or set " + tokenEnv
		}
	case codes.Unavailable:
		e.hint = "is an agent serving its API on " + c.flags.server + "?"
		if !c.flags.secure() {
			e.hint += " if it serves TLS, give --tls"
		}
	case codes.DeadlineExceeded:
		e.hint = "no answer within --timeout " + c.flags.timeout.String()
	}
	return e
}

// objects are objects of every kind as the API carries them.
type objects struct {
	Interfaces []*pb.Interface
	Paths      []*pb.Path
	FARs       []*pb.Far
	PDRs       []*pb.Pdr
	LBRs       []*pb.Lbr
	Services   []*pb.Service
}

func (o *objects) count(k kind) int {
	switch k {
	case kindInterface:
		return len(o.Interfaces)
	case kindPath:
		return len(o.Paths)
	case kindFAR:
		return len(o.FARs)
	case kindLBR:
		return len(o.LBRs)
	case kindService:
		return len(o.Services)
	}
	return len(o.PDRs)
}

// sort orders every list by id (interfaces by name).
func (o *objects) sort() {
	slices.SortFunc(o.Interfaces, func(a, b *pb.Interface) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.SortFunc(o.Paths, func(a, b *pb.Path) int { return cmp.Compare(a.GetId(), b.GetId()) })
	slices.SortFunc(o.FARs, func(a, b *pb.Far) int { return cmp.Compare(a.GetId(), b.GetId()) })
	slices.SortFunc(o.PDRs, func(a, b *pb.Pdr) int { return cmp.Compare(a.GetId(), b.GetId()) })
	slices.SortFunc(o.LBRs, func(a, b *pb.Lbr) int { return cmp.Compare(a.GetId(), b.GetId()) })
	slices.SortFunc(o.Services, func(a, b *pb.Service) int { return cmp.Compare(a.GetId(), b.GetId()) })
}

// fromPB converts the agent's objects of one kind with conv, naming the
// first that does not convert.
func fromPB[P interface{ GetId() uint32 }, T any](kind string, in []P, conv func(P) (T, error)) ([]T, error) {
	var out []T
	for _, v := range in {
		x, err := conv(v)
		if err != nil {
			return nil, fmt.Errorf("%s %d from the agent: %w", kind, v.GetId(), err)
		}
		out = append(out, x)
	}
	return out, nil
}

// toConfig returns o in the config model (only the object lists set),
// normalized as the agent normalizes a config, so that objects compare
// equal however they were written.
func (o *objects) toConfig() (*config.Config, error) {
	c := &config.Config{}
	for _, v := range o.Interfaces {
		c.Interfaces = append(c.Interfaces, api.InterfaceFromPB(v))
	}
	var err error
	if c.Paths, err = fromPB("path", o.Paths, api.PathFromPB); err != nil {
		return nil, err
	}
	if c.FARs, err = fromPB("far", o.FARs, api.FARFromPB); err != nil {
		return nil, err
	}
	for _, v := range o.LBRs {
		c.LBRs = append(c.LBRs, api.LBRFromPB(v))
	}
	if c.Services, err = fromPB("service", o.Services, api.ServiceFromPB); err != nil {
		return nil, err
	}
	if c.PDRs, err = fromPB("pdr", o.PDRs, api.PDRFromPB); err != nil {
		return nil, err
	}
	c.Normalize()
	return c, nil
}

// list reads every object of kind k, sorted.
func (c *apiConn) list(op string, k kind, o *objects) error {
	var err error
	switch k {
	case kindInterface:
		var r *pb.ListInterfacesResponse
		if r, err = c.ListInterfaces(c.ctx, &pb.ListRequest{}); err == nil {
			o.Interfaces = r.GetInterfaces()
		}
	case kindPath:
		var r *pb.ListPathsResponse
		if r, err = c.ListPaths(c.ctx, &pb.ListRequest{}); err == nil {
			o.Paths = r.GetPaths()
		}
	case kindFAR:
		var r *pb.ListFarsResponse
		if r, err = c.ListFars(c.ctx, &pb.ListRequest{}); err == nil {
			o.FARs = r.GetFars()
		}
	case kindLBR:
		var r *pb.ListLbrsResponse
		if r, err = c.ListLbrs(c.ctx, &pb.ListRequest{}); err == nil {
			o.LBRs = r.GetLbrs()
		}
	case kindService:
		var r *pb.ListServicesResponse
		if r, err = c.ListServices(c.ctx, &pb.ListRequest{}); err == nil {
			o.Services = r.GetServices()
		}
	default:
		var r *pb.ListPdrsResponse
		if r, err = c.ListPdrs(c.ctx, &pb.ListRequest{}); err == nil {
			o.PDRs = r.GetPdrs()
		}
	}
	if err != nil {
		return c.callErr(op, err)
	}
	o.sort()
	return nil
}

// listAll reads every object the agent has.
func (c *apiConn) listAll(op string) (*objects, error) {
	o := &objects{}
	for _, k := range allKinds {
		err := c.list(op+": list "+k.plural, k, o)
		// An agent older than LBRs and services answers Unimplemented
		// for their lists; it has none of them, and apply of the other
		// kinds must still work against it.
		if (k == kindLBR || k == kindService) && status.Code(err) == codes.Unimplemented {
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

// get reads the objects refs name, in their order.
func (c *apiConn) get(k kind, refs []*pb.Ref) (*objects, error) {
	o := &objects{}
	for _, r := range refs {
		byID := &pb.GetByIDRequest{Id: r.GetId()}
		var err error
		switch k {
		case kindInterface:
			var v *pb.Interface
			if v, err = c.GetInterface(c.ctx, &pb.GetByNameRequest{Name: r.GetName()}); err == nil {
				o.Interfaces = append(o.Interfaces, v)
			}
		case kindPath:
			var v *pb.Path
			if v, err = c.GetPath(c.ctx, byID); err == nil {
				o.Paths = append(o.Paths, v)
			}
		case kindFAR:
			var v *pb.Far
			if v, err = c.GetFar(c.ctx, byID); err == nil {
				o.FARs = append(o.FARs, v)
			}
		case kindLBR:
			var v *pb.Lbr
			if v, err = c.GetLbr(c.ctx, byID); err == nil {
				o.LBRs = append(o.LBRs, v)
			}
		case kindService:
			var v *pb.Service
			if v, err = c.GetService(c.ctx, byID); err == nil {
				o.Services = append(o.Services, v)
			}
		default:
			var v *pb.Pdr
			if v, err = c.GetPdr(c.ctx, byID); err == nil {
				o.PDRs = append(o.PDRs, v)
			}
		}
		if err != nil {
			return nil, c.callErr("get "+k.name+" "+refKey(r), err)
		}
	}
	return o, nil
}

func newGetCmd() *cobra.Command {
	var af apiFlags
	var output string
	c := &cobra.Command{
		Use:   "get pdrs|services|lbrs|fars|paths|interfaces [ID|NAME...]",
		Short: "Show a gateway's objects, read from its agent's control API",
		Long: `Lists the objects of one kind the agent serves, or the ones named (by id;
interfaces by name). -o yaml prints them in the config file's shape, which
apply -f reads back; -o json prints them as the API carries them.`,
		Example: `  edgeplane get pdrs
  edgeplane get pdr 10 -o yaml > pdr10.yaml
  edgeplane get services
  edgeplane get interfaces --server 10.0.0.1:50051 --tls --tls-ca ca.pem`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeKind,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := parseKind(args[0])
			if err != nil {
				return err
			}
			if err := checkOutput(output); err != nil {
				return err
			}
			refs, err := parseRefs(k, args[1:])
			if err != nil {
				return err
			}
			conn, err := af.connect(cmd)
			if err != nil {
				return err
			}
			defer conn.Close()
			var o *objects
			if len(refs) == 0 {
				o = &objects{}
				err = conn.list("get "+k.plural, k, o)
			} else {
				o, err = conn.get(k, refs)
			}
			if err != nil {
				return err
			}
			if o.count(k) == 0 && output == outTable {
				fmt.Fprintln(cmd.ErrOrStderr(), "no "+k.plural)
				return nil
			}
			return printObjects(cmd.OutOrStdout(), k, o, output, len(refs) == 1)
		},
	}
	c.Flags().StringVarP(&output, "output", "o", outTable, "output format: table, json or yaml")
	af.register(c)
	return c
}

func checkOutput(format string) error {
	switch format {
	case outTable, outJSON, outYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q (want table, json or yaml)", format)
}

// printObjects prints the objects of kind k in o. single prints one
// object asked for by name as itself in JSON, not as a list.
func printObjects(w io.Writer, k kind, o *objects, format string, single bool) error {
	switch format {
	case outJSON:
		return printJSON(w, k, o, single)
	case outYAML:
		return printYAML(w, k, o)
	}
	return printTable(w, k, o)
}

// printTable prints one row per object; "*" is a match field that
// matches anything, "-" a field not set.
func printTable(w io.Writer, k kind, o *objects) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	switch k {
	case kindInterface:
		fmt.Fprintln(tw, "NAME\tROLE\tXDP")
		for _, v := range o.Interfaces {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", v.GetName(), or(v.GetRole(), "-"), or(v.GetXdp(), config.XDPAuto))
		}
	case kindPath:
		fmt.Fprintln(tw, "ID\tTYPE\tINTERFACE\tLOCAL\tREMOTE\tKEY\tSEQ\tTTL\tDSCP")
		for _, v := range o.Paths {
			ttl := v.GetTtl()
			if ttl == 0 {
				ttl = config.DefaultPathTTL
			}
			seq := "no"
			if v.GetSeq() {
				seq = "yes"
			}
			// An unset DSCP copies the inner packet's.
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", v.GetId(), or(v.GetType(), "-"), or(v.GetInterface(), "-"),
				or(v.GetLocal(), "-"), or(v.GetRemote(), "-"), optional(v.Key, "-"), seq, ttl, optional(v.Dscp, "inner"))
		}
	case kindFAR:
		fmt.Fprintln(tw, "ID\tACTION\tINTERFACE\tPATH\tNAT")
		for _, v := range o.FARs {
			path := "-"
			if v.GetPath() != 0 {
				path = strconv.FormatUint(uint64(v.GetPath()), 10)
			}
			// NAT is the backend a nat FAR rewrites the destination to.
			nat := "-"
			if v.GetAction() == config.ActionNAT && v.GetAddress() != "" {
				nat = net.JoinHostPort(v.GetAddress(), strconv.FormatUint(uint64(v.GetPort()), 10))
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", v.GetId(), or(v.GetAction(), "-"), or(v.GetInterface(), "-"), path, nat)
		}
	case kindLBR:
		fmt.Fprintln(tw, "ID\tALGORITHM\tMEMBERS")
		for _, v := range o.LBRs {
			// Members as far:weight; an unset weight is 1 (config.Member).
			var ms []string
			for _, m := range v.GetMembers() {
				w := uint32(1)
				if m.Weight != nil {
					w = m.GetWeight()
				}
				ms = append(ms, fmt.Sprintf("%d:%d", m.GetFar(), w))
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\n", v.GetId(), or(v.GetAlgorithm(), "-"), or(strings.Join(ms, ","), "-"))
		}
	case kindService:
		// PRECEDENCE only when a service sets one: most never do, and
		// then they all stand behind the PDRs at 0 alike.
		prec := slices.ContainsFunc(o.Services, func(v *pb.Service) bool { return v.GetPrecedence() != 0 })
		fmt.Fprintln(tw, "ID\tVIP\tPORT\tPROTO\tLBR"+when(prec, "\tPRECEDENCE")+"\tCONNECTIONS")
		for _, v := range o.Services {
			conns := "pinned"
			if v.GetStateless() {
				conns = "stateless"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d%s\t%s\n", v.GetId(), or(v.GetVip(), "-"), v.GetPort(), or(v.GetProto(), "-"), v.GetLbr(),
				when(prec, "\t"+strconv.FormatUint(uint64(v.GetPrecedence()), 10)), conns)
		}
	default:
		// IN_PATH only when a PDR matches decapsulated traffic.
		inPath := slices.ContainsFunc(o.PDRs, func(v *pb.Pdr) bool { return v.GetMatch().GetInPath() != 0 })
		fmt.Fprintln(tw, "ID\tPRECEDENCE\tIN"+when(inPath, "\tIN_PATH")+"\tSRC\tDST\tPROTO\tSPORT\tDPORT\tDSCP\tGRE_KEY\tFAR")
		for _, v := range o.PDRs {
			m := v.GetMatch()
			path := "*"
			if m.GetInPath() != 0 {
				path = strconv.FormatUint(uint64(m.GetInPath()), 10)
			}
			fmt.Fprintf(tw, "%d\t%d\t%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", v.GetId(), v.GetPrecedence(),
				or(m.GetIn(), "*"), when(inPath, "\t"+path), or(m.GetSrc(), "*"), or(m.GetDst(), "*"), or(m.GetProto(), "*"),
				or(m.GetSport(), "*"), or(m.GetDport(), "*"), optional(m.Dscp, "*"), optional(m.GreKey, "*"), v.GetFar())
		}
	}
	return tw.Flush()
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// when returns s if cond holds, else "".
func when(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}

func optional(v *uint32, unset string) string {
	if v == nil {
		return unset
	}
	return strconv.FormatUint(uint64(*v), 10)
}

// printJSON prints protojson with the proto (= config) field names and
// every field present, as the REST API does.
func printJSON(w io.Writer, k kind, o *objects, single bool) error {
	var m proto.Message
	switch k {
	case kindInterface:
		m = &pb.ListInterfacesResponse{Interfaces: o.Interfaces}
		if single && len(o.Interfaces) == 1 {
			m = o.Interfaces[0]
		}
	case kindPath:
		m = &pb.ListPathsResponse{Paths: o.Paths}
		if single && len(o.Paths) == 1 {
			m = o.Paths[0]
		}
	case kindFAR:
		m = &pb.ListFarsResponse{Fars: o.FARs}
		if single && len(o.FARs) == 1 {
			m = o.FARs[0]
		}
	case kindLBR:
		m = &pb.ListLbrsResponse{Lbrs: o.LBRs}
		if single && len(o.LBRs) == 1 {
			m = o.LBRs[0]
		}
	case kindService:
		m = &pb.ListServicesResponse{Services: o.Services}
		if single && len(o.Services) == 1 {
			m = o.Services[0]
		}
	default:
		m = &pb.ListPdrsResponse{Pdrs: o.PDRs}
		if single && len(o.PDRs) == 1 {
			m = o.PDRs[0]
		}
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

// printYAML prints the objects as the config file holds them: under
// their list's key, always as a list.
func printYAML(w io.Writer, k kind, o *objects) error {
	cfg, err := o.toConfig()
	if err != nil {
		return err
	}
	var list any
	switch k {
	case kindInterface:
		list = orEmpty(cfg.Interfaces)
	case kindPath:
		list = orEmpty(cfg.Paths)
	case kindFAR:
		list = orEmpty(cfg.FARs)
	case kindLBR:
		list = orEmpty(cfg.LBRs)
	case kindService:
		list = orEmpty(cfg.Services)
	default:
		list = orEmpty(cfg.PDRs)
	}
	b, err := yaml.Marshal(map[string]any{k.plural: list})
	if err != nil {
		return fmt.Errorf("marshal yaml: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// orEmpty returns an empty list for nil, which YAML prints as [] rather
// than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ignoredSections are top-level keys of a config file that apply reads
// past: the API does not change them.
var ignoredSections = []string{"limits", "defaults"}

// fileObjects reads the objects of a YAML file in the config file's shape:
// a whole config, or only some of its lists. cur is what the agent has.
// A whole valid config is taken as it is; a partial one is checked
// together with cur (the file's objects replacing the agent's of the same
// key), so every problem is reported at its path in the file, and a
// reference to an object only the agent has is not one. The result holds
// the file's objects only, in file order. notes says what was ignored.
func fileObjects(data []byte, cur *config.Config) (file *config.Config, notes []string, err error) {
	whole, perr := config.Parse(data)
	var fe config.Errors
	if perr != nil && (!errors.As(perr, &fe) || slices.ContainsFunc(fe, func(e config.FieldError) bool { return e.Path == "config" })) {
		// The document itself is wrong (YAML syntax, not a mapping,
		// several documents): nothing to merge.
		return nil, nil, perr
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("invalid YAML: %w", err)
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
		root = doc.Content[0]
	}
	var ignored []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i].Value; slices.Contains(ignoredSections, k) && !slices.Contains(ignored, k) {
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		notes = append(notes, strings.Join(ignored, " and ")+" ignored: they are set in the agent's config file, not through the API")
	}
	if perr == nil {
		return &config.Config{Interfaces: whole.Interfaces, Paths: whole.Paths, FARs: whole.FARs, PDRs: whole.PDRs,
			LBRs: whole.LBRs, Services: whole.Services}, notes, nil
	}

	// The agent's objects are appended after the file's in each list, so
	// list indexes below a list's file count are those of the file.
	merged := &yaml.Node{Kind: yaml.MappingNode}
	inFile := map[string]int{}     // list -> number of file items
	extra := map[string][]string{} // list -> keys of the agent's items appended
	done := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if slices.Contains(ignoredSections, k.Value) {
			continue
		}
		if isList(k.Value) && !done[k.Value] {
			if items, ok := seqItems(v); ok {
				done[k.Value] = true
				inFile[k.Value] = len(items)
				nodes, keys, err := agentItems(k.Value, items, cur)
				if err != nil {
					return nil, nil, err
				}
				extra[k.Value] = keys
				v = &yaml.Node{Kind: yaml.SequenceNode, Content: append(slices.Clone(items), nodes...)}
			}
		}
		merged.Content = append(merged.Content, k, v)
	}
	for _, k := range allKinds {
		if done[k.plural] {
			continue
		}
		nodes, keys, err := agentItems(k.plural, nil, cur)
		if err != nil {
			return nil, nil, err
		}
		extra[k.plural] = keys
		merged.Content = append(merged.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k.plural},
			&yaml.Node{Kind: yaml.SequenceNode, Content: nodes})
	}
	out, err := yaml.Marshal(merged)
	if err != nil {
		return nil, nil, fmt.Errorf("merge with the agent's objects: %w", err)
	}
	cfg, err := config.Parse(out)
	if err != nil {
		if errors.As(err, &fe) {
			return nil, notes, noteAgentItems(fe, inFile, extra)
		}
		return nil, notes, err
	}
	return &config.Config{
		Interfaces: cfg.Interfaces[:inFile[kindInterface.plural]],
		Paths:      cfg.Paths[:inFile[kindPath.plural]],
		FARs:       cfg.FARs[:inFile[kindFAR.plural]],
		PDRs:       cfg.PDRs[:inFile[kindPDR.plural]],
		LBRs:       cfg.LBRs[:inFile[kindLBR.plural]],
		Services:   cfg.Services[:inFile[kindService.plural]],
	}, notes, nil
}

func isList(key string) bool {
	return slices.ContainsFunc(allKinds, func(k kind) bool { return k.plural == key })
}

// seqItems returns the items of a list node (none for null); ok is false
// for anything else, which Parse then reports.
func seqItems(n *yaml.Node) ([]*yaml.Node, bool) {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	switch {
	case n == nil:
		return nil, true
	case n.Kind == yaml.SequenceNode:
		return n.Content, true
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		return nil, true
	}
	return nil, false
}

// itemKey returns the id (name for interfaces) of a list item of the
// file, or "" when it has none that decodes; yaml.v3 follows aliases and
// merge keys as Parse does.
func itemKey(list string, n *yaml.Node) string {
	var v struct {
		ID   uint32 `yaml:"id"`
		Name string `yaml:"name"`
	}
	if err := n.Decode(&v); err != nil {
		return ""
	}
	if list == kindInterface.plural {
		return v.Name
	}
	if v.ID == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(v.ID), 10)
}

// agentItems returns the agent's objects of a list the file items do not
// replace, as YAML nodes, and their keys.
func agentItems(list string, fileItems []*yaml.Node, cur *config.Config) ([]*yaml.Node, []string, error) {
	inFile := map[string]bool{}
	for _, it := range fileItems {
		if k := itemKey(list, it); k != "" {
			inFile[k] = true
		}
	}
	type keyed struct {
		key string
		v   any
	}
	var all []keyed
	id := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	switch list {
	case kindInterface.plural:
		for _, v := range cur.Interfaces {
			all = append(all, keyed{v.Name, v})
		}
	case kindPath.plural:
		for _, v := range cur.Paths {
			all = append(all, keyed{id(v.ID), v})
		}
	case kindFAR.plural:
		for _, v := range cur.FARs {
			all = append(all, keyed{id(v.ID), v})
		}
	case kindPDR.plural:
		for _, v := range cur.PDRs {
			all = append(all, keyed{id(v.ID), v})
		}
	case kindLBR.plural:
		for _, v := range cur.LBRs {
			all = append(all, keyed{id(v.ID), v})
		}
	case kindService.plural:
		for _, v := range cur.Services {
			all = append(all, keyed{id(v.ID), v})
		}
	}
	var nodes []*yaml.Node
	var keys []string
	for _, x := range all {
		if inFile[x.key] {
			continue
		}
		n := &yaml.Node{}
		if err := n.Encode(x.v); err != nil {
			return nil, nil, fmt.Errorf("encode the agent's %s %s: %w", strings.TrimSuffix(list, "s"), x.key, err)
		}
		nodes = append(nodes, n)
		keys = append(keys, x.key)
	}
	return nodes, keys, nil
}

// noteAgentItems marks the problems found at an object of the agent's
// (not of the file), which a file object can cause, e.g. by taking the
// GRE key of an agent's path.
func noteAgentItems(fe config.Errors, inFile map[string]int, extra map[string][]string) config.Errors {
	out := slices.Clone(fe)
	for i, e := range out {
		list, rest, ok := strings.Cut(e.Path, "[")
		if !ok {
			continue
		}
		idx, _, ok := strings.Cut(rest, "]")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		j := n - inFile[list]
		if j < 0 || j >= len(extra[list]) {
			continue
		}
		out[i].Reason += fmt.Sprintf(" (%s[%d] is the agent's %s %s, not in the file)", list, n, strings.TrimSuffix(list, "s"), extra[list][j])
	}
	return out
}

// change is what apply does with one object of the file.
type change struct {
	kind kind
	key  string
	// verb is "created", "configured" or "unchanged".
	verb string
	// op is nil for an unchanged object.
	op *pb.Operation
}

// planApply compares the file's objects with the agent's: an object the
// agent lacks is created, one it has is updated (replaced whole) unless
// it is the same. Both sides are normalized, so a default written out or
// left out makes no difference.
func planApply(file, cur *config.Config) []change {
	have := map[string]proto.Message{}
	for _, v := range cur.Interfaces {
		have["interface/"+v.Name] = api.InterfaceToPB(v)
	}
	for _, v := range cur.Paths {
		have[fmt.Sprint("path/", v.ID)] = api.PathToPB(v)
	}
	for _, v := range cur.FARs {
		have[fmt.Sprint("far/", v.ID)] = api.FARToPB(v)
	}
	for _, v := range cur.PDRs {
		have[fmt.Sprint("pdr/", v.ID)] = api.PDRToPB(v)
	}
	for _, v := range cur.LBRs {
		have[fmt.Sprint("lbr/", v.ID)] = api.LBRToPB(v)
	}
	for _, v := range cur.Services {
		have[fmt.Sprint("service/", v.ID)] = api.ServiceToPB(v)
	}
	var out []change
	add := func(k kind, key string, msg proto.Message, obj *pb.Object) {
		c := change{kind: k, key: key}
		old, ok := have[k.name+"/"+key]
		switch {
		case !ok:
			c.verb = "created"
			c.op = &pb.Operation{Op: &pb.Operation_Create{Create: obj}}
		case proto.Equal(old, msg):
			c.verb = "unchanged"
		default:
			c.verb = "configured"
			c.op = &pb.Operation{Op: &pb.Operation_Update{Update: obj}}
		}
		out = append(out, c)
	}
	n := config.Config{Interfaces: slices.Clone(file.Interfaces), Paths: slices.Clone(file.Paths),
		FARs: slices.Clone(file.FARs), PDRs: slices.Clone(file.PDRs),
		LBRs: slices.Clone(file.LBRs), Services: slices.Clone(file.Services)}
	n.Normalize()
	// In the order of allKinds: what is referred to is created first.
	for _, v := range n.Interfaces {
		m := api.InterfaceToPB(v)
		add(kindInterface, v.Name, m, &pb.Object{Kind: &pb.Object_Interface{Interface: m}})
	}
	for _, v := range n.Paths {
		m := api.PathToPB(v)
		add(kindPath, fmt.Sprint(v.ID), m, &pb.Object{Kind: &pb.Object_Path{Path: m}})
	}
	for _, v := range n.FARs {
		m := api.FARToPB(v)
		add(kindFAR, fmt.Sprint(v.ID), m, &pb.Object{Kind: &pb.Object_Far{Far: m}})
	}
	for _, v := range n.LBRs {
		m := api.LBRToPB(v)
		add(kindLBR, fmt.Sprint(v.ID), m, &pb.Object{Kind: &pb.Object_Lbr{Lbr: m}})
	}
	for _, v := range n.Services {
		m := api.ServiceToPB(v)
		add(kindService, fmt.Sprint(v.ID), m, &pb.Object{Kind: &pb.Object_Service{Service: m}})
	}
	for _, v := range n.PDRs {
		m := api.PDRToPB(v)
		add(kindPDR, fmt.Sprint(v.ID), m, &pb.Object{Kind: &pb.Object_Pdr{Pdr: m}})
	}
	return out
}

func readInput(stdin io.Reader, file string) ([]byte, error) {
	if file == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read objects: %w", err)
	}
	return b, nil
}

// applyResult prints the outcome of an Apply.
func applyResult(w io.Writer, r *pb.ApplyResponse, dryRun bool) {
	if dryRun {
		fmt.Fprintf(w, "dry run: valid, nothing changed (generation %d serving)\n", r.GetGeneration())
		return
	}
	took := time.Duration(r.GetCommitMicros()) * time.Microsecond
	fmt.Fprintf(w, "generation %d (committed in %s)\n", r.GetGeneration(), took)
}

func newApplyCmd() *cobra.Command {
	var af apiFlags
	var file string
	var dryRun bool
	c := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update a gateway's objects from a YAML file, all or nothing",
		Long: `Reads objects in the shape of the agent's config file (interfaces, paths,
fars, lbrs, services and pdrs lists: a whole config file, or only some of
the lists) and sends them to the agent as one Apply batch, in that order:
what is referred to before what refers to it. An object the agent has
(same id; interfaces: same name) is updated, replaced whole; one it lacks
is created; one it has as written is left alone. The agent commits the batch
as one rules generation, or nothing of it when anything is wrong. Objects
the agent has and the file does not name are kept. limits and defaults are
not set through the API and are ignored.

The file is checked together with the agent's objects before it is sent,
so problems are reported at their paths in the file.`,
		Example: `  edgeplane get pdrs -o yaml > pdrs.yaml; $EDITOR pdrs.yaml; edgeplane apply -f pdrs.yaml
  edgeplane apply -f config.yaml --dry-run
  cat far.yaml | edgeplane apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readInput(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			conn, err := af.connect(cmd)
			if err != nil {
				return err
			}
			defer conn.Close()
			have, err := conn.listAll("apply")
			if err != nil {
				return err
			}
			cur, err := have.toConfig()
			if err != nil {
				return err
			}
			want, notes, err := fileObjects(data, cur)
			for _, n := range notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
			}
			if err != nil {
				return err
			}
			changes := planApply(want, cur)
			if len(changes) == 0 {
				return errors.New("no " + kindList("or") + " to apply")
			}
			req := &pb.ApplyRequest{DryRun: dryRun}
			var names []string
			for _, ch := range changes {
				if ch.op != nil {
					req.Operations = append(req.Operations, ch.op)
					names = append(names, ch.kind.name+" "+ch.key)
				}
			}
			out := cmd.OutOrStdout()
			suffix := ""
			if dryRun {
				suffix = " (dry run)"
			}
			if len(req.Operations) == 0 {
				for _, ch := range changes {
					fmt.Fprintf(out, "%s %s %s\n", ch.kind.name, ch.key, ch.verb)
				}
				return nil
			}
			r, err := conn.Apply(conn.ctx, req)
			if err != nil {
				e := conn.callErr("apply", err)
				if re, ok := e.(*rpcError); ok {
					re.ops = names
				}
				return e
			}
			for _, ch := range changes {
				s := suffix
				if ch.op == nil {
					s = ""
				}
				fmt.Fprintf(out, "%s %s %s%s\n", ch.kind.name, ch.key, ch.verb, s)
			}
			applyResult(out, r, dryRun)
			return nil
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "YAML file in the config file's shape (- for stdin)")
	_ = c.MarkFlagRequired("filename")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "only check the batch on the agent; change nothing")
	af.register(c)
	return c
}

func newDeleteCmd() *cobra.Command {
	var af apiFlags
	var dryRun bool
	c := &cobra.Command{
		Use:   "delete pdr|service|lbr|far|path|interface ID|NAME...",
		Short: "Delete a gateway's objects, all or nothing",
		Long: `Deletes the objects named (by id; interfaces by name) in one Apply batch:
all of them, or none when one is missing or still used (a FAR that a PDR
selects or an LBR has as a member, an LBR that a service names: delete
what uses it first).`,
		Example: `  edgeplane delete pdr 10 11
  edgeplane delete service 1; edgeplane delete lbr 3
  edgeplane delete far 2 --dry-run`,
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: completeKind,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := parseKind(args[0])
			if err != nil {
				return err
			}
			refs, err := parseRefs(k, args[1:])
			if err != nil {
				return err
			}
			req := &pb.ApplyRequest{DryRun: dryRun}
			var names []string
			for _, r := range refs {
				req.Operations = append(req.Operations, &pb.Operation{Op: &pb.Operation_Delete{Delete: r}})
				names = append(names, k.name+" "+refKey(r))
			}
			conn, err := af.connect(cmd)
			if err != nil {
				return err
			}
			defer conn.Close()
			r, err := conn.Apply(conn.ctx, req)
			if err != nil {
				e := conn.callErr("delete", err)
				if re, ok := e.(*rpcError); ok {
					re.ops = names
				}
				return e
			}
			out := cmd.OutOrStdout()
			suffix := ""
			if dryRun {
				suffix = " (dry run)"
			}
			for _, n := range names {
				fmt.Fprintf(out, "%s deleted%s\n", n, suffix)
			}
			applyResult(out, r, dryRun)
			return nil
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "only check the batch on the agent; change nothing")
	af.register(c)
	return c
}

// apiStats reads the counters through the API, as the snapshot that
// reading the pinned maps gives, so `stats` prints the same either way.
func apiStats(cmd *cobra.Command, af *apiFlags) (*bpf.Snapshot, error) {
	conn, err := af.connect(cmd)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	s, err := conn.GetStats(conn.ctx, &pb.GetStatsRequest{})
	if err != nil {
		return nil, conn.callErr("stats", err)
	}
	return statsFromPB(s), nil
}

// apiFlagWithoutServer returns the first API flag given on a command that
// uses the API only with --server, or "" when there is none.
func apiFlagWithoutServer(cmd *cobra.Command) string {
	if cmd.Flags().Changed("server") {
		return ""
	}
	for _, f := range apiOnlyFlags {
		if cmd.Flags().Changed(f) {
			return f
		}
	}
	return ""
}

// statsFromPB turns the API's counters back into a snapshot. The API
// leaves out reasons that never happened; here they are zero, as in a
// snapshot of the maps. Names this build does not know (a newer agent)
// have no place in a snapshot and are dropped.
func statsFromPB(p *pb.Stats) *bpf.Snapshot {
	ctr := func(c *pb.Counter) bpf.Counter { return bpf.Counter{Packets: c.GetPackets(), Bytes: c.GetBytes()} }
	s := &bpf.Snapshot{
		Gen:       p.GetGeneration(),
		PDRs:      map[uint32]bpf.Counter{},
		Verdicts:  make([]bpf.Counter, len(bpf.VerdictNames)),
		Reasons:   make([]bpf.Counter, len(bpf.ReasonNames)),
		CacheHit:  p.GetFlowCacheHits(),
		CacheMiss: p.GetFlowCacheMisses(),
		Paths:     map[uint32]bpf.PathCounters{},
	}
	for _, c := range p.GetPdrs() {
		s.PDRs[c.GetId()] = ctr(c.GetCounter())
	}
	for name, c := range p.GetVerdicts() {
		if i := slices.Index(bpf.VerdictNames, name); i >= 0 {
			s.Verdicts[i] = ctr(c)
		}
	}
	for name, c := range p.GetReasons() {
		if i := slices.Index(bpf.ReasonNames, name); i >= 0 {
			s.Reasons[i] = ctr(c)
		}
	}
	for _, c := range p.GetPaths() {
		s.Paths[c.GetId()] = bpf.PathCounters{Tx: ctr(c.GetTx()), Rx: ctr(c.GetRx())}
	}
	for _, b := range p.GetBackends() {
		s.Backends = append(s.Backends, bpf.BackendCounters{Service: b.GetService(), FAR: b.GetFar(), Counter: ctr(b.GetCounter()),
			NewConns: b.GetNewConnections(), Active: b.GetActiveConnections()})
	}
	return s
}
