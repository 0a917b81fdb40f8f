// SPDX-License-Identifier: Apache-2.0

package api

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// The API carries each kind's objects as the message its Object oneof
// names after the kind ("pdr": Pdr), with the config file's field names
// and value syntax (CIDRs, protocol names, "lo-hi" port ranges as
// strings). So conversion needs nothing per kind: a config field maps to
// the message field of its yaml name, and value types go through their
// String and SetString, the parsing the file uses, so both say the
// same thing about a bad value.

var objectDesc = (&pb.Object{}).ProtoReflect().Descriptor()

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

// ToPB returns obj (a value of kind k's type) as its API message, as
// the API shows it: secrets redacted.
func ToPB(k config.Kind, obj any) proto.Message { return toPB(k, obj, false) }

// ToPBRevealed is ToPB with secrets given in full: for a message that
// carries an object to where it is applied (an apply's operation, the
// fleet's store), never for one that shows it.
func ToPBRevealed(k config.Kind, obj any) proto.Message { return toPB(k, obj, true) }

func toPB(k config.Kind, obj any, reveal bool) proto.Message {
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
	mv := reflect.ValueOf(m).Elem()
	planOf(v.Type(), mv.Type()).to(v, mv, reveal)
	return m
}

// FromPB returns m, an API message of kind k, in the config model (a
// value of k's type), or a config.Errors naming every field that does not
// convert, under prefix ("operations[3].create.pdr").
func FromPB(s *config.Schema, k config.Kind, m proto.Message, prefix string) (any, config.Errors) {
	v := reflect.New(s.Type(k)).Elem()
	var errs config.Errors
	mv := reflect.ValueOf(m).Elem()
	planOf(v.Type(), mv.Type()).from(mv, v, &errs)
	for i := range errs {
		errs[i].Path = joinPath(prefix, errs[i].Path)
	}
	return v.Interface(), errs
}

// ObjectMessage returns the kind and the message an Object holds, or
// false when it holds none.
func ObjectMessage(obj *pb.Object) (config.Kind, proto.Message, bool) {
	w := obj.GetKind()
	if w == nil {
		return "", nil, false
	}
	return oneofKind(reflect.TypeOf(w)), reflect.ValueOf(w).Elem().Field(0).Interface().(proto.Message), true
}

// oneofKinds memoizes oneofKind.
var oneofKinds sync.Map // reflect.Type -> config.Kind

// oneofKind returns the kind an Object oneof wrapper type (*Object_Pdr)
// carries: its field's proto name.
func oneofKind(t reflect.Type) config.Kind {
	if k, ok := oneofKinds.Load(t); ok {
		return k.(config.Kind)
	}
	var k config.Kind
	for _, part := range strings.Split(t.Elem().Field(0).Tag.Get("protobuf"), ",") {
		if name, ok := strings.CutPrefix(part, "name="); ok {
			k = config.Kind(name)
		}
	}
	oneofKinds.Store(t, k)
	return k
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

// plan converts one config struct type to and from one generated
// message struct, field by field through cached struct field indexes:
// plain reflection, cheaper per field than protoreflect's, as a batch
// converts every object it carries.
type plan struct {
	fields []fieldPlan
}

// fieldPlan converts one field; v is the config struct, m the message
// struct (both addressable). from reports errors at paths below the
// message (a nested message's caller puts its field's name in front),
// so that converting builds no path strings unless something is wrong.
type fieldPlan struct {
	to   func(v, m reflect.Value, reveal bool)
	from func(m, v reflect.Value, errs *config.Errors)
}

func (p *plan) to(v, m reflect.Value, reveal bool) {
	for _, f := range p.fields {
		f.to(v, m, reveal)
	}
}

func (p *plan) from(m, v reflect.Value, errs *config.Errors) {
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

// plans memoizes planOf, by config type (each maps to one message).
var plans sync.Map // reflect.Type -> *plan

// textValue is what the config's value types (Prefix, Proto, ...) are:
// written as a string, parsed by SetString as the config file parses
// them.
type textValue interface {
	String() string
	SetString(s string) error
}

var valueType = reflect.TypeFor[textValue]()

// revealer is a value type that is a secret (config.Secret): String
// redacts it, Reveal gives it.
type revealer interface {
	Reveal() string
}

// planOf returns the conversion of config struct type t to and from
// message struct type mt. A config field without a message field of its
// name is a build defect (TestConversionsCoverEveryField).
func planOf(t, mt reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	byName := map[string]int{}
	for i := range mt.NumField() {
		for _, part := range strings.Split(mt.Field(i).Tag.Get("protobuf"), ",") {
			if name, ok := strings.CutPrefix(part, "name="); ok {
				byName[name] = i
			}
		}
	}
	p := &plan{}
	for _, f := range config.FieldsOf(t) {
		j, ok := byName[f.Name]
		if !ok {
			panic(fmt.Sprintf("api: %s has no field %s of %s", mt, f.Name, t))
		}
		p.fields = append(p.fields, fieldPlanOf(t.Field(f.Index).Type, mt.Field(j).Type, f, j))
	}
	plans.Store(t, p)
	return p
}

func fieldPlanOf(t, mt reflect.Type, f config.Field, j int) fieldPlan {
	i, name := f.Index, f.Name
	switch {
	case reflect.PointerTo(t).Implements(valueType):
		_, secret := reflect.New(t).Interface().(revealer)
		return fieldPlan{
			to: func(v, m reflect.Value, reveal bool) {
				x := v.Field(i).Addr().Interface()
				if secret && reveal {
					m.Field(j).SetString(x.(revealer).Reveal())
					return
				}
				m.Field(j).SetString(x.(textValue).String())
			},
			from: func(m, v reflect.Value, errs *config.Errors) {
				if s := m.Field(j).String(); s != "" {
					if err := v.Field(i).Addr().Interface().(textValue).SetString(s); err != nil {
						*errs = append(*errs, config.FieldError{Path: name, Reason: err.Error()})
					}
				}
			},
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		return nested(t.Elem(), mt.Elem(), i, j, name, true)
	case t.Kind() == reflect.Struct:
		return nested(t, mt.Elem(), i, j, name, false)
	case t == mt && (t.Kind() == reflect.Slice || t.Kind() == reflect.Map) && t.Elem().Kind() == reflect.String:
		return copied(i, j)
	case t.Kind() == reflect.Slice:
		return repeated(t.Elem(), mt.Elem().Elem(), i, j, name)
	}
	return scalar(t, mt, f, j)
}

// scalar converts strings, bools and unsigned integers, directly or
// through a pointer (an optional field). A config value that is not a
// pointer but whose message field is (optional) is sent only when set.
func scalar(t, mt reflect.Type, f config.Field, j int) fieldPlan {
	i, name := f.Index, f.Name
	ptr, mptr := t.Kind() == reflect.Pointer, mt.Kind() == reflect.Pointer
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
	// set copies scalar x into y, which may be of another width.
	set := func(y, x reflect.Value) {
		switch x.Kind() {
		case reflect.String:
			y.SetString(x.String())
		case reflect.Bool:
			y.SetBool(x.Bool())
		default:
			y.SetUint(x.Uint())
		}
	}
	return fieldPlan{
		to: func(v, m reflect.Value, _ bool) {
			x := v.Field(i)
			switch {
			case ptr && x.IsNil():
				return
			case ptr:
				x = x.Elem()
			case mptr && x.IsZero():
				return
			}
			y := m.Field(j)
			if mptr {
				y.Set(reflect.New(mt.Elem()))
				y = y.Elem()
			}
			set(y, x)
		},
		from: func(m, v reflect.Value, errs *config.Errors) {
			y := m.Field(j)
			if mptr {
				if y.IsNil() {
					return
				}
				y = y.Elem()
			}
			if limit != 0 && y.Uint() > limit {
				*errs = append(*errs, config.FieldError{Path: name, Reason: "must be 0-" + strconv.FormatUint(limit, 10) + ", got " + strconv.FormatUint(y.Uint(), 10)})
				return
			}
			x := v.Field(i)
			if ptr {
				x.Set(reflect.New(base))
				x = x.Elem()
			}
			set(x, y)
		},
	}
}

// copied converts a list of strings or a map of them ([]string,
// map[string]string), which the message holds as the same Go type: a
// copy, so neither side shares what the other may change.
func copied(i, j int) fieldPlan {
	cp := func(dst, src reflect.Value) {
		if src.Len() == 0 {
			return
		}
		if src.Kind() == reflect.Slice {
			dst.Set(reflect.AppendSlice(reflect.MakeSlice(src.Type(), 0, src.Len()), src))
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			m.SetMapIndex(it.Key(), it.Value())
		}
		dst.Set(m)
	}
	return fieldPlan{
		to:   func(v, m reflect.Value, _ bool) { cp(m.Field(j), v.Field(i)) },
		from: func(m, v reflect.Value, _ *config.Errors) { cp(v.Field(i), m.Field(j)) },
	}
}

// sub is the plan of a nested message field, found on first use (a
// type may nest itself) and kept.
type sub struct {
	t, mt reflect.Type
	once  sync.Once
	p     *plan
}

func (s *sub) plan() *plan {
	s.once.Do(func() { s.p = planOf(s.t, s.mt) })
	return s.p
}

// nested converts a struct to a message field (ptr: a *struct, absent
// when nil; else always present). mt is the message struct type.
func nested(t, mt reflect.Type, i, j int, name string, ptr bool) fieldPlan {
	sp := &sub{t: t, mt: mt}
	return fieldPlan{
		to: func(v, m reflect.Value, reveal bool) {
			x := v.Field(i)
			if ptr {
				if x.IsNil() {
					return
				}
				x = x.Elem()
			}
			y := reflect.New(mt)
			sp.plan().to(x, y.Elem(), reveal)
			m.Field(j).Set(y)
		},
		from: func(m, v reflect.Value, errs *config.Errors) {
			y := m.Field(j)
			if y.IsNil() {
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
			sp.plan().from(y.Elem(), x, errs)
			under(*errs, n, name)
		},
	}
}

// repeated converts a slice of structs to a repeated message field.
func repeated(t, mt reflect.Type, i, j int, name string) fieldPlan {
	sp := &sub{t: t, mt: mt}
	return fieldPlan{
		to: func(v, m reflect.Value, reveal bool) {
			x := v.Field(i)
			if x.Len() == 0 {
				return
			}
			l := reflect.MakeSlice(m.Field(j).Type(), x.Len(), x.Len())
			for k := range x.Len() {
				y := reflect.New(mt)
				sp.plan().to(x.Index(k), y.Elem(), reveal)
				l.Index(k).Set(y)
			}
			m.Field(j).Set(l)
		},
		from: func(m, v reflect.Value, errs *config.Errors) {
			l := m.Field(j)
			if l.Len() == 0 {
				return
			}
			x := reflect.MakeSlice(reflect.SliceOf(t), l.Len(), l.Len())
			for k := range l.Len() {
				if l.Index(k).IsNil() {
					continue
				}
				n := len(*errs)
				sp.plan().from(l.Index(k).Elem(), x.Index(k), errs)
				under(*errs, n, name+"["+strconv.Itoa(k)+"]")
			}
			v.Field(i).Set(x)
		},
	}
}

// statsToPB converts a counter snapshot, naming verdicts and reasons as
// `edgeplane stats` does and leaving out reasons that never happened.
func statsToPB(s *dataplane.Snapshot) *pb.Stats {
	out := &pb.Stats{Generation: s.Gen, Verdicts: map[string]*pb.Counter{}, Reasons: map[string]*pb.Counter{},
		FlowCacheHits: s.CacheHit, FlowCacheMisses: s.CacheMiss,
		FlowFirstPackets: s.CacheFirst}
	ctr := func(c dataplane.Counter) *pb.Counter { return &pb.Counter{Packets: c.Packets, Bytes: c.Bytes} }
	for _, id := range slices.Sorted(maps.Keys(s.PDRs)) {
		out.Pdrs = append(out.Pdrs, &pb.PdrCounter{Id: id, Counter: ctr(s.PDRs[id])})
	}
	for i, c := range s.Verdicts {
		if i < len(dataplane.VerdictNames) {
			out.Verdicts[dataplane.VerdictNames[i]] = ctr(c)
		}
	}
	for i, c := range s.Reasons {
		if i < len(dataplane.ReasonNames) && c.Packets > 0 {
			out.Reasons[dataplane.ReasonNames[i]] = ctr(c)
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
	if len(s.XDPCPU) > 0 {
		out.XdpCpu = map[string]*pb.CpuPackets{}
		for name, per := range s.XDPCPU {
			out.XdpCpu[name] = &pb.CpuPackets{Packets: per}
		}
	}
	return out
}

// pathStatusToPB converts the path monitor's view of each path.
func pathStatusToPB(st []dataplane.PathStatus) []*pb.PathStatus {
	out := make([]*pb.PathStatus, 0, len(st))
	for _, s := range st {
		out = append(out, &pb.PathStatus{
			Path: s.Path, State: s.State, Since: s.Since.UTC().Format(time.RFC3339Nano), Why: s.Why,
			RttUs: uint64(s.SRTT.Microseconds()), JitterUs: uint64(s.Jitter.Microseconds()),
			MinRttUs: uint64(s.MinRTT.Microseconds()), LastRttUs: uint64(s.LastRTT.Microseconds()),
			Loss: s.Loss, ProbesSent: s.Sent, ProbesAnswered: s.Answered, Monitored: s.Monitored,
			TcpRttUs: uint64(s.TCPRTT.Microseconds()), TcpMinRttUs: uint64(s.TCPMinRTT.Microseconds()), TcpRttSamples: s.TCPSamples,
		})
	}
	return out
}

// strategyStatusToPB converts what each CPU strategy holds.
func strategyStatusToPB(st []dataplane.StrategyStatus) []*pb.StrategyStatus {
	var out []*pb.StrategyStatus
	for _, s := range st {
		ps := &pb.StrategyStatus{Strategy: s.Strategy, Error: s.Error, Others: s.Others}
		for _, p := range s.Procs {
			pp := &pb.StrategyProcess{Pid: int32(p.PID), Comm: p.Comm, Threads: uint32(p.Threads), Applied: p.Applied}
			for _, c := range p.RanOn {
				pp.RanOn = append(pp.RanOn, uint32(c))
			}
			ps.Processes = append(ps.Processes, pp)
		}
		out = append(out, ps)
	}
	return out
}
