// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"
)

// Control operations.
const (
	OpGet = "get" // settings and counters of both directions
	OpSet = "set" // replace the impairment of Dir, then get
)

// Request is one control request: a JSON object on its own connection to
// the control socket, answered by one Response.
type Request struct {
	Op         string      `json:"op"`
	Dir        Direction   `json:"dir"`
	Impairment *Impairment `json:"impairment,omitempty"` // for OpSet
}

// Response answers a Request. Error is set when the request was refused;
// the rest describes the link after the request.
type Response struct {
	Error string   `json:"error,omitempty"`
	A     string   `json:"a,omitempty"` // interface names
	B     string   `json:"b,omitempty"`
	AB    DirStats `json:"ab"`
	BA    DirStats `json:"ba"`
}

// controlTimeout bounds one control exchange, so a client that connects
// and says nothing cannot hold a connection open.
const controlTimeout = 5 * time.Second

// ServeControl answers requests on a unix socket at socketPath until ctx
// ends, then removes the socket. A stale socket file from an earlier run is
// replaced.
func (l *Link) ServeControl(ctx context.Context, socketPath string) error {
	if fi, err := os.Lstat(socketPath); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return fmt.Errorf("control socket %s: exists and is not a socket", socketPath)
		}
		if err := os.Remove(socketPath); err != nil {
			return fmt.Errorf("remove stale control socket: %w", err)
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", socketPath)
	if err != nil {
		return fmt.Errorf("listen on control socket: %w", err)
	}
	if err := os.Chmod(socketPath, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("restrict control socket: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil // the listener's Close removed the socket file
			}
			ln.Close()
			return fmt.Errorf("accept on control socket: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.serveConn(c)
		}()
	}
}

func (l *Link) serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	var req Request
	var resp Response
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		resp.Error = fmt.Sprintf("decode request: %v", err)
	} else if err := l.Handle(req, &resp); err != nil {
		resp.Error = err.Error()
	}
	if err := json.NewEncoder(c).Encode(resp); err != nil {
		l.log.Debug("wanem control reply", "err", err)
	}
}

// Handle carries out one control request and fills resp with the link's
// state after it.
func (l *Link) Handle(req Request, resp *Response) error {
	switch req.Op {
	case OpGet:
	case OpSet:
		if req.Impairment == nil {
			return errors.New("set: no impairment")
		}
		if req.Dir > Both {
			return fmt.Errorf("set: invalid direction %d", uint8(req.Dir))
		}
		if err := req.Impairment.Validate(); err != nil {
			return fmt.Errorf("set: %w", err)
		}
		l.Set(req.Dir, *req.Impairment)
	default:
		return fmt.Errorf("unknown op %q: want %q or %q", req.Op, OpGet, OpSet)
	}
	resp.A, resp.B = l.Interfaces()
	resp.AB, resp.BA = l.Stats()
	return nil
}

// Control sends req to the emulator serving socketPath and returns its
// response; a refused request is an error.
func Control(socketPath string, req Request) (Response, error) {
	var resp Response
	c, err := net.DialTimeout("unix", socketPath, controlTimeout)
	if err != nil {
		return resp, fmt.Errorf("connect to wanem control socket: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return resp, fmt.Errorf("send control request: %w", err)
	}
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return resp, fmt.Errorf("read control response: %w", err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("wanem refused %s: %s", req.Op, resp.Error)
	}
	return resp, nil
}
