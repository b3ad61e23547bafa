// reprise-images: what a disk level's directory holds (reprise/disk_level.hpp).
// Lists every version, complete or not, with its processes and file sizes;
// with --verify it also reads every image of every version with a manifest and
// checks it against its manifest and its datasets' checksums, naming each
// damaged file. Exit status: 0 all good, 1 a problem found, 2 a usage error
// or an unreadable directory.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "reprise/disk_level.hpp"
#include "reprise/error.hpp"

namespace {

constexpr const char* kProgram = "reprise-images";

constexpr const char* kUsage =
    "usage: reprise-images DIRECTORY [--verify]\n"
    "Lists the checkpoint versions a disk level wrote to DIRECTORY: which are\n"
    "complete (a manifest, written last, and every process's image), which\n"
    "processes wrote them, and their sizes.\n"
    "  --verify    also read every image of every version with a manifest and check\n"
    "              it against the manifest and its checksums; exit 1 naming\n"
    "              each damaged, truncated or missing file\n"
    "  -h, --help  print this and exit\n";

/// What the command line asks.
struct Options {
  std::filesystem::path directory;
  bool verify = false;
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

/// Lists (and verifies) the versions; returns the exit status.
int run(const Options& options) {
  const auto versions = reprise::scan_disk_versions(options.directory);
  std::printf("%s: %zu version(s)\n", options.directory.c_str(), versions.size());
  bool problem = false;
  for (const auto& version : versions) {
    std::uint64_t total = 0;
    std::string files;
    for (const auto& file : version.files) {
      total += file.bytes;
      files += (files.empty() ? "" : ", ") + std::to_string(file.rank.value()) +
               (file.present ? ":" + std::to_string(file.bytes) : std::string(":missing"));
    }
    const auto number = static_cast<unsigned long long>(version.version);
    if (version.complete) {
      std::printf("v%llu complete, %d processes, %llu bytes (original rank:bytes %s)\n", number, version.world_size,
                  static_cast<unsigned long long>(total), files.c_str());
    } else {
      // With a manifest it was whole once: something removed, cut or replaced its files.
      std::printf("v%llu %s, %zu image file(s), %llu bytes (original rank:bytes %s): %s\n", number,
                  version.manifest ? "DAMAGED" : "INCOMPLETE", version.files.size(), static_cast<unsigned long long>(total),
                  files.empty() ? "none" : files.c_str(), version.problem.c_str());
      problem = problem || version.manifest;
    }
    if (!options.verify || !version.manifest) continue;
    const auto found = reprise::verify_disk_version(options.directory, version.version);
    for (const auto& each : found) std::printf("v%llu DAMAGED: %s\n", number, each.c_str());
    if (found.empty()) std::printf("v%llu verified: %zu image(s), every checksum matches\n", number, version.files.size());
    problem = problem || !found.empty();
  }
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
