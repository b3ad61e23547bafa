#pragma once
// What the demos share: their command lines (flags, --help), a fault plan
// every process agrees on, the time since a moment, and reporting the run's
// verdict to the launcher and the shell.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "reprise/reprise.hpp"

namespace demo {

/// One flag of a demo's command line, `--name VALUE`.
struct Flag {
  std::string name;                             ///< e.g. "--iterations"
  std::string help;                             ///< what it sets, for --help
  std::string default_text;                     ///< its default, for --help
  std::function<void(const std::string&)> set;  ///< reads the value; UsageError if it cannot
};

/// What `parse_flags` throws for --help or -h: the usage text to print.
struct HelpRequested {
  std::string usage;
};

/// A flag taking a whole number from 0 up into `target`, whose value now is
/// the default (or `default_text` says what the default is).
template <class Number>
Flag number_flag(const std::string& name, std::string help, Number& target, std::string default_text = {}) {
  if (default_text.empty()) default_text = std::to_string(target);
  return Flag{name, std::move(help), std::move(default_text), [name, &target](const std::string& value) {
                Number parsed{};
                const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
                bool negative = false;
                if constexpr (std::is_signed_v<Number>) negative = parsed < 0;
                if (error != std::errc{} || end != value.data() + value.size() || negative) {
                  throw reprise::UsageError(name + " " + value + " is not a whole number from 0 up" +
                                            (error == std::errc::result_out_of_range ? " that fits" : ""));
                }
                target = parsed;
              }};
}

/// The --help text: `about`, then every flag with its default.
inline std::string usage(const std::string& program, const std::string& about, const std::vector<Flag>& flags) {
  std::size_t width = std::string("-h, --help").size();
  for (const Flag& flag : flags) width = std::max(width, flag.name.size() + 6);
  auto line = [&](const std::string& left, const std::string& right) {
    return "  " + left + std::string(width - left.size() + 2, ' ') + right + "\n";
  };
  std::string text = "usage: mpirun --with-ft ulfm -n P " + program + " [flags]\n" + about + "\nflags:\n";
  for (const Flag& flag : flags) text += line(flag.name + " VALUE", flag.help + " (default " + flag.default_text + ")");
  return text + line("-h, --help", "print this and exit");
}

/// Reads `--flag value` pairs into `flags`. `HelpRequested` for --help or
/// -h anywhere; `UsageError` (one line, pointing to --help) for an unknown
/// flag, a missing value or a value the flag cannot read.
inline void parse_flags(int argc, char** argv, const std::string& program, const std::string& about,
                        const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      throw HelpRequested{usage(program, about, flags)};
    }
  }
  const std::string hint = "; " + program + " --help lists the flags";
  for (int i = 1; i < argc; i += 2) {
    const std::string word = argv[i];
    const auto flag = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == word; });
    if (flag == flags.end()) throw reprise::UsageError(program + ": unknown flag " + word + hint);
    if (i + 1 == argc) throw reprise::UsageError(program + ": " + word + " needs a value" + hint);
    try {
      flag->set(argv[i + 1]);
    } catch (const reprise::UsageError& error) {
      throw reprise::UsageError(program + ": " + error.what() + hint);
    }
  }
}

/// What a demo's `--help` says: its name, what it does, and what its steps
/// are called ("iterations").
struct DemoText {
  std::string program;
  std::string about;
  std::string steps;
};

/// `parse_flags` for a demo's `options`, with the flags every demo has
/// appended: `--kills` (processes killed at random steps) and `--seed`.
template <class Options>
void parse_demo_flags(int argc, char** argv, const DemoText& text, Options& options, std::vector<Flag> flags) {
  flags.push_back(number_flag("--kills", "processes killed at random " + text.steps, options.kills));
  flags.push_back(number_flag("--seed", "seed of the random kills", options.seed, "random, printed"));
  parse_flags(argc, argv, text.program, text.about, flags);
}

/// `--move RANK@ITERATION`: at that iteration the process of that original
/// rank asks to move to a new process (live migration, `reprise::Migration`).
struct MovePlan {
  int rank = -1;  ///< -1: no move planned
  std::uint64_t iteration = 0;
  /// Whether process `me` asks to move at `iteration`.
  [[nodiscard]] bool due(reprise::OriginalRank me, std::uint64_t now) const {
    return rank == me.value() && now == iteration;
  }
};

inline Flag move_flag(MovePlan& plan) {
  return Flag{"--move", "RANK@ITERATION: that process asks to move to a new process (live migration)", "none",
              [&plan](const std::string& value) {
                const auto at = value.find('@');
                try {
                  if (at == std::string::npos) throw std::invalid_argument(value);
                  plan.rank = std::stoi(value.substr(0, at));
                  plan.iteration = std::stoull(value.substr(at + 1));
                } catch (const std::exception&) {
                  throw reprise::UsageError("--move takes RANK@ITERATION, e.g. 1@20, got '" + value + "'");
                }
                if (plan.rank < 0) throw reprise::UsageError("--move " + value + ": the rank is negative");
              }};
}

/// Where this process runs, as a move reports it: "pid N on HOST".
inline std::string process_place() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "an unknown host");
  return "pid " + std::to_string(::getpid()) + " on " + host;
}

/// For `main`, before MPI starts: if the command line asks for --help,
/// prints the usage `parse` describes on stdout and returns true (exit 0).
template <class Parse>
bool printed_help(int argc, char** argv, Parse parse) {
  try {
    (void)parse(argc, argv);
  } catch (const HelpRequested& help) {
    std::fputs(help.usage.c_str(), stdout);
    return true;
  } catch (const reprise::UsageError&) {
    // Reported once MPI runs, by process 0 (demo::start).
  }
  return false;
}

/// The fault plan: REPRISE_FAULTS if set (whole nodes too: `node2@30`),
/// otherwise `kills` random original ranks at random steps below `steps`.
/// Every process drew its own `seed`; all use the largest, so all build the
/// same plan. Returns that seed too. `UsageError` if REPRISE_FAULTS names a
/// rank or a node the job does not have.
struct FaultPlan {
  reprise::inject::Schedule schedule;
  std::uint64_t seed = 0;
};

inline FaultPlan agreed_fault_plan(reprise::Comm& comm, std::uint64_t seed, std::uint64_t steps, int kills) {
  FaultPlan plan;
  plan.seed = comm.allreduce(static_cast<unsigned long long>(seed), MPI_MAX);
  plan.schedule = std::getenv("REPRISE_FAULTS") != nullptr
                      ? reprise::inject::Schedule::from_env()
                      : reprise::inject::Schedule::random_exact(plan.seed, comm.size(), steps, kills);
  plan.schedule.bind_nodes(comm);
  plan.schedule.validate(comm.size());
  return plan;
}

/// What a demo starts from: its options and the agreed fault plan.
template <class Options>
struct Start {
  Options options;
  reprise::inject::Schedule schedule;
};

/// Records that this process runs, parses the options with `parse` (which
/// throws `UsageError` on bad flags) and agrees on the fault plan over
/// `steps_of(options)` steps. A replacement process (spawned during a
/// recovery, while the others are inside it) takes no part in that
/// agreement and gets no faults. On a usage error, process 0 prints it, every
/// process records it, and nothing is returned: exit with
/// `environment.exit_status()`.
template <class Options, class Parse, class Steps>
std::optional<Start<Options>> start(reprise::Comm& comm, reprise::Environment& environment, int argc, char** argv,
                                    Parse parse, Steps steps_of) {
  const auto me = comm.original_rank();
  reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, me);
  try {
    Start<Options> begun{parse(argc, argv), {}};
    if (comm.is_replacement()) return begun;
    auto plan = agreed_fault_plan(comm, begun.options.seed, steps_of(begun.options), begun.options.kills);
    begun.options.seed = plan.seed;
    begun.schedule = std::move(plan.schedule);
    return begun;
  } catch (const reprise::UsageError& error) {
    if (comm.rank().value() == 0) std::fprintf(stderr, "%s\n", error.what());
    reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, me, error.what());
    environment.set_exit_status(2);
    return std::nullopt;
  }
}

/// What a demo's body gets from `main_of`.
template <class Options>
struct Demo {
  reprise::Environment& environment;
  reprise::Comm& comm;
  Options options;
  reprise::inject::Schedule schedule;
};

/// The shape of every demo's `main`: `--help` answered before MPI starts,
/// then MPI, the job's communicator, the options and the fault plan
/// (`start`), then `body(demo)`, whose result is the exit status.
template <class Options, class Parse, class Steps, class Body>
int main_of(int argc, char** argv, Parse parse, Steps steps_of, Body body) {
  if (printed_help(argc, argv, parse)) return 0;
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  auto begun = start<Options>(comm, environment, argc, argv, parse, steps_of);
  if (!begun) return environment.exit_status();
  Demo<Options> demo{environment, comm, std::move(begun->options), std::move(begun->schedule)};
  return body(demo);
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// A long run says how far it is: every `kEvery` seconds, the process of
/// rank 0 prints the iteration it has reached.
class Progress {
 public:
  static constexpr double kEvery = 10.0;

  Progress(const reprise::Comm& comm, std::uint64_t iterations)
      : _comm(comm), _iterations(iterations), _start(std::chrono::steady_clock::now()) {}

  /// Called at each iteration; prints when the time has come.
  void at(std::uint64_t iteration) {
    if (_comm.rank().value() != 0) return;
    const double now = seconds_since(_start);
    if (now < _next) return;
    _next = now + kEvery;
    if (iteration == 0) return;
    std::printf("  iteration %llu of %llu after %.0f s\n", static_cast<unsigned long long>(iteration),
                static_cast<unsigned long long>(_iterations), now);
    std::fflush(stdout);
  }

 private:
  const reprise::Comm& _comm;
  std::uint64_t _iterations;
  std::chrono::steady_clock::time_point _start;
  double _next = kEvery;
};

/// Records the verdict for the launcher and returns the exit status, which
/// the environment also uses if finalisation has to be abandoned.
inline int finish(reprise::Environment& environment, reprise::OriginalRank me, bool correct, const char* why_not,
                  int failure_status = 1) {
  reprise::inject::record_outcome(correct ? reprise::inject::Outcome::kPassed : reprise::inject::Outcome::kFailed, me,
                                  correct ? "" : why_not);
  environment.set_exit_status(correct ? 0 : failure_status);
  return environment.exit_status();
}

}  // namespace demo
