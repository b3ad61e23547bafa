"""The MPI programs of test_python.py: jobs.py CASE [ARGS], one case per
function below, each started by reprise-run with real kills
(REPRISE_FAULTS) and checking what it recovered itself."""

import ast
import inspect
import os
import resource
import signal
import sys
import time

import numpy as np

import reprise
from mpi4py import MPI


def step_raises():
    """Original rank 1 raises ValueError in step 5; every process must end."""
    comm = reprise.Comm.world()
    state = reprise.State(total=0)
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("state", state)
    driver = reprise.Driver(comm, checkpoint, cadence=reprise.Cadence(every_steps=2))

    def step(s):
        if s == 5 and comm.original_rank == 1:
            raise ValueError("planned in step 5")
        state.total += comm.mpi.allreduce(1, op=MPI.SUM)

    driver.run(10, step)


def bad_protect(kind):
    """Protects a strided or read-only array: UsageError, uncaught."""
    comm = reprise.Comm.world()
    checkpoint = reprise.Checkpoint(comm)
    values = np.arange(12.0).reshape(3, 4)
    if kind == "strided":
        checkpoint.protect("values", values[:, ::2])
    else:
        values.flags.writeable = False
        checkpoint.protect("values", values)


def errors():
    """The exception classes, their hierarchy and attributes; the version the library reports."""
    comm = reprise.Comm.world()
    assert issubclass(reprise.ProcessFailed, reprise.CommFailure)
    assert issubclass(reprise.Revoked, reprise.CommFailure)
    for cls in (reprise.CommFailure, reprise.DataLost, reprise.IoError, reprise.CorruptData, reprise.UsageError,
                reprise.Timeout, reprise.OutOfMemory, reprise.MpiError):
        assert issubclass(cls, reprise.Error), cls
    try:
        reprise.Store(comm, block_bytes=0)
        raise AssertionError("a store of 0-byte blocks was accepted")
    except reprise.UsageError as error:
        assert error.mpi_error_class == MPI.ERR_ARG, error.mpi_error_class
    try:
        reprise.inject.Schedule.parse("2@")
        raise AssertionError("a fault without a step was accepted")
    except reprise.UsageError as error:
        assert "2@" in str(error), str(error)
    try:
        reprise.Checkpoint(comm).protect("x", 3.5)
        raise AssertionError("a float was protected")
    except reprise.UsageError as error:
        assert "reprise.State" in str(error) or "NumPy" in str(error), str(error)
    faults = reprise.inject.Schedule.parse("3@10,1@4:hang")
    assert faults.faults == [(1, 4, "hang"), (3, 10, "kill")], faults.faults
    print(f"version: {reprise.__version__}")
    print("errors: checked")


def timeout():
    """Only rank 0 checkpoints: it gives up after the join timeout with Timeout, and the other process finds the
    communicator revoked."""
    comm = reprise.Comm.world()
    checkpoint = reprise.Checkpoint(comm, join_timeout_seconds=0.5)
    checkpoint.protect("state", reprise.State(value=comm.original_rank))
    if comm.rank == 0:
        try:
            checkpoint.checkpoint()
            raise AssertionError("checkpoint() returned without every process")
        except reprise.Timeout as error:
            assert error.mpi_error_class == MPI.ERR_OTHER, error.mpi_error_class
            assert "only some processes" in str(error), str(error)
    else:
        time.sleep(1.5)
        try:
            comm.barrier()
            raise AssertionError("a barrier passed on the revoked communicator")
        except reprise.Revoked:
            pass
    assert checkpoint.version == 0, checkpoint.version
    print("timeout: checked")


def out_of_memory():
    """Process 1 may grow its address space by 8 MiB only, and a second submit needs 16 MiB of copies there:
    OutOfMemory on every process, naming process 1 on the others; the same submit works with the limit lifted."""
    comm = reprise.Comm.world()
    blocks = reprise.Store(comm, block_bytes=1 << 20, copies=2)
    first = comm.original_rank * 8
    mine = np.full(8 << 20, comm.original_rank, dtype=np.uint8)
    blocks.submit(first, first + 8, mine)
    before = resource.getrlimit(resource.RLIMIT_AS)
    if comm.original_rank == 1:
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (8 << 20), before[1]))
    try:
        blocks.submit(first, first + 8, mine)
        raise AssertionError("the submit worked although process 1 could not allocate its copies")
    except reprise.OutOfMemory as error:
        resource.setrlimit(resource.RLIMIT_AS, before)
        assert error.mpi_error_class == MPI.ERR_NO_MEM, error.mpi_error_class
        said = "process 1 cannot allocate the " if comm.original_rank == 1 else "process 1 cannot allocate its copies"
        assert said in str(error), str(error)
    blocks.submit(first, first + 8, mine)
    assert np.array_equal(blocks.load([(first, first + 8)]).ravel(), mine)
    print("out_of_memory: checked")


def store(block_values):
    """Blocks of block_values float64 values, block b holding b * 1000 + j;
    one process killed (REPRISE_FAULTS), the survivors shrink, heal and load
    every block, each value checked."""
    comm = reprise.Comm.world()
    faults = reprise.inject.Schedule.from_env()
    blocks_per_process = 50
    total = blocks_per_process * comm.original_size
    values = np.arange(total * block_values, dtype=np.float64).reshape(total, block_values)
    values = np.floor_divide(values, block_values) * 1000 + np.arange(block_values)
    blocks = reprise.Store(comm, block_bytes=8 * block_values, copies=2)
    first = comm.original_rank * blocks_per_process
    blocks.submit(first, first + blocks_per_process, values[first:first + blocks_per_process])
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("state", reprise.State())
    driver = reprise.Driver(comm, checkpoint, mode="shrink", cadence=reprise.Cadence(every_steps=1))
    driver.on_recovery(lambda recovery: blocks.heal())
    driver.run(4, lambda s: (faults.apply(comm.original_rank, s, comm.is_replacement), comm.barrier()))
    loaded = blocks.load([(0, total)], dtype=np.float64)
    assert loaded.shape == (total, block_values), loaded.shape
    assert np.array_equal(loaded, values), np.argwhere(loaded != values)[:5]
    if comm.rank == 0:
        print(f"store: {total} blocks checked on {comm.size} of {comm.original_size} processes, lost {blocks.lost}")


def disk(directory):
    """Arrays and a State written to disk every checkpoint; a second run of
    the same program restarts from the newest version."""
    comm = reprise.Comm.world()
    grid = np.zeros((3, 4))
    counts = np.zeros(5, dtype=np.int32)
    state = reprise.State(steps=0)
    checkpoint = reprise.Checkpoint(comm)
    for name, value in (("grid", grid), ("counts", counts), ("state", state)):
        checkpoint.protect(name, value)
    driver = reprise.Driver(comm, checkpoint, cadence=reprise.Cadence(every_steps=4))
    level = reprise.DiskLevel(comm, checkpoint, directory, every=1, keep=2)
    restart = level.restart()

    def step(s):
        grid[:] = np.arange(12.0).reshape(3, 4) * (s + 1) + comm.original_rank
        counts[:] = s * 10 + comm.original_rank
        state.steps += 1

    driver.run(10, step)
    if comm.rank == 0:
        versions = reprise.scan_disk_versions(directory)
        newest = versions[-1]
        assert newest.complete and not reprise.verify_disk_version(directory, newest.version), newest.problem
        print(f"disk: {restart.outcome} {restart.version}; steps {state.steps}; versions "
              f"{[v.version for v in versions]} at steps {[v.step for v in versions]}; "
              f"newest files {[str(f.path) for f in newest.files]}")


def exits(status):
    """Original rank 1 ends with sys.exit(status) after the others' last collective."""
    comm = reprise.Comm.world()
    comm.mpi.allreduce(1, op=MPI.SUM)
    if comm.original_rank == 1:
        sys.exit(status)
    print(f"exits: #{comm.original_rank} done")


def migrating_values(rank, steps):
    """Rank rank's array and the State's total after steps steps of migrate(), computed without MPI."""
    arrays = [np.arange(6, dtype=np.int64) + 100 * r for r in range(3)]
    total = 0
    for s in range(steps):
        arrays = [(values * 3 + s + r) % 1_000_003 for r, values in enumerate(arrays)]
        total += sum(int(values.sum()) for values in arrays)
    return arrays[rank], total


def migrate(mover, asker, at_step):
    """3 processes, 12 steps; at step at_step original rank asker asks that
    mover move (itself: request(), or by SIGUSR1 with asker -1). Every
    process checks its array and State against migrating_values, and its
    migration history. A bad mover (one the job lacks) raises UsageError."""
    comm = reprise.Comm.world()
    me = comm.original_rank
    values = np.arange(6, dtype=np.int64) + 100 * me
    state = reprise.State(total=0, steps=0)
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("values", values)
    checkpoint.protect("state", state)
    driver = reprise.Driver(comm, checkpoint, cadence=reprise.Cadence(every_steps=5))
    migration = reprise.Migration(comm, checkpoint)
    migration.attach(driver)
    migration.before_leaving(lambda times: print(
        f"migrate: #{me} leaves (pid {os.getpid()}): image of {times.image_bytes} bytes, "
        f"evacuated {times.evacuation_s > 0}"))
    if comm.migrated_in:
        migration.arrive()
        times = migration.last_times
        print(f"migrate: #{me} runs again in pid {os.getpid()} at step {driver.step}: image of {times.image_bytes} "
              f"bytes, restored {times.response_s > 0}")

    def step(s):
        if s == at_step and me == max(asker, 0) and not comm.migrated_in:
            if asker < 0:
                os.kill(os.getpid(), signal.SIGUSR1)
            else:
                migration.request(None if mover == asker else [mover])
        values[:] = (values * 3 + s + me) % 1_000_003
        state.total += comm.mpi.allreduce(int(values.sum()), op=MPI.SUM)
        state.steps += 1

    driver.run(12, step)
    expected, total = migrating_values(me, 12)
    assert np.array_equal(values, expected), (values, expected)
    assert (state.total, state.steps) == (total, 12), (state, total)
    moves = [(record.moved, record.copies_carried) for record in migration.history]
    assert moves == [([mover], True)], moves
    print(f"migrate: #{me} checked {values.tolist()} total {state.total} in pid {os.getpid()}, moves {moves}")


def one_libmpi():
    """reprise and mpi4py share one MPI library: one libmpi mapped, one
    communicator seen alike by both."""
    comm = reprise.Comm.world()
    with open("/proc/self/maps", encoding="ascii") as maps:
        libraries = sorted({line.split()[-1] for line in maps if "/libmpi." in line})
    assert len(libraries) == 1, libraries
    assert comm.mpi.Get_size() == comm.size and comm.mpi.Get_rank() == comm.rank
    total = comm.mpi.allreduce(comm.rank, op=MPI.SUM)
    assert total == comm.size * (comm.size - 1) // 2, total
    print(f"one_libmpi: {os.path.basename(libraries[0])}")


def incremental_values(rank, version):
    """Original rank rank's protected array as of version: version 1 writes every row, version 2 rows 0 and 2."""
    values = np.arange(4 * 4096, dtype=np.float64).reshape(4, 4096) + rank * 1e6
    if version >= 2:
        values[::2] += 0.5
    return values


def incremental():
    """An array in protected memory checkpointed incrementally into the others' memory (2 copies); original
    rank 2 killed after version 2 (with work after it, lost), the survivors respawn it, and every process, the
    replacement included, restores version 2, every value checked."""
    comm = reprise.Comm.world()
    me, victim = comm.original_rank, 2
    values = reprise.protected_array((4, 4096), dtype=np.float64)
    checkpoint = reprise.IncrementalCheckpoint(comm, copies=2)
    checkpoint.protect(values)
    if not comm.is_replacement:
        values[:] = incremental_values(me, 1)
        assert checkpoint.checkpoint() == 1
        values[::2] += 0.5  # races the commit of version 1
        assert checkpoint.checkpoint() == 2
        stats = checkpoint.wait()
        assert stats["version"] == 2 and stats["pages_committed"] * os.sysconf("SC_PAGE_SIZE") == values.nbytes // 2, \
            stats
        values[:] = -1.0
        if me == victim:
            reprise.inject.kill_self(me)
        try:
            while True:
                comm.barrier()
        except reprise.CommFailure:
            comm.revoke()
            comm.respawn()
    restored = checkpoint.restore()
    assert restored == 2 and checkpoint.version == 2, (restored, checkpoint.version)
    assert np.array_equal(values, incremental_values(me, 2)), np.argwhere(values != incremental_values(me, 2))[:5]
    kind = "replacement" if comm.is_replacement else "survivor"
    print(f"incremental: #{me} ({kind}) restored version {restored}, {values.size} values checked")


def incremental_directory(directory):
    """Incremental checkpoints into a directory of each process's own: a first run saves versions 1 and 2
    (version 2 rewrites rows 0 and 2); a second run of the same program restores version 2 and checks it."""
    comm = reprise.Comm.world()
    me = comm.original_rank
    values = reprise.protected_array((4, 4096), dtype=np.float64)
    checkpoint = reprise.IncrementalCheckpoint(directory=os.path.join(directory, f"rank{me}"), mode="sync")
    checkpoint.protect(values)
    if checkpoint.version == 0:
        values[:] = incremental_values(me, 1)
        checkpoint.checkpoint()
        values[::2] += 0.5
        checkpoint.checkpoint()
        pages = checkpoint.wait()["pages_committed"]
        print(f"incremental_directory: #{me} saved version {checkpoint.version}, {pages} pages in the last")
        return
    restored = checkpoint.restore()
    assert np.array_equal(values, incremental_values(me, 2)), np.argwhere(values != incremental_values(me, 2))[:5]
    print(f"incremental_directory: #{me} restored version {restored}, {values.size} values checked")


def incremental_cow(directory):
    """Every page of an array written, last first, while a commit saves it in address order: with no
    copy-on-write buffer (cow_bytes=0) a write to a page not yet saved waits, none is copied aside; with one
    (16 MiB) such writes are mostly copied aside (how many depends on timing). Either way the version holds the
    array as it was at checkpoint()."""
    page = os.sysconf("SC_PAGE_SIZE")
    for cow_bytes in (0, 16 << 20):
        values = reprise.protected_array((4096, page // 8), dtype=np.float64)  # 4096 pages, one a row
        checkpoint = reprise.IncrementalCheckpoint(directory=os.path.join(directory, f"cow{cow_bytes}"),
                                                   mode="address", cow_bytes=cow_bytes)
        checkpoint.protect(values)
        values[:] = 1.0
        checkpoint.checkpoint()
        for row in range(values.shape[0] - 1, -1, -1):
            values[row, 0] = 2.0
        stats = checkpoint.wait()
        counts = {kind: stats[kind] for kind in ("cow", "wait", "avoided", "after")}
        assert sum(counts.values()) <= values.shape[0], stats
        assert cow_bytes > 0 or counts["cow"] == 0, stats
        assert checkpoint.restore() == 1 and np.all(values == 1.0), np.argwhere(values != 1.0)[:5]
        del checkpoint  # one IncrementalCheckpoint per process at a time
        print(f"incremental_cow: cow_bytes {cow_bytes}: {counts}")


def stubbed_members(node):
    """The names a stub class defines: its methods, properties, attributes and nested classes."""
    return {item.target.id if isinstance(item, ast.AnnAssign) else item.name for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.ClassDef, ast.AnnAssign))}


def public_members(cls):
    """A class's public methods, properties and attributes, and its constructor if it has one of its own."""
    return [name for name, value in vars(cls).items()
            if not name.startswith("_") or (name == "__init__" and not isinstance(value, type(object.__init__)))]


def stubs():
    """Every public class and function of the package (the names of __all__, with their public methods,
    properties and constructors) is in its type stubs (.pyi), which the API reference documents: one line
    per one missing."""
    missing = []
    for module in (reprise, reprise.inject):
        tree = ast.parse(open(os.path.splitext(module.__file__)[0] + ".pyi").read())
        stubbed = {node.name: node for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.ismodule(value):
                continue
            if name not in stubbed:
                missing.append(f"{module.__name__}.{name}")
            elif inspect.isclass(value):
                members = stubbed_members(stubbed[name])
                missing += [f"{module.__name__}.{name}.{member}" for member in public_members(value)
                            if member not in members]
    for name in missing:
        print(f"stubs: {name} is not in the stubs")
    print(f"stubs: {len(missing)} missing")


def heartbeat():
    """REPRISE_FAULTS="2@5:hang": original rank 2 stops (SIGSTOP) before step 5; its watcher (rank 1) declares
    it hung and kills it, and the Driver shrinks and rolls back; the total is that of a run without failure."""
    comm = reprise.Comm.world()
    state = reprise.State(total=0)
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("state", state)
    beat = reprise.Heartbeat(comm, period_seconds=0.05, timeout_seconds=1.0)
    driver = reprise.Driver(comm, checkpoint, mode="shrink", cadence=reprise.Cadence(every_steps=3),
                            inject_faults=True)
    driver.watch(beat)

    def step(s):
        comm.barrier()
        state.total += s

    driver.run(10, step)
    lost = [recovery.lost for recovery in driver.recoveries]
    print(f"heartbeat: #{comm.original_rank} total {state.total} on {comm.size} of {comm.original_size}, "
          f"lost {lost}, declared hung {beat.declared_hung}")


def data_lost():
    """A store of 1 copy: original rank 1 is killed, the survivors shrink and load every block: DataLost on each,
    naming the lost blocks; each prints it, then lets it go uncaught."""
    comm = reprise.Comm.world()
    blocks = reprise.Store(comm, block_bytes=16, copies=1)
    first = comm.original_rank * 8
    blocks.submit(first, first + 8, np.full(8 * 16, comm.original_rank, dtype=np.uint8))
    if comm.original_rank == 1:
        reprise.inject.kill_self(1)
    try:
        while True:
            comm.barrier()
    except reprise.CommFailure:
        comm.revoke()
        comm.shrink()
    try:
        blocks.load([(0, 8 * comm.original_size)])
    except reprise.DataLost as error:
        assert isinstance(error, reprise.Error) and error.mpi_error_class != MPI.SUCCESS, error.mpi_error_class
        print(f"data_lost: #{comm.original_rank} caught {type(error).__name__}: lost {error.lost}, "
              f"lost_processes {error.lost_processes}")
        raise


def ring_next(mine, from_left, total, step):
    """replay()'s next value of a process."""
    return (mine * 31 + from_left * 7 + total + step) % 1_000_000_007


def replay(steps, snapshots):
    """RecoveryMode replay, the message log preloaded: each step every process passes its value around a ring
    (Sendrecv) and adds the sum over all (Allreduce), a checkpoint every 10 steps with `snapshots` snapshots
    between two. A process killed by REPRISE_FAULTS restarts from its last snapshot (or checkpoint) and replays
    from the others' logs; the others never run a step twice. Every value is checked against a serial run, and
    where the replacement resumed is said."""
    comm = reprise.Comm.world()
    value = np.array([comm.original_rank + 1], dtype=np.uint64)
    checkpoint = reprise.Checkpoint(comm)
    checkpoint.protect("value", value)
    driver = reprise.Driver(comm, checkpoint, mode="replay",
                            cadence=reprise.Cadence(every_steps=10, snapshots_per_interval=snapshots),
                            inject_faults=True)
    steps_run, first_step = 0, None

    def step(s):
        nonlocal steps_run, first_step
        steps_run += 1
        first_step = s if first_step is None else first_step
        me, size = comm.rank, comm.size
        from_left, total = np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint64)
        comm.mpi.Sendrecv(value, (me + 1) % size, 0, from_left, (me + size - 1) % size, 0)
        comm.mpi.Allreduce(value, total, op=MPI.SUM)
        value[0] = ring_next(int(value[0]), int(from_left[0]), int(total[0]), s)

    driver.run(steps, step)
    serial = [r + 1 for r in range(comm.size)]
    for s in range(steps):
        total = sum(serial)
        serial = [ring_next(serial[r], serial[r - 1], total, s) for r in range(len(serial))]
    right = np.array([int(value[0]) == serial[comm.rank] and (comm.is_replacement or steps_run == steps)],
                     dtype=np.int32)
    comm.mpi.Allreduce(MPI.IN_PLACE, right, op=MPI.MIN)
    resumed = np.array([first_step if comm.is_replacement and first_step is not None else 0], dtype=np.uint64)
    comm.mpi.Allreduce(MPI.IN_PLACE, resumed, op=MPI.MAX)
    replays = sum(1 for recovery in driver.recoveries if recovery.mode == "replay")
    if comm.rank == 0:
        restart = "its checkpoint" if resumed[0] % 10 == 0 else "a snapshot"
        print(f"replay: {comm.size} processes, {replays} recovered by replay, the replacement resumed at step "
              f"{resumed[0]} ({restart}), no survivor ran a step twice, "
              f"every value: {'CORRECT' if right[0] else 'WRONG'}")


if __name__ == "__main__":
    case, arguments = sys.argv[1], sys.argv[2:]
    cases = {"step_raises": step_raises, "bad_protect": bad_protect, "errors": errors, "timeout": timeout,
             "out_of_memory": out_of_memory,
             "one_libmpi": one_libmpi,
             "store": lambda: store(int(arguments[0])), "disk": lambda: disk(arguments[0]),
             "exits": lambda: exits(int(arguments[0])), "incremental": incremental, "heartbeat": heartbeat,
             "incremental_directory": lambda: incremental_directory(arguments[0]),
             "incremental_cow": lambda: incremental_cow(arguments[0]), "stubs": stubs,
             "data_lost": data_lost, "replay": lambda: replay(int(arguments[0]), int(arguments[1])),
             "migrate": lambda: migrate(*map(int, arguments))}
    if case == "bad_protect":
        bad_protect(arguments[0])
    else:
        cases[case]()
