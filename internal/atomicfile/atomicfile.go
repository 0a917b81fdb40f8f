// SPDX-License-Identifier: Apache-2.0

// Package atomicfile replaces files whole: what the agent's config file,
// its journal and a fleet member's state file are written with, so that
// a crash leaves the old file or the new one, never a torn one.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Replace writes data to path atomically: to a temporary file in the
// same directory, then renamed over path, so readers and a restarted
// process see either the old file or the new one, never a torn one. With
// durable, the data and the rename are synced to disk before it returns.
func Replace(path string, data []byte, mode os.FileMode, durable bool) error {
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
