/* After MPIX_Comm_agree on an intercommunicator, Open MPI 5.0 (ULFM) drops
 * the intercommunicator's entry from its table of communicator indices while
 * the intercommunicator lives on. If something still holds it after
 * MPI_Comm_free (here: a send request not yet completed), its later
 * destruction clears the entry of the communicator that took the index in
 * between, and messages to that communicator are never matched.
 *
 * Two parents spawn one child (this same program), rank 0 sends it a word
 * without waiting, all merge and agree on the intercommunicator, the parents
 * free it and duplicate MPI_COMM_WORLD twice (`first`, `fresh`), then rank 0 completes
 * the send. Rank 1 then sends a message to rank 0 on `fresh`: rank 0 waits 5 s
 * for it. Prints "received" or "LOST". With the argument `wait-first`, rank 0
 * completes the send before it frees the intercommunicator (the workaround):
 * the message arrives. */
#include <string.h>
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm parent;
  MPI_Comm_get_parent(&parent);
  int word = 1, flag = 1;
  MPI_Comm merged;
  if (parent != MPI_COMM_NULL) { /* the child */
    MPI_Recv(&word, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
    MPI_Intercomm_merge(parent, 1, &merged);
    MPIX_Comm_agree(parent, &flag);
    MPI_Comm_free(&parent);
    MPI_Comm_free(&merged);
    MPI_Finalize();
    return 0;
  }
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm inter;
  MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
  MPI_Request told = MPI_REQUEST_NULL;
  if (rank == 0) MPI_Isend(&word, 1, MPI_INT, 0, 0, inter, &told);
  MPI_Intercomm_merge(inter, 0, &merged);
  MPIX_Comm_agree(inter, &flag);
  if (argc > 1 && strcmp(argv[1], "wait-first") == 0) MPI_Wait(&told, MPI_STATUS_IGNORE);
  MPI_Comm_free(&inter); /* without wait-first, the send still holds it on rank 0 */
  /* The first duplicate takes the index of the intercommunicator's local
   * communicator (freed with it), the second the intercommunicator's own. */
  MPI_Comm first, fresh;
  MPI_Comm_dup(MPI_COMM_WORLD, &first);
  MPI_Comm_dup(MPI_COMM_WORLD, &fresh);
  MPI_Wait(&told, MPI_STATUS_IGNORE); /* destroys the intercommunicator: clears fresh's entry */
  int payload = 42, got = 0, arrived = 0;
  if (rank == 1) {
    MPI_Send(&payload, 1, MPI_INT, 0, 7, fresh);
  } else {
    MPI_Request request;
    MPI_Irecv(&got, 1, MPI_INT, 1, 7, fresh, &request);
    double start = MPI_Wtime();
    while (!arrived && MPI_Wtime() - start < 5.0) MPI_Test(&request, &arrived, MPI_STATUS_IGNORE);
    printf("%s\n", arrived ? "received: the message on the new communicator arrived"
                           : "LOST: the message on the new communicator never arrived (5 s)");
    fflush(stdout);
    if (!arrived) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm_free(&fresh);
  MPI_Comm_free(&first);
  MPI_Comm_free(&merged);
  MPI_Finalize();
  return 0;
}
