# Sourced by the scripts that build Go programs from the module proxy (build-runsc.sh,
# build-vegeta.sh): `go_toolchain NAME` puts Go 1.21 or later on PATH, or exits 2 saying why.
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
