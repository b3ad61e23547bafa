#!/bin/bash
# Compiles revoke_activating.c with the Open MPI of scripts/bootstrap.sh
# (.venv) and runs it on 4 processes under ULFM, 30 s at most. Prints what
# each survivor's merge returned and how many processes died of SIGSEGV.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mpi=$(cd "$here/../../.." && pwd)/.venv/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# -rdynamic: libmpi must find the program's ompi_comm_activate first.
"$mpi/mpicc" -O1 -rdynamic -o "$work/revoke_activating" "$here/revoke_activating.c" -ldl || exit 1
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 30 \
  "$mpi/mpirun" --with-ft ulfm --oversubscribe -n 4 "$work/revoke_activating" >"$work/out" 2>&1
status=$?
grep "returned" "$work/out" | sort
echo "SIGSEGV: $(grep -c "Segmentation fault" "$work/out")"
grep -m1 "ompi_comm_revoke_local" "$work/out"
[ "$status" = 124 ] && echo "hung (killed after 30 s)"
exit 0
