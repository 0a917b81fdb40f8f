#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Go toolchain go.mod names, for the Makefile.
#
#   go-toolchain.sh which     print the path of a go command at least as
#                             new as go.mod's, or nothing
#   go-toolchain.sh install   make sure there is one: if none, bootstrap
#                             from Debian's backports golang package (in an
#                             apt state of its own: the machine's sources
#                             stay as they are), have it fetch go.mod's
#                             version through the module proxy's toolchain
#                             download, and keep that in $GO_DIR
#
# Debian 12 ships Go 1.19, too old to build edgeplane and too old to
# fetch a toolchain (GOTOOLCHAIN came with 1.21); bookworm-backports has
# a newer one, which only serves to fetch the real toolchain and is
# removed after.
set -euo pipefail
cd "$(dirname "$0")/.."

GO_DIR=${GO_DIR:-/opt/edgeplane-go}
BACKPORTS=${BACKPORTS:-bookworm-backports}

# want is go.mod's version: the larger of its go and toolchain lines.
want() {
	sed -n -e 's/^go \([0-9.]*\)$/\1/p' -e 's/^toolchain go\([0-9.]*\)$/\1/p' go.mod | sort -V | tail -1
}

# version prints the version of go command $1 itself (1.26.8), never of a
# toolchain it would switch to; outside the module, so that an older go
# does not refuse to answer.
version() {
	(cd / && GOTOOLCHAIN=local GOENV=off "$1" env GOVERSION 2>/dev/null) | sed -n 's/^go\([0-9.]*\).*/\1/p'
}

# atleast reports whether version $1 is $2 or newer.
atleast() {
	[ -n "$1" ] && [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}

# candidates are the go commands to consider, best first: ours, then the
# usual places.
candidates() {
	printf '%s\n' "$GO_DIR/bin/go" /usr/local/go/bin/go
	command -v go 2>/dev/null || true
	ls -d /usr/lib/go-1.*/bin/go 2>/dev/null | sort -V -r || true
}

which_go() {
	local w c
	w=$(want)
	while read -r c; do
		[ -x "$c" ] && atleast "$(version "$c")" "$w" && { echo "$c"; return 0; }
	done < <(candidates)
	return 1
}

# bootstrap prints a go command of at least 1.21 (one that can fetch a
# toolchain), unpacking Debian's backports package into $1 if the
# machine has none.
bootstrap() {
	local work=$1 c deb
	while read -r c; do
		[ -x "$c" ] && atleast "$(version "$c")" 1.21 && { echo "$c"; return 0; }
	done < <(candidates)
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/root"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $BACKPORTS main" >"$work/sources.list"
	local apt=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=/nonexistent
		-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1)
	{ apt-get "${apt[@]}" -q update 2>&1 >/dev/null | grep -v '^W: Download is performed unsandboxed' >&2; } || true
	# golang-go points at the newest golang-1.N-go; its standard library's
	# source is golang-1.N-src.
	deb=$(apt-cache "${apt[@]}" depends "golang-go/$BACKPORTS" 2>/dev/null | sed -n 's/^ *Depends: \(golang-1\.[0-9]*-go\)$/\1/p' | head -1)
	[ -n "$deb" ] || { echo "go-toolchain: no golang package in $BACKPORTS" >&2; return 1; }
	(cd "$work" && apt-get "${apt[@]}" -q download "$deb" "${deb%-go}-src" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
	for f in "$work"/*.deb; do dpkg-deb -x "$f" "$work/root"; done
	c=$(ls -d "$work"/root/usr/lib/go-1.*/bin/go | head -1)
	[ -x "$c" ] || { echo "go-toolchain: $deb has no go command" >&2; return 1; }
	echo "bootstrap: $deb ($(version "$c"))" >&2
	echo "$c"
}

install_go() {
	local w boot root work
	if which_go >/dev/null; then
		return 0
	fi
	w=$(want)
	echo "installing Go $w in $GO_DIR"
	# The toolchain download is checked over TLS and against the
	# checksum database: it needs the CA certificates.
	if ! dpkg -s ca-certificates >/dev/null 2>&1; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates >/dev/null
	fi
	work=$(mktemp -d)
	# shellcheck disable=SC2064 # $work is this run's, fixed now
	trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work'" EXIT
	boot=$(bootstrap "$work")
	# The bootstrap go fetches golang.org/toolchain@v0.0.1-go$w through
	# GOPROXY into a module cache of our own and runs it; its GOROOT is
	# that download, copied out (the module cache is read-only and may
	# be cleaned).
	root=$(cd "$work" && env -u GOROOT GOTOOLCHAIN="go$w" GOFLAGS= GOPATH="$work/gopath" \
		GOMODCACHE="$work/gopath/pkg/mod" GOENV=off "$boot" env GOROOT)
	[ -x "$root/bin/go" ] || { echo "go-toolchain: no toolchain go$w fetched" >&2; return 1; }
	rm -rf "$GO_DIR.new"
	mkdir -p "$(dirname "$GO_DIR")"
	cp -a "$root" "$GO_DIR.new"
	chmod -R u+w "$GO_DIR.new"
	rm -rf "$GO_DIR"
	mv "$GO_DIR.new" "$GO_DIR"
	atleast "$(version "$GO_DIR/bin/go")" "$w" || { echo "go-toolchain: $GO_DIR is not go$w" >&2; return 1; }
	echo "Go $("$GO_DIR/bin/go" env GOVERSION) in $GO_DIR"
}

case ${1:-} in
which) which_go || true ;;
install) install_go ;;
*)
	echo "usage: $0 which|install" >&2
	exit 2
	;;
esac
