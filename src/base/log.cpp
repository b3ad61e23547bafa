#include "log.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
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
void write_all(std::string_view line) noexcept {
  while (!line.empty()) {
    const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    if (written <= 0) return;
    line.remove_prefix(static_cast<std::size_t>(written));
  }
}

/// A line put together in place, without allocating: written in one
/// write(2) if it fits, else in pieces of its size.
class LineBuffer {
 public:
  void add(std::string_view text) noexcept {
    while (!text.empty()) {
      if (_size == _text.size()) flush();
      const std::size_t part = std::min(text.size(), _text.size() - _size);
      text.copy(_text.data() + _size, part);
      _size += part;
      text.remove_prefix(part);
    }
  }
  /// "reprise[RANK] LEVEL: " ("reprise LEVEL: " while the rank is unknown).
  void add_prefix(Level level) noexcept {
    add("reprise");
    if (const int rank = my_rank.load(); rank >= 0) {
      std::array<char, 16> digits{};
      const auto end = std::to_chars(digits.data(), digits.data() + digits.size(), rank).ptr;
      add("[");
      add(std::string_view(digits.data(), static_cast<std::size_t>(end - digits.data())));
      add("]");
    }
    add(" ");
    add(kLevelNames[static_cast<std::size_t>(level)]);
    add(": ");
  }
  [[nodiscard]] std::string_view text() const noexcept { return {_text.data(), _size}; }
  void flush() noexcept {
    write_all(text());
    _size = 0;
  }

 private:
  std::array<char, 1024> _text{};
  std::size_t _size = 0;
};

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

bool shown(Level level, Reach reach) { return effective(level, reach) <= threshold(); }

std::string prefix(Level level) {
  LineBuffer line;
  line.add_prefix(level);
  return std::string(line.text());
}

void write_error(std::initializer_list<std::string_view> parts) noexcept {
  LineBuffer line;
  line.add_prefix(Level::kError);
  for (const auto part : parts) line.add(part);
  line.add("\n");
  line.flush();
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
