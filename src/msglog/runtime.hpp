#pragma once
// The message log's state in this process: one Runtime, made at MPI_Init by
// the interposed entry points (interpose.cpp) and reached from the C and C++
// interfaces (docs/ARCHITECTURE.md §16).

#include "reprise/msglog.h"

namespace reprise::detail {

/// Everything the message log keeps in one process.
class Runtime {
 public:
  /// The process's runtime, or nullptr before MPI_Init or after MPI_Finalize.
  static Runtime* current() noexcept;
  /// Makes the process's runtime (from the interposed MPI_Init).
  static Runtime& start();
  /// Ends it (from the interposed MPI_Finalize).
  static void stop() noexcept;

  /// The counters, as the C interface returns them.
  [[nodiscard]] reprise_msglog_counters counters() const noexcept { return _counters; }

 private:
  reprise_msglog_counters _counters{};
};

}  // namespace reprise::detail
