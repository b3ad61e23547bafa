/* heat2d: a 2-D heat equation (Jacobi iteration) in C, under reprise's recovery driver.
 *
 *   mpirun --with-ft ulfm -n 4 heat2d [--n N] [--steps S] [--every K]
 *
 * The N x N grid (its edge held at fixed temperatures) is split into bands of rows, one per
 * process. Before every K-th step the driver checkpoints each band in memory (on its process
 * and on a buddy). When a process is killed (REPRISE_FAULTS="2@30" kills original rank 2 at
 * step 30), the survivors recover by respawning it (from a spare process with REPRISE_SPARES=1),
 * every process rolls back to the last checkpoint, and the run goes on. At the end every process
 * compares its band bit for bit with a failure-free serial computation of the whole grid. */
#include <reprise/reprise.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kDefaultN = 96, kDefaultSteps = 300, kDefaultEvery = 10 };

/* What the step function works on. */
struct heat {
  reprise_comm* comm;
  reprise_faults* faults;
  int n;           /* interior points per side */
  double* grid;    /* the whole (n + 2) x (n + 2) grid: only this process's band is kept up to date */
  double* next;    /* the next values of the band */
  int first, last; /* this process's band: interior rows [first, last), numbered from 1 */
};

/* Settings from the command line. */
struct settings {
  int n, steps, every;
};

static void fail(const char* what) {
  fprintf(stderr, "heat2d: %s: %s\n", what, reprise_last_error());
  reprise_finalize(1);
  exit(1);
}

static void usage(const char* wrong) {
  fprintf(stderr, "heat2d: %s\nusage: heat2d [--n N (96)] [--steps S (300)] [--every K (10)]\n", wrong);
  exit(2);
}

static int positive(const char* text) {
  char* end = NULL;
  const long value = strtol(text, &end, 10);
  if (*end != '\0' || value < 1 || value > 100000) usage("a count must be a whole number from 1 to 100000");
  return (int)value;
}

static struct settings parse(int argc, char** argv) {
  struct settings settings = {kDefaultN, kDefaultSteps, kDefaultEvery};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage("every flag takes a value");
    if (strcmp(argv[i], "--n") == 0) settings.n = positive(argv[i + 1]);
    else if (strcmp(argv[i], "--steps") == 0) settings.steps = positive(argv[i + 1]);
    else if (strcmp(argv[i], "--every") == 0) settings.every = positive(argv[i + 1]);
    else usage("unknown flag or value");
  }
  return settings;
}

static double* at(double* grid, int n, int row, int column) {
  return &grid[(size_t)row * (size_t)(n + 2) + (size_t)column];
}

/* The grid before the first step: 1 on the top edge, 0.5 on the left one, 0 elsewhere. */
static void initialise(double* grid, int n) {
  for (int row = 0; row < n + 2; ++row) {
    for (int column = 0; column < n + 2; ++column) {
      *at(grid, n, row, column) = row == 0 ? 1.0 : column == 0 ? 0.5 : 0.0;
    }
  }
}

/* One Jacobi sweep over the rows [first, last), from grid into next (next's row 0 is row first). */
static void sweep(const struct heat* heat, double* grid, double* next) {
  const int n = heat->n;
  for (int row = heat->first; row < heat->last; ++row) {
    for (int column = 1; column <= n; ++column) {
      *at(next, n, row - heat->first, column) = 0.25 * (*at(grid, n, row - 1, column) + *at(grid, n, row + 1, column) +
                                                        *at(grid, n, row, column - 1) + *at(grid, n, row, column + 1));
    }
  }
  for (int row = heat->first; row < heat->last; ++row) {
    memcpy(at(grid, n, row, 1), at(next, n, row - heat->first, 1), (size_t)n * sizeof(double));
  }
}

/* Cuts the rows into one band per process (a replacement takes the rank of the process it replaces). */
static void cut_bands(struct heat* heat) {
  const int rank = reprise_comm_rank(heat->comm), size = reprise_comm_size(heat->comm);
  heat->first = 1 + (int)((long)heat->n * rank / size);
  heat->last = 1 + (int)((long)heat->n * (rank + 1) / size);
}

/* Sends `count` doubles at `out` to `to` and receives as many from `from` into `in`. Not
 * MPI_Sendrecv with MPI_PROC_NULL on one side: Open MPI 5.0.11 crashes there when the other side
 * has failed (docs/guide/running.md, known limits). */
static int shift(struct heat* heat, double* out, int to, double* in, int from, int tag) {
  const MPI_Comm comm = reprise_comm_mpi(heat->comm);
  const int count = heat->n + 2;
  int result = MPI_SUCCESS;
  if (to != MPI_PROC_NULL && from != MPI_PROC_NULL) {
    result = MPI_Sendrecv(out, count, MPI_DOUBLE, to, tag, in, count, MPI_DOUBLE, from, tag, comm, MPI_STATUS_IGNORE);
  } else if (to != MPI_PROC_NULL) {
    result = MPI_Send(out, count, MPI_DOUBLE, to, tag, comm);
  } else if (from != MPI_PROC_NULL) {
    result = MPI_Recv(in, count, MPI_DOUBLE, from, tag, comm, MPI_STATUS_IGNORE);
  }
  return reprise_comm_check(heat->comm, result, "exchanging edge rows");
}

/* Sends the band's edge rows to the neighbours and receives theirs. */
static int exchange_edges(struct heat* heat) {
  const int rank = reprise_comm_rank(heat->comm), size = reprise_comm_size(heat->comm), n = heat->n;
  const int up = rank > 0 ? rank - 1 : MPI_PROC_NULL, down = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
  const int status = shift(heat, at(heat->grid, n, heat->first, 0), up, at(heat->grid, n, heat->last, 0), down, 1);
  if (status != REPRISE_OK) return status;
  return shift(heat, at(heat->grid, n, heat->last - 1, 0), down, at(heat->grid, n, heat->first - 1, 0), up, 2);
}

static int step(uint64_t number, void* user) {
  struct heat* heat = user;
  reprise_faults_apply(heat->faults, heat->comm, number);
  const int status = exchange_edges(heat);
  if (status != REPRISE_OK) return status;
  sweep(heat, heat->grid, heat->next);
  return REPRISE_OK;
}

/* Called on every process after each recovery. */
static int recovered(const reprise_recovery* recovery, void* user) {
  const struct heat* heat = user;
  if (reprise_comm_rank(heat->comm) == 0) {
    printf("heat2d: %zu process(es) lost and replaced, state rolled back, in %.3f s\n", recovery->lost_count,
           recovery->seconds);
    fflush(stdout);
  }
  return REPRISE_OK;
}

/* Whether this process's band equals the failure-free serial computation bit for bit. */
static int matches_serial(const struct heat* heat, int steps) {
  const int n = heat->n;
  const size_t points = (size_t)(n + 2) * (size_t)(n + 2);
  double* grid = malloc(points * sizeof(double));
  double* next = malloc(points * sizeof(double));
  if (grid == NULL || next == NULL) {
    fprintf(stderr, "heat2d: out of memory for the serial check\n");
    exit(1);
  }
  initialise(grid, n);
  const struct heat whole = {.n = n, .first = 1, .last = n + 1};
  for (int s = 0; s < steps; ++s) sweep(&whole, grid, next);
  const int same = memcmp(at(grid, n, heat->first, 0), at(heat->grid, n, heat->first, 0),
                          (size_t)(heat->last - heat->first) * (size_t)(n + 2) * sizeof(double)) == 0;
  free(grid);
  free(next);
  return same;
}

/* A process's state is its band (the rows around it come from the neighbours before each sweep). */
static void protect_band(reprise_checkpoint* checkpoint, struct heat* heat) {
  const size_t points = (size_t)(heat->last - heat->first) * (size_t)(heat->n + 2);
  double* band = at(heat->grid, heat->n, heat->first, 0);
  if (reprise_checkpoint_protect_array(checkpoint, "band", band, REPRISE_FLOAT64, points) != REPRISE_OK) {
    fail("protecting the band");
  }
}

static int run(const struct settings* settings, struct heat* heat) {
  reprise_checkpoint* checkpoint = NULL;
  reprise_driver* driver = NULL;
  const reprise_driver_config config = {.mode = REPRISE_RESPAWN, .every_steps = (uint64_t)settings->every};
  if (reprise_checkpoint_create(heat->comm, NULL, &checkpoint) != REPRISE_OK) fail("making the checkpoint");
  protect_band(checkpoint, heat);
  if (reprise_driver_create(heat->comm, checkpoint, &config, &driver) != REPRISE_OK) fail("making the driver");
  if (reprise_driver_on_recovery(driver, recovered, heat) != REPRISE_OK) fail("setting the recovery function");
  if (reprise_driver_run(driver, (uint64_t)settings->steps, step, heat) != REPRISE_OK) fail("running the steps");
  const size_t recoveries = reprise_driver_recoveries(driver);
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
  return (int)recoveries;
}

int main(int argc, char** argv) {
  const struct settings settings = parse(argc, argv);
  if (reprise_init(&argc, &argv) != REPRISE_OK) fail("starting");
  struct heat heat = {.n = settings.n};
  if (reprise_comm_world(&heat.comm) != REPRISE_OK) fail("joining the job");
  if (reprise_faults_from_env(NULL, reprise_comm_original_size(heat.comm), &heat.faults) != REPRISE_OK) {
    fail("reading REPRISE_FAULTS");
  }
  const size_t points = (size_t)(settings.n + 2) * (size_t)(settings.n + 2);
  heat.grid = malloc(points * sizeof(double));
  heat.next = malloc(points * sizeof(double));
  if (heat.grid == NULL || heat.next == NULL) fail("allocating the grid");
  initialise(heat.grid, settings.n);
  cut_bands(&heat);
  /* right: the least over the processes; recoveries: the most (a replacement saw fewer). */
  const int recoveries = run(&settings, &heat);
  int outcome[2] = {matches_serial(&heat, settings.steps), -recoveries};
  const int check = MPI_Allreduce(MPI_IN_PLACE, outcome, 2, MPI_INT, MPI_MIN, reprise_comm_mpi(heat.comm));
  if (reprise_comm_check(heat.comm, check, "MPI_Allreduce") != REPRISE_OK) fail("checking the result");
  const int right = outcome[0];
  if (reprise_comm_rank(heat.comm) == 0) {
    printf("heat2d: %d of %d processes, %dx%d grid, %d steps, %d recoveries: %s\n", reprise_comm_size(heat.comm),
           reprise_comm_original_size(heat.comm), settings.n, settings.n, settings.steps, -outcome[1],
           right ? "CORRECT (bit for bit the failure-free serial run)" : "WRONG");
  }
  free(heat.grid);
  free(heat.next);
  reprise_faults_free(heat.faults);
  reprise_comm_free(heat.comm);
  reprise_finalize(right ? 0 : 1);
  return right ? 0 : 1;
}
