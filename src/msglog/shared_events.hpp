#pragma once
// Determinants held in memory a process shares with its buddy on the same
// host (docs/ARCHITECTURE.md §16): a POSIX shared-memory object that the
// buddy makes, one per such process, and both map. The process appends its
// events there before its next send; they are held as soon as written,
// since the buddy's mapping keeps them when the writer dies, so no
// acknowledgement is waited for. Only the writer writes; the buddy reads
// when the writer is replaced (or when asked, for the tests).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace reprise::detail {

class SharedEvents {
 public:
  /// Bytes of encoded events a region holds (its pages are touched only as used).
  static constexpr std::size_t kCapacity = std::size_t{1} << 20U;

  /// The buddy's side: makes and maps the object `name`; nullptr when the
  /// host gives no shared memory (the events then travel over TCP).
  [[nodiscard]] static std::unique_ptr<SharedEvents> create(const std::string& name);
  /// The writer's side: maps the object `name` its buddy made, and removes
  /// the name (the mappings keep the memory); nullptr when it cannot.
  [[nodiscard]] static std::unique_ptr<SharedEvents> open(const std::string& name);
  /// Removes the name of an object `create` made, if no writer opened it.
  static void remove(const std::string& name) noexcept;

  ~SharedEvents();
  SharedEvents(const SharedEvents&) = delete;
  SharedEvents& operator=(const SharedEvents&) = delete;

  /// Appends `encoded` events; false when they do not fit (nothing written).
  bool append(std::span<const std::byte> encoded) noexcept;
  /// Drops every event written (a checkpoint covers them).
  void clear() noexcept;
  /// The encoded events written so far, as one consistent snapshot.
  [[nodiscard]] std::vector<std::byte> written() const;

 private:
  /// The start of the object. `generation` changes at every clear, so a
  /// reader that raced with one reads again.
  struct Header {
    std::atomic<std::uint64_t> bytes;
    std::atomic<std::uint64_t> generation;
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

  explicit SharedEvents(void* base) noexcept : _base(base) {}
  [[nodiscard]] Header& header() const noexcept { return *static_cast<Header*>(_base); }
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(_base) + sizeof(Header); }

  void* _base;
};

}  // namespace reprise::detail
