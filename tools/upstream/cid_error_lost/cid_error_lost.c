/* A communicator's creation that meets a dead process never returns in
 * Open MPI 5.0.x (see README.md). 4 processes: two halves joined by an
 * intercommunicator; the last process kills itself; the others then call
 * the operation named by argv[1] with MPI_ERRORS_RETURN and print what it
 * returned. ULFM promises MPI_ERR_PROC_FAILED; merge and create hang. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int run(const char* operation, int color, int remote_leader, MPI_Comm half, MPI_Comm inter) {
  MPI_Comm created = MPI_COMM_NULL;
  if (strcmp(operation, "merge") == 0) return MPI_Intercomm_merge(inter, color, &created);
  if (strcmp(operation, "create") == 0)
    return MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, remote_leader, 2, &created);
  return MPI_Comm_dup(MPI_COMM_WORLD, &created);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int color = rank < size / 2 ? 0 : 1;
  const int remote_leader = color == 0 ? size / 2 : 0;
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm inter = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, remote_leader, 1, &inter);
  MPI_Comm_set_errhandler(half, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == size - 1) raise(SIGKILL);
  sleep(1); /* the failure is known everywhere before the creation starts */
  const double start = MPI_Wtime();
  const char* operation = argc > 1 ? argv[1] : "merge";
  const int rc = run(operation, color, remote_leader, half, inter);
  printf("rank %d: %s returned %d after %.2f s\n", rank, operation, rc, MPI_Wtime() - start);
  fflush(stdout);
  _exit(0); /* not MPI_Finalize: under ULFM it waits for every process */
}
