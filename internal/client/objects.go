// SPDX-License-Identifier: Apache-2.0

package client

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Objects are objects the agent sent, by kind, as the API carries them.
type Objects map[config.Kind][]proto.Message

// ParseKind accepts a kind's singular or plural name, in any case: a kind
// the config declares and the API carries. Anything else is an error
// naming the kinds there are.
func ParseKind(s *config.Schema, name string) (config.Kind, error) {
	if k, ok := s.Lookup(name); ok && api.Carries(k) {
		return k, nil
	}
	return "", fmt.Errorf("unknown kind %q (want %s)", name, KindList(s, "or"))
}

// CompletionKinds are the plural kind names the API carries, in the
// reverse of the schema's order: the rules, which are listed and changed
// most, first.
func CompletionKinds(s *config.Schema) []string {
	var out []string
	for _, k := range slices.Backward(s.Kinds()) {
		if api.Carries(k) {
			out = append(out, s.Plural(k))
		}
	}
	return out
}

// KindList names every kind (plural) as CompletionKinds orders them, conj
// before the last.
func KindList(s *config.Schema, conj string) string {
	names := CompletionKinds(s)
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

// ParseRefs turns command line ids (names for kinds named by name) into
// refs, dropping repeats.
func ParseRefs(s *config.Schema, k config.Kind, args []string) ([]*pb.Ref, error) {
	var refs []*pb.Ref
	seen := map[string]bool{}
	for _, a := range args {
		r := &pb.Ref{Kind: api.KindRef(k)}
		if s.ByName(k) {
			if a == "" {
				return nil, fmt.Errorf("empty %s name", k)
			}
			r.Name = a
		} else {
			id, err := strconv.ParseUint(a, 10, 32)
			if err != nil || id == 0 {
				return nil, fmt.Errorf("%s id %q: want a number 1-%d", k, a, uint32(1<<32-1))
			}
			r.Id = uint32(id)
			a = strconv.FormatUint(id, 10)
		}
		if !seen[a] {
			seen[a] = true
			refs = append(refs, r)
		}
	}
	return refs, nil
}

// RefKey returns what a ref names, as the command line gave it.
func RefKey(r *pb.Ref) string {
	if r.GetName() != "" {
		return r.GetName()
	}
	return strconv.FormatUint(uint64(r.GetId()), 10)
}

// rpcs are the List and Get methods of a kind: the methods of the Gateway
// service whose answer is a list of the kind's message, and the message.
func rpcs(k config.Kind) (list, get protoreflect.MethodDescriptor) {
	md := api.NewMessage(k).ProtoReflect().Descriptor()
	methods := pb.File_edgeplane_proto.Services().ByName("Gateway").Methods()
	for i := range methods.Len() {
		m := methods.Get(i)
		out := m.Output()
		switch {
		case out.FullName() == md.FullName():
			get = m
		case out.Fields().Len() == 1 && out.Fields().Get(0).IsList() && out.Fields().Get(0).Message() != nil &&
			out.Fields().Get(0).Message().FullName() == md.FullName():
			list = m
		}
	}
	if list == nil || get == nil {
		panic("client: no List or Get method for " + string(k)) // the API carries the kind
	}
	return list, get
}

// call calls method m of the Gateway client with req.
func (c *Conn) call(m protoreflect.MethodDescriptor, req proto.Message) (proto.Message, error) {
	out := reflect.ValueOf(c.GatewayClient).MethodByName(string(m.Name())).Call([]reflect.Value{reflect.ValueOf(c.Ctx), reflect.ValueOf(req)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	return out[0].Interface().(proto.Message), nil
}

func newRequest(m protoreflect.MethodDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		panic(err) // generated messages are registered
	}
	return mt.New().Interface()
}

// List reads every object of kind k, sorted by key; op names the call in
// errors.
func (c *Conn) List(s *config.Schema, op string, k config.Kind) ([]proto.Message, error) {
	list, _ := rpcs(k)
	r, err := c.call(list, &pb.ListRequest{Target: c.Target})
	if err != nil {
		return nil, c.Err(op, err)
	}
	l := r.ProtoReflect().Get(list.Output().Fields().Get(0)).List()
	out := make([]proto.Message, l.Len())
	for i := range out {
		out[i] = l.Get(i).Message().Interface()
	}
	sortByKey(s, k, out)
	return out, nil
}

// ListAll reads every object the agent has.
func (c *Conn) ListAll(s *config.Schema, op string) (Objects, error) {
	o := Objects{}
	for _, k := range s.Kinds() {
		if !api.Carries(k) {
			continue
		}
		l, err := c.List(s, op+": list "+s.Plural(k), k)
		// An agent older than a kind answers Unimplemented for its list;
		// it has none of them, and apply of the other kinds must still
		// work against it.
		if st, ok := status.FromError(errors.Unwrap(err)); ok && st.Code() == codes.Unimplemented {
			continue
		}
		if err != nil {
			return nil, err
		}
		o[k] = l
	}
	return o, nil
}

// Get reads the objects refs name, in their order.
func (c *Conn) Get(k config.Kind, refs []*pb.Ref) ([]proto.Message, error) {
	_, get := rpcs(k)
	var out []proto.Message
	for _, r := range refs {
		req := newRequest(get)
		fields := req.ProtoReflect().Descriptor().Fields()
		if c.Target != nil {
			req.ProtoReflect().Set(fields.ByName("target"), protoreflect.ValueOfMessage(c.Target.ProtoReflect()))
		}
		if fd := fields.ByName("name"); fd != nil {
			req.ProtoReflect().Set(fd, protoreflect.ValueOfString(r.GetName()))
		} else {
			req.ProtoReflect().Set(fields.ByName("id"), protoreflect.ValueOfUint32(r.GetId()))
		}
		v, err := c.call(get, req)
		if err != nil {
			return nil, c.Err("get "+string(k)+" "+RefKey(r), err)
		}
		out = append(out, v)
	}
	return out, nil
}

// sortByKey orders messages of kind k by id (or name).
func sortByKey(s *config.Schema, k config.Kind, msgs []proto.Message) {
	key := func(m proto.Message) protoreflect.Value {
		r := m.ProtoReflect()
		return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(s.KeyField(k))))
	}
	slices.SortFunc(msgs, func(a, b proto.Message) int {
		if s.ByName(k) {
			return strings.Compare(key(a).String(), key(b).String())
		}
		return cmp.Compare(key(a).Uint(), key(b).Uint())
	})
}

// ToConfig returns o in the config model (only the object lists set),
// normalized as the agent normalizes a config, so that objects compare
// equal however they were written.
func (o Objects) ToConfig(s *config.Schema) (*config.Config, error) {
	c := &config.Config{}
	for _, k := range s.Kinds() {
		msgs, ok := o[k]
		if !ok {
			continue
		}
		objs := make([]any, len(msgs))
		for i, m := range msgs {
			v, errs := api.FromPB(s, k, m, string(k))
			if len(errs) > 0 {
				return nil, fmt.Errorf("%s %v from the agent: %w", k, s.KeyOf(k, v), errs)
			}
			objs[i] = v
		}
		s.SetObjects(c, k, objs)
	}
	s.Normalize(c)
	return c, nil
}

// NewListResponse returns an empty List response of kind k: its only
// field is the list.
func NewListResponse(k config.Kind) proto.Message {
	list, _ := rpcs(k)
	mt, err := protoregistry.GlobalTypes.FindMessageByName(list.Output().FullName())
	if err != nil {
		panic(err) // generated messages are registered
	}
	return mt.New().Interface()
}
