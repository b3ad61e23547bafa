/* Open MPI with ULFM, without reprise: processes compute in steps while
 * run.sh kills a remote daemon (prted) of the job, with or without its
 * processes, and print when they see the failure, so that run.sh can tell
 * whether the runtime keeps the job alive and how soon the survivors know.
 *
 *   lost_daemon [--node-local] [--shrink-world] [STEPS [SLEEP_MS]]
 *
 * Each step (STEPS, default 150, then SLEEP_MS, default 100) is an
 * MPI_Allreduce on the working communicator, errors returned. When it fails
 * (a member died), the survivors revoke the communicator, shrink it and do
 * the step again on the smaller one.
 *
 * The working communicator is a duplicate of MPI_COMM_WORLD, or with
 * --node-local the processes of this node only (built with
 * MPI_Comm_create_group from Open MPI's local rank and size; ranks are mapped
 * by slot, so a node's ranks are consecutive). Then no MPI message crosses
 * nodes, which run.sh's fake nodes need (README.md: Open MPI 6.0's TCP
 * transport does not connect them), and a failure on another node is seen
 * through MPI_COMM_WORLD: after each step a process acknowledges the failures
 * it knows of (MPIX_Comm_failure_ack, MPIX_Comm_failure_get_acked) and the
 * node's processes take the largest count (MPI_MAX), so that all of them act
 * in the same step. With --shrink-world they then shrink MPI_COMM_WORLD
 * (the survivors agree among themselves) and run an MPI_Allreduce on the result.
 *
 * Output: "[wR] ... wall=T world failed procs now N" when process R first
 * sees N failed processes (T from CLOCK_REALTIME, to compare with the time of
 * the kill), "[wR] FINISHED ..." from each survivor, and "RESULT ..." from
 * rank 0 of the final working communicator. */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int env_int(const char* name) {
  const char* value = getenv(name);
  return value ? atoi(value) : -1;
}

/* This node's processes: Open MPI numbers them OMPI_COMM_WORLD_LOCAL_RANK
 * 0..OMPI_COMM_WORLD_LOCAL_SIZE-1, with consecutive ranks in MPI_COMM_WORLD. */
static MPI_Comm node_comm(int world_rank) {
  int local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
  int local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local_rank < 0 || local_size < 1) {
    fprintf(stderr, "[w%d] no OMPI_COMM_WORLD_LOCAL_RANK/SIZE: not Open MPI?\n", world_rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int range[1][3] = {{world_rank - local_rank, world_rank - local_rank + local_size - 1, 1}};
  MPI_Group world_group;
  MPI_Group group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_range_incl(world_group, 1, range, &group);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 7, &comm);
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "[w%d] MPI_Comm_create_group failed (%d)\n", world_rank, rc);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Group_free(&world_group);
  MPI_Group_free(&group);
  return comm;
}

/* The failed processes of MPI_COMM_WORLD this process knows of, the largest
 * count among the members of comm. */
static int failed_in_world(MPI_Comm comm) {
  MPI_Group failed;
  int count = 0;
  MPIX_Comm_failure_ack(MPI_COMM_WORLD);
  MPIX_Comm_failure_get_acked(MPI_COMM_WORLD, &failed);
  MPI_Group_size(failed, &count);
  MPI_Group_free(&failed);
  int largest = count;
  MPI_Allreduce(&count, &largest, 1, MPI_INT, MPI_MAX, comm);
  return largest;
}

/* Shrinks MPI_COMM_WORLD to its survivors and sums one per member on it. */
static void shrink_world(int world_rank) {
  double start = clock_s(CLOCK_MONOTONIC);
  MPI_Comm shrunk;
  int size = -1;
  int one = 1;
  int sum = -1;
  int allreduce_rc = -1;
  int rc = MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk);
  if (rc == MPI_SUCCESS) {
    MPI_Comm_size(shrunk, &size);
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    allreduce_rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, shrunk);
    MPI_Comm_free(&shrunk);
  }
  printf("[w%d] shrink(MPI_COMM_WORLD) rc=%d -> size %d in %.3fs; Allreduce on it rc=%d sum=%d\n", world_rank, rc, size,
         clock_s(CLOCK_MONOTONIC) - start, allreduce_rc, sum);
  fflush(stdout);
}

/* After a failed step: revokes `comm`, shrinks it and frees it; returns the
 * smaller communicator. */
static MPI_Comm revoke_and_shrink(MPI_Comm comm, int rc, int world_rank, double at) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  int error_class = 0;
  MPI_Error_class(rc, &error_class);
  MPI_Error_string(rc, text, &length);
  printf("[w%d] t=%.2fs Allreduce error class %d (%s) -> revoke+shrink\n", world_rank, at, error_class, text);
  fflush(stdout);
  MPIX_Comm_revoke(comm);
  double shrink_start = clock_s(CLOCK_MONOTONIC);
  MPI_Comm smaller;
  if (MPIX_Comm_shrink(comm, &smaller) != MPI_SUCCESS) {
    printf("[w%d] shrink failed\n", world_rank);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Comm_free(&comm);
  MPI_Comm_set_errhandler(smaller, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(smaller, &size);
  printf("[w%d] shrunk to %d ranks in %.3fs\n", world_rank, size, clock_s(CLOCK_MONOTONIC) - shrink_start);
  fflush(stdout);
  return smaller;
}

/* The command line: [--node-local] [--shrink-world] [STEPS [SLEEP_MS]]. */
struct options {
  int node_local;
  int shrink_world_too;
  int steps;
  int sleep_ms;
};

static struct options parse_options(int argc, char** argv) {
  struct options chosen = {0, 0, 150, 100};
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--node-local") == 0) {
      chosen.node_local = 1;
    } else if (strcmp(argv[i], "--shrink-world") == 0) {
      chosen.shrink_world_too = 1;
    } else if (positional++ == 0) {
      chosen.steps = atoi(argv[i]);
    } else {
      chosen.sleep_ms = atoi(argv[i]);
    }
  }
  return chosen;
}

int main(int argc, char** argv) {
  const struct options chosen = parse_options(argc, argv);
  const int node_local = chosen.node_local;
  const int shrink_world_too = chosen.shrink_world_too;
  const int steps = chosen.steps;
  const int sleep_ms = chosen.sleep_ms;
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  int world_size = 0;
  char host[256] = "";
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  gethostname(host, sizeof host - 1);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm comm = MPI_COMM_NULL;
  if (node_local) {
    comm = node_comm(world_rank);
  } else {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  printf("[w%d] pid %d host %s start (size %d)\n", world_rank, (int)getpid(), host, world_size);
  fflush(stdout);

  int shrinks = 0;
  int failed_seen = 0;
  double start = clock_s(CLOCK_MONOTONIC);
  for (int step = 0; step < steps; ++step) {
    int one = 1;
    int sum = 0;
    int rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
    if (rc != MPI_SUCCESS) {
      comm = revoke_and_shrink(comm, rc, world_rank, clock_s(CLOCK_MONOTONIC) - start);
      ++shrinks;
      --step; /* the same step again */
      continue;
    }
    if (node_local) {
      int failed = failed_in_world(comm);
      if (failed != failed_seen) {
        printf("[w%d] it %d t=%.2fs wall=%.3f world failed procs now %d\n", world_rank, step,
               clock_s(CLOCK_MONOTONIC) - start, clock_s(CLOCK_REALTIME), failed);
        fflush(stdout);
        failed_seen = failed;
        if (shrink_world_too) shrink_world(world_rank);
      }
    }
    if (step % 50 == 0 && world_rank == 0) {
      printf("[w0] it %d sum %d t=%.2fs\n", step, sum, clock_s(CLOCK_MONOTONIC) - start);
      fflush(stdout);
    }
    usleep((useconds_t)sleep_ms * 1000);
  }

  int rank = 0;
  int size = 0;
  int one = 1;
  int survivors = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int rc = MPI_Allreduce(&one, &survivors, 1, MPI_INT, MPI_SUM, comm);
  printf("[w%d] FINISHED iters=%d shrinks=%d final_size=%d final_sum=%d rc=%d t=%.2fs\n", world_rank, steps, shrinks,
         size, survivors, rc, clock_s(CLOCK_MONOTONIC) - start);
  if (rank == 0) {
    printf("RESULT%s survivors_finished=%d of %d (w%d)\n", node_local ? "(node-local comm)" : "", survivors, world_size,
           world_rank);
  }
  fflush(stdout);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
