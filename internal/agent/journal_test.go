// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// journalConfig is a config file for the journal tests: the interfaces
// and a FAR the batches' PDRs use.
const journalConfig = `interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
pdrs:
  - {id: 1, precedence: 10, match: {in: lan0}, far: 1}
`

// createPDR is an ApplyRequest creating PDR id, as the API journals it.
func createPDR(id int) []byte {
	return fmt.Appendf(nil, `{"operations":[{"create":{"pdr":{"id":"%d","precedence":%d,"far":"1","match":{"in":"lan0"}}}}]}`, id, 100+id)
}

// newJournalDir writes the config file in dir and journals batches
// 1..n, each creating PDR 100+i.
func newJournalDir(t *testing.T, dir string, n int) (string, *journal) {
	t.Helper()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(journalConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := openJournal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.close() })
	for i := 1; i <= n; i++ {
		if err := j.append(uint64(i), createPDR(100+i)); err != nil {
			t.Fatalf("append batch %d: %v", i, err)
		}
	}
	return cfg, j
}

// pdrIDs loads the state and returns the ids of its PDRs.
func pdrIDs(t *testing.T, cfg string) []uint32 {
	t.Helper()
	c, _, _, skipped, err := loadState(cfg)
	if err != nil {
		t.Fatalf("load state: %v", err)
	}
	if len(skipped) > 0 {
		t.Fatalf("skipped batches: %v", skipped[0].err)
	}
	var ids []uint32
	for _, p := range c.PDRs {
		ids = append(ids, p.ID)
	}
	return ids
}

func appendRaw(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestJournalTornTailCut: a crash in the middle of an append leaves part
// of a record without its newline (or a tail of zeros). Opening cuts it,
// so the next batch is a record of its own and is replayed; left in
// place, the next append would be glued to it and lost.
func TestJournalTornTailCut(t *testing.T) {
	for _, tail := range [][]byte{
		[]byte(`1a2b3c4d {"seq":3,"apply":{"operati`),
		make([]byte, 4096),
	} {
		t.Run(fmt.Sprintf("%d bytes", len(tail)), func(t *testing.T) {
			cfg, j := newJournalDir(t, t.TempDir(), 2)
			j.close()
			appendRaw(t, j.path, tail)
			cut, err := repairJournal(cfg)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if cut != int64(len(tail)) {
				t.Errorf("cut %d bytes, want the torn %d", cut, len(tail))
			}
			j2, err := openJournal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer j2.close()
			if err := j2.append(3, createPDR(103)); err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101 102 103]"; got != want {
				t.Errorf("pdrs after the torn append and one more: %s, want %s", got, want)
			}
		})
	}
}

// TestJournalCorruptRecordRefused: a complete record whose checksum does
// not match is damage, not a torn write: loading fails with an error
// that names the file, the record's offset and what to do, and the
// journal is left as it is.
func TestJournalCorruptRecordRefused(t *testing.T) {
	cfg, j := newJournalDir(t, t.TempDir(), 3)
	data, err := os.ReadFile(j.path)
	if err != nil {
		t.Fatal(err)
	}
	second := bytes.IndexByte(data, '\n') + 1
	// One bit flipped inside batch 2's JSON (a digit of its PDR id).
	at := second + bytes.Index(data[second:], []byte(`"102"`)) + 3
	data[at] ^= 0x01
	if err := os.WriteFile(j.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, err = loadState(cfg)
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("load state of a journal with a flipped bit: %v, want a CorruptError", err)
	}
	if ce.Offset != int64(second) {
		t.Errorf("corrupt record reported at offset %d, want %d", ce.Offset, second)
	}
	msg := err.Error()
	for _, want := range []string{j.path, fmt.Sprintf("offset %d", second), fmt.Sprintf("truncate -s %d %s", second, j.path)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if _, err := repairJournal(cfg); !errors.As(err, &ce) {
		t.Errorf("repair of a corrupt journal: %v, want the CorruptError", err)
	}
	after, _ := os.ReadFile(j.path)
	if !bytes.Equal(after, data) {
		t.Errorf("the corrupt journal was changed")
	}
	// The way out the message gives: keep what is before the record.
	if err := os.Truncate(j.path, int64(second)); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101]"; got != want {
		t.Errorf("pdrs after the way out: %s, want %s", got, want)
	}
}

// TestJournalReadErrorIsError: a journal that cannot be read fails the
// load; it is not an empty journal.
func TestJournalReadErrorIsError(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(journalConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// read(2) on a directory fails with EISDIR where open(2) succeeds.
	if err := os.Mkdir(journalPath(cfg), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := loadState(cfg); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("load state with an unreadable journal: %v, want EISDIR", err)
	}
}

// TestJournalLegacyRecords: a journal written before records carried a
// checksum (bare JSON lines) still replays after an upgrade.
func TestJournalLegacyRecords(t *testing.T) {
	cfg, j := newJournalDir(t, t.TempDir(), 0)
	appendRaw(t, j.path, fmt.Appendf(nil, "{\"seq\":1,\"apply\":%s}\n", createPDR(101)))
	if err := j.append(2, createPDR(102)); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101 102]"; got != want {
		t.Errorf("pdrs: %s, want %s", got, want)
	}
}

// TestJournalSkippedKept: a batch the edited config file no longer takes
// is skipped, and kept in FILE.journal.skipped before a fold drops it.
func TestJournalSkippedKept(t *testing.T) {
	cfg, _ := newJournalDir(t, t.TempDir(), 2)
	// The operator's edit already has PDR 101: batch 1 cannot create it.
	edited := journalConfig + "  - {id: 101, precedence: 50, match: {in: wan0}, far: 1}\n"
	if err := os.WriteFile(cfg, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, replayed, skipped, err := loadState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if replayed != 1 || len(skipped) != 1 {
		t.Fatalf("replayed %d, skipped %d; want 1 and 1", replayed, len(skipped))
	}
	if err := keepSkipped(cfg, skipped); err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(journalPath(cfg) + ".skipped")
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := parseJournal("skipped", kept)
	if err != nil || len(recs) != 1 || recs[0].Seq != 1 {
		t.Errorf("kept %q: %d records, %v; want batch 1", kept, len(recs), err)
	}
}

// TestJournalAppendENOSPC: on a full filesystem the append fails (so the
// Apply does), nothing of the record stays in the journal, and once
// there is room the next append and a load work. Real ENOSPC, from a
// tmpfs of 64 KiB.
func TestJournalAppendENOSPC(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	cfg, j := newJournalDir(t, dir, 2)
	before, err := os.ReadFile(j.path)
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fillFS(t, filler)
	// A batch larger than a page, so the write needs a block the full
	// filesystem does not have.
	big := createPDR(103)
	big = append(big[:len(big)-1], fmt.Appendf(nil, `,"pad":"%s"}`, strings.Repeat("x", 8192))...)
	err = j.append(3, big)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full filesystem: %v, want ENOSPC", err)
	}
	after, err := os.ReadFile(j.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("journal changed by a failed append: %d bytes, was %d", len(after), len(before))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := j.append(3, createPDR(103)); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
	if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101 102 103]"; got != want {
		t.Errorf("pdrs: %s, want %s", got, want)
	}
}

// fillFS writes path until its filesystem is full.
func fillFS(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1024)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			break
		}
	}
	// And the last bytes of a partly filled page.
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			return
		}
	}
}

// TestLockExclusive: a second lock on a config file or pin dir fails at
// once, naming the holder; the lock goes with its holder.
func TestLockExclusive(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		path string
		dir  bool
	}{{filepath.Join(dir, "gw.yaml.lock"), false}, {dir, true}} {
		first, err := lockPath(c.path, "thing", c.dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = lockPath(c.path, "thing", c.dir)
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("second lock on %s: %v, want ErrLocked", c.path, err)
		}
		if want := fmt.Sprintf("(pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name the holder %s", err, want)
		}
		first.release()
		again, err := lockPath(c.path, "thing", c.dir)
		if err != nil {
			t.Fatalf("lock after release: %v", err)
		}
		again.release()
	}
}

// TestJournalTrimKeepsWhatItCannotRead: the fold's trim reads the journal
// whole before it rewrites it; a record it cannot read (damaged while the
// agent ran) fails the trim and the journal stays as it was, instead of
// being rewritten without it.
func TestJournalTrimKeepsWhatItCannotRead(t *testing.T) {
	_, j := newJournalDir(t, t.TempDir(), 3)
	data, err := os.ReadFile(j.path)
	if err != nil {
		t.Fatal(err)
	}
	last := bytes.LastIndex(data[:len(data)-1], []byte("\n")) + 1
	data[last+20] ^= 0x01 // batch 3, after the fold's sequence number
	if err := os.WriteFile(j.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if err := j.keepAfter(1); !errors.As(err, &ce) {
		t.Errorf("trim of a damaged journal: %v, want a CorruptError", err)
	}
	after, _ := os.ReadFile(j.path)
	if !bytes.Equal(after, data) {
		t.Errorf("the damaged journal was rewritten: %d bytes, was %d", len(after), len(data))
	}
}

// TestJournalRecordSplit: a record is taken apart without decoding its
// request (splitRecord) into what decoding it whole gives, and anything
// not in encodeRecord's shape is decoded whole.
func TestJournalRecordSplit(t *testing.T) {
	for _, seq := range []uint64{1, 12, 1 << 40} {
		for _, req := range [][]byte{createPDR(7), []byte(`{"operations":[{"delete":{"kind":"KIND_PDR","id":"3"}}]}`), []byte(`{ "operations" : [ ] }`)} {
			line, err := encodeRecord(journalEntry{Seq: seq, Apply: req})
			if err != nil {
				t.Fatal(err)
			}
			body := line[9 : len(line)-1]
			fast, ok := splitRecord(body)
			if !ok {
				t.Fatalf("record %q not taken apart", body)
			}
			var whole journalEntry
			if err := json.Unmarshal(body, &whole); err != nil {
				t.Fatal(err)
			}
			if fast.Seq != whole.Seq || !bytes.Equal(fast.Apply, whole.Apply) {
				t.Errorf("%q: taken apart as %d %q, decoded whole as %d %q", body, fast.Seq, fast.Apply, whole.Seq, whole.Apply)
			}
			got, err := decodeRecord(line[:len(line)-1])
			if err != nil || got.Seq != seq || !bytes.Equal(got.Apply, whole.Apply) {
				t.Errorf("decode %q: %d %q, %v", line, got.Seq, got.Apply, err)
			}
		}
	}
	for _, body := range []string{`{"apply":{},"seq":3}`, `{"seq":0,"apply":{}}`, `{"seq":x,"apply":{}}`, `{"seq":3,"apply":[]}`, `{"seq":3}`} {
		if e, ok := splitRecord([]byte(body)); ok {
			t.Errorf("%s taken apart as %+v; want it decoded whole", body, e)
		}
	}
}

// wirePDR is an ApplyRequest creating PDR id in the wire format, as the
// API and a fleet member give it to Apply.
func wirePDR(t *testing.T, id uint32) []byte {
	t.Helper()
	b, err := proto.Marshal(&pb.ApplyRequest{Operations: []*pb.Operation{{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{Pdr: &pb.Pdr{
		Id: id, Precedence: 100 + id, Far: 1, Match: &pb.Match{In: "lan0"}}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appendWire journals batch seq as the agent's commit does: a wire
// format record, written and synced.
func appendWire(t *testing.T, j *journal, seq uint64, req []byte) {
	t.Helper()
	line, err := encodeRecord(journalEntry{Seq: seq, PB: req})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.write(line); err != nil {
		t.Fatal(err)
	}
	if err := j.sync(); err != nil {
		t.Fatal(err)
	}
}

// previousBuildRecord is batch 1 creating PDR 101 exactly as the build
// before wire-format records wrote it (CRC-32C, protojson).
const previousBuildRecord = `8bfe575d {"seq":1,"apply":{"operations":[{"create":{"pdr":{"id":"101","precedence":201,"far":"1","match":{"in":"lan0"}}}}]}}` + "\n"

// TestJournalUpgradeReplaysOldRecords: an agent upgraded over a journal
// of the previous build's records (protojson) replays them, and the
// wire-format records it appends after them; a fold's trim keeps both
// as they are.
func TestJournalUpgradeReplaysOldRecords(t *testing.T) {
	// Records in protojson (the tests' append) are still framed as the
	// previous build framed them.
	if line, err := encodeRecord(journalEntry{Seq: 1, Apply: createPDR(101)}); err != nil || string(line) != previousBuildRecord {
		t.Errorf("protojson record %q, %v; want %q", line, err, previousBuildRecord)
	}
	cfg, old := newJournalDir(t, t.TempDir(), 0)
	appendRaw(t, old.path, []byte(previousBuildRecord))
	old.close()
	// As the upgraded agent starts.
	if cut, err := repairJournal(cfg); err != nil || cut != 0 {
		t.Fatalf("repair a journal of the previous build: %d bytes cut, %v", cut, err)
	}
	j, err := openJournal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	appendWire(t, j, 2, wirePDR(t, 102))
	appendWire(t, j, 3, wirePDR(t, 103))
	if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101 102 103]"; got != want {
		t.Errorf("pdrs: %s, want %s", got, want)
	}
	if err := j.keepAfter(1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(journalConfig+"  - {id: 101, precedence: 201, match: {in: lan0}, far: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101 102 103]"; got != want {
		t.Errorf("pdrs after a trim: %s, want %s", got, want)
	}
}

// TestJournalWireRecords: a wire-format record is taken apart as it was
// given, a flipped bit in it is damage (refused at its offset), and a
// field this build does not know (a newer build's record) refuses the
// start rather than replaying the batch without it.
func TestJournalWireRecords(t *testing.T) {
	req := wirePDR(t, 7)
	line, err := encodeRecord(journalEntry{Seq: 9, PB: req})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(line, []byte(`"apply"`)) || !bytes.HasSuffix(line, []byte("\"}\n")) {
		t.Errorf("record %q: want {\"seq\":9,\"pb\":\"...\"}", line)
	}
	var want pb.ApplyRequest
	if err := proto.Unmarshal(req, &want); err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(line[:len(line)-1])
	if err != nil || got.Seq != 9 {
		t.Fatalf("decode %q: batch %d, %v; want 9", line, got.Seq, err)
	}
	var whole journalEntry
	if err := json.Unmarshal(line[9:len(line)-1], &whole); err != nil || whole.Seq != 9 || !bytes.Equal(whole.PB, req) {
		t.Errorf("%q decoded whole: %+v, %v", line, whole, err)
	}
	for _, e := range []journalEntry{got, whole} {
		if r, err := e.request(); err != nil || !proto.Equal(r, &want) {
			t.Errorf("request of %q: %v, %v; want %v", line, r, err, &want)
		}
	}

	cfg, j := newJournalDir(t, t.TempDir(), 0)
	appendWire(t, j, 1, wirePDR(t, 101))
	first := j.size
	appendWire(t, j, 2, wirePDR(t, 102))
	data, _ := os.ReadFile(j.path)
	data[first+30] ^= 0x01
	if err := os.WriteFile(j.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if _, _, _, _, err := loadState(cfg); !errors.As(err, &ce) || ce.Offset != first {
		t.Errorf("load state with a flipped bit in a wire record: %v, want a CorruptError at %d", err, first)
	}

	cfg, j = newJournalDir(t, t.TempDir(), 0)
	// Field 99 of the ApplyRequest, a varint: no build declares it.
	appendWire(t, j, 1, protowire.AppendVarint(protowire.AppendTag(wirePDR(t, 101), 99, protowire.VarintType), 1))
	if _, _, _, _, err := loadState(cfg); err == nil || !strings.Contains(err.Error(), "does not know") {
		t.Errorf("load state with an unknown field: %v, want it refused", err)
	}
}

// TestJournalPrintedAsJSON: `edgeplane journal` prints records of both
// encodings as protojson records (which replay as they are), and names a
// damaged line and a torn tail by offset while printing the rest.
func TestJournalPrintedAsJSON(t *testing.T) {
	cfg, j := newJournalDir(t, t.TempDir(), 1)
	appendWire(t, j, 2, wirePDR(t, 102))
	bad := j.size
	appendWire(t, j, 3, wirePDR(t, 103))
	appendWire(t, j, 4, wirePDR(t, 104))
	data, _ := os.ReadFile(j.path)
	data[bad+20] ^= 0x01
	data = append(data, `0badc0de {"seq":5`...)
	var out bytes.Buffer
	n, err := WriteJournalJSON(&out, j.path, data)
	if err != nil || n != 2 {
		t.Fatalf("%d lines not printed, %v; want 2 (the damaged one, the torn tail)", n, err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("printed %q: want 5 lines", out.String())
	}
	for i, want := range []string{`{"seq":1,"apply":{`, `{"seq":2,"apply":{`, fmt.Sprintf("# byte offset %d: checksum", bad), `{"seq":4,"apply":{`, fmt.Sprintf("# byte offset %d: ", len(data)-len(`0badc0de {"seq":5`))} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d %q, want it to start with %q", i, lines[i], want)
		}
	}
	// The printed records, journalled as they are, replay.
	var replay bytes.Buffer
	for _, l := range lines {
		if !strings.HasPrefix(l, "#") {
			line, err := encodeRecord(journalEntry{Seq: uint64(l[7] - '0'), Apply: json.RawMessage(l[len(`{"seq":1,"apply":`) : len(l)-1])})
			if err != nil {
				t.Fatal(err)
			}
			replay.Write(line)
		}
	}
	if err := os.WriteFile(j.path, replay.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(pdrIDs(t, cfg)), "[1 101 102 104]"; got != want {
		t.Errorf("pdrs of the printed records: %s, want %s", got, want)
	}
}

// TestJournalSkippedWireKeptReadable: a wire-format batch the edited
// file no longer takes is kept in FILE.journal.skipped in protojson, for
// the operator to read.
func TestJournalSkippedWireKeptReadable(t *testing.T) {
	cfg, j := newJournalDir(t, t.TempDir(), 0)
	appendWire(t, j, 1, wirePDR(t, 101))
	if err := os.WriteFile(cfg, []byte(journalConfig+"  - {id: 101, precedence: 50, match: {in: wan0}, far: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _, skipped, err := loadState(cfg)
	if err != nil || len(skipped) != 1 {
		t.Fatalf("load: %d skipped, %v; want 1", len(skipped), err)
	}
	if err := keepSkipped(cfg, skipped); err != nil {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(journalPath(cfg) + ".skipped")
	recs, _, err := parseJournal("skipped", kept)
	if err != nil || len(recs) != 1 || recs[0].Seq != 1 || !bytes.Contains(kept, []byte(`"apply":{"operations":`)) {
		t.Errorf("kept %q: %d records, %v; want batch 1 in protojson", kept, len(recs), err)
	}
}
