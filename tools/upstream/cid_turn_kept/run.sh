#!/bin/bash
# Compiles cid_turn_kept.c with the Open MPI of scripts/bootstrap.sh (.venv)
# and runs it on 4 processes under ULFM, 20 s at most; "hung" when the
# shrink after the failed copy never returned.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mpi=$(cd "$here/../../.." && pwd)/.venv/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$mpi/mpicc" -O1 -o "$work/cid_turn_kept" "$here/cid_turn_kept.c" || exit 1
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 20 \
  "$mpi/mpirun" --with-ft ulfm --oversubscribe -n 4 "$work/cid_turn_kept" >"$work/out" 2>&1
status=$?
grep "rc=" "$work/out" | sort
[ "$status" = 124 ] && echo "hung (killed after 20 s)"
