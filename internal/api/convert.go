// SPDX-License-Identifier: Apache-2.0

package api

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// The API carries each kind's objects as the message its Object oneof
// names after the kind ("pdr": Pdr), with the config file's field names
// and value syntax (CIDRs, protocol names, "lo-hi" port ranges as
// strings). So conversion needs nothing per kind: a config field maps to
// the message field of its yaml name, and value types go through their
// String and UnmarshalText, the parsing the file uses, so both say the
// same thing about a bad value.

var objectDesc = (&pb.Object{}).ProtoReflect().Descriptor()

// kindOfField returns the config kind an Object oneof field carries.
func kindOfField(fd protoreflect.FieldDescriptor) config.Kind { return config.Kind(fd.Name()) }

// objectField returns the Object oneof field of kind k, or nil when the
// API does not carry k.
func objectField(k config.Kind) protoreflect.FieldDescriptor {
	return objectDesc.Fields().ByName(protoreflect.Name(k))
}

// Carries reports whether the API carries objects of kind k.
func Carries(k config.Kind) bool { return objectField(k) != nil }

// NewMessage returns an empty message of kind k (nil if the API does not
// carry k).
func NewMessage(k config.Kind) proto.Message {
	fd := objectField(k)
	if fd == nil {
		return nil
	}
	return newOf(fd.Message())
}

func newOf(md protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		panic(err) // generated messages are registered
	}
	return mt.New().Interface()
}

// ToPB returns obj (a value of kind k's type) as its API message.
func ToPB(k config.Kind, obj any) proto.Message {
	m := NewMessage(k)
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer {
		// Addressable, so that value types are read through their
		// pointers rather than boxed one by one.
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		v = p
	}
	v = v.Elem()
	planOf(v.Type(), m.ProtoReflect().Descriptor()).to(v, m.ProtoReflect())
	return m
}

// FromPB returns m, an API message of kind k, in the config model (a
// value of k's type), or a config.Errors naming every field that does not
// convert, under prefix ("operations[3].create.pdr").
func FromPB(s *config.Schema, k config.Kind, m proto.Message, prefix string) (any, config.Errors) {
	v := reflect.New(s.Type(k)).Elem()
	var errs config.Errors
	planOf(v.Type(), m.ProtoReflect().Descriptor()).from(m.ProtoReflect(), v, &errs)
	for i := range errs {
		errs[i].Path = joinPath(prefix, errs[i].Path)
	}
	return v.Interface(), errs
}

// FromObject returns the kind and the config value of an Object, or
// false when it holds none.
func FromObject(s *config.Schema, obj *pb.Object, prefix string) (config.Kind, any, config.Errors, bool) {
	od := obj.ProtoReflect()
	fd := od.WhichOneof(objectDesc.Oneofs().ByName("kind"))
	if fd == nil {
		return "", nil, nil, false
	}
	k := kindOfField(fd)
	if _, ok := s.Lookup(string(k)); !ok {
		return "", nil, nil, false
	}
	v, errs := FromPB(s, k, od.Get(fd).Message().Interface(), joinPath(prefix, string(k)))
	return k, v, errs, true
}

// Object wraps an API message of kind k in an Object.
func Object(k config.Kind, m proto.Message) *pb.Object {
	o := &pb.Object{}
	o.ProtoReflect().Set(objectField(k), protoreflect.ValueOfMessage(m.ProtoReflect()))
	return o
}

// KindNames lists the kinds the API carries, for messages.
func KindNames() []string {
	fields := objectDesc.Oneofs().ByName("kind").Fields()
	out := make([]string, fields.Len())
	for i := range out {
		out[i] = string(fields.Get(i).Name())
	}
	return out
}

func joinPath(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// plan converts one config struct type to and from one message type.
type plan struct {
	fields []fieldPlan
}

// fieldPlan converts one field; v is the config struct. from reports
// errors at paths below the message (a nested message's caller puts its
// field's name in front), so that converting builds no path strings
// unless something is wrong.
type fieldPlan struct {
	to   func(v reflect.Value, m protoreflect.Message)
	from func(m protoreflect.Message, v reflect.Value, errs *config.Errors)
}

func (p *plan) to(v reflect.Value, m protoreflect.Message) {
	for _, f := range p.fields {
		f.to(v, m)
	}
}

func (p *plan) from(m protoreflect.Message, v reflect.Value, errs *config.Errors) {
	for _, f := range p.fields {
		f.from(m, v, errs)
	}
}

// under puts parent in front of the paths of errs[from:].
func under(errs config.Errors, from int, parent string) {
	for i := from; i < len(errs); i++ {
		errs[i].Path = parent + "." + errs[i].Path
	}
}

// plans memoizes planOf, by config type (each maps to one message):
// conversions run per object of every batch.
var plans sync.Map // reflect.Type -> *plan

// textValue is what the config's value types (Prefix, Proto, ...) are:
// written as a string, parsed by SetString as the config file parses
// them.
type textValue interface {
	String() string
	SetString(s string) error
}

var valueType = reflect.TypeFor[textValue]()

// planOf returns the conversion of config struct type t to and from
// messages md. A config field without a message field of its name is a
// build defect (TestConversionsCoverEveryField).
func planOf(t reflect.Type, md protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := &plan{}
	for _, f := range config.FieldsOf(t) {
		fd := md.Fields().ByName(protoreflect.Name(f.Name))
		if fd == nil {
			panic(fmt.Sprintf("api: %s has no field %s of %s", md.FullName(), f.Name, t))
		}
		p.fields = append(p.fields, fieldPlanOf(t.Field(f.Index).Type, f, fd))
	}
	plans.Store(t, p)
	return p
}

func fieldPlanOf(t reflect.Type, f config.Field, fd protoreflect.FieldDescriptor) fieldPlan {
	i, name := f.Index, f.Name
	switch {
	case reflect.PointerTo(t).Implements(valueType):
		return fieldPlan{
			to: func(v reflect.Value, m protoreflect.Message) {
				if s := v.Field(i).Addr().Interface().(textValue).String(); s != "" {
					m.Set(fd, protoreflect.ValueOfString(s))
				}
			},
			from: func(m protoreflect.Message, v reflect.Value, errs *config.Errors) {
				if s := m.Get(fd).String(); s != "" {
					if err := v.Field(i).Addr().Interface().(textValue).SetString(s); err != nil {
						*errs = append(*errs, config.FieldError{Path: name, Reason: err.Error()})
					}
				}
			},
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		return nested(t.Elem(), i, name, fd, true)
	case t.Kind() == reflect.Struct:
		return nested(t, i, name, fd, false)
	case t.Kind() == reflect.Slice:
		return repeated(t.Elem(), i, name, fd)
	}
	return scalar(t, f, fd)
}

// scalar converts strings, bools and unsigned integers, directly or
// through a pointer (an optional field).
func scalar(t reflect.Type, f config.Field, fd protoreflect.FieldDescriptor) fieldPlan {
	i, name := f.Index, f.Name
	ptr := t.Kind() == reflect.Pointer
	base := t
	if ptr {
		base = t.Elem()
	}
	var limit uint64
	if k := base.Kind(); k >= reflect.Uint8 && k <= reflect.Uint64 {
		limit = math.MaxUint64 >> (64 - base.Bits())
		if f.Max != 0 && f.Max < limit {
			limit = f.Max
		}
	}
	get := func(x reflect.Value) protoreflect.Value {
		switch base.Kind() {
		case reflect.String:
			return protoreflect.ValueOfString(x.String())
		case reflect.Bool:
			return protoreflect.ValueOfBool(x.Bool())
		}
		if fd.Kind() == protoreflect.Uint64Kind {
			return protoreflect.ValueOfUint64(x.Uint())
		}
		return protoreflect.ValueOfUint32(uint32(x.Uint()))
	}
	return fieldPlan{
		to: func(v reflect.Value, m protoreflect.Message) {
			x := v.Field(i)
			switch {
			case ptr && x.IsNil():
				return
			case ptr:
				x = x.Elem()
			case fd.HasPresence() && x.IsZero():
				return // an optional field is present only when set
			}
			m.Set(fd, get(x))
		},
		from: func(m protoreflect.Message, v reflect.Value, errs *config.Errors) {
			if fd.HasPresence() && !m.Has(fd) {
				return
			}
			pv := m.Get(fd)
			x := v.Field(i)
			if ptr {
				x = reflect.New(base).Elem()
			}
			switch base.Kind() {
			case reflect.String:
				x.SetString(pv.String())
			case reflect.Bool:
				x.SetBool(pv.Bool())
			default:
				n := pv.Uint()
				if n > limit {
					*errs = append(*errs, config.FieldError{Path: name, Reason: "must be 0-" + strconv.FormatUint(limit, 10) + ", got " + strconv.FormatUint(n, 10)})
					return
				}
				x.SetUint(n)
			}
			if ptr {
				v.Field(i).Set(x.Addr())
			}
		},
	}
}

// sub is the plan of a nested message field, found on first use (a
// type may nest itself) and kept, as conversions run per object.
type sub struct {
	t    reflect.Type
	md   protoreflect.MessageDescriptor
	once sync.Once
	p    *plan
}

func (s *sub) plan() *plan {
	s.once.Do(func() { s.p = planOf(s.t, s.md) })
	return s.p
}

// nested converts a struct to a message field (ptr: a *struct, absent
// when nil; else always present).
func nested(t reflect.Type, i int, name string, fd protoreflect.FieldDescriptor, ptr bool) fieldPlan {
	sp := &sub{t: t, md: fd.Message()}
	return fieldPlan{
		to: func(v reflect.Value, m protoreflect.Message) {
			x := v.Field(i)
			if ptr {
				if x.IsNil() {
					return
				}
				x = x.Elem()
			}
			sp.plan().to(x, m.Mutable(fd).Message())
		},
		from: func(m protoreflect.Message, v reflect.Value, errs *config.Errors) {
			if !m.Has(fd) {
				return
			}
			// A struct field is filled in place; a pointer gets a new
			// struct.
			x := v.Field(i)
			if ptr {
				x.Set(reflect.New(t))
				x = x.Elem()
			}
			n := len(*errs)
			sp.plan().from(m.Get(fd).Message(), x, errs)
			under(*errs, n, name)
		},
	}
}

// repeated converts a slice of structs to a repeated message field.
func repeated(t reflect.Type, i int, name string, fd protoreflect.FieldDescriptor) fieldPlan {
	sp := &sub{t: t, md: fd.Message()}
	return fieldPlan{
		to: func(v reflect.Value, m protoreflect.Message) {
			x := v.Field(i)
			if x.Len() == 0 {
				return
			}
			l := m.Mutable(fd).List()
			for j := range x.Len() {
				e := l.NewElement()
				sp.plan().to(x.Index(j), e.Message())
				l.Append(e)
			}
		},
		from: func(m protoreflect.Message, v reflect.Value, errs *config.Errors) {
			l := m.Get(fd).List()
			if l.Len() == 0 {
				return
			}
			x := reflect.MakeSlice(reflect.SliceOf(t), l.Len(), l.Len())
			for j := range l.Len() {
				n := len(*errs)
				sp.plan().from(l.Get(j).Message(), x.Index(j), errs)
				under(*errs, n, name+"["+strconv.Itoa(j)+"]")
			}
			v.Field(i).Set(x)
		},
	}
}

// statsToPB converts a counter snapshot, naming verdicts and reasons as
// `edgeplane stats` does and leaving out reasons that never happened.
func statsToPB(s *bpf.Snapshot) *pb.Stats {
	out := &pb.Stats{Generation: s.Gen, Verdicts: map[string]*pb.Counter{}, Reasons: map[string]*pb.Counter{},
		FlowCacheHits: s.CacheHit, FlowCacheMisses: s.CacheMiss}
	ctr := func(c bpf.Counter) *pb.Counter { return &pb.Counter{Packets: c.Packets, Bytes: c.Bytes} }
	for _, id := range slices.Sorted(maps.Keys(s.PDRs)) {
		out.Pdrs = append(out.Pdrs, &pb.PdrCounter{Id: id, Counter: ctr(s.PDRs[id])})
	}
	for i, c := range s.Verdicts {
		if i < len(bpf.VerdictNames) {
			out.Verdicts[bpf.VerdictNames[i]] = ctr(c)
		}
	}
	for i, c := range s.Reasons {
		if i < len(bpf.ReasonNames) && c.Packets > 0 {
			out.Reasons[bpf.ReasonNames[i]] = ctr(c)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.Paths)) {
		p := s.Paths[id]
		out.Paths = append(out.Paths, &pb.PathCounter{Id: id, Tx: ctr(p.Tx), Rx: ctr(p.Rx)})
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, &pb.BackendCounter{Service: b.Service, Far: b.FAR, Counter: ctr(b.Counter),
			NewConnections: b.NewConns, ActiveConnections: b.Active})
	}
	return out
}
