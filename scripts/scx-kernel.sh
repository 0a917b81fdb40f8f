#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches Debian's trixie-backports cloud kernel, built with sched_ext
# (CONFIG_SCHED_CLASS_EXT=y), for the sched_ext test under qemu
# (internal/sched/scx: TestSchedExtQEMU), to $1. It uses an apt state of its own,
# so the machine's sources stay as they are; packages are checked against
# Debian's archive keys, which this machine's keyring has.
set -euo pipefail
out=${1:-/var/cache/edgeplane/scx/vmlinuz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$(dirname "$out")"
cat > "$work/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-backports main
SRC
APT=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=/nonexistent
     -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1)
apt-get "${APT[@]}" -q update >/dev/null
# The kernel the meta package points at: linux-image-V-cloud-amd64, whose
# image is in linux-binary-V and config in linux-base-V.
image=$(apt-cache "${APT[@]}" depends linux-image-cloud-amd64/trixie-backports 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -1)
ver=${image#linux-image-}
[ -n "$ver" ] || { echo "no cloud kernel in trixie-backports" >&2; exit 1; }
cd "$work"
apt-get "${APT[@]}" -q download "linux-binary-$ver" "linux-base-$ver" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
dpkg-deb -x linux-base-"$ver"_*.deb base
dpkg-deb -x linux-binary-"$ver"_*.deb bin
grep -qx 'CONFIG_SCHED_CLASS_EXT=y' "base/usr/lib/modules/$ver/config" || { echo "$ver has no sched_ext" >&2; exit 1; }
grep -qx 'CONFIG_DEBUG_INFO_BTF=y' "base/usr/lib/modules/$ver/config" || { echo "$ver has no BTF" >&2; exit 1; }
install -m 0644 "bin/usr/lib/modules/$ver/vmlinuz" "$out"
echo "$ver" > "$out.version"
echo "sched_ext kernel $ver at $out"
