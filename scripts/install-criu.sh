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
# shellcheck source=scripts/private-apt.sh
. scripts/private-apt.sh
private_apt "$suite"
# criu and the closure of what it depends on, in that suite (names only: no virtual packages)
mapfile -t packages < <(apt-cache "${apt[@]}" depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances criu | grep '^[a-z0-9]' | sort -u)
private_root "$root" "${packages[@]}"
mkdir -p "$dest/bin"
cat > "$dest/bin/criu" <<EOF
#!/bin/sh
# Debian $suite's CRIU from its private root (scripts/install-criu.sh)
exec "$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu" \\
  "$root/usr/sbin/criu" "\$@"
EOF
chmod +x "$dest/bin/criu"
"$dest/bin/criu" --version | sed -n 1p
