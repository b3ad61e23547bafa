// Write trap benchmark: what the first write to a protected page costs, the
// price every asynchronous or incremental checkpoint pays per written page.
// A region (256 MiB) is registered with the DirtyTracker, write-protected,
// and then one byte of every page is written, visiting the pages in
// ascending, random (one fixed permutation) or descending order. Kinds:
// - trapped: each first write traps (SIGSEGV and mprotect, or userfaultfd
//   with REPRISE_WRITE_TRAP=userfaultfd) and opens its page;
// - written_bits: the region is opened at once (open_all) and the kernel's
//   written bits notice the first writes (Linux 6.7; skipped elsewhere);
// - plain: the region is not protected (the pass itself, for reference).
// Neighbours: idle (this thread alone), or thread (another thread of this
// process busy on another core meanwhile, as a commit thread is: changing
// a page's protection then costs a TLB shootdown on that core too).
// A plain program (no MPI).
//
// Output, one JSON object per line, per (kind, neighbour, order):
// us_per_write, the median over the repeats of the time per page written;
// min and max over the repeats; memcpy_us_per_page, a memcpy of the region
// per page (the median over all repeats), and ratio = us_per_write /
// memcpy_us_per_page: what a first write costs in page copies. After every
// pass each page must hold the pass count and the tracker must report every
// page written, or the benchmark fails.
//
//   trap_bench [--mib M] [--repeats R] [--seed S]

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "reprise/protected_memory.hpp"

namespace {

struct Options {
  std::size_t mib = 256;
  int repeats = 5;
  std::uint64_t seed = 1;
};

constexpr const char* kUsage = "usage: trap_bench [--mib M] [--repeats R] [--seed S]\n";

Options parse(int argc, char** argv) {
  Options options;
  bench::for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--mib") options.mib = bench::number<std::size_t>(flag, value, 1);
    else if (flag == "--repeats") options.repeats = bench::number<int>(flag, value, 1);
    else if (flag == "--seed") options.seed = bench::number<std::uint64_t>(flag, value, 0);
    else throw bench::BadOption("unknown flag " + flag);
  });
  if (options.mib > (std::size_t{1} << 14U)) throw bench::BadOption("--mib: at most 16384 (16 GiB)");
  return options;
}

/// A thread of this process that keeps a core busy until it is destroyed.
class BusyNeighbour {
 public:
  BusyNeighbour()
      : _thread([this] {
          while (!_stop.load(std::memory_order_relaxed)) {
          }
        }) {}
  ~BusyNeighbour() {
    _stop = true;
    _thread.join();
  }
  BusyNeighbour(const BusyNeighbour&) = delete;
  BusyNeighbour& operator=(const BusyNeighbour&) = delete;

 private:
  std::atomic<bool> _stop{false};
  std::thread _thread;
};

struct Cell {
  std::string kind;
  std::string neighbour;
  std::size_t order = 0;  // in bench::kPageOrders
  std::vector<double> us_per_write;
};

void run(const Options& options) {
  const std::size_t page = reprise::page_size();
  const std::size_t bytes = options.mib << 20U;
  const std::size_t pages = bytes / page;
  auto* region = static_cast<unsigned char*>(reprise::protected_alloc(bytes));
  std::memset(region, 0, bytes);
  auto& tracker = reprise::DirtyTracker::instance();
  const int id = tracker.add(region, bytes);

  std::vector<std::vector<std::size_t>> orders;
  for (const auto& name : bench::kPageOrders) orders.push_back(bench::page_order(name, pages, options.seed));
  std::vector<std::string> kinds{"plain", "trapped"};
  if (tracker.keeps_written_bits()) kinds.emplace_back("written_bits");

  std::vector<Cell> cells;
  for (const auto& kind : kinds) {
    for (const std::string neighbour : {"idle", "thread"}) {
      for (std::size_t order = 0; order < orders.size(); ++order) cells.push_back({kind, neighbour, order, {}});
    }
  }
  bench::Memcpy copy(bytes);
  std::vector<double> memcpy_times;
  unsigned char passes = 0;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    for (auto& cell : cells) {
      const auto& order = orders[cell.order];
      if (cell.kind == "plain") {
        tracker.remove(id);
      } else {
        tracker.protect_all();
        if (cell.kind == "written_bits" && !tracker.open_all()) {
          throw std::runtime_error("trap_bench: the kernel's written bits went away");
        }
      }
      {
        std::optional<BusyNeighbour> neighbour;
        if (cell.neighbour == "thread") neighbour.emplace();
        const auto start = bench::Clock::now();
        for (const std::size_t p : order) region[p * page] = static_cast<unsigned char>(passes + 1U);
        cell.us_per_write.push_back(bench::seconds(start) * 1e6 / static_cast<double>(pages));
      }
      ++passes;
      for (std::size_t p = 0; p < pages; ++p) {
        if (region[p * page] != passes) {
          throw std::runtime_error("trap_bench: page " + std::to_string(p) + " missed a write");
        }
      }
      if (cell.kind == "plain") {
        if (tracker.add(region, bytes) != id) throw std::runtime_error("trap_bench: the region changed its id");
      } else if (const auto written = tracker.written(); written.size() != pages) {
        throw std::runtime_error("trap_bench: " + cell.kind + " noticed " + std::to_string(written.size()) +
                                 " written pages, not " + std::to_string(pages));
      }
    }
    const auto start = bench::Clock::now();
    copy();
    memcpy_times.push_back(bench::seconds(start));
  }
  tracker.remove(id);
  reprise::protected_free(region);

  const double memcpy_us_per_page = bench::median(memcpy_times) * 1e6 / static_cast<double>(pages);
  for (const auto& cell : cells) {
    const double us = bench::median(cell.us_per_write);
    const auto [least, most] = std::minmax_element(cell.us_per_write.begin(), cell.us_per_write.end());
    std::printf("{\"bench\":\"trap\",\"kind\":\"%s\",\"neighbour\":\"%s\",\"order\":\"%s\",\"trap\":\"%s\","
                "\"region_bytes\":%zu,\"page_bytes\":%zu,\"repeats\":%d,\"us_per_write\":%.3f,\"min_us\":%.3f,"
                "\"max_us\":%.3f,\"memcpy_us_per_page\":%.4f,\"ratio\":%.2f}\n",
                cell.kind.c_str(), cell.neighbour.c_str(), bench::kPageOrders[cell.order].c_str(),
                tracker.trap() == reprise::WriteTrap::kMprotect ? "mprotect" : "userfaultfd", bytes, page,
                options.repeats, us, *least, *most, memcpy_us_per_page, us / memcpy_us_per_page);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("trap_bench", kUsage, argc, argv, parse, run); }
