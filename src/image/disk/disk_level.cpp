#include "reprise/disk_level.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <cstdio>
#include <exception>
#include <system_error>

#include "checksum.hpp"
#include "disk_files.hpp"
#include "disk_manifest.hpp"
#include "log.hpp"
#include "reprise/driver.hpp"
#include "reprise/element_type.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/image.hpp"
#include "state_image.hpp"
#include "reprise/inject.hpp"

namespace reprise {

using detail::CheckpointInternals;

namespace {

namespace fs = std::filesystem;
using detail::check_image;
using detail::errno_text;
using detail::image_file;
using detail::kManifestName;
using detail::Manifest;
using detail::MappedFile;
using detail::numbered;
using detail::raise_io;
using detail::read_manifest;
using detail::version_folder;

constexpr const char* kWhere = detail::kDiskLevelName;
constexpr const char* kTemporarySuffix = ".tmp";
/// The dataset of an image that records its blocks pieces' ranges: one row
/// (registration index, block bytes, first id, end id) per blocks piece.
constexpr const char* kBlockRangesName = "reprise.block_ranges";
constexpr std::uint64_t kBlockRangeColumns = 4;

void sync_directory(const fs::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) raise_io("open the folder", folder, errno);
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0) raise_io("fsync the folder", folder, error);
}

/// Writes `bytes` to `path` so that a crash leaves either nothing or all of
/// it there: a temporary name, fsync, rename, fsync of the folder.
void write_durably(const fs::path& path, std::span<const std::byte> bytes) {
  const fs::path temporary = path.string() + kTemporarySuffix;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) raise_io("create", temporary, errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const auto written = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      const int error = errno;
      ::close(fd);
      raise_io("write", temporary, error);
    }
    done += static_cast<std::size_t>(written);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    raise_io("fsync", temporary, error);
  }
  if (::close(fd) != 0) raise_io("close", temporary, errno);
  if (::rename(temporary.c_str(), path.c_str()) != 0) raise_io("rename to its final name", temporary, errno);
  sync_directory(path.parent_path());
}

/// Why the saved registrations do not fit the current ones (empty: they do).
/// Sizes may differ (another process count); names, order, element types
/// and which pieces are blocks (of which size) may not.
[[nodiscard]] std::string mismatch(const std::vector<Registration>& saved, const std::vector<Registration>& now) {
  const auto describe = [](const std::vector<Registration>& list) {
    std::string text;
    for (const auto& registration : list) {
      text +=
          (text.empty() ? "'" : ", '") + registration.name + "' (" +
          std::string(element_type_name(registration.shape.type)) +
          (registration.blocks ? ", blocks of " + std::to_string(registration.blocks->block_bytes) + " bytes" : "") +
          ")";
    }
    return text.empty() ? std::string("nothing") : text;
  };
  bool same = saved.size() == now.size();
  for (std::size_t i = 0; same && i < saved.size(); ++i) {
    same = saved[i].name == now[i].name && saved[i].shape.type == now[i].shape.type &&
           saved[i].blocks.has_value() == now[i].blocks.has_value() &&
           (!saved[i].blocks || saved[i].blocks->block_bytes == now[i].blocks->block_bytes);
  }
  if (same) return {};
  return "the saved set registered " + describe(saved) + " but this program registers " + describe(now) +
         "; is it another program's directory?";
}

}  // namespace

struct DiskLevel::Restarted {
  Manifest manifest;
  fs::path folder;
};

DiskLevel::DiskLevel(Comm& comm, Checkpoint& checkpoint, DiskLevelConfig config)
    : _comm(comm), _checkpoint(checkpoint), _config(std::move(config)) {
  if (_config.every < 1 || _config.keep < 1) {
    throw UsageError(std::string(kWhere) + ": every = " + std::to_string(_config.every) +
                     " and keep = " + std::to_string(_config.keep) +
                     "; write at least every version that is a multiple of 1 and keep "
                     "at least 1 version");
  }
  if (_config.directory.empty()) throw UsageError(std::string(kWhere) + ": give a directory to write the images to");
  std::error_code error;
  fs::create_directories(_config.directory, error);
  if (!error && !fs::is_directory(_config.directory, error) && !error) {
    error = std::make_error_code(std::errc::not_a_directory);
  }
  if (error) raise_io("create the directory", _config.directory, error.value());
  _commit_hook =
      CheckpointInternals::on_commit(_checkpoint, [this](std::uint64_t version) {
        if (!_saved_state_taken) {
          throw UsageError(std::string(kWhere) + ": the restart found version " +
                           std::to_string(_restart->manifest.version) +
                           " written by another number of processes, and the program took none of its state before "
                           "this checkpoint: it would start again from the beginning. After restart() returns "
                           "RestartOutcome::kRedistribute, take what you need: load_blocks, fetch, load_progress");
        }
        write(version);
      }).id;
}

DiskLevel::~DiskLevel() { CheckpointInternals::remove_commit_hook(_checkpoint, CommitHook{_commit_hook}); }

fs::path DiskLevel::image_path(std::uint64_t version, OriginalRank rank) const {
  return image_file(version_folder(_config.directory, version), rank);
}

namespace {

/// The image of this process's committed state of `version`, with the
/// ranges of its blocks pieces.
[[nodiscard]] ImageBytes build_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version) {
  const auto registrations = CheckpointInternals::registrations(checkpoint);
  std::vector<std::uint64_t> ranges;
  for (std::size_t i = 0; i < registrations.size(); ++i) {
    const auto& blocks = registrations[i].blocks;
    if (blocks)
      ranges.insert(ranges.end(), {i, blocks->block_bytes, blocks->range.begin.value, blocks->range.end.value});
  }
  std::vector<detail::ExtraPiece> extras;
  if (!ranges.empty()) {
    extras.push_back({kBlockRangesName, std::as_bytes(std::span(ranges)),
                      ArrayShape{ElementType::kUint64, {ranges.size() / kBlockRangeColumns, kBlockRangeColumns}}});
  }
  return detail::build_state_image(checkpoint, comm, version, CheckpointInternals::committed_state(checkpoint), extras);
}

/// Removes the version folders that a complete `version` makes needless:
/// incomplete ones before it, and complete ones beyond the newest `keep`
/// (folders after it belong to a job that died after its last complete
/// version: they are replaced when their version is written again).
void prune(const fs::path& directory, std::uint64_t version, int keep) {
  std::vector<std::pair<std::uint64_t, bool>> found;  // version, complete
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const auto number = numbered(it->path().filename().string(), "v", "");
    if (!number || *number > version) continue;
    found.emplace_back(*number, fs::exists(it->path() / kManifestName));
  }
  if (error) raise_io("list", directory, error.value());
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  int kept = 0;
  for (const auto& [number, complete] : found) {
    if (complete && kept < keep) {
      ++kept;
      continue;
    }
    const auto folder = version_folder(directory, number);
    fs::remove_all(folder, error);
    if (error) raise_io("remove the old version", folder, error.value());
  }
}

/// Process 0 makes a fresh `folder` for `version` in `directory`; `IoError`
/// everywhere if it could not.
void make_version_folder(Comm& comm, const fs::path& directory, const fs::path& folder, std::uint64_t version) {
  int made = 0;
  if (comm.rank() == Rank{0}) {
    std::error_code error;
    fs::remove_all(folder, error);
    if (!error) fs::create_directory(folder, error);
    made = error.value();
    if (made == 0) {
      try {
        sync_directory(directory);
      } catch (const IoError& sync) {
        made = sync.system_error();
      }
    }
  }
  comm.bcast(made, Rank{0});
  if (made != 0) raise_io("make the folder for version " + std::to_string(version) + " at", folder, made);
}

/// This process's image of a version written, or why not.
struct ImageRecord {
  /// An errno (0: written), then the file's bytes and hash and its blocks
  /// ranges: what the manifest needs of it.
  std::vector<std::uint64_t> words{0};
  std::exception_ptr failure;  // the error, where it was not written
};

/// Writes the image of this process's committed state of `version` to `path`.
[[nodiscard]] ImageRecord write_own_image(const Checkpoint& checkpoint, const Comm& comm, std::uint64_t version,
                                          const fs::path& path) {
  ImageRecord record;
  try {
    const auto image = build_image(checkpoint, comm, version);
    record.words.insert(record.words.end(), {image.size(), detail::checksum64(image.span())});
    for (const auto& registration : CheckpointInternals::registrations(checkpoint)) {
      if (registration.blocks) {
        record.words.insert(record.words.end(),
                            {registration.blocks->range.begin.value, registration.blocks->range.end.value});
      }
    }
    write_durably(path, image.span());
  } catch (const Error& error) {
    record.failure = std::current_exception();
    const auto* io = dynamic_cast<const IoError*>(&error);
    record.words = {static_cast<std::uint64_t>(io != nullptr && io->system_error() != 0 ? io->system_error() : EIO)};
  }
  return record;
}

/// The `IoError` for `version`, which some process could not write to
/// `folder`: who, and why, from every process's `records` (by rank).
[[noreturn]] void raise_incomplete(const Comm& comm, const std::vector<std::vector<std::uint64_t>>& records,
                                   const fs::path& folder, std::uint64_t version) {
  std::string who;
  int first_error = 0;
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (records[r].empty() || records[r].front() == 0) continue;
    const auto rank = comm.original_rank(Rank{static_cast<int>(r)});
    const auto error = static_cast<int>(records[r].front());
    if (first_error == 0) first_error = error;
    who += (who.empty() ? "" : "; ") + image_file(folder, rank).string() + " (original rank " +
           std::to_string(rank.value()) + "): " + errno_text(error);
  }
  throw IoError(std::string(kWhere) + ": version " + std::to_string(version) + " is not complete on disk: " +
                    (who.empty() ? "a process could not write its image" : "could not write " + who) +
                    "; older complete versions are kept",
                first_error);
}

/// The manifest of `version`, whose images every process wrote: its
/// `records` (by rank), in the order of original ranks.
[[nodiscard]] Manifest manifest_of(const Comm& comm, const Checkpoint& checkpoint,
                                   const std::vector<std::vector<std::uint64_t>>& records, std::uint64_t version) {
  Manifest manifest;
  manifest.version = version;
  manifest.step = detail::driver_step(
      checkpoint, CheckpointInternals::split_state(checkpoint, CheckpointInternals::committed_state(checkpoint)));
  manifest.registrations = CheckpointInternals::registrations(checkpoint);
  std::vector<std::size_t> order(records.size());
  for (std::size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return comm.original_rank(Rank{static_cast<int>(a)}) < comm.original_rank(Rank{static_cast<int>(b)});
  });
  for (const auto r : order) {
    const auto& each = records[r];
    manifest.members.push_back(comm.original_rank(Rank{static_cast<int>(r)}));
    manifest.file_bytes.push_back(each[1]);
    manifest.file_hashes.push_back(each[2]);
    auto& ranges = manifest.block_ranges.emplace_back();
    for (std::size_t at = 3; at + 1 < each.size(); at += 2) {
      ranges.push_back({BlockId{each[at]}, BlockId{each[at + 1]}});
    }
  }
  return manifest;
}

}  // namespace

// A write in its phases: process 0 makes a fresh folder for the version;
// every process writes its image; all learn who succeeded and agree; process
// 0 writes the manifest (the version is complete from then on), removes the
// versions it makes needless, and all agree that it did.
void DiskLevel::write(std::uint64_t version) {
  if (version % _config.every != 0) return;
  const auto folder = version_folder(_config.directory, version);
  make_version_folder(_comm, _config.directory, folder, version);

  // This process's image, and what the manifest needs of it.
  const auto me = _comm.original_rank();
  const ImageRecord mine = write_own_image(_checkpoint, _comm, version, image_path(version, me));
  inject::fault_point("disk_level.written", me);
  const auto records = _comm.allgatherv<std::uint64_t>(mine.words);
  bool written = true;
  for (const auto& each : records) written = written && each.front() == 0;
  if (!_comm.agree(written)) {
    if (mine.failure) std::rethrow_exception(mine.failure);
    raise_incomplete(_comm, records, folder, version);
  }

  std::exception_ptr failure;
  if (_comm.rank() == Rank{0}) {
    try {
      const auto manifest = detail::encode_manifest(manifest_of(_comm, _checkpoint, records, version));
      write_durably(folder / kManifestName, std::as_bytes(std::span(manifest)));
      prune(_config.directory, version, _config.keep);
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  if (!_comm.agree(failure == nullptr)) {
    if (failure) std::rethrow_exception(failure);
    throw IoError(std::string(kWhere) + ": process 0 could not complete version " + std::to_string(version) + " in " +
                      folder.string() + " (its error says why); older complete versions are kept",
                  EIO);
  }
  _last_written = version;
}

namespace {

/// The versions in `directory` with a manifest, newest first, as process 0
/// lists them: the same list everywhere.
[[nodiscard]] std::vector<std::uint64_t> listed_versions(Comm& comm, const fs::path& directory) {
  std::vector<std::uint64_t> candidates{0};  // an errno, then the versions
  if (comm.rank() == Rank{0}) {
    std::error_code error;
    for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
      const auto number = numbered(it->path().filename().string(), "v", "");
      if (number && fs::exists(it->path() / kManifestName)) candidates.push_back(*number);
    }
    if (error) candidates = {static_cast<std::uint64_t>(error.value())};
    std::sort(candidates.begin() + 1, candidates.end(), std::greater<>());
  }
  comm.bcast(candidates, Rank{0});
  if (candidates.front() != 0) raise_io("list", directory, static_cast<int>(candidates.front()));
  candidates.erase(candidates.begin());
  return candidates;
}

/// A version's manifest, and what is wrong with the version.
struct CheckedVersion {
  Manifest manifest;
  std::string problems;  // every process's, each once (empty: none)
};

/// `version` in `folder` checked by every process: each reads the manifest
/// and checks its share of the images.
[[nodiscard]] CheckedVersion check_version(Comm& comm, const fs::path& folder, std::uint64_t version) {
  const auto p = static_cast<std::size_t>(comm.size());
  const auto me = static_cast<std::size_t>(comm.rank().value());
  CheckedVersion checked;
  std::string problems;
  try {
    checked.manifest = read_manifest(folder);
    if (checked.manifest.version != version) {
      problems = (folder / kManifestName).string() + " is the manifest of another version";
    }
  } catch (const Error& error) {
    problems = error.what();
  }
  for (std::size_t m = me; problems.empty() && m < checked.manifest.members.size(); m += p) {
    const auto problem = check_image(checked.manifest, folder, m);
    if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + problem;
  }
  for (const auto& each : comm.allgatherv<char>(problems)) {
    const std::string text(each.begin(), each.end());
    if (!text.empty() && checked.problems.find(text) == std::string::npos) {
      checked.problems += (checked.problems.empty() ? "" : "; ") + text;
    }
  }
  return checked;
}

/// The version a restart loads, and why each newer one is unusable.
struct ChosenVersion {
  std::optional<Manifest> manifest;  // none if no version checks out
  std::vector<std::string> notes;
};

/// The newest of `versions` (newest first) in `directory` that checks out
/// everywhere; process 0 reports on the newer ones.
[[nodiscard]] ChosenVersion choose_version(Comm& comm, const fs::path& directory,
                                           std::span<const std::uint64_t> versions) {
  ChosenVersion chosen;
  for (std::size_t c = 0; c < versions.size() && !chosen.manifest; ++c) {
    const auto folder = version_folder(directory, versions[c]);
    auto checked = check_version(comm, folder, versions[c]);
    if (checked.problems.empty()) {
      chosen.manifest = std::move(checked.manifest);
    } else {
      chosen.notes.push_back("version " + std::to_string(versions[c]) + " in " + folder.string() +
                             " is unusable: " + checked.problems);
    }
  }
  // Every process found the same: the lead says it.
  for (const auto& note : chosen.notes) {
    logging::say(logging::Level::kWarning, logging::Reach::kEveryProcess, "%s::restart: %s", kWhere, note.c_str());
  }
  if (chosen.manifest && !chosen.notes.empty()) {
    logging::say(logging::Level::kInfo, logging::Reach::kEveryProcess,
                 "%s::restart: restarting from version %llu, the newest complete version that checks out", kWhere,
                 static_cast<unsigned long long>(chosen.manifest->version));
  }
  return chosen;
}

/// Who held which blocks of each blocks piece in the version of `manifest`.
[[nodiscard]] std::vector<SavedBlocks> saved_blocks(const Manifest& manifest) {
  std::vector<SavedBlocks> blocks;
  const auto pieces = manifest.blocks_pieces();
  for (std::size_t b = 0; b < pieces.size(); ++b) {
    const auto& registration = manifest.registrations[pieces[b]];
    SavedBlocks saved{registration.name, registration.blocks->block_bytes, {}};
    for (std::size_t m = 0; m < manifest.members.size(); ++m) {
      saved.held.push_back({manifest.members[m], manifest.block_ranges[m][b]});
    }
    blocks.push_back(std::move(saved));
  }
  return blocks;
}

/// Loads into `checkpoint` the state of the process of this rank in the
/// version of `manifest` (written by as many processes) from its image in
/// `folder`. Every process checks its own state first; all load or none does.
void load_own_state(Comm& comm, Checkpoint& checkpoint, const fs::path& folder, const Manifest& manifest) {
  const auto me = static_cast<std::size_t>(comm.rank().value());
  std::exception_ptr failure;
  std::vector<std::byte> state;
  try {
    const MappedFile file(image_file(folder, manifest.members[me]));
    state = detail::state_of_image(Image::view(file.bytes()), checkpoint);
    (void)CheckpointInternals::split_state(checkpoint, state);
  } catch (const Error&) {
    failure = std::current_exception();
  }
  if (!comm.agree(failure == nullptr)) {
    if (failure) std::rethrow_exception(failure);
    throw UsageError(std::string(kWhere) + "::restart: another process could not load its state of version " +
                     std::to_string(manifest.version) + " (its error says why); nothing was loaded");
  }
  CheckpointInternals::load_state(checkpoint, state);
}

}  // namespace

DiskRestart DiskLevel::restart() try {
  // A replacement joins a running job: its state comes from the in-memory
  // checkpoint (restore), and the others are not here.
  if (_comm.is_replacement()) return {};
  if (_checkpoint.has_commit()) {
    throw UsageError(std::string(kWhere) + "::restart: the checkpoint has committed version " +
                     std::to_string(_checkpoint.version()) + " already; restart before the first checkpoint()");
  }
  auto chosen = choose_version(_comm, _config.directory, listed_versions(_comm, _config.directory));
  DiskRestart result;
  result.notes = std::move(chosen.notes);
  if (!chosen.manifest) {
    if (result.notes.empty()) return result;
    std::string all;
    for (const auto& note : result.notes) all += "; " + note;
    throw CorruptData(std::string(kWhere) + "::restart: no complete version in " + _config.directory.string() +
                      " can be read back" + all);
  }
  Manifest& manifest = *chosen.manifest;
  const auto problem = mismatch(manifest.registrations, CheckpointInternals::registrations(_checkpoint));
  if (!_comm.agree(problem.empty())) {
    throw UsageError(std::string(kWhere) + "::restart: version " + std::to_string(manifest.version) + " in " +
                     _config.directory.string() + " does not fit: " +
                     (problem.empty() ? "another process registered other state" : problem) + "; nothing was loaded");
  }
  const auto folder = version_folder(_config.directory, manifest.version);
  result.version = manifest.version;
  result.old_world_size = static_cast<int>(manifest.members.size());
  result.old_members = manifest.members;
  result.blocks = saved_blocks(manifest);
  if (manifest.members.size() == static_cast<std::size_t>(_comm.size())) {
    load_own_state(_comm, _checkpoint, folder, manifest);
    result.outcome = RestartOutcome::kRestored;
  } else {
    result.outcome = RestartOutcome::kRedistribute;
    _saved_state_taken = false;
  }
  CheckpointInternals::continue_from(_checkpoint, manifest.version);
  _restart = std::make_unique<Restarted>(Restarted{std::move(manifest), folder});
  return result;
} catch (const Error&) {
  detail::rethrow_naming("reprise::DiskLevel::restart");
}

const DiskLevel::Restarted& DiskLevel::restarted(std::string_view operation) const {
  if (!_restart) {
    throw UsageError(std::string(kWhere) + "::" + std::string(operation) +
                     ": no saved version to read; call restart() first (and only if it found one)");
  }
  return *_restart;
}

std::map<OriginalRank, SavedState> DiskLevel::fetch(std::span<const OriginalRank> old_ranks) const try {
  const auto& saved = restarted("fetch");
  _saved_state_taken = true;
  const auto& members = saved.manifest.members;
  for (const auto rank : old_ranks) {
    if (std::find(members.begin(), members.end(), rank) == members.end()) {
      throw UsageError(std::string(kWhere) + "::fetch: original rank " + std::to_string(rank.value()) +
                       " has no image in version " + std::to_string(saved.manifest.version) + " (it had " +
                       std::to_string(members.size()) + " processes); fetch only ranks of DiskRestart::old_members");
    }
  }
  std::map<OriginalRank, SavedState> states;
  for (const auto rank : old_ranks) {
    if (states.contains(rank)) continue;
    const MappedFile file(image_file(saved.folder, rank));
    states.emplace(rank, SavedState(detail::state_of_image(Image::view(file.bytes()), _checkpoint)));
  }
  return states;
} catch (const Error&) {
  detail::rethrow_naming("reprise::DiskLevel::fetch");
}

void DiskLevel::load_progress() try {
  const auto& saved = restarted("load_progress");
  const auto registrations = CheckpointInternals::registrations(_checkpoint);
  const bool driven = std::any_of(registrations.begin(), registrations.end(),
                                  [](const Registration& r) { return r.name == Driver::kProgressPiece; });
  if (!driven) {
    throw UsageError(std::string(kWhere) + "::load_progress: no Driver registered its step count on this "
                                           "checkpoint; construct the Driver before restart()");
  }
  const std::array first{saved.manifest.members.front()};
  _checkpoint.load_pieces(fetch(first).at(first[0]), {std::string(Driver::kProgressPiece)});
} catch (const Error&) {
  detail::rethrow_naming("reprise::DiskLevel::load_progress");
}

void DiskLevel::load_blocks(std::string_view name, std::span<const BlockRange> wanted, std::span<std::byte> into) const
    try {
  const auto& saved = restarted("load_blocks");
  _saved_state_taken = true;
  const auto& manifest = saved.manifest;
  const auto pieces = manifest.blocks_pieces();
  std::optional<std::size_t> piece;
  std::string names;
  for (std::size_t b = 0; b < pieces.size(); ++b) {
    const auto& registration = manifest.registrations[pieces[b]];
    if (registration.name == name) piece = b;
    names += (names.empty() ? "'" : ", '") + registration.name + "'";
  }
  if (!piece) {
    throw UsageError(std::string(kWhere) + "::load_blocks: version " + std::to_string(manifest.version) +
                     " has no blocks named '" + std::string(name) + "'; its blocks pieces are " +
                     (names.empty() ? std::string("none") : names));
  }
  const auto block_bytes = manifest.registrations[pieces[*piece]].blocks->block_bytes;
  std::uint64_t blocks = 0;
  for (const auto range : wanted) {
    if (range.end < range.begin) {
      throw UsageError(std::string(kWhere) + "::load_blocks: a wanted range ends before it begins");
    }
    blocks += range.size();
  }
  if (blocks * block_bytes != into.size()) {
    throw UsageError(std::string(kWhere) + "::load_blocks: " + std::to_string(blocks) + " blocks of " +
                     std::to_string(block_bytes) + " bytes need " + std::to_string(blocks * block_bytes) +
                     " bytes, but the buffer holds " + std::to_string(into.size()));
  }
  // Which member's image gives which wanted blocks: (member, first block in
  // its range, first byte in `into`, blocks).
  struct Copy {
    std::size_t member;
    std::uint64_t from;
    std::size_t to;
    std::uint64_t count;
  };
  std::vector<Copy> copies;
  std::size_t to = 0;
  for (const auto range : wanted) {
    std::uint64_t covered = 0;
    for (std::size_t m = 0; m < manifest.members.size(); ++m) {
      const auto held = manifest.block_ranges[m][*piece];
      const auto begin = std::max(held.begin.value, range.begin.value);
      const auto end = std::min(held.end.value, range.end.value);
      if (begin >= end) continue;
      copies.push_back({m, begin - held.begin.value,
                        to + static_cast<std::size_t>((begin - range.begin.value) * block_bytes), end - begin});
      covered += end - begin;
    }
    if (covered != range.size()) {
      throw UsageError(std::string(kWhere) + "::load_blocks: version " + std::to_string(manifest.version) +
                       " does not hold every block of [" + std::to_string(range.begin.value) + ", " +
                       std::to_string(range.end.value) + ") of '" + std::string(name) +
                       "' once (see DiskRestart::blocks for who held what); nothing was read");
    }
    to += static_cast<std::size_t>(range.size() * block_bytes);
  }
  std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) { return a.member < b.member; });
  for (std::size_t at = 0; at < copies.size();) {
    const auto member = copies[at].member;
    const MappedFile file(image_file(saved.folder, manifest.members[member]));
    const auto bytes = Image::view(file.bytes()).read(manifest.registrations[pieces[*piece]].name);
    for (; at < copies.size() && copies[at].member == member; ++at) {
      const auto& copy = copies[at];
      std::memcpy(into.data() + copy.to, bytes.data() + copy.from * block_bytes, copy.count * block_bytes);
    }
  }
} catch (const Error&) {
  detail::rethrow_naming("reprise::DiskLevel::load_blocks");
}

}  // namespace reprise
