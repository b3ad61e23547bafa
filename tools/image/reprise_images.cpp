// reprise-images: what a disk level's directory holds (reprise/disk_level.hpp).
// Lists every version, complete or not, with the application's step (where a
// Driver ran), its processes and file sizes; with --bars it also draws each
// version's size as a bar; with --verify it also reads every image of every
// version with a manifest and checks it against its manifest and its
// datasets' checksums, naming each damaged file. Exit status: 0 all good, 1 a
// problem found, 2 a usage error or an unreadable directory.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "reprise/disk_level.hpp"
#include "reprise/error.hpp"

namespace {

constexpr const char* kProgram = "reprise-images";

constexpr const char* kUsage = "usage: reprise-images DIRECTORY [--bars] [--verify]\n"
                               "Lists the checkpoint versions a disk level wrote to DIRECTORY: which are\n"
                               "complete (a manifest, written last, and every process's image), the\n"
                               "application's step at each (where a Driver ran), which processes wrote\n"
                               "them, and their sizes.\n"
                               "  --bars      also draw each version's size as a bar of '#'\n"
                               "  --verify    also read every image of every version with a manifest and check\n"
                               "              it against the manifest and its checksums; exit 1 naming\n"
                               "              each damaged, truncated or missing file\n"
                               "  -h, --help  print this and exit\n";

/// What the command line asks.
struct Options {
  std::filesystem::path directory;
  bool verify = false;
  bool bars = false;
  bool help = false;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "-h" || word == "--help") {
      options.help = true;
      return options;
    }
    if (word == "--verify") {
      options.verify = true;
    } else if (word == "--bars") {
      options.bars = true;
    } else if (word.starts_with("-")) {
      throw reprise::UsageError("unknown flag " + word);
    } else if (!options.directory.empty()) {
      throw reprise::UsageError("one directory only, got " + options.directory.string() + " and " + word);
    } else {
      options.directory = word;
    }
  }
  if (options.directory.empty()) throw reprise::UsageError("give the directory to list");
  return options;
}

/// The bytes of a version's image files on disk.
std::uint64_t total_bytes(const reprise::DiskVersion& version) {
  std::uint64_t total = 0;
  for (const auto& file : version.files) total += file.bytes;
  return total;
}

/// ", step N" where the manifest holds the application's step.
std::string step_text(const reprise::DiskVersion& version) {
  return version.step ? ", step " + std::to_string(*version.step) : std::string();
}

/// Each version's size as a bar, the largest `kBarWidth` wide.
void print_bars(const std::vector<reprise::DiskVersion>& versions) {
  constexpr std::uint64_t kBarWidth = 50;
  std::uint64_t largest = 1;
  for (const auto& version : versions) largest = std::max(largest, total_bytes(version));
  for (const auto& version : versions) {
    const auto bytes = total_bytes(version);
    const auto width = static_cast<std::size_t>((bytes * kBarWidth + largest - 1) / largest);
    const std::string label = "v" + std::to_string(version.version) + step_text(version);
    std::printf("%-24s |%-*s| %llu bytes\n", label.c_str(), static_cast<int>(kBarWidth),
                std::string(width, '#').c_str(), static_cast<unsigned long long>(bytes));
  }
}

/// Lists (and verifies) the versions; returns the exit status.
int run(const Options& options) {
  const auto versions = reprise::scan_disk_versions(options.directory);
  std::printf("%s: %zu version(s)\n", options.directory.c_str(), versions.size());
  bool problem = false;
  for (const auto& version : versions) {
    const std::uint64_t total = total_bytes(version);
    std::string files;
    for (const auto& file : version.files) {
      files += (files.empty() ? "" : ", ") + std::to_string(file.rank.value()) +
               (file.present ? ":" + std::to_string(file.bytes) : std::string(":missing"));
    }
    const auto number = static_cast<unsigned long long>(version.version);
    if (version.complete) {
      std::printf("v%llu complete%s, %d processes, %llu bytes (original rank:bytes %s)\n", number,
                  step_text(version).c_str(), version.world_size, static_cast<unsigned long long>(total),
                  files.c_str());
    } else {
      // With a manifest it was whole once: something removed, cut or replaced its files.
      std::printf("v%llu %s, %zu image file(s), %llu bytes (original rank:bytes %s): %s\n", number,
                  version.manifest ? "DAMAGED" : "INCOMPLETE", version.files.size(),
                  static_cast<unsigned long long>(total), files.empty() ? "none" : files.c_str(),
                  version.problem.c_str());
      problem = problem || version.manifest;
    }
    if (!options.verify || !version.manifest) continue;
    const auto found = reprise::verify_disk_version(options.directory, version.version);
    for (const auto& each : found) std::printf("v%llu DAMAGED: %s\n", number, each.c_str());
    if (found.empty())
      std::printf("v%llu verified: %zu image(s), every checksum matches\n", number, version.files.size());
    problem = problem || !found.empty();
  }
  if (options.bars) print_bars(versions);
  return problem ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const reprise::UsageError& error) {
    std::fprintf(stderr, "%s: %s (%s --help lists the flags)\n", kProgram, error.what(), kProgram);
    return 2;
  }
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return run(options);
  } catch (const reprise::Error& error) {
    std::fprintf(stderr, "%s: %s\n", kProgram, error.what());
    return 2;
  }
}
