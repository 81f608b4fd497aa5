# Sourced by the scripts that build Go programs from the module proxy (build-runsc.sh,
# build-vegeta.sh): `go_toolchain NAME` puts Go 1.21 or later on PATH, or exits 2 saying why;
# `go_install` (below) builds one module with it.
#
# Go 1.21 or later fetches the toolchain a module asks for. Debian 12's own Go is 1.19;
# bookworm's backports have 1.23, taken from the Debian mirror this host already uses.
go_ok() { command -v go >/dev/null && go env GOVERSION | grep -Eq '^go1\.(2[1-9]|[3-9][0-9])'; }

go_toolchain() {
  local who="$1" mirror
  PATH="$PATH:/usr/local/go/bin:/usr/lib/go-1.23/bin"
  go_ok && return 0
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | awk '$2 == "bookworm" { print $1; exit }')
  if [ -z "$mirror" ]; then
    echo "$who: Go 1.21 or later is needed; install it, or add bookworm to apt's sources" >&2
    exit 2
  fi
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
    "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > /etc/apt/sources.list.d/hvbench-backports.sources
  apt-get update -q
  apt-get install -y -q --no-install-recommends -t bookworm-backports golang-1.23-go
  go_ok || { echo "$who: Go 1.23 from backports did not install" >&2; exit 2; }
}

# `go_install NAME MODULE VERSION DEST NOTE VERSION_FLAG`: builds MODULE@VERSION statically
# (CGO_ENABLED=0) into DEST/<binary>, writes the module version, the Go toolchain and NOTE to
# DEST/<binary>.version for provenance, and checks the binary runs with VERSION_FLAG.
go_install() {
  local who="$1" module="$2" version="$3" dest="$4" note="$5" flag="$6" bin build
  bin="${module##*/}"
  [[ "$bin" =~ ^v[0-9]+$ ]] && bin="$(basename "$(dirname "$module")")"
  go_toolchain "$who"
  mkdir -p "$dest"
  dest="$(cd "$dest" && pwd)"
  build="$(mktemp -d)"
  echo "$who: building ${module}@${version}"
  CGO_ENABLED=0 GOBIN="$build" go install -trimpath "${module}@${version}"
  install -m 0755 "$build/$bin" "$dest/$bin"
  rm -rf "$build"
  go version -m "$dest/$bin" | awk -v go="$(go env GOVERSION)" -v note="$note" \
    '$1 == "mod" { print $2 " " $3 " (" go note ")" }' | tee "$dest/$bin.version"
  "$dest/$bin" "$flag" >/dev/null
  echo "$who: installed $dest/$bin"
}
