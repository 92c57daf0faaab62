#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image, with the zip that
# `make gradescope` wrote unpacked in /autograder/source (docs/cluster.md, "Gradescope").
# Made for Gradescope's default base image: Ubuntu 22.04 (Configure Autograder > Base Image:
# OS Ubuntu, Version 22.04, Variant Base). Its python3 is 3.10, and requirements.txt pins
# packages that need 3.11, so this takes Ubuntu 22.04's own python3.11 package (jammy-updates,
# universe) from apt. On an image where no Python 3.11+ can be had it stops, in one line, before
# it installs anything of the kit's.
set -euo pipefail
AUTOGRADER="${CH34_HOSTED_ROOT:-}/autograder"  # CH34_HOSTED_ROOT: a test's stand-in for /
die() { echo "setup.sh: error: $*" >&2; exit 1; }

apt=0
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then apt=1; fi
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
[ "$apt" = 0 ] || apt-get update -qq

# The newest python on PATH that is at least 3.11.0 final: for pip a pre-release of 3.11 is
# below the pins' Requires-Python >=3.11, so a 3.11 release candidate counts as too old.
recent_python() {
  local name path
  for name in python3.13 python3.12 python3.11 python3; do
    path="$(command -v "$name" 2>/dev/null)" || continue
    "$path" -c 'import sys; sys.exit(sys.version_info[:4] < (3, 11, 0, "final"))' 2>/dev/null &&
      { echo "$path"; return 0; }
  done
  return 1
}
if ! PYTHON="$(recent_python)"; then
  [ "$apt" = 0 ] || apt_install python3.11 python3.11-venv || true
  PYTHON="$(recent_python)" || die "the kit needs Python 3.11 or newer (requirements.txt) and this image has $(python3 --version 2>&1 || echo 'no python3') and no python3.11 package: choose the base image Ubuntu 22.04 (Configure Autograder > Base Image) or one with Python 3.11+"
fi
version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
echo "setup.sh: Python $version ($PYTHON)"
# Debian and Ubuntu keep venv's pip (ensurepip) in a package of its own.
if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
  if [ "$apt" = 0 ] || ! apt_install "python$version-venv"; then
    die "$PYTHON has no ensurepip (venv's pip): install python$version-venv"
  fi
fi
# bubblewrap: the sandbox of the learner's code (docs/sandbox.md); without it the kit grades
# unsandboxed and says so in every result.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$apt" = 1 ]; then apt_install bubblewrap; else echo "setup.sh: warning: no bubblewrap (bwrap): the learner's code will run unsandboxed" >&2; fi
fi

"$PYTHON" -m venv "$AUTOGRADER/venv"
# torch's CPU wheels: the checks run no GPU code.
"$AUTOGRADER/venv/bin/pip" install --quiet --disable-pip-version-check \
  --extra-index-url https://download.pytorch.org/whl/cpu -r "$AUTOGRADER/source/requirements.txt"
echo "setup.sh: the kit is installed in $AUTOGRADER/venv"
