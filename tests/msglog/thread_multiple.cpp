// Asks for MPI_THREAD_MULTIPLE under the message log, which must refuse it
// with a line naming MPI_Init_thread and end the job; "NOT REFUSED" means
// it went on (the test fails on that line).

#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  std::printf("NOT REFUSED\n");
  MPI_Finalize();
  return 0;
}
