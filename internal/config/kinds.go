// SPDX-License-Identifier: Apache-2.0

package config

// builtin is the schema of the gateway's config: one line per kind, in
// the order what is referred to comes before what refers to it (a
// batch's objects are applied and listed in this order). Adding a kind
// is a file declaring it (a type and a KindOf, see pdr.go) and a line
// here.
var builtin = NewSchema(
	interfaceKind,
	pathKind,
	farKind,
	lbrKind,
	serviceKind,
	qosKind,
	flowOptKind,
	strategyKind,
	pdrKind,
)
