#!/usr/bin/env bash
# Fetch SchedMD's own Python testsuite (ATF, testsuite/python in Slurm's source) for this
# host's Slurm release from Debian's source package, pinned to the installed version of
# slurm-client, into a cache outside the checkout:
#   ${SIMCLUSTER_ATF_CACHE:-${XDG_CACHE_HOME:-~/.cache}/simcluster/atf}/<debian version>/
#     slurm-wlm_<version>.dsc        the source package's description (its Checksums-Sha256)
#     python/                        testsuite/python of the orig tarball
#     .done                          written last: a second run returns at once
# Also installs ATF's own test runner, Debian's python3-pytest (pytest-3, the version of
# the release's era: ATF 22.05 needs py.io, which the venv's newer pytest lacks) and
# python3-pexpect, and adds a deb-src line for the host's suite when apt has none.
# Used by tests/integration/test_schedmd_testsuite.py; docs/schedmd-testsuite.md.
# `--print-dir` prints the directory it would use and does nothing else.
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

version=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null || true)
if [ -z "$version" ]; then
  echo "error: slurm-client is not installed (dpkg-query); run 'make setup' first" >&2
  exit 1
fi
cache=${SIMCLUSTER_ATF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simcluster/atf}
dest="$cache/$version"
if [ "${1:-}" = "--print-dir" ]; then echo "$dest"; exit 0; fi

# pexpect: ATF's interactive tests (srun --quit-on-interrupt, ...).
need=()
for p in python3-pytest python3-pexpect; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -f "$dest/.done" ]; then
  echo "SchedMD testsuite for slurm-wlm $version: present in $dest"
  exit 0
fi

# The source package of exactly the installed version: apt needs a deb-src line for the
# suite that carries it. Added only when apt knows no such source yet.
# (The listing is read whole first: grep -q closing the pipe early would fail it under pipefail.)
have_source() { local src; src=$(apt-cache showsrc slurm-wlm 2>/dev/null || true); grep -qx "Version: $version" <<<"$src"; }
if ! have_source; then
  # shellcheck source=/dev/null
  . /etc/os-release
  case "${ID:-}" in
    debian) line="deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $VERSION_CODENAME main" ;;
    ubuntu) line="deb-src http://archive.ubuntu.com/ubuntu $VERSION_CODENAME universe" ;;
    *) echo "error: no deb-src line known for ${ID:-this system}; add one that carries slurm-wlm $version to /etc/apt/sources.list.d/" >&2
       exit 1 ;;
  esac
  echo "adding to /etc/apt/sources.list.d/simcluster-deb-src.list: $line"
  echo "$line" | $SUDO tee /etc/apt/sources.list.d/simcluster-deb-src.list >/dev/null
  $SUDO apt-get update -qq
  if ! have_source; then
    echo "error: apt offers no source package slurm-wlm $version (apt-cache showsrc slurm-wlm); the archive may have moved on: add a deb-src line that carries it" >&2
    exit 1
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt's download user must be able to write there (else a warning and an unsandboxed run).
chmod 0755 "$work"; chown _apt "$work" 2>/dev/null || true
echo "downloading the source package slurm-wlm $version (about 10 MB)"
(cd "$work" && apt-get source -qq --download-only "slurm-wlm=$version" >/dev/null)
dsc=$(ls "$work"/slurm-wlm_*.dsc)
orig=$(ls "$work"/slurm-wlm_*.orig.tar.*)
# apt checked the files against the signed Sources index; check the tarball against the
# .dsc's own sha256 too, so the pin is visible here.
want=$(awk -v f="$(basename "$orig")" '/^Checksums-Sha256:/{s=1; next} /^[^ ]/{s=0} s && $3==f {print $1}' "$dsc")
got=$(sha256sum "$orig" | cut -d' ' -f1)
if [ -z "$want" ] || [ "$want" != "$got" ]; then
  echo "error: sha256 of $(basename "$orig") is $got, the .dsc says '${want}'" >&2
  exit 1
fi
mkdir -p "$work/src"
tar -xf "$orig" -C "$work/src" --wildcards '*/testsuite/python/*'
python_dir=$(echo "$work"/src/*/testsuite/python)
test -f "$python_dir/lib/atf.py" || { echo "error: no testsuite/python/lib/atf.py in $(basename "$orig")" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
cp "$dsc" "$dest/"
cp -r "$python_dir" "$dest/python"
echo "sha256 $got  $(basename "$orig")" > "$dest/.done"
echo "SchedMD testsuite for slurm-wlm $version: $dest/python (sha256 of $(basename "$orig") checked against the .dsc)"
