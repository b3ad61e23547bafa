// The C interface: incremental checkpoints of protected memory, into a
// directory or into other processes' memory.
#include <memory>
#include <string>

#include "handles.hpp"
#include "reprise/memory_sink.hpp"
#include "reprise/protected_memory.hpp"

using reprise::capi::checked;
using reprise::capi::guarded;
using reprise::capi::or_default;

namespace {

constexpr reprise_commit_mode kLastCommitMode = REPRISE_COMMIT_SYNC;

reprise::IncrementalConfig incremental_config_of(const reprise_incremental_config& config) {
  if (config.mode < REPRISE_COMMIT_ADAPTIVE || config.mode > kLastCommitMode) {
    reprise::capi::refuse("mode " + std::to_string(static_cast<int>(config.mode)) +
                          " is not REPRISE_COMMIT_ADAPTIVE, REPRISE_COMMIT_ADDRESS or REPRISE_COMMIT_SYNC");
  }
  constexpr reprise::CommitMode kModes[] = {reprise::CommitMode::kAsyncAdaptive, reprise::CommitMode::kAsyncAddress,
                                            reprise::CommitMode::kSync};
  reprise::IncrementalConfig result;
  result.mode = kModes[config.mode];
  result.cow_bytes = or_default(config.cow_bytes, result.cow_bytes);
  return result;
}

// Where the versions go: the directory, else the memory of `comm`'s processes.
std::unique_ptr<reprise::IncrementalSink> sink_of(reprise_comm* comm, const reprise_incremental_config& config) {
  if (config.directory != nullptr)
    return std::make_unique<reprise::DirectorySink>(config.directory, config.keep_versions);
  if (comm == nullptr) {
    reprise::capi::refuse("comm is NULL and config has no directory: pass the communicator whose processes keep "
                          "the versions in memory, or a directory");
  }
  return std::make_unique<reprise::MemorySink>(comm->comm, or_default(config.copies, 2));
}

}  // namespace

extern "C" {

reprise_status reprise_protected_alloc(size_t bytes, void** memory) {
  return guarded("reprise_protected_alloc", [&] {
    auto& where = checked(memory, "memory");
    where = reprise::protected_alloc(bytes);
  });
}

reprise_status reprise_protected_free(void* memory) {
  return guarded("reprise_protected_free", [&] {
    if (memory != nullptr) reprise::protected_free(memory);
  });
}

reprise_status reprise_incremental_create(reprise_comm* comm, const reprise_incremental_config* config,
                                          reprise_incremental** incremental) {
  return guarded("reprise_incremental_create", [&] {
    const reprise_incremental_config given = config != nullptr ? *config : reprise_incremental_config{};
    const auto settings = incremental_config_of(given);
    auto& where = checked(incremental, "incremental");
    where = new reprise_incremental{reprise::IncrementalCheckpoint(sink_of(comm, given), settings)};
  });
}

void reprise_incremental_free(reprise_incremental* incremental) { delete incremental; }

reprise_status reprise_incremental_protect(reprise_incremental* incremental, void* data, size_t bytes) {
  return guarded("reprise_incremental_protect", [&] {
    if (data == nullptr) reprise::capi::refuse("data is NULL: pass memory from reprise_protected_alloc");
    checked(incremental, "incremental").checkpoint.protect({static_cast<std::byte*>(data), bytes});
  });
}

reprise_status reprise_incremental_commit(reprise_incremental* incremental, uint64_t* version) {
  return guarded("reprise_incremental_commit", [&] {
    const auto started = checked(incremental, "incremental").checkpoint.checkpoint();
    if (version != nullptr) *version = started;
  });
}

reprise_status reprise_incremental_wait(reprise_incremental* incremental, reprise_incremental_stats* stats) {
  return guarded("reprise_incremental_wait", [&] {
    const auto& done = checked(incremental, "incremental").checkpoint.wait();
    if (stats != nullptr) {
      *stats = {done.version, done.pages_committed, done.cow,          done.wait,
                done.avoided, done.after,           done.wait_seconds, done.commit_seconds};
    }
  });
}

reprise_status reprise_incremental_restore(reprise_incremental* incremental, uint64_t* version) {
  return guarded("reprise_incremental_restore", [&] {
    const auto restored = checked(incremental, "incremental").checkpoint.restore();
    if (version != nullptr) *version = restored.version;
  });
}

uint64_t reprise_incremental_version(const reprise_incremental* incremental) {
  return incremental != nullptr ? incremental->checkpoint.version() : 0;
}

}  // extern "C"
