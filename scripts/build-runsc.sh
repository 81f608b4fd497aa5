#!/usr/bin/env bash
# Builds gVisor's runsc from the Go module proxy for `driver: gvisor` and installs it into
# hvbench's virtualenv (.venv/bin/runsc), where the driver looks first: nothing outside the
# checkout changes. setup.sh calls this for `./setup.sh --with-gvisor`.
#
# CGO_ENABLED=0: the default (dynamic, cgo) build dies at start with
# "fork/exec /proc/self/exe"; the static build runs with --platform=systrap and ptrace.
# RUNSC_VERSION picks the module version (default: latest, the newest commit of gVisor's `go`
# branch, the one that builds with plain `go install`). runsc built this way prints no version
# of its own, so the module version and Go toolchain go to runsc.version next to the binary,
# for the driver's provenance.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/go-toolchain.sh
. scripts/go-toolchain.sh
go_install build-runsc.sh gvisor.dev/gvisor/runsc "${RUNSC_VERSION:-latest}" "${1:-.venv/bin}" ", CGO_ENABLED=0" --version
