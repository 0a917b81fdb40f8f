// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// listenUnix listens on a unix socket at path that only the agent's own
// user (root) may use: the socket is bound in a fresh 0700 directory
// beside path, made 0600 and renamed into place, so no other user can
// connect in between, and every connection's peer uid is checked as
// well (SO_PEERCRED), so a later chmod does not open it either. A live
// socket at path (another agent serving) is refused; a stale one, left
// by a killed agent, is replaced.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("api socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("api socket %s: another process serves on it (one socket per agent: give --api-socket)", path)
		}
	}
	tmp, err := os.MkdirTemp(dir, ".api-")
	if err != nil {
		return nil, fmt.Errorf("api socket directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on api socket %s: %w", path, err)
	}
	// The path it was bound at goes with the temporary directory; Close
	// removes the one it was renamed to.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(bound, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	if err := os.Rename(bound, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	return &unixListener{UnixListener: ln, path: path, fi: fi, uid: uint32(os.Geteuid())}, nil
}

// unixListener accepts only peers running as root or as the agent's
// user.
type unixListener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo
	uid  uint32
	once sync.Once
}

func (l *unixListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == 0 || uid == l.uid) {
			return c, nil
		}
		c.Close()
	}
}

// Close stops listening and removes the socket, unless another agent
// has put its own at the path since.
func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
			_ = os.Remove(l.path)
		}
	})
	return err
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

// limitListener closes connections beyond max open at once: each costs
// the servers buffers and a goroutine, and a client that opens thousands
// must not grow the agent without bound. Closing at once (rather than
// leaving them in the kernel's backlog) tells such a client right away.
// With src set it also closes the connections of a source past its share
// (sources), so one source cannot take every place.
type limitListener struct {
	net.Listener
	sem     chan struct{}
	name    string
	src     *sources
	refused *prometheus.CounterVec
}

func limitConns(ln net.Listener, max int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max)}
}

// limitSources is limitConns for a TCP listener called name, whose
// clients are held to their share by src, its refusals counted.
func limitSources(ln net.Listener, max int, name string, src *sources) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), name: name, src: src, refused: src.refused}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
		default:
			if l.refused != nil {
				l.refused.WithLabelValues(l.name, RefusedConns).Inc()
			}
			c.Close()
			continue
		}
		lc := &limitConn{Conn: c, release: func() { <-l.sem }}
		if l.src == nil {
			return lc, nil
		}
		done, ok := l.src.admit(l.name, lc)
		if !ok {
			lc.Close()
			continue
		}
		lc.release = func() { done(); <-l.sem }
		return lc, nil
	}
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// lookupHost resolves a listen address's host name; a variable so a test
// can give "localhost" an address beyond loopback.
var lookupHost = func(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// ErrNotLoopback is a listen address that reaches beyond this host.
var ErrNotLoopback = errors.New("not a loopback address")

// LoopbackAddr returns addr with its host resolved to a loopback address,
// or ErrNotLoopback. A name (localhost) is resolved here and the address
// it gave is what the caller listens on, so what was checked is what is
// bound: every address the name resolves to must be loopback.
func LoopbackAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.IsLoopback() {
			return "", ErrNotLoopback
		}
		return addr, nil
	}
	if host == "" {
		return "", ErrNotLoopback // every interface
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := lookupHost(ctx, host)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("resolve %s: no address", host)
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return "", fmt.Errorf("%s resolves to %s: %w", host, a, ErrNotLoopback)
		}
	}
	return net.JoinHostPort(addrs[0].Unmap().String(), port), nil
}

// isLoopback reports whether a listen address stays on this host (a
// loopback address, or a name that resolves to loopback addresses only).
func isLoopback(addr string) bool {
	_, err := LoopbackAddr(addr)
	return err == nil
}
