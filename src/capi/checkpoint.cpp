// The C interface: checkpoints and the recovery driver.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "handles.hpp"

using reprise::capi::checked;
using reprise::capi::guarded;
using reprise::capi::or_default;

namespace {

constexpr reprise_element_type kLastElementType = REPRISE_FLOAT64;

std::string name_of(const char* name) {
  if (name == nullptr) reprise::capi::refuse("name is NULL: pass the name to protect the memory under");
  return name;
}

std::span<std::byte> memory_of(void* data, std::size_t bytes) {
  if (data == nullptr && bytes > 0) reprise::capi::refuse("data is NULL but bytes is " + std::to_string(bytes));
  return {static_cast<std::byte*>(data), bytes};
}

reprise::ElementType element_type_of(reprise_element_type type) {
  if (type < REPRISE_INT8 || type > kLastElementType) {
    reprise::capi::refuse("element type " + std::to_string(static_cast<int>(type)) +
                          " is not one of reprise_element_type's (REPRISE_INT8 ... REPRISE_FLOAT64)");
  }
  return static_cast<reprise::ElementType>(type);  // the same order, kBytes being 0
}

reprise::DriverConfig driver_config_of(const reprise_driver_config* config) {
  reprise::DriverConfig result;
  if (config == nullptr) return result;
  if (config->mode < REPRISE_RESPAWN || config->mode > REPRISE_REPLAY) {
    reprise::capi::refuse("mode " + std::to_string(static_cast<int>(config->mode)) +
                          " is not REPRISE_RESPAWN, REPRISE_SHRINK or REPRISE_REPLAY");
  }
  result.mode = static_cast<reprise::RecoveryMode>(config->mode);
  result.max_recoveries = or_default(config->max_recoveries, result.max_recoveries);
  const int snapshots = config->snapshots_per_interval;
  result.cadence = {
      .every_steps = config->every_steps,
      .every_seconds = config->every_seconds,
      .mtbf_seconds = config->mtbf_seconds,
      .snapshots_per_interval = snapshots == 0 ? reprise::Cadence::kDefaultSnapshots : std::max(snapshots, 0)};
  result.inject_faults = config->inject_faults != 0;
  return result;
}

// The program's save and load functions, as a Checkpoint's serializer pair.
reprise::Checkpoint::Save save_calling(reprise_save_function save, void* user, const std::string& name) {
  return [save, user, name](std::vector<std::byte>& out) {
    reprise_bytes bytes{out};
    reprise::capi::last_error().exception = nullptr;
    const int result = save(&bytes, user);
    if (result != 0) reprise::capi::raise_returned(result, "the save function of \"" + name + "\"");
  };
}

reprise::Checkpoint::Load load_calling(reprise_load_function load, void* user, const std::string& name) {
  return [load, user, name](std::span<const std::byte> bytes) {
    reprise::capi::last_error().exception = nullptr;
    const int result = load(bytes.data(), bytes.size(), user);
    if (result != 0) reprise::capi::raise_returned(result, "the load function of \"" + name + "\"");
  };
}

// The program's recovery function, called with a C view of the recovery.
void call_recovery(reprise_recovery_function function, void* user, const reprise::Recovery& recovery) {
  std::vector<int> lost;
  for (const auto rank : recovery.lost) lost.push_back(rank.value());
  const reprise_recovery view{static_cast<reprise_recovery_mode>(recovery.mode),
                              lost.data(),
                              lost.size(),
                              recovery.epoch,
                              recovery.seconds,
                              recovery.attempts};
  reprise::capi::last_error().exception = nullptr;
  const int result = function(&view, user);
  if (result != 0) reprise::capi::raise_returned(result, "the recovery function");
}

}  // namespace

extern "C" {

reprise_status reprise_checkpoint_create(reprise_comm* comm, const reprise_checkpoint_config* config,
                                         reprise_checkpoint** checkpoint) {
  return guarded("reprise_checkpoint_create", [&] {
    reprise::CheckpointConfig settings;
    if (config != nullptr) {
      settings.copies = or_default(config->copies, settings.copies);
      settings.join_timeout_seconds = or_default(config->join_timeout_seconds, settings.join_timeout_seconds);
    }
    auto& where = checked(checkpoint, "checkpoint");
    where = new reprise_checkpoint{reprise::Checkpoint(checked(comm, "comm").comm, settings)};
  });
}

void reprise_checkpoint_free(reprise_checkpoint* checkpoint) { delete checkpoint; }

reprise_status reprise_checkpoint_protect(reprise_checkpoint* checkpoint, const char* name, void* data, size_t bytes) {
  return guarded("reprise_checkpoint_protect",
                 [&] { checked(checkpoint, "checkpoint").checkpoint.protect(name_of(name), memory_of(data, bytes)); });
}

reprise_status reprise_checkpoint_protect_array(reprise_checkpoint* checkpoint, const char* name, void* data,
                                                reprise_element_type type, size_t count) {
  return guarded("reprise_checkpoint_protect_array", [&] {
    const auto element = element_type_of(type);
    auto memory = memory_of(data, count * reprise::element_size(element));
    checked(checkpoint, "checkpoint").checkpoint.protect_array(name_of(name), memory, element);
  });
}

reprise_status reprise_checkpoint_protect_blocks(reprise_checkpoint* checkpoint, const char* name, size_t block_bytes,
                                                 reprise_block_range mine, void* data) {
  return guarded("reprise_checkpoint_protect_blocks", [&] {
    const reprise::BlockRange range{{mine.begin}, {mine.end}};
    if (mine.end < mine.begin) reprise::capi::refuse("mine ends before it begins");
    checked(checkpoint, "checkpoint")
        .checkpoint.protect_blocks(name_of(name), block_bytes, range, memory_of(data, range.size() * block_bytes));
  });
}

reprise_status reprise_checkpoint_commit(reprise_checkpoint* checkpoint, uint64_t* version) {
  return guarded("reprise_checkpoint_commit", [&] {
    const auto made = checked(checkpoint, "checkpoint").checkpoint.checkpoint();
    if (version != nullptr) *version = made;
  });
}

reprise_status reprise_checkpoint_restore(reprise_checkpoint* checkpoint) {
  return guarded("reprise_checkpoint_restore", [&] { checked(checkpoint, "checkpoint").checkpoint.restore(); });
}

uint64_t reprise_checkpoint_version(const reprise_checkpoint* checkpoint) {
  return checkpoint != nullptr ? checkpoint->checkpoint.version() : 0;
}

reprise_status reprise_bytes_append(reprise_bytes* out, const void* data, size_t bytes) {
  return guarded("reprise_bytes_append", [&] {
    auto& into = checked(out, "out").out;
    if (data == nullptr && bytes > 0) reprise::capi::refuse("data is NULL but bytes is " + std::to_string(bytes));
    const auto* first = static_cast<const std::byte*>(data);
    into.insert(into.end(), first, first + bytes);
  });
}

reprise_status reprise_checkpoint_protect_object(reprise_checkpoint* checkpoint, const char* name,
                                                 reprise_save_function save, reprise_load_function load, void* user) {
  return guarded("reprise_checkpoint_protect_object", [&] {
    if (save == nullptr || load == nullptr) {
      reprise::capi::refuse("save or load is NULL: pass the functions that save and load the object");
    }
    auto& handle = checked(checkpoint, "checkpoint");
    const auto named = name_of(name);
    handle.checkpoint.protect(named, save_calling(save, user, named), load_calling(load, user, named));
  });
}

size_t reprise_checkpoint_departed(const reprise_checkpoint* checkpoint, int* ranks, size_t capacity) {
  if (checkpoint == nullptr) return 0;
  return reprise::capi::copy_out(reprise::capi::plain_ranks(checkpoint->checkpoint.departed()), ranks, capacity);
}

reprise_status reprise_checkpoint_fetch(reprise_checkpoint* checkpoint, const int* ranks, size_t count,
                                        reprise_saved_states** states) {
  return guarded("reprise_checkpoint_fetch", [&] {
    const auto wanted = reprise::capi::original_ranks(ranks, count);
    auto& where = checked(states, "states");
    where = new reprise_saved_states{checked(checkpoint, "checkpoint").checkpoint.fetch(wanted)};
  });
}

void reprise_saved_states_free(reprise_saved_states* states) { delete states; }

reprise_status reprise_saved_states_piece(const reprise_saved_states* states, int rank, const char* name,
                                          const void** data, size_t* bytes) {
  return guarded("reprise_saved_states_piece", [&] {
    const auto& fetched = checked(states, "states").states;
    const auto found = fetched.find(reprise::OriginalRank{rank});
    if (found == fetched.end()) {
      reprise::capi::refuse("original rank " + std::to_string(rank) +
                            " was not fetched: pass it to reprise_checkpoint_fetch");
    }
    const auto piece = found->second.bytes(name_of(name));
    checked(data, "data") = piece.data();
    checked(bytes, "bytes") = piece.size();
  });
}

reprise_status reprise_driver_create(reprise_comm* comm, reprise_checkpoint* checkpoint,
                                     const reprise_driver_config* config, reprise_driver** driver) {
  return guarded("reprise_driver_create", [&] {
    const auto settings = driver_config_of(config);
    auto& where = checked(driver, "driver");
    where = new reprise_driver{
        reprise::Driver(checked(comm, "comm").comm, checked(checkpoint, "checkpoint").checkpoint, settings)};
  });
}

void reprise_driver_free(reprise_driver* driver) { delete driver; }

reprise_status reprise_driver_on_recovery(reprise_driver* driver, reprise_recovery_function recovery, void* user) {
  return guarded("reprise_driver_on_recovery", [&] {
    auto& handle = checked(driver, "driver");
    if (recovery == nullptr) {
      handle.driver.on_recovery({});
      return;
    }
    handle.driver.on_recovery([recovery, user](const reprise::Recovery& made) { call_recovery(recovery, user, made); });
  });
}

reprise_status reprise_driver_run(reprise_driver* driver, uint64_t steps, reprise_step_function step, void* user) {
  return guarded("reprise_driver_run", [&] {
    auto& handle = checked(driver, "driver");
    if (step == nullptr) reprise::capi::refuse("step is NULL: pass the function to call for each step");
    handle.driver.run(steps, [step, user](std::uint64_t number) {
      reprise::capi::last_error().exception = nullptr;
      const int result = step(number, user);
      if (result != 0) reprise::capi::raise_returned(result, "the step function at step " + std::to_string(number));
    });
  });
}

uint64_t reprise_driver_step(const reprise_driver* driver) { return driver != nullptr ? driver->driver.step() : 0; }

size_t reprise_driver_recoveries(const reprise_driver* driver) {
  return driver != nullptr ? driver->driver.recoveries().size() : 0;
}

reprise_status reprise_driver_watch(reprise_driver* driver, reprise_heartbeat* heartbeat) {
  return guarded("reprise_driver_watch",
                 [&] { checked(driver, "driver").driver.watch(checked(heartbeat, "heartbeat").heartbeat); });
}

}  // extern "C"
