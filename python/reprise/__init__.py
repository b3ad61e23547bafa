"""reprise for Python: MPI programs that survive killed processes.

Import reprise before mpi4py.MPI: reprise starts MPI itself (through the
library's Environment, as a C++ program's main does), so that a job whose
processes die still ends (MPI_Finalize is watched), the launcher
(scripts/reprise-run) learns how each process ended, and an uncaught error
ends its process with one line and exit status 70 instead of hanging the
others. Communicators are mpi4py's: ``Comm.mpi`` is the current one.
"""

import atexit
import os
import sys

import mpi4py

if "mpi4py.MPI" not in sys.modules:
    # reprise starts and ends MPI; mpi4py only uses it.
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    # mpi4py's fast reductions of Python objects (allreduce, reduce, scan)
    # run point to point on a hidden duplicate of the communicator, which a
    # revoke does not reach: a process whose step raised would leave the
    # others waiting there. Without them they are collectives on the
    # communicator itself.
    mpi4py.rc.fast_reduce = False
from mpi4py import MPI  # noqa: E402  (loads the MPI library for the module below)

from . import _reprise  # noqa: E402
from ._reprise import (  # noqa: E402
    Cadence,
    Checkpoint,
    Comm,
    CommFailure,
    CorruptData,
    DataLost,
    DiskFile,
    DiskLevel,
    DiskRestart,
    DiskVersion,
    Driver,
    Error,
    Heartbeat,
    IncrementalCheckpoint,
    IoError,
    Migration,
    MigrationRecord,
    MigrationTimes,
    MpiError,
    OutOfMemory,
    ProcessFailed,
    Recovery,
    Revoked,
    SavedState,
    Store,
    Timeout,
    UsageError,
    protected_array,
    scan_disk_versions,
    verify_disk_version,
)
from . import inject  # noqa: E402

__version__ = _reprise.__version__

__all__ = [
    "Cadence", "Checkpoint", "Comm", "CommFailure", "CorruptData", "DataLost", "DiskFile", "DiskLevel",
    "DiskRestart", "DiskVersion", "Driver", "Error", "Heartbeat", "IncrementalCheckpoint", "IoError", "MPI",
    "Migration", "MigrationRecord", "MigrationTimes", "MpiError", "OutOfMemory", "ProcessFailed", "Recovery",
    "Revoked", "SavedState", "State", "Store", "Timeout", "UsageError", "exit", "inject", "protected_array",
    "scan_disk_versions", "verify_disk_version",
]


class State:
    """Python values protected by a Checkpoint: set them as attributes.

    ``state = reprise.State(step=0, total=0.0)``, then
    ``checkpoint.protect("state", state)``; a restore sets the attributes
    back to what they were at the checkpoint (pickled, so keep numbers,
    strings and small containers here, and arrays as protected arrays).
    """

    def __init__(self, **values):
        """A State holding values as its attributes: State(step=0, total=0.0)."""
        self.__dict__.update(values)

    def __repr__(self):
        fields = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"State({fields})"


_exit_status = 0
_system_exit = sys.exit


def exit(status=None):
    """Ends the program with ``status`` as sys.exit does (which reprise
    replaces by this), and tells the launcher: a non-zero status records
    the process as failed."""
    global _exit_status
    _exit_status = 0 if status is None else status if isinstance(status, int) else 1
    _system_exit(status)


def _end_on_uncaught(kind, value, traceback):
    """sys.excepthook: one line naming the process and the error (and where
    it was raised), the outcome recorded, exit status 70, instead of a
    traceback and an MPI_Finalize that would wait for the other processes."""
    where = ""
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    if traceback is not None:
        code = traceback.tb_frame.f_code
        where = f" ({os.path.basename(code.co_filename)}:{traceback.tb_lineno})"
    text = f": {value}" if str(value) else ""
    if kind.__module__ == "reprise":
        name = f"reprise.{kind.__qualname__}"
    elif kind.__module__ == "builtins":
        name = f"Python {kind.__qualname__}"
    else:
        name = f"Python {kind.__module__}.{kind.__qualname__}"
    _reprise._end_uncaught(f"an uncaught {name}{text}{where}")


def _finish():
    """At exit: MPI_Finalize under the library's watchdog, then the process
    ends (the interpreter's teardown would free communicators after it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    _reprise._finish(_exit_status)


_reprise._start(sys.argv)
sys.excepthook = _end_on_uncaught
sys.exit = exit
atexit.register(_finish)
