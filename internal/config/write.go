// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// fileHeader starts a config file the agent wrote.
const fileHeader = `# Written by the edgeplane agent after an API change: this file is what
# the gateway serves, and what a restarted agent serves again. Edit it and
# send SIGHUP to apply an edit (comments are not kept across API changes).
`

// WriteFile writes c to path atomically: to a temporary file in the same
// directory, then renamed over path, so readers and a restarted process see
// either the old file or the new one, never a torn one. With durable, the
// data and the rename are synced to disk before it returns (SyncFile does
// that later otherwise). The file keeps its mode.
func WriteFile(path string, c *Config, durable bool) error {
	body, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("marshal config: %w", err)
	}
	// That this reads back as the same config is TestRoundTrip's and
	// TestWriteFileRoundTrip's to show, not every commit's to pay for.
	data := append([]byte(fileHeader), body...)
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
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

// SyncFile makes path's data and its directory entry durable.
func SyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
