#pragma once
// reprise's logger: every line the library writes on stderr, with a level
// (error, warning, info, debug), a rank filter and one prefix,
// "reprise[3] warning: ..." (the process's original rank; "reprise warning:"
// while it is unknown). Lines above the level REPRISE_LOG_LEVEL sets are not
// written. A line every process would write alike (Reach::kEveryProcess) is
// written at its level by one process only, the job's lead (the lowest
// surviving original rank), and by the others at debug. Each line is one
// write(2), so lines of several threads never interleave. Not for signal
// handlers: it formats and allocates (prefix() prepares a line beforehand;
// write_error() neither formats nor allocates).

#include <initializer_list>
#include <string>
#include <string_view>

namespace reprise::logging {

/// How much a line matters, most first; REPRISE_LOG_LEVEL names the last shown.
enum class Level { kError, kWarning, kInfo, kDebug };

/// Who writes a line.
enum class Reach {
  kThisProcess,   ///< a line about this process: written where it happens
  kEveryProcess,  ///< a line every process would write alike: written by the lead, the rest at debug
};

/// Who this process is, once the comm layer knows: its original rank (-1:
/// unknown) and whether it is the lead. Until then it is the lead.
void set_identity(int original_rank, bool lead) noexcept;

/// The last level shown: REPRISE_LOG_LEVEL, read once; its default where
/// the value is refused (Environment refuses it, as every setting, before
/// MPI starts).
[[nodiscard]] Level threshold();

/// Whether a line of `level` and `reach` is written by this process.
[[nodiscard]] bool shown(Level level, Reach reach = Reach::kThisProcess);

/// The prefix of a line of `level`: "reprise[RANK] LEVEL: ".
[[nodiscard]] std::string prefix(Level level);

/// Writes the line `format` (printf's) makes, prefixed, if shown.
void say(Level level, Reach reach, const char* format, ...) __attribute__((format(printf, 3, 4)));

/// Writes the error line `parts` make, prefixed, without formatting or
/// allocating, and whatever the level (an error is always shown): for code
/// that may not allocate (inside an allocator, the preloaded heap) or that
/// runs before the level can be known (a refused setting).
void write_error(std::initializer_list<std::string_view> parts) noexcept;

/// say() for a line about this process, at each level.
void error(const char* format, ...) __attribute__((format(printf, 1, 2)));
void warning(const char* format, ...) __attribute__((format(printf, 1, 2)));
void info(const char* format, ...) __attribute__((format(printf, 1, 2)));
void debug(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace reprise::logging
