// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
)

func newFlowsCmd() *cobra.Command {
	var af client.Flags
	var top uint32
	var output string
	c := &cobra.Command{
		Use:   "flows [--top N]",
		Short: "List the flows in a gateway's flow cache, the most bytes first",
		Long: `Lists the flows the dataplane has cached: 5-tuple, ingress interface,
the PDR that classified each, and the packets and bytes it carried since
it entered the cache (kept across rules commits; gone when the cache
evicts it). LIVE says whether the flow was classified under the serving
rules generation; if not, its next packet is classified again.`,
		Example: `  edgeplane flows --top 20
  edgeplane flows -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			conn, err := af.Connect(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer conn.Close()
			r, err := conn.ListFlows(conn.Ctx, &pb.ListFlowsRequest{Top: top})
			if err != nil {
				return conn.Err("flows", err)
			}
			if output == "json" {
				b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true}.Marshal(r)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			return printFlows(cmd.OutOrStdout(), r.GetFlows())
		},
	}
	af.Register(c)
	c.Flags().Uint32Var(&top, "top", 20, "how many flows (0: the agent's default, 100; at most 10000)")
	c.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return c
}

// printFlows writes flows as a table.
func printFlows(w io.Writer, flows []*pb.Flow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SRC\tSPORT\tDST\tDPORT\tPROTO\tIN\tDSCP\tGRE_KEY\tPDR\tLIVE\tPACKETS\tBYTES\tRTT\tRATE")
	for _, f := range flows {
		key := "-"
		if f.GreKey != nil {
			key = fmt.Sprint(f.GetGreKey())
		}
		pdr := "-"
		if f.GetPdr() != 0 {
			pdr = fmt.Sprint(f.GetPdr())
		}
		// RTT and rate: FlowOpt's probe's, "-" when it has not timed
		// the flow; "!" marks its congestion hint.
		rtt, rate := "-", "-"
		if f.GetRttSamples() > 0 {
			rtt = (time.Duration(f.GetRttUs()) * time.Microsecond).Round(10 * time.Microsecond).String()
			if f.GetCongested() {
				rtt += "!"
			}
		}
		if f.GetRateBps() > 0 {
			rate = config.FormatRate(f.GetRateBps())
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%v\t%d\t%d\t%s\t%s\n", f.GetSrc(), f.GetSport(), f.GetDst(), f.GetDport(),
			f.GetProto(), f.GetIn(), f.GetDscp(), key, pdr, f.GetLive(), f.GetPackets(), f.GetBytes(), rtt, rate)
	}
	return tw.Flush()
}
