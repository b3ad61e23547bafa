/* Started with MPI_Comm_spawn by the message log's tests, outside the log:
   takes one number from each process that started it, sends back twice it,
   and disconnects. */
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) {
    MPI_Finalize();
    return 2;
  }
  int parents = 0;
  MPI_Comm_remote_size(parent, &parents);
  for (int p = 0; p < parents; ++p) {
    long long value = 0;
    MPI_Recv(&value, 1, MPI_LONG_LONG, p, 0, parent, MPI_STATUS_IGNORE);
    value *= 2;
    MPI_Send(&value, 1, MPI_LONG_LONG, p, 1, parent);
  }
  MPI_Comm_disconnect(&parent);
  MPI_Finalize();
  return 0;
}
