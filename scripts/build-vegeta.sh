#!/usr/bin/env bash
# Builds vegeta, the constant-rate HTTP load generator the consolidation workload's web and app
# clients use, from the Go module proxy, into hvbench's virtualenv (.venv/bin/vegeta), where the
# workload looks first: nothing outside the checkout changes. setup.sh --dev calls this.
#
# VEGETA_VERSION picks the module version (default v12.13.0, the one the workload's parser is
# tested against). The module version and Go toolchain go to vegeta.version, for provenance.
set -euo pipefail
cd "$(dirname "$0")/.."

dest="${1:-.venv/bin}"
version="${VEGETA_VERSION:-v12.13.0}"

# shellcheck source=scripts/go-toolchain.sh
. scripts/go-toolchain.sh
go_toolchain build-vegeta.sh
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT

echo "build-vegeta.sh: building github.com/tsenart/vegeta/v12@${version} (a minute)"
CGO_ENABLED=0 GOBIN="$build" go install -trimpath "github.com/tsenart/vegeta/v12@${version}"
install -m 0755 "$build/vegeta" "$dest/vegeta"
go version -m "$dest/vegeta" | awk -v go="$(go env GOVERSION)" \
  '$1 == "mod" { print $2 " " $3 " (" go ")" }' | tee "$dest/vegeta.version"
"$dest/vegeta" -version >/dev/null
echo "build-vegeta.sh: installed $dest/vegeta"
