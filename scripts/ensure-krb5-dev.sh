#!/usr/bin/env bash
# Installs what pip needs to build the gssapi package (python-gssapi: the batch path's Kerberos,
# mirror_core/wire/kerberos.py) before `make install` runs pip: PyPI has no Linux wheel of it, and its sdist
# asks `krb5-config` (Debian: libkrb5-dev) for MIT Kerberos's headers and libraries and compiles a C
# extension. A no-op (a fraction of a second) when all of it is there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${MIRROR_CORE_PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3

missing=()
command -v krb5-config >/dev/null 2>&1 || missing+=(libkrb5-dev)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
# Python.h: a pyenv/python.org interpreter ships its own; Debian's python3 needs python3-dev.
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -z "$PYINC" ] || [ -f "$PYINC/Python.h" ] || missing+=(python3-dev)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-krb5-dev: pip needs these Debian packages to build gssapi; install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "ensure-krb5-dev: installing ${missing[*]} (to build the gssapi package)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
