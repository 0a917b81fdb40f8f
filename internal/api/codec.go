// SPDX-License-Identifier: Apache-2.0

package api

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

// boundedCodec is gRPC's proto codec with one change: an ApplyRequest
// is decoded with at most MaxOperations+1 operations. An empty operation
// is two bytes on the wire and a few dozen in memory, so a request of
// MaxRequestBytes would decode into ~16M objects (~1.3 GB) before Apply
// could count them. The operations are counted on the wire first (no
// allocation); past the bound, only the first MaxOperations+1 are
// decoded, which Apply then refuses as too many.
type boundedCodec struct {
	encoding.CodecV2
}

func newBoundedCodec() encoding.CodecV2 {
	return boundedCodec{encoding.GetCodecV2("proto")}
}

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*pb.ApplyRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	end, err := opsPrefix(b, MaxOperations+1)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b[:end], req)
}

// opsPrefix returns the length of the longest prefix of an encoded
// ApplyRequest that holds at most max operations (field 1): all of b
// when it holds no more.
func opsPrefix(b []byte, max int) (int, error) {
	const opsField = 1
	n, off := 0, 0
	for off < len(b) {
		num, typ, tl := protowire.ConsumeTag(b[off:])
		if tl < 0 {
			return 0, fmt.Errorf("apply request at byte %d: %w", off, protowire.ParseError(tl))
		}
		vl := protowire.ConsumeFieldValue(num, typ, b[off+tl:])
		if vl < 0 {
			return 0, fmt.Errorf("apply request at byte %d: %w", off, protowire.ParseError(vl))
		}
		off += tl + vl
		if num == opsField {
			if n++; n == max {
				return off, nil
			}
		}
	}
	return len(b), nil
}

// jsonOpsCount counts the values in the arrays that are members of the
// top-level object of JSON b (an ApplyRequest's one array is
// operations), up to max+1: REST's equivalent of opsPrefix, a scan that
// allocates nothing, run before the gateway decodes the body into
// objects. Malformed JSON is counted as far as it goes; the decoder
// reports it after.
func jsonOpsCount(b []byte, max int) int {
	n, depth := 0, 0
	inArray, expect, inString, escaped := false, false, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if depth == 2 && inArray && expect && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != ']' {
			if n++; n > max {
				return n
			}
			expect = false
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth == 2 {
				inArray, expect = c == '[', true
			}
		case '}', ']':
			depth--
		case ',':
			expect = depth == 2
		}
	}
	return n
}
