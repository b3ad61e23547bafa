// The C interface: the block store, the disk level and live migration.
#include <string>
#include <vector>

#include "handles.hpp"

using reprise::capi::checked;
using reprise::capi::guarded;
using reprise::capi::or_default;

namespace {

std::vector<reprise::BlockRange> ranges_of(const reprise_block_range* ranges, std::size_t count) {
  if (ranges == nullptr && count > 0)
    reprise::capi::refuse("the ranges are NULL but count is " + std::to_string(count));
  std::vector<reprise::BlockRange> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) result.push_back({{ranges[i].begin}, {ranges[i].end}});
  return result;
}

template <class Byte>
std::span<Byte> memory_of(Byte* data, std::size_t bytes) {
  if (data == nullptr && bytes > 0) reprise::capi::refuse("the data are NULL but bytes is " + std::to_string(bytes));
  return {data, bytes};
}

reprise::StoreConfig store_config_of(const reprise_store_config* config) {
  if (config == nullptr) reprise::capi::refuse("config is NULL: give at least the block size (block_bytes)");
  reprise::StoreConfig result;
  result.copies = or_default(config->copies, result.copies);
  result.block_bytes = config->block_bytes;
  result.bytes_per_permuted_range = config->bytes_per_permuted_range;
  result.seed = config->seed;
  result.join_timeout_seconds = or_default(config->join_timeout_seconds, result.join_timeout_seconds);
  return result;
}

reprise::DiskLevelConfig disk_config_of(const reprise_disk_level_config* config) {
  if (config == nullptr || config->directory == nullptr) {
    reprise::capi::refuse("no directory: give the directory the disk level writes to (config->directory)");
  }
  reprise::DiskLevelConfig result;
  result.directory = config->directory;
  result.every = or_default(config->every, result.every);
  result.keep = or_default(config->keep, result.keep);
  return result;
}

reprise::MigrationConfig migration_config_of(const reprise_migration_config* config) {
  reprise::MigrationConfig result;
  if (config == nullptr) return result;
  if (config->hosts != nullptr) result.hosts = config->hosts;
  if (config->signal == -1) result.signal = 0;  // no handler
  if (config->signal > 0) result.signal = config->signal;
  return result;
}

}  // namespace

extern "C" {

reprise_status reprise_store_create(reprise_comm* comm, const reprise_store_config* config, reprise_store** store) {
  return guarded("reprise_store_create", [&] {
    const auto settings = store_config_of(config);
    auto& where = checked(store, "store");
    where = new reprise_store{reprise::Store(checked(comm, "comm").comm, settings)};
  });
}

void reprise_store_free(reprise_store* store) { delete store; }

reprise_status reprise_store_submit(reprise_store* store, reprise_block_range mine, const void* data, size_t bytes) {
  return guarded("reprise_store_submit", [&] {
    checked(store, "store")
        .store.submit({{mine.begin}, {mine.end}}, memory_of(static_cast<const std::byte*>(data), bytes));
  });
}

reprise_status reprise_store_load(reprise_store* store, const reprise_block_range* wanted, size_t count, void* into,
                                  size_t bytes) {
  return guarded("reprise_store_load", [&] {
    const auto ranges = ranges_of(wanted, count);
    checked(store, "store").store.load(ranges, memory_of(static_cast<std::byte*>(into), bytes));
  });
}

reprise_status reprise_store_heal(reprise_store* store) {
  return guarded("reprise_store_heal", [&] { checked(store, "store").store.heal(); });
}

reprise_status reprise_disk_level_create(reprise_comm* comm, reprise_checkpoint* checkpoint,
                                         const reprise_disk_level_config* config, reprise_disk_level** disk) {
  return guarded("reprise_disk_level_create", [&] {
    auto settings = disk_config_of(config);
    auto& where = checked(disk, "disk");
    where = new reprise_disk_level{reprise::DiskLevel(
        checked(comm, "comm").comm, checked(checkpoint, "checkpoint").checkpoint, std::move(settings))};
  });
}

void reprise_disk_level_free(reprise_disk_level* disk) { delete disk; }

reprise_status reprise_disk_level_restart(reprise_disk_level* disk, reprise_restart* restart) {
  return guarded("reprise_disk_level_restart", [&] {
    const auto found = checked(disk, "disk").disk.restart();
    if (restart != nullptr) {
      *restart = {static_cast<reprise_restart_outcome>(found.outcome), found.version, found.old_world_size};
    }
  });
}

reprise_status reprise_disk_level_load_blocks(reprise_disk_level* disk, const char* name,
                                              const reprise_block_range* wanted, size_t count, void* into,
                                              size_t bytes) {
  return guarded("reprise_disk_level_load_blocks", [&] {
    if (name == nullptr) reprise::capi::refuse("name is NULL: give the name the blocks were protected under");
    const auto ranges = ranges_of(wanted, count);
    checked(disk, "disk").disk.load_blocks(name, ranges, memory_of(static_cast<std::byte*>(into), bytes));
  });
}

reprise_status reprise_disk_level_load_progress(reprise_disk_level* disk) {
  return guarded("reprise_disk_level_load_progress", [&] { checked(disk, "disk").disk.load_progress(); });
}

reprise_status reprise_disk_level_fetch(const reprise_disk_level* disk, const int* ranks, size_t count,
                                        reprise_saved_states** states) {
  return guarded("reprise_disk_level_fetch", [&] {
    const auto wanted = reprise::capi::original_ranks(ranks, count);
    auto& where = checked(states, "states");
    where = new reprise_saved_states{checked(disk, "disk").disk.fetch(wanted)};
  });
}

reprise_status reprise_migration_create(reprise_comm* comm, reprise_checkpoint* checkpoint,
                                        const reprise_migration_config* config, reprise_migration** migration) {
  return guarded("reprise_migration_create", [&] {
    auto settings = migration_config_of(config);
    auto& where = checked(migration, "migration");
    where = new reprise_migration{reprise::Migration(
        checked(comm, "comm").comm, checked(checkpoint, "checkpoint").checkpoint, std::move(settings))};
  });
}

void reprise_migration_free(reprise_migration* migration) { delete migration; }

reprise_status reprise_migration_request(reprise_migration* migration, const int* ranks, size_t count) {
  return guarded("reprise_migration_request", [&] {
    checked(migration, "migration").migration.request(reprise::capi::original_ranks(ranks, count));
  });
}

reprise_status reprise_migration_poll(reprise_migration* migration, int* moved) {
  return guarded("reprise_migration_poll", [&] {
    const bool happened = checked(migration, "migration").migration.poll();
    if (moved != nullptr) *moved = happened ? 1 : 0;
  });
}

reprise_status reprise_migration_attach(reprise_migration* migration, reprise_driver* driver) {
  return guarded("reprise_migration_attach",
                 [&] { checked(migration, "migration").migration.attach(checked(driver, "driver").driver); });
}

reprise_status reprise_migration_arrive(reprise_migration* migration) {
  return guarded("reprise_migration_arrive", [&] { checked(migration, "migration").migration.arrive(); });
}

}  // extern "C"
