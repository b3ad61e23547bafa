#!/bin/bash
# Compiles era_inter_index.c with the Open MPI of scripts/bootstrap.sh (.venv)
# and runs it on 2 processes under ULFM, as it is and with the workaround
# (wait-first). Prints each run's verdict; the first says LOST every time.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mpi=$(cd "$here/../../.." && pwd)/.venv/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$mpi/mpicc" -O1 -o "$work/era_inter_index" "$here/era_inter_index.c" || exit 1
for mode in "" wait-first; do
  echo "== era_inter_index ${mode:-(as it is)}"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 \
    "$mpi/mpirun" --with-ft ulfm --oversubscribe -n 2 "$work/era_inter_index" $mode 2>&1 | grep -E "received|LOST"
done
