#include <reprise/reprise.h>
#include <stdio.h>

/* The quickstart in C: a total kept across failures (REPRISE_FAULTS="2@30" kills original rank 2 at step 30). */
static long total;

static int step(uint64_t number, void* comm) {
  (void)number;
  long one = 1, sum = 0;
  const int rc = MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, reprise_comm_mpi(comm));
  total += sum; /* after a failure the driver recovers and rolls total back */
  return reprise_comm_check(comm, rc, "MPI_Allreduce");
}

int main(int argc, char** argv) {
  reprise_comm* comm = NULL;
  reprise_checkpoint* checkpoint = NULL;
  reprise_driver* driver = NULL;
  const reprise_driver_config config = {.mode = REPRISE_SHRINK, .every_steps = 10, .inject_faults = 1};
  const int failed = reprise_init(&argc, &argv) || reprise_comm_world(&comm) ||
                     reprise_checkpoint_create(comm, NULL, &checkpoint) ||
                     reprise_checkpoint_protect(checkpoint, "total", &total, sizeof total) ||
                     reprise_driver_create(comm, checkpoint, &config, &driver) ||
                     reprise_driver_run(driver, 100, step, comm);
  if (!failed && reprise_comm_rank(comm) == 0) {
    printf("%d of %d processes finished; total %ld\n", reprise_comm_size(comm), reprise_comm_original_size(comm),
           total);
  }
  return reprise_end(failed); /* prints the failed call's error in one line and finalises */
}
