#include "reprise/incremental.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "log.hpp"
#include "commit_state.hpp"
#include "cow_protocol.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/protected_memory.hpp"

namespace reprise {

using detail::Access;
using detail::CowProtocol;
using detail::PageId;
using detail::PageInfo;
using detail::PageState;

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_in_use{false};  // one IncrementalCheckpoint per process

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// Where a page goes in the learned order: the pages written first after
/// the last checkpoint started go first, the ones that made a writer wait
/// before all others.
int rank_of(Access access) {
  switch (access) {
    case Access::kWait:
      return 0;
    case Access::kCow:
      return 1;
    case Access::kAvoided:
      return 2;
    case Access::kAfter:
      return 3;
    case Access::kNone:
      return 4;
  }
  return 4;
}

bool all_zero(std::span<const std::byte> page) {
  return std::all_of(page.begin(), page.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

/// A page of the coming version and its place in the learned order.
struct ListedPage {
  PageId id;
  std::size_t region_index = 0;  // in registration order
  int rank = 0;                  // rank_of the access of its first write
  std::uint64_t order = 0;       // its first write (written while open: after every trapped one)
  bool trapped = true;           // false: noticed by the kernel's written bits (AFTER)
};

std::size_t count_untrapped(const std::vector<ListedPage>& pages) {
  return static_cast<std::size_t>(
      std::count_if(pages.begin(), pages.end(), [](const ListedPage& page) { return !page.trapped; }));
}

struct IncrementalCheckpoint::Impl {
  std::unique_ptr<IncrementalSink> sink;
  IncrementalConfig config;
  std::vector<int> ids;                     // tracker ids, in registration order
  std::vector<std::span<std::byte>> spans;  // the regions
  IncrementalLayout layout;
  std::uint64_t version = 0;    // newest started
  std::uint64_t published = 0;  // newest published
  bool restored = false;        // the chain in the sink was restored: it may go on
  std::vector<IncrementalStats> history;

  // The commit thread and the job it runs.
  std::thread thread;
  std::mutex mutex;
  std::condition_variable changed;
  bool has_job = false;
  bool stop = false;
  std::vector<PageId> order;  // of the running (or last) version
  std::vector<PageId> carry;  // pages of a version that failed, owed to the next one
  bool full = false;
  Clock::time_point started;
  std::exception_ptr error;
  std::size_t committed_pages = 0;
  double commit_seconds = 0;

  void run_thread();
  void put(std::size_t region_index, std::size_t page, std::span<const std::byte> bytes);
  std::exception_ptr run_job();
  std::exception_ptr wait_commit();
  void drop_unpublished();
  void finish_running();
  void gather_stats(IncrementalStats& stats, bool reset);
  /// The pages of our regions written in this epoch: the trapped ones in
  /// order of first write, then those written while open.
  [[nodiscard]] std::vector<ListedPage> written_pages() const;
  /// Every page of our regions, in address order: a full version's.
  [[nodiscard]] std::vector<ListedPage> all_pages() const;
  /// The pages written in this epoch, then those a version that failed owes
  /// (`carry`) that were not written again.
  [[nodiscard]] std::vector<ListedPage> changed_pages() const;
  /// `listed` in the order of the mode: the learned order for the adaptive
  /// mode past a full version, else address order.
  [[nodiscard]] std::vector<PageId> commit_order(std::vector<ListedPage> listed, bool full_version) const;
  /// Every page's state for this checkpoint (`pages` are scheduled), then
  /// the trap armed: from the protection on, a write is checked against
  /// these states.
  void arm(std::span<const PageId> pages);
  /// Starts the next version, committing `pages` (taken at `start`): at
  /// once in the sync mode, else by the commit thread.
  void start_version(std::vector<PageId> pages, bool full_version, Clock::time_point start);
};

void IncrementalCheckpoint::Impl::put(std::size_t region_index, std::size_t page, std::span<const std::byte> bytes) {
  if (full && all_zero(bytes)) return;  // a full version leaves zero pages out
  sink->put(region_index, page, bytes);
  ++committed_pages;
}

std::exception_ptr IncrementalCheckpoint::Impl::run_job() {
  std::exception_ptr failure;
  auto& protocol = CowProtocol::instance();
  try {
    sink->begin(version, layout);
    protocol.commit(order, [this](std::size_t region_index, std::size_t page, std::span<const std::byte> bytes) {
      put(region_index, page, bytes);
    });
    sink->end();
  } catch (...) {
    failure = std::current_exception();
    protocol.abandon(order);  // no writer may stay blocked on a commit that failed
  }
  protocol.finish();
  // Nothing needs to see writes as they happen until the next checkpoint:
  // where the kernel keeps written bits, later first writes cost no trap.
  (void)DirtyTracker::instance().open_all();
  return failure;
}

void IncrementalCheckpoint::Impl::run_thread() {
  std::unique_lock lock(mutex);
  for (;;) {
    changed.wait(lock, [this] { return has_job || stop; });
    if (!has_job) return;
    lock.unlock();
    const std::exception_ptr failure = run_job();
    const double took = seconds_since(started);
    lock.lock();
    error = failure;
    commit_seconds = took;
    has_job = false;
    changed.notify_all();
  }
}

std::vector<ListedPage> IncrementalCheckpoint::Impl::written_pages() const {
  std::vector<ListedPage> pages;
  for (const auto& page : DirtyTracker::instance().written()) {
    const std::size_t r = CowProtocol::instance().region_index(page.region);
    if (r >= ids.size() || ids[r] != page.region) continue;  // not one of ours
    const Access access = page.trapped
                              ? detail::page_infos(page.region)[page.page].access.load(std::memory_order_acquire)
                              : Access::kAfter;
    pages.push_back({{page.region, page.page}, r, rank_of(access), page.order, page.trapped});
  }
  return pages;
}

std::vector<ListedPage> IncrementalCheckpoint::Impl::all_pages() const {
  std::vector<ListedPage> pages;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    for (std::size_t p = 0; p < spans[r].size() / layout.page_bytes; ++p) pages.push_back({{ids[r], p}, r});
  }
  return pages;
}

std::vector<ListedPage> IncrementalCheckpoint::Impl::changed_pages() const {
  std::vector<ListedPage> pages = written_pages();
  if (carry.empty()) return pages;
  std::set<std::pair<int, std::size_t>> seen;
  for (const auto& page : pages) seen.emplace(page.id.region, page.id.page);
  for (const auto& owed : carry) {
    if (!seen.emplace(owed.region, owed.page).second) continue;
    const PageInfo& info = detail::page_infos(owed.region)[owed.page];
    pages.push_back({owed, CowProtocol::instance().region_index(owed.region),
                     rank_of(info.access.load(std::memory_order_acquire)),
                     detail::mark_order(info.mark.load(std::memory_order_acquire))});
  }
  return pages;
}

std::vector<PageId> IncrementalCheckpoint::Impl::commit_order(std::vector<ListedPage> listed, bool full_version) const {
  if (config.mode == CommitMode::kAsyncAdaptive && !full_version) {
    std::stable_sort(listed.begin(), listed.end(), [](const ListedPage& a, const ListedPage& b) {
      return a.rank != b.rank ? a.rank < b.rank : a.order < b.order;
    });
  } else {
    std::sort(listed.begin(), listed.end(), [](const ListedPage& a, const ListedPage& b) {
      return a.region_index != b.region_index ? a.region_index < b.region_index : a.id.page < b.id.page;
    });
  }
  std::vector<PageId> pages;
  pages.reserve(listed.size());
  for (const auto& page : listed) pages.push_back(page.id);
  return pages;
}

void IncrementalCheckpoint::Impl::arm(std::span<const PageId> pages) {
  for (std::size_t r = 0; r < ids.size(); ++r) {
    PageInfo* infos = detail::page_infos(ids[r]);
    for (std::size_t p = 0; p < spans[r].size() / layout.page_bytes; ++p) {
      infos[p].state.store(PageState::kClean, std::memory_order_relaxed);
    }
  }
  for (const auto& page : pages) {
    detail::page_infos(page.region)[page.page].state.store(PageState::kScheduled, std::memory_order_relaxed);
  }
  CowProtocol::instance().start();
  DirtyTracker::instance().protect_all();
}

void IncrementalCheckpoint::Impl::start_version(std::vector<PageId> pages, bool full_version, Clock::time_point start) {
  ++version;
  history.push_back({});
  history.back().version = version;
  full = full_version;
  started = start;
  committed_pages = 0;
  if (config.mode == CommitMode::kSync) {
    order = std::move(pages);
    const std::exception_ptr failure = run_job();
    const std::lock_guard lock(mutex);
    error = failure;
    commit_seconds = seconds_since(start);
  } else {
    const std::lock_guard lock(mutex);
    order = std::move(pages);
    has_job = true;
    changed.notify_all();
  }
  if (config.mode == CommitMode::kSync) finish_running();
}

void IncrementalCheckpoint::Impl::gather_stats(IncrementalStats& stats, bool reset) {
  const auto counts = CowProtocol::instance().counts(reset);
  stats.cow = counts.cow;
  stats.wait = counts.wait;
  stats.avoided = counts.avoided;
  stats.after = counts.after;
  stats.wait_seconds = counts.wait_seconds;
  stats.cow_peak_pages = std::max<std::size_t>(stats.cow_peak_pages, counts.peak_slots);
}

std::exception_ptr IncrementalCheckpoint::Impl::wait_commit() {
  std::unique_lock lock(mutex);
  changed.wait(lock, [this] { return !has_job; });
  if (version != published) {
    history.back().commit_seconds = commit_seconds;
    history.back().pages_committed = committed_pages;
  }
  return std::exchange(error, nullptr);
}

void IncrementalCheckpoint::Impl::drop_unpublished() {
  // The version does not exist: its pages go into the next one.
  carry = std::move(order);
  order.clear();
  --version;
  history.pop_back();
}

void IncrementalCheckpoint::Impl::finish_running() {
  if (version == published) return;
  std::exception_ptr failure = wait_commit();
  gather_stats(history.back(), false);
  if (!failure) {
    try {
      sink->publish();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (failure) {
    drop_unpublished();
    std::rethrow_exception(failure);
  }
  published = version;
}

IncrementalCheckpoint::IncrementalCheckpoint(std::unique_ptr<IncrementalSink> sink, IncrementalConfig config)
    : _impl(std::make_unique<Impl>()) {
  if (!sink) throw UsageError("reprise::IncrementalCheckpoint: no sink given");
  if (g_in_use.exchange(true)) {
    throw UsageError("reprise::IncrementalCheckpoint: this process already has one; the write trap is per process, "
                     "so protect every region with a single IncrementalCheckpoint");
  }
  auto& d = *_impl;
  d.sink = std::move(sink);
  d.config = config;
  d.layout.page_bytes = page_size();
  try {
    d.version = d.published = d.sink->newest();
  } catch (...) {
    g_in_use = false;
    throw;
  }
  const std::size_t slots = config.mode == CommitMode::kSync ? 0 : config.cow_bytes / page_size();
  CowProtocol::instance().configure(slots, page_size(), config.mode == CommitMode::kAsyncAdaptive);
  if (config.mode != CommitMode::kSync) d.thread = std::thread([this] { _impl->run_thread(); });
}

IncrementalCheckpoint::IncrementalCheckpoint(std::string directory, IncrementalConfig config)
    : IncrementalCheckpoint(std::make_unique<DirectorySink>(std::move(directory)), config) {}

IncrementalCheckpoint::~IncrementalCheckpoint() {
  auto& d = *_impl;
  {
    std::unique_lock lock(d.mutex);
    d.changed.wait(lock, [&d] { return !d.has_job; });
    d.stop = true;
    d.changed.notify_all();
  }
  if (d.thread.joinable()) d.thread.join();
  auto& tracker = DirtyTracker::instance();
  for (int id : d.ids) {
    try {
      tracker.remove(id);
    } catch (const UsageError&) {
      // Already gone (the memory was released with protected_free).
    }
  }
  CowProtocol::instance().release();
  g_in_use = false;
}

void IncrementalCheckpoint::protect(std::span<std::byte> region) {
  auto& d = *_impl;
  if (!d.history.empty()) {
    throw UsageError("reprise::IncrementalCheckpoint::protect: a checkpoint was already taken; protect every "
                     "region before the first checkpoint");
  }
  const int id = DirtyTracker::instance().add(region.data(), region.size());
  CowProtocol::instance().add_region(id, d.ids.size(), region);
  d.ids.push_back(id);
  d.spans.push_back(region);
  d.layout.region_bytes.push_back(region.size());
}

std::uint64_t IncrementalCheckpoint::checkpoint() try {
  auto& d = *_impl;
  const auto start = Clock::now();
  if (d.history.empty() && !d.restored && d.version > 0) {
    throw UsageError("reprise::IncrementalCheckpoint::checkpoint: " + d.sink->where() +
                     " already holds versions up to " + std::to_string(d.version) +
                     " of another run; call restore() first to continue that run, or start this run in an empty "
                     "directory (or remove the old versions). Nothing was written.");
  }
  d.finish_running();
  IncrementalStats before;  // what the epoch now ending did to the last checkpoint
  IncrementalStats& ending = d.history.empty() ? before : d.history.back();
  d.gather_stats(ending, true);
  // What to commit: every page the first time (in address order), then the
  // pages written since the last checkpoint, in the order of the mode.
  const bool full = d.version == 0;
  std::vector<ListedPage> listed = full ? d.all_pages() : d.changed_pages();
  if (!full) ending.after += count_untrapped(listed);
  d.carry.clear();
  std::vector<PageId> pages = d.commit_order(std::move(listed), full);
  d.arm(pages);
  d.start_version(std::move(pages), full, start);
  d.history.back().call_seconds = seconds_since(start);
  return d.version;
} catch (const Error&) {
  detail::rethrow_naming("reprise::IncrementalCheckpoint::checkpoint");
}

const IncrementalStats& IncrementalCheckpoint::wait() try {
  auto& d = *_impl;
  d.finish_running();
  if (d.history.empty()) throw UsageError("reprise::IncrementalCheckpoint::wait: no checkpoint was taken");
  d.gather_stats(d.history.back(), false);
  d.history.back().after += count_untrapped(d.written_pages());  // so far
  return d.history.back();
} catch (const Error&) {
  detail::rethrow_naming("reprise::IncrementalCheckpoint::wait");
}

IncrementalRestore IncrementalCheckpoint::restore() try {
  auto& d = *_impl;
  // A version still unpublished is not kept: the restore rolls back to the
  // newest published one (with a local sink, the newest complete file).
  if (d.version != d.published) {
    (void)d.wait_commit();
    d.drop_unpublished();
  }
  d.sink->restore(d.layout, d.spans);
  // The memory now is the restored version, which the sink holds: the
  // restore's own writes are no change, and the next version holds only the
  // pages written from here on.
  d.carry.clear();
  DirtyTracker::instance().protect_all();
  d.version = d.published = d.sink->newest();
  d.restored = true;
  while (!d.history.empty() && d.history.back().version > d.version) d.history.pop_back();
  IncrementalRestore result{d.version, d.sink->restore_notes()};
  if (!result.skipped.empty()) {
    logging::warning("reprise::IncrementalCheckpoint::restore: %s", result.skipped.c_str());
  }
  return result;
} catch (const Error&) {
  detail::rethrow_naming("reprise::IncrementalCheckpoint::restore");
}

std::uint64_t IncrementalCheckpoint::version() const noexcept { return _impl->version; }

std::span<const IncrementalStats> IncrementalCheckpoint::history() const noexcept { return _impl->history; }

}  // namespace reprise
