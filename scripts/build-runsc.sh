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

dest="${1:-.venv/bin}"
version="${RUNSC_VERSION:-latest}"

# Go 1.21 or later fetches the toolchain gVisor asks for. Debian 12's own Go is 1.19; bookworm's
# backports have 1.23, taken from the Debian mirror this host already uses.
go_ok() { command -v go >/dev/null && go env GOVERSION | grep -Eq '^go1\.(2[1-9]|[3-9][0-9])'; }
PATH="$PATH:/usr/local/go/bin:/usr/lib/go-1.23/bin"
if ! go_ok; then
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | awk '$2 == "bookworm" { print $1; exit }')
  if [ -z "$mirror" ]; then
    echo "build-runsc.sh: Go 1.21 or later is needed; install it, or add bookworm to apt's sources" >&2
    exit 2
  fi
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
    "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > /etc/apt/sources.list.d/hvbench-backports.sources
  apt-get update -q
  apt-get install -y -q --no-install-recommends -t bookworm-backports golang-1.23-go
  go_ok || { echo "build-runsc.sh: Go 1.23 from backports did not install" >&2; exit 2; }
fi
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT

echo "build-runsc.sh: building gvisor.dev/gvisor/runsc@${version} (a few minutes)"
CGO_ENABLED=0 GOBIN="$build" go install -trimpath "gvisor.dev/gvisor/runsc@${version}"
install -m 0755 "$build/runsc" "$dest/runsc"
go version -m "$dest/runsc" | awk -v go="$(go env GOVERSION)" \
  '$1 == "mod" { print $2 " " $3 " (" go ", CGO_ENABLED=0)" }' | tee "$dest/runsc.version"
"$dest/runsc" --version >/dev/null
echo "build-runsc.sh: installed $dest/runsc"
