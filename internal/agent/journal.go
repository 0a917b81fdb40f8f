// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
)

// The agent's state on disk is its config file plus a journal beside it
// (FILE.journal). An API commit appends its batch to the journal, one
// JSON line of a few hundred bytes, instead of rewriting the whole file
// (O(rules): ~1 ms for a handful of rules on ext4, tens of ms for
// thousands). Shortly after, the syncer folds the journal into the file:
// it writes the file with the sequence number of the last batch it holds
// in its first lines ("# edgeplane-journal-seq: N") and drops those
// batches from the journal. Loading (start, SIGHUP) reads the file and
// replays the batches after its sequence number, so a restarted agent,
// even one killed in between, serves exactly the last commit.

const seqMarker = "# edgeplane-journal-seq: "

// journalEntry is one line of the journal.
type journalEntry struct {
	Seq   uint64          `json:"seq"`
	Apply json.RawMessage `json:"apply"` // edgeplane.v1.ApplyRequest, protojson
}

func journalPath(configPath string) string { return configPath + ".journal" }

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

// loadState reads the config file and replays the journal batches newer
// than it. It returns the config, the sequence number of the last batch
// in it and how many batches were replayed. A batch that no longer
// applies (the file was edited under it) is skipped and reported in
// skipped; the rest still apply.
func loadState(path string) (cfg *config.Config, seq uint64, replayed int, skipped []error, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("read config: %w", err)
	}
	if cfg, err = config.Parse(data); err != nil {
		return nil, 0, 0, nil, err
	}
	seq = fileSeq(data)
	entries, err := readJournal(journalPath(path))
	if err != nil {
		return nil, 0, 0, nil, err
	}
	store := config.NewStore(cfg)
	for _, e := range entries {
		if e.Seq <= seq {
			continue
		}
		var req pb.ApplyRequest
		if err := protojson.Unmarshal(e.Apply, &req); err != nil {
			skipped = append(skipped, fmt.Errorf("journal batch %d: %w", e.Seq, err))
			continue
		}
		ops, err := api.Ops(req.GetOperations())
		if err == nil {
			_, _, err = store.Apply(ops)
		}
		if err != nil {
			skipped = append(skipped, fmt.Errorf("journal batch %d no longer applies: %w", e.Seq, err))
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

// readJournal reads every complete line of the journal; a torn last line
// (a crash mid-append) is ignored: its Apply never returned.
func readJournal(path string) ([]journalEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	defer f.Close()
	var out []journalEntry
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // EOF, or a last line without its newline
		}
		var e journalEntry
		if json.Unmarshal(line, &e) == nil && e.Seq > 0 {
			out = append(out, e)
		}
	}
	return out, nil
}

// journal appends batches to FILE.journal.
type journal struct {
	path string
	f    *os.File
}

func openJournal(configPath string) (*journal, error) {
	p := journalPath(configPath)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &journal{path: p, f: f}, nil
}

// append writes one batch as one line with one write(2).
func (j *journal) append(seq uint64, req []byte) error {
	line, err := json.Marshal(journalEntry{Seq: seq, Apply: req})
	if err != nil {
		return err
	}
	_, err = j.f.Write(append(line, '\n'))
	return err
}

// keepAfter rewrites the journal with only the batches after seq
// (atomically: temporary file, rename) and reopens it for appending.
func (j *journal) keepAfter(seq uint64) error {
	entries, err := readJournal(j.path)
	if err != nil {
		return err
	}
	var buf []byte
	for _, e := range entries {
		if e.Seq > seq {
			line, _ := json.Marshal(e)
			buf = append(append(buf, line...), '\n')
		}
	}
	if err := config.ReplaceFile(j.path, buf, 0o600, true); err != nil {
		return err
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	j.f.Close()
	j.f = f
	return nil
}

func (j *journal) sync() error  { return j.f.Sync() }
func (j *journal) close() error { return j.f.Close() }
