#!/usr/bin/env bash
# Builds vegeta, the constant-rate HTTP load generator the consolidation workload's web and app
# clients use, from the Go module proxy, into hvbench's virtualenv (.venv/bin/vegeta), where the
# workload looks first: nothing outside the checkout changes. setup.sh --dev calls this.
#
# VEGETA_VERSION picks the module version (default v12.13.0, the one the workload's parser is
# tested against). The module version and Go toolchain go to vegeta.version, for provenance.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/go-toolchain.sh
. scripts/go-toolchain.sh
go_install build-vegeta.sh github.com/tsenart/vegeta/v12 "${VEGETA_VERSION:-v12.13.0}" "${1:-.venv/bin}" "" -version
