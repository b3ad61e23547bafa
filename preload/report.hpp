#pragma once
/// \file
/// Messages of the preloaded heap on stderr, written without allocating so
/// that they work inside `malloc` itself.

#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <string_view>

namespace reprise::heap {

/// Writes "reprise_heap: ", the parts and a newline to stderr.
inline void report(std::initializer_list<std::string_view> parts) noexcept {
  auto put = [](std::string_view text) {
    while (!text.empty()) {
      const ssize_t written = ::write(STDERR_FILENO, text.data(), text.size());
      if (written <= 0) return;
      text.remove_prefix(static_cast<std::size_t>(written));
    }
  };
  put("reprise_heap: ");
  for (const auto part : parts) put(part);
  put("\n");
}

/// Reports the parts, then aborts: the heap cannot go on.
[[noreturn]] inline void report_and_abort(std::initializer_list<std::string_view> parts) noexcept {
  report(parts);
  std::abort();
}

}  // namespace reprise::heap
