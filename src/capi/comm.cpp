// The C interface: the environment, the communicator, hang detection and faults on demand.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "handles.hpp"
#include "log.hpp"
#include "reprise/environment.hpp"
#include "reprise/version.hpp"

namespace {

// Made by reprise_init, destroyed only by reprise_finalize: a process that
// ends without it never finalises MPI, which fails the job, instead of being
// recorded as passed whatever its exit status.
std::unique_ptr<reprise::Environment>& environment() {
  static auto* instance = new std::unique_ptr<reprise::Environment>;
  return *instance;
}

// reprise_end: this thread's last error on stderr in one line naming the
// process (as Environment's terminate handler names it: its rank in
// MPI_COMM_WORLD, unless spawned), and the process recorded as failed for
// the launcher.
void say_last_error() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  MPI_Comm parent = MPI_COMM_NULL;
  int rank = -1;
  if (initialized != 0 && finalized == 0) {
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  }
  const std::string name = rank >= 0                 ? "process #" + std::to_string(rank)
                           : parent != MPI_COMM_NULL ? "a replacement process (pid " + std::to_string(::getpid()) + ")"
                                                     : "process (pid " + std::to_string(::getpid()) + ")";
  const std::string line = name + " ended with an error: " + reprise_last_error();
  reprise::logging::error("%s", line.c_str());
  reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, reprise::OriginalRank{rank}, line);
}

// At process exit, once reprise_run has returned (registered by
// reprise::capi::end_at_exit): what reprise_finalize does, with the status the
// process exits with (what main returned), unless the program finalised
// already. A finalisation that fails ends the process with its error in one line.
void finalize_at_exit(int status, void* /*unused*/) {
  if (environment() == nullptr) return;
  if (reprise_finalize(status) == REPRISE_OK) return;
  say_last_error();
  std::fflush(nullptr);
  reprise::inject::wait_until_output_read();
  std::_Exit(status != 0 ? status : 1);
}

}  // namespace

namespace reprise::capi {

int end_at_exit(int failed) {
  if (failed != 0) say_last_error();
  const int status = failed != 0 ? 1 : 0;
  if (environment() != nullptr && ::on_exit(finalize_at_exit, nullptr) != 0) {
    finalize_at_exit(status, nullptr);  // no room left to register it: finalise now
  }
  return status;
}

}  // namespace reprise::capi

using reprise::capi::checked;
using reprise::capi::guarded;

extern "C" {

const char* reprise_version(void) { return reprise::kVersion; }

reprise_status reprise_init(int* argc, char*** argv) {
  return guarded("reprise_init", [&] {
    if (environment() != nullptr) reprise::capi::refuse("reprise_init was called already");
    int no_count = 0;
    char** no_arguments = nullptr;
    environment() = std::make_unique<reprise::Environment>(argc != nullptr ? *argc : no_count,
                                                           argv != nullptr ? *argv : no_arguments);
  });
}

reprise_status reprise_finalize(int exit_status) {
  return guarded("reprise_finalize", [&] {
    if (environment() == nullptr) reprise::capi::refuse("reprise_init was not called");
    environment()->set_exit_status(exit_status);
    environment().reset();
  });
}

int reprise_end(int failed) {
  if (failed != 0) say_last_error();
  if (failed != 0 && environment() == nullptr) return 1;  // reprise_init failed: nothing to finalise
  if (reprise_finalize(failed != 0 ? 1 : 0) != REPRISE_OK) {
    say_last_error();
    return 1;
  }
  return failed != 0 ? 1 : 0;
}

reprise_status reprise_comm_world(reprise_comm** comm) {
  return guarded("reprise_comm_world", [&] { checked(comm, "comm") = new reprise_comm{reprise::Comm::world()}; });
}

void reprise_comm_free(reprise_comm* comm) { delete comm; }

MPI_Comm reprise_comm_mpi(const reprise_comm* comm) { return comm != nullptr ? comm->comm.raw() : MPI_COMM_NULL; }

int reprise_comm_rank(const reprise_comm* comm) { return comm != nullptr ? comm->comm.rank().value() : -1; }

int reprise_comm_size(const reprise_comm* comm) { return comm != nullptr ? comm->comm.size() : 0; }

int reprise_comm_original_rank(const reprise_comm* comm) {
  return comm != nullptr ? comm->comm.original_rank().value() : -1;
}

int reprise_comm_original_size(const reprise_comm* comm) { return comm != nullptr ? comm->comm.original_size() : 0; }

int reprise_comm_is_replacement(const reprise_comm* comm) {
  return comm != nullptr && comm->comm.is_replacement() ? 1 : 0;
}

int reprise_comm_migrated_in(const reprise_comm* comm) { return comm != nullptr && comm->comm.migrated_in() ? 1 : 0; }

reprise_status reprise_comm_check(reprise_comm* comm, int mpi_result, const char* what) {
  if (mpi_result == MPI_SUCCESS) return REPRISE_OK;
  return guarded(what != nullptr ? what : "MPI",
                 [&] { checked(comm, "comm").comm.check(mpi_result, what != nullptr ? what : "MPI"); });
}

reprise_status reprise_comm_revoke(reprise_comm* comm) {
  return guarded("reprise_comm_revoke", [&] { checked(comm, "comm").comm.revoke(); });
}

reprise_status reprise_comm_shrink(reprise_comm* comm) {
  return guarded("reprise_comm_shrink", [&] {
    auto& handle = checked(comm, "comm");
    handle.comm = handle.comm.shrink();
  });
}

reprise_status reprise_comm_respawn(reprise_comm* comm) {
  return guarded("reprise_comm_respawn", [&] {
    auto& handle = checked(comm, "comm");
    handle.comm = handle.comm.respawn();
  });
}

reprise_status reprise_heartbeat_create(reprise_comm* comm, const reprise_heartbeat_config* config,
                                        reprise_heartbeat** heartbeat) {
  return guarded("reprise_heartbeat_create", [&] {
    reprise::HeartbeatConfig settings;
    if (config != nullptr) {
      settings.period_seconds = reprise::capi::or_default(config->period_seconds, settings.period_seconds);
      settings.timeout_seconds = reprise::capi::or_default(config->timeout_seconds, settings.timeout_seconds);
    }
    auto& where = checked(heartbeat, "heartbeat");
    where = new reprise_heartbeat{reprise::Heartbeat(checked(comm, "comm").comm, settings)};
  });
}

void reprise_heartbeat_free(reprise_heartbeat* heartbeat) { delete heartbeat; }

reprise_status reprise_heartbeat_restart(reprise_heartbeat* heartbeat) {
  return guarded("reprise_heartbeat_restart", [&] { checked(heartbeat, "heartbeat").heartbeat.restart(); });
}

size_t reprise_heartbeat_declared_hung(const reprise_heartbeat* heartbeat, int* ranks, size_t capacity) {
  if (heartbeat == nullptr) return 0;
  return reprise::capi::copy_out(reprise::capi::plain_ranks(heartbeat->heartbeat.declared_hung()), ranks, capacity);
}

reprise_status reprise_faults_from_env(const char* variable, int processes, reprise_faults** faults) {
  return guarded("reprise_faults_from_env", [&] {
    auto schedule = reprise::inject::Schedule::from_env(variable != nullptr ? variable : "REPRISE_FAULTS");
    schedule.validate(processes);
    checked(faults, "faults") = new reprise_faults{std::move(schedule)};
  });
}

void reprise_faults_free(reprise_faults* faults) { delete faults; }

void reprise_faults_apply(const reprise_faults* faults, const reprise_comm* comm, uint64_t step) {
  if (faults == nullptr || comm == nullptr) return;
  faults->schedule.apply(comm->comm.original_rank(), step, comm->comm.is_replacement());
}

}  // extern "C"
