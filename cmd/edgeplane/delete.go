// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
)

func newDeleteCmd() *cobra.Command {
	var af client.Flags
	var dryRun bool
	s := config.Builtin()
	c := &cobra.Command{
		Use:   "delete " + strings.Join(kindNames(s), "|") + " ID|NAME...",
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
			req := &pb.ApplyRequest{DryRun: dryRun, Target: conn.Target}
			var names []string
			for _, r := range refs {
				req.Operations = append(req.Operations, &pb.Operation{Op: &pb.Operation_Delete{Delete: r}})
				names = append(names, string(k)+" "+client.RefKey(r))
			}
			r, err := conn.Apply(conn.Ctx, req)
			if err != nil {
				return batchErr(conn, "delete", err, names)
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
	af.Register(c)
	return c
}
