"""Type hints of the package reprise (the module reprise._reprise and the Python part)."""

from os import PathLike
from typing import Any, Callable, Iterable, NoReturn, Sequence

import numpy as np
import numpy.typing as npt
from mpi4py import MPI as MPI

from . import inject as inject

## The version of the library the package runs with, "major.minor.patch" (e.g. "0.1.0").
__version__: str

class Error(RuntimeError):
    """Base of every reprise error; mpi_error_class is the MPI error class behind it."""
    mpi_error_class: int

class CommFailure(Error):
    """The communicator cannot go on as it is (ProcessFailed or Revoked)."""

class ProcessFailed(CommFailure):
    """Processes of the communicator died; failed lists their original ranks."""
    failed: list[int]

class Revoked(CommFailure):
    """Another process revoked the communicator, usually after it saw a failure."""

class DataLost(Error):
    """Every copy of some data is gone: lost names the block ranges (begin, end), lost_processes the original
    ranks whose saved state is gone."""
    lost: list[tuple[int, int]]
    lost_processes: list[int]

class IoError(Error):
    """The system refused a file operation; system_error is its errno."""
    system_error: int

class CorruptData(Error):
    """Saved data that cannot be read back (damaged, truncated, another format)."""

class UsageError(Error):
    """A wrong call; the message says what was wrong and what to pass."""

class Timeout(Error):
    """reprise gave up waiting for every process to call a collective operation (within join_timeout_seconds);
    the communicator is revoked, no process failed."""

class OutOfMemory(Error):
    """A process could not allocate what a collective operation needs there (a Store's copies); raised on every
    process, naming it; nothing changed."""

class MpiError(Error):
    """Any other error MPI reported."""

class State:
    """Python values protected by a Checkpoint: set them as attributes (pickled, so keep numbers, strings and
    small containers here, and arrays as protected arrays)."""
    def __init__(self, **values: Any) -> None:
        """A State holding values as its attributes: State(step=0, total=0.0)."""
    def __getattr__(self, name: str) -> Any:
        """The value named name; a restore sets it back to what it was at the checkpoint."""
    def __setattr__(self, name: str, value: Any) -> None:
        """Sets the value named name; the next checkpoint saves it."""

def exit(status: object = None) -> NoReturn:
    """Ends the program with status as sys.exit does (which reprise replaces by this), and tells the
    launcher: a non-zero status records the process as failed."""

class Comm:
    """A communicator that knows who its members were at the start of the job, raises ProcessFailed or Revoked
    when members die, and heals by shrink() or respawn()."""
    @staticmethod
    def world() -> Comm:
        """The job's communicator. In a process spawned to replace a failed one, this joins the survivors and
        returns the healed communicator, in which the process holds its predecessor's original rank."""
    @staticmethod
    def fault_tolerant() -> bool:
        """True if MPI has ULFM and the job was started with it (reprise-run does)."""
    @property
    def rank(self) -> int:
        """This process's position in the communicator now."""
    @property
    def size(self) -> int:
        """Number of processes now."""
    @property
    def original_size(self) -> int:
        """Number of processes the job started with."""
    @property
    def original_rank(self) -> int:
        """This process's rank at the start of the job (a replacement takes its predecessor's)."""
    @property
    def members(self) -> list[int]:
        """The original rank of every member, by current rank."""
    def missing(self) -> list[int]:
        """Original ranks that are no longer members (lost and not replaced)."""
    @property
    def failed(self) -> list[int]:
        """Every original rank whose process has failed so far, sorted."""
    @property
    def epoch(self) -> int:
        """How many recoveries led to this communicator."""
    @property
    def is_replacement(self) -> bool:
        """True in a process spawned (or taken from the spares) to replace a failed one."""
    @property
    def migrated_in(self) -> bool:
        """True in a process started by a live migration (Migration.arrive() comes next); such a process is a
        replacement too."""
    def rank_of(self, original_rank: int) -> int | None:
        """Current rank of an original rank, or None if that process is gone."""
    @property
    def mpi(self) -> MPI.Intracomm:
        """The communicator now, as an mpi4py MPI.Intracomm (a new one after each shrink or respawn: take it
        again after a recovery). Its errors are returned, so mpi4py raises MPI.Exception; inside a Driver's step
        that exception recovers like ProcessFailed."""
    @property
    def handle(self) -> int:
        """The MPI_Comm handle now, as an integer (MPI.Comm.fromhandle takes it)."""
    def check(self, code: int, what: str) -> None:
        """Raises the reprise error for an MPI return code of a call on mpi (what names the call)."""
    def barrier(self) -> None:
        """Barrier; raises ProcessFailed or Revoked if a member failed."""
    def revoke(self) -> None:
        """Revokes the communicator: every member's pending and next calls raise."""
    def shrink(self) -> None:
        """Collective over the survivors: replaces this communicator, in place, by one without the failed
        processes."""
    def respawn(self) -> None:
        """Collective over the survivors: replaces this communicator, in place, by one in which new processes
        (this program started again with the same arguments, or spares) hold the failed original ranks."""

class SavedState:
    """The saved state of one process (Checkpoint.fetch, DiskLevel.fetch)."""
    def bytes(self, name: str) -> bytes:
        """The bytes saved under name (numpy.frombuffer(..., dtype) reads an array's)."""
    def values(self, name: str) -> dict[str, Any]:
        """The values of the State saved under name, as a dict."""

class Checkpoint:
    """Coordinated in-memory checkpoints: each process's protected state on itself and on copies - 1 buddies.
    Every process protects the same names in the same order."""
    def __init__(self, comm: Comm, copies: int = 2, join_timeout_seconds: float = 60.0) -> None:
        """Checkpoints on comm, each process's state kept in copies processes (itself included)."""
    def protect(self, name: str, value: npt.NDArray[Any] | bytearray | memoryview | State) -> None:
        """Protects value, restored in place: a writable C-contiguous NumPy array (or any writable buffer:
        bytearray, array.array), kept without a copy (numeric dtypes with their dtype and shape), or a
        reprise.State holding scalars and small objects."""
    def checkpoint(self) -> int:
        """Collective: saves every process's protected state as a new version; returns its number."""
    def restore(self) -> None:
        """Collective: rolls every process back to the last committed version."""
    def fetch(self, original_ranks: Sequence[int]) -> dict[int, SavedState]:
        """Collective, after a restore that followed a shrink: the saved states of those original ranks, by
        rank."""
    def departed(self) -> list[int]:
        """Original ranks in the last commit that are no longer members (after a shrink)."""
    @property
    def version(self) -> int:
        """The last committed version (0: none)."""
    @property
    def held_bytes(self) -> int:
        """Bytes of saved state this process holds (its own and its buddies')."""

class Recovery:
    """What one recovery did, as every process saw it."""
    @property
    def mode(self) -> str:
        """\"respawn\", \"shrink\" or \"replay\"."""
    @property
    def lost(self) -> list[int]:
        """Original ranks lost (replaced, with respawn)."""
    @property
    def epoch(self) -> int:
        """The communicator's epoch afterwards."""
    @property
    def seconds(self) -> float:
        """From catching the failure to the state restored."""
    @property
    def attempts(self) -> int:
        """More than 1 if processes failed during the recovery."""

class Cadence:
    """How often Driver.run(steps, step) checkpoints, and in replay mode how many snapshots it takes between two
    checkpoints. Of the interval, set at most one of every_steps (before every n-th step), every_seconds (about
    every this many seconds of steps) and mtbf_seconds (Young/Daly's interval for this mean time between
    failures); with none set (Cadence(), the Driver's default), about every 10 seconds of steps."""
    every_steps: int
    every_seconds: float
    mtbf_seconds: float
    snapshots_per_interval: int
    def __init__(self, every_steps: int = 0, every_seconds: float = 0.0, mtbf_seconds: float = 0.0,
                 snapshots_per_interval: int = 16) -> None:
        """A cadence; Driver.run(steps, step) raises UsageError if more than one interval is set, the Driver if
        snapshots_per_interval is negative."""

class Driver:
    """Runs the main loop and recovers it from process failures (respawn or shrink), rolling every process back
    to the last checkpoint. The loop takes its progress from protected state (run(steps, step) keeps the step
    counter itself)."""
    def __init__(self, comm: Comm, checkpoint: Checkpoint, mode: str = "respawn", cadence: Cadence = ...,
                 max_recoveries: int = 64, inject_faults: bool = False) -> None:
        """mode: \"respawn\" (replacements take the lost ranks), \"shrink\" (the survivors go on) or \"replay\";
        cadence: for run(steps, step) (by default about every 10 seconds of steps); inject_faults: carry out the
        fault plan in REPRISE_FAULTS (\"2@30\": original rank 2 dies at step 30) before each step of
        run(steps, step), as inject.Schedule.apply would in the step (UsageError here for a malformed plan, a rank
        the job never had or a node fault)."""
    def run(self, steps: int, step: Callable[[int], object]) -> None:
        """Calls step(s) for s from the current step to steps - 1, checkpointing as the cadence says; after a
        failure every process resumes at the step of the last checkpoint."""
    def run(self, loop: Callable[[], object]) -> None:  # type: ignore[no-redef]
        """Calls loop() until it returns; after a failure, recovers, restores and calls it again."""
    def watch(self, heartbeat: Heartbeat) -> None:
        """Restarts heartbeat on the recovered communicator after each recovery."""
    def on_recovery(self, callback: Callable[[Recovery], object]) -> None:
        """Sets callback(recovery), run after each recovery once every process's state is restored (with
        shrink: fetch the departed processes' state there)."""
    @property
    def step(self) -> int:
        """The step run(steps, step) is at."""
    @property
    def recoveries(self) -> list[Recovery]:
        """Every recovery so far, oldest first."""
    @property
    def checkpoints(self) -> int:
        """How many checkpoints run(steps, step) took here (recoveries' not counted)."""

class Heartbeat:
    """Hang detection: each process is watched by the one before it; one silent for timeout_seconds whose kernel
    says it is stopped (frozen) is killed, so that MPI reports it as failed and the Driver recovers. Pass it to
    Driver.watch."""
    def __init__(self, comm: Comm, period_seconds: float = 0.05, timeout_seconds: float = 1.0) -> None:
        """Collective: starts watching on comm (a replacement creates its own where the others did, before
        Driver.run)."""
    def restart(self) -> None:
        """Collective, after a recovery by hand: watches the members anew."""
    @property
    def declared_hung(self) -> list[int]:
        """Original ranks this process declared hung and has not heard from since."""

def protected_array(shape: int | Sequence[int], dtype: npt.DTypeLike = "float64") -> npt.NDArray[Any]:
    """A new zeroed NumPy array in protected memory (page-aligned, whole pages), for
    IncrementalCheckpoint.protect; its memory is released once the array and its views are gone."""

class IncrementalCheckpoint:
    """Asynchronous incremental checkpoints of arrays from protected_array: checkpoint() returns at once and a
    background thread saves only the pages written since the checkpoint before. One per process."""
    def __init__(self, comm: Comm | None = None, directory: str | PathLike[str] | None = None, copies: int = 2,
                 mode: str = "adaptive", keep_versions: int = 0, cow_bytes: int = 16 << 20) -> None:
        """Versions in directory (files of this process's own; keep_versions > 0 merges the oldest), else in the
        memory of copies processes of comm (then checkpoint, wait and restore are collective). mode: \"adaptive\"
        (pages written first saved first), \"address\" or \"sync\". cow_bytes: the copy-on-write buffer for pages
        written while a commit saves them (16 MiB; 0: such a write waits for its page's commit)."""
    def protect(self, array: npt.NDArray[Any]) -> None:
        """Protects an array from protected_array (kept alive); every process that will restore protects the same
        sizes in the same order, before the first checkpoint."""
    def checkpoint(self) -> int:
        """Starts a new version (after the commit before) and returns its number while its pages are saved;
        writing the arrays on is safe."""
    def wait(self) -> dict[str, float]:
        """Waits until the newest version is committed (in memory: safe on other processes); what it did, as a
        dict (version, pages_committed, cow, wait, avoided, after, wait_seconds, commit_seconds)."""
    def restore(self) -> int:
        """Loads the newest complete version into the arrays, in place, and returns its number; a replacement
        gets its predecessor's. Arrays unchanged on an error (UsageError, DataLost, CorruptData)."""
    @property
    def version(self) -> int:
        """The newest version: after construction, the newest the directory holds (0: none), then the newest
        checkpointed or restored."""

class MigrationTimes:
    """What one migration cost, as this process measured it (seconds; a field that does not apply to the process
    is 0)."""
    @property
    def response_s(self) -> float:
        """Request to the new process running again, its state restored (in the new process)."""
    @property
    def evacuation_s(self) -> float:
        """Request to the leaving process free to exit (in the leaving one)."""
    @property
    def image_build_s(self) -> float:
        """Building the image (in the leaving process)."""
    @property
    def image_open_s(self) -> float:
        """Opening the image where it arrived, without copying it (in the new process)."""
    @property
    def receive_s(self) -> float:
        """Receiving the image's large pieces straight into the protected memory (in the new process)."""
    @property
    def restore_s(self) -> float:
        """Checking the image and copying the rest of the state into place (in the new process)."""
    @property
    def image_bytes(self) -> int:
        """Size of the image sent."""
    @property
    def carried_bytes(self) -> int:
        """Of the image: the checkpoint copies the leaving process carried to the new one."""

class MigrationRecord:
    """One migration, as every process that took part saw it."""
    @property
    def moved(self) -> list[int]:
        """The original ranks that moved (in a new process: its own)."""
    @property
    def epoch(self) -> int:
        """The communicator's epoch afterwards."""
    @property
    def version(self) -> int:
        """The committed checkpoint version after the move."""
    @property
    def checkpointed(self) -> bool:
        """The move ended with a new checkpoint."""
    @property
    def copies_carried(self) -> bool:
        """The new processes took over the checkpoint copies their predecessors held."""

class Migration:
    """Moves live processes, with their protected state, to new processes (spares, or spawned as this program
    with the same arguments); nobody rolls back. Create it on every process after the protects and the Driver;
    in a process started by a move (Comm.migrated_in) call arrive() next."""
    def __init__(self, comm: Comm, checkpoint: Checkpoint, hosts: str = "", signal: int = ...) -> None:
        """hosts: where new processes go (comma-separated; empty: $REPRISE_SPAWN_HOSTS, else where Open MPI has
        room); signal: asks the process receiving it to move (SIGUSR1 by default, what reprise-run --migrate
        sends; 0: none)."""
    def request(self, ranks: Sequence[int] | None = None) -> None:
        """Asks that the processes of these original ranks move (None: this process); not collective. The move
        happens at the safe point after the next one. UsageError for a rank the job never had."""
    def poll(self) -> bool:
        """Collective safe point, at the same points on every process (between steps): True if processes moved
        here. A leaving process does not return: it exits."""
    def attach(self, driver: Driver) -> None:
        """Makes driver.run(steps, step) call poll() before every step (the driver keeps this object alive)."""
    def arrive(self) -> None:
        """In a process started by a move, before any other collective call: restores the state its
        predecessor sent and joins the others. UsageError in any other process."""
    def before_leaving(self, callback: Callable[[MigrationTimes], object]) -> None:
        """Sets callback(times), run in a leaving process with its MigrationTimes just before it exits."""
    @property
    def last_times(self) -> MigrationTimes:
        """This process's MigrationTimes of the last migration it took part in."""
    @property
    def history(self) -> list[MigrationRecord]:
        """Every migration this process took part in (MigrationRecord), oldest first."""

class Store:
    """A replicated in-memory block store: fixed-size blocks with global ids, each kept on copies processes;
    after failures any process loads any blocks from the surviving copies."""
    def __init__(self, comm: Comm, block_bytes: int, copies: int = 2, bytes_per_permuted_range: int = 0,
                 seed: int = 0) -> None:
        """A store on comm of blocks of block_bytes bytes, each kept on copies processes."""
    def submit(self, begin: int, end: int, data: Any) -> None:
        """Collective: this process submits blocks begin to end - 1 from data (any C-contiguous buffer of
        exactly their bytes); together the processes cover 0 to N - 1 once."""
    def load(self, ranges: Iterable[tuple[int, int]], dtype: npt.DTypeLike = "uint8") -> npt.NDArray[Any]:
        """Collective: the blocks of ranges [(begin, end), ...] as a new NumPy array, one row per block, of
        dtype (uint8 by default). DataLost for blocks with no copy left."""
    def load_into(self, ranges: Iterable[tuple[int, int]], into: Any) -> None:
        """Collective: loads the blocks of ranges into the writable buffer into, back to back."""
    def heal(self) -> None:
        """Collective, after a shrink or respawn: brings every block back to its number of copies."""
    @property
    def blocks(self) -> int:
        """Total number of blocks submitted."""
    @property
    def lost(self) -> list[tuple[int, int]]:
        """Block ranges (begin, end) of which every copy died since the last submit."""
    @property
    def stored_bytes(self) -> int:
        """Bytes of block copies this process holds."""

class DiskRestart:
    """What DiskLevel.restart() found, the same on every process."""
    @property
    def outcome(self) -> str:
        """\"no_checkpoint\", \"restored\" (same process count: every state is back) or \"redistribute\"
        (another count: fetch and load_blocks what you need)."""
    @property
    def version(self) -> int:
        """The version restarted from."""
    @property
    def old_world_size(self) -> int:
        """Processes of the job that wrote it."""
    @property
    def old_members(self) -> list[int]:
        """Their original ranks, ascending."""
    @property
    def notes(self) -> list[str]:
        """Newer versions passed over, and why."""

class DiskFile:
    """One process's image file in a saved version."""
    @property
    def rank(self) -> int:
        """The process that wrote it."""
    @property
    def path(self) -> PathLike[str]:
        """Where it is (or should be)."""
    @property
    def present(self) -> bool:
        """Whether the file is there."""
    @property
    def bytes(self) -> int:
        """Its size on disk."""
    @property
    def expected_bytes(self) -> int:
        """Its size in the manifest (0 without one)."""

class DiskVersion:
    """One v<version> folder of a disk level's directory."""
    @property
    def version(self) -> int:
        """The checkpoint version it holds."""
    @property
    def manifest(self) -> bool:
        """It has a manifest (without one, its writing never finished)."""
    @property
    def complete(self) -> bool:
        """Its manifest checks out and names files of the right sizes."""
    @property
    def world_size(self) -> int:
        """Processes that wrote it (0 without a manifest)."""
    @property
    def step(self) -> int | None:
        """The application's step at this version (a Driver's step count), from the manifest; None without one or without a Driver."""
    @property
    def files(self) -> list[DiskFile]:
        """Its image files (h5py reads them)."""
    @property
    def problem(self) -> str:
        """Why it is not complete (empty if it is)."""

class DiskLevel:
    """Writes every n-th committed checkpoint version to directory as HDF5 images, and restarts a new job from
    the newest complete one."""
    def __init__(self, comm: Comm, checkpoint: Checkpoint, directory: str | PathLike[str], every: int = 1,
                 keep: int = 2) -> None:
        """Every process, with the same settings; writes from the checkpoint's commits."""
    def restart(self) -> DiskRestart:
        """Collective, at the start of a job, after every protect (and the Driver): loads the newest complete
        version."""
    def fetch(self, old_ranks: Sequence[int]) -> dict[int, SavedState]:
        """After restart(): the saved states of those old processes, by rank."""
    def load_blocks(self, name: str, ranges: Iterable[tuple[int, int]], block_bytes: int,
                    dtype: npt.DTypeLike = "uint8") -> npt.NDArray[Any]:
        """After restart(): blocks of a blocks piece as a NumPy array, one row each."""
    def load_progress(self) -> None:
        """After a restart on another process count: the Driver's step from the old processes."""
    @property
    def last_written(self) -> int:
        """The newest version this object completed on disk."""

def scan_disk_versions(directory: str | PathLike[str]) -> list[DiskVersion]:
    """Lists the versions in a disk level's directory, oldest first (what reprise-images prints), reading only
    manifests and file sizes."""

def verify_disk_version(directory: str | PathLike[str], version: int) -> list[str]:
    """Reads every file of a version and checks it; one line per problem (empty: good)."""
