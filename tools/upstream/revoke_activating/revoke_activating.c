/* Open MPI 5.0.x crashes a process that learns of a failure while it
 * activates a new communicator (see README.md). 4 processes: two halves
 * joined by an intercommunicator, merged. The last process defines
 * ompi_comm_activate, which libmpi calls through its procedure-linkage
 * table: it agreed on the merged communicator's index with the others and
 * kills itself as its activation begins, 1 s later, while the others wait
 * for it in theirs. They print what MPI_Intercomm_merge returned; ULFM
 * promises MPI_ERR_PROC_FAILED. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

static int victim = 0;

int ompi_comm_activate(void** newcomm, void* comm, void* bridge, const void* arg0, const void* arg1, bool send_first,
                       int mode) {
  /* #lizard forgives: Open MPI's signature */
  if (victim) {
    sleep(1); /* every other process reaches its activation */
    raise(SIGKILL);
  }
  int (*original)(void**, void*, void*, const void*, const void*, bool, int) =
      (int (*)(void**, void*, void*, const void*, const void*, bool, int))dlsym(RTLD_NEXT, "ompi_comm_activate");
  return original(newcomm, comm, bridge, arg0, arg1, send_first, mode);
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
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  MPI_Barrier(MPI_COMM_WORLD);
  victim = rank == size - 1;
  const double start = MPI_Wtime();
  MPI_Comm merged = MPI_COMM_NULL;
  const int rc = MPI_Intercomm_merge(inter, color, &merged);
  printf("rank %d: merge returned %d after %.2f s\n", rank, rc, MPI_Wtime() - start);
  fflush(stdout);
  _exit(0); /* not MPI_Finalize: under ULFM it waits for every process */
}
