// The settings registry (src/base/settings.hpp): the environment, else the
// configuration file REPRISE_CONFIG names, else the default; a value a
// setting does not take refused in one line, as a UsageError or on stderr
// with exit status 2.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "reprise/error.hpp"
#include "settings.hpp"

namespace {

namespace settings = reprise::settings;

/// The UsageError's text when reading `setting` with `value` in the environment.
std::string refusal(const settings::Setting& setting, const char* value) {
  ::setenv(std::string(setting.name).c_str(), value, 1);
  std::string what = "accepted";
  try {
    if (setting.kind == settings::Kind::kBoolean) {
      (void)settings::flag(setting);
    } else if (setting.kind == settings::Kind::kChoice || setting.kind == settings::Kind::kText) {
      (void)settings::text(setting);
    } else {
      (void)settings::number(setting);
    }
  } catch (const reprise::UsageError& error) {
    what = error.what();
  }
  ::unsetenv(std::string(setting.name).c_str());
  return what;
}

/// A configuration file with `text`, named by REPRISE_CONFIG while it lives.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& text)
      : _path(std::filesystem::temp_directory_path() /
              ("unit_settings_" + std::to_string(::getpid()) + "_" + std::to_string(_count++) + ".toml")) {
    std::ofstream(_path) << text;
    ::setenv("REPRISE_CONFIG", _path.c_str(), 1);
  }
  ~ConfigFile() {
    ::unsetenv("REPRISE_CONFIG");
    std::filesystem::remove(_path);
  }
  ConfigFile(const ConfigFile&) = delete;
  ConfigFile& operator=(const ConfigFile&) = delete;
  [[nodiscard]] std::string path() const { return _path.string(); }

 private:
  static inline int _count = 0;
  std::filesystem::path _path;
};

TEST(Settings, UnsetSettingsHaveTheirDefaults) {
  EXPECT_EQ(settings::number(settings::kSpares), 0U);
  EXPECT_EQ(settings::seconds(settings::kSpawnTimeout).count(), 60);
  EXPECT_EQ(settings::seconds(settings::kFinalizeTimeout).count(), 5);
  EXPECT_EQ(settings::number(settings::kHeapAddress), 0x200000000000ULL);
  EXPECT_EQ(settings::text(settings::kWriteTrap), "mprotect");
  EXPECT_TRUE(settings::flag(settings::kWrittenBits));
  EXPECT_EQ(settings::text(settings::kSpawnHosts), "");
  const auto found = settings::find(settings::kMsglogMaxBytes);
  EXPECT_EQ(found.text, "1073741824");
  EXPECT_EQ(found.source, settings::Source::kDefault);
}

TEST(Settings, ABadValueOfEachKindIsRefusedInOneLine) {
  EXPECT_EQ(refusal(settings::kSpares, "two"),
            "REPRISE_SPARES=two, from the environment, is refused: it takes a whole number from 0 to 2147483647");
  EXPECT_EQ(refusal(settings::kSpares, "99999999999999999999"),
            "REPRISE_SPARES=99999999999999999999, from the environment, is refused: it takes a whole number from 0 "
            "to 2147483647");
  EXPECT_EQ(refusal(settings::kFinalizeTimeout, "5s"),
            "REPRISE_FINALIZE_TIMEOUT=5s, from the environment, is refused: it takes a whole number of seconds from "
            "0 to 86400");
  EXPECT_EQ(refusal(settings::kSpawnTimeout, "0"),
            "REPRISE_SPAWN_TIMEOUT=0, from the environment, is refused: it takes a whole number of seconds from 1 "
            "to 86400");
  EXPECT_EQ(refusal(settings::kHeapMib, "-1"),
            "REPRISE_HEAP_MIB=-1, from the environment, is refused: it takes a whole number of MiB from 1 to "
            "1048576");
  EXPECT_EQ(refusal(settings::kMsglogMaxBytes, "12k"),
            "REPRISE_MSGLOG_MAX_BYTES=12k, from the environment, is refused: it takes a whole number of bytes, 0 "
            "or more");
  EXPECT_EQ(refusal(settings::kWrittenBits, "no"),
            "REPRISE_WRITTEN_BITS=no, from the environment, is refused: it takes 0 or 1");
  EXPECT_EQ(refusal(settings::kHeapMode, "fast"),
            "REPRISE_HEAP_MODE=fast, from the environment, is refused: it takes sync, address or adaptive");
  EXPECT_EQ(refusal(settings::kHeapAddress, "0x200000000123")
                .find("REPRISE_HEAP_ADDRESS=0x200000000123, from the environment, is refused: it takes a hexadecimal "
                      "address such as 0x200000000000, a multiple of the page size"),
            0U);
  EXPECT_EQ(refusal(settings::kSpares, "3"), "accepted");
  EXPECT_EQ(refusal(settings::kHeapAddress, "0x300000000000"), "accepted");
}

TEST(Settings, WhereNoExceptionMayLeaveTheLineGoesToStderrAndTheProcessExits2) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto read = [] {
    ::setenv("REPRISE_WRITE_TRAP", "uffd", 1);
    (void)settings::text(settings::kWriteTrap, settings::OnRefusal::kExit);
    std::_Exit(0);
  };
  EXPECT_EXIT(read(), ::testing::ExitedWithCode(settings::kRefusedExitStatus),
              "^reprise error: REPRISE_WRITE_TRAP=uffd, from the environment, is refused: it takes mprotect or "
              "userfaultfd\n$");
}

TEST(Settings, TheFileGivesWhatTheEnvironmentDoesNot) {
  const ConfigFile file("# a comment\nspawn_timeout = 30\nwrite_trap = \"userfaultfd\"\nwritten_bits = false\n");
  EXPECT_EQ(settings::seconds(settings::kSpawnTimeout).count(), 30);
  EXPECT_EQ(settings::text(settings::kWriteTrap), "userfaultfd");
  EXPECT_FALSE(settings::flag(settings::kWrittenBits));
  const auto found = settings::find(settings::kSpawnTimeout);
  EXPECT_EQ(found.source, settings::Source::kFile);
  EXPECT_EQ(found.origin, file.path() + ":2");
}

TEST(Settings, TheEnvironmentOverridesTheFile) {
  const ConfigFile file("spawn_timeout = 30\n");
  ::setenv("REPRISE_SPAWN_TIMEOUT", "45", 1);
  EXPECT_EQ(settings::seconds(settings::kSpawnTimeout).count(), 45);
  EXPECT_EQ(settings::find(settings::kSpawnTimeout).source, settings::Source::kEnvironment);
  ::unsetenv("REPRISE_SPAWN_TIMEOUT");
  EXPECT_EQ(settings::seconds(settings::kSpawnTimeout).count(), 30);
}

/// The UsageError's text when reading REPRISE_SPARES with a file of `text`, whose path goes to `path`.
std::string file_refusal(const std::string& text, std::string& path) {
  const ConfigFile file(text);
  path = file.path();
  try {
    (void)settings::number(settings::kSpares);
  } catch (const reprise::UsageError& error) {
    return error.what();
  }
  return "accepted";
}

TEST(Settings, AnUnknownKeyAWrongTypeOrABadValueInTheFileIsRefusedNamingFileAndLine) {
  std::string path;
  std::string what = file_refusal("spares = 1\nspawn_timout = 30\n", path);
  EXPECT_EQ(what, path + ":2: unknown key 'spawn_timout': the keys are the names of the settings without REPRISE_, "
                         "in lower case (reprise-settings --markdown lists them)");
  what = file_refusal("config = \"other.toml\"\n", path);
  EXPECT_EQ(what.find(path + ":1: unknown key 'config'"), 0U) << what;
  what = file_refusal("\nspares = \"2\"\n", path);
  EXPECT_EQ(what, path + ":2: key 'spares' takes an integer, not a string");
  what = file_refusal("spares = -1\n", path);
  EXPECT_EQ(what, "REPRISE_SPARES=-1, from " + path + ":1, is refused: it takes a whole number from 0 to 2147483647");
  what = file_refusal("spares = [1\n", path);
  EXPECT_EQ(what.find(path + ":1: not TOML: "), 0U) << what;
}

TEST(Settings, AMissingFileIsRefused) {
  ::setenv("REPRISE_CONFIG", "/nonexistent/reprise.toml", 1);
  try {
    (void)settings::number(settings::kSpares);
    ADD_FAILURE() << "a missing configuration file was accepted";
  } catch (const reprise::UsageError& error) {
    EXPECT_EQ(std::string(error.what()),
              "REPRISE_CONFIG=/nonexistent/reprise.toml, from the environment, names a file that cannot be read: No "
              "such file or directory");
  }
  ::unsetenv("REPRISE_CONFIG");
}

TEST(Settings, TheTablesNameEverySetting) {
  const std::string markdown = settings::markdown();
  const std::string table = settings::table(settings::in_force());
  for (const auto* setting : settings::kAll) {
    EXPECT_NE(markdown.find("| `" + std::string(setting->name) + "`"), std::string::npos) << setting->name;
    EXPECT_NE(table.find("  " + std::string(setting->name) + " "), std::string::npos) << setting->name;
  }
  EXPECT_NE(markdown.find("| `REPRISE_SPARES` (`spares`) | `0` | a whole number from 0 to 2147483647 |"),
            std::string::npos)
      << markdown;
}

}  // namespace
