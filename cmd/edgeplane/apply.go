// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

func newApplyCmd() *cobra.Command {
	var af client.Flags
	var file string
	var dryRun bool
	s := config.Builtin()
	c := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update a gateway's objects from a YAML file, all or nothing",
		Long: `Reads objects in the shape of the agent's config file (interfaces, paths,
fars, lbrs, services and pdrs lists: a whole config file, or only some of
the lists) and sends them to the agent as one Apply batch, in that order:
what is referred to before what refers to it. An object the agent has
(same id; interfaces: same name) is updated, replaced whole; one it lacks
is created; one it has as written is left alone. The agent commits the batch
as one rules generation, or nothing of it when anything is wrong. Objects
the agent has and the file does not name are kept. limits and defaults are
not set through the API and are ignored.

The file is checked together with the agent's objects before it is sent,
so problems are reported at their paths in the file.`,
		Example: `  edgeplane get pdrs -o yaml > pdrs.yaml; $EDITOR pdrs.yaml; edgeplane apply -f pdrs.yaml
  edgeplane apply -f config.yaml --dry-run
  cat far.yaml | edgeplane apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readInput(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			conn, err := af.Connect(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer conn.Close()
			have, err := conn.ListAll(s, "apply")
			if err != nil {
				return err
			}
			cur, err := have.ToConfig(s)
			if err != nil {
				return err
			}
			var want *config.Config
			var notes []string
			if isController(conn) {
				// A target's objects are checked by the controller as
				// each gateway it reaches holds them (with what its
				// other targets give it): here only that they decode.
				var parsed *config.Config
				if parsed, err = yamlcfg.For(s).ParseObjects(data); err == nil {
					want = objectsOnly(s, parsed, nil)
				}
			} else {
				want, notes, err = fileObjects(s, data, cur)
			}
			for _, n := range notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
			}
			if err != nil {
				return err
			}
			changes := planApply(s, want, cur)
			if len(changes) == 0 {
				return errors.New("no " + client.KindList(s, "or") + " to apply")
			}
			req := &pb.ApplyRequest{DryRun: dryRun, Target: conn.Target}
			var names []string
			for _, ch := range changes {
				if ch.op != nil {
					req.Operations = append(req.Operations, ch.op)
					names = append(names, string(ch.kind)+" "+ch.key)
				}
			}
			out := cmd.OutOrStdout()
			suffix := ""
			if dryRun {
				suffix = " (dry run)"
			}
			if len(req.Operations) == 0 {
				for _, ch := range changes {
					fmt.Fprintf(out, "%s %s %s\n", ch.kind, ch.key, ch.verb)
				}
				return nil
			}
			r, err := conn.Apply(conn.Ctx, req)
			if err != nil {
				return batchErr(conn, "apply", err, names)
			}
			for _, ch := range changes {
				s := suffix
				if ch.op == nil {
					s = ""
				}
				fmt.Fprintf(out, "%s %s %s%s\n", ch.kind, ch.key, ch.verb, s)
			}
			applyResult(out, r, dryRun)
			return nil
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "YAML file in the config file's shape (- for stdin)")
	_ = c.MarkFlagRequired("filename")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "only check the batch on the agent; change nothing")
	af.Register(c)
	return c
}

// batchErr describes a refused Apply whose operations name the objects
// names lists.
func batchErr(conn *client.Conn, op string, err error, names []string) error {
	e := conn.Err(op, err)
	if re, ok := e.(*client.RPCError); ok {
		re.Ops = names
	}
	return e
}

func readInput(stdin io.Reader, file string) ([]byte, error) {
	if file == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read objects: %w", err)
	}
	return b, nil
}

// isController reports whether conn is to a fleet controller: one that
// lists gateways.
func isController(conn *client.Conn) bool {
	_, err := conn.ListGateways(conn.Ctx, &pb.ListRequest{})
	return err == nil
}

// applyResult prints the outcome of an Apply.
func applyResult(w io.Writer, r *pb.ApplyResponse, dryRun bool) {
	took := time.Duration(r.GetCommitMicros()) * time.Microsecond
	if r.GetRevision() != 0 { // a controller's answer
		if dryRun {
			fmt.Fprintf(w, "dry run: valid for every gateway it reaches, nothing changed (etcd revision %d)\n", r.GetRevision())
			return
		}
		fmt.Fprintf(w, "etcd revision %d (written in %s; edgeplane get gateways shows who has committed it)\n", r.GetRevision(), took)
		return
	}
	if dryRun {
		fmt.Fprintf(w, "dry run: valid, nothing changed (generation %d serving)\n", r.GetGeneration())
		return
	}
	fmt.Fprintf(w, "generation %d (committed in %s)\n", r.GetGeneration(), took)
}

// ignoredSections are top-level keys of a config file that apply reads
// past: the API does not change them.
var ignoredSections = []string{"limits", "defaults"}

// objectsOnly returns c's object lists, without limits and defaults.
func objectsOnly(s *config.Schema, c *config.Config, count func(config.Kind) int) *config.Config {
	out := &config.Config{}
	for _, k := range s.Kinds() {
		objs := s.Objects(c, k)
		if count != nil {
			objs = objs[:count(k)]
		}
		s.SetObjects(out, k, objs)
	}
	return out
}

// fileObjects reads the objects of a YAML file in the config file's shape:
// a whole config, or only some of its lists. cur is what the agent has.
// A whole valid config is taken as it is; a partial one is checked
// together with cur (the file's objects replacing the agent's of the same
// key), so every problem is reported at its path in the file, and a
// reference to an object only the agent has is not one. The result holds
// the file's objects only, in file order. notes says what was ignored.
func fileObjects(s *config.Schema, data []byte, cur *config.Config) (file *config.Config, notes []string, err error) {
	whole, perr := yamlcfg.For(s).Parse(data)
	var fe config.Errors
	if perr != nil && (!errors.As(perr, &fe) || slices.ContainsFunc(fe, func(e config.FieldError) bool { return e.Path == "config" })) {
		// The document itself is wrong (YAML syntax, not a mapping,
		// several documents): nothing to merge.
		return nil, nil, perr
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("invalid YAML: %w", err)
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
		root = doc.Content[0]
	}
	var ignored []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i].Value; slices.Contains(ignoredSections, k) && !slices.Contains(ignored, k) {
			ignored = append(ignored, k)
		}
	}
	if len(ignored) > 0 {
		notes = append(notes, strings.Join(ignored, " and ")+" ignored: they are set in the agent's config file, not through the API")
	}
	if perr == nil {
		return objectsOnly(s, whole, nil), notes, nil
	}

	// The agent's objects are appended after the file's in each list, so
	// list indexes below a list's file count are those of the file.
	merged := &yaml.Node{Kind: yaml.MappingNode}
	inFile := map[config.Kind]int{}     // kind -> number of file items
	extra := map[config.Kind][]string{} // kind -> keys of the agent's items appended
	done := map[config.Kind]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if slices.Contains(ignoredSections, k.Value) {
			continue
		}
		if kind, ok := listKind(s, k.Value); ok && !done[kind] {
			if items, ok := seqItems(v); ok {
				done[kind] = true
				inFile[kind] = len(items)
				nodes, keys, err := agentItems(s, kind, items, cur)
				if err != nil {
					return nil, nil, err
				}
				extra[kind] = keys
				v = &yaml.Node{Kind: yaml.SequenceNode, Content: append(slices.Clone(items), nodes...)}
			}
		}
		merged.Content = append(merged.Content, k, v)
	}
	for _, kind := range s.Kinds() {
		if done[kind] {
			continue
		}
		nodes, keys, err := agentItems(s, kind, nil, cur)
		if err != nil {
			return nil, nil, err
		}
		extra[kind] = keys
		merged.Content = append(merged.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: s.Plural(kind)},
			&yaml.Node{Kind: yaml.SequenceNode, Content: nodes})
	}
	out, err := yaml.Marshal(merged)
	if err != nil {
		return nil, nil, fmt.Errorf("merge with the agent's objects: %w", err)
	}
	cfg, err := yamlcfg.For(s).Parse(out)
	if err != nil {
		if errors.As(err, &fe) {
			return nil, notes, noteAgentItems(s, fe, inFile, extra)
		}
		return nil, notes, err
	}
	return objectsOnly(s, cfg, func(k config.Kind) int { return inFile[k] }), notes, nil
}

// listKind returns the kind whose list key is the top-level key.
func listKind(s *config.Schema, key string) (config.Kind, bool) {
	k, ok := s.Lookup(key)
	return k, ok && s.Plural(k) == key
}

// seqItems returns the items of a list node (none for null); ok is false
// for anything else, which Parse then reports.
func seqItems(n *yaml.Node) ([]*yaml.Node, bool) {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	switch {
	case n == nil:
		return nil, true
	case n.Kind == yaml.SequenceNode:
		return n.Content, true
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		return nil, true
	}
	return nil, false
}

// itemKey returns the key (id, or name) of a list item of the file, or ""
// when it has none that decodes; yaml.v3 follows aliases and merge keys
// as Parse does.
func itemKey(s *config.Schema, k config.Kind, n *yaml.Node) string {
	var v map[string]any
	if err := n.Decode(&v); err != nil {
		return ""
	}
	switch key := v[s.KeyField(k)].(type) {
	case string:
		if s.ByName(k) {
			return key
		}
	case int:
		if !s.ByName(k) && key > 0 && key < 1<<32 {
			return strconv.Itoa(key)
		}
	}
	return ""
}

// agentItems returns the agent's objects of kind k that the file items do
// not replace, as YAML nodes, and their keys.
func agentItems(s *config.Schema, k config.Kind, fileItems []*yaml.Node, cur *config.Config) ([]*yaml.Node, []string, error) {
	inFile := map[string]bool{}
	for _, it := range fileItems {
		if key := itemKey(s, k, it); key != "" {
			inFile[key] = true
		}
	}
	var nodes []*yaml.Node
	var keys []string
	for _, obj := range s.Objects(cur, k) {
		key := s.KeyOf(k, obj).String()
		if inFile[key] {
			continue
		}
		n := &yaml.Node{}
		if err := n.Encode(obj); err != nil {
			return nil, nil, fmt.Errorf("encode the agent's %s %s: %w", k, key, err)
		}
		nodes = append(nodes, n)
		keys = append(keys, key)
	}
	return nodes, keys, nil
}

// noteAgentItems marks the problems found at an object of the agent's
// (not of the file), which a file object can cause, e.g. by taking the
// GRE key of an agent's path.
func noteAgentItems(s *config.Schema, fe config.Errors, inFile map[config.Kind]int, extra map[config.Kind][]string) config.Errors {
	out := slices.Clone(fe)
	for i, e := range out {
		list, rest, ok := strings.Cut(e.Path, "[")
		if !ok {
			continue
		}
		idx, _, ok := strings.Cut(rest, "]")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(idx)
		kind, isList := listKind(s, list)
		if err != nil || !isList {
			continue
		}
		j := n - inFile[kind]
		if j < 0 || j >= len(extra[kind]) {
			continue
		}
		out[i].Reason += fmt.Sprintf(" (%s[%d] is the agent's %s %s, not in the file)", list, n, kind, extra[kind][j])
	}
	return out
}

// change is what apply does with one object of the file.
type change struct {
	kind config.Kind
	key  string
	// verb is "created", "configured" or "unchanged".
	verb string
	// op is nil for an unchanged object.
	op *pb.Operation
}

// planApply compares the file's objects with the agent's: an object the
// agent lacks is created, one it has is updated (replaced whole) unless
// it is the same. Both sides are normalized, so a default written out or
// left out makes no difference. Kinds go in the schema's order: what is
// referred to is created first.
func planApply(s *config.Schema, file, cur *config.Config) []change {
	have := map[string]proto.Message{}
	for _, k := range s.Kinds() {
		for _, obj := range s.Objects(cur, k) {
			have[string(k)+"/"+s.KeyOf(k, obj).String()] = api.ToPB(k, obj)
		}
	}
	n := objectsOnly(s, file, nil)
	s.Normalize(n)
	var out []change
	for _, k := range s.Kinds() {
		for _, obj := range s.Objects(n, k) {
			// Compared as the agent shows its objects (secrets
			// redacted, so the same secret is unchanged), sent as the
			// file has them.
			m, send := api.ToPB(k, obj), api.ToPBRevealed(k, obj)
			c := change{kind: k, key: s.KeyOf(k, obj).String()}
			old, ok := have[string(k)+"/"+c.key]
			switch {
			case !ok:
				c.verb = "created"
				c.op = &pb.Operation{Op: &pb.Operation_Create{Create: api.Object(k, send)}}
			case proto.Equal(old, m):
				c.verb = "unchanged"
			default:
				c.verb = "configured"
				c.op = &pb.Operation{Op: &pb.Operation_Update{Update: api.Object(k, send)}}
			}
			out = append(out, c)
		}
	}
	return out
}
