#include <reprise/reprise.h>
#include <stdio.h>

static long sum; /* the state: every checkpoint saves it, a recovery rolls it back */

static int step(const reprise_run_step* now) {
  long processes = 1;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &processes, 1, MPI_LONG, MPI_SUM, now->mpi);
  sum += processes;
  return reprise_comm_check(now->comm, rc, "MPI_Allreduce"); /* on a failure the driver recovers */
}

static int finish(const reprise_run_step* end) {
  return printf("%d processes: sum %ld\n", reprise_comm_size(end->comm), sum) < 0;
}

int main(int argc, char** argv) {
  reprise_run_config run = {
      .state = &sum, .bytes = sizeof sum, .steps = 100, .step = step, .finish = finish, .driver.inject_faults = 1};
  return reprise_run(&argc, &argv, &run);
}
