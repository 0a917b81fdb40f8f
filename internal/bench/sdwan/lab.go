// SPDX-License-Identifier: Apache-2.0

// Package sdwan runs the bench's scenarios in an SD-WAN lab of their own
// (two gateways' agents, the WAN emulator, hosts A and B): the failover
// part, the flowopt scenario and the cpu scenario, each driving the
// agents through their API and timing what the hosts see.
package sdwan

import (
	"context"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// Options are what every scenario of the lab takes.
type Options struct {
	// Bins are the binaries the lab runs: edgeplane for the agents,
	// edgeplane-dev for the emulators.
	Bins measure.Binaries
	Log  measure.Logf
}

// ownLab brings up an SD-WAN lab of the bench's own with the lab's
// defaults, named prefix and this process's id (the agents run o's
// edgeplane binary, the emulators its edgeplane-dev); the caller takes it
// down.
func ownLab(ctx context.Context, o Options, prefix string) (*lab.SDWAN, error) {
	bin, err := o.Bins.Gateway()
	if err != nil {
		return nil, err
	}
	cfg := lab.DefaultConfig()
	cfg.Name = fmt.Sprintf("%s%d", prefix, os.Getpid()%1000)
	if o.Bins.Dev == "" {
		return nil, errors.New("the lab's emulators run edgeplane-dev: no binary given")
	}
	l := lab.NewSDWAN(cfg, bin, o.Bins.Dev)
	if _, err := l.Up(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("lab up: %w", err), l.Down())
	}
	return l, nil
}

// dialGateway connects to the API of lab l's gateway in namespace ns
// (its unix socket, no credentials).
func dialGateway(l *lab.SDWAN, ns string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+l.APISocket(ns), grpc.WithTransportCredentials(insecure.NewCredentials()))
}
