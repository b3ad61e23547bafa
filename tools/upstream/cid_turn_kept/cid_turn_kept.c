/* A communicator creation that fails keeps Open MPI's turn to pick an index:
 * every later creation on a communicator of higher index waits forever
 * (README.md). 4 processes under ULFM; the last one dies. */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm a, b, c;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  MPI_Comm_set_errhandler(a, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &b);
  MPI_Comm_set_errhandler(b, MPI_ERRORS_RETURN);
  if (rank == 2) raise(SIGKILL);
  sleep(1);
  int rc = MPI_Comm_dup(a, &c);
  printf("rank %d: dup(a) rc=%d\n", rank, rc);
  fflush(stdout);
  MPI_Comm s;
  rc = MPIX_Comm_shrink(b, &s);
  printf("rank %d: shrink(b) rc=%d\n", rank, rc);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
