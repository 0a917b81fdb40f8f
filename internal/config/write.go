// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// fileHeader starts a config file the agent wrote.
const fileHeader = `# Written by the edgeplane agent after API changes: with the changes in
# FILE.journal newer than the sequence number below, what the gateway
# serves and a restarted agent serves again. Edit it and send SIGHUP to
# apply an edit (comments are not kept across API changes).
`

// WriteFile writes c to path with ReplaceFile, keeping the file's mode.
func WriteFile(path string, c *Config, durable bool, header string) error {
	// That this reads back as the same config is TestWriteFileRoundTrip's
	// to show, not every commit's to pay for.
	data := AppendCompact([]byte(fileHeader+header), c)
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	return ReplaceFile(path, data, mode, durable)
}

// ReplaceFile writes data to path atomically: to a temporary file in the
// same directory, then renamed over path, so readers and a restarted
// process see either the old file or the new one, never a torn one. With
// durable, the data and the rename are synced to disk before it returns.
func ReplaceFile(path string, data []byte, mode os.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if durable {
		return syncDir(dir)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// AppendCompact appends c as YAML with one flow mapping per object, the
// shape of the examples in the README:
//
//	pdrs:
//	  - {id: 10, precedence: 10, match: {in: lan0, dst: "10.2.0.0/16"}, far: 2}
//
// It writes in a few microseconds per object what yaml.Marshal of the same
// config takes ~80 us per object for, and a commit rewrites the file.
// Strings are written as YAML double-quoted scalars unless they are plain
// tokens (interface names, actions, protocol names, port ranges).
func AppendCompact(b []byte, c *Config) []byte {
	w := compact{b: b}
	if len(c.Interfaces) > 0 {
		w.raw("interfaces:\n")
		for _, i := range c.Interfaces {
			w.item()
			w.str("name", i.Name)
			w.str("role", i.Role)
			w.str("xdp", i.XDP)
			w.end()
		}
	}
	if len(c.Paths) > 0 {
		w.raw("paths:\n")
		for _, p := range c.Paths {
			w.item()
			w.num("id", uint64(p.ID))
			w.str("type", p.Type)
			w.str("interface", p.Interface)
			w.str("local", p.Local.String())
			w.str("remote", p.Remote.String())
			if p.Key != nil {
				w.num("key", uint64(*p.Key))
			}
			if p.Seq {
				w.field("seq")
				w.raw("true")
			}
			if p.TTL != 0 {
				w.num("ttl", uint64(p.TTL))
			}
			if p.DSCP != nil {
				w.num("dscp", uint64(*p.DSCP))
			}
			w.end()
		}
	}
	if len(c.FARs) > 0 {
		w.raw("fars:\n")
		for _, f := range c.FARs {
			w.item()
			w.num("id", uint64(f.ID))
			w.str("action", f.Action)
			w.str("interface", f.Interface)
			if f.Path != 0 {
				w.num("path", uint64(f.Path))
			}
			if f.Address.IsSet() {
				w.str("address", f.Address.String())
			}
			if f.Port != 0 {
				w.num("port", uint64(f.Port))
			}
			w.end()
		}
	}
	if len(c.PDRs) > 0 {
		w.raw("pdrs:\n")
		for _, p := range c.PDRs {
			w.item()
			w.num("id", uint64(p.ID))
			w.num("precedence", uint64(p.Precedence))
			w.field("match")
			w.open()
			m := p.Match
			w.str("in", m.In)
			w.str("src", m.Src.String())
			w.str("dst", m.Dst.String())
			w.str("proto", m.Proto.String())
			w.str("sport", m.Sport.String())
			w.str("dport", m.Dport.String())
			if m.DSCP != nil {
				w.num("dscp", uint64(*m.DSCP))
			}
			if m.GREKey != nil {
				w.num("gre_key", uint64(*m.GREKey))
			}
			if m.InPath != 0 {
				w.num("in_path", uint64(m.InPath))
			}
			w.close()
			w.num("far", uint64(p.FAR))
			w.end()
		}
	}
	if len(c.LBRs) > 0 {
		w.raw("lbrs:\n")
		for _, l := range c.LBRs {
			w.item()
			w.num("id", uint64(l.ID))
			w.str("algorithm", l.Algorithm)
			if l.TableSize != 0 {
				w.num("table_size", uint64(l.TableSize))
			}
			w.field("members")
			w.raw("[")
			for i, m := range l.Members {
				if i > 0 {
					w.raw(", ")
				}
				w.open()
				w.num("far", uint64(m.FAR))
				if m.Weight != nil {
					w.num("weight", uint64(*m.Weight))
				}
				w.close()
			}
			w.raw("]")
			w.end()
		}
	}
	if len(c.Services) > 0 {
		w.raw("services:\n")
		for _, sv := range c.Services {
			w.item()
			w.num("id", uint64(sv.ID))
			w.str("vip", sv.VIP.String())
			w.num("port", uint64(sv.Port))
			w.str("proto", sv.Proto.String())
			w.num("lbr", uint64(sv.LBR))
			if sv.Stateless {
				w.field("stateless")
				w.raw("true")
			}
			if sv.Precedence != 0 {
				w.num("precedence", uint64(sv.Precedence))
			}
			if h := sv.Health; h != nil {
				w.field("health")
				w.open()
				w.str("type", h.Type)
				w.str("path", h.Path)
				if h.Port != 0 {
					w.num("port", uint64(h.Port))
				}
				w.str("interval", h.Interval.String())
				w.str("timeout", h.Timeout.String())
				if h.Rise != 0 {
					w.num("rise", uint64(h.Rise))
				}
				if h.Fall != 0 {
					w.num("fall", uint64(h.Fall))
				}
				w.close()
			}
			w.end()
		}
	}
	w.raw("limits: ")
	w.open()
	w.num("flows", uint64(c.Limits.Flows))
	w.num("rules", uint64(c.Limits.Rules))
	if c.Limits.MaglevTable != 0 {
		w.num("maglev_table", uint64(c.Limits.MaglevTable))
	}
	if c.Limits.Connections != 0 {
		w.num("connections", uint64(c.Limits.Connections))
	}
	w.close()
	w.raw("\ndefaults: ")
	w.open()
	w.str("no_match", c.Defaults.NoMatch)
	w.str("malformed", c.Defaults.Malformed)
	w.close()
	w.raw("\n")
	return w.b
}

// compact writes flow mappings; first tracks whether the mapping being
// written has a field yet.
type compact struct {
	b     []byte
	first []bool
}

func (w *compact) raw(s string) { w.b = append(w.b, s...) }

func (w *compact) open() {
	w.raw("{")
	w.first = append(w.first, true)
}

func (w *compact) close() {
	w.raw("}")
	w.first = w.first[:len(w.first)-1]
}

func (w *compact) item() {
	w.raw("  - ")
	w.open()
}

func (w *compact) end() {
	w.close()
	w.raw("\n")
}

func (w *compact) field(name string) {
	if top := len(w.first) - 1; w.first[top] {
		w.first[top] = false
	} else {
		w.raw(", ")
	}
	w.raw(name)
	w.raw(": ")
}

func (w *compact) num(name string, v uint64) {
	w.field(name)
	w.b = strconv.AppendUint(w.b, v, 10)
}

// str writes a string field, or nothing for "".
func (w *compact) str(name, v string) {
	if v == "" {
		return
	}
	w.field(name)
	if plainToken(v) {
		w.raw(v)
		return
	}
	// A JSON string is a YAML double-quoted scalar.
	w.b = strconv.AppendQuote(w.b, v)
}

// plainToken reports whether v can stand unquoted in a flow mapping and
// read back as the same string: only letters, digits, '_', '.' and '-',
// not starting with '-', not number-like (a leading digit or '.' is fine
// only with a '-' in v, as in the port range 9000-9100), and not one of
// YAML's special words.
func plainToken(v string) bool {
	if v == "" || v[0] == '-' {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	if c := v[0]; (c >= '0' && c <= '9' || c == '.') && !strings.Contains(v, "-") {
		return false
	}
	switch strings.ToLower(v) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n":
		return false
	}
	return true
}
