#!/usr/bin/env bash
# Installs QEMU 10.0 from Debian 12's backports into hvbench's virtualenv beside the system's
# QEMU 7.2: .venv/bin/qemu-system-x86_64-backports, which a qemu platform names with
# `binary: qemu-system-x86_64-backports`. Nothing of the system changes: libvirt and every
# platform without `binary` go on running Debian 12's QEMU. setup.sh calls this for
# `./setup.sh --with-qemu-backports` (and --dev).
#
# Why: under TCG, QEMU 7.2 loses writes a guest makes while it is being migrated (pages differ
# after a completed migration, the destination's kernel often crashes); 10.0 does not (see
# src/hvbench/workloads/migration.py). The packages are fetched by name with apt-get from the
# Debian mirror this host's apt already uses: qemu-system-x86 from <codename>-backports and what
# it needs that this host lacks at the versions it needs (apt's own answer, from the host's dpkg
# state), unpacked into .venv/lib/qemu-backports. Built for Debian 12, they run on its glibc; the
# wrapper points QEMU at its own firmware and modules and at any library of that root.
# QEMU_BACKPORTS_SUITE picks the suite (default: the host's codename followed by -backports).
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$(pwd)/${1:-.venv}"
root="$dest/lib/qemu-backports"
wrapper="$dest/bin/qemu-system-x86_64-backports"
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
suite="${QEMU_BACKPORTS_SUITE:-$codename-backports}"

if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; then
  exit 0
fi
# shellcheck source=scripts/private-apt.sh
. scripts/private-apt.sh
private_apt "$codename" "$suite"
# name=version of what installing it would add or upgrade here (a simulation: nothing is
# installed); seabios for its BIOS, qemu-system-data for its other firmware
mapfile -t packages < <(apt-get "${apt[@]}" install --simulate --no-install-recommends \
  -t "$suite" qemu-system-x86 qemu-system-data seabios \
  | sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\?(\([^ ]*\) .*/\1=\3/p')
if [ "${#packages[@]}" -eq 0 ]; then
  echo "install-qemu-backports.sh: apt offers no qemu-system-x86 in $suite" >&2
  exit 1
fi
private_root "$root" "${packages[@]}"
mkdir -p "$dest/bin"
lib="$root/usr/lib/x86_64-linux-gnu"
cat > "$wrapper" <<EOF
#!/bin/sh
# Debian $suite's QEMU from its private root (scripts/install-qemu-backports.sh): its own
# firmware (-L) and modules first, and any library apt fetched with it
LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" QEMU_MODULE_DIR="$lib/qemu" \\
  exec "$root/usr/bin/qemu-system-x86_64" -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" \\
  "\$@"
EOF
chmod +x "$wrapper"
"$wrapper" --version | sed -n 1p
