// SPDX-License-Identifier: Apache-2.0

// Package yamlnode reads and names yaml.v3 nodes the way the config's
// messages do. The config's value types (a prefix, a rate, a secret)
// decode themselves from a node and the config file's decoder walks the
// rest; both say "must be X, got Y" alike through this package, which is
// why it sits below both.
package yamlnode

import (
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Resolve follows aliases to the anchored node.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}

// IsNull reports a missing node or a null scalar.
func IsNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// Describe names a node for "got ..." messages: strings are quoted,
// other scalars are shown as written.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	case yaml.DocumentNode:
		return "a document"
	}
	return "nothing"
}

// ScalarText returns the text of a scalar node for a value type's
// UnmarshalYAML: null reports ok false (the value is left unset), and
// anything but a scalar is an error saying what was expected (want).
func ScalarText(n *yaml.Node, want string) (s string, ok bool, err error) {
	n = Resolve(n)
	if IsNull(n) {
		return "", false, nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", false, fmt.Errorf("must be %s, got %s", want, Describe(n))
	}
	return n.Value, true, nil
}
