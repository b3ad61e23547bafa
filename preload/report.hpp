#pragma once
/// \file
/// The preloaded heap's errors from where it may not allocate (inside
/// `malloc` and `free`, before the heap serves the program): the logger's
/// error line, written without formatting or allocating.

#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "log.hpp"
#include "settings.hpp"

namespace reprise::heap {

/// Reports the parts as an error, then aborts: the heap cannot go on (a
/// defect of the program, or of this library).
[[noreturn]] inline void report_and_abort(std::initializer_list<std::string_view> parts) noexcept {
  logging::write_error(parts);
  std::abort();
}

/// Reports the parts as an error, then ends the process as a refused setting
/// does (exit status 2): the heap cannot start where its settings put it.
[[noreturn]] inline void report_and_exit(std::initializer_list<std::string_view> parts) noexcept {
  logging::write_error(parts);
  ::_exit(settings::kRefusedExitStatus);
}

}  // namespace reprise::heap
