"""The Python package's overhead: one checkpoint of the same NumPy array
called from Python (reprise.Checkpoint.checkpoint) and timed in C++ around
the same C++ call (Checkpoint._timed_checkpoint), in the same job,
interleaved, with a NumPy copy of the bytes each process receives as the
limit. bench/bindings_bench.cpp measures the C interface the same way.

    PYTHONPATH=build/release/python reprise-run -n 4 -- .venv/bin/python bench/bindings_bench.py [--mib 1,16,64] [--repeats 15]

One JSON object per size: {"bench":"bindings","api":"python",...}.
"""
import argparse
import json
import statistics
import time

import numpy as np

import reprise
from mpi4py import MPI


def slowest(comm, seconds):
    """The time of a collective step: as long as the slowest process took."""
    return comm.mpi.allreduce(seconds, op=MPI.MAX)


def timed(comm, call):
    comm.mpi.Barrier()
    started = time.perf_counter()
    call()
    return slowest(comm, time.perf_counter() - started)


def measure(comm, mib, repeats):
    state = np.full(mib << 20, 3, dtype=np.uint8)
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("state", state)
    source, target = np.ones_like(state), np.empty_like(state)
    python, cxx, copy = [], [], []
    def from_cxx():
        comm.mpi.Barrier()
        cxx.append(slowest(comm, checkpoint._timed_checkpoint()))

    for repeat in range(repeats):
        # Each goes first in every other repeat: neither gains from the order.
        if repeat % 2 == 1:
            from_cxx()
        python.append(timed(comm, checkpoint.checkpoint))
        if repeat % 2 == 0:
            from_cxx()
        copy.append(timed(comm, lambda: np.copyto(target, source)))
    python_s, cxx_s = statistics.median(python), statistics.median(cxx)
    if comm.rank == 0:
        print(json.dumps({"bench": "bindings", "api": "python", "processes": comm.size, "mib_per_process": mib,
                          "repeats": repeats, "cxx_ms": round(1e3 * cxx_s, 3), "python_ms": round(1e3 * python_s, 3),
                          "python_over_cxx": round(python_s / cxx_s, 4),
                          "memcpy_ms": round(1e3 * statistics.median(copy), 3)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description="times a checkpoint called from Python and from C++")
    parser.add_argument("--mib", default="1,16,64", help="MiB per process, comma-separated (1,16,64)")
    parser.add_argument("--repeats", type=int, default=15, help="checkpoints of each kind per size (15)")
    options = parser.parse_args()
    sizes = [int(item) for item in options.mib.split(",")]
    if options.repeats < 1 or any(size < 1 for size in sizes):
        parser.error("sizes and repeats must be at least 1")
    comm = reprise.Comm.world()
    for mib in sizes:
        measure(comm, mib, options.repeats)


main()
