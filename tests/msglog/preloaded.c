/* An MPI program that knows nothing of reprise, run with libreprise_msglog.so
 * in LD_PRELOAD: it finds the counters and the checkpoint mark through dlsym,
 * as a benchmark does, and prints the counters after a ring exchange received
 * from any source, with the bytes the log kept before and after a checkpoint
 * mark (which frees the consumed message). Without the library it prints
 * "no message log". */

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "reprise/msglog.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int value = rank;
  int got = -1;
  MPI_Request request;
  MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, &request);
  MPI_Send(&value, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  /* ISO C has no cast from an object pointer to a function pointer: copy its bits. */
  int (*get_counters)(reprise_msglog_counters*) = NULL;
  void* symbol = dlsym(RTLD_DEFAULT, "reprise_msglog_get_counters");
  if (symbol != NULL) memcpy(&get_counters, &symbol, sizeof symbol);
  int (*mark_checkpoint)(void) = NULL;
  symbol = dlsym(RTLD_DEFAULT, "reprise_msglog_mark_checkpoint");
  if (symbol != NULL) memcpy(&mark_checkpoint, &symbol, sizeof symbol);
  reprise_msglog_counters counters;
  reprise_msglog_counters after;
  if (get_counters == NULL || mark_checkpoint == NULL || get_counters(&counters) != 0) {
    printf("rank %d: no message log\n", rank);
  } else if (mark_checkpoint() != 0 || get_counters(&after) != 0) {
    printf("rank %d: the checkpoint mark failed\n", rank);
  } else {
    printf(
        "rank %d: got %d, sent %llu received %llu logged %llu bytes %llu matching %llu delivery %llu, kept %llu then "
        "%llu\n",
        rank, got, (unsigned long long)counters.messages_sent, (unsigned long long)counters.messages_received,
        (unsigned long long)counters.messages_logged, (unsigned long long)counters.bytes_logged,
        (unsigned long long)counters.events_matching, (unsigned long long)counters.events_delivery,
        (unsigned long long)counters.log_bytes_now, (unsigned long long)after.log_bytes_now);
  }
  MPI_Finalize();
  return 0;
}
