/* reprise_run's own errors, each in one line naming the call: run_errors finish (the finish function of
 * original rank 1 returns 5: that process fails, the others pass), run_errors no-step (config->step is NULL:
 * every process fails, naming the call). */
#include <reprise/reprise.h>
#include <string.h>

static long count;

static int step(const reprise_run_step* now) {
  ++count;
  return reprise_comm_check(now->comm, MPI_Barrier(now->mpi), "MPI_Barrier");
}

static int finish(const reprise_run_step* end) { return reprise_comm_original_rank(end->comm) == 1 ? 5 : 0; }

int main(int argc, char** argv) {
  const int no_step = argc > 1 && strcmp(argv[1], "no-step") == 0;
  const reprise_run_config run = {.state = &count,
                                  .bytes = sizeof count,
                                  .steps = 3,
                                  .step = no_step ? NULL : step,
                                  .finish = finish,
                                  .driver = {.every_steps = 1}};
  return reprise_run(&argc, &argv, &run);
}
