#include <reprise/reprise.h>
#include <stdio.h>

/* The quickstart in C: a total kept across failures (REPRISE_FAULTS="2@30" kills original rank 2 at step 30). */
static long total;

static int step(const reprise_run_step* now) {
  long processes = 1;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &processes, 1, MPI_LONG, MPI_SUM, now->mpi);
  total += processes; /* after a failure the driver recovers and rolls total back */
  return reprise_comm_check(now->comm, rc, "MPI_Allreduce");
}

static int finish(const reprise_run_step* end) {
  printf("process %d: total %ld\n", reprise_comm_original_rank(end->comm), total);
  return 0;
}

int main(int argc, char** argv) {
  const reprise_run_config run = {.state = &total,
                                  .bytes = sizeof total,
                                  .steps = 100,
                                  .step = step,
                                  .finish = finish,
                                  .driver = {.mode = REPRISE_SHRINK, .every_steps = 10, .inject_faults = 1}};
  return reprise_run(&argc, &argv, &run); /* MPI, a checkpoint of total, the driver, finish, the end */
}
