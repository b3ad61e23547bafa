// 3D heat equation (a 7-point Jacobi stencil on a 3D decomposition) that
// survives real process kills: every few iterations the processes take a
// double in-memory checkpoint; processes are killed at random iterations;
// the recovery driver either respawns replacements (which load their block
// from a buddy) or shrinks and re-partitions the grid over the survivors,
// and everybody rolls back to the last checkpoint. Each point's update is
// the same expression in the same order however the grid is cut, so the
// final grid must equal a failure-free serial run bit for bit.
//
//   heat3d_demo [--n N] [--iterations I] [--checkpoint-every C]
//               [--kills F] [--copies C] [--mode respawn|shrink] [--seed S]
//
// With C copies of every checkpoint, any C - 1 processes may fail between
// two checkpoints; losing a process and all its buddies ends the run with
// a DataLost report.
//
// REPRISE_FAULTS="RANK@ITERATION,..." replaces the random schedule
// ("nodeK@ITERATION": every process of node K at once).

#include <mpi.h>

#include <array>
#include <chrono>
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
  std::int64_t n = 40;
  std::uint64_t iterations = 120;
  std::uint64_t checkpoint_every = 10;
  int kills = 2;
  int copies = 3;
  reprise::RecoveryMode mode = reprise::RecoveryMode::kRespawn;
  demo::MovePlan move;
  std::uint64_t seed = std::random_device{}();
};

Options parse(int argc, char** argv) {
  Options options;
  demo::Flag mode{"--mode",
                  "how to recover: respawn, shrink, or replay (only the lost process rolls back; run with "
                  "libreprise_msglog.so)",
                  "respawn", [&](const std::string& value) {
                    if (value == "respawn") options.mode = reprise::RecoveryMode::kRespawn;
                    else if (value == "shrink") options.mode = reprise::RecoveryMode::kShrink;
                    else if (value == "replay") options.mode = reprise::RecoveryMode::kReplay;
                    else throw reprise::UsageError("--mode " + value + " is none of respawn, shrink and replay");
                  }};
  demo::parse_demo_flags(
      argc, argv,
      {"heat3d_demo",
       "A 3D heat equation under reprise's Driver and Checkpoint; processes are killed for real and the\n"
       "final grid must equal a failure-free serial run bit for bit. REPRISE_FAULTS=\"RANK@ITERATION,...\"\n"
       "replaces the random kills (\"nodeK@ITERATION\": every process of node K at once);\n"
       "REPRISE_SPARES=S starts S of the processes as spares. A process sent SIGUSR1 (reprise-run --migrate)\n"
       "or named by --move moves to a new process at the next safe point, without stopping the others.",
       "iterations"},
      options,
      {demo::number_flag("--n", "grid points along each side", options.n),
       demo::number_flag("--iterations", "iterations", options.iterations),
       demo::number_flag("--checkpoint-every", "iterations between checkpoints", options.checkpoint_every),
       demo::number_flag("--copies", "copies of every checkpoint", options.copies), std::move(mode),
       demo::move_flag(options.move)});
  if (options.n < 2 || options.checkpoint_every == 0) {
    throw reprise::UsageError("heat3d_demo: --n must be at least 2 and --checkpoint-every at least 1");
  }
  if (options.mode == reprise::RecoveryMode::kReplay && options.move.rank >= 0) {
    throw reprise::UsageError("heat3d_demo: --move needs --mode respawn or shrink (a move negotiates with a "
                              "collective every iteration, which a replay does not serve)");
  }
  return options;
}

const char* mode_name(reprise::RecoveryMode mode) {
  switch (mode) {
    case reprise::RecoveryMode::kRespawn:
      return "respawn";
    case reprise::RecoveryMode::kShrink:
      return "shrink";
    case reprise::RecoveryMode::kReplay:
      break;
  }
  return "replay";
}

/// A box of grid points [lo, hi) in x, y, z.
struct Box {
  std::array<std::int64_t, 3> lo{};
  std::array<std::int64_t, 3> hi{};
  [[nodiscard]] std::int64_t extent(int d) const { return std::max<std::int64_t>(0, hi[d] - lo[d]); }
  [[nodiscard]] std::size_t points() const { return static_cast<std::size_t>(extent(0) * extent(1) * extent(2)); }
  [[nodiscard]] std::size_t index(std::int64_t x, std::int64_t y, std::int64_t z) const {
    return static_cast<std::size_t>(((z - lo[2]) * extent(1) + (y - lo[1])) * extent(0) + (x - lo[0]));
  }
};

Box intersect(const Box& a, const Box& b) {
  Box c;
  for (int d = 0; d < 3; ++d) {
    c.lo[d] = std::max(a.lo[d], b.lo[d]);
    c.hi[d] = std::min(a.hi[d], b.hi[d]);
  }
  return c;
}

/// The process grid for `p` processes, and the box of rank `r` in it.
struct Decomposition {
  std::array<int, 3> dims{};
  std::int64_t n = 0;
  Decomposition(int p, std::int64_t n_) : n(n_) { MPI_Dims_create(p, 3, dims.data()); }
  [[nodiscard]] std::array<int, 3> coords(int r) const {
    return {r % dims[0], (r / dims[0]) % dims[1], r / (dims[0] * dims[1])};
  }
  [[nodiscard]] int rank(std::array<int, 3> c) const { return (c[2] * dims[1] + c[1]) * dims[0] + c[0]; }
  [[nodiscard]] Box box(int r) const {
    const auto c = coords(r);
    Box b;
    for (int d = 0; d < 3; ++d) {
      b.lo[d] = n * c[d] / dims[d];
      b.hi[d] = n * (c[d] + 1) / dims[d];
    }
    return b;
  }
};

/// Fixed values outside the grid: the z = -1 face is hot, the rest cold.
double boundary(std::int64_t, std::int64_t, std::int64_t z) { return z < 0 ? 1.0 : 0.0; }

/// One Jacobi step of the box `box` whose values (with a one-point halo)
/// are in `old`; the same expression everywhere, so results do not depend
/// on how the grid is cut.
void jacobi(const Box& box, const std::vector<double>& old, std::vector<double>& next) {
  const std::int64_t ex = box.extent(0) + 2;
  const std::int64_t ey = box.extent(1) + 2;
  auto at = [&](std::int64_t x, std::int64_t y, std::int64_t z) {
    return static_cast<std::size_t>((z * ey + y) * ex + x);
  };
  for (std::int64_t z = 1; z <= box.extent(2); ++z) {
    for (std::int64_t y = 1; y <= box.extent(1); ++y) {
      for (std::int64_t x = 1; x <= box.extent(0); ++x) {
        next[at(x, y, z)] = (old[at(x, y, z)] + old[at(x - 1, y, z)] + old[at(x + 1, y, z)] + old[at(x, y - 1, z)] +
                             old[at(x, y + 1, z)] + old[at(x, y, z - 1)] + old[at(x, y, z + 1)]) /
                            7.0;
      }
    }
  }
}

/// One process's part of the grid: its box and values (interior only, what
/// the checkpoint keeps).
struct Part {
  std::vector<std::int64_t> box{0, 0, 0, 0, 0, 0};
  std::vector<double> values;

  [[nodiscard]] Box as_box() const { return {{box[0], box[1], box[2]}, {box[3], box[4], box[5]}}; }
  void set_box(const Box& b) { box = {b.lo[0], b.lo[1], b.lo[2], b.hi[0], b.hi[1], b.hi[2]}; }
};

/// Copies the values of `piece` (a box) out of `from` (values of box `from_box`).
std::vector<double> cut(const Box& piece, const Box& from_box, const std::vector<double>& from) {
  std::vector<double> out;
  out.reserve(piece.points());
  for (auto z = piece.lo[2]; z < piece.hi[2]; ++z)
    for (auto y = piece.lo[1]; y < piece.hi[1]; ++y)
      for (auto x = piece.lo[0]; x < piece.hi[0]; ++x) out.push_back(from[from_box.index(x, y, z)]);
  return out;
}

/// Copies the part's values into `halo` (its box plus a one-point layer
/// around it) and fills the layer: from the six neighbours, or with the
/// boundary values on the grid's faces.
void fill_halo(reprise::Comm& comm, const Decomposition& grid, const Part& part, std::vector<double>& halo) {
  const Box box = part.as_box();
  const std::array<std::int64_t, 3> extent{box.extent(0) + 2, box.extent(1) + 2, box.extent(2) + 2};
  auto at = [&](const std::array<std::int64_t, 3>& p) {
    return static_cast<std::size_t>((p[2] * extent[1] + p[1]) * extent[0] + p[0]);
  };
  for (auto z = box.lo[2]; z < box.hi[2]; ++z)
    for (auto y = box.lo[1]; y < box.hi[1]; ++y)
      for (auto x = box.lo[0]; x < box.hi[0]; ++x)
        halo[at({x - box.lo[0] + 1, y - box.lo[1] + 1, z - box.lo[2] + 1})] = part.values[box.index(x, y, z)];
  // Visits the points of layer `l` across dimension `d` (interior of the other two).
  auto layer = [&](int d, std::int64_t l, auto&& visit) {
    const int e = (d + 1) % 3;
    const int f = (d + 2) % 3;
    for (std::int64_t j = 1; j < extent[f] - 1; ++j)
      for (std::int64_t i = 1; i < extent[e] - 1; ++i) {
        std::array<std::int64_t, 3> p{};
        p[d] = l;
        p[e] = i;
        p[f] = j;
        visit(p);
      }
  };
  const auto me = grid.coords(comm.rank().value());
  auto inside = [&](const std::array<int, 3>& c) {
    for (int d = 0; d < 3; ++d) {
      if (c[d] < 0 || c[d] >= grid.dims[d]) return false;
    }
    return true;
  };
  for (int d = 0; d < 3; ++d) {
    for (int step : {-1, 1}) {
      // Send our edge layer towards `step`; receive the opposite neighbour's
      // edge into our halo layer on the other side.
      auto to = me;
      to[d] += step;
      auto from = me;
      from[d] -= step;
      const std::int64_t edge = step < 0 ? 1 : extent[d] - 2;
      const std::int64_t into = step < 0 ? extent[d] - 1 : 0;
      std::vector<double> out;
      if (inside(to)) layer(d, edge, [&](const auto& p) { out.push_back(halo[at(p)]); });
      std::vector<double> in;
      if (inside(from)) layer(d, into, [&](const auto&) { in.push_back(0.0); });
      // Blocking calls in parity order (even coordinates send first), so a
      // failed peer leaves no request behind.
      const int tag = 2 * d + (step < 0 ? 0 : 1);
      auto send = [&] {
        if (inside(to)) {
          comm.check(MPI_Send(out.data(), static_cast<int>(out.size()), MPI_DOUBLE, grid.rank(to), tag, comm.raw()),
                     "MPI_Send");
        }
      };
      auto receive = [&] {
        if (inside(from)) {
          comm.check(MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_DOUBLE, grid.rank(from), tag, comm.raw(),
                              MPI_STATUS_IGNORE),
                     "MPI_Recv");
        }
      };
      if (me[d] % 2 == 0) {
        send();
        receive();
      } else {
        receive();
        send();
      }
      std::size_t k = 0;
      layer(d, into, [&](const auto& p) {
        halo[at(p)] =
            inside(from) ? in[k++] : boundary(box.lo[0] + p[0] - 1, box.lo[1] + p[1] - 1, box.lo[2] + p[2] - 1);
      });
    }
  }
}

/// The failure-free result on one process, for the points of `box`.
std::vector<double> serial_reference(const Options& options, const Box& box) {
  const Box all{{0, 0, 0}, {options.n, options.n, options.n}};
  const std::int64_t e = options.n + 2;
  auto at = [&](std::int64_t x, std::int64_t y, std::int64_t z) {
    return static_cast<std::size_t>((z * e + y) * e + x);
  };
  std::vector<double> old(static_cast<std::size_t>(e * e * e), 0.0);
  for (std::int64_t z = 0; z < e; ++z)
    for (std::int64_t y = 0; y < e; ++y)
      for (std::int64_t x = 0; x < e; ++x)
        if (x == 0 || y == 0 || z == 0 || x == e - 1 || y == e - 1 || z == e - 1)
          old[at(x, y, z)] = boundary(x - 1, y - 1, z - 1);
  std::vector<double> next = old;
  for (std::uint64_t it = 0; it < options.iterations; ++it) {
    jacobi(all, old, next);
    std::swap(old, next);
  }
  std::vector<double> result;
  for (auto z = box.lo[2]; z < box.hi[2]; ++z)
    for (auto y = box.lo[1]; y < box.hi[1]; ++y)
      for (auto x = box.lo[0]; x < box.hi[0]; ++x) result.push_back(old[at(x + 1, y + 1, z + 1)]);
  return result;
}

/// After a shrink: cuts the pieces this process holds (its own and fetched
/// ones) along the new decomposition and sends each cut to its new owner.
void repartition(reprise::Comm& comm, const Options& options, Part& part, const std::vector<Part>& fetched) {
  const Decomposition grid(comm.size(), options.n);
  std::vector<std::vector<std::byte>> payloads(static_cast<std::size_t>(comm.size()));
  auto send_cuts = [&](const Part& piece) {
    const Box from = piece.as_box();
    for (int r = 0; r < comm.size(); ++r) {
      const Box common = intersect(from, grid.box(r));
      if (common.points() == 0) continue;
      const auto values = cut(common, from, piece.values);
      Part record;
      record.set_box(common);
      auto& out = payloads[static_cast<std::size_t>(r)];
      const auto* header = reinterpret_cast<const std::byte*>(record.box.data());
      out.insert(out.end(), header, header + 6 * sizeof(std::int64_t));
      const auto* data = reinterpret_cast<const std::byte*>(values.data());
      out.insert(out.end(), data, data + values.size() * sizeof(double));
    }
  };
  send_cuts(part);
  for (const auto& piece : fetched) send_cuts(piece);
  std::vector<reprise::OutgoingMessage> messages;
  for (int r = 0; r < comm.size(); ++r) {
    if (!payloads[static_cast<std::size_t>(r)].empty())
      messages.push_back({reprise::Rank{r}, payloads[static_cast<std::size_t>(r)]});
  }
  const auto received = comm.sparse_all_to_all(messages);
  const Box mine = grid.box(comm.rank().value());
  part.set_box(mine);
  part.values.assign(mine.points(), 0.0);
  for (const auto& message : received) {
    std::size_t at = 0;
    while (at < message.payload.size()) {
      Part record;
      std::memcpy(record.box.data(), message.payload.data() + at, 6 * sizeof(std::int64_t));
      at += 6 * sizeof(std::int64_t);
      const Box b = record.as_box();
      std::vector<double> values(b.points());
      std::memcpy(values.data(), message.payload.data() + at, values.size() * sizeof(double));
      at += values.size() * sizeof(double);
      std::size_t k = 0;
      for (auto z = b.lo[2]; z < b.hi[2]; ++z)
        for (auto y = b.lo[1]; y < b.hi[1]; ++y)
          for (auto x = b.lo[0]; x < b.hi[0]; ++x) part.values[mine.index(x, y, z)] = values[k++];
    }
  }
}

/// This process's part of the grid before the first iteration (a
/// replacement gets its part from the checkpoint).
Part initial_part(const reprise::Comm& comm, const Options& options) {
  Part part;
  if (comm.is_replacement()) return part;
  const Decomposition grid(comm.size(), options.n);
  const Box box = grid.box(comm.rank().value());
  part.set_box(box);
  part.values.assign(box.points(), 0.0);
  return part;
}

/// After a shrink: the survivors share the departed processes' parts (from
/// their checkpoints) and cut the grid anew.
void take_departed_parts(const reprise::Recovery& recovery, reprise::Comm& comm, reprise::Checkpoint& checkpoint,
                         const Options& options, Part& part) {
  if (recovery.mode != reprise::RecoveryMode::kShrink) return;
  std::vector<reprise::OriginalRank> mine;
  for (std::size_t k = 0; k < recovery.lost.size(); ++k) {
    if (static_cast<int>(k) % comm.size() == comm.rank().value()) mine.push_back(recovery.lost[k]);
  }
  std::vector<Part> fetched;
  for (const auto& [owner, saved] : checkpoint.fetch(mine)) {
    Part piece;
    piece.box = saved.values<std::int64_t>("box");
    piece.values = saved.values<double>("values");
    fetched.push_back(std::move(piece));
  }
  repartition(comm, options, part, fetched);
}

/// Prints what moving cost, in the leaving process and in its successor
/// (which restores from its predecessor's image here).
void report_moves(reprise::Migration& migration, const reprise::Comm& comm) {
  const auto me = comm.original_rank();
  migration.before_leaving([me](const reprise::MigrationTimes& times) {
    std::printf("  #%d leaves its node: image of %.2f MiB built in %.1f ms, free to exit %.1f ms after the request\n",
                me.value(), static_cast<double>(times.image_bytes) / (1 << 20), 1e3 * times.image_build_s,
                1e3 * times.evacuation_s);
    std::fflush(stdout);
  });
  if (!comm.migrated_in()) return;
  migration.arrive();
  const auto& times = migration.last_times();
  std::printf("  #%d runs again in another process (%s): image opened in %.2f ms, state restored in %.1f ms, %.1f ms "
              "after the request\n",
              me.value(), demo::process_place().c_str(), 1e3 * times.image_open_s, 1e3 * times.restore_s,
              1e3 * times.response_s);
  std::fflush(stdout);
}

void announce(const reprise::Comm& comm, const Options& options, const reprise::inject::Schedule& schedule) {
  if (comm.rank().value() != 0 || comm.is_replacement()) return;
  const Decomposition grid(comm.size(), options.n);
  std::printf("heat3d: %lld^3 grid on %d processes (%d x %d x %d), %llu iterations, checkpoint every %llu, "
              "recovery by %s; faults: %s\n",
              static_cast<long long>(options.n), comm.size(), grid.dims[0], grid.dims[1], grid.dims[2],
              static_cast<unsigned long long>(options.iterations),
              static_cast<unsigned long long>(options.checkpoint_every), mode_name(options.mode),
              schedule.to_string().empty() ? "none" : schedule.to_string().c_str());
  std::fflush(stdout);
}

/// The part with a one-point halo (zero outside the grid), the next values,
/// and the box they were made for.
struct Halo {
  std::vector<double> values;
  std::vector<double> next;
  std::vector<std::int64_t> box;
};

/// One Jacobi sweep over this process's part.
void sweep(reprise::Comm& comm, const Options& options, Part& part, Halo& halo) {
  const Box box = part.as_box();
  const std::int64_t ex = box.extent(0) + 2;
  const std::int64_t ey = box.extent(1) + 2;
  if (halo.box != part.box) {  // a new box after a shrink: a new halo
    halo.values.assign(static_cast<std::size_t>(ex * ey * (box.extent(2) + 2)), 0.0);
    halo.next.assign(halo.values.size(), 0.0);
    halo.box = part.box;
  }
  fill_halo(comm, Decomposition(comm.size(), options.n), part, halo.values);
  jacobi(box, halo.values, halo.next);
  for (auto z = box.lo[2]; z < box.hi[2]; ++z)
    for (auto y = box.lo[1]; y < box.hi[1]; ++y)
      for (auto x = box.lo[0]; x < box.hi[0]; ++x)
        part.values[box.index(x, y, z)] = halo.next[static_cast<std::size_t>(
            ((z - box.lo[2] + 1) * ey + (y - box.lo[1] + 1)) * ex + (x - box.lo[0] + 1))];
}

/// Compares every process's part with the serial run bit for bit and prints
/// the recoveries and checkpoints; whether every part is identical.
bool report(reprise::Comm& comm, const reprise::Driver& driver, const Options& options, const Part& part,
            double elapsed) {
  if (comm.rank().value() == 0) {
    std::printf("  run done; every process now computes the failure-free serial run to compare with (%llu "
                "iterations of the whole grid)\n",
                static_cast<unsigned long long>(options.iterations));
    std::fflush(stdout);
  }
  const auto reference = serial_reference(options, part.as_box());
  const bool same = reference.size() == part.values.size() &&
                    std::memcmp(reference.data(), part.values.data(), reference.size() * sizeof(double)) == 0;
  const int wrong = comm.allreduce(same ? 0 : 1, MPI_SUM);
  const auto checkpoints = driver.checkpoint_stats();
  const double mean_checkpoint_ms = 1e3 * comm.allreduce(checkpoints.seconds, MPI_MAX) / std::max(1, checkpoints.count);
  // A replacement only knows the recoveries since it joined: the lowest
  // rank that saw them all reports.
  const auto seen = static_cast<int>(driver.recoveries().size());
  const int most = comm.allreduce(seen, MPI_MAX);
  const bool reporter =
      comm.allreduce(seen == most ? comm.rank().value() : comm.size(), MPI_MIN) == comm.rank().value();
  if (reporter) {
    for (const auto& recovery : driver.recoveries()) {
      std::string names;
      for (auto rank : recovery.lost) names += (names.empty() ? "#" : ", #") + std::to_string(rank.value());
      std::printf("  lost %s; %s and restore took %.1f ms%s\n", names.c_str(), mode_name(recovery.mode),
                  1e3 * recovery.seconds, recovery.attempts > 1 ? " (recovery retried)" : "");
    }
    std::printf("  %d checkpoints of %.2f MiB per process, %.2f ms each on average (slowest process)\n",
                checkpoints.count, static_cast<double>(part.values.size() * sizeof(double)) / (1 << 20),
                mean_checkpoint_ms);
    std::printf("  final grid vs. a failure-free serial run: %s (%d of %d processes differ)\n",
                wrong == 0 ? "BITWISE IDENTICAL" : "DIFFERENT", wrong, comm.size());
    std::printf("  %d of %d processes finished %llu iterations in %.2f s\n", comm.size(), comm.original_size(),
                static_cast<unsigned long long>(options.iterations), elapsed);
    std::fflush(stdout);
  }
  return wrong == 0;
}

int run_demo(demo::Demo<Options>& begun) {
  reprise::Comm& comm = begun.comm;
  const auto me = comm.original_rank();
  const Options& options = begun.options;
  const auto& schedule = begun.schedule;

  Part part = initial_part(comm, options);
  reprise::Checkpoint checkpoint(comm, {.copies = std::min(options.copies, comm.size())});
  checkpoint.protect("box", part.box);
  checkpoint.protect("values", part.values);
  reprise::Driver driver(comm, checkpoint,
                         {.mode = options.mode, .cadence = {.every_steps = options.checkpoint_every}});
  driver.on_recovery(
      [&](const reprise::Recovery& recovery) { take_departed_parts(recovery, comm, checkpoint, options, part); });
  // Live migration: SIGUSR1 or --move asks; the move happens between two
  // iterations; a process started by a move restores from its predecessor's image.
  reprise::Migration migration(comm, checkpoint);
  if (options.mode != reprise::RecoveryMode::kReplay) migration.attach(driver);
  report_moves(migration, comm);
  announce(comm, options, schedule);
  const auto start = std::chrono::steady_clock::now();
  Halo halo;
  demo::Progress progress(comm, options.iterations);
  try {
    driver.run(options.iterations, [&](std::uint64_t iteration) {
      progress.at(iteration);
      schedule.apply(me, iteration, comm.is_replacement());
      if (options.move.due(me, iteration)) migration.request();
      sweep(comm, options, part, halo);
    });
  } catch (const reprise::DataLost& error) {
    if (comm.rank().value() == 0) {
      std::fprintf(stderr,
                   "heat3d_demo: %s\n  (with %d copies, a process and its %d buddies failing between two "
                   "checkpoints lose its block; use more --copies)\n",
                   error.what(), options.copies, options.copies - 1);
    }
    return demo::finish(begun.environment, me, false, error.what(), 3);
  }
  const bool identical = report(comm, driver, options, part, demo::seconds_since(start));
  return demo::finish(begun.environment, me, identical, "the grid differs from the failure-free run");
}

}  // namespace

int main(int argc, char** argv) {
  return demo::main_of<Options>(
      argc, argv, parse, [](const Options& o) { return o.iterations; }, run_demo);
}
