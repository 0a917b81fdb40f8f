// SPDX-License-Identifier: Apache-2.0

// Package docs holds edgeplane's documentation pages; its test checks
// that their links, and the README's, lead somewhere.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	fence   = regexp.MustCompile("(?s)```.*?```")
	heading = regexp.MustCompile(`(?m)^#+ (.*)$`)
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchor is the id GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func anchor(h string) string {
	return strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// TestLinks: every relative link of README.md and docs/*.md names a file
// that exists, and a heading of it where it names one (a page moved or
// a section renamed breaks no reader's link unnoticed).
func TestLinks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"))
	anchors := map[string]map[string]bool{}
	texts := map[string]string{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs(p)
		texts[abs] = fence.ReplaceAllString(string(b), "")
		anchors[abs] = map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(texts[abs], -1) {
			anchors[abs][anchor(m[1])] = true
		}
	}
	if len(texts) < 10 {
		t.Fatalf("only %d pages found", len(texts))
	}
	for page, text := range texts {
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			abs := page
			if file != "" {
				abs = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s: link %s: no such file", page, target)
					continue
				}
			}
			if a, ok := anchors[abs]; ok && frag != "" && !a[frag] {
				t.Errorf("%s: link %s: no heading #%s there", page, target, frag)
			}
		}
	}
}
