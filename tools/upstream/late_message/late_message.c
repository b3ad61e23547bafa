/* A message that arrives after its receiver freed the communicator it was
 * sent on is handed to the next communicator given the same index
 * (README.md). 3 processes, no ULFM needed. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm x, y;
  MPI_Comm_dup(MPI_COMM_WORLD, &x);
  if (rank == 0) MPI_Comm_free(&x);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    int v = 111;
    MPI_Send(&v, 1, MPI_INT, 0, 7, x);
  }
  sleep(1);
  if (rank != 0) MPI_Comm_free(&x);
  MPI_Comm_dup(MPI_COMM_WORLD, &y);
  int v = 0;
  if (rank == 1) {
    v = 222;
    MPI_Send(&v, 1, MPI_INT, 0, 7, y);
  }
  if (rank == 0) {
    MPI_Recv(&v, 1, MPI_INT, 1, 7, y, MPI_STATUS_IGNORE);
    printf("rank 0 received %d on the new communicator (222 was sent on it, 111 on the freed one)\n", v);
  }
  int s = rank, t = 0;
  MPI_Allreduce(&s, &t, 1, MPI_INT, MPI_SUM, y);
  printf("rank %d allreduce %d\n", rank, t);
  MPI_Finalize();
}
