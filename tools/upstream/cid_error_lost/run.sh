#!/bin/bash
# Compiles cid_error_lost.c with the Open MPI of scripts/bootstrap.sh (.venv)
# and runs it on 4 processes under ULFM for each operation, 20 s at most
# each. Prints what each survivor's call returned and how many of Open MPI's
# NBC_Progress lines it printed; "hung" when the job had to be killed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mpi=$(cd "$here/../../.." && pwd)/.venv/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$mpi/mpicc" -O1 -o "$work/cid_error_lost" "$here/cid_error_lost.c" || exit 1
for operation in dup merge create; do
  echo "== $operation"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 20 \
    "$mpi/mpirun" --with-ft ulfm --oversubscribe -n 4 "$work/cid_error_lost" "$operation" >"$work/out" 2>&1
  status=$?
  grep "returned" "$work/out" | sort
  echo "NBC_Progress lines: $(grep -c NBC_Progress "$work/out")"
  [ "$status" = 124 ] && echo "hung (killed after 20 s)"
done
