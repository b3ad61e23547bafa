#pragma once
/** \file
 * The C interface of reprise's message log (libreprise_msglog.so, docs/ARCHITECTURE.md §16):
 * counters any program can read, and checkpoint marks, also through dlsym(RTLD_DEFAULT, name)
 * when the library is preloaded. Fields are only ever added at the end. */

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/** Counters of this process's message log (cumulative since MPI_Init, except the log_bytes ones). */
typedef struct reprise_msglog_counters {
  uint64_t messages_sent;       /**< application point-to-point messages sent */
  uint64_t messages_received;   /**< application receptions completed */
  uint64_t messages_logged;     /**< messages copied into the sender-based log */
  uint64_t bytes_logged;        /**< payload bytes copied into the log */
  uint64_t events_matching;     /**< matching events logged (MPI_ANY_SOURCE receptions) */
  uint64_t events_delivery;     /**< delivery events logged (Test*, Waitany, Waitsome, Iprobe outcomes) */
  uint64_t log_bytes_now;       /**< bytes the log holds now */
  uint64_t log_bytes_peak;      /**< most bytes the log held at once */
  uint64_t log_bytes_discarded; /**< bytes dropped at the bound (REPRISE_MSGLOG_WHEN_FULL=discard, the default): no
                                   longer recoverable */
  uint64_t determinant_batches; /**< batches of determinants stored at the buddy: written to memory shared with it on
                                   one host, else sent and acknowledged (the log's only extra messages, outside MPI) */
  uint64_t log_bytes_mapped;    /**< the part of the log's reserved memory its buffers have used so far, which it
                                   keeps mapped and uses again (buffers taken from the heap when it is full aside) */
} reprise_msglog_counters;
/** Fills *counters; returns 0 when the message log is active in this process, nonzero otherwise. */
int reprise_msglog_get_counters(reprise_msglog_counters* counters);

/** Marks a checkpoint, as reprise::msglog::mark_checkpoint does (collective over every process of
 * MPI_COMM_WORLD; the log frees what receivers consumed). Returns 0 on success; -1 when the message
 * log is not active; else the MPI error class of what failed, its message printed on stderr. */
int reprise_msglog_mark_checkpoint(void);

/** Marks a checkpoint, collective over the processes of comm only (an intracommunicator of processes
 * of MPI_COMM_WORLD): each drops what the others consumed of its messages. reprise::Checkpoint calls
 * it at every commit when the library is loaded. Returns as reprise_msglog_mark_checkpoint does;
 * MPI_ERR_ARG when a member of comm is not a process of MPI_COMM_WORLD (a replacement). */
int reprise_msglog_mark_checkpoint_on(MPI_Comm comm);

/** Makes the `size` bytes at `value`, a value the program's computation depends on that does not
 * come from MPI (a clock read, a random number, what a thread race decided), the same when this
 * process is replayed (reprise::Driver's RecoveryMode::kReplay): logged now as an event at the
 * buddy, before this process's next message; in a replay, overwritten with the value logged then.
 * Returns 0; -1 when the message log is not active (the value is left as it is); MPI_ERR_ARG, with a
 * line on stderr, when a replay finds a value of another size there. */
int reprise_msglog_replayable(void* value, size_t size);
#ifdef __cplusplus
}
#endif
