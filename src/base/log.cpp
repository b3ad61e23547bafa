#include "log.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <string_view>

#include "settings.hpp"

namespace reprise::logging {

namespace {

constexpr std::array<std::string_view, 4> kLevelNames{"error", "warning", "info", "debug"};

std::atomic<int> my_rank{-1};
std::atomic<bool> i_lead{true};

/// REPRISE_LOG_LEVEL's level; the default where the value (or the
/// configuration file) is refused: that refusal is Environment's to say, in
/// its one line, which the logger then has to write.
Level read_threshold() {
  std::string name;
  try {
    name = settings::text(settings::kLogLevel);
  } catch (const std::exception&) {
    name = settings::kLogLevel.fallback;
  }
  for (std::size_t level = 0; level < kLevelNames.size(); ++level) {
    if (name == kLevelNames[level]) return static_cast<Level>(level);
  }
  return Level::kInfo;  // not reached: the registry takes only the names above
}

/// Writes `line` on stderr in one write(2) where it fits, whole in any case.
void write_all(std::string_view line) {
  while (!line.empty()) {
    const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    if (written <= 0) return;
    line.remove_prefix(static_cast<std::size_t>(written));
  }
}

/// The level a line of `level` and `reach` is written at by this process.
Level effective(Level level, Reach reach) noexcept {
  return (reach == Reach::kEveryProcess && !i_lead.load()) ? Level::kDebug : level;
}

void say_with(Level level, Reach reach, const char* format, std::va_list arguments) {
  level = effective(level, reach);
  if (level > threshold()) return;
  std::va_list measure;
  va_copy(measure, arguments);
  const int length = std::vsnprintf(nullptr, 0, format, measure);
  va_end(measure);
  if (length < 0) return;
  std::string line = prefix(level);
  const std::size_t start = line.size();
  line.resize(start + static_cast<std::size_t>(length) + 1);
  std::vsnprintf(line.data() + start, static_cast<std::size_t>(length) + 1, format, arguments);
  line.back() = '\n';
  std::fflush(stdout);  // what the program printed before comes first
  write_all(line);
}

}  // namespace

void set_identity(int original_rank, bool lead) noexcept {
  my_rank.store(original_rank);
  i_lead.store(lead);
}

Level threshold() {
  static const Level level = read_threshold();
  return level;
}

bool shown(Level level, Reach reach) {
  return effective(level, reach) <= threshold();
}

std::string prefix(Level level) {
  const int rank = my_rank.load();
  std::string text = "reprise";
  if (rank >= 0) text += "[" + std::to_string(rank) + "]";
  text += ' ';
  text += kLevelNames[static_cast<std::size_t>(level)];
  text += ": ";
  return text;
}

void say(Level level, Reach reach, const char* format, ...) {
  std::va_list arguments;
  va_start(arguments, format);
  say_with(level, reach, format, arguments);
  va_end(arguments);
}

#define REPRISE_LOG_AT(name, level)                          \
  void name(const char* format, ...) {                       \
    std::va_list arguments;                                  \
    va_start(arguments, format);                             \
    say_with(level, Reach::kThisProcess, format, arguments); \
    va_end(arguments);                                       \
  }
REPRISE_LOG_AT(error, Level::kError)
REPRISE_LOG_AT(warning, Level::kWarning)
REPRISE_LOG_AT(info, Level::kInfo)
REPRISE_LOG_AT(debug, Level::kDebug)
#undef REPRISE_LOG_AT

}  // namespace reprise::logging
