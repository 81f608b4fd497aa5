#!/usr/bin/env bash
# Installs hvbench on Debian 12 as root: the Debian packages it drives (scripts/debian-packages.txt),
# a virtualenv in .venv and the package itself. `--dev` adds what the tests need (gVisor's runsc,
# which the tests boot, vegeta, the consolidation workload's HTTP client, CRIU 4.1, with which
# runc checkpoints a container, and QEMU 10.0 beside the system's 7.2, which the migration tests
# run); `--with-gvisor` builds runsc for `driver: gvisor` alone, `--with-vegeta` vegeta alone,
# `--with-criu` installs CRIU alone (scripts/install-criu.sh), `--with-qemu-backports` QEMU 10.0
# alone (scripts/install-qemu-backports.sh; a platform runs it with
# `binary: qemu-system-x86_64-backports`).
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")"

extras=""
with_gvisor=0
with_vegeta=0
with_criu=0
with_qemu_backports=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="[dev]"; with_gvisor=1; with_vegeta=1; with_criu=1; with_qemu_backports=1 ;;
    --with-gvisor) with_gvisor=1 ;;
    --with-vegeta) with_vegeta=1 ;;
    --with-criu) with_criu=1 ;;
    --with-qemu-backports) with_qemu_backports=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --dev, --with-gvisor, --with-vegeta," \
         "--with-criu, --with-qemu-backports)" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (hvbench makes namespaces, taps and loop devices)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
packages=$(sed -e 's/#.*//' scripts/debian-packages.txt | xargs)
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $packages

[ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e ".${extras}"
# the extras side by side, each with its output kept until it ends: two Go builds (CPU) beside
# two private roots fetched with apt (network, disk), minutes on a fresh machine
steps=()
[ "$with_gvisor" = 1 ] && [ ! -x .venv/bin/runsc ] && steps+=("scripts/build-runsc.sh .venv/bin")
[ "$with_vegeta" = 1 ] && [ ! -x .venv/bin/vegeta ] && steps+=("scripts/build-vegeta.sh .venv/bin")
[ "$with_criu" = 1 ] && steps+=("scripts/install-criu.sh .venv")
[ "$with_qemu_backports" = 1 ] && steps+=("scripts/install-qemu-backports.sh .venv")
if [[ " ${steps[*]} " == *" scripts/build-"* ]]; then
  # the Go toolchain first, once: each build would install it with apt, and apt runs one at a time
  # shellcheck source=scripts/go-toolchain.sh
  . scripts/go-toolchain.sh
  go_toolchain setup.sh
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for i in "${!steps[@]}"; do
  # shellcheck disable=SC2086
  ${steps[$i]} > "$logs/$i" 2>&1 &
  pids[i]=$!
done
failed=0
for i in "${!steps[@]}"; do
  if wait "${pids[$i]}"; then
    cat "$logs/$i"
  else
    cat "$logs/$i" >&2
    echo "setup.sh: ${steps[$i]} failed" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
echo "setup.sh: hvbench $(.venv/bin/hvbench version) is ready in $(pwd)/.venv"
