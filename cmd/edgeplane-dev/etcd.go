// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
)

// newEtcdCmd runs an etcd cluster of embedded members in a process of
// its own: for trying a fleet on one machine, and for the fleet bench,
// which reads this process's CPU time and memory as etcd's.
func newEtcdCmd() *cobra.Command {
	var dir, host string
	var members int
	c := &cobra.Command{
		Use:   "etcd [--dir DIR] [--members 3] [--host 127.0.0.1]",
		Short: "Run an etcd cluster on this machine (etcd's own server, its members in this process)",
		Long: `Starts --members members of etcd's own server in this process, peers on
loopback, clients served on --host at free ports, data under --dir (a
temporary directory, removed at the end, when not given), prints the
client endpoints on one line (comma-separated; 0.0.0.0 as given) once
they have a leader, and serves until SIGTERM or SIGINT. For trying a
fleet without installing etcd:

  edgeplane-dev etcd --dir /tmp/etcd
  edgeplane controller --etcd http://127.0.0.1:PORT,... --api-loopback-no-auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if members < 1 {
				return fmt.Errorf("--members: at least 1")
			}
			if dir == "" {
				tmp, err := os.MkdirTemp("", "epetcd")
				if err != nil {
					return fmt.Errorf("temp dir: %w", err)
				}
				defer os.RemoveAll(tmp)
				dir = tmp
			}
			c, err := fleetlab.StartCluster(dir, members, host)
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintln(cmd.OutOrStdout(), c.Endpoints(""))
			<-cmd.Context().Done()
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the members' data (default: a temporary directory, removed at the end)")
	c.Flags().IntVar(&members, "members", 3, "members of the cluster")
	c.Flags().StringVar(&host, "host", "127.0.0.1", "address the members serve clients on (0.0.0.0: every address)")
	return c
}
