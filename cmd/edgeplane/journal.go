// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/agent"
)

func newJournalCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "journal FILE.journal",
		Short: "Print an agent's journal of API batches as JSON, one batch a line",
		Long: `Prints each record of a journal (the config file's FILE.journal, or a
copy of a damaged one) as {"seq":N,"apply":ApplyRequest}, the request in
the API's JSON: what the batch did, to read or to re-apply (POST
/v1/apply takes the "apply" object). A record that does not check out or
decode is printed as "# byte offset N: reason" and the others still are;
the command then fails. It only reads the file.`,
		Example: `  edgeplane journal /etc/edgeplane/config.yaml.journal.bad`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			bad, err := agent.WriteJournalJSON(cmd.OutOrStdout(), args[0], data)
			if err != nil {
				return err
			}
			if bad > 0 {
				return fmt.Errorf("%s: %d lines are not readable records (see the # lines)", args[0], bad)
			}
			return nil
		},
	}
}
