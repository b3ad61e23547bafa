/* A C program in replay mode (REPRISE_REPLAY), the message log linked in front of MPI: each step
 * every process passes its value around a ring (MPI_Sendrecv) and adds the sum over all
 * (MPI_Allreduce), a checkpoint every 10 steps. The process REPRISE_FAULTS kills is replaced and
 * replays alone, from its last snapshot (argument "snapshots": the default of 16 per interval) or from
 * its checkpoint (argument "none": snapshots_per_interval negative). Prints where the replacement
 * resumed, whether any survivor ran a step twice, and whether every value equals a serial run's. */
#include <mpi.h>
#include <reprise/reprise.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kSteps = 40, kEvery = 10, kMaxProcesses = 64 };

struct ring {
  reprise_comm* comm;
  uint64_t value;
  uint64_t first_step; /* the first step this process ran (UINT64_MAX: none yet) */
  uint64_t steps_run;
};

static void fail(const char* what) {
  fprintf(stderr, "capi_replay: %s: %s\n", what, reprise_last_error());
  exit(1);
}

static uint64_t ring_next(uint64_t mine, uint64_t from_left, uint64_t total, uint64_t step) {
  return (mine * 31 + from_left * 7 + total + step) % 1000000007u;
}

static int step(uint64_t s, void* user) {
  struct ring* ring = user;
  const int me = reprise_comm_rank(ring->comm);
  const int size = reprise_comm_size(ring->comm);
  MPI_Comm raw = reprise_comm_mpi(ring->comm);
  if (ring->first_step == UINT64_MAX) ring->first_step = s;
  ++ring->steps_run;
  uint64_t from_left = 0;
  uint64_t total = 0;
  const int code = MPI_Sendrecv(&ring->value, 1, MPI_UINT64_T, (me + 1) % size, 0, &from_left, 1, MPI_UINT64_T,
                                (me + size - 1) % size, 0, raw, MPI_STATUS_IGNORE);
  int status = reprise_comm_check(ring->comm, code, "MPI_Sendrecv");
  if (status != REPRISE_OK) return status;
  status = reprise_comm_check(ring->comm, MPI_Allreduce(&ring->value, &total, 1, MPI_UINT64_T, MPI_SUM, raw),
                              "MPI_Allreduce");
  if (status != REPRISE_OK) return status;
  ring->value = ring_next(ring->value, from_left, total, s);
  return REPRISE_OK;
}

/* Whether this process's value is the serial run's. */
static int matches_serial(const struct ring* ring) {
  const int size = reprise_comm_size(ring->comm);
  uint64_t serial[kMaxProcesses];
  uint64_t next[kMaxProcesses];
  for (int r = 0; r < size; ++r) serial[r] = (uint64_t)r + 1;
  for (uint64_t s = 0; s < kSteps; ++s) {
    uint64_t total = 0;
    for (int r = 0; r < size; ++r) total += serial[r];
    for (int r = 0; r < size; ++r) next[r] = ring_next(serial[r], serial[(r + size - 1) % size], total, s);
    memcpy(serial, next, sizeof(uint64_t) * (size_t)size);
  }
  return ring->value == serial[reprise_comm_rank(ring->comm)];
}

static size_t run(struct ring* ring, int snapshots) {
  reprise_checkpoint* checkpoint = NULL;
  reprise_driver* driver = NULL;
  const reprise_driver_config config = {
      .mode = REPRISE_REPLAY, .every_steps = kEvery, .inject_faults = 1, .snapshots_per_interval = snapshots};
  if (reprise_checkpoint_create(ring->comm, NULL, &checkpoint) != REPRISE_OK) fail("making the checkpoint");
  if (reprise_checkpoint_protect(checkpoint, "value", &ring->value, sizeof ring->value) != REPRISE_OK) {
    fail("protecting the value");
  }
  if (reprise_driver_create(ring->comm, checkpoint, &config, &driver) != REPRISE_OK) fail("making the driver");
  if (reprise_driver_run(driver, kSteps, step, ring) != REPRISE_OK) fail("running the steps");
  const size_t recoveries = reprise_driver_recoveries(driver);
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
  return recoveries;
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "snapshots") != 0 && strcmp(argv[1], "none") != 0)) {
    fprintf(stderr, "usage: capi_replay snapshots|none\n");
    return 2;
  }
  const int snapshots = strcmp(argv[1], "none") == 0 ? -1 : 0;
  if (reprise_init(&argc, &argv) != REPRISE_OK) fail("starting");
  struct ring ring = {.comm = NULL, .value = 0, .first_step = UINT64_MAX, .steps_run = 0};
  if (reprise_comm_world(&ring.comm) != REPRISE_OK) fail("joining the job");
  if (reprise_comm_size(ring.comm) > kMaxProcesses) fail("too many processes");
  ring.value = (uint64_t)reprise_comm_original_rank(ring.comm) + 1;
  const size_t recoveries = run(&ring, snapshots);
  const int replacement = reprise_comm_is_replacement(ring.comm);
  /* the least of: right, no survivor ran a step twice; the most of: recoveries, the replacement's first step */
  int least[2] = {matches_serial(&ring), replacement || ring.steps_run == kSteps};
  uint64_t most[2] = {recoveries, replacement ? ring.first_step : 0};
  MPI_Comm raw = reprise_comm_mpi(ring.comm);
  int code = MPI_Allreduce(MPI_IN_PLACE, least, 2, MPI_INT, MPI_MIN, raw);
  if (reprise_comm_check(ring.comm, code, "MPI_Allreduce") != REPRISE_OK) fail("checking the result");
  code = MPI_Allreduce(MPI_IN_PLACE, most, 2, MPI_UINT64_T, MPI_MAX, raw);
  if (reprise_comm_check(ring.comm, code, "MPI_Allreduce") != REPRISE_OK) fail("checking the result");
  if (reprise_comm_rank(ring.comm) == 0) {
    printf("capi_replay: %d processes, recoveries: %llu, the replacement resumed at step %llu (%s), %s, "
           "every value: %s\n",
           reprise_comm_size(ring.comm), (unsigned long long)most[0], (unsigned long long)most[1],
           most[1] % kEvery == 0 ? "its checkpoint" : "a snapshot",
           least[1] ? "no survivor ran a step twice" : "a survivor ran a step twice", least[0] ? "CORRECT" : "WRONG");
  }
  reprise_comm_free(ring.comm);
  reprise_finalize(least[0] && least[1] ? 0 : 1);
  return least[0] && least[1] ? 0 : 1;
}
