#include "cow_protocol.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace reprise::detail {

namespace {

/// Spin lock over the protocol's flag, usable in the signal handler.
class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag& flag) : _flag(flag) {
    while (_flag.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinGuard() { _flag.clear(std::memory_order_release); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  std::atomic_flag& _flag;
};

std::uint64_t now_nanoseconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000U + static_cast<std::uint64_t>(now.tv_nsec);
}

CowProtocol g_protocol;

}  // namespace

CowProtocol& CowProtocol::instance() { return g_protocol; }

void CowProtocol::configure(std::size_t slots, std::size_t page_bytes, bool follow_writes) {
  _page_bytes = page_bytes;
  _cow.assign(slots * page_bytes, std::byte{0});
  _free_slots.assign(slots, 0);
  _filled.assign(slots, 0);
  _filled_page.assign(slots, PageId{});
  _slot_count = static_cast<std::uint32_t>(slots);
  _free_count = 0;
  _filled_size = 0;
  _follow_writes.store(follow_writes, std::memory_order_release);
}

void CowProtocol::add_region(int id, std::size_t index, std::span<const std::byte> memory) {
  _regions[id] = {memory.data(), index};
}

void CowProtocol::release() {
  _cow = {};
  _free_slots = {};
  _filled = {};
  _filled_page = {};
  _slot_count = 0;
  _free_count = 0;
  _filled_size = 0;
  std::fill(std::begin(_regions), std::end(_regions), Region{});
}

// ---- The writer's side -----------------------------------------------------

void CowProtocol::on_write(PageInfo& info, PageId id, const std::byte* page, bool first) {
  const Access access = _active.load(std::memory_order_acquire) ? resolve(info, id, page) : Access::kAfter;
  if (first) {
    info.access.store(access, std::memory_order_release);
    count(access);
  }
}

// Decides what a write to a page of a running checkpoint does before it may
// go on: copy the old content aside, wait for the commit, or nothing.
Access CowProtocol::resolve(PageInfo& info, PageId id, const std::byte* page) {
  for (;;) {
    switch (info.state.load(std::memory_order_acquire)) {
      case PageState::kClean:
      case PageState::kInBuffer:
      case PageState::kCommitted:
        return Access::kAvoided;
      case PageState::kCopying:  // another thread of the process is copying it: a page's time
        continue;
      case PageState::kCommitting:
        wait_committed(info);
        return Access::kWait;
      case PageState::kScheduled:
        break;
    }
    bool have_slot = false;
    std::uint32_t slot = 0;
    {
      const SpinGuard guard(_lock);
      if (_free_count > 0) {
        slot = _free_slots[--_free_count];
        have_slot = true;
        _peak_used = std::max(_peak_used, _slot_count - _free_count);
      }
    }
    const bool follow = _follow_writes.load(std::memory_order_acquire);
    if (!have_slot) {
      if (follow) {
        const SpinGuard guard(_lock);
        if (_urgent_count < kMaxUrgent) _urgent[_urgent_count++] = id;
      }
      wait_committed(info);
      return Access::kWait;
    }
    PageState expected = PageState::kScheduled;
    if (!info.state.compare_exchange_strong(expected, PageState::kCopying, std::memory_order_acq_rel)) {
      const SpinGuard guard(_lock);  // the commit thread took it first: give the slot back
      _free_slots[_free_count++] = slot;
      continue;
    }
    std::memcpy(_cow.data() + static_cast<std::size_t>(slot) * _page_bytes, page, _page_bytes);
    info.slot.store(slot, std::memory_order_relaxed);
    info.state.store(PageState::kInBuffer, std::memory_order_release);
    if (!follow) return Access::kCow;  // committed from the slot when the commit reaches the page
    const SpinGuard guard(_lock);
    _filled[(_filled_head + _filled_size) % _slot_count] = slot;
    _filled_page[slot] = id;
    ++_filled_size;
    return Access::kCow;
  }
}

// Sleeps until `info`'s page is committed (the commit thread bumps
// `_progress` and wakes the sleepers after every page).
void CowProtocol::wait_committed(PageInfo& info) {
  const std::uint64_t start = now_nanoseconds();
  _waiters.fetch_add(1, std::memory_order_acq_rel);
  while (info.state.load(std::memory_order_acquire) != PageState::kCommitted) {
    const std::uint32_t seen = _progress.load(std::memory_order_acquire);
    if (info.state.load(std::memory_order_acquire) == PageState::kCommitted) break;
    timespec timeout{0, 1000000};  // also bounds a missed wake-up
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&_progress), FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0);
  }
  _waiters.fetch_sub(1, std::memory_order_acq_rel);
  _wait_nanoseconds.fetch_add(now_nanoseconds() - start, std::memory_order_relaxed);
}

void CowProtocol::count(Access access) {
  switch (access) {
    case Access::kCow:
      _cow_pages.fetch_add(1, std::memory_order_relaxed);
      break;
    case Access::kWait:
      _wait_pages.fetch_add(1, std::memory_order_relaxed);
      break;
    case Access::kAvoided:
      _avoided_pages.fetch_add(1, std::memory_order_relaxed);
      break;
    case Access::kAfter:
      _after_pages.fetch_add(1, std::memory_order_relaxed);
      break;
    case Access::kNone:
      break;
  }
}

// ---- The committer's side --------------------------------------------------

void CowProtocol::start() {
  empty_buffer();
  _active.store(true, std::memory_order_release);
}

void CowProtocol::finish() { _active.store(false, std::memory_order_release); }

bool CowProtocol::commit_in_place(PageId id, const Put& put) {
  PageInfo& info = page_infos(id.region)[id.page];
  PageState expected = PageState::kScheduled;
  if (!info.state.compare_exchange_strong(expected, PageState::kCommitting, std::memory_order_acq_rel)) return false;
  const Region& region = _regions[id.region];
  put(region.index, id.page, std::span(region.base + id.page * _page_bytes, _page_bytes));
  info.state.store(PageState::kCommitted, std::memory_order_release);
  wake_waiters();
  return true;
}

void CowProtocol::commit_buffered(PageId id, std::uint32_t slot, const Put& put) {
  put(_regions[id.region].index, id.page,
      std::span<const std::byte>(_cow.data() + static_cast<std::size_t>(slot) * _page_bytes, _page_bytes));
  page_infos(id.region)[id.page].state.store(PageState::kCommitted, std::memory_order_release);
  {
    const SpinGuard guard(_lock);
    _free_slots[_free_count++] = slot;
  }
  wake_waiters();
}

// The address order: each page in turn, from its slot if a writer copied it.
void CowProtocol::commit_in_order(std::span<const PageId> pages, const Put& put) {
  for (const auto& id : pages) {
    PageInfo& info = page_infos(id.region)[id.page];
    for (;;) {
      const PageState state = info.state.load(std::memory_order_acquire);
      if (state == PageState::kInBuffer) {
        commit_buffered(id, info.slot.load(std::memory_order_relaxed), put);
        break;
      }
      if (state == PageState::kScheduled) {
        if (commit_in_place(id, put)) break;
        continue;  // a writer took it to copy it aside
      }
      if (state != PageState::kCopying) break;  // nothing of it is pending
      sched_yield();                            // a writer is copying it aside: a page's time
    }
  }
}

void CowProtocol::commit(std::span<const PageId> pages, const Put& put) {
  if (!_follow_writes.load(std::memory_order_acquire)) {
    commit_in_order(pages, put);
    return;
  }
  std::size_t remaining = pages.size();
  std::size_t next = 0;
  while (remaining > 0) {
    // First a page a writer waits for, then the copy-on-write buffer, then
    // the order given.
    bool have_urgent = false;
    bool have_slot = false;
    PageId urgent;
    std::uint32_t slot = 0;
    {
      const SpinGuard guard(_lock);
      if (_urgent_count > 0) {
        urgent = _urgent[--_urgent_count];
        have_urgent = true;
      } else if (_filled_size > 0) {
        slot = _filled[_filled_head];
        _filled_head = (_filled_head + 1) % _slot_count;
        --_filled_size;
        have_slot = true;
      }
    }
    if (have_urgent) {
      if (commit_in_place(urgent, put)) --remaining;
      continue;
    }
    if (have_slot) {
      commit_buffered(_filled_page[slot], slot, put);
      --remaining;
      continue;
    }
    while (next < pages.size() && page_infos(pages[next].region)[pages[next].page].state.load(
                                      std::memory_order_acquire) != PageState::kScheduled) {
      ++next;
    }
    if (next < pages.size()) {
      if (commit_in_place(pages[next], put)) --remaining;
      ++next;
      continue;
    }
    sched_yield();  // what is left is being copied aside by a writer
  }
}

void CowProtocol::abandon(std::span<const PageId> pages) {
  for (const auto& id : pages)
    page_infos(id.region)[id.page].state.store(PageState::kCommitted, std::memory_order_release);
  empty_buffer();
  wake_waiters();
}

// Every copy-on-write slot free, no page queued: the state a commit starts
// from, and the one a failed commit leaves.
void CowProtocol::empty_buffer() {
  const SpinGuard guard(_lock);
  _urgent_count = 0;
  _filled_head = 0;
  _filled_size = 0;
  _free_count = _slot_count;
  for (std::uint32_t i = 0; i < _slot_count; ++i) _free_slots[i] = i;
}

void CowProtocol::wake_waiters() {
  _progress.fetch_add(1, std::memory_order_acq_rel);
  if (_waiters.load(std::memory_order_acquire) > 0) {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&_progress), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr,
              0);
  }
}

CowProtocol::Counts CowProtocol::counts(bool reset) {
  auto take = [reset](std::atomic<std::uint64_t>& counter) {
    return reset ? counter.exchange(0, std::memory_order_acq_rel) : counter.load(std::memory_order_acquire);
  };
  Counts counts;
  counts.cow = take(_cow_pages);
  counts.wait = take(_wait_pages);
  counts.avoided = take(_avoided_pages);
  counts.after = take(_after_pages);
  counts.wait_seconds = static_cast<double>(take(_wait_nanoseconds)) * 1e-9;
  const SpinGuard guard(_lock);
  counts.peak_slots = _peak_used;
  if (reset) _peak_used = 0;
  return counts;
}

}  // namespace reprise::detail
