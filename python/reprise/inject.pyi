"""Type hints of reprise.inject."""

from typing import NoReturn

class Schedule:
    """A plan of faults, the same on every process: "RANK@STEP[:hang|:crash],...". Faults apply to the
    processes the job started with, never to replacements."""
    def __init__(self) -> None:
        """A plan of no faults."""
    @staticmethod
    def parse(text: str) -> Schedule:
        """Parses "3@10,5@20:hang"; UsageError on anything malformed."""
    @staticmethod
    def from_env(variable: str = "REPRISE_FAULTS") -> Schedule:
        """The plan in an environment variable (no faults when unset)."""
    @staticmethod
    def random_exact(seed: int, ranks: int, steps: int, count: int, first_rank: int = 0) -> Schedule:
        """Exactly count distinct ranks from [first_rank, ranks) fail at distinct steps in [1, steps)."""
    def validate(self, processes: int) -> None:
        """UsageError if a fault names a rank a job of that many processes lacks."""
    def apply(self, original_rank: int, step: int, is_replacement: bool) -> None:
        """Carries out the fault planned for original_rank at step, if any (a kill: SIGKILL, the process dies
        here), unless this process is a replacement."""
    @property
    def faults(self) -> list[tuple[int, int, str]]:
        """The faults as (rank, step, action), sorted by step then rank."""

def kill_self(original_rank: int) -> NoReturn:
    """Kills this process for real (SIGKILL), after recording it for the launcher."""
