// reprise-settings: the library's settings (src/base/settings.hpp). Without
// options, every setting in force for the current environment and
// configuration file (REPRISE_CONFIG), with its value and its source; with
// --markdown, the reference table of docs/guide/settings.md. Exit status: 0,
// or 2 for a usage error or a value a setting does not take (each named in
// one line).

#include <cstdio>
#include <string>
#include <string_view>

#include "reprise/error.hpp"
#include "settings.hpp"

namespace {

constexpr std::string_view kUsage = "usage: reprise-settings [--markdown]\n"
                                    "Prints every setting of reprise in force here (the environment, else the\n"
                                    "configuration file REPRISE_CONFIG names, else the default): its value and\n"
                                    "where it comes from; exit 2 naming each value a setting does not take.\n"
                                    "  --markdown  print the reference table instead: each setting's default,\n"
                                    "              the values it takes and its meaning\n"
                                    "  -h, --help  print this and exit\n";

/// Prints the settings in force and the refusals; the exit status.
int print_in_force() {
  int status = 0;
  try {
    const auto rows = reprise::settings::in_force();
    std::fputs(reprise::settings::table(rows).c_str(), stdout);
    for (const auto& row : rows) {
      if (row.refusal.empty()) continue;
      std::fprintf(stderr, "reprise-settings: %s\n", row.refusal.c_str());
      status = 2;
    }
  } catch (const reprise::UsageError& error) {
    std::fprintf(stderr, "reprise-settings: %s\n", error.what());
    status = 2;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view option = argc > 1 ? argv[1] : "";
  if (argc > 2 || (argc == 2 && option != "--markdown" && option != "--help" && option != "-h")) {
    std::fprintf(stderr, "reprise-settings: unknown arguments (try --help)\n");
    return 2;
  }
  if (option == "--help" || option == "-h") {
    std::fputs(kUsage.data(), stdout);
    return 0;
  }
  if (option == "--markdown") {
    std::fputs(reprise::settings::markdown().c_str(), stdout);
    return 0;
  }
  return print_in_force();
}
