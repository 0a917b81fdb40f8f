// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
)

func TestPrintTable(t *testing.T) {
	o := agentObjects(t)
	for _, tc := range []struct {
		k    config.Kind
		want string
	}{
		{config.KindPDR, `ID  PRECEDENCE  IN    SRC  DST          PROTO  SPORT  DPORT      DSCP  GRE_KEY  FAR
10  100         lan0  *    10.2.0.0/16  *      *      *          *     *        2
20  10          *     *    *            udp    *      5000-5100  46    *        1
`},
		{config.KindFAR, `ID  ACTION  INTERFACE  PATH  NAT
1   pass    -          -     -
2   encap   -          1     -
4   nat     -          -     10.1.0.11:8080
5   nat     lan0       -     [2001:db8::12]:8443
`},
		{config.KindLBR, `ID  ALGORITHM  MEMBERS
1   maglev     4:1,5:3
`},
		{config.KindService, `ID  VIP           PORT  PROTO  LBR  CONNECTIONS
1   203.0.113.10  80    tcp    1    pinned
`},
		{config.KindPath, `ID  TYPE  INTERFACE  LOCAL      REMOTE        KEY  SEQ  TTL  DSCP
1   gre   wan0       192.0.2.1  198.51.100.1  7    no   64   inner
`},
		{config.KindInterface, `NAME  ROLE  XDP
lan0  lan   auto
wan0  wan   auto
`},
		{config.KindFlowOpt, `MODULE    STATE  SETTINGS
fairness  on     -
probe     on     rtt_factor 2
relief    off    hot 200% min_pps 20000
`},
		{config.KindStrategy, strategiesTable},
	} {
		wantTable(t, o, tc.k, tc.want)
	}
}

// wantTable checks the table of kind k printed from o.
func wantTable(t *testing.T, o client.Objects, k config.Kind, want string) {
	t.Helper()
	var b bytes.Buffer
	if err := printObjects(&b, schema, k, o[k], outTable, false); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Errorf("%s table:\n%s\nwant:\n%s", schema.Plural(k), b.String(), want)
	}
}

func TestPrintJSON(t *testing.T) {
	o := agentObjects(t)
	var b bytes.Buffer
	if err := printObjects(&b, schema, config.KindPDR, o[config.KindPDR], outJSON, false); err != nil {
		t.Fatal(err)
	}
	var list pb.ListPdrsResponse
	if err := protojson.Unmarshal(b.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&list, &pb.ListPdrsResponse{Pdrs: typed[*pb.Pdr](o[config.KindPDR])}) {
		t.Errorf("round trip: %v", &list)
	}
	for _, want := range []string{"{\n  \"pdrs\": [\n    {\n      \"id\": 10,", `"dport": "5000-5100"`, `"in": ""`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("json lacks %q:\n%s", want, b.String())
		}
	}
	// The same output every run, though protojson varies its spacing.
	var again bytes.Buffer
	_ = printObjects(&again, schema, config.KindPDR, o[config.KindPDR], outJSON, false)
	if again.String() != b.String() {
		t.Error("json output differs between runs")
	}

	b.Reset()
	one := o[config.KindFAR][1:2]
	if err := printObjects(&b, schema, config.KindFAR, one, outJSON, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, map[string]any{"id": 2.0, "action": "encap", "interface": "", "path": 1.0, "address": "", "port": 0.0, "lbr": 0.0}) {
		t.Errorf("single far = %v", m)
	}

	b.Reset()
	if err := printObjects(&b, schema, config.KindLBR, o[config.KindLBR], outJSON, false); err != nil {
		t.Fatal(err)
	}
	var lbrs pb.ListLbrsResponse
	if err := protojson.Unmarshal(b.Bytes(), &lbrs); err != nil || !proto.Equal(&lbrs, &pb.ListLbrsResponse{Lbrs: typed[*pb.Lbr](o[config.KindLBR])}) {
		t.Errorf("lbrs round trip: %v, %v", &lbrs, err)
	}
	b.Reset()
	if err := printObjects(&b, schema, config.KindService, o[config.KindService], outJSON, true); err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, map[string]any{"id": 1.0, "vip": "203.0.113.10", "port": 80.0, "proto": "tcp", "lbr": 1.0, "health": nil, "stateless": false}) {
		t.Errorf("single service = %v", m)
	}
}

func TestPrintYAMLFeedsApply(t *testing.T) {
	o := agentObjects(t)
	cur := agentConfig(t)
	var all bytes.Buffer
	for _, k := range schema.Kinds() {
		var b bytes.Buffer
		if err := printObjects(&b, schema, k, o[k], outYAML, false); err != nil {
			t.Fatal(err)
		}
		all.Write(b.Bytes())
		if !strings.HasPrefix(b.String(), schema.Plural(k)+":\n") || strings.Contains(b.String(), "null") {
			t.Errorf("%s yaml:\n%s", schema.Plural(k), b.String())
		}
		file, _, err := fileObjects(schema, b.Bytes(), cur)
		if err != nil {
			t.Fatalf("%s yaml does not apply: %v\n%s", schema.Plural(k), err, b.String())
		}
		if n := file.Interfaces; k == config.KindInterface && !reflect.DeepEqual(n, cur.Interfaces) {
			t.Errorf("interfaces back = %+v", n)
		}
		if n := file.Paths; k == config.KindPath && !reflect.DeepEqual(n, cur.Paths) {
			t.Errorf("paths back = %+v", n)
		}
		if n := file.FARs; k == config.KindFAR && !reflect.DeepEqual(n, cur.FARs) {
			t.Errorf("fars back = %+v", n)
		}
		if n := file.PDRs; k == config.KindPDR && !reflect.DeepEqual(n, cur.PDRs) {
			t.Errorf("pdrs back = %+v", n)
		}
		if n := file.LBRs; k == config.KindLBR && !reflect.DeepEqual(n, cur.LBRs) {
			t.Errorf("lbrs back = %+v", n)
		}
		if n := file.Services; k == config.KindService && !reflect.DeepEqual(n, cur.Services) {
			t.Errorf("services back = %+v", n)
		}
		if n := file.QoSClasses; k == config.KindQoSClass && !reflect.DeepEqual(n, cur.QoSClasses) {
			t.Errorf("qos classes back = %+v", n)
		}
		if n := file.FlowOpt; k == config.KindFlowOpt && !reflect.DeepEqual(n, cur.FlowOpt) {
			t.Errorf("flowopt back = %+v", n)
		}
		if n := file.Strategies; k == config.KindStrategy && !reflect.DeepEqual(n, cur.Strategies) {
			t.Errorf("strategies back = %+v", n)
		}
		changes := planApply(schema, file, cur)
		if len(changes) != len(o[k]) {
			t.Errorf("%s: %d changes, want %d", schema.Plural(k), len(changes), len(o[k]))
		}
		for _, c := range changes {
			if c.verb != "unchanged" {
				t.Errorf("%s %s %s, want unchanged", c.kind, c.key, c.verb)
			}
		}
	}
	// Every kind's output together is a whole config: to an empty agent
	// it creates all of it, referred-to objects first.
	file, _, err := fileObjects(schema, all.Bytes(), &config.Config{})
	if err != nil {
		t.Fatalf("all kinds do not apply: %v\n%s", err, all.String())
	}
	if !reflect.DeepEqual(file.Interfaces, cur.Interfaces) || !reflect.DeepEqual(file.Paths, cur.Paths) ||
		!reflect.DeepEqual(file.FARs, cur.FARs) || !reflect.DeepEqual(file.PDRs, cur.PDRs) ||
		!reflect.DeepEqual(file.LBRs, cur.LBRs) || !reflect.DeepEqual(file.Services, cur.Services) ||
		!reflect.DeepEqual(file.QoSClasses, cur.QoSClasses) || !reflect.DeepEqual(file.FlowOpt, cur.FlowOpt) ||
		!reflect.DeepEqual(file.Strategies, cur.Strategies) {
		t.Errorf("all kinds back = %+v\nwant %+v", file, cur)
	}
	var order []string
	for _, c := range planApply(schema, file, &config.Config{}) {
		if c.verb != "created" {
			t.Errorf("%s %s %s, want created", c.kind, c.key, c.verb)
		}
		if len(order) == 0 || order[len(order)-1] != schema.Plural(c.kind) {
			order = append(order, schema.Plural(c.kind))
		}
	}
	if want := []string{"interfaces", "paths", "fars", "lbrs", "services", "qos_classes", "flowopt", "strategies", "pdrs"}; !reflect.DeepEqual(order, want) {
		t.Errorf("created in the order %q, want %q", order, want)
	}
	var b bytes.Buffer
	if err := printObjects(&b, schema, config.KindPDR, nil, outYAML, false); err != nil || b.String() != "pdrs: []\n" {
		t.Errorf("no pdrs: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := printObjects(&b, schema, config.KindLBR, o[config.KindLBR], outYAML, false); err != nil {
		t.Fatal(err)
	}
	// An unset weight is left out, not printed as null.
	want := "lbrs:\n    - id: 1\n      algorithm: maglev\n      members:\n        - far: 4\n        - far: 5\n          weight: 3\n"
	if b.String() != want {
		t.Errorf("lbrs yaml:\n%s\nwant:\n%s", b.String(), want)
	}
}

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
