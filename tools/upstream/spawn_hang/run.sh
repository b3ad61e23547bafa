#!/bin/bash
# Runs spawn_hang N times with P processes (defaults 100 and 10) and counts
# the jobs in which MPI_Comm_spawn never returned. Needs the Open MPI of
# scripts/bootstrap.sh (.venv); load the machine (e.g. `make test` beside it)
# to see the hang: about 1 job in 25 here, none on an idle machine.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mpi=$(cd "$here/../../.." && pwd)/.venv/bin
runs=${1:-100}
procs=${2:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$mpi/mpicc" -O1 -o "$work/spawn_hang" "$here/spawn_hang.c" || exit 1
hung=0
for i in $(seq 1 "$runs"); do
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 \
    "$mpi/mpirun" --with-ft ulfm --prtemca state_base_recoverable 1 --oversubscribe --mca coll ^han \
    -n "$procs" "$work/spawn_hang" > "$work/out" 2>&1
  if ! grep -q "^spawned" "$work/out"; then
    hung=$((hung + 1))
    echo "run $i: MPI_Comm_spawn did not return within 60 s"
  fi
done
echo "$hung of $runs runs hung"
