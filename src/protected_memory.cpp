#include "reprise/protected_memory.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "reprise/error.hpp"

namespace reprise {

namespace {

// The signal handler may only read this table: fixed slots of atomics. A
// page's mark is (epoch << 32) | order of its first write in that epoch.
constexpr int kMaxRegions = 256;

struct Slot {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::atomic<std::uint64_t>*> marks{nullptr};
};

Slot g_slots[kMaxRegions];
std::atomic<std::uint64_t> g_epoch{1};
std::atomic<std::uint32_t> g_order{0};
std::size_t g_page = 0;
struct sigaction g_previous {};

std::size_t page_of(std::uintptr_t base, std::uintptr_t address) { return (address - base) / g_page; }

/// Records the first write of page `page` in the current epoch.
void mark_written(std::atomic<std::uint64_t>& mark) {
  const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::uint64_t old = mark.load(std::memory_order_acquire);
  while ((old >> 32U) != epoch) {
    const std::uint64_t now = (epoch << 32U) | (g_order.fetch_add(1, std::memory_order_relaxed) + 1U);
    if (mark.compare_exchange_weak(old, now, std::memory_order_acq_rel)) break;
  }
}

// Async-signal-safe: atomics, arithmetic and mprotect only.
void on_fault(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || address < base || address >= base + slot.bytes.load(std::memory_order_acquire)) continue;
    const std::size_t page = page_of(base, address);
    mark_written(slot.marks.load(std::memory_order_acquire)[page]);
    ::mprotect(reinterpret_cast<void*>(base + page * g_page), g_page, PROT_READ | PROT_WRITE);
    return;
  }
  // Not ours: whoever handled SIGSEGV before, or the default action.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(SIGSEGV, &fallback, nullptr);  // the faulting write runs again and ends the process
}

std::mutex g_mutex;                                         // guards everything below and slot changes
std::map<std::uintptr_t, std::size_t> g_allocations;        // protected_alloc'ed blocks
std::vector<std::unique_ptr<std::atomic<std::uint64_t>[]>> g_retired;  // marks a handler may still read

std::size_t round_up(std::size_t bytes) { return (bytes + g_page - 1) / g_page * g_page; }

}  // namespace

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

void* protected_alloc(std::size_t bytes) {
  if (bytes == 0) throw UsageError("reprise::protected_alloc: 0 bytes requested; ask for at least one byte");
  g_page = page_size();
  const std::size_t length = round_up(bytes);
  void* memory = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    throw UsageError("reprise::protected_alloc: cannot map " + std::to_string(length) + " bytes");
  }
  const std::lock_guard lock(g_mutex);
  g_allocations[reinterpret_cast<std::uintptr_t>(memory)] = length;
  return memory;
}

void protected_free(void* memory) {
  const auto address = reinterpret_cast<std::uintptr_t>(memory);
  std::size_t length = 0;
  {
    const std::lock_guard lock(g_mutex);
    const auto it = g_allocations.find(address);
    if (it == g_allocations.end()) {
      throw UsageError("reprise::protected_free: this memory was not allocated by reprise::protected_alloc; free "
                       "it the way it was allocated (nothing was freed)");
    }
    length = it->second;
    g_allocations.erase(it);
  }
  auto& tracker = DirtyTracker::instance();
  for (int id = 0; id < kMaxRegions; ++id) {
    if (g_slots[id].base.load() == address) tracker.remove(id);
  }
  ::munmap(memory, length);
}

DirtyTracker::DirtyTracker() {
  g_page = page_size();
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &g_previous);
}

DirtyTracker& DirtyTracker::instance() {
  static DirtyTracker tracker;
  return tracker;
}

int DirtyTracker::add(void* base, std::size_t bytes) {
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  if (bytes == 0 || start % g_page != 0 || bytes % g_page != 0) {
    throw UsageError("reprise::DirtyTracker::add: the region at " + std::to_string(start) + " of " +
                     std::to_string(bytes) + " bytes is not whole pages (" + std::to_string(g_page) +
                     " bytes, page-aligned); use reprise::protected_alloc or align it");
  }
  const std::lock_guard lock(g_mutex);
  int free_slot = -1;
  for (int id = 0; id < kMaxRegions; ++id) {
    const std::uintptr_t other = g_slots[id].base.load();
    if (other == 0) {
      if (free_slot < 0) free_slot = id;
      continue;
    }
    if (start < other + g_slots[id].bytes.load() && other < start + bytes) {
      throw UsageError("reprise::DirtyTracker::add: the region overlaps region " + std::to_string(id) +
                       "; register each page once");
    }
  }
  if (free_slot < 0) {
    throw UsageError("reprise::DirtyTracker::add: already " + std::to_string(kMaxRegions) +
                     " regions; register fewer, larger regions");
  }
  const std::size_t pages = bytes / g_page;
  auto marks = std::make_unique<std::atomic<std::uint64_t>[]>(pages);
  for (std::size_t p = 0; p < pages; ++p) marks[p].store(0);
  for (std::size_t p = 0; p < pages; ++p) mark_written(marks[p]);  // new pages count as written
  Slot& slot = g_slots[free_slot];
  slot.marks.store(marks.get(), std::memory_order_release);
  slot.bytes.store(bytes, std::memory_order_release);
  slot.base.store(start, std::memory_order_release);
  g_retired.push_back(std::move(marks));
  return free_slot;
}

void DirtyTracker::remove(int id) {
  const std::lock_guard lock(g_mutex);
  if (id < 0 || id >= kMaxRegions || g_slots[id].base.load() == 0) {
    throw UsageError("reprise::DirtyTracker::remove: there is no region " + std::to_string(id));
  }
  Slot& slot = g_slots[id];
  const std::uintptr_t base = slot.base.load();
  ::mprotect(reinterpret_cast<void*>(base), slot.bytes.load(), PROT_READ | PROT_WRITE);
  slot.base.store(0, std::memory_order_release);
}

std::span<std::byte> DirtyTracker::region(int id) const {
  const std::lock_guard lock(g_mutex);
  if (id < 0 || id >= kMaxRegions || g_slots[id].base.load() == 0) {
    throw UsageError("reprise::DirtyTracker::region: there is no region " + std::to_string(id));
  }
  return {reinterpret_cast<std::byte*>(g_slots[id].base.load()), g_slots[id].bytes.load()};
}

void DirtyTracker::protect_all() {
  const std::lock_guard lock(g_mutex);
  // A new epoch first, then the protection: a write that traps from now on
  // belongs to the new epoch.
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  g_order.store(0, std::memory_order_relaxed);
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load();
    if (base != 0) ::mprotect(reinterpret_cast<void*>(base), slot.bytes.load(), PROT_READ);
  }
}

std::vector<PageRef> DirtyTracker::written() const {
  const std::lock_guard lock(g_mutex);
  const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::vector<PageRef> pages;
  for (int id = 0; id < kMaxRegions; ++id) {
    const Slot& slot = g_slots[id];
    if (slot.base.load() == 0) continue;
    const auto* marks = slot.marks.load();
    for (std::size_t p = 0; p < slot.bytes.load() / g_page; ++p) {
      const std::uint64_t mark = marks[p].load(std::memory_order_acquire);
      if ((mark >> 32U) == epoch) pages.push_back({id, p, mark & 0xffffffffU});
    }
  }
  std::sort(pages.begin(), pages.end(), [](const PageRef& a, const PageRef& b) { return a.order < b.order; });
  return pages;
}

void DirtyTracker::prepare_for_write(void* data, std::size_t bytes) {
  if (bytes == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const auto last = first + bytes - 1;
  const std::lock_guard lock(g_mutex);
  for (auto& slot : g_slots) {
    const std::uintptr_t base = slot.base.load();
    if (base == 0) continue;
    const std::uintptr_t end = base + slot.bytes.load();
    if (last < base || first >= end) continue;
    const std::size_t from = page_of(base, std::max(first, base));
    const std::size_t to = page_of(base, std::min(last, end - 1));
    auto* marks = slot.marks.load();
    for (std::size_t p = from; p <= to; ++p) mark_written(marks[p]);
    ::mprotect(reinterpret_cast<void*>(base + from * g_page), (to - from + 1) * g_page, PROT_READ | PROT_WRITE);
  }
}

}  // namespace reprise
