/* reprise_run's own errors and its end, through the launcher: run_errors finish (the finish function of
 * original rank 1 returns 5: that process fails, the others pass), run_errors no-step (config->step is NULL:
 * every process fails, naming the call), run_errors exit-status (reprise_run returns with MPI still there;
 * main then returns 3 on rank 1, the status its finalisation at exit records), run_errors finalize
 * (reprise_finalize after reprise_run finalises there, before the program prints). */
#include <reprise/reprise.h>
#include <stdio.h>
#include <string.h>

static long count;

static int step(const reprise_run_step* now) {
  ++count;
  return reprise_comm_check(now->comm, MPI_Barrier(now->mpi), "MPI_Barrier");
}

static int finish(const reprise_run_step* end) { return reprise_comm_original_rank(end->comm) == 1 ? 5 : 0; }

/* After a reprise_run that returned 0: main's exit status. */
static int ended(const char* mode) {
  int rank = -1;
  int finalized = 0;
  if (strcmp(mode, "exit-status") != 0 && strcmp(mode, "finalize") != 0) return 0;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) return 1;
  if (strcmp(mode, "exit-status") == 0) return rank == 1 ? 3 : 0;
  if (reprise_finalize(0) != REPRISE_OK || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized == 0) return 1;
  return printf("process #%d: finalised before exit\n", rank) < 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  const reprise_run_config run = {.state = &count,
                                  .bytes = sizeof count,
                                  .steps = 3,
                                  .step = strcmp(mode, "no-step") == 0 ? NULL : step,
                                  .finish = strcmp(mode, "finish") == 0 ? finish : NULL,
                                  .driver = {.every_steps = 1}};
  return reprise_run(&argc, &argv, &run) != 0 ? 1 : ended(mode);
}
