// What one process failure costs a program that replays the lost process
// from the message log (RecoveryMode::kReplay, libreprise_msglog.so
// preloaded) against the global rollback every process does without it
// (RecoveryMode::kRespawn). One job per mode: each runs the application
// twice on the same processes under reprise's Driver, checkpointing every
// --every steps (after a warm-up of --every steps, untimed), first without a
// failure, then with one process killed for
// real (SIGKILL) at one step, both drawn from --seed (the same in the jobs of
// both modes, so they compare) unless --victim and --kill-step name them.
// Applications:
// - heat3d: a Jacobi step of the heat equation on a 3D grid split in slabs
//   along z, the boundary planes exchanged with both neighbours
//   (MPI_Sendrecv), the residual summed over all processes (MPI_Allreduce).
// - master_worker: process 0 hands a task to every worker each step and
//   takes the results from MPI_ANY_SOURCE; a task is a fixed amount of work.
// The replacement is spawned, or with REPRISE_SPARES=1 (one more process)
// a spare started with the job takes the lost process's place. In a replay
// each process sends its holder --snapshots snapshots of its state per
// checkpoint interval (Cadence::snapshots_per_interval, default 16; 0:
// none), from the last of which a replacement replays when it can.
// One JSON line per job (times in seconds, each the slowest survivor's):
//   {"bench":"replay","app":..,"mode":"replay"|"rollback","replacement":"spawned"|"spare","ranks":..,
//    "steps":..,"every":..,"snapshots":..,"seed":..,"kill_step":..,"victim":..,"failure_free_s":..,"total_s":..,"failure_cost_s":..,
//    "recovery_s":..,"survivor_lost_s":..,"redo_s":..,"redo_cpu_s":..}
// failure_free_s: the run without a failure (in the replay job, logged);
// total_s: the run with the failure; failure_cost_s = total_s -
// failure_free_s; recovery_s: the recovery as the Driver timed it (the
// slowest process); survivor_lost_s: the mean over the survivors of the time
// the failure added to their steps around it (waiting, recovering, computing
// again), from the step before the victim's last one to the step after the
// next checkpoint, against the same steps of the failure-free run (so the
// noise of the rest of the run, which failure_cost_s carries, stays out);
// redo_s, redo_cpu_s: the replacement's steps from its checkpoint (or
// snapshot) up to the one at which its predecessor died, wall clock and its
// main thread's CPU (in a replay, what a survivor that needs the lost
// process's next message waits for; in a rollback, what every process
// computes again).
//
//   replay_bench --app heat3d|master_worker --mode replay|rollback [--steps N] [--every K] [--seed S]
//                [--kill-step S] [--victim R] [--edge E] [--planes P] [--task-work W] [--snapshots N]

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/environment.hpp"
#include "reprise/inject.hpp"

namespace {

using namespace bench;

constexpr const char* kUsage =
    "usage: replay_bench --app heat3d|master_worker --mode replay|rollback [--steps N] [--every K] [--seed S]\n"
    "                    [--kill-step S] [--victim R] [--edge E] [--planes P] [--task-work W] [--snapshots N]\n"
    "  (--mode replay with LD_PRELOAD=libreprise_msglog.so; at least 3 processes; the victim and its\n"
    "   step, in [1, steps), are drawn from --seed, default 1, unless --victim and --kill-step name them)\n";

struct Options {
  std::string app = "heat3d";
  std::string mode = "replay";
  std::uint64_t steps = 1200;
  std::uint64_t every = 400;
  std::uint64_t seed = 1;                               // draws the victim and its step
  std::optional<std::uint64_t> kill_step;               // default: drawn from the seed
  std::optional<int> victim;                            // default: drawn from the seed
  std::size_t edge = 64;                                // heat3d: points along x and y
  std::size_t planes = 32;                              // heat3d: z planes per process
  std::uint64_t task_work = 200000;                     // master_worker: mixing rounds per task
  int snapshots = reprise::Cadence::kDefaultSnapshots;  // replay: per checkpoint interval
};

Options parse(int argc, char** argv) {
  Options options;
  for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--app") {
      if (value != "heat3d" && value != "master_worker") throw BadOption("--app takes heat3d or master_worker");
      options.app = value;
    } else if (flag == "--mode") {
      if (value != "replay" && value != "rollback") throw BadOption("--mode takes replay or rollback");
      options.mode = value;
    } else if (flag == "--steps") {
      options.steps = number<std::uint64_t>(flag, value, 2);
    } else if (flag == "--every") {
      options.every = number<std::uint64_t>(flag, value, 1);
    } else if (flag == "--seed") {
      options.seed = number<std::uint64_t>(flag, value, 0);
    } else if (flag == "--kill-step") {
      options.kill_step = number<std::uint64_t>(flag, value, 0);
    } else if (flag == "--victim") {
      options.victim = number<int>(flag, value, 0);
    } else if (flag == "--edge") {
      options.edge = number<std::size_t>(flag, value, 4);
    } else if (flag == "--planes") {
      options.planes = number<std::size_t>(flag, value, 1);
    } else if (flag == "--task-work") {
      options.task_work = number<std::uint64_t>(flag, value, 1);
    } else if (flag == "--snapshots") {
      options.snapshots = number<int>(flag, value, 0);
    } else {
      throw BadOption("unknown flag " + flag);
    }
  });
  if (options.kill_step && *options.kill_step >= options.steps) throw BadOption("--kill-step must be below --steps");
  return options;
}

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33U;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33U;
  return x;
}

/// One slab of the heat equation's grid, with a ghost plane at each end.
class Heat3d {
 public:
  Heat3d(reprise::Comm& comm, reprise::Checkpoint& checkpoint, const Options& options)
      : _comm(comm), _edge(options.edge), _planes(options.planes), _grid((_planes + 2) * _edge * _edge, 0.0) {
    const std::size_t plane = _edge * _edge;
    for (std::size_t i = plane; i < (_planes + 1) * plane; ++i) {
      _grid[i] = static_cast<double>(mix(i + static_cast<std::size_t>(comm.rank().value()) * 7919U) % 1000) / 1000.0;
    }
    _next = _grid;
    checkpoint.protect("grid", _grid);
  }

  void step() {
    const std::size_t plane = _edge * _edge;
    const int me = _comm.rank().value();
    const int below = me == 0 ? MPI_PROC_NULL : me - 1;
    const int above = me + 1 == _comm.size() ? MPI_PROC_NULL : me + 1;
    const auto count = static_cast<int>(plane);
    _comm.check(MPI_Sendrecv(&_grid[_planes * plane], count, MPI_DOUBLE, above, 1, &_grid[0], count, MPI_DOUBLE, below,
                             1, _comm.raw(), MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
    _comm.check(MPI_Sendrecv(&_grid[plane], count, MPI_DOUBLE, below, 2, &_grid[(_planes + 1) * plane], count,
                             MPI_DOUBLE, above, 2, _comm.raw(), MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
    double residual = 0;
    for (std::size_t z = 1; z <= _planes; ++z) {
      for (std::size_t y = 1; y + 1 < _edge; ++y) {
        for (std::size_t x = 1; x + 1 < _edge; ++x) {
          const std::size_t i = z * plane + y * _edge + x;
          const double value = (_grid[i - 1] + _grid[i + 1] + _grid[i - _edge] + _grid[i + _edge] + _grid[i - plane] +
                                _grid[i + plane]) /
                               6.0;
          residual += (value - _grid[i]) * (value - _grid[i]);
          _next[i] = value;
        }
      }
    }
    std::swap(_grid, _next);
    double total = 0;
    _comm.check(MPI_Allreduce(&residual, &total, 1, MPI_DOUBLE, MPI_SUM, _comm.raw()), "MPI_Allreduce");
    _residual = total;
  }

 private:
  reprise::Comm& _comm;
  std::size_t _edge;
  std::size_t _planes;
  std::vector<double> _grid;
  std::vector<double> _next;
  double _residual = 0;
};

/// Process 0 hands out tasks and takes the results in any order.
class MasterWorker {
 public:
  MasterWorker(reprise::Comm& comm, reprise::Checkpoint& checkpoint, const Options& options)
      : _comm(comm), _work(options.task_work) {
    checkpoint.protect("sum", _sum);
  }

  void step() {
    const int workers = _comm.size() - 1;
    if (_comm.rank().value() == 0) {
      for (int w = 1; w <= workers; ++w) {
        const std::uint64_t task = mix(_sum[0] + static_cast<std::uint64_t>(w));
        _comm.check(MPI_Send(&task, 1, MPI_UINT64_T, w, 1, _comm.raw()), "MPI_Send");
      }
      for (int k = 0; k < workers; ++k) {
        std::uint64_t result = 0;
        _comm.check(MPI_Recv(&result, 1, MPI_UINT64_T, MPI_ANY_SOURCE, 2, _comm.raw(), MPI_STATUS_IGNORE), "MPI_Recv");
        _sum[0] += result;
      }
      return;
    }
    std::uint64_t task = 0;
    _comm.check(MPI_Recv(&task, 1, MPI_UINT64_T, 0, 1, _comm.raw(), MPI_STATUS_IGNORE), "MPI_Recv");
    for (std::uint64_t i = 0; i < _work; ++i) task = mix(task + i);
    _comm.check(MPI_Send(&task, 1, MPI_UINT64_T, 0, 2, _comm.raw()), "MPI_Send");
  }

 private:
  reprise::Comm& _comm;
  std::uint64_t _work;
  std::vector<std::uint64_t> _sum{0};
};

/// The failure of a run: process `victim` dies at step `step` (none: victim -1).
struct Failure {
  int victim = -1;
  std::uint64_t step = 0;
};

constexpr std::uint64_t kStepStream = 0x6b696c6c2d737465ULL;
constexpr std::uint64_t kVictimStream = 0x766963742d72616eULL;

/// The failure --victim and --kill-step name, or drawn from --seed: one of
/// the `size` processes, at a step in [1, steps), alike on every process.
Failure draw_failure(const Options& options, int size) {
  const std::uint64_t step = 1 + mix(options.seed ^ kStepStream) % (options.steps - 1);
  const auto victim = static_cast<int>(mix(options.seed ^ kVictimStream) % static_cast<std::uint64_t>(size));
  return {.victim = options.victim.value_or(victim), .step = options.kill_step.value_or(step)};
}

/// Seconds of the wall clock and of this thread's CPU.
struct Clocks {
  double wall = 0;
  double cpu = 0;
};

Clocks clocks_now() {
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  return {.wall = MPI_Wtime(), .cpu = static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec)};
}

/// The steps over which a survivor's loss is measured: from the first start
/// of the step before the one at which the victim dies (no survivor has
/// met the failure yet) to the last start of the step after the next
/// checkpoint (after any catch-up, recovery or computing again), or to the
/// end of the run when that step is past it.
struct Window {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
};

Window window_around(const Options& options, std::uint64_t kill_step) {
  return {.first = kill_step == 0 ? 0 : kill_step - 1, .last = (kill_step / options.every + 1) * options.every + 1};
}

/// What one run's steps took on this process: the window around the
/// failure and, in the replacement, its steps from the checkpoint up to
/// the one at which its predecessor died (`redo`).
class StepClocks {
 public:
  StepClocks(Window window, std::uint64_t kill_step, bool replacement)
      : _window(window), _kill_step(kill_step), _replacement(replacement) {}

  void at_step(std::uint64_t step) {
    const double now = MPI_Wtime();
    if (step == _window.first && !_window_start) _window_start = now;
    if (step == _window.last) _window_end = now;
    if (!_replacement) return;
    if (!_redo_start) _redo_start = clocks_now();
    if (step == _kill_step) {
      const Clocks end = clocks_now();
      _redo = {.wall = end.wall - _redo_start->wall, .cpu = end.cpu - _redo_start->cpu};
    }
  }

  void at_end(std::uint64_t steps) {
    if (_window.last >= steps) _window_end = MPI_Wtime();
  }

  [[nodiscard]] double window_seconds() const { return _window_end - _window_start.value_or(_window_end); }
  [[nodiscard]] const Clocks& redo() const noexcept { return _redo; }

 private:
  Window _window;
  std::uint64_t _kill_step;
  bool _replacement;
  std::optional<double> _window_start;
  double _window_end = 0;
  std::optional<Clocks> _redo_start;
  Clocks _redo;
};

/// One run of the application under the Driver, with `failure`. Returns this
/// process's seconds, the Driver's recoveries, the window's seconds and the redo.
struct RunResult {
  double seconds = 0;
  double recovery_seconds = 0;
  double window_seconds = 0;
  Clocks redo;
};

template <class App>
RunResult run_once(reprise::Comm& comm, const Options& options, const Failure& failure, Window window) {
  reprise::Checkpoint checkpoint(comm);
  App app(comm, checkpoint, options);
  const auto mode = options.mode == "replay" ? reprise::RecoveryMode::kReplay : reprise::RecoveryMode::kRespawn;
  reprise::Driver driver(
      comm, checkpoint,
      {.mode = mode, .cadence = {.every_steps = options.every, .snapshots_per_interval = options.snapshots}});
  if (!comm.is_replacement()) comm.barrier();
  const double start = MPI_Wtime();
  StepClocks clocks(window, failure.step, comm.is_replacement());
  driver.run(options.steps, [&](std::uint64_t step) {
    if (step == failure.step && comm.rank().value() == failure.victim && !comm.is_replacement()) {
      reprise::inject::kill_self(comm.original_rank());
    }
    clocks.at_step(step);
    app.step();
  });
  clocks.at_end(options.steps);
  RunResult result{.seconds = MPI_Wtime() - start,
                   .recovery_seconds = 0,
                   .window_seconds = clocks.window_seconds(),
                   .redo = clocks.redo()};
  for (const auto& recovery : driver.recoveries()) result.recovery_seconds += recovery.seconds;
  return result;
}

RunResult run_app(reprise::Comm& comm, const Options& options, const Failure& failure, Window window) {
  return options.app == "heat3d" ? run_once<Heat3d>(comm, options, failure, window)
                                 : run_once<MasterWorker>(comm, options, failure, window);
}

/// Whether the job runs with a pool of spare processes.
bool spares_in_use() {
  const char* spares = std::getenv("REPRISE_SPARES");
  return spares != nullptr && std::string(spares) != "0" && *spares != '\0';
}

/// The job's figures, gathered from every process.
struct Summary {
  double free_s = 0;      ///< the slowest survivor's failure-free run
  double total_s = 0;     ///< the slowest survivor's run with the failure
  double recovery_s = 0;  ///< the slowest process's recoveries
  double lost_s = 0;      ///< the mean over the survivors of what the failure added to the window
  Clocks redo;            ///< the replacement's
  int reporter = -1;      ///< the survivor that prints
};

Summary summarize(reprise::Comm& comm, const RunResult& free, const RunResult& failed) {
  // Per process: survivor?, the two runs, the recovery, the redo, the window in both runs.
  constexpr int kFields = 8;
  const double mine[kFields] = {comm.is_replacement() ? 0.0 : 1.0,
                                free.seconds,
                                failed.seconds,
                                failed.recovery_seconds,
                                failed.redo.wall,
                                failed.redo.cpu,
                                free.window_seconds,
                                failed.window_seconds};
  std::vector<double> all(kFields * static_cast<std::size_t>(comm.size()));
  comm.check(MPI_Allgather(mine, kFields, MPI_DOUBLE, all.data(), kFields, MPI_DOUBLE, comm.raw()), "MPI_Allgather");
  Summary summary;
  int survivors = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const double* row = &all[kFields * static_cast<std::size_t>(r)];
    summary.recovery_s = std::max(summary.recovery_s, row[3]);
    summary.redo = {.wall = std::max(summary.redo.wall, row[4]), .cpu = std::max(summary.redo.cpu, row[5])};
    if (row[0] == 0) continue;
    if (summary.reporter < 0) summary.reporter = r;
    ++survivors;
    summary.free_s = std::max(summary.free_s, row[1]);
    summary.total_s = std::max(summary.total_s, row[2]);
    summary.lost_s += row[7] - row[6];
  }
  summary.lost_s /= survivors;
  return summary;
}

void report(reprise::Comm& comm, const Options& options, const Failure& failure, const RunResult& free,
            const RunResult& failed) {
  const Summary summary = summarize(comm, free, failed);
  if (comm.rank().value() != summary.reporter) return;
  std::printf("{\"bench\":\"replay\",\"app\":\"%s\",\"mode\":\"%s\",\"replacement\":\"%s\",\"ranks\":%d,"
              "\"steps\":%llu,\"every\":%llu,\"snapshots\":%d,\"seed\":%llu,"
              "\"kill_step\":%llu,\"victim\":%d,\"failure_free_s\":%.4f,\"total_s\":%.4f,\"failure_cost_s\":%.4f,"
              "\"recovery_s\":%.4f,\"survivor_lost_s\":%.4f,\"redo_s\":%.4f,\"redo_cpu_s\":%.4f}\n",
              options.app.c_str(), options.mode.c_str(), spares_in_use() ? "spare" : "spawned", comm.size(),
              static_cast<unsigned long long>(options.steps), static_cast<unsigned long long>(options.every),
              options.mode == "replay" ? options.snapshots : 0, static_cast<unsigned long long>(options.seed),
              static_cast<unsigned long long>(failure.step), failure.victim, summary.free_s, summary.total_s,
              summary.total_s - summary.free_s, summary.recovery_s, summary.lost_s, summary.redo.wall,
              summary.redo.cpu);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  return run_mpi_main("replay_bench", kUsage, argc, argv, parse, [](reprise::Comm& comm, const Options& options) {
    if (comm.size() < 3) throw std::runtime_error("replay_bench: run it on at least 3 processes");
    const Failure failure = draw_failure(options, comm.size());
    if (failure.victim >= comm.size()) throw std::runtime_error("replay_bench: --victim is not a process of the job");
    // A replacement joins the second run, the one with the failure.
    const Window window = window_around(options, failure.step);
    if (!comm.is_replacement()) {
      // A warm-up as long as a checkpoint interval, so that the failure-free
      // run finds the log's memory already touched, as the run with the failure does.
      Options warm_up = options;
      warm_up.steps = std::min(options.steps, options.every + 1);
      run_app(comm, warm_up, Failure{}, window);
    }
    const RunResult free = comm.is_replacement() ? RunResult{} : run_app(comm, options, Failure{}, window);
    const RunResult failed = run_app(comm, options, failure, window);
    report(comm, options, failure, free, failed);
    reprise::inject::record_outcome(reprise::inject::Outcome::kPassed, comm.original_rank());
  });
}
