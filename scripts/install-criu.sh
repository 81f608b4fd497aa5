#!/usr/bin/env bash
# Installs CRIU 4.1 for `driver: container`'s migration and snapshot (runc checkpoint and runc
# restore) into hvbench's virtualenv: .venv/bin/criu, which the driver hands to runc. Nothing of
# the system changes. setup.sh calls this for `./setup.sh --with-criu` (and --dev).
#
# Why not Debian 12's criu: CRIU 3.17 fails `criu check` on kernels from 6.13 on ("vdso: Failed
# to fill self vdso symtable"); 4.1 works, and Debian 13 ships 4.1.1. Its package needs glibc
# 2.38, so it runs from a private root: Debian 13's criu and every library it needs, glibc
# included, fetched by package name with apt-get from the Debian mirror this host's apt already
# uses, unpacked into .venv/lib/criu, and started through that root's own dynamic loader.
# CRIU_SUITE picks the Debian suite (default: trixie).
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$(pwd)/${1:-.venv}"
root="$dest/lib/criu"
suite="${CRIU_SUITE:-trixie}"

if [ -x "$dest/bin/criu" ] && "$dest/bin/criu" --version >/dev/null 2>&1; then
  exit 0
fi
mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
           2>/dev/null | sed -n -e 's/^URIs:[[:space:]]*//p' \
             -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
         | tr ' ' '\n' | grep -v -- '-security' | head -n1 || true)
if [ -z "$mirror" ]; then
  echo "install-criu.sh: no Debian mirror in this host's apt sources" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb $mirror $suite main" > "$work/sources.list"
apt=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
     -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
     -o APT::Sandbox::User=root -o Debug::NoLocking=1)
apt-get "${apt[@]}" update -q
# criu and the closure of what it depends on, in that suite (names only: no virtual packages)
mapfile -t packages < <(apt-cache "${apt[@]}" depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances criu | grep '^[a-z0-9]' | sort -u)
(cd "$work/debs" && apt-get "${apt[@]}" download "${packages[@]}")

rm -rf "$root.new"
mkdir -p "$root.new"
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$root.new"
done
rm -rf "$root"
mv "$root.new" "$root"
mkdir -p "$dest/bin"
cat > "$dest/bin/criu" <<EOF
#!/bin/sh
# Debian $suite's CRIU from its private root (scripts/install-criu.sh)
exec "$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu" \\
  "$root/usr/sbin/criu" "\$@"
EOF
chmod +x "$dest/bin/criu"
"$dest/bin/criu" --version | sed -n 1p
