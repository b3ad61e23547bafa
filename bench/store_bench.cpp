// Store benchmark: submit, "load 1%" (the blocks of ceil(1% of p) consecutive
// processes, spread evenly over all processes) and "load all" (every process
// loads another process's whole data). Each figure comes with, from the same
// run, a memcpy of the bytes each process receives, and for loads a disk
// baseline: each process reads what it would load from a file it wrote
// (fsync'ed and dropped from the page cache first). One store per
// permutation-range size; every repeat runs the operation on each store and
// the memcpy in turn, so all share the machine's noise alike. One JSON object
// per line.
//
//   store_bench [--copies R] [--block-bytes B] [--perm-bytes P[,P...]]
//               [--mib-per-rank M] [--repeats N] [--disk-dir DIR]

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "reprise/reprise.hpp"

namespace {

using namespace bench;

struct Options {
  int copies = 2;
  std::size_t block_bytes = 64;
  std::vector<std::size_t> perm_bytes{0, std::size_t{4} << 20U};
  std::size_t mib_per_rank = 16;
  int repeats = 21;
  std::string disk_dir = "/tmp";
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--copies") {
      options.copies = std::stoi(value);
    } else if (flag == "--block-bytes") {
      options.block_bytes = std::stoul(value);
    } else if (flag == "--perm-bytes") {
      options.perm_bytes.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) options.perm_bytes.push_back(std::stoul(item));
    } else if (flag == "--mib-per-rank") {
      options.mib_per_rank = std::stoul(value);
    } else if (flag == "--repeats") {
      options.repeats = std::stoi(value);
    } else if (flag == "--disk-dir") {
      options.disk_dir = value;
    } else {
      throw reprise::UsageError("store_bench: unknown flag " + flag);
    }
  }
  return options;
}

/// Every process writes `bytes` to its own file, makes sure they are on disk
/// and not cached, and reads them back; the read is timed.
double time_disk_read(reprise::Comm& comm, int repeats, std::size_t bytes, const std::string& dir) {
  const std::string path = dir + "/reprise-bench-" + std::to_string(::getpid());
  std::vector<std::byte> data(bytes, std::byte{7});
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || ::write(out, data.data(), bytes) != static_cast<ssize_t>(bytes)) {
      throw reprise::UsageError("store_bench: cannot write " + path + " (use --disk-dir)");
    }
    ::fsync(out);
    ::posix_fadvise(out, 0, 0, POSIX_FADV_DONTNEED);
    ::close(out);
    comm.barrier();
    const auto start = Clock::now();
    const int in = ::open(path.c_str(), O_RDONLY);
    std::size_t done = 0;
    while (done < bytes) {
      const ssize_t got = ::read(in, data.data() + done, bytes - done);
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    ::close(in);
    times.push_back(comm.allreduce(seconds(start), MPI_MAX));
  }
  ::unlink(path.c_str());
  return median(times);
}

/// One operation timed on one store: its name, the store's permutation-range
/// size, its median and memcpy's over the same bytes, and the bytes each
/// process received.
struct Timing {
  const char* op = "";
  std::size_t perm_bytes = 0;
  double median_s = 0;
  double memcpy_s = 0;
  std::size_t bytes_received = 0;
};

void print(const reprise::Comm& comm, const Options& options, const Timing& timing) {
  if (comm.rank().value() != 0) return;
  const auto& [op, perm_bytes, median_s, memcpy_s, bytes_received] = timing;
  std::printf("{\"bench\":\"store\",\"op\":\"%s\",\"ranks\":%d,\"r\":%d,\"bytes_per_rank\":%zu,\"block_bytes\":%zu,"
              "\"perm_range_bytes\":%zu,\"bytes_received_per_rank\":%zu,\"repeats\":%d,\"median_s\":%.6f,"
              "\"memcpy_s\":%.6f,\"ratio\":%.2f}\n",
              op, comm.size(), options.copies, options.mib_per_rank << 20U, options.block_bytes, perm_bytes,
              bytes_received, options.repeats, median_s, memcpy_s, median_s / memcpy_s);
  std::fflush(stdout);
}

/// One store per permutation-range size, all holding the same data, so that
/// every operation can be timed on all of them in turn.
void run(reprise::Comm& comm, const Options& options) {
  const std::size_t bytes_per_rank = options.mib_per_rank << 20U;
  const std::uint64_t blocks_per_rank = bytes_per_rank / options.block_bytes;
  const auto p = static_cast<std::uint64_t>(comm.size());
  const auto me = static_cast<std::uint64_t>(comm.rank().value());
  std::vector<std::unique_ptr<reprise::Store>> stores;
  for (std::size_t perm : options.perm_bytes) {
    stores.push_back(std::make_unique<reprise::Store>(comm, reprise::StoreConfig{.copies = options.copies,
                                                                                 .block_bytes = options.block_bytes,
                                                                                 .bytes_per_permuted_range = perm,
                                                                                 .seed = 1}));
  }
  const reprise::BlockRange mine{reprise::BlockId{me * blocks_per_rank}, reprise::BlockId{(me + 1) * blocks_per_rank}};
  std::vector<std::byte> data(bytes_per_rank);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 131 + me) & 0xffU);

  // Times `op` on every store and the memcpy of `bytes` in turn; prints a line each.
  auto measure = [&](const char* op, std::size_t bytes, const std::function<void(reprise::Store&)>& step) {
    Memcpy copy(bytes);
    std::vector<std::function<void()>> steps{std::ref(copy)};
    for (auto& store : stores) steps.emplace_back([&step, &store] { step(*store); });
    const auto medians = time_interleaved(comm, options.repeats, steps);
    for (std::size_t s = 0; s < stores.size(); ++s) {
      print(comm, options, {op, options.perm_bytes[s], medians[s + 1], medians[0], bytes});
    }
  };
  auto measure_disk = [&](const char* op, std::size_t bytes) {
    Memcpy copy(bytes);
    const double memcpy_s = time_interleaved(comm, options.repeats, {std::ref(copy)})[0];
    print(comm, options, {op, 0, time_disk_read(comm, options.repeats, bytes, options.disk_dir), memcpy_s, bytes});
  };

  measure("submit", static_cast<std::size_t>(options.copies) * bytes_per_rank,
          [&](reprise::Store& store) { store.submit(mine, data); });

  // Load 1%: the blocks of the first ceil(p/100) processes, cut evenly.
  const std::uint64_t lost_blocks = (p + 99) / 100 * blocks_per_rank;
  const std::vector<reprise::BlockRange> one_percent{
      {reprise::BlockId{lost_blocks * me / p}, reprise::BlockId{lost_blocks * (me + 1) / p}}};
  std::vector<std::byte> loaded(one_percent.front().size() * options.block_bytes);
  measure("load_1pct", loaded.size(), [&](reprise::Store& store) { store.load(one_percent, loaded); });
  measure_disk("load_1pct_disk", loaded.size());

  // Load all: every process loads the next process's whole data.
  const auto next = (me + 1) % p;
  const std::vector<reprise::BlockRange> neighbour{
      {reprise::BlockId{next * blocks_per_rank}, reprise::BlockId{(next + 1) * blocks_per_rank}}};
  std::vector<std::byte> all(bytes_per_rank);
  measure("load_all", all.size(), [&](reprise::Store& store) { store.load(neighbour, all); });
  measure_disk("load_all_disk", all.size());
}

}  // namespace

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, comm.original_rank());
  try {
    const Options options = parse(argc, argv);
    run(comm, options);
  } catch (const reprise::Error& error) {
    if (comm.rank().value() == 0) std::fprintf(stderr, "%s\n", error.what());
    reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, comm.original_rank(), error.what());
    environment.set_exit_status(1);
    return 1;
  }
  reprise::inject::record_outcome(reprise::inject::Outcome::kPassed, comm.original_rank());
  return 0;
}
