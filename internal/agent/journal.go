// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// The agent's state on disk is its config file plus a journal beside it
// (FILE.journal). An API commit appends its batch to the journal, one
// line of a few hundred bytes, and fsyncs it before the Apply returns,
// instead of rewriting the whole file (O(rules): ~1 ms for a handful of
// rules on ext4, tens of ms for thousands). Shortly after, the syncer
// folds the journal into the file: it writes the file with the sequence
// number of the last batch it holds in its first lines
// ("# edgeplane-journal-seq: N") and drops those batches from the
// journal. Loading (start, SIGHUP) reads the file and replays the batches
// after its sequence number, so a restarted agent, even one killed in
// between or after a power loss, serves exactly the last acknowledged
// commit.
//
// A record is one line: the CRC-32C (Castagnoli) of the JSON that follows
// it as 8 hex digits, a space, the JSON, a newline. JSON escapes control
// characters, so a newline only ever ends a record. The JSON holds the
// batch's ApplyRequest in the protobuf wire format, base64
// ({"seq":N,"pb":"..."}): protojson cost 10-25 µs of a one-PDR Apply's
// ~80 outside its sync on these VMs, the wire format ~1. Records of
// earlier builds hold it as protojson ({"seq":N,"apply":{...}}) and are
// still replayed; `edgeplane journal FILE` prints any journal as
// protojson. What a crash can do
// to the file is cut the last write short: a last line without its
// newline (or a tail of zeros, where a filesystem extended the file but
// never wrote the block) is a torn tail, never acknowledged, and is cut
// off when the agent starts. A complete line whose checksum does not
// match was damaged after it was written: the agent refuses to start,
// names the file and the offset, and says how to go on.

const seqMarker = "# edgeplane-journal-seq: "

// castagnoli is CRC-32C: hardware-accelerated on amd64 and arm64, and
// the checksum ext4, btrfs and iSCSI use for the same job.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journalEntry is the JSON of one record: its request in one of two
// encodings, PB (this build's) or Apply (earlier builds').
type journalEntry struct {
	Seq   uint64          `json:"seq"`
	Apply json.RawMessage `json:"apply,omitempty"` // edgeplane.v1.ApplyRequest, protojson
	PB    []byte          `json:"pb,omitempty"`    // edgeplane.v1.ApplyRequest, wire format (base64 in the JSON)
	// pb64 is PB still in base64, as splitRecord leaves it: a fold
	// reads every record of the journal each second and needs none of
	// the requests; request decodes it.
	pb64 []byte
}

// record is one record read back: its entry, where it starts in the file
// and its bytes as written (the trim copies them unchanged).
type record struct {
	journalEntry
	off int64
	raw []byte
}

func journalPath(configPath string) string { return configPath + ".journal" }

// CorruptError is a damaged record in the middle of a journal: batches
// that were acknowledged may be lost, so the agent does not start on it.
type CorruptError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal %s is corrupt at byte offset %d (%s): the record there and every batch after it cannot be replayed, so the agent does not start. "+
		"To keep the batches before it and start from those: cp %s %s.bad && truncate -s %d %s (then check the rules it serves, and re-apply what the batches from offset %d did: edgeplane journal %s.bad prints them)",
		e.Path, e.Offset, e.Reason, e.Path, e.Path, e.Offset, e.Path, e.Offset, e.Path)
}

// encodeRecord frames one entry as a journal line (appendRecord).
func encodeRecord(e journalEntry) ([]byte, error) { return appendRecord(nil, e) }

// appendRecord appends one entry to dst as a journal line. A request in
// the wire format (PB, as the API and a fleet member give it) goes in as
// base64, one in protojson that is one line as it is, each with the
// bytes json.Marshal would put around it; any other is compacted by
// json.Marshal. The records of a group go into one buffer, each
// framed in place.
func appendRecord(dst []byte, e journalEntry) ([]byte, error) {
	line := len(dst)
	dst = append(dst, "00000000 "...)
	body := len(dst)
	switch {
	case e.PB != nil:
		dst = strconv.AppendUint(append(dst, `{"seq":`...), e.Seq, 10)
		dst = append(dst, `,"pb":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, e.PB)
		dst = append(dst, `"}`...)
	case bytes.IndexAny(e.Apply, "\r\n") < 0 && json.Valid(e.Apply):
		dst = strconv.AppendUint(append(dst, `{"seq":`...), e.Seq, 10)
		dst = append(append(append(dst, `,"apply":`...), e.Apply...), '}')
	default:
		js, err := json.Marshal(e)
		if err != nil {
			return dst[:line], fmt.Errorf("encode journal record: %w", err)
		}
		dst = append(dst, js...)
	}
	sum := crc32.Checksum(dst[body:], castagnoli)
	hex.Encode(dst[line:line+8], []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(dst, '\n'), nil
}

// decodeRecord checks and decodes one line without its newline. Lines of
// the journals of earlier builds are bare JSON, without a checksum; they
// are still read (a journal survives an upgrade).
func decodeRecord(line []byte) (journalEntry, error) {
	var e journalEntry
	body := line
	if len(line) > 0 && line[0] != '{' {
		if len(line) < 9 || line[8] != ' ' {
			return e, errors.New("no checksum")
		}
		var sum [4]byte
		if _, err := hex.Decode(sum[:], line[:8]); err != nil {
			return e, errors.New("no checksum")
		}
		body = line[9:]
		want := uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3])
		if got := crc32.Checksum(body, castagnoli); got != want {
			return e, fmt.Errorf("checksum %08x, record says %08x", got, want)
		}
		// The bytes are those encodeRecord wrote: take them apart
		// without decoding the request (a fold reads every record in
		// the journal each time; the replay decodes the request).
		if e, ok := splitRecord(body); ok {
			return e, nil
		}
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return e, fmt.Errorf("undecodable record: %w", err)
	}
	if e.Seq == 0 {
		return e, errors.New("record without a sequence number")
	}
	return e, nil
}

// request decodes the entry's ApplyRequest, whichever encoding it has.
// A field this build does not know (a record of a newer build) fails
// it in both: replayed without it, the batch would not be the one that
// was acknowledged.
func (e *journalEntry) request() (*pb.ApplyRequest, error) {
	req := &pb.ApplyRequest{}
	wire := e.PB
	if wire == nil && e.pb64 != nil {
		wire = make([]byte, base64.StdEncoding.DecodedLen(len(e.pb64)))
		n, err := base64.StdEncoding.Decode(wire, e.pb64)
		if err != nil {
			return nil, fmt.Errorf("base64: %w", err)
		}
		wire = wire[:n]
	}
	if wire == nil {
		return req, protojson.Unmarshal(e.Apply, req)
	}
	if err := proto.Unmarshal(wire, req); err != nil {
		return nil, err
	}
	if unknownField(req.ProtoReflect()) {
		return nil, errors.New("a field this build does not know")
	}
	return req, nil
}

// unknownField says whether m or a message in it holds a field its
// descriptor does not declare.
func unknownField(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				found = unknownField(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownField(mv.Message())
				return !found
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = unknownField(v.Message())
		}
		return !found
	})
	return found
}

// splitRecord takes apart the body of a record as encodeRecord writes it,
// {"seq":N,"pb":"BASE64"} or {"seq":N,"apply":REQUEST}; ok is false for
// any other shape.
func splitRecord(body []byte) (e journalEntry, ok bool) {
	rest, ok := bytes.CutPrefix(body, []byte(`{"seq":`))
	if !ok {
		return e, false
	}
	i := bytes.IndexByte(rest, ',')
	if i <= 0 {
		return e, false
	}
	seq, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil || seq == 0 {
		return e, false
	}
	if b64, ok := bytes.CutPrefix(rest[i:], []byte(`,"pb":"`)); ok {
		b64, ok = bytes.CutSuffix(b64, []byte(`"}`))
		if !ok || bytes.ContainsAny(b64, `"\`) {
			return e, false
		}
		return journalEntry{Seq: seq, pb64: b64}, true
	}
	req, ok := bytes.CutPrefix(rest[i:], []byte(`,"apply":`))
	if !ok || len(req) < 3 || req[0] != '{' || req[len(req)-1] != '}' {
		return e, false
	}
	return journalEntry{Seq: seq, Apply: req[:len(req)-1]}, true
}

// parseJournal splits journal data into records. It returns the records,
// the length of the prefix they fill (what follows is a torn tail, to be
// cut) and a *CorruptError for a complete line that does not check out.
func parseJournal(path string, data []byte) ([]record, int64, error) {
	out := make([]record, 0, bytes.Count(data, []byte{'\n'}))
	var off int64
	var last uint64
	for off < int64(len(data)) {
		rest := data[off:]
		nl := bytes.IndexByte(rest, '\n')
		// A last line without its newline, or zeros with no complete
		// line after them (a file extended by a crash before its data
		// reached the disk: XFS, ext4 in writeback mode): a write cut
		// short by a crash, whose Apply never returned.
		if nl < 0 || rest[0] == 0 && bytes.IndexByte(bytes.TrimLeft(rest, "\x00"), '\n') < 0 {
			return out, off, nil
		}
		line := rest[:nl]
		e, err := decodeRecord(line)
		if err != nil {
			return out, off, &CorruptError{Path: path, Offset: off, Reason: err.Error()}
		}
		if e.Seq <= last {
			return out, off, &CorruptError{Path: path, Offset: off, Reason: fmt.Sprintf("batch %d after batch %d", e.Seq, last)}
		}
		last = e.Seq
		out = append(out, record{journalEntry: e, off: off, raw: rest[:nl+1]})
		off += int64(nl + 1)
	}
	return out, off, nil
}

// readJournal reads the journal at path (none is an empty journal).
// Read errors are errors: a batch that cannot be read is never taken
// for one that does not exist.
func readJournal(path string) ([]record, int64, int64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read journal: %w", err)
	}
	recs, good, err := parseJournal(path, data)
	return recs, good, int64(len(data)), err
}

// repairJournal cuts a torn tail off the journal of configPath, so the
// next append does not land behind it, and returns how many bytes it
// cut. A corrupt record is an error (*CorruptError).
func repairJournal(configPath string) (int64, error) {
	p := journalPath(configPath)
	_, good, size, err := readJournal(p)
	if err != nil || good == size {
		return 0, err
	}
	if err := os.Truncate(p, good); err != nil {
		return 0, fmt.Errorf("cut the torn tail of %s at byte %d: %w", p, good, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("open journal: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("sync journal: %w", err)
	}
	return size - good, nil
}

// fileSeq returns the journal sequence number written in the header of
// the config file data, 0 if there is none (a file an operator wrote).
func fileSeq(data []byte) uint64 {
	for _, line := range bytes.SplitN(data, []byte("\n"), 8) {
		if s, ok := strings.CutPrefix(string(line), seqMarker); ok {
			n, _ := strconv.ParseUint(strings.Fields(s + " ")[0], 10, 64)
			return n
		}
	}
	return 0
}

// skippedBatch is a journal batch the config file no longer takes.
type skippedBatch struct {
	err error
	raw []byte // the record, its request in protojson (readable)
}

// loadState reads the config file and replays the journal batches newer
// than it. It returns the config, the sequence number of the last batch
// in it and how many batches were replayed. A batch that no longer
// applies (the file was edited under it) is skipped and reported in
// skipped; the rest still apply. A batch that cannot be read or decoded
// is an error: nothing the journal holds is dropped unread.
func loadState(path string) (cfg *config.Config, seq uint64, replayed int, skipped []skippedBatch, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("read config: %w", err)
	}
	if cfg, err = yamlcfg.Parse(data); err != nil {
		return nil, 0, 0, nil, err
	}
	seq = fileSeq(data)
	jp := journalPath(path)
	entries, _, _, err := readJournal(jp)
	if err != nil {
		return nil, 0, 0, nil, err
	}
	store := config.NewStore(cfg)
	for _, e := range entries {
		if e.Seq <= seq {
			continue
		}
		req, err := e.request()
		if err != nil {
			return nil, 0, 0, nil, fmt.Errorf("journal %s: batch %d at byte offset %d does not decode (written by a newer build?): %w", jp, e.Seq, e.off, err)
		}
		ops, err := api.Ops(req.GetOperations())
		if err == nil {
			_, _, err = store.Apply(ops)
		}
		if err != nil {
			skipped = append(skipped, skippedBatch{fmt.Errorf("journal batch %d no longer applies: %w", e.Seq, err), readable(e.Seq, req, e.raw)})
			continue
		}
		seq = e.Seq
		replayed++
	}
	cfg = store.Config()
	// Later batches number on from the last one the journal holds, even
	// a skipped one.
	if n := len(entries); n > 0 && entries[n-1].Seq > seq {
		seq = entries[n-1].Seq
	}
	return cfg, seq, replayed, skipped, nil
}

// readable is a record of batch seq, req, with the request in protojson,
// for an operator to read (and re-apply); raw, the record as the journal
// holds it, if that fails.
func readable(seq uint64, req *pb.ApplyRequest, raw []byte) []byte {
	js, err := protojson.Marshal(req)
	if err != nil {
		return raw
	}
	line, err := encodeRecord(journalEntry{Seq: seq, Apply: js})
	if err != nil {
		return raw
	}
	return line
}

// keepSkipped appends the batches the config file no longer takes to
// FILE.journal.skipped before the fold drops them from the journal, so
// an operator can still see (and re-apply) what they did.
func keepSkipped(configPath string, skipped []skippedBatch) error {
	if len(skipped) == 0 {
		return nil
	}
	p := journalPath(configPath) + ".skipped"
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("keep skipped batches: %w", err)
	}
	var buf []byte
	for _, s := range skipped {
		buf = append(buf, s.raw...)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("keep skipped batches in %s: %w", p, err)
	}
	return nil
}

// journal appends batches to FILE.journal.
type journal struct {
	path string
	f    *os.File
	// size is the length of the records written, where a failed append
	// cuts the file back to.
	size int64
	// broken is set when a failed append could not be cut back off: no
	// batch may follow it (its sequence number may still be in the
	// file), until a restart cuts it as a torn tail or refuses it.
	broken error
}

// openJournal opens the journal for appending, after repairJournal made
// its end a record boundary.
func openJournal(configPath string) (*journal, error) {
	p := journalPath(configPath)
	_, statErr := os.Stat(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open journal: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// A new file's name is durable once its directory is.
		if err := syncDir(filepath.Dir(p)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &journal{path: p, f: f, size: st.Size()}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// append writes one batch as one record with one write(2) and fsyncs it:
// when it returns nil the batch survives a crash or a power loss. When
// it fails (ENOSPC, EIO, a short write) the file is cut back to where it
// was, so nothing of the batch stays to be replayed or to glue the next
// record to.
func (j *journal) append(seq uint64, req []byte) error {
	line, err := encodeRecord(journalEntry{Seq: seq, Apply: req})
	if err != nil {
		return err
	}
	start, err := j.write(line)
	if err != nil {
		return err
	}
	if err := j.sync(); err != nil {
		return j.cutBack(start, err)
	}
	return nil
}

// write appends records (whole lines, encodeRecord's) with one
// write(2), not yet synced, and returns the offset they start at, which
// cutBack takes. A write that fails is cut back at once.
func (j *journal) write(lines []byte) (int64, error) {
	if j.broken != nil {
		return 0, fmt.Errorf("journal unusable since an earlier failure (restart the agent): %w", j.broken)
	}
	start := j.size
	n, err := j.f.Write(lines)
	j.size += int64(n)
	if err != nil {
		return 0, j.cutBack(start, err)
	}
	return start, nil
}

// sync makes every record written so far durable: fdatasync, which
// flushes the records and the file's new size (metadata a read needs),
// not its times. Those written by several batches share it (group
// commit: see apply.go).
func (j *journal) sync() error {
	return unix.Fdatasync(int(j.f.Fd()))
}

// cutBack takes the records from offset start on back out of the file,
// after cause (returned, wrapped) failed them: their batches were not
// acknowledged, so a restart must not replay them. Synced, since they
// may have reached the disk already. If the cut fails the journal is
// broken: no batch may follow (its sequence number may still be in the
// file) until a restart cuts it as a torn tail or refuses it.
func (j *journal) cutBack(start int64, cause error) error {
	err := j.f.Truncate(start)
	if err == nil {
		err = j.sync()
	}
	if err != nil {
		j.broken = fmt.Errorf("cut a failed append back to byte %d: %w", start, err)
		return errors.Join(cause, j.broken)
	}
	j.size = start
	return cause
}

// keepAfter rewrites the journal with only the records after seq
// (atomically: temporary file, rename) and reopens it for appending. A
// journal it cannot read whole is left as it is.
func (j *journal) keepAfter(seq uint64) error {
	if j.broken != nil {
		return j.broken
	}
	recs, good, size, err := readJournal(j.path)
	if err != nil {
		return err
	}
	if good != size {
		return fmt.Errorf("journal %s holds %d bytes after its last record", j.path, size-good)
	}
	var buf []byte
	for _, r := range recs {
		if r.Seq > seq {
			buf = append(buf, r.raw...)
		}
	}
	if err := atomicfile.Replace(j.path, buf, 0o600, true); err != nil {
		return fmt.Errorf("rewrite journal: %w", err)
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("reopen journal: %w", err)
	}
	j.f.Close()
	j.f = f
	j.size = int64(len(buf))
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// WriteJournalJSON writes the records of the journal data (read from
// path) to w, one line each, with their requests in protojson
// ({"seq":N,"apply":{...}}, what earlier builds wrote): a journal holds
// them in the wire format, and an operator re-applying the batches of a
// damaged journal needs to read them. A line that does not check out or
// decode is said on a line of its own, "# byte offset N: reason", and
// the lines after it go on; so is a torn tail. It returns how many lines
// it could not print.
func WriteJournalJSON(w io.Writer, path string, data []byte) (bad int, err error) {
	var out []byte
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			out = fmt.Appendf(out, "# byte offset %d: %d bytes without a newline (a torn tail, cut when the agent starts)\n", off, len(data)-off)
			bad++
			break
		}
		line := data[off : off+nl]
		e, derr := decodeRecord(line)
		var req *pb.ApplyRequest
		if derr == nil {
			req, derr = e.request()
		}
		var js []byte
		if derr == nil {
			js, derr = protojson.Marshal(req)
		}
		if derr != nil {
			out = fmt.Appendf(out, "# byte offset %d: %v\n", off, derr)
			bad++
		} else {
			out = strconv.AppendUint(append(out, `{"seq":`...), e.Seq, 10)
			out = append(append(append(out, `,"apply":`...), js...), "}\n"...)
		}
		off += nl + 1
	}
	if _, err := w.Write(out); err != nil {
		return bad, fmt.Errorf("write %s as json: %w", path, err)
	}
	return bad, nil
}
