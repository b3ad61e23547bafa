// The C interface's overhead: one checkpoint of the same bytes through the
// C++ API (reprise::Checkpoint::checkpoint) and through the C interface
// (reprise_checkpoint_commit), in the same job, interleaved, with a memcpy of
// the bytes each process receives as the limit. The Python package's
// overhead is measured the same way by bench/bindings_bench.py.
//
//   reprise-run -n 4 -- bindings_bench [--mib 1,16,64] [--repeats 15]
//
// One JSON object per size: {"bench":"bindings","api":"c",...}.

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/reprise.h"

namespace {

constexpr const char* kUsage = "usage: bindings_bench [--mib LIST (1,16,64)] [--repeats N (15)]\n"
                               "  times a checkpoint of LIST MiB per process through the C++ API and the C interface\n";

struct Options {
  std::vector<std::size_t> mib{1, 16, 64};
  int repeats = 15;
};

Options parse(int argc, char** argv) {
  Options options;
  bench::for_each_flag(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--mib") {
      options.mib.clear();
      for (const auto& item : bench::items(value)) options.mib.push_back(bench::number<std::size_t>(flag, item, 1));
    } else if (flag == "--repeats") {
      options.repeats = bench::number<int>(flag, value, 1);
    } else {
      throw bench::BadOption("unknown flag " + flag);
    }
  });
  return options;
}

// A C handle or a failure with the C interface's message.
void check(reprise_status status, const char* what) {
  if (status != REPRISE_OK) throw std::runtime_error(std::string(what) + ": " + reprise_last_error());
}

// The C interface's objects for one size: its own communicator and
// checkpoint over `bytes` bytes of its own.
struct CSide {
  reprise_comm* comm = nullptr;
  reprise_checkpoint* checkpoint = nullptr;
  std::vector<std::byte> state;

  explicit CSide(std::size_t bytes) : state(bytes, std::byte{3}) {
    check(reprise_comm_world(&comm), "reprise_comm_world");
    check(reprise_checkpoint_create(comm, nullptr, &checkpoint), "reprise_checkpoint_create");
    check(reprise_checkpoint_protect(checkpoint, "state", state.data(), state.size()), "reprise_checkpoint_protect");
  }
  ~CSide() {
    reprise_checkpoint_free(checkpoint);
    reprise_comm_free(comm);
  }
  CSide(const CSide&) = delete;
  CSide& operator=(const CSide&) = delete;
  void commit() { check(reprise_checkpoint_commit(checkpoint, nullptr), "reprise_checkpoint_commit"); }
};

void measure(reprise::Comm& comm, std::size_t mib, int repeats) {
  const std::size_t bytes = mib << 20U;
  std::vector<std::byte> state(bytes, std::byte{3});
  reprise::Checkpoint checkpoint(comm);
  checkpoint.protect("state", std::span<std::byte>(state));
  CSide c(bytes);
  bench::Memcpy copy(bytes);  // with 2 copies each process receives one other state
  const auto medians =
      bench::time_interleaved(comm, repeats, {[&] { checkpoint.checkpoint(); }, [&] { c.commit(); }, std::ref(copy)});
  if (comm.rank().value() == 0) {
    std::printf("{\"bench\":\"bindings\",\"api\":\"c\",\"processes\":%d,\"mib_per_process\":%zu,\"repeats\":%d,"
                "\"cxx_ms\":%.3f,\"c_ms\":%.3f,\"c_over_cxx\":%.4f,\"memcpy_ms\":%.3f}\n",
                comm.size(), mib, repeats, 1e3 * medians[0], 1e3 * medians[1], medians[1] / medians[0],
                1e3 * medians[2]);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_mpi_main("bindings_bench", kUsage, argc, argv, parse,
                             [](reprise::Comm& comm, const Options& options) {
                               for (const auto mib : options.mib) measure(comm, mib, options.repeats);
                             });
}
