// What the C interface's opaque handles hold (include/reprise/reprise.h).
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/disk_level.hpp"
#include "reprise/driver.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/incremental.hpp"
#include "reprise/inject.hpp"
#include "reprise/migration.hpp"
#include "reprise/reprise.h"
#include "reprise/store.hpp"
#include "status.hpp"

struct reprise_comm {
  reprise::Comm comm;
};

struct reprise_checkpoint {
  reprise::Checkpoint checkpoint;
};

struct reprise_bytes {
  std::vector<std::byte>& out;
};

struct reprise_saved_states {
  std::map<reprise::OriginalRank, reprise::SavedState> states;
};

struct reprise_driver {
  reprise::Driver driver;
};

struct reprise_heartbeat {
  reprise::Heartbeat heartbeat;
};

struct reprise_incremental {
  reprise::IncrementalCheckpoint checkpoint;
};

struct reprise_store {
  reprise::Store store;
};

struct reprise_disk_level {
  reprise::DiskLevel disk;
};

struct reprise_migration {
  reprise::Migration migration;
};

struct reprise_faults {
  reprise::inject::Schedule schedule;
};

namespace reprise::capi {

/// `handle`, or `UsageError` naming what `call` was given as NULL.
template <class Handle>
Handle& checked(Handle* handle, const char* what) {
  if (handle == nullptr) refuse(std::string(what) + " is NULL: pass a handle made by its reprise_*_create call");
  return *handle;
}

/// Copies up to `capacity` of `values` into `out` (may be NULL when
/// `capacity` is 0); returns how many there are.
template <class T>
std::size_t copy_out(const std::vector<T>& values, T* out, std::size_t capacity) {
  for (std::size_t i = 0; i < values.size() && i < capacity && out != nullptr; ++i) out[i] = values[i];
  return values.size();
}

/// Original ranks as the C interface gives them.
std::vector<int> plain_ranks(const std::vector<OriginalRank>& ranks);

/// The `count` original ranks at `ranks`; `UsageError` if `ranks` is NULL
/// but `count` is not 0.
std::vector<OriginalRank> original_ranks(const int* ranks, std::size_t count);

/// The end of `reprise_run`: this thread's last error in one line naming the
/// process when `failed` is nonzero (the process recorded as failed), and MPI
/// finalised when the process exits, as `reprise_finalize` does, with the
/// status it exits with (nothing then if the program finalised before).
/// Returns the exit status for `main`: 0, or 1 when `failed` is nonzero.
int end_at_exit(int failed);

/// `value`, or `fallback` when it is zero (the C configurations' "default").
template <class T>
T or_default(T value, T fallback) {
  return value == T{} ? fallback : value;
}

}  // namespace reprise::capi
