#pragma once
// The registry of reprise's settings: every REPRISE_* variable the library
// reads is declared here once (name, kind, default, meaning), and read
// through one reader: the environment first, else the configuration file
// REPRISE_CONFIG names (TOML, keys the names without REPRISE_ in lower case),
// else the default. A value a setting does not take is refused in one line
// naming the setting, where the value came from, the value and what the
// setting takes: a reprise::UsageError, or, where no exception can reach the
// user (OnRefusal::kExit), that line as the logger's error and _exit(2).
// docs/guide/settings.md's table is `reprise-settings --markdown`.

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::settings {

/// What a setting takes.
enum class Kind {
  kInteger,  ///< a whole number in [least, most]
  kSeconds,  ///< a whole number of seconds in [least, most]
  kMib,      ///< a whole number of MiB in [least, most]
  kBytes,    ///< a whole number of bytes in [least, most]
  kBoolean,  ///< 0 or 1
  kChoice,   ///< one of `choices`
  kText,     ///< any text
  kAddress,  ///< a hexadecimal address, a multiple of the page size, in [least, most]
};

/// One setting of the library.
struct Setting {
  std::string_view name;      ///< the environment variable, REPRISE_...
  Kind kind;                  ///< what it takes
  std::string_view fallback;  ///< the default, as its text ("" when the default is unset)
  std::uint64_t least;        ///< numbers: the smallest value taken
  std::uint64_t most;         ///< numbers: the largest value taken
  std::string_view choices;   ///< kChoice: the values taken, separated by '|'
  std::string_view meaning;   ///< one sentence for the reference table
  bool in_file;               ///< whether the configuration file may set it
};

inline constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint64_t kDay = 86400;

// The registry reads as a table: one setting a few lines, fields in order.
// clang-format off
inline constexpr Setting kConfig{
    "REPRISE_CONFIG", Kind::kText, "", 0, 0, "",
    "the configuration file (TOML) read for the settings the environment does not set", false};
inline constexpr Setting kPrintSettings{
    "REPRISE_PRINT_SETTINGS", Kind::kBoolean, "0", 0, 1, "",
    "1: the job's first process prints every setting in force, its value and its source, once at start", true};
inline constexpr Setting kLogLevel{
    "REPRISE_LOG_LEVEL", Kind::kChoice, "info", 0, 0, "error|warning|info|debug",
    "the most detailed level of the library's lines on stderr that is shown; a line every process would write "
    "alike is written by the lowest surviving original rank, by the others at `debug` (docs/guide/running.md)",
    true};
inline constexpr Setting kFaults{
    "REPRISE_FAULTS", Kind::kText, "", 0, 0, "",
    "the fault plan `inject::Schedule::from_env` reads: `RANK@STEP[:ACTION],...` (ACTION `kill`, `hang` or "
    "`crash`); the demos apply it, and the driver with `DriverConfig::inject_faults` (the quickstarts)",
    true};
inline constexpr Setting kSpares{
    "REPRISE_SPARES", Kind::kInteger, "0", 0, std::numeric_limits<std::int32_t>::max(), "",
    "spare processes among those `mpirun` starts: they wait in `Comm::world()` and `respawn()` takes them before it "
    "spawns (§5)",
    true};
inline constexpr Setting kSpareWarmMib{
    "REPRISE_SPARE_WARM_MIB", Kind::kMib, "0", 0, std::uint64_t{1} << 30U, "",
    "MiB of heap each spare keeps resident while it waits, so that the state it restores when taken lands in "
    "memory already mapped (§5, \"Warm spares\")",
    true};
inline constexpr Setting kSpawnHosts{
    "REPRISE_SPAWN_HOSTS", Kind::kText, "", 0, 0, "",
    "host names, comma-separated, where `respawn()` spawns replacements and `migrate()` new processes (unless "
    "`MigrationConfig::hosts` names others; `MPI_Comm_spawn`'s `host` key); unset: Open MPI chooses",
    true};
inline constexpr Setting kSpawnTimeout{
    "REPRISE_SPAWN_TIMEOUT", Kind::kSeconds, "60", 1, kDay, "",
    "seconds the parent that spawns new processes waits for `MPI_Comm_spawn` before another parent (or itself, when "
    "none other is left) spawns again; "
    "a new process whose `MPI_Init` has not returned 10 s after that leaves (§5)",
    true};
inline constexpr Setting kFinalizeTimeout{
    "REPRISE_FINALIZE_TIMEOUT", Kind::kSeconds, "5", 0, kDay, "",
    "seconds `Environment` lets `MPI_Finalize` run before it exits without it (0: wait forever)", true};
inline constexpr Setting kWriteTrap{
    "REPRISE_WRITE_TRAP", Kind::kChoice, "mprotect", 0, 0, "mprotect|userfaultfd",
    "how protected memory catches first writes: a `SIGSEGV` handler (`mprotect`) or `userfaultfd` (§12)", true};
inline constexpr Setting kWrittenBits{
    "REPRISE_WRITTEN_BITS", Kind::kBoolean, "1", 0, 1, "",
    "0: never use the kernel's written bits, trap every first write as on kernels before 6.7 (§12)", true};
inline constexpr Setting kHeapDir{
    "REPRISE_HEAP_DIR", Kind::kText, "", 0, 0, "",
    "the directory of the preloaded heap's checkpoints (`%r`: the process's rank; docs/HEAP_PRELOAD.md)", true};
inline constexpr Setting kHeapMib{"REPRISE_HEAP_MIB", Kind::kMib, "256", 1, std::uint64_t{1} << 20U, "",
                                  "MiB of address space the preloaded heap reserves", true};
// 32 TiB: far from the executable and its brk heap (at a few MiB, or near
// 85 TiB when position-independent) and from shared libraries and other
// mappings (placed downwards from near 128 TiB).
inline constexpr Setting kHeapAddress{"REPRISE_HEAP_ADDRESS", Kind::kAddress, "0x200000000000", 1, kNoLimit, "",
                                      "the address the preloaded heap is mapped at, the same in every run", true};
inline constexpr Setting kHeapMode{"REPRISE_HEAP_MODE", Kind::kChoice, "adaptive", 0, 0, "sync|address|adaptive",
                                   "how the preloaded heap's checkpoints are committed", true};
inline constexpr Setting kHeapCowMib{"REPRISE_HEAP_COW_MIB", Kind::kMib, "16", 0, std::uint64_t{1} << 20U, "",
                                     "MiB of copies the preloaded heap's asynchronous commits may keep", true};
inline constexpr Setting kHeapKeepVersions{"REPRISE_HEAP_KEEP_VERSIONS", Kind::kInteger, "0", 0, kNoLimit, "",
                                           "versions of the preloaded heap's checkpoint kept (0: all)", true};
inline constexpr Setting kOutcomeDir{
    "REPRISE_OUTCOME_DIR", Kind::kText, "", 0, 0, "",
    "where each process records its outcome for the launcher, set by `reprise-run` (§8); unset: nothing recorded",
    false};
inline constexpr Setting kMsglogMaxBytes{
    "REPRISE_MSGLOG_MAX_BYTES", Kind::kBytes, "1073741824", 0, kNoLimit, "",
    "bytes of messages the message log (`libreprise_msglog.so`) keeps since the last checkpoint mark (§16)", true};
inline constexpr Setting kMsglogWhenFull{
    "REPRISE_MSGLOG_WHEN_FULL", Kind::kChoice, "discard", 0, 0, "discard|error",
    "at that bound: `discard` drops the oldest entries and says once what that means; `error` fails the send with "
    "`MPI_ERR_NO_MEM`",
    true};
inline constexpr Setting kMsglogStagingBytes{
    "REPRISE_MSGLOG_STAGING_BYTES", Kind::kBytes, "32768", 0, kNoLimit, "",
    "receptions up to this many bytes arrive in a staging buffer with the message's header and are unpacked at "
    "completion; larger ones land in the application's buffer (§16)",
    true};

/// Every setting, in the order of the reference table.
inline constexpr std::array<const Setting*, 21> kAll{
    &kConfig,       &kPrintSettings,   &kLogLevel,        &kFaults,          &kSpares,         &kSpareWarmMib,
    &kSpawnHosts,   &kSpawnTimeout,    &kFinalizeTimeout, &kWriteTrap,      &kWrittenBits,
    &kHeapDir,      &kHeapMib,         &kHeapAddress,     &kHeapMode,       &kHeapCowMib,
    &kHeapKeepVersions, &kOutcomeDir,  &kMsglogMaxBytes,  &kMsglogWhenFull, &kMsglogStagingBytes};
// clang-format on

/// What a refused value does: raise reprise::UsageError with the line, or,
/// where no exception may leave (at load time, in the interposer, in a
/// destructor), write the line as the logger's error and _exit(2).
enum class OnRefusal { kThrow, kExit };

/// The exit status of a process that ends on a refused setting.
inline constexpr int kRefusedExitStatus = 2;

/// Where the value in force comes from.
enum class Source { kDefault, kEnvironment, kFile };

/// A setting's value in force, as text, and where it comes from.
struct Found {
  std::string text;    ///< "" when unset
  Source source;       ///< default, environment or file
  std::string origin;  ///< "the environment", "FILE:LINE" or "the default"
};

/// The value of `setting` in force, unchecked (the file's own errors, a
/// missing file or an unknown key, are refused).
[[nodiscard]] Found find(const Setting& setting, OnRefusal on_refusal = OnRefusal::kThrow);

/// A number setting's value (kInteger, kSeconds, kMib, kBytes, kAddress).
[[nodiscard]] std::uint64_t number(const Setting& setting, OnRefusal on_refusal = OnRefusal::kThrow);

/// A kSeconds setting's value.
[[nodiscard]] std::chrono::seconds seconds(const Setting& setting, OnRefusal on_refusal = OnRefusal::kThrow);

/// A kBoolean setting's value.
[[nodiscard]] bool flag(const Setting& setting, OnRefusal on_refusal = OnRefusal::kThrow);

/// A kChoice or kText setting's value ("" when unset).
[[nodiscard]] std::string text(const Setting& setting, OnRefusal on_refusal = OnRefusal::kThrow);

/// The setting named `name` (REPRISE_...), or nullptr.
[[nodiscard]] const Setting* named(std::string_view name) noexcept;

/// One row of the table of settings in force.
struct Row {
  const Setting* setting;
  Found found;
  std::string refusal;  ///< the refusal line when its value is not taken, else ""
};

/// Every setting in force (the file's own errors are refused).
[[nodiscard]] std::vector<Row> in_force(OnRefusal on_refusal = OnRefusal::kThrow);

/// The table of settings in force, one line each: name, value, source.
[[nodiscard]] std::string table(const std::vector<Row>& rows);

/// The reference table in Markdown: name, default, accepted values, meaning.
[[nodiscard]] std::string markdown();

/// With REPRISE_PRINT_SETTINGS=1, writes the table of settings in force on
/// stderr, the first time it is called in the process; else nothing.
void print_once(OnRefusal on_refusal = OnRefusal::kThrow);

}  // namespace reprise::settings
