// Asks for MPI_THREAD_MULTIPLE under the message log, which provides
// MPI_THREAD_SERIALIZED (MPI_Init_thread and MPI_Query_thread say so), and
// then runs as usual: every process sends its rank around a ring.

#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int queried = -1;
  MPI_Query_thread(&queried);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int received = -1;
  MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 0, &received, 1, MPI_INT, (rank + size - 1) % size, 0,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  const bool right = provided == MPI_THREAD_SERIALIZED && queried == MPI_THREAD_SERIALIZED &&
                     received == (rank + size - 1) % size;
  std::printf("rank %d: provided %s, ring %s\n", rank, right ? "SERIALIZED" : "something else",
              right ? "RIGHT" : "WRONG");
  MPI_Finalize();
  return right ? 0 : 1;
}
