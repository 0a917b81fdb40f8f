// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"testing"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// TestPrintTableOptionalColumns shows IN_PATH and a service's PRECEDENCE
// only when an object listed sets them.
func TestPrintTableOptionalColumns(t *testing.T) {
	o := agentObjects(t)
	o[config.KindPDR][1].(*pb.Pdr).Match.InPath = 1
	o[config.KindService] = append(o[config.KindService], &pb.Service{Id: 2, Vip: "203.0.113.11", Port: 53, Proto: "udp", Lbr: 2, Precedence: new(uint32(7))})
	for _, tc := range []struct {
		k    config.Kind
		want string
	}{
		{config.KindPDR, `ID  PRECEDENCE  IN    IN_PATH  SRC  DST          PROTO  SPORT  DPORT      DSCP  GRE_KEY  FAR
10  100         lan0  *        *    10.2.0.0/16  *      *      *          *     *        2
20  10          *     1        *    *            udp    *      5000-5100  46    *        1
`},
		{config.KindService, `ID  VIP           PORT  PROTO  LBR  PRECEDENCE  CONNECTIONS
1   203.0.113.10  80    tcp    1    0           pinned
2   203.0.113.11  53    udp    2    7           pinned
`},
	} {
		wantTable(t, o, tc.k, tc.want)
	}

	// -o yaml carries them in the config file's shape.
	var b bytes.Buffer
	if err := printObjects(&b, schema, config.KindPDR, o[config.KindPDR], outYAML, false); err != nil {
		t.Fatal(err)
	}
	if want := "    - id: 20\n      precedence: 10\n      match: {proto: udp, dport: 5000-5100, dscp: 46, in_path: 1}\n"; !bytes.Contains(b.Bytes(), []byte(want)) {
		t.Errorf("pdrs as yaml:\n%s\nwant it to hold:\n%s", b.String(), want)
	}
}
