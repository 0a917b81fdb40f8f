// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

// TestGeneratedIsCommitted: kinds_gen.go is what the service generates
// now, so a kind added to the proto is served once make generate ran.
func TestGeneratedIsCommitted(t *testing.T) {
	want, err := generate(pb.File_edgeplane_proto)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../kinds_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("internal/api/kinds_gen.go is stale: run make generate")
	}
}

// TestKindWithoutCalls refuses a kind in the Object oneof whose List or
// Get call the service lacks, naming it.
func TestKindWithoutCalls(t *testing.T) {
	fdp := protodesc.ToFileDescriptorProto(pb.File_edgeplane_proto)
	var svc *descriptorpb.ServiceDescriptorProto
	for _, s := range fdp.Service {
		if s.GetName() == "Gateway" {
			svc = s
		}
	}
	kept := svc.Method[:0]
	for _, m := range svc.Method {
		if m.GetName() != "GetQosClass" {
			kept = append(kept, m)
		}
	}
	svc.Method = kept
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("rebuild the descriptor: %v", err)
	}
	if _, err := generate(fd); err == nil || !strings.Contains(err.Error(), "kind qos_class has 1 of its List and Get calls") {
		t.Errorf("generate without GetQosClass: %v", err)
	}
}
