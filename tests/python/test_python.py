"""The Python package under real MPI jobs: each test starts jobs.py (or an
example) through the project's launcher (tests/support/reprise-run-strict)
with real SIGKILLs from REPRISE_FAULTS, and checks the exact result.
Run by ctest (tests/python/CMakeLists.txt), which sets PYTHONPATH to the
build's package and REPRISE_MPIRUN to the build's mpirun."""

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import h5py
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "tests" / "support" / "reprise-run-strict"
JOBS = Path(__file__).resolve().parent / "jobs.py"
QUICKSTART = REPO / "examples" / "python" / "quickstart.py"


def launch(processes, arguments, faults="", timeout=60, preload=None):
    """Runs `python arguments...` on `processes` processes (with the library `preload` preloaded); returns
    (exit status, output, seconds)."""
    command = [str(LAUNCHER), "-n", str(processes), "--timeout", str(timeout), "--oversubscribe", "--",
               *(["env", f"LD_PRELOAD={preload}"] if preload else []), sys.executable, *map(str, arguments)]
    environment = dict(os.environ, REPRISE_FAULTS=faults)
    started = time.monotonic()
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout + 30)
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


def quickstart_totals(output):
    """The quickstart's lines: {original rank: total}."""
    return {int(rank): int(total) for rank, total in re.findall(r"^process (\d+): total (\d+)$", output, re.MULTILINE)}


def test_quickstart_respawns_after_a_kill():
    # The driver's defaults: respawn, and a checkpoint about every 10 s, so
    # the kill rolls every process back to the start: 100 steps of 4.
    status, output, _ = launch(4, [QUICKSTART], faults="2@30")
    assert status == 0, output
    assert quickstart_totals(output) == {0: 400, 1: 400, 2: 400, 3: 400}, output
    assert "4 passed, 1 killed on purpose" in output, output


def test_quickstart_respawns_after_two_kills():
    status, output, _ = launch(4, [QUICKSTART], faults="2@30,1@55")
    assert status == 0, output
    assert quickstart_totals(output) == {0: 400, 1: 400, 2: 400, 3: 400}, output
    assert "4 passed, 2 killed on purpose" in output, output


def test_quickstart_shrinks_after_a_kill(tmp_path):
    # Shrinking, a checkpoint every 10 steps: 30 steps of 4 processes, then
    # the 3 survivors roll back to step 30's checkpoint, 70 steps of 3.
    shrinking = tmp_path / "quickstart_shrink.py"
    default = "reprise.Driver(comm, checkpoint, "
    assert default in QUICKSTART.read_text()
    shrinking.write_text(QUICKSTART.read_text().replace(
        default, default + 'mode="shrink", cadence=reprise.Cadence(every_steps=10), '))
    status, output, _ = launch(4, [shrinking], faults="2@30")
    assert status == 0, output
    assert quickstart_totals(output) == {0: 330, 1: 330, 3: 330}, output
    assert "1 killed on purpose" in output, output


def test_the_quickstart_refuses_a_fault_plan_for_a_rank_it_lacks():
    status, output, _ = launch(2, [QUICKSTART], faults="5@3")
    assert status != 0, output
    # The launcher may stop the job as soon as one process has failed.
    assert re.search(r'reprise\[[01]\] error: process #[01] ended with an uncaught reprise\.UsageError: REPRISE_FAULTS="5@3": '
                     r"rank 5 does not exist: the job has 2 processes", output), output


def test_an_exception_in_a_step_ends_every_process_with_one_line():
    status, output, seconds = launch(3, [JOBS, "step_raises"])
    assert status != 0, output
    assert "reprise[1] error: process #1 ended with an uncaught Python ValueError: planned in step 5 (jobs.py:" in output
    for rank in (0, 2):
        assert f"reprise[{rank}] error: process #{rank} ended with an uncaught reprise.Error: reprise::Driver: another process" \
               in output, output
    assert "Traceback" not in output, output
    assert seconds < 30, f"took {seconds:.1f} s"


def test_sys_exit_with_a_status_fails_the_job_and_zero_passes():
    status, output, _ = launch(3, [JOBS, "exits", 3])
    assert status != 0, output
    assert "2 passed" in output and "rank 1" in output and "exit status 3" in output, output
    status, output, _ = launch(3, [JOBS, "exits", 0])
    assert status == 0 and "3 passed" in output, output


def test_a_strided_array_is_refused_in_one_line():
    status, output, _ = launch(1, [JOBS, "bad_protect", "strided"])
    assert status != 0, output
    lines = [line for line in output.splitlines() if line.startswith("reprise[0] error: process #0 ended with")]
    assert len(lines) == 1 and "reprise.UsageError" in lines[0] and "not C-contiguous" in lines[0] \
        and "numpy.ascontiguousarray" in lines[0], output


def test_a_read_only_array_is_refused_in_one_line():
    status, output, _ = launch(1, [JOBS, "bad_protect", "readonly"])
    assert status != 0, output
    assert "reprise.UsageError: reprise.Checkpoint.protect: \"values\" is a read-only ndarray" in output, output


def test_errors_mirror_the_library_and_it_reports_the_projects_version():
    status, output, _ = launch(1, [JOBS, "errors"])
    assert status == 0 and "errors: checked\n" in output, output
    with open(REPO / "pyproject.toml", "rb") as project:
        version = tomllib.load(project)["project"]["version"]
    assert f"version: {version}\n" in output, output


def test_a_checkpoint_called_by_only_some_processes_times_out():
    status, output, _ = launch(2, [JOBS, "timeout"])
    assert status == 0 and output.count("timeout: checked\n") == 2, output


def test_a_submit_one_process_cannot_allocate_is_out_of_memory_everywhere():
    status, output, _ = launch(2, [JOBS, "out_of_memory"])
    assert status == 0 and output.count("out_of_memory: checked\n") == 2, output


def test_reprise_and_mpi4py_share_one_mpi_library():
    status, output, _ = launch(2, [JOBS, "one_libmpi"])
    assert status == 0 and output.count("one_libmpi: libmpi.so.40\n") == 2, output


def test_the_store_loads_every_block_after_a_kill():
    status, output, _ = launch(4, [JOBS, "store", 8], faults="2@2")
    assert status == 0, output
    assert "store: 200 blocks checked on 3 of 4 processes, lost []\n" in output, output


def test_the_disk_level_writes_images_h5py_reads_and_a_new_job_restarts(tmp_path):
    directory = tmp_path / "saved"
    status, output, _ = launch(2, [JOBS, "disk", directory])
    assert status == 0, output
    assert "disk: no_checkpoint 0; steps 10; versions [2, 3] at steps [4, 8]; " in output, output
    with h5py.File(directory / "v3" / "rank1.h5", "r") as image:
        assert image.attrs["step"] == 8 and image.attrs["step"].dtype == np.uint64, image.attrs["step"]
        state = image["state"]
        grid, counts = state["grid"], state["counts"]
        assert grid.dtype.str == "<f8" and grid.shape == (3, 4), (grid.dtype.str, grid.shape)
        assert counts.dtype.str == "<i4" and counts.shape == (5,), (counts.dtype.str, counts.shape)
        # Version 3 is the checkpoint before step 8: steps 0..7 ran.
        assert np.array_equal(grid[()], np.arange(12.0).reshape(3, 4) * 8 + 1), grid[()]
        assert np.array_equal(counts[()], np.full(5, 71, dtype=np.int32)), counts[()]
    status, output, _ = launch(2, [JOBS, "disk", directory])
    assert status == 0, output
    # The restarted run goes on at step 8 and checkpoints there first: version 4.
    assert "disk: restored 3; steps 10; versions [3, 4] at steps [8, 8]; " in output, output


def test_the_guide_shows_the_quickstart_as_it_is():
    guide = (REPO / "docs" / "guide" / "python.md").read_text()
    marker = "<!-- example: examples/python/quickstart.py -->\n```python\n"
    start = guide.index(marker) + len(marker)
    assert guide[start:guide.index("```", start)] == QUICKSTART.read_text()


# Each process's array and State total after migrate()'s 12 steps without any
# failure or move (jobs.migrating_values).
MIGRATED_RESULTS = {
    0: "[132854, 664295, 195733, 727174, 258612, 790053] total 36516661",
    1: "[542515, 73953, 605394, 136832, 668273, 199711] total 36516661",
    2: "[952176, 483614, 15052, 546493, 77931, 609372] total 36516661",
}


@pytest.mark.parametrize("mover, asker, at_step", [(1, 1, 4), (2, 0, 3), (0, -1, 7)],
                         ids=["itself", "by_another", "by_sigusr1"])
def test_a_process_moves_with_its_state(mover, asker, at_step):
    status, output, _ = launch(3, [JOBS, "migrate", mover, asker, at_step])
    assert status == 0, output
    assert "3 passed, 0 killed on purpose, 0 hung, 0 abandoned, 1 migrated, 0 failed" in output, output
    left = re.search(rf"migrate: #{mover} leaves \(pid (\d+)\): image of \d+ bytes, evacuated True\n", output)
    arrived = re.search(rf"migrate: #{mover} runs again in pid (\d+) at step (\d+): image of \d+ bytes, "
                        r"restored True\n", output)
    assert left and arrived and left[1] != arrived[1], output
    # Asked before step at_step, moved at the safe point before the step after the next.
    assert int(arrived[2]) == at_step + 2, output
    for rank, result in MIGRATED_RESULTS.items():
        pid = arrived[1] if rank == mover else r"\d+"
        moves = rf"moves \[\(\[{mover}\], True\)\]"
        assert re.search(rf"migrate: #{rank} checked {re.escape(result)} in pid {pid}, {moves}\n", output), output


def test_a_move_of_a_rank_the_job_lacks_is_refused_in_one_line():
    status, output, _ = launch(3, [JOBS, "migrate", 5, 1, 2])
    assert status != 0, output
    lines = [line for line in output.splitlines() if line.startswith("reprise[1] error: process #1 ended with")]
    assert len(lines) == 1 and lines[0].startswith(
        "reprise[1] error: process #1 ended with an uncaught reprise.UsageError: reprise::Migration::request: original "
        "rank 5 is not in the job (original ranks 0 to 2) (jobs.py:"), output
    assert "0 migrated" in output, output


def test_incremental_checkpoints_in_memory_give_a_replacement_its_array_back():
    status, output, _ = launch(4, [JOBS, "incremental"])
    assert status == 0, output
    for rank in range(4):
        kind = "replacement" if rank == 2 else "survivor"
        assert f"incremental: #{rank} ({kind}) restored version 2, 16384 values checked\n" in output, output
    assert "1 killed on purpose" in output, output


def test_incremental_checkpoints_in_a_directory_restore_in_a_new_run(tmp_path):
    page = os.sysconf("SC_PAGE_SIZE")
    status, output, _ = launch(2, [JOBS, "incremental_directory", tmp_path])
    assert status == 0, output
    for rank in range(2):
        assert f"incremental_directory: #{rank} saved version 2, {4 * 4096 * 8 // 2 // page} pages in the last\n" \
            in output, output
    status, output, _ = launch(2, [JOBS, "incremental_directory", tmp_path])
    assert status == 0, output
    for rank in range(2):
        assert f"incremental_directory: #{rank} restored version 2, 16384 values checked\n" in output, output


def test_the_copy_on_write_buffer_of_incremental_checkpoints_is_set_by_cow_bytes(tmp_path):
    status, output, _ = launch(1, [JOBS, "incremental_cow", tmp_path])
    assert status == 0, output
    assert "incremental_cow: cow_bytes 0: {'cow': 0, " in output, output
    assert "incremental_cow: cow_bytes 16777216: {'cow': " in output, output


def test_the_stubs_the_api_reference_documents_cover_the_package():
    status, output, _ = launch(1, [JOBS, "stubs"])
    assert status == 0, output
    assert "stubs: 0 missing\n" in output, output


def test_the_heartbeat_kills_a_hung_process_and_the_driver_shrinks():
    status, output, _ = launch(4, [JOBS, "heartbeat"], faults="2@5:hang")
    assert status == 0, output
    for rank in (0, 1, 3):
        hung = "[2]" if rank == 1 else "[]"
        assert f"heartbeat: #{rank} total 45 on 3 of 4, lost [[2]], declared hung {hung}\n" in output, output
    assert "3 passed, 0 killed on purpose, 1 hung" in output, output


def test_data_lost_is_raised_with_its_report():
    status, output, _ = launch(3, [JOBS, "data_lost"])
    assert status != 0, output
    # A store's loss is of blocks: no process's checkpointed state is lost.
    assert re.search(r"data_lost: #[02] caught DataLost: lost \[\(8, 16\)\], lost_processes \[\]\n", output), output
    assert re.search(r"reprise\[[02]\] error: process #[02] ended with an uncaught reprise\.DataLost: reprise::Store::load: every "
                     r"copy of blocks \[8, 16\) is gone \(all of their holders failed since the submit\); the other "
                     r"requested blocks were loaded \(jobs\.py:\d+\)\n", output), output
    assert "1 killed on purpose" in output, output


def test_replay_mode_replays_a_killed_process_alone_from_its_last_snapshot():
    # Killed at step 17: the snapshots (16 per interval of 10 steps: one before every step) of steps up to 16
    # reached their holder, which serves the last one.
    status, output, _ = launch(4, [JOBS, "replay", 40, 16], faults="2@17",
                               preload=os.environ["REPRISE_MSGLOG_LIBRARY"])
    assert status == 0, output
    assert re.search(r"replay: 4 processes, 1 recovered by replay, the replacement resumed at step 1[1-7] "
                     r"\(a snapshot\), no survivor ran a step twice, every value: CORRECT\n", output), output
    assert "1 killed on purpose" in output, output


def test_replay_mode_without_snapshots_replays_from_the_checkpoint():
    status, output, _ = launch(4, [JOBS, "replay", 40, 0], faults="2@17", preload=os.environ["REPRISE_MSGLOG_LIBRARY"])
    assert status == 0, output
    assert "replay: 4 processes, 1 recovered by replay, the replacement resumed at step 10 (its checkpoint), no " \
        "survivor ran a step twice, every value: CORRECT\n" in output, output
