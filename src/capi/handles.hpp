// What the C interface's opaque handles hold (include/reprise/reprise.h).
#pragma once

#include <optional>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/disk_level.hpp"
#include "reprise/driver.hpp"
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

struct reprise_driver {
  reprise::Driver driver;
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

/// `value`, or `fallback` when it is zero (the C configurations' "default").
template <class T>
T or_default(T value, T fallback) {
  return value == T{} ? fallback : value;
}

}  // namespace reprise::capi
