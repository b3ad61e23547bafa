#include <reprise/reprise.h>
#include <stdio.h>

static long sum; /* the state: every checkpoint saves it, a recovery rolls it back */

static int step(const reprise_run_step* now) { /* adds the number of processes of now */
  sum += reprise_comm_size(now->comm);
  return reprise_comm_check(now->comm, MPI_Barrier(now->mpi), "MPI_Barrier"); /* on a failure the driver recovers */
}

static reprise_run_config run = {
    .state = &sum, .bytes = sizeof sum, .steps = 100, .step = step, .driver.inject_faults = 1};

int main(int argc, char** argv) { return reprise_run(&argc, &argv, &run) || printf("sum %ld\n", sum) < 0; }
