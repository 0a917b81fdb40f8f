// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
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
// directory, synced, then renamed over path, so a crash leaves either the
// old file or the new one, never a torn one. The file keeps its mode.
func WriteFile(path string, c *Config) error {
	body, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("marshal config: %w", err)
	}
	data := append([]byte(fileHeader), body...)
	// What is written must read back as the same config.
	back, err := Parse(data)
	if err != nil {
		return fmt.Errorf("config does not survive a round trip: %w", err)
	}
	if b2, _ := yaml.Marshal(back); !bytes.Equal(b2, body) {
		return fmt.Errorf("config does not survive a round trip")
	}
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
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
