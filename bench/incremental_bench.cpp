// Incremental checkpoint benchmark: the synthetic test of AI-Ckpt (Nicolae
// and Cappello, HPDC 2013). A protected region (256 MiB) is written by
// `iterations` (39) passes that add one to every byte of every page, visiting
// the pages in ascending, random (one fixed permutation) or descending
// order, with a checkpoint after every `every`-th pass (10, 20, 30). Each
// (order, mode) is one run: the time from the first pass to the end of the
// last, plus the final wait() so that every commit is included. Modes:
// none (no checkpoint, region not protected), sync, address (asynchronous in
// address order, the paper's "async-no-pattern") and adaptive (learned
// order). Every repeat runs every order and mode, and a memcpy of the region,
// in turn, so they share the machine's noise alike. A plain program (no MPI).
//
// Output, one JSON object per line:
// - per order and mode: median_s (median over the repeats; min_s and max_s
//   show their spread), none_s (the median of mode none, same order),
//   increase = (median_s - none_s) / none_s. The page counts
//   (pages_committed, cow, wait, avoided, after), wait_seconds,
//   commit_seconds and call_seconds (time spent in checkpoint()) are summed
//   over the checkpoints of the median run (the lower middle one for an even
//   number of repeats), cow_peak_pages is its largest over them. memcpy_s is
//   the median time of a memcpy of region_bytes; ratio = median_s / memcpy_s
//   (the whole run in memcpys of the region), and ckpt_memcpys =
//   (median_s - none_s) / (checkpoints * memcpy_s), what one checkpoint adds
//   to the run in memcpys of the region. pass_s is the run's own pace, the
//   median time of passes 2..every (before the first checkpoint, nothing
//   trapped), and self_increase = (seconds - iterations * pass_s) /
//   (iterations * pass_s), the median over the repeats: the increase over
//   the run's own pace, which the drift of a noisy machine between runs
//   does not reach as it does none_s;
// - per order, a summary: the increases and the reductions the paper quotes,
//   1 - increase_adaptive / increase_other for other = address and sync,
//   from the increases over none_s and (self_*) over each run's own pace.
// A figure that cannot be computed (its mode not run, or a divisor <= 0) is
// null.
//
// Versions go to a DirectorySink (which fsyncs each version) in a fresh
// directory under --dir (default $TMPDIR or /tmp), removed afterwards, or
// with --sink null nowhere (what is left is the trap and the bookkeeping).
// --sink-mib-per-s N delays the sink's put() to the pace of a device of
// N MiB/s (0: unthrottled, so pages land in the page cache at memory speed).
// --work W adds one to each page W times per visit: an application that
// computes longer per page it writes (the paper's test is W = 1).
// After every run each byte of the region must hold iterations * W mod 256,
// and every checkpoint must have committed every page: the benchmark fails
// otherwise.
//
//   incremental_bench [--mib M] [--cow-mib C] [--iterations I] [--every E]
//                     [--orders asc,random,desc] [--modes none,sync,address,adaptive]
//                     [--repeats R] [--seed S] [--dir DIR] [--sink-mib-per-s N]
//                     [--sink dir|null] [--work W]

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "reprise/incremental.hpp"
#include "reprise/incremental_sink.hpp"
#include "reprise/protected_memory.hpp"

namespace {

using bench::Clock;

const std::vector<std::string> kModes{"none", "sync", "address", "adaptive"};

struct Options {
  std::size_t mib = 256;
  std::size_t cow_mib = 16;
  int iterations = 39;
  int every = 10;
  std::vector<std::string> orders = bench::kPageOrders;
  std::vector<std::string> modes = kModes;
  int repeats = 3;
  std::uint64_t seed = 1;
  std::string dir;
  double sink_mib_per_s = 0;
  std::string sink = "dir";
  int work = 1;
};

constexpr const char* kUsage =
    "usage: incremental_bench [--mib M] [--cow-mib C] [--iterations I] [--every E]\n"
    "                         [--orders asc,random,desc] [--modes none,sync,address,adaptive]\n"
    "                         [--repeats R] [--seed S] [--dir DIR] [--sink-mib-per-s N]\n"
    "                         [--sink dir|null] [--work W]\n";

/// A comma-separated list of distinct names out of `known`.
std::vector<std::string> names(const std::string& flag, const std::string& value,
                               const std::vector<std::string>& known) {
  std::vector<std::string> list;
  std::stringstream items(value);
  for (std::string item; std::getline(items, item, ',');) {
    if (std::find(known.begin(), known.end(), item) == known.end()) {
      std::string choices;
      for (const auto& name : known) choices += (choices.empty() ? "" : ",") + name;
      throw bench::BadOption(flag + ": unknown '" + item + "' (choose from " + choices + ")");
    }
    if (std::find(list.begin(), list.end(), item) != list.end())
      throw bench::BadOption(flag + ": '" + item + "' twice");
    list.push_back(item);
  }
  if (list.empty()) throw bench::BadOption(flag + " wants at least one name");
  return list;
}

/// One name out of `known`.
std::string one_name(const std::string& flag, const std::string& value, const std::vector<std::string>& known) {
  const auto list = names(flag, value, known);
  if (list.size() != 1) throw bench::BadOption(flag + " wants one name, not '" + value + "'");
  return list.front();
}

Options parse(int argc, char** argv) {
  Options options;
  bench::for_each_flag(argc, argv, [&options](const std::string& flag, const std::string& value) {
    if (flag == "--mib") options.mib = bench::number<std::size_t>(flag, value, 1);
    else if (flag == "--cow-mib") options.cow_mib = bench::number<std::size_t>(flag, value, 0);
    else if (flag == "--iterations") options.iterations = bench::number<int>(flag, value, 1);
    else if (flag == "--every") options.every = bench::number<int>(flag, value, 1);
    else if (flag == "--orders") options.orders = names(flag, value, bench::kPageOrders);
    else if (flag == "--modes") options.modes = names(flag, value, kModes);
    else if (flag == "--repeats") options.repeats = bench::number<int>(flag, value, 1);
    else if (flag == "--seed") options.seed = bench::number<std::uint64_t>(flag, value, 0);
    else if (flag == "--dir") options.dir = value.empty() ? throw bench::BadOption("--dir wants a directory") : value;
    else if (flag == "--sink-mib-per-s") options.sink_mib_per_s = bench::number<double>(flag, value, 0.0);
    else if (flag == "--sink") options.sink = one_name(flag, value, {"dir", "null"});
    else if (flag == "--work") options.work = bench::number<int>(flag, value, 1);
    else throw bench::BadOption("unknown flag " + flag);
  });
  if (options.mib > (std::size_t{1} << 20U)) throw bench::BadOption("--mib: at most 1048576 (1 TiB)");
  if (options.cow_mib > options.mib) throw bench::BadOption("--cow-mib: at most --mib");
  std::error_code error;
  if (options.dir.empty()) {
    options.dir = std::filesystem::temp_directory_path(error).string();
    if (error) throw bench::BadOption("$TMPDIR is not a directory; name one with --dir");
  }
  if (!std::filesystem::is_directory(options.dir, error)) {
    throw bench::BadOption("--dir: '" + options.dir + "' is not a directory");
  }
  return options;
}

/// A sink that passes versions on to another at the pace of a device of a
/// given bandwidth: each put() waits until the emulated device would have
/// written the pages before it and this one. The device keeps at most a
/// millisecond of idle time as credit, so oversleeping is caught up on but
/// a pause of the commit does not turn into a burst.
class ThrottledSink : public reprise::IncrementalSink {
 public:
  ThrottledSink(std::unique_ptr<reprise::IncrementalSink> inner, double mib_per_s)
      : _inner(std::move(inner)), _bytes_per_s(mib_per_s * 1024 * 1024) {}

  std::uint64_t newest() override { return _inner->newest(); }
  void begin(std::uint64_t version, const reprise::IncrementalLayout& layout) override {
    _ready = Clock::now();
    _inner->begin(version, layout);
  }
  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) override {
    const auto now = Clock::now();
    _ready = std::max(_ready, now - std::chrono::milliseconds(1)) +
             std::chrono::duration_cast<Clock::duration>(
                 std::chrono::duration<double>(static_cast<double>(bytes.size()) / _bytes_per_s));
    if (_ready > now) std::this_thread::sleep_until(_ready);
    _inner->put(region, page, bytes);
  }
  void end() override { _inner->end(); }
  void publish() override { _inner->publish(); }
  void restore(const reprise::IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) override {
    _inner->restore(layout, regions);
  }

 private:
  std::unique_ptr<reprise::IncrementalSink> _inner;
  double _bytes_per_s;
  Clock::time_point _ready;
};

/// A sink that keeps nothing: what is left of a checkpoint's cost is the
/// write trap, the bookkeeping and the commit thread's reading of the pages.
class NullSink : public reprise::IncrementalSink {
 public:
  std::uint64_t newest() override { return 0; }
  void begin(std::uint64_t /*version*/, const reprise::IncrementalLayout& /*layout*/) override {}
  void put(std::size_t /*region*/, std::size_t /*page*/, std::span<const std::byte> bytes) override {
    _sum += static_cast<unsigned char>(bytes.front()) + static_cast<unsigned char>(bytes.back());
  }
  void end() override {}
  void publish() override {}
  void restore(const reprise::IncrementalLayout& /*layout*/,
               std::span<const std::span<std::byte>> /*regions*/) override {
    throw std::logic_error("incremental_bench: the null sink keeps nothing to restore");
  }

 private:
  std::size_t _sum = 0;
};

/// Memory from protected_alloc, released at the end.
struct Region {
  explicit Region(std::size_t size) : bytes(size), data(static_cast<unsigned char*>(reprise::protected_alloc(size))) {}
  ~Region() { reprise::protected_free(data); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  [[nodiscard]] std::span<std::byte> span() const { return {reinterpret_cast<std::byte*>(data), bytes}; }
  std::size_t bytes;
  unsigned char* data;
};

/// A directory of our own, removed at the end.
struct ScratchDir {
  explicit ScratchDir(std::filesystem::path where) : path(std::move(where)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::filesystem::path path;
};

/// Adds one to every byte of a page. The empty asm, which may read and
/// write all memory, keeps each page's writes in their place: passes cannot
/// be fused or reordered, so every pass writes (and traps on) every page.
void increment(unsigned char* page, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) page[i] = static_cast<unsigned char>(page[i] + 1U);
  __asm__ __volatile__("" : : "r"(page) : "memory");
}

/// One run's time and what its checkpoints did, summed over them.
struct Run {
  double seconds = 0;
  std::optional<double> pass_s;  // the run's own pace: median of passes 2..every (no checkpoint yet)
  int checkpoints = 0;
  std::size_t pages_committed = 0;
  std::size_t cow = 0;
  std::size_t wait = 0;
  std::size_t avoided = 0;
  std::size_t after = 0;
  std::size_t cow_peak_pages = 0;
  double wait_seconds = 0;
  double commit_seconds = 0;
  double call_seconds = 0;
};

/// Runs the passes once in `mode` (memory freshly allocated, and released
/// before returning) and checks the result.
Run run_once(const Options& options, const std::string& mode, const std::string& order_name,
             const std::vector<std::size_t>& order, const std::filesystem::path& dir) {
  const std::size_t page = reprise::page_size();
  Region region(options.mib << 20U);
  std::memset(region.data, 0, region.bytes);  // the first touch of each page, outside the timing
  std::unique_ptr<reprise::IncrementalCheckpoint> checkpoint;
  if (mode != "none") {
    const reprise::CommitMode commit = mode == "sync"      ? reprise::CommitMode::kSync
                                       : mode == "address" ? reprise::CommitMode::kAsyncAddress
                                                           : reprise::CommitMode::kAsyncAdaptive;
    std::unique_ptr<reprise::IncrementalSink> sink;
    if (options.sink == "null") {
      sink = std::make_unique<NullSink>();
    } else {
      sink = std::make_unique<reprise::DirectorySink>(dir.string());
    }
    if (options.sink_mib_per_s > 0) sink = std::make_unique<ThrottledSink>(std::move(sink), options.sink_mib_per_s);
    checkpoint = std::make_unique<reprise::IncrementalCheckpoint>(
        std::move(sink), reprise::IncrementalConfig{.mode = commit, .cow_bytes = options.cow_mib << 20U});
    checkpoint->protect(region.span());
  }

  Run run;
  std::vector<double> first_epoch;  // passes 2..every: no checkpoint has been taken, nothing is trapped
  const auto start = Clock::now();
  for (int pass = 1; pass <= options.iterations; ++pass) {
    const auto pass_start = Clock::now();
    for (const std::size_t p : order) {
      for (int w = 0; w < options.work; ++w) increment(region.data + p * page, page);
    }
    if (pass >= 2 && pass <= options.every) first_epoch.push_back(bench::seconds(pass_start));
    if (checkpoint && pass % options.every == 0) checkpoint->checkpoint();
  }
  if (checkpoint && checkpoint->version() > 0) checkpoint->wait();
  run.seconds = bench::seconds(start);
  if (!first_epoch.empty()) run.pass_s = bench::median(first_epoch);

  const std::string what = "incremental_bench: " + order_name + "/" + mode + ": ";
  if (checkpoint) {
    for (const auto& stats : checkpoint->history()) {
      ++run.checkpoints;
      // Every pass writes every page; only the full version leaves out pages
      // that are zero (all of them when `every` is a multiple of 256).
      const std::size_t all = stats.version == 1 && (options.every * options.work) % 256 == 0 ? 0 : order.size();
      if (stats.pages_committed != all) {
        throw std::runtime_error(what + "checkpoint " + std::to_string(stats.version) + " committed " +
                                 std::to_string(stats.pages_committed) + " pages, not " + std::to_string(all));
      }
      run.pages_committed += stats.pages_committed;
      run.cow += stats.cow;
      run.wait += stats.wait;
      run.avoided += stats.avoided;
      run.after += stats.after;
      run.cow_peak_pages = std::max(run.cow_peak_pages, stats.cow_peak_pages);
      run.wait_seconds += stats.wait_seconds;
      run.commit_seconds += stats.commit_seconds;
      run.call_seconds += stats.call_seconds;
    }
    if (run.checkpoints != options.iterations / options.every) {
      throw std::runtime_error(what + std::to_string(run.checkpoints) + " checkpoints in the history, not " +
                               std::to_string(options.iterations / options.every));
    }
    checkpoint.reset();  // unprotects the region before it is released
  }
  const auto expected = static_cast<unsigned char>((options.iterations * options.work) % 256);
  const auto* wrong = std::find_if(region.data, region.data + region.bytes,
                                   [expected](unsigned char byte) { return byte != expected; });
  if (wrong != region.data + region.bytes) {
    throw std::runtime_error(what + "byte " + std::to_string(wrong - region.data) + " holds " + std::to_string(*wrong) +
                             ", not " + std::to_string(expected) + ": a pass did not write every page");
  }
  return run;
}

/// The run of median time (the lower middle one for an even count).
const Run& median_run(const std::vector<Run>& runs) {
  std::vector<const Run*> sorted;
  for (const auto& run : runs) sorted.push_back(&run);
  std::sort(sorted.begin(), sorted.end(), [](const Run* a, const Run* b) { return a->seconds < b->seconds; });
  return *sorted[(sorted.size() - 1) / 2];
}

/// A JSON number, or null when there is none.
std::string json(std::optional<double> value, const char* format = "%.6f") {
  if (!value) return "null";
  char text[64];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

/// a / b when b > 0.
std::optional<double> divide(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

/// What every line repeats: the setup of the run.
std::string setup(const Options& options) {
  char text[400];
  std::snprintf(text, sizeof text,
                "\"region_bytes\":%zu,\"cow_bytes\":%zu,\"page_bytes\":%zu,\"iterations\":%d,\"every\":%d,"
                "\"checkpoints\":%d,\"repeats\":%d,\"seed\":%llu,\"sink\":\"%s\","
                "\"sink_mib_per_s\":%g,\"work\":%d,\"trap\":\"%s\",\"written_bits\":%s",
                options.mib << 20U, options.cow_mib << 20U, reprise::page_size(), options.iterations, options.every,
                options.iterations / options.every, options.repeats, static_cast<unsigned long long>(options.seed),
                options.sink.c_str(), options.sink_mib_per_s, options.work,
                reprise::DirtyTracker::instance().trap() == reprise::WriteTrap::kMprotect ? "mprotect" : "userfaultfd",
                reprise::DirtyTracker::instance().keeps_written_bits() ? "true" : "false");
  return text;
}

/// The figures of one page order over the repeats: `runs[mode][repeat]`.
class OrderFigures {
 public:
  OrderFigures(const Options& options, const std::vector<std::vector<Run>>& runs) : _options(options), _runs(runs) {}

  /// The median over the repeats of `figure(run)` in `mode`; nothing if the
  /// mode was not run or a run has no such figure.
  template <class Figure>
  [[nodiscard]] std::optional<double> median_over_runs(const std::string& mode, Figure figure) const {
    const auto at = std::find(_options.modes.begin(), _options.modes.end(), mode);
    if (at == _options.modes.end()) return std::nullopt;
    std::vector<double> values;
    for (const auto& one : _runs[static_cast<std::size_t>(at - _options.modes.begin())]) {
      const std::optional<double> value = figure(one);
      if (!value) return std::nullopt;
      values.push_back(*value);
    }
    return bench::median(values);
  }

  [[nodiscard]] std::optional<double> median_s(const std::string& mode) const {
    return median_over_runs(mode, [](const Run& one) -> std::optional<double> { return one.seconds; });
  }

  /// The increase over the run's own pace (every run measures it in its
  /// first passes): the median over the repeats, free of the drift between
  /// runs that an increase over another run (`none`) picks up.
  [[nodiscard]] std::optional<double> self_increase(const std::string& mode) const {
    return median_over_runs(mode, [&](const Run& one) -> std::optional<double> {
      if (!one.pass_s || *one.pass_s <= 0) return std::nullopt;
      const double paced = _options.iterations * *one.pass_s;
      return (one.seconds - paced) / paced;
    });
  }

  [[nodiscard]] std::optional<double> pass_s(const std::string& mode) const {
    return median_over_runs(mode, [](const Run& one) { return one.pass_s; });
  }

  /// The increase of `mode`'s time over the run without checkpoints.
  [[nodiscard]] std::optional<double> increase(const std::string& mode) const {
    const auto mode_s = median_s(mode);
    const auto none_s = median_s("none");
    return divide(mode_s && none_s ? std::optional<double>(*mode_s - *none_s) : std::nullopt, none_s);
  }

 private:
  const Options& _options;
  const std::vector<std::vector<Run>>& _runs;
};

/// One line per mode of the page order `order`.
void print_modes(const Options& options, const std::string& order, const std::vector<std::vector<Run>>& runs,
                 double memcpy_s) {
  const OrderFigures figures(options, runs);
  const auto none_s = figures.median_s("none");
  const int checkpoints = options.iterations / options.every;
  for (std::size_t m = 0; m < options.modes.size(); ++m) {
    const std::string& mode = options.modes[m];
    const auto median_s = figures.median_s(mode);
    const Run& middle = median_run(runs[m]);
    const auto [fastest, slowest] = std::minmax_element(
        runs[m].begin(), runs[m].end(), [](const Run& a, const Run& b) { return a.seconds < b.seconds; });
    const auto overhead = none_s ? std::optional<double>(*median_s - *none_s) : std::nullopt;
    std::printf("{\"bench\":\"incremental\",\"order\":\"%s\",\"mode\":\"%s\",%s,\"median_s\":%.6f,"
                "\"min_s\":%.6f,\"max_s\":%.6f,\"none_s\":%s,\"increase\":%s,\"pages_committed\":%zu,"
                "\"cow\":%zu,\"wait\":%zu,\"avoided\":%zu,\"after\":%zu,\"cow_peak_pages\":%zu,"
                "\"wait_seconds\":%.6f,\"commit_seconds\":%.6f,\"call_seconds\":%.6f,\"memcpy_s\":%.6f,"
                "\"ratio\":%.2f,\"ckpt_memcpys\":%s,\"pass_s\":%s,\"self_increase\":%s}\n",
                order.c_str(), mode.c_str(), setup(options).c_str(), *median_s, fastest->seconds, slowest->seconds,
                json(none_s).c_str(), json(divide(overhead, none_s), "%.4f").c_str(), middle.pages_committed,
                middle.cow, middle.wait, middle.avoided, middle.after, middle.cow_peak_pages, middle.wait_seconds,
                middle.commit_seconds, middle.call_seconds, memcpy_s, *median_s / memcpy_s,
                json(mode == "none" ? std::nullopt : divide(overhead, memcpy_s * checkpoints), "%.2f").c_str(),
                json(figures.pass_s(mode)).c_str(), json(figures.self_increase(mode), "%.4f").c_str());
  }
}

/// The page order's summary: each commit mode's increase, and how much the
/// learned order takes off the others'.
void print_summary(const Options& options, const std::string& order, const std::vector<std::vector<Run>>& runs) {
  const OrderFigures f(options, runs);
  auto reduction = [](std::optional<double> adaptive, std::optional<double> other) -> std::optional<double> {
    const auto ratio = divide(adaptive, other);
    return ratio ? std::optional<double>(1 - *ratio) : std::nullopt;
  };
  std::printf("{\"bench\":\"incremental_summary\",\"order\":\"%s\",%s,\"increase_sync\":%s,\"increase_address\":%s,"
              "\"increase_adaptive\":%s,\"reduction_vs_address\":%s,\"reduction_vs_sync\":%s,"
              "\"self_increase_sync\":%s,\"self_increase_address\":%s,\"self_increase_adaptive\":%s,"
              "\"self_reduction_vs_address\":%s,\"self_reduction_vs_sync\":%s}\n",
              order.c_str(), setup(options).c_str(), json(f.increase("sync"), "%.4f").c_str(),
              json(f.increase("address"), "%.4f").c_str(), json(f.increase("adaptive"), "%.4f").c_str(),
              json(reduction(f.increase("adaptive"), f.increase("address")), "%.4f").c_str(),
              json(reduction(f.increase("adaptive"), f.increase("sync")), "%.4f").c_str(),
              json(f.self_increase("sync"), "%.4f").c_str(), json(f.self_increase("address"), "%.4f").c_str(),
              json(f.self_increase("adaptive"), "%.4f").c_str(),
              json(reduction(f.self_increase("adaptive"), f.self_increase("address")), "%.4f").c_str(),
              json(reduction(f.self_increase("adaptive"), f.self_increase("sync")), "%.4f").c_str());
}

void run(const Options& options) {
  const std::size_t pages = (options.mib << 20U) / reprise::page_size();
  const ScratchDir scratch(std::filesystem::path(options.dir) /
                           ("reprise-incremental-bench-" + std::to_string(::getpid())));
  std::vector<std::vector<std::size_t>> orders;
  for (const auto& name : options.orders) orders.push_back(bench::page_order(name, pages, options.seed));
  bench::Memcpy copy(options.mib << 20U);

  // runs[order][mode], one per repeat; memcpy timed once per order and repeat.
  std::vector<std::vector<std::vector<Run>>> runs(orders.size(), std::vector<std::vector<Run>>(options.modes.size()));
  std::vector<double> memcpy_times;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    for (std::size_t o = 0; o < orders.size(); ++o) {
      for (std::size_t m = 0; m < options.modes.size(); ++m) {
        const ScratchDir versions(scratch.path / "versions");
        runs[o][m].push_back(run_once(options, options.modes[m], options.orders[o], orders[o], versions.path));
      }
      const auto start = Clock::now();
      copy();
      memcpy_times.push_back(bench::seconds(start));
      if (copy.to[copy.to.size() / 2] != std::byte{1}) {
        throw std::runtime_error("incremental_bench: the memcpy baseline did not copy");
      }
    }
  }
  const double memcpy_s = bench::median(memcpy_times);
  for (std::size_t o = 0; o < orders.size(); ++o) {
    print_modes(options, options.orders[o], runs[o], memcpy_s);
    print_summary(options, options.orders[o], runs[o]);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("incremental_bench", kUsage, argc, argv, parse, run); }
