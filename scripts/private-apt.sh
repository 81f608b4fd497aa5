# Sourced by the install-*.sh scripts that fetch Debian packages by name without touching the
# system's apt: `private_apt SUITE...` makes a temporary directory `work` (removed on exit),
# writes a sources list of its own there naming the Debian mirror this host's apt already uses
# (its first non-security URI) with those suites, updates package lists kept there, and leaves
# in the array `apt` the apt-get/apt-cache options that use them. The system's sources, lists
# and dpkg state are never written.
# shellcheck shell=bash

private_apt() {
  local suite mirror
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list \
             /etc/apt/sources.list.d/*.list 2>/dev/null \
           | sed -n -e 's/^URIs:[[:space:]]*//p' \
               -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
           | tr ' ' '\n' | grep -v -- '-security' | head -n1 || true)
  if [ -z "$mirror" ]; then
    echo "$(basename "$0"): no Debian mirror in this host's apt sources" >&2
    exit 1
  fi
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  : > "$work/sources.list"
  for suite in "$@"; do
    echo "deb $mirror $suite main" >> "$work/sources.list"
  done
  apt=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
       -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
       -o APT::Sandbox::User=root -o Debug::NoLocking=1)
  apt-get "${apt[@]}" update -q
}

# `private_root ROOT PACKAGE...` downloads the packages (name or name/suite) with the lists
# private_apt made and unpacks them all into ROOT, replacing what was there only once all are.
private_root() {
  local root="$1" deb
  shift
  mkdir -p "$work/debs"
  (cd "$work/debs" && apt-get "${apt[@]}" download "$@")
  rm -rf "$root.new"
  mkdir -p "$root.new"
  for deb in "$work"/debs/*.deb; do
    dpkg-deb -x "$deb" "$root.new"
  done
  rm -rf "$root"
  mv "$root.new" "$root"
}
