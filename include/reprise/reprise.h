#pragma once
/** \file
 * The C interface of reprise (part of libreprise): the environment, the fault-tolerant
 * communicator and its recovery, in-memory checkpoints and the recovery driver, the block store,
 * the disk level and live migration. docs/guide/c.md shows a whole program.
 *
 * Objects are opaque handles made by `reprise_*_create` (or `reprise_comm_world`) and released by
 * `reprise_*_free` (which accept NULL). Every call that can fail returns a `reprise_status`:
 * `REPRISE_OK` (0), or the kind of error, whose message (one line, naming the call) this thread's
 * `reprise_last_error` gives until its next failing call. No C++ exception crosses this interface.
 *
 * A handle refers to the handles it was made from (a checkpoint to its communicator, a driver to
 * both): free it first. Every process of the communicator makes the same calls in the same order,
 * as with MPI collectives. */
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What a call returned: `REPRISE_OK`, or the kind of error (the C++ exception it stands for). */
typedef enum reprise_status {
  REPRISE_OK = 0,                 /**< success */
  REPRISE_ERR_PROCESS_FAILED = 1, /**< a process of the communicator died (`reprise::ProcessFailed`) */
  REPRISE_ERR_REVOKED = 2,        /**< another process revoked the communicator (`reprise::Revoked`) */
  REPRISE_ERR_DATA_LOST =
      3,                   /**< every copy of some data is gone (`reprise::DataLost`); see `reprise_last_error_ranks` */
  REPRISE_ERR_USAGE = 4,   /**< a wrong call; nothing changed (`reprise::UsageError`) */
  REPRISE_ERR_IO = 5,      /**< the system refused a file or memory operation (`reprise::IoError`) */
  REPRISE_ERR_CORRUPT = 6, /**< saved data cannot be read back (`reprise::CorruptData`) */
  REPRISE_ERR_MPI = 7,     /**< another error reported by MPI (`reprise::MpiError`) */
  REPRISE_ERR_NO_MEMORY = 8, /**< an allocation failed: here, or in a collective call on the process the message
                                  names (`reprise::OutOfMemory`); nothing changed */
  REPRISE_ERR_STEP = 9,      /**< a step or recovery function returned an error code of its own */
  REPRISE_ERR_OTHER = 10,    /**< anything else (an internal error) */
  REPRISE_ERR_TIMEOUT = 11   /**< reprise gave up waiting for every process to call; the communicator is revoked
                                  (`reprise::Timeout`) */
} reprise_status;

/** This thread's last error message (one line naming the call), or "" when no call failed yet. */
const char* reprise_last_error(void);
/** The MPI error class behind this thread's last error (`MPI_SUCCESS` when none). */
int reprise_last_error_mpi_class(void);
/** For `REPRISE_ERR_PROCESS_FAILED`: the failed original ranks; for `REPRISE_ERR_DATA_LOST`: the
 * original ranks whose checkpointed state is lost. Copies up to `capacity` of them into `ranks` (may
 * be NULL when `capacity` is 0) and returns how many there are. */
size_t reprise_last_error_ranks(int* ranks, size_t capacity);
/** The block ids [`begin`, `end`). */
typedef struct reprise_block_range {
  uint64_t begin; /**< the first id */
  uint64_t end;   /**< one past the last id */
} reprise_block_range;
/** For `REPRISE_ERR_DATA_LOST`: the block ranges of which no copy survives. Copies up to `capacity`
 * of them into `ranges` and returns how many there are. */
size_t reprise_last_error_lost_ranges(reprise_block_range* ranges, size_t capacity);

/** The version of the library the program runs with, "major.minor.patch" (e.g. "0.1.0"); callable
 * at any time, before `reprise_init` too. */
const char* reprise_version(void);

/** Initialises MPI with `MPI_THREAD_MULTIPLE` (unless already initialised) and reprise's process
 * handling, as `reprise::Environment` does; call it first in `main`. `argc` and `argv` may be NULL. */
reprise_status reprise_init(int* argc, char*** argv);
/** Finalises what `reprise_init` started; `exit_status` is what `main` will return, the status the
 * process exits with if finalisation has to be abandoned after failures. A process that ends without
 * it has not finalised MPI: its job fails, whatever its exit status (after `reprise_run`, the process's
 * exit finalises). */
reprise_status reprise_finalize(int exit_status);
/** Ends `main` in one call, `return reprise_end(failed);`, where `failed` is nonzero after a failing
 * call (a status, or a `||` chain of them): then it prints this thread's last error on stderr in one
 * line naming the process (`reprise[2] error: process #2 ended with an error: reprise_driver_run: ...`) and
 * records the process as failed for the launcher. Finalises as `reprise_finalize` does (unless
 * `reprise_init` failed), printing its error the same way if that fails. Returns the exit status
 * for `main`: 0, or 1 when `failed` is nonzero or finalisation failed. */
int reprise_end(int failed);

/** A fault-tolerant communicator (`reprise::Comm`). Its MPI communicator changes on recovery. */
typedef struct reprise_comm reprise_comm;
/** The job's communicator (`reprise::Comm::world`); in a replacement, it joins the survivors. */
reprise_status reprise_comm_world(reprise_comm** comm);
/** Releases `comm` (NULL: nothing). */
void reprise_comm_free(reprise_comm* comm);
/** The MPI communicator to call MPI on now (errors returned, not fatal). Ask again after a
 * recovery: a shrink or respawn replaces it. Do not free it. */
MPI_Comm reprise_comm_mpi(const reprise_comm* comm);
/** This process's rank in the communicator now. */
int reprise_comm_rank(const reprise_comm* comm);
/** The number of processes now. */
int reprise_comm_size(const reprise_comm* comm);
/** This process's original rank: the identity it keeps across recoveries (a replacement takes the
 * original rank of the process it replaces). */
int reprise_comm_original_rank(const reprise_comm* comm);
/** The number of processes the job started with. */
int reprise_comm_original_size(const reprise_comm* comm);
/** 1 in a process spawned to replace a failed one, else 0. */
int reprise_comm_is_replacement(const reprise_comm* comm);
/** 1 in a process started by a migration (it calls `reprise_migration_arrive`), else 0. */
int reprise_comm_migrated_in(const reprise_comm* comm);
/** Turns the result of an MPI call on `reprise_comm_mpi(comm)` into a status: `REPRISE_OK` for
 * `MPI_SUCCESS`, else the error (a process failure, a revocation, another MPI error), its message
 * naming `what`. Return that status from a step function to let the driver recover. */
reprise_status reprise_comm_check(reprise_comm* comm, int mpi_result, const char* what);
/** Revokes the communicator: every member's pending and future calls on it fail. */
reprise_status reprise_comm_revoke(reprise_comm* comm);
/** Replaces the communicator by the survivors (shrinking recovery); ranks change. */
reprise_status reprise_comm_shrink(reprise_comm* comm);
/** Replaces the failed processes by spares or spawned processes that take their original ranks
 * (substituting recovery); call `reprise_checkpoint_restore` afterwards. */
reprise_status reprise_comm_respawn(reprise_comm* comm);

/** Configuration of a checkpoint; zero fields take the defaults. */
typedef struct reprise_checkpoint_config {
  int copies;                  /**< copies of every process's state (its own and buddies'); 0: 2 */
  double join_timeout_seconds; /**< how long a checkpoint waits for every process (then `REPRISE_ERR_TIMEOUT`);
                                    0: 60 */
} reprise_checkpoint_config;
/** The element type of a typed array (recorded in images, so HDF5 readers see numbers). */
typedef enum reprise_element_type {
  REPRISE_INT8 = 1,    /**< int8_t */
  REPRISE_UINT8 = 2,   /**< uint8_t */
  REPRISE_INT16 = 3,   /**< int16_t */
  REPRISE_UINT16 = 4,  /**< uint16_t */
  REPRISE_INT32 = 5,   /**< int32_t */
  REPRISE_UINT32 = 6,  /**< uint32_t */
  REPRISE_INT64 = 7,   /**< int64_t */
  REPRISE_UINT64 = 8,  /**< uint64_t */
  REPRISE_FLOAT32 = 9, /**< float */
  REPRISE_FLOAT64 = 10 /**< double */
} reprise_element_type;
/** Coordinated in-memory checkpoints of registered memory (`reprise::Checkpoint`). */
typedef struct reprise_checkpoint reprise_checkpoint;
/** A checkpoint on `comm` (which must outlive it); `config` may be NULL for the defaults. */
reprise_status reprise_checkpoint_create(reprise_comm* comm, const reprise_checkpoint_config* config,
                                         reprise_checkpoint** checkpoint);
/** Releases `checkpoint` (NULL: nothing). */
void reprise_checkpoint_free(reprise_checkpoint* checkpoint);
/** Registers the `bytes` bytes at `data` under `name`: saved by every checkpoint, written back in
 * place by a restore. The memory must stay valid while the checkpoint exists. */
reprise_status reprise_checkpoint_protect(reprise_checkpoint* checkpoint, const char* name, void* data, size_t bytes);
/** As `reprise_checkpoint_protect`, for an array of `count` elements of `type` (images record its
 * element type; a restore writes it back in place). */
reprise_status reprise_checkpoint_protect_array(reprise_checkpoint* checkpoint, const char* name, void* data,
                                                reprise_element_type type, size_t count);
/** Registers the blocks `mine` (of `block_bytes` bytes each, at `data`) under `name`, so that a
 * disk restart on another process count can load any block ranges (`reprise_disk_level_load_blocks`). */
reprise_status reprise_checkpoint_protect_blocks(reprise_checkpoint* checkpoint, const char* name, size_t block_bytes,
                                                 reprise_block_range mine, void* data);
/** Takes a checkpoint of every process's registered memory (collective, two-phase: a failure during
 * it keeps the last version); `version` (may be NULL) receives its number. */
reprise_status reprise_checkpoint_commit(reprise_checkpoint* checkpoint, uint64_t* version);
/** Rolls every process back to the last checkpoint; replacements get their state from buddies. */
reprise_status reprise_checkpoint_restore(reprise_checkpoint* checkpoint);
/** The number of the last checkpoint (0 before the first). */
uint64_t reprise_checkpoint_version(const reprise_checkpoint* checkpoint);

/** Where a save function puts the bytes of its object (valid only during the call). */
typedef struct reprise_bytes reprise_bytes;
/** Appends `bytes` bytes at `data` to what a save function saves. */
reprise_status reprise_bytes_append(reprise_bytes* out, const void* data, size_t bytes);
/** Saves an object: appends its bytes to `out` (`reprise_bytes_append`); returns `REPRISE_OK`, or
 * nonzero to make the checkpoint fail with `REPRISE_ERR_STEP` (or the status of a failed reprise call). */
typedef int (*reprise_save_function)(reprise_bytes* out, void* user);
/** Sets an object from the `bytes` bytes at `data` that its save function saved; returns as a save
 * function does. */
typedef int (*reprise_load_function)(const void* data, size_t bytes, void* user);
/** Registers an object of any shape (a list, a table that grows) under `name` through a pair of
 * functions called with `user`: `save` at every checkpoint, `load` at a restore. */
reprise_status reprise_checkpoint_protect_object(reprise_checkpoint* checkpoint, const char* name,
                                                 reprise_save_function save, reprise_load_function load, void* user);
/** The original ranks that took part in the last checkpoint but are no longer members (after a shrink).
 * Copies up to `capacity` of them into `ranks` and returns how many there are. */
size_t reprise_checkpoint_departed(const reprise_checkpoint* checkpoint, int* ranks, size_t capacity);
/** The saved states of some processes, as `reprise_checkpoint_fetch` returns them. */
typedef struct reprise_saved_states reprise_saved_states;
/** Collective, after `reprise_checkpoint_restore` following a shrink: this process gets the saved
 * states of the `count` original ranks `ranks` (any, possibly none; each process its own), from live
 * copies. `REPRISE_ERR_DATA_LOST` names the ranks whose copies are all gone. */
reprise_status reprise_checkpoint_fetch(reprise_checkpoint* checkpoint, const int* ranks, size_t count,
                                        reprise_saved_states** states);
/** Releases `states` (NULL: nothing). */
void reprise_saved_states_free(reprise_saved_states* states);
/** The bytes original rank `rank` saved under `name`: `*data` points into `states` (valid until it is
 * freed), `*bytes` is their size. `REPRISE_ERR_USAGE` for a rank not fetched or a name not saved. */
reprise_status reprise_saved_states_piece(const reprise_saved_states* states, int rank, const char* name,
                                          const void** data, size_t* bytes);

/** How the driver recovers from a failure. */
typedef enum reprise_recovery_mode {
  REPRISE_RESPAWN = 0, /**< replacements take the failed original ranks */
  REPRISE_SHRINK = 1,  /**< the survivors go on with fewer processes */
  REPRISE_REPLAY = 2   /**< the lost process alone is replayed from the message log (docs/guide/msglog.md) */
} reprise_recovery_mode;
/** Configuration of a driver; zero fields take the defaults (`{0}`: respawn, a checkpoint about every
 * 10 seconds of steps, at most 64 recoveries, no faults injected, 16 snapshots per interval in replay mode). Of the
 * cadence, `every_steps`, `every_seconds` and `mtbf_seconds`, set at most one (`reprise_driver_run` refuses two with
 * `REPRISE_ERR_USAGE`); with none set the driver checkpoints about every 10 seconds of steps. */
typedef struct reprise_driver_config {
  reprise_recovery_mode mode; /**< how to recover; 0: `REPRISE_RESPAWN` */
  int max_recoveries;         /**< give up after this many recoveries; 0: 64 */
  uint64_t every_steps;       /**< checkpoint before every n-th step (0: not by steps) */
  double every_seconds;       /**< checkpoint about every this many seconds (0: not by time; all three 0: 10) */
  double mtbf_seconds;        /**< checkpoint at Young/Daly's interval for this mean time between failures */
  int inject_faults;          /**< nonzero: carry out the fault plan in `REPRISE_FAULTS` ("2@30": original rank 2
                                   dies at step 30) before each step, as `reprise_faults_apply` would in the
                                   step; `reprise_driver_create` refuses a malformed plan, a rank the job never
                                   had or a node fault with `REPRISE_ERR_USAGE`; 0: none */
  int snapshots_per_interval; /**< `REPRISE_REPLAY`: snapshots of each process's state between two checkpoints,
                                   from which a lone replacement replays instead of from the checkpoint
                                   (docs/guide/msglog.md); 0: 16; negative: none */
} reprise_driver_config;
/** A recovery the driver made, as its recovery function sees it. */
typedef struct reprise_recovery {
  reprise_recovery_mode mode; /**< how it recovered */
  const int* lost;            /**< the original ranks lost (replaced, with respawn) */
  size_t lost_count;          /**< how many */
  uint64_t epoch;             /**< the communicator's epoch afterwards */
  double seconds;             /**< from catching the failure to the state restored */
  int attempts;               /**< more than 1 if processes failed during the recovery */
} reprise_recovery;
/** A step: called for each step with its number and the user pointer. Return `REPRISE_OK` to go on,
 * or the status of a failing reprise call (e.g. `reprise_comm_check`) so the driver recovers;
 * any other nonzero value ends `reprise_driver_run` on every process with `REPRISE_ERR_STEP`. */
typedef int (*reprise_step_function)(uint64_t step, void* user);
/** Called on every process after each recovery (e.g. to redistribute work after a shrink); returns
 * as a step function does. */
typedef int (*reprise_recovery_function)(const reprise_recovery* recovery, void* user);
/** Runs steps, checkpoints and recovers (`reprise::Driver`). */
typedef struct reprise_driver reprise_driver;
/** A driver over `comm` and `checkpoint` (which must outlive it); `config` may be NULL. It
 * registers its step counter with the checkpoint. */
reprise_status reprise_driver_create(reprise_comm* comm, reprise_checkpoint* checkpoint,
                                     const reprise_driver_config* config, reprise_driver** driver);
/** Releases `driver` (NULL: nothing). */
void reprise_driver_free(reprise_driver* driver);
/** Calls `recovery` (with `user`) after each recovery; NULL removes it. */
reprise_status reprise_driver_on_recovery(reprise_driver* driver, reprise_recovery_function recovery, void* user);
/** Calls `step` for each step up to `steps` (from where a restart left off), checkpointing at the
 * configured cadence, recovering from failures and restoring the last checkpoint. */
reprise_status reprise_driver_run(reprise_driver* driver, uint64_t steps, reprise_step_function step, void* user);
/** The current step (after `reprise_driver_run`: the steps done). */
uint64_t reprise_driver_step(const reprise_driver* driver);
/** How many recoveries the driver made. */
size_t reprise_driver_recoveries(const reprise_driver* driver);

/** Where `reprise_run` is, as its step and finish functions see it. */
typedef struct reprise_run_step {
  reprise_comm* comm; /**< the job's communicator (for `reprise_comm_check`, ranks and sizes) */
  MPI_Comm mpi;       /**< the MPI communicator to call MPI on now (`reprise_comm_mpi(comm)`) */
  uint64_t step;      /**< the step's number (in the finish function: the steps run) */
  void* user;         /**< `reprise_run_config.user` */
} reprise_run_step;
/** A step or finish function of `reprise_run`; returns as a `reprise_step_function` does. */
typedef int (*reprise_run_function)(const reprise_run_step* step);
/** What `reprise_run` runs. `state`, `bytes`, `steps` and `step` are the program; every other field may
 * be left 0 (a designated initializer leaves it so): no finish function, no user pointer, and the
 * driver's defaults (respawn, a checkpoint about every 10 seconds of steps, no faults injected;
 * `.driver.inject_faults = 1` carries out `REPRISE_FAULTS`). */
typedef struct reprise_run_config {
  void* state;                  /**< the memory every checkpoint saves and a recovery writes back */
  size_t bytes;                 /**< its size */
  uint64_t steps;               /**< how many steps to run */
  reprise_run_function step;    /**< called for each step */
  reprise_run_function finish;  /**< NULL (none), or called once on every process after the last step with
                                     the communicator still there (to check the result across processes);
                                     its nonzero return fails its process */
  void* user;                   /**< passed on as `reprise_run_step.user` */
  reprise_driver_config driver; /**< how to checkpoint and recover (zero fields: the defaults) */
} reprise_run_config;
/** A whole program whose state is one region, in one call from `main`: `reprise_init`, the job's
 * communicator, a checkpoint protecting `config->state`, a driver running `config->steps` steps of
 * `config->step` and recovering from failures, then `config->finish`. Returns 0 once every step ran
 * (`config->state` then holds the result: print it after the call), or 1 after a failed call, whose
 * error it has printed in one line naming the process (the process is recorded as failed for the
 * launcher). Either way it returns with MPI still initialised and finalises it when the process exits
 * (`return` from `main` or `exit`), as `reprise_finalize` does with the status the process exits with:
 * what the program printed flushed first, `MPI_Finalize` watched (after process failures it may hang or crash;
 * the process then ends with that status), the status recorded for the launcher. Calling
 * `reprise_finalize` after it finalises there instead. A program that needs more (several regions, a
 * recovery function, the store) makes these calls itself. */
int reprise_run(int* argc, char*** argv, const reprise_run_config* config);

/** Configuration of a heartbeat; zero fields take the defaults. */
typedef struct reprise_heartbeat_config {
  double period_seconds;  /**< between two beats; 0: 0.05 */
  double timeout_seconds; /**< silence after which a process is declared hung, > period; 0: 1 */
} reprise_heartbeat_config;
/** Hang detection (`reprise::Heartbeat`): each process is watched by the one before it; one silent
 * for the timeout whose kernel says it is stopped (a frozen process) is killed, so that MPI reports
 * it as failed and the driver recovers. Needs `MPI_THREAD_MULTIPLE` (`reprise_init` asks for it). */
typedef struct reprise_heartbeat reprise_heartbeat;
/** Collective: starts watching on `comm` (which must outlive it); `config` may be NULL. In a
 * replacement process, create it where the others did (before `reprise_driver_run`). */
reprise_status reprise_heartbeat_create(reprise_comm* comm, const reprise_heartbeat_config* config,
                                        reprise_heartbeat** heartbeat);
/** Releases `heartbeat` (NULL: nothing); free it before its communicator. */
void reprise_heartbeat_free(reprise_heartbeat* heartbeat);
/** Collective, after a recovery by hand: watches the recovered communicator's members anew. */
reprise_status reprise_heartbeat_restart(reprise_heartbeat* heartbeat);
/** The original ranks this process declared hung and has not heard from since. Copies up to `capacity`
 * of them into `ranks` and returns how many there are. */
size_t reprise_heartbeat_declared_hung(const reprise_heartbeat* heartbeat, int* ranks, size_t capacity);
/** Makes the driver restart `heartbeat` (which must outlive it) after each recovery. */
reprise_status reprise_driver_watch(reprise_driver* driver, reprise_heartbeat* heartbeat);

/** How the pages of an incremental checkpoint are committed. */
typedef enum reprise_commit_mode {
  REPRISE_COMMIT_ADAPTIVE = 0, /**< in the background, pages the program writes first committed first */
  REPRISE_COMMIT_ADDRESS = 1,  /**< in the background, in address order */
  REPRISE_COMMIT_SYNC = 2      /**< `reprise_incremental_commit` returns once every page is committed */
} reprise_commit_mode;
/** Configuration of an incremental checkpoint; zero fields take the defaults. */
typedef struct reprise_incremental_config {
  const char* directory;    /**< versions as files in this directory of this process's own; NULL: in the
                                 memory of other processes of the communicator */
  size_t keep_versions;     /**< with a directory: merge the oldest versions once there are more files; 0: keep all */
  int copies;               /**< in memory: copies of every process's memory (its own and buddies'); 0: 2 */
  reprise_commit_mode mode; /**< how pages are committed */
  size_t cow_bytes;         /**< copy-on-write buffer for pages written during a commit; 0: 16 MiB */
} reprise_incremental_config;
/** What one incremental checkpoint did (`reprise::IncrementalStats`). */
typedef struct reprise_incremental_stats {
  uint64_t version;       /**< 1 for the full checkpoint, then 2, 3, ... */
  size_t pages_committed; /**< pages saved */
  size_t cow;             /**< first writes during the commit that copied the page aside */
  size_t wait;            /**< first writes that waited for the page's commit */
  size_t avoided;         /**< first writes during the commit that did neither */
  size_t after;           /**< first writes after the commit */
  double wait_seconds;    /**< time writers spent waiting */
  double commit_seconds;  /**< from the start of the checkpoint to the end of its commit */
} reprise_incremental_stats;
/** Asynchronous incremental checkpoints of page-aligned memory (`reprise::IncrementalCheckpoint`): a
 * commit saves only the pages written since the one before, in the background. One per process. */
typedef struct reprise_incremental reprise_incremental;
/** Allocates `bytes` (rounded up to whole pages) of zeroed, page-aligned memory into `*memory`, to
 * protect with `reprise_incremental_protect`. */
reprise_status reprise_protected_alloc(size_t bytes, void** memory);
/** Releases memory from `reprise_protected_alloc` (NULL: nothing). */
reprise_status reprise_protected_free(void* memory);
/** An incremental checkpoint. `config` may be NULL (in memory, on `comm`: then every call but
 * `reprise_incremental_protect` is collective, and the communicator must outlive it); with a
 * directory, `comm` may be NULL. */
reprise_status reprise_incremental_create(reprise_comm* comm, const reprise_incremental_config* config,
                                          reprise_incremental** incremental);
/** Waits for a running commit and releases `incremental` (NULL: nothing). */
void reprise_incremental_free(reprise_incremental* incremental);
/** Registers the page-aligned `bytes` at `data` (whole pages, from `reprise_protected_alloc`); every
 * process that will restore registers the same sizes in the same order, before the first commit. */
reprise_status reprise_incremental_protect(reprise_incremental* incremental, void* data, size_t bytes);
/** Waits for the commit before, then starts a new version and returns (in the background modes) while
 * its pages are saved; `version` (may be NULL) receives its number. Call it when the memory is
 * consistent and no other thread writes it; writing on afterwards is safe. */
reprise_status reprise_incremental_commit(reprise_incremental* incremental, uint64_t* version);
/** Waits until the newest version is committed (and, in memory, safe on other processes); `stats`
 * (may be NULL) receives what it did. */
reprise_status reprise_incremental_wait(reprise_incremental* incremental, reprise_incremental_stats* stats);
/** Loads the newest complete version into the registered memory (after a respawn, a replacement gets
 * its predecessor's from a buddy); `version` (may be NULL) receives its number. Memory is unchanged
 * on an error: `REPRISE_ERR_USAGE` (nothing to restore, other sizes), `REPRISE_ERR_DATA_LOST` (a process
 * and its buddies gone), `REPRISE_ERR_CORRUPT` (every version damaged). */
reprise_status reprise_incremental_restore(reprise_incremental* incremental, uint64_t* version);
/** The newest version: after creation, the newest the directory already holds (0: none), then the
 * newest committed or restored. */
uint64_t reprise_incremental_version(const reprise_incremental* incremental);

/** Configuration of a block store; zero fields other than `block_bytes` take the defaults. */
typedef struct reprise_store_config {
  size_t block_bytes;              /**< size of every block, > 0 */
  int copies;                      /**< copies of every block; 0: 2 */
  size_t bytes_per_permuted_range; /**< 0: no permutation; else a multiple of block_bytes */
  uint64_t seed;                   /**< seed of the permutation */
  double join_timeout_seconds;     /**< how long a call waits for every process (then `REPRISE_ERR_TIMEOUT`); 0: 60 */
} reprise_store_config;
/** A replicated in-memory block store (`reprise::Store`). */
typedef struct reprise_store reprise_store;
/** A store on `comm` (which must outlive it). */
reprise_status reprise_store_create(reprise_comm* comm, const reprise_store_config* config, reprise_store** store);
/** Releases `store` (NULL: nothing). */
void reprise_store_free(reprise_store* store);
/** Submits this process's blocks `mine` (`bytes` at `data`: mine's size times the block size);
 * collective. */
reprise_status reprise_store_submit(reprise_store* store, reprise_block_range mine, const void* data, size_t bytes);
/** Loads the blocks of `count` ranges into `into` (`bytes` long: their blocks, in order), from
 * live copies; collective. `REPRISE_ERR_DATA_LOST` names the ranges with no copy left. */
reprise_status reprise_store_load(reprise_store* store, const reprise_block_range* wanted, size_t count, void* into,
                                  size_t bytes);
/** Brings every block back to its number of copies after failures (also into replacements). */
reprise_status reprise_store_heal(reprise_store* store);

/** Configuration of a disk level. */
typedef struct reprise_disk_level_config {
  const char* directory; /**< created if missing; one job's checkpoints only */
  uint64_t every;        /**< write versions that are multiples of this; 0: 1 */
  int keep;              /**< complete versions kept on disk; 0: 2 */
} reprise_disk_level_config;
/** What a restart found. */
typedef enum reprise_restart_outcome {
  REPRISE_NO_CHECKPOINT = 0, /**< no complete version: start from scratch */
  REPRISE_RESTORED = 1,      /**< same process count: every process has its own state back */
  REPRISE_REDISTRIBUTE = 2   /**< another process count: load what you need (`reprise_disk_level_load_blocks`) */
} reprise_restart_outcome;
/** The result of `reprise_disk_level_restart`, the same on every process. */
typedef struct reprise_restart {
  reprise_restart_outcome outcome; /**< what was found */
  uint64_t version;                /**< the version restarted from */
  int old_world_size;              /**< processes of the job that wrote it */
} reprise_restart;
/** Every n-th checkpoint also on disk, and restarts from it (`reprise::DiskLevel`). */
typedef struct reprise_disk_level reprise_disk_level;
/** A disk level for `checkpoint` on `comm` (which must outlive it). */
reprise_status reprise_disk_level_create(reprise_comm* comm, reprise_checkpoint* checkpoint,
                                         const reprise_disk_level_config* config, reprise_disk_level** disk);
/** Releases `disk` (NULL: nothing). */
void reprise_disk_level_free(reprise_disk_level* disk);
/** Restarts a new job from the newest complete version on disk (damaged ones skipped, named). */
reprise_status reprise_disk_level_restart(reprise_disk_level* disk, reprise_restart* restart);
/** After `REPRISE_REDISTRIBUTE`: loads the blocks of `count` ranges of the piece `name` into `into`
 * (`bytes` long) from whichever images hold them. */
reprise_status reprise_disk_level_load_blocks(reprise_disk_level* disk, const char* name,
                                              const reprise_block_range* wanted, size_t count, void* into,
                                              size_t bytes);
/** After `REPRISE_REDISTRIBUTE`: takes the driver's step from the old job, so a run goes on there. */
reprise_status reprise_disk_level_load_progress(reprise_disk_level* disk);
/** After a restart found a version (not collective): the saved states of the old job's processes of
 * original ranks `ranks` (`count` of them), read from their images (checksums checked), as
 * `reprise_checkpoint_fetch` gives them (`reprise_saved_states_piece`). `REPRISE_ERR_USAGE` for a rank
 * the version lacks or when no version was found. */
reprise_status reprise_disk_level_fetch(const reprise_disk_level* disk, const int* ranks, size_t count,
                                        reprise_saved_states** states);

/** Configuration of live migration. */
typedef struct reprise_migration_config {
  const char* hosts; /**< hosts for the new processes (comma-separated); NULL: `$REPRISE_SPAWN_HOSTS` */
  int signal;        /**< a signal that asks the receiving process to move; 0: SIGUSR1; -1: none */
} reprise_migration_config;
/** Live moves of processes to spares or spawned processes (`reprise::Migration`). */
typedef struct reprise_migration reprise_migration;
/** Migration for `checkpoint` on `comm` (which must outlive it); `config` may be NULL. */
reprise_status reprise_migration_create(reprise_comm* comm, reprise_checkpoint* checkpoint,
                                        const reprise_migration_config* config, reprise_migration** migration);
/** Releases `migration` (NULL: nothing). */
void reprise_migration_free(reprise_migration* migration);
/** Asks that the processes of original ranks `ranks` (`count` of them; 0: this process) move. */
reprise_status reprise_migration_request(reprise_migration* migration, const int* ranks, size_t count);
/** At a safe point, collective: carries out requested moves; `moved` (may be NULL) is set to 1 when
 * a move happened. */
reprise_status reprise_migration_poll(reprise_migration* migration, int* moved);
/** Moves at the driver's checkpoints instead of at `reprise_migration_poll`. */
reprise_status reprise_migration_attach(reprise_migration* migration, reprise_driver* driver);
/** In a process that arrived by migration: takes over the leaving process's state. */
reprise_status reprise_migration_arrive(reprise_migration* migration);

/** Faults on demand (`reprise::inject::Schedule`), to test recovery with real kills. */
typedef struct reprise_faults reprise_faults;
/** Reads the schedule in the environment variable `variable` (NULL: `REPRISE_FAULTS`, e.g.
 * "2@30" kills original rank 2 at step 30); checks it against `processes`. */
reprise_status reprise_faults_from_env(const char* variable, int processes, reprise_faults** faults);
/** Releases `faults` (NULL: nothing). */
void reprise_faults_free(reprise_faults* faults);
/** Carries out the fault planned for this process at `step`, if any (not in replacements). */
void reprise_faults_apply(const reprise_faults* faults, const reprise_comm* comm, uint64_t step);

#ifdef __cplusplus
}
#endif
