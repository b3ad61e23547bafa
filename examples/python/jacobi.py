"""Jacobi iterations on a square plate in NumPy, surviving killed processes.

The plate's rows are cut into one strip per process the job starts with;
its top edge is held at 1, the other edges at 0. Every process protects its
strip in place (a NumPy array) and, in a reprise.State, the strips it took
over from processes lost before. REPRISE_FAULTS="1@20,2@45" kills original
ranks 1 and 2 at those iterations (SIGKILL); the Driver rolls everyone back
to the last checkpoint and either respawns the lost processes (--mode
respawn) or lets the survivors take over their strips (--mode shrink). At
the end every process compares the whole plate with a failure-free run of
the same iterations, done here on one process: it must be equal bit for bit.

    scripts/reprise-run -n 4 -- .venv/bin/python examples/python/jacobi.py --mode shrink
"""

import argparse

import numpy as np

import reprise


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("respawn", "shrink"), default="respawn", help="how to recover")
    parser.add_argument("--n", type=int, default=64, help="the plate is n x n points (default 64)")
    parser.add_argument("--iterations", type=int, default=100, help="Jacobi iterations (default 100)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="iterations between checkpoints")
    return parser.parse_args()


def strip_rows(n, strips, index):
    """The rows [first, last) of strip `index` of `strips`."""
    return index * n // strips, (index + 1) * n // strips


def sweep(strips, edges, strip_count, n):
    """One Jacobi sweep of each strip in `strips` (index -> array), in place,
    given the first and last row of every strip in `edges`."""
    top = np.ones(n)
    bottom = np.zeros(n)
    for index, strip in strips.items():
        above = edges[index - 1][1] if index > 0 else top
        below = edges[index + 1][0] if index < strip_count - 1 else bottom
        padded = np.vstack([above, strip, below])
        inner = padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]
        strip[:, 1:-1] = 0.25 * inner


def failure_free(n, strip_count, iterations):
    """The plate after `iterations` sweeps, every strip on this process."""
    strips = {i: np.zeros((np.subtract(*strip_rows(n, strip_count, i)[::-1]), n)) for i in range(strip_count)}
    for _ in range(iterations):
        edges = {i: (s[0].copy(), s[-1].copy()) for i, s in strips.items()}
        sweep(strips, edges, strip_count, n)
    return np.vstack([strips[i] for i in range(strip_count)])


def main():
    options = parse_arguments()
    comm = reprise.Comm.world()
    faults = reprise.inject.Schedule.from_env()
    faults.validate(comm.original_size)
    strip_count, n = comm.original_size, options.n
    first, last = strip_rows(n, strip_count, comm.original_rank)
    strip = np.zeros((last - first, n))
    adopted = reprise.State(strips={})  # index -> array, taken over from processes lost in a shrink
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("strip", strip)
    checkpoint.protect("adopted", adopted)
    driver = reprise.Driver(comm, checkpoint, mode=options.mode,
                            cadence=reprise.Cadence(every_steps=options.checkpoint_every))

    def mine():
        return {comm.original_rank: strip, **adopted.strips}

    def take_over(recovery):
        departed = checkpoint.departed()
        wanted = [rank for k, rank in enumerate(departed) if k % comm.size == comm.rank]
        for rank, saved in checkpoint.fetch(wanted).items():
            rows = np.subtract(*strip_rows(n, strip_count, rank)[::-1])
            adopted.strips[rank] = np.frombuffer(saved.bytes("strip"), dtype=np.float64).reshape(rows, n).copy()
            adopted.strips.update(saved.values("adopted")["strips"])

    def step(s):
        faults.apply(comm.original_rank, s, comm.is_replacement)
        strips = mine()
        edges = {}
        for part in comm.mpi.allgather({i: (a[0].copy(), a[-1].copy()) for i, a in strips.items()}):
            edges.update(part)
        sweep(strips, edges, strip_count, n)

    driver.on_recovery(take_over)
    driver.run(options.iterations, step)
    pieces = {}
    for part in comm.mpi.allgather(mine()):
        pieces.update(part)
    plate = np.vstack([pieces[i] for i in range(strip_count)])
    expected = failure_free(n, strip_count, options.iterations)
    if not np.array_equal(plate, expected):
        wrong = int(np.count_nonzero(plate != expected))
        raise RuntimeError(f"the plate differs from the failure-free run in {wrong} of {plate.size} points")
    if comm.rank == 0:
        lost = sorted({rank for recovery in driver.recoveries for rank in recovery.lost})
        print(f"jacobi: {n}x{n} plate, {options.iterations} iterations, {comm.size} of {strip_count} processes "
              f"at the end ({options.mode}; lost {lost or 'none'}); plate sum {plate.sum():.12f}, "
              f"equal to the failure-free run bit for bit")


if __name__ == "__main__":
    main()
