"""Real failures on demand (SIGKILL at planned steps), for tests and demos.

``REPRISE_FAULTS="2@30"`` kills original rank 2 at step 30:
``Schedule.from_env().apply(comm.original_rank, step, comm.is_replacement)``.
"""

from ._reprise.inject import Schedule, kill_self

__all__ = ["Schedule", "kill_self"]
