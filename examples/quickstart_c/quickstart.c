#include <reprise/reprise.h>

#include <stdio.h>

/* The quickstart in C: a total kept across failures (REPRISE_FAULTS="2@30" kills original rank 2 at step 30). */
struct job {
  reprise_comm* comm;
  reprise_faults* faults;
  long total;
};

static int step(uint64_t number, void* user) {
  struct job* job = user;
  reprise_faults_apply(job->faults, job->comm, number);
  long one = 1, sum = 0;
  const int rc = MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, reprise_comm_mpi(job->comm));
  const int status = reprise_comm_check(job->comm, rc, "MPI_Allreduce");
  if (status == REPRISE_OK) job->total += sum;
  return status; /* a process failure: the driver recovers and rolls back */
}

int main(int argc, char** argv) {
  struct job job = {0};
  reprise_checkpoint* checkpoint = NULL;
  reprise_driver* driver = NULL;
  const reprise_driver_config config = {.mode = REPRISE_SHRINK, .every_steps = 10};
  if (reprise_init(&argc, &argv) || reprise_comm_world(&job.comm) ||
      reprise_faults_from_env(NULL, reprise_comm_original_size(job.comm), &job.faults) ||
      reprise_checkpoint_create(job.comm, NULL, &checkpoint) ||
      reprise_checkpoint_protect(checkpoint, "total", &job.total, sizeof job.total) ||
      reprise_driver_create(job.comm, checkpoint, &config, &driver) || reprise_driver_run(driver, 100, step, &job)) {
    fprintf(stderr, "quickstart: %s\n", reprise_last_error());
    reprise_finalize(1);
    return 1;
  }
  if (reprise_comm_rank(job.comm) == 0) {
    printf("%d of %d processes finished; total %ld\n", reprise_comm_size(job.comm),
           reprise_comm_original_size(job.comm), job.total);
  }
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
  reprise_faults_free(job.faults);
  reprise_comm_free(job.comm);
  return reprise_finalize(0) == REPRISE_OK ? 0 : 1;
}
