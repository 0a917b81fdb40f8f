// SPDX-License-Identifier: Apache-2.0

// Package client is the edgeplane CLI's client of an agent's control API
// (edgeplane.v1 over gRPC): the connection and its flags, errors worded
// for a terminal, and listing and getting objects of any kind the config
// package declares, with no code per kind.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

const (
	// DefaultServer is the agent's API address when --server is not
	// given: the unix socket an agent with the default pin dir serves
	// root on (agent.DefaultAPISocket).
	DefaultServer = "unix:///run/edgeplane/edgeplane/api.sock"
	// TokenEnv holds the bearer token when --token is not given. The flag
	// does not show it as its default, so --help never prints a secret.
	TokenEnv = "EDGEPLANE_TOKEN"
)

// Flags are the connection flags of the commands that talk to an agent's
// control API.
type Flags struct {
	Server             string
	Token              string
	TLS                bool
	TLSCA              string
	InsecureSkipVerify bool
	Timeout            time.Duration
	// Gateway and Selector target a controller's objects (see
	// edgeplane.v1.Target): one gateway, or KEY=VALUE,... labels.
	Gateway, Selector string
}

// APIOnlyFlags are the flags that mean nothing without --server on a
// command (stats) that can also work without the API.
var APIOnlyFlags = []string{"token", "tls", "tls-ca", "insecure-skip-verify", "timeout"}

// Register adds the flags to command c.
func (f *Flags) Register(c *cobra.Command) {
	fs := c.Flags()
	fs.StringVar(&f.Server, "server", DefaultServer, "the agent's gRPC API: host:port, or its unix socket (unix:///PATH or /PATH)")
	fs.StringVar(&f.Token, "token", "", "bearer token (default $"+TokenEnv+")")
	fs.BoolVar(&f.TLS, "tls", false, "connect over TLS")
	fs.StringVar(&f.TLSCA, "tls-ca", "", "CA certificate (PEM) to verify the agent with instead of the system roots (implies --tls)")
	fs.BoolVar(&f.InsecureSkipVerify, "insecure-skip-verify", false, "do not verify the agent's certificate (implies --tls; for tests only)")
	fs.DurationVar(&f.Timeout, "timeout", 10*time.Second, "give up after this long")
	fs.StringVar(&f.Gateway, "gateway", "", "at a controller: the objects of this gateway alone")
	fs.StringVar(&f.Selector, "selector", "", "at a controller: the objects of the gateways whose labels hold KEY=VALUE,... (get gateways: which to list)")
}

// Secure reports whether the connection uses TLS.
func (f *Flags) Secure() bool {
	return f.TLS || f.TLSCA != "" || f.InsecureSkipVerify
}

func (f *Flags) credentials() (credentials.TransportCredentials, error) {
	if !f.Secure() {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.InsecureSkipVerify}
	if f.TLSCA != "" {
		pemData, err := os.ReadFile(f.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("read tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("tls ca %s: no PEM certificate in the file", f.TLSCA)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}

// IsLoopback reports whether a gRPC target is on this host: a loopback
// address, localhost or a unix socket (unix:// or a path).
func IsLoopback(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") || strings.HasPrefix(target, "/") {
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

// Conn is a connection to one agent, and the context (deadline, token)
// every call of a command runs in.
type Conn struct {
	pb.GatewayClient
	Ctx      context.Context
	cancel   context.CancelFunc
	conn     *grpc.ClientConn
	flags    *Flags
	hasToken bool
	// Target is what --gateway and --selector name (nil: neither).
	Target *pb.Target
}

// Connect returns a client of the agent at --server; warn gets a warning
// about a token sent in the clear. grpc.NewClient does not dial yet: a
// server that cannot be reached fails the first call.
func (f *Flags) Connect(ctx context.Context, warn io.Writer) (*Conn, error) {
	creds, err := f.credentials()
	if err != nil {
		return nil, err
	}
	var scope *pb.Target
	if f.Gateway != "" || f.Selector != "" {
		if f.Gateway != "" && f.Selector != "" {
			return nil, errors.New("--gateway and --selector: give one")
		}
		sel, err := fleet.ParseLabels(f.Selector, false)
		if err != nil {
			return nil, fmt.Errorf("--selector: %w", err)
		}
		scope = &pb.Target{Gateway: f.Gateway, Selector: sel}
	}
	token := f.Token
	if token == "" {
		token = os.Getenv(TokenEnv)
	}
	if token != "" && !f.Secure() && !IsLoopback(f.Server) {
		fmt.Fprintf(warn, "warning: sending the bearer token to %s unencrypted (give --tls)\n", f.Server)
	}
	target := f.Server
	if strings.HasPrefix(target, "/") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.Server, err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return &Conn{GatewayClient: pb.NewGatewayClient(conn), Ctx: ctx, cancel: cancel, conn: conn, flags: f, hasToken: token != "", Target: scope}, nil
}

// Close ends the connection.
func (c *Conn) Close() {
	c.cancel()
	_ = c.conn.Close()
}

// RPCError is a call the agent refused or that failed on the way.
type RPCError struct {
	Op string
	St *status.Status
	// Hint says what to try, when the code suggests something.
	Hint string
	// Ops names the object of each operation of an Apply batch ("pdr
	// 10"), added to the message lines that point into the batch.
	Ops []string
}

// Error returns "op: Code: message", with the message on lines of its own
// when it is a list of field errors ("path: reason", one per line).
func (e *RPCError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op + ": " + e.St.Code().String() + ":")
	msg := e.St.Message()
	if strings.Contains(msg, "\n") || hasFieldViolations(e.St) {
		for _, line := range strings.Split(msg, "\n") {
			b.WriteString("\n  " + line + e.opNote(line))
		}
		if e.Hint != "" {
			b.WriteString("\n(" + e.Hint + ")")
		}
		return b.String()
	}
	b.WriteString(" " + msg + e.opNote(msg))
	if e.Hint != "" {
		b.WriteString(" (" + e.Hint + ")")
	}
	return b.String()
}

// opNote returns " (pdr 10)" for a line about "operations[N]...".
func (e *RPCError) opNote(line string) string {
	rest, ok := strings.CutPrefix(line, "operations[")
	if !ok {
		return ""
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return ""
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 || i >= len(e.Ops) {
		return ""
	}
	return " (" + e.Ops[i] + ")"
}

// Unwrap returns the gRPC status error.
func (e *RPCError) Unwrap() error {
	return e.St.Err()
}

func hasFieldViolations(st *status.Status) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return true
		}
	}
	return false
}

// Err describes a failed call made for op: an *RPCError for a status the
// agent (or gRPC) gave.
func (c *Conn) Err(op string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	e := &RPCError{Op: op, St: st}
	switch st.Code() {
	case codes.Unauthenticated:
		if !c.hasToken {
			e.Hint = "give --token or set " + TokenEnv
		}
	case codes.Unavailable:
		e.Hint = "is an agent serving its API on " + c.flags.Server + "?"
		if !c.flags.Secure() {
			e.Hint += " if it serves TLS, give --tls"
		}
	case codes.DeadlineExceeded:
		e.Hint = "no answer within --timeout " + c.flags.Timeout.String()
	}
	return e
}
