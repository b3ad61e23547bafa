/* Open MPI 5.0 with ULFM, without reprise: P processes start, all but rank 0
 * die (SIGKILL), rank 0 shrinks and spawns P-1 replacements, which join
 * through MPI_Intercomm_merge, and the job ends. On a loaded machine, now and
 * then one replacement never finishes MPI_Init (it waits in PMIx_Init for the
 * answer to its first request), the others wait for it in MPI_Init's fence,
 * and MPI_Comm_spawn never returns in rank 0. See run.sh and
 * docs/RELIABILITY.md (defect 14). */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) { /* a replacement */
    MPI_Comm merged = MPI_COMM_NULL;
    MPI_Intercomm_merge(parent, 1, &merged);
    MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
    MPI_Barrier(merged);     /* may fail: another replacement may be gone already */
    kill(getpid(), SIGKILL); /* done; rank 0 ends the job */
  }
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) kill(getpid(), SIGKILL);
  /* Rank 0: wait until the runtime has reported every death. */
  for (int failed = 0; failed < size - 1;) {
    MPI_Group group = MPI_GROUP_NULL;
    int flag = 0;
    MPIX_Comm_get_failed(MPI_COMM_WORLD, &group);
    MPI_Group_size(group, &failed);
    MPI_Group_free(&group);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    usleep(1000);
  }
  MPI_Comm alone = MPI_COMM_NULL;
  MPIX_Comm_shrink(MPI_COMM_WORLD, &alone);
  double started = MPI_Wtime();
  MPI_Comm inter = MPI_COMM_NULL;
  MPI_Comm merged = MPI_COMM_NULL;
  MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, size - 1, MPI_INFO_NULL, 0, alone, &inter, MPI_ERRCODES_IGNORE);
  MPI_Intercomm_merge(inter, 0, &merged);
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  printf("spawned %d replacements in %.2f s\n", size - 1, MPI_Wtime() - started);
  fflush(stdout);
  MPI_Barrier(merged);
  MPI_Abort(MPI_COMM_SELF, 0); /* ends the job at once, whatever MPI_Finalize would do after failures */
  return 0;
}
