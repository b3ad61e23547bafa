#!/bin/bash
# Compiles late_message.c with the Open MPI of scripts/bootstrap.sh (.venv)
# and runs it on 3 processes; prints what process 0 received on the new
# communicator.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mpi=$(cd "$here/../../.." && pwd)/.venv/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$mpi/mpicc" -O1 -o "$work/late_message" "$here/late_message.c" || exit 1
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 30 \
  "$mpi/mpirun" --oversubscribe -n 3 "$work/late_message"
