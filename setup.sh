#!/usr/bin/env bash
# Installs hvbench on Debian 12 as root: the Debian packages the default study needs
# (src/hvbench/debian-packages.txt, its lines without an option), a virtualenv in .venv and the
# package itself. What other studies need comes with the option hvbench names when it refuses
# one: `--with-tools` (the other workloads' programs: fio, bonnie++, dbench, iperf 2, sockperf,
# sysbench, stress-ng, POV-Ray, stockfish, zstd), `--with-kernbench` (a compiler, the kernel
# source), `--with-consolidation` (its servers, and vegeta, its HTTP client), `--with-libvirt`
# (libvirtd and the libvirt-python binding), `--with-perf` (a study's `profile: true`),
# `--with-fleet` (Ansible, for `hvbench fleet run`), `--with-engines` (the container engines:
# Docker, Podman, LXC, systemd-nspawn, and CRIU 4.1 for their checkpoint), `--with-gvisor` (builds runsc),
# `--with-vegeta` (vegeta alone), `--with-criu` (CRIU 4.1, scripts/install-criu.sh, with which
# runc checkpoints a container), `--with-qemu-backports` (QEMU 10.0 beside the system's 7.2,
# scripts/install-qemu-backports.sh; a platform runs it with
# `binary: qemu-system-x86_64-backports`). `--dev` installs all of it and what the tests need
# (chromium for the HTML report's, ...). `--packages` prints the Debian packages the other
# options install, on one line, and installs nothing.
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")"

extras=()
chosen=()
dev=0
print_packages=0
with_gvisor=0
with_vegeta=0
with_criu=0
with_qemu_backports=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1; extras+=(dev); with_gvisor=1; with_vegeta=1; with_criu=1; with_qemu_backports=1 ;;
    --with-gvisor) with_gvisor=1 ;;
    --with-vegeta) with_vegeta=1 ;;
    --with-criu) with_criu=1; chosen+=("$arg") ;;
    --with-qemu-backports) with_qemu_backports=1 ;;
    --with-consolidation) with_vegeta=1; chosen+=("$arg") ;;
    --with-libvirt) extras+=(libvirt); chosen+=("$arg") ;;
    # the engines' checkpoint (rootful Podman, Docker's experimental) is CRIU 4.1's too
    --with-engines) with_criu=1; chosen+=("$arg" --with-criu) ;;
    --with-tools | --with-kernbench | --with-perf | --with-fleet) chosen+=("$arg") ;;
    --packages) print_packages=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --dev, --with-tools, --with-kernbench," \
         "--with-consolidation, --with-libvirt, --with-perf, --with-fleet, --with-engines, --with-gvisor," \
         "--with-vegeta, --with-criu, --with-qemu-backports, --packages)" >&2; exit 2 ;;
  esac
done

# a line's package, then the options that install it: none, every set-up; --dev, all of them
packages=$(sed -e 's/#.*//' src/hvbench/debian-packages.txt | awk -v dev="$dev" \
  -v chosen=" ${chosen[*]} " 'NF {
    keep = NF == 1 || dev
    for (i = 2; i <= NF; i++) if (index(chosen, " " $i " ")) keep = 1
    if (keep) print $1
  }' | xargs)
if [ "$print_packages" = 1 ]; then
  echo "$packages"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (hvbench makes namespaces, taps and loop devices)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $packages

[ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
spec="."
[ "${#extras[@]}" = 0 ] || spec=".[$(IFS=,; echo "${extras[*]}")]"
# pip's own no-op takes 5 s: skip it where this very project and extras are installed already
installed="$spec $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -x .venv/bin/hvbench ] || [ "$(cat .venv/.hvbench-installed 2>/dev/null)" != "$installed" ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e "$spec"
  echo "$installed" > .venv/.hvbench-installed
fi
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
