// Checkpoint benchmark: the time of a double in-memory checkpoint of S MiB
// per process, and of a recovery after a real kill (shrink, restore, and
// fetching the lost process's state from its buddy), each with a memcpy of
// the same bytes timed in the same run, interleaved with the checkpoints.
// One JSON object per line. Run it at several process counts for weak
// scaling (fixed state per process), and across nodes ("nodes" says how
// many the processes run on).
//
//   checkpoint_bench [--mib-per-rank S] [--copies C] [--repeats N] [--no-kill]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "reprise/reprise.hpp"

namespace {

using namespace bench;

struct Options {
  std::size_t mib_per_rank = 8;
  int copies = 2;
  int repeats = 11;
  bool kill = true;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-kill") {
      options.kill = false;
      continue;
    }
    if (i + 1 >= argc) throw reprise::UsageError("checkpoint_bench: " + flag + " needs a value");
    const auto value = std::strtoull(argv[++i], nullptr, 10);
    if (flag == "--mib-per-rank") options.mib_per_rank = value;
    else if (flag == "--copies") options.copies = static_cast<int>(value);
    else if (flag == "--repeats") options.repeats = static_cast<int>(value);
    else throw reprise::UsageError("checkpoint_bench: unknown flag " + flag);
  }
  return options;
}

/// One operation timed: its name, its median and memcpy's over the same
/// bytes, over how many runs.
struct Timing {
  const char* op = "";
  double median_s = 0;
  double memcpy_s = 0;
  int repeats = 0;
};

/// `nodes`: how many nodes the processes run on (1: one host, shared memory;
/// more: across nodes, over the network).
void print(int ranks, int nodes, const Options& options, const Timing& timing) {
  const auto& [op, median_s, memcpy_s, repeats] = timing;
  std::printf("{\"bench\":\"checkpoint\",\"op\":\"%s\",\"ranks\":%d,\"nodes\":%d,\"copies\":%d,"
              "\"bytes_per_rank\":%zu,\"repeats\":%d,\"median_s\":%.6f,\"memcpy_s\":%.6f,\"ratio\":%.2f}\n",
              op, ranks, nodes, options.copies, options.mib_per_rank << 20U, repeats, median_s, memcpy_s,
              median_s / memcpy_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  const auto me = comm.original_rank();
  reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, me);
  try {
    const Options options = parse(argc, argv);
    const std::size_t bytes = options.mib_per_rank << 20U;
    std::vector<std::byte> state(bytes);
    for (std::size_t i = 0; i < bytes; ++i)
      state[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(me.value())) & 0xffU);
    reprise::Checkpoint checkpoint(comm, {.copies = options.copies});
    checkpoint.protect("state", std::span<std::byte>(state));

    // Each process receives (copies - 1) states: the memcpy baseline copies as much.
    const std::size_t received = bytes * static_cast<std::size_t>(options.copies - 1);
    Memcpy copy(std::max<std::size_t>(received, 1));
    const auto medians = time_interleaved(comm, options.repeats, {[&] { checkpoint.checkpoint(); }, std::ref(copy)});
    const int ranks = comm.size();
    const auto& node_of = comm.node_of_each_member();
    const int nodes = static_cast<int>(std::set<int>(node_of.begin(), node_of.end()).size());
    if (comm.rank().value() == 0) print(ranks, nodes, options, {"checkpoint", medians[0], medians[1], options.repeats});

    if (options.kill && comm.size() > 1) {
      // One real failure: the last process dies; the survivors shrink,
      // restore and the first of them fetches the lost state.
      const reprise::OriginalRank victim{comm.size() - 1};
      comm.barrier();
      if (me == victim) reprise::inject::kill_self(me);
      const auto start = Clock::now();
      try {
        comm.barrier();
        comm.barrier();
      } catch (const reprise::CommFailure&) {
      }
      comm.revoke();
      comm = comm.shrink();
      checkpoint.restore();
      const std::vector<reprise::OriginalRank> wanted =
          comm.rank().value() == 0 ? std::vector<reprise::OriginalRank>{victim} : std::vector<reprise::OriginalRank>{};
      const auto fetched = checkpoint.fetch(wanted);
      const double recover_s = comm.allreduce(seconds(start), MPI_MAX);
      bool right = true;
      if (!fetched.empty()) {
        const auto lost = fetched.at(victim).bytes("state");
        for (std::size_t i = 0; i < lost.size() && right; ++i) {
          right = lost[i] == static_cast<std::byte>((i * 131 + static_cast<std::size_t>(victim.value())) & 0xffU);
        }
        right = right && lost.size() == bytes;
      }
      if (comm.allreduce(right ? 0 : 1, MPI_SUM) != 0) {
        throw reprise::UsageError("checkpoint_bench: the fetched state is wrong");
      }
      Memcpy lost_bytes(bytes);
      const double memcpy_s = time_once(comm, lost_bytes);
      if (comm.rank().value() == 0) print(ranks, nodes, options, {"recover_shrink", recover_s, memcpy_s, 1});
    }
  } catch (const reprise::Error& error) {
    if (comm.rank().value() == 0) std::fprintf(stderr, "%s\n", error.what());
    reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, me, error.what());
    environment.set_exit_status(1);
    return 1;
  }
  reprise::inject::record_outcome(reprise::inject::Outcome::kPassed, me);
  return 0;
}
