#include "settings.hpp"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#define TOML_HEADER_ONLY 1
#define TOML_ENABLE_FORMATTERS 0
#include <toml++/toml.h>

#include "log.hpp"
#include "reprise/error.hpp"

namespace reprise::settings {

namespace {

constexpr std::string_view kPrefix = "REPRISE_";

/// A value the configuration file gives, as text, and its line.
struct FileValue {
  std::string text;
  std::uint32_t line = 0;
};

/// The configuration file REPRISE_CONFIG names, read once: its values by
/// setting name, or the line that refuses it.
struct ConfigFile {
  std::string path;
  std::map<std::string, FileValue, std::less<>> values;
  std::string refusal;
};

[[noreturn]] void refuse(const std::string& line, OnRefusal on_refusal) {
  if (on_refusal == OnRefusal::kThrow) throw UsageError(line);
  logging::write_error({line});
  ::_exit(kRefusedExitStatus);
}

/// The file's key of setting `name`: the name without REPRISE_, in lower case.
std::string key_of(std::string_view name) {
  std::string key(name.substr(kPrefix.size()));
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

/// The setting whose file key is `key`, or nullptr.
const Setting* keyed(std::string_view key) {
  for (const Setting* setting : kAll) {
    if (setting->in_file && key_of(setting->name) == key) return setting;
  }
  return nullptr;
}

/// What `node` gives `setting`, as text; nullopt when the TOML type is not
/// one the setting takes.
std::optional<std::string> file_text(const Setting& setting, const toml::node& node) {
  const bool number = setting.kind != Kind::kBoolean && setting.kind != Kind::kChoice && setting.kind != Kind::kText;
  if (const auto* integer = node.as_integer(); integer != nullptr && (number || setting.kind == Kind::kBoolean)) {
    return std::to_string(integer->get());
  }
  if (const auto* boolean = node.as_boolean(); boolean != nullptr && setting.kind == Kind::kBoolean) {
    return boolean->get() ? "1" : "0";
  }
  const bool textual = setting.kind == Kind::kChoice || setting.kind == Kind::kText || setting.kind == Kind::kAddress;
  if (const auto* string = node.as_string(); string != nullptr && textual) return string->get();
  return std::nullopt;
}

/// The TOML types `setting` takes, for a refusal.
std::string_view file_types(const Setting& setting) {
  switch (setting.kind) {
    case Kind::kBoolean:
      return "a boolean or 0 or 1";
    case Kind::kChoice:
    case Kind::kText:
      return "a string";
    case Kind::kAddress:
      return "a string such as \"0x200000000000\" or an integer";
    default:
      return "an integer";
  }
}

std::string_view type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date or time";
  }
}

/// Reads the configuration file at `path` (its refusal, if any, kept in it).
std::shared_ptr<const ConfigFile> read_file(const std::string& path) {
  auto file = std::make_shared<ConfigFile>();
  file->path = path;
  if (std::ifstream probe(path); !probe) {
    file->refusal =
        "REPRISE_CONFIG=" + path + ", from the environment, names a file that cannot be read: " + std::strerror(errno);
    return file;
  }
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& error) {
    file->refusal =
        path + ":" + std::to_string(error.source().begin.line) + ": not TOML: " + std::string(error.description());
    return file;
  }
  for (const auto& [key, node] : table) {
    const std::string where = path + ":" + std::to_string(node.source().begin.line);
    const Setting* setting = keyed(key.str());
    if (setting == nullptr) {
      file->refusal = where + ": unknown key '" + std::string(key.str()) +
                      "': the keys are the names of the settings without REPRISE_, in lower case "
                      "(reprise-settings --markdown lists them)";
      return file;
    }
    auto text = file_text(*setting, node);
    if (!text) {
      file->refusal = where + ": key '" + std::string(key.str()) + "' takes " + std::string(file_types(*setting)) +
                      ", not " + std::string(type_name(node));
      return file;
    }
    file->values[std::string(setting->name)] = {std::move(*text), node.source().begin.line};
  }
  return file;
}

/// The configuration file in force (nullptr without REPRISE_CONFIG), read
/// once for each path REPRISE_CONFIG names.
std::shared_ptr<const ConfigFile> config_file(OnRefusal on_refusal) {
  static std::mutex mutex;
  static std::shared_ptr<const ConfigFile> cached;
  const char* path = std::getenv(std::string(kConfig.name).c_str());
  if (path == nullptr || *path == '\0') return nullptr;
  std::shared_ptr<const ConfigFile> file;
  {
    const std::lock_guard lock(mutex);
    if (!cached || cached->path != path) cached = read_file(path);
    file = cached;
  }
  if (!file->refusal.empty()) refuse(file->refusal, on_refusal);
  return file;
}

/// The page size, which addresses must be a multiple of.
std::uint64_t page_bytes() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }

/// " from L to M", or ", L or more" without an upper bound.
std::string range(const Setting& setting) {
  if (setting.most == kNoLimit) return ", " + std::to_string(setting.least) + " or more";
  return " from " + std::to_string(setting.least) + " to " + std::to_string(setting.most);
}

/// The choices of a kChoice setting, "a, b or c".
std::string choice_list(const Setting& setting) {
  std::string list;
  std::string_view rest = setting.choices;
  while (!rest.empty()) {
    const std::size_t bar = rest.find('|');
    const std::string_view choice = rest.substr(0, bar);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    if (!list.empty()) list += rest.empty() ? " or " : ", ";
    list += choice;
  }
  return list;
}

/// What `setting` takes, in words.
std::string accepts(const Setting& setting) {
  switch (setting.kind) {
    case Kind::kInteger:
      return "a whole number" + range(setting);
    case Kind::kSeconds:
      return "a whole number of seconds" + range(setting);
    case Kind::kMib:
      return "a whole number of MiB" + range(setting);
    case Kind::kBytes:
      return "a whole number of bytes" + range(setting);
    case Kind::kBoolean:
      return "0 or 1";
    case Kind::kChoice:
      return choice_list(setting);
    case Kind::kText:
      return "any text";
    case Kind::kAddress:
      return "a hexadecimal address such as 0x200000000000, a multiple of the page size";
  }
  return {};
}

/// The refusal line of `found`, the value of `setting`.
std::string refusal_line(const Setting& setting, const Found& found) {
  return std::string(setting.name) + "=" + found.text + ", from " + found.origin + ", is refused: it takes " +
         accepts(setting);
}

/// The number `text` gives a number setting, if it is one in range.
std::optional<std::uint64_t> parse_number(const Setting& setting, std::string_view text) {
  const int base = setting.kind == Kind::kAddress ? 16 : 10;
  if (base == 16 && (text.starts_with("0x") || text.starts_with("0X"))) text.remove_prefix(2);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value < setting.least || value > setting.most) return std::nullopt;
  if (setting.kind == Kind::kAddress && value % page_bytes() != 0) return std::nullopt;
  return value;
}

/// Whether `text` is one of a kChoice setting's choices.
bool is_choice(const Setting& setting, std::string_view text) {
  std::string_view rest = setting.choices;
  while (true) {
    const std::size_t bar = rest.find('|');
    if (rest.substr(0, bar) == text) return true;
    if (bar == std::string_view::npos) return false;
    rest.remove_prefix(bar + 1);
  }
}

/// The refusal line when `found` is not a value `setting` takes, else "".
std::string check(const Setting& setting, const Found& found) {
  if (found.text.empty() && found.source == Source::kDefault) return {};
  bool taken = true;
  switch (setting.kind) {
    case Kind::kBoolean:
      taken = found.text == "0" || found.text == "1";
      break;
    case Kind::kChoice:
      taken = is_choice(setting, found.text);
      break;
    case Kind::kText:
      break;
    default:
      taken = parse_number(setting, found.text).has_value();
  }
  return taken ? std::string() : refusal_line(setting, found);
}

/// The value of `setting` in force, refused unless it takes it.
Found checked(const Setting& setting, OnRefusal on_refusal) {
  Found found = find(setting, on_refusal);
  if (const std::string line = check(setting, found); !line.empty()) refuse(line, on_refusal);
  return found;
}

std::string source_name(const Found& found) {
  switch (found.source) {
    case Source::kEnvironment:
      return "environment";
    case Source::kFile:
      return "file " + found.origin;
    default:
      return "default";
  }
}

}  // namespace

Found find(const Setting& setting, OnRefusal on_refusal) {
  const std::string name(setting.name);
  if (const char* text = std::getenv(name.c_str()); text != nullptr && *text != '\0') {
    return {text, Source::kEnvironment, "the environment"};
  }
  if (setting.in_file) {
    if (const auto file = config_file(on_refusal)) {
      if (const auto it = file->values.find(name); it != file->values.end()) {
        return {it->second.text, Source::kFile, file->path + ":" + std::to_string(it->second.line)};
      }
    }
  }
  return {std::string(setting.fallback), Source::kDefault, "the default"};
}

std::uint64_t number(const Setting& setting, OnRefusal on_refusal) {
  return parse_number(setting, checked(setting, on_refusal).text).value_or(0);
}

std::chrono::seconds seconds(const Setting& setting, OnRefusal on_refusal) {
  return std::chrono::seconds(static_cast<std::chrono::seconds::rep>(number(setting, on_refusal)));
}

bool flag(const Setting& setting, OnRefusal on_refusal) { return checked(setting, on_refusal).text == "1"; }

std::string text(const Setting& setting, OnRefusal on_refusal) { return checked(setting, on_refusal).text; }

const Setting* named(std::string_view name) noexcept {
  for (const Setting* setting : kAll) {
    if (setting->name == name) return setting;
  }
  return nullptr;
}

std::vector<Row> in_force(OnRefusal on_refusal) {
  std::vector<Row> rows;
  for (const Setting* setting : kAll) {
    Found found = find(*setting, on_refusal);
    std::string refusal = check(*setting, found);
    rows.push_back({setting, std::move(found), std::move(refusal)});
  }
  return rows;
}

std::string table(const std::vector<Row>& rows) {
  std::size_t name_width = 0;
  std::size_t value_width = 7;
  for (const Row& row : rows) {
    name_width = std::max(name_width, row.setting->name.size());
    value_width = std::max(value_width, row.found.text.size());
  }
  std::string text = "reprise settings in force (setting, value, source):\n";
  for (const Row& row : rows) {
    const std::string value = row.found.text.empty() ? "(unset)" : row.found.text;
    text += "  " + std::string(row.setting->name) + std::string(name_width - row.setting->name.size() + 2, ' ');
    text += value + std::string(value_width - value.size() + 2, ' ') + source_name(row.found) + "\n";
  }
  return text;
}

std::string markdown() {
  std::string text = "| setting (file key) | default | accepted values | meaning |\n| --- | --- | --- | --- |\n";
  for (const Setting* setting : kAll) {
    const std::string key = setting->in_file ? " (`" + key_of(setting->name) + "`)" : " (environment only)";
    const std::string fallback = setting->fallback.empty() ? "unset" : "`" + std::string(setting->fallback) + "`";
    text += "| `" + std::string(setting->name) + "`" + key + " | " + fallback + " | " + accepts(*setting) + " | " +
            std::string(setting->meaning) + " |\n";
  }
  return text;
}

void print_once(OnRefusal on_refusal) {
  static std::atomic<bool> printed{false};
  if (!flag(kPrintSettings, on_refusal) || printed.exchange(true)) return;
  const std::string text = table(in_force(on_refusal));
  std::fflush(stdout);
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace reprise::settings
