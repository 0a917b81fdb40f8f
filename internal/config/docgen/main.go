// SPDX-License-Identifier: Apache-2.0

// Command docgen writes docs/config-reference.md, the reference of every
// kind of the gateway's config and every field of each, from the kinds'
// declarations in internal/config and their doc comments. `make
// generate` runs it; `make check-generate` fails when the page drifts
// from the declarations. It is a tool, linked into no binary.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("o", "", "write the page here (default: docs/config-reference.md in the module)")
	flag.Parse()
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return err
	}
	page, err := reference(root)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(root, referencePath)
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		return fmt.Errorf("write reference: %w", err)
	}
	return nil
}

// referencePath is the page, from the module's root.
const referencePath = "docs/config-reference.md"

// reference generates the page for the module at root.
func reference(root string) ([]byte, error) {
	dir, err := packageDir(root)
	if err != nil {
		return nil, err
	}
	return Generate(dir)
}
