// Fault-tolerant k-means (the application of the ReStore paper). Every
// process owns points and keeps them in the replicated block store. All start
// from the same centers; processes are killed for real at random iterations;
// the survivors heal the communicator, split the dead processes' points
// evenly, load them from the store, and redo the iteration. At the end one
// process runs the same k-means alone on all points, without failures, and
// the centers must agree.
//
//   kmeans_demo [--points-per-process N] [--dims D] [--clusters K]
//               [--iterations I] [--kills F] [--copies R] [--seed S]
//
// REPRISE_FAULTS="RANK@ITERATION,..." replaces the random schedule
// ("nodeK@ITERATION": every process of node K at once).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common/demo_support.hpp"
#include "reprise/reprise.hpp"

namespace {

struct Options {
  std::uint64_t points_per_process = 20000;
  std::size_t dims = 8;
  std::size_t clusters = 10;
  std::uint64_t iterations = 60;
  int kills = 2;
  int copies = 3;
  demo::MovePlan move;
  std::uint64_t seed = std::random_device{}();
};

Options parse(int argc, char** argv) {
  Options options;
  demo::parse_demo_flags(
      argc, argv,
      {"kmeans_demo",
       "k-means whose points live in reprise's replicated store; processes are killed for real and the\n"
       "survivors must finish with the centers of a failure-free run. REPRISE_FAULTS=\"RANK@ITERATION,...\"\n"
       "replaces the random kills (\"nodeK@ITERATION\": every process of node K at once). A process sent\n"
       "SIGUSR1 (reprise-run --migrate) or named by --move moves to a new process between two iterations.",
       "iterations"},
      options,
      {demo::number_flag("--points-per-process", "points each process owns", options.points_per_process),
       demo::number_flag("--dims", "dimensions of a point", options.dims),
       demo::number_flag("--clusters", "clusters", options.clusters),
       demo::number_flag("--iterations", "iterations", options.iterations),
       demo::number_flag("--copies", "copies of every point in the store", options.copies),
       demo::move_flag(options.move)});
  return options;
}

double unit(std::uint64_t x) {
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return static_cast<double>((x ^ (x >> 31U)) >> 11U) * 0x1.0p-53;
}

/// Point `id`: near one of `clusters` fixed centres, deterministic.
void make_point(std::uint64_t id, const Options& options, double* point) {
  const std::uint64_t cluster = id % options.clusters;
  for (std::size_t d = 0; d < options.dims; ++d) {
    const double centre = 10.0 * unit(cluster * 1000 + d);
    point[d] = centre + unit(id * 64 + d + 7) - 0.5;
  }
}

/// One k-means step over `points` (n x dims): per-centre sums and counts.
std::vector<double> partial_sums(const std::vector<double>& points, const std::vector<double>& centers,
                                 const Options& options) {
  const std::size_t k = options.clusters;
  const std::size_t d = options.dims;
  std::vector<double> sums(k * (d + 1), 0.0);
  for (std::size_t p = 0; p < points.size() / d; ++p) {
    const double* point = &points[p * d];
    std::size_t best = 0;
    double best_distance = INFINITY;
    for (std::size_t c = 0; c < k; ++c) {
      double distance = 0;
      for (std::size_t j = 0; j < d; ++j) distance += (point[j] - centers[c * d + j]) * (point[j] - centers[c * d + j]);
      if (distance < best_distance) {
        best_distance = distance;
        best = c;
      }
    }
    for (std::size_t j = 0; j < d; ++j) sums[best * (d + 1) + j] += point[j];
    sums[best * (d + 1) + d] += 1.0;
  }
  return sums;
}

void update_centers(const std::vector<double>& sums, std::vector<double>& centers, const Options& options) {
  const std::size_t d = options.dims;
  for (std::size_t c = 0; c < options.clusters; ++c) {
    const double count = sums[c * (d + 1) + d];
    if (count == 0) continue;
    for (std::size_t j = 0; j < d; ++j) centers[c * d + j] = sums[c * (d + 1) + j] / count;
  }
}

std::vector<double> initial_centers(const Options& options) {
  std::vector<double> centers(options.clusters * options.dims);
  // The first points of the job, one per cluster: the same on every process.
  for (std::size_t c = 0; c < options.clusters; ++c) make_point(c * 7919 + 1, options, &centers[c * options.dims]);
  return centers;
}

/// What the iterations work on, shared by the steps of main.
struct Run {
  reprise::Comm& comm;
  const Options& options;
  reprise::Store& store;
  reprise::Ownership& owners;
  std::vector<double>& points;
  std::vector<double>& centers;
  std::uint64_t& iteration;
};

void announce(const Run& run, const reprise::inject::Schedule& schedule) {
  if (run.comm.rank().value() != 0 || run.comm.migrated_in()) return;
  const Options& options = run.options;
  std::printf("reprise k-means: %d processes, %llu points in %zu dimensions, %zu clusters, %llu iterations, "
              "%d copies of every point in the store\n",
              run.comm.size(), static_cast<unsigned long long>(run.store.blocks()), options.dims, options.clusters,
              static_cast<unsigned long long>(options.iterations), options.copies);
  std::printf("  fault plan (original rank@iteration, seed %llu): %s\n", static_cast<unsigned long long>(options.seed),
              schedule.to_string().c_str());
  std::fflush(stdout);
}

/// Live migration: what a moving process takes along (one copy: the store
/// keeps the points safe, this is only the image a move sends).
void protect_for_moves(reprise::Checkpoint& state, const Run& run) {
  state.protect("points", run.points);
  state.protect("centers", run.centers);
  state.protect("iteration", run.iteration);
  reprise::Ownership& owners = run.owners;
  state.protect(
      "owners",
      [&owners](std::vector<std::byte>& out) {
        const auto bytes = std::as_bytes(std::span(owners.entries()));
        out.insert(out.end(), bytes.begin(), bytes.end());
      },
      [&owners](std::span<const std::byte> bytes) {
        std::vector<reprise::Ownership::Entry> entries(bytes.size() / sizeof(reprise::Ownership::Entry));
        std::memcpy(entries.data(), bytes.data(), entries.size() * sizeof(reprise::Ownership::Entry));
        owners.assign(std::move(entries));
      });
}

/// Prints what moving cost, in the leaving process and in its successor.
void report_moves(reprise::Migration& migration, const Run& run) {
  const auto me = run.comm.original_rank();
  migration.before_leaving([me](const reprise::MigrationTimes& times) {
    std::printf("  #%d leaves: image of %.2f MiB built in %.1f ms, free to exit %.1f ms after the request\n",
                me.value(), static_cast<double>(times.image_bytes) / (1 << 20), 1e3 * times.image_build_s,
                1e3 * times.evacuation_s);
    std::fflush(stdout);
  });
  if (!run.comm.migrated_in()) return;
  migration.arrive();
  run.store.heal();  // takes over the copies its predecessor held
  const auto& times = migration.last_times();
  std::printf("  #%d runs again in another process (%s) at iteration %llu: image opened in %.2f ms, state restored "
              "in %.1f ms, %.1f ms after the request\n",
              me.value(), demo::process_place().c_str(), static_cast<unsigned long long>(run.iteration),
              1e3 * times.image_open_s, 1e3 * times.restore_s, 1e3 * times.response_s);
  std::fflush(stdout);
}

/// One iteration, with its safe point before; false if a process failed.
bool iterate(const Run& run, reprise::Migration& migration, const reprise::inject::Schedule& schedule) {
  const auto me = run.comm.original_rank();
  // A safe point: processes may move here, and the new ones take their
  // predecessors' copies over. A failure during it is recovered like one
  // during the iteration.
  if (!run.comm.attempt([&] {
        if (migration.poll()) run.store.heal();
      })) {
    return false;
  }
  if (run.options.move.due(me, run.iteration)) migration.request();
  schedule.apply(me, run.iteration, run.comm.is_replacement());
  auto sums = partial_sums(run.points, run.centers, run.options);
  if (!run.comm.attempt([&] { run.comm.allreduce(std::span(sums), MPI_SUM); })) return false;
  update_centers(sums, run.centers, run.options);
  ++run.iteration;
  return true;
}

/// The original ranks of `before` that are not in `comm`, as "#1, #5".
std::string departed(const std::vector<reprise::OriginalRank>& before, const reprise::Comm& comm) {
  std::string lost;
  for (auto rank : before) {
    if (!comm.rank_of(rank)) lost += (lost.empty() ? "#" : ", #") + std::to_string(rank.value());
  }
  return lost;
}

void report_data_lost(const Run& run, const std::string& lost, const reprise::DataLost& error) {
  if (run.comm.rank().value() != 0) return;
  std::string points_lost;
  for (const auto& range : error.lost()) {
    points_lost += (points_lost.empty() ? "[" : ", [") + std::to_string(range.begin.value) + ", " +
                   std::to_string(range.end.value) + ")";
  }
  std::fprintf(stderr,
               "kmeans_demo: iteration %llu: lost %s, and with them every copy of points %s: %d "
               "holders of a point failed faster than the store could copy it again\n",
               static_cast<unsigned long long>(run.iteration), lost.c_str(), points_lost.c_str(), run.options.copies);
}

/// Shrink, bring every point back to `copies` copies (so that the next
/// failure finds them again), then take over the dead processes' points.
/// DataLost when every copy of some points is gone.
void recover(const Run& run) {
  const auto shrink_start = std::chrono::steady_clock::now();
  const std::vector<reprise::OriginalRank> before = run.comm.members();
  run.comm = run.comm.shrink();
  const double shrink_ms = 1e3 * demo::seconds_since(shrink_start);
  const std::string lost = departed(before, run.comm);
  const auto heal_start = std::chrono::steady_clock::now();
  const auto share = run.owners.adopt_departed(run.comm);
  std::uint64_t blocks = 0;
  for (const auto& range : share) blocks += range.size();
  const auto old_size = run.points.size();
  run.points.resize(old_size + blocks * run.options.dims);
  try {
    run.store.heal();
    run.store.load(share, std::as_writable_bytes(std::span(run.points).subspan(old_size)));
  } catch (const reprise::DataLost& error) {
    report_data_lost(run, lost, error);
    throw;
  }
  const double heal_ms = 1e3 * run.comm.allreduce(demo::seconds_since(heal_start), MPI_MAX);
  const auto reloaded = run.comm.allreduce(blocks, MPI_SUM);
  if (run.comm.rank().value() == 0) {
    const double mib = static_cast<double>(reloaded * run.options.dims * sizeof(double)) / (1 << 20);
    std::printf("  iteration %3llu: lost %s; shrank in %.1f ms; %d survivors re-replicated the store and "
                "reloaded its %.2f MiB of points in %.1f ms and redo the iteration\n",
                static_cast<unsigned long long>(run.iteration), lost.c_str(), shrink_ms, run.comm.size(), mib, heal_ms);
    std::fflush(stdout);
  }
}

/// Process 0 compares the centers with the same k-means on all points on one
/// process, no failures; every process learns the verdict.
bool matches_reference(const Run& run, double elapsed) {
  int correct = 0;
  const Options& options = run.options;
  if (run.comm.rank().value() == 0) {
    std::vector<double> all(run.store.blocks() * options.dims);
    for (std::uint64_t id = 0; id < run.store.blocks(); ++id) make_point(id, options, &all[id * options.dims]);
    auto reference = initial_centers(options);
    for (std::uint64_t it = 0; it < options.iterations; ++it)
      update_centers(partial_sums(all, reference, options), reference, options);
    double worst = 0;
    for (std::size_t j = 0; j < run.centers.size(); ++j)
      worst = std::max(worst, std::abs(run.centers[j] - reference[j]));
    correct = worst <= 1e-9 ? 1 : 0;
    std::printf("  centers vs. a failure-free run on one process: largest difference %.1e -> %s\n", worst,
                correct != 0 ? "CORRECT" : "WRONG");
    // Every bit of the centers, so that two runs can be compared exactly
    // (FNV-1a over their bytes).
    std::uint64_t digest = 0xcbf29ce484222325ULL;
    for (const std::byte byte : std::as_bytes(std::span(run.centers))) {
      digest = (digest ^ static_cast<std::uint64_t>(byte)) * 0x100000001b3ULL;
    }
    std::printf("  centers digest %016llx\n", static_cast<unsigned long long>(digest));
    std::printf("  %d of %d processes finished %llu iterations in %.2f s\n", run.comm.size(), run.comm.original_size(),
                static_cast<unsigned long long>(options.iterations), elapsed);
    std::fflush(stdout);
  }
  run.comm.bcast(correct, reprise::Rank{0});
  return correct != 0;
}

int run_demo(demo::Demo<Options>& begun) {
  reprise::Comm& comm = begun.comm;
  const auto me = comm.original_rank();
  const Options& options = begun.options;
  const reprise::inject::Schedule& schedule = begun.schedule;
  auto range_of = [&](reprise::OriginalRank rank) {
    const auto first = static_cast<std::uint64_t>(rank.value()) * options.points_per_process;
    return reprise::BlockRange{reprise::BlockId{first}, reprise::BlockId{first + options.points_per_process}};
  };

  // My points, kept in the store with `copies` copies. A process started by
  // a migration gets its predecessor's points, table and progress instead.
  std::vector<double> points;
  reprise::Store store(comm, {.copies = options.copies, .block_bytes = options.dims * sizeof(double)});
  if (!comm.migrated_in()) {
    points.resize(options.points_per_process * options.dims);
    for (std::uint64_t i = 0; i < options.points_per_process; ++i) {
      make_point(range_of(me).begin.value + i, options, &points[i * options.dims]);
    }
    store.submit(range_of(me), std::as_bytes(std::span(points)));
  }
  // Who computes on which points: the same table on every process. A process
  // that dies takes adopted points with it too; its successors split them all.
  reprise::Ownership owners(comm, range_of);
  auto centers = initial_centers(options);
  std::uint64_t iteration = 0;
  const Run run{comm, options, store, owners, points, centers, iteration};
  announce(run, schedule);
  reprise::Checkpoint state(comm, {.copies = 1});
  protect_for_moves(state, run);
  reprise::Migration migration(comm, state);
  report_moves(migration, run);
  const auto start = std::chrono::steady_clock::now();
  while (iteration < options.iterations) {
    if (iterate(run, migration, schedule)) continue;
    try {
      recover(run);
    } catch (const reprise::DataLost& error) {
      return demo::finish(begun.environment, me, false, error.what(), 3);
    }
  }
  const bool correct = matches_reference(run, demo::seconds_since(start));
  return demo::finish(begun.environment, me, correct, "centers differ from the failure-free run");
}

}  // namespace

int main(int argc, char** argv) {
  return demo::main_of<Options>(
      argc, argv, parse, [](const Options& o) { return o.iterations; }, run_demo);
}
