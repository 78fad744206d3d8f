#!/usr/bin/env bash
# Installs the Debian packages Chameleon needs to build and test, if any are
# missing. As root it runs apt-get; otherwise it prints the one command to run.
# Why each package: docs/dependencies.md.
set -euo pipefail

# libclang-rt-dev: clang's sanitizer and libFuzzer runtimes (only recommended
# by clang, so --no-install-recommends would leave them out).
packages=(cmake make ninja-build gcc clang libclang-rt-dev pkg-config libcmocka-dev libjansson-dev
          python3-dev python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "chameleon: missing packages: ${missing[*]}" >&2
  echo "run as root:  $cmd" >&2
  exit 1
fi
echo "chameleon: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
