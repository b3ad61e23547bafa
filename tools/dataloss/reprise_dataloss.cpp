// reprise-dataloss: how many failures until the store loses data for good,
// and how likely a loss is after so many failures, for p processes holding
// r copies of every block, with processes or whole nodes failing at random.
// The model (reprise/data_loss.hpp) answers up to millions of processes;
// --simulate adds the simulator's figures for the same layout next to it.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reprise/data_loss.hpp"
#include "reprise/error.hpp"

namespace {

constexpr const char* kProgram = "reprise-dataloss";
// What the simulator may take on: about trials * units * r steps (units:
// processes or nodes; a few seconds), and a layout of so many processes
// (the placement keeps every slot's holders: about 200 bytes a process).
constexpr double kMaxSimulationWork = 1e9;
constexpr long long kMaxSimulatedProcesses = 10'000'000;

/// What the command line asks.
struct Options {
  long long processes = 0;
  long long copies = 0;
  long long per_node = 0;  // 0: processes fail, not nodes
  std::vector<long long> failures;
  long long trials = 0;  // 0: no simulation
  long long seed = 1;
  bool json = false;
  bool help = false;
};

constexpr const char* kUsage = "usage: reprise-dataloss --processes P --copies R [--ppn N] [--failures F[,F...]]\n"
                               "                        [--simulate TRIALS] [--seed S] [--json]\n"
                               "How many random failures until the store loses data for good (some block\n"
                               "lost all R copies), and the probability of that after F failures.\n"
                               "  --processes P      processes of the job (slots of the layout)\n"
                               "  --copies R         copies of every block\n"
                               "  --ppn N            processes per node: whole nodes fail, F counts nodes\n"
                               "                     (P / N nodes, slots in node-major order)\n"
                               "  --failures F,...   failures to give P(loss) for (default: none)\n"
                               "  --simulate TRIALS  also kill processes (or nodes) of the real placement\n"
                               "                     at random TRIALS times; costs O(TRIALS * units * R),\n"
                               "                     skipped (with a note) past 1e9 or 10^7 processes\n"
                               "  --seed S           seed of the simulation (default 1)\n"
                               "  --json             one JSON object per line instead of text\n"
                               "  -h, --help         print this and exit\n";

// A whole number from `low` to `high`, or `UsageError` naming the flag.
long long number(const std::string& flag, const std::string& text, long long low, long long high) {
  if (text.empty()) throw reprise::UsageError(flag + " has an empty value; give a whole number");
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) {
    throw reprise::UsageError(flag + " " + text + " is not a whole number");
  }
  if (value < low || value > high) {
    throw reprise::UsageError(flag + " " + text + " is out of range; give " + std::to_string(low) + " to " +
                              std::to_string(high));
  }
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  constexpr long long kIntMax = std::numeric_limits<int>::max();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      options.help = true;
      return options;
    }
    if (flag == "--json") {
      options.json = true;
      continue;
    }
    if (flag != "--processes" && flag != "--copies" && flag != "--ppn" && flag != "--failures" &&
        flag != "--simulate" && flag != "--seed") {
      throw reprise::UsageError("unknown flag " + flag);
    }
    if (i + 1 == argc) throw reprise::UsageError(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--processes") options.processes = number(flag, value, 1, kIntMax);
    if (flag == "--copies") options.copies = number(flag, value, 1, kIntMax);
    if (flag == "--ppn") options.per_node = number(flag, value, 1, kIntMax);
    if (flag == "--simulate") options.trials = number(flag, value, 1, kIntMax);
    if (flag == "--seed") options.seed = number(flag, value, 0, std::numeric_limits<long long>::max());
    if (flag == "--failures") {
      options.failures.clear();
      for (std::size_t begin = 0; begin <= value.size();) {
        const std::size_t comma = std::min(value.find(',', begin), value.size());
        options.failures.push_back(number(flag, value.substr(begin, comma - begin), 0, kIntMax));
        begin = comma + 1;
      }
    }
  }
  if (options.processes == 0) throw reprise::UsageError("--processes is missing");
  if (options.copies == 0) throw reprise::UsageError("--copies is missing");
  if (options.copies > options.processes) {
    throw reprise::UsageError("--copies " + std::to_string(options.copies) + " is more than --processes " +
                              std::to_string(options.processes) + "; every copy needs a process of its own");
  }
  if (options.per_node != 0 && options.processes % options.per_node != 0) {
    throw reprise::UsageError("--processes " + std::to_string(options.processes) + " is not a multiple of --ppn " +
                              std::to_string(options.per_node) + "; every node runs the same number of processes");
  }
  return options;
}

// The model's answers, or the reason it has none for this layout.
struct ModelAnswer {
  std::optional<double> expected;
  std::vector<double> loss;  // per entry of Options::failures
  std::string reason;
};

ModelAnswer ask_model(const Options& options, int units) {
  const auto p = static_cast<int>(options.processes);
  const auto r = static_cast<int>(options.copies);
  const auto per_node = static_cast<int>(options.per_node);
  ModelAnswer answer;
  try {
    if (per_node == 0) {
      answer.expected = reprise::data_loss::expected_failures_until_loss(p, r);
      for (const long long f : options.failures)
        answer.loss.push_back(reprise::data_loss::probability(p, r, static_cast<int>(f)));
    } else {
      answer.expected = reprise::data_loss::expected_node_failures_until_loss(units, per_node, r);
      for (const long long f : options.failures) {
        answer.loss.push_back(reprise::data_loss::node_probability(units, per_node, r, static_cast<int>(f)));
      }
    }
  } catch (const reprise::UsageError& error) {
    answer = ModelAnswer{};
    answer.reason = error.what();
  }
  return answer;
}

// The simulator's answers for the same layout, as the store makes it.
reprise::data_loss::Simulation simulate(const Options& options) {
  const auto p = static_cast<int>(options.processes);
  std::vector<int> node_of_slot;
  if (options.per_node != 0) {
    for (int s = 0; s < p; ++s) node_of_slot.push_back(s / static_cast<int>(options.per_node));
  }
  const reprise::Placement placement({.blocks = static_cast<std::uint64_t>(p),
                                      .slots = p,
                                      .copies = static_cast<int>(options.copies),
                                      .node_of_slot = node_of_slot});
  const auto seed = static_cast<std::uint64_t>(options.seed);
  const auto trials = static_cast<int>(options.trials);
  return options.per_node == 0 ? reprise::data_loss::simulate(placement, trials, seed)
                               : reprise::data_loss::simulate_nodes(placement, node_of_slot, trials, seed);
}

// Standard error of the simulated mean, from its distribution:
// E[T^2] = sum over f of (2f + 1) P(T > f).
double standard_error(const reprise::data_loss::Simulation& simulation, long long trials) {
  double square = 0;
  for (std::size_t f = 0; f < simulation.loss_probability.size(); ++f) {
    square += (2.0 * static_cast<double>(f) + 1) * (1 - simulation.loss_probability[f]);
  }
  const double mean = simulation.mean_failures_until_loss;
  return std::sqrt(std::max(0.0, square - mean * mean) / static_cast<double>(trials));
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string real(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

/// The layout asked about: processes or whole nodes as the unit that fails.
struct Layout {
  bool nodes = false;
  int units = 0;
  std::string unit;  // "process" or "node"
  std::string json;  // its fields, for the JSON lines
};

Layout layout_of(const Options& options) {
  Layout layout;
  layout.nodes = options.per_node != 0;
  layout.units = static_cast<int>(layout.nodes ? options.processes / options.per_node : options.processes);
  layout.unit = layout.nodes ? "node" : "process";
  layout.json = "\"processes\":" + std::to_string(options.processes) + ",\"copies\":" + std::to_string(options.copies) +
                ",\"unit\":\"" + layout.unit + "\"";
  if (layout.nodes) {
    layout.json += ",\"nodes\":" + std::to_string(layout.units) + ",\"ppn\":" + std::to_string(options.per_node);
  }
  return layout;
}

void print_model(const Options& options, const Layout& layout, const ModelAnswer& model) {
  if (!model.expected) {
    if (options.json) {
      std::printf("{\"source\":\"model\",%s,\"none\":%s}\n", layout.json.c_str(), quoted(model.reason).c_str());
    } else {
      std::printf("model: none for this layout: %s\n", model.reason.c_str());
    }
    return;
  }
  if (options.json) {
    std::printf("{\"source\":\"model\",%s,\"expected_failures_until_loss\":%s}\n", layout.json.c_str(),
                real(*model.expected).c_str());
    for (std::size_t i = 0; i < options.failures.size(); ++i) {
      std::printf("{\"source\":\"model\",%s,\"failures\":%lld,\"loss_probability\":%s}\n", layout.json.c_str(),
                  options.failures[i], real(model.loss[i]).c_str());
    }
    return;
  }
  std::printf("model: expected %s failures until loss: %.6g\n", layout.unit.c_str(), *model.expected);
  for (std::size_t i = 0; i < options.failures.size(); ++i) {
    std::printf("model: P(loss) after %lld %s failures: %.6g\n", options.failures[i], layout.unit.c_str(),
                model.loss[i]);
  }
}

/// Why the simulator cannot take this job (too many processes, too much
/// work), or nothing.
std::string simulator_refusal(const Options& options, const Layout& layout) {
  const double work = static_cast<double>(options.trials) * layout.units * static_cast<double>(options.copies);
  if (options.processes > kMaxSimulatedProcesses) {
    return "the simulator builds the real placement, which takes about 200 bytes a process; it handles up to " +
           std::to_string(kMaxSimulatedProcesses) + " processes";
  }
  if (work > kMaxSimulationWork) {
    return std::to_string(options.trials) + " trials of " + std::to_string(layout.units) + " " +
           (layout.nodes ? "nodes" : "processes") + " with " + std::to_string(options.copies) +
           " copies are more than 1e9 steps (the simulator costs O(trials * units * copies)); lower --simulate";
  }
  return {};
}

void print_simulation(const Options& options, const Layout& layout) {
  const auto simulation = simulate(options);
  const double error = standard_error(simulation, options.trials);
  const auto trials = static_cast<double>(options.trials);
  if (options.json) {
    std::printf("{\"source\":\"simulator\",%s,\"trials\":%lld,\"seed\":%lld,\"expected_failures_until_loss\":%s,"
                "\"standard_error\":%s}\n",
                layout.json.c_str(), options.trials, options.seed, real(simulation.mean_failures_until_loss).c_str(),
                real(error).c_str());
  } else {
    std::printf("simulator (%lld trials, seed %lld): mean %s failures until loss: %.6g +- %.2g (standard error)\n",
                options.trials, options.seed, layout.unit.c_str(), simulation.mean_failures_until_loss, error);
  }
  for (const long long f : options.failures) {
    const double p = simulation.loss_probability[static_cast<std::size_t>(f)];
    const double p_error = std::sqrt(p * (1 - p) / trials);
    if (options.json) {
      std::printf(
          "{\"source\":\"simulator\",%s,\"trials\":%lld,\"seed\":%lld,\"failures\":%lld,\"loss_probability\":%s,"
          "\"standard_error\":%s}\n",
          layout.json.c_str(), options.trials, options.seed, f, real(p).c_str(), real(p_error).c_str());
    } else {
      std::printf("simulator: P(loss) after %lld %s failures: %.6g +- %.2g\n", f, layout.unit.c_str(), p, p_error);
    }
  }
}

int run(const Options& options) {
  const Layout layout = layout_of(options);
  for (const long long f : options.failures) {
    if (f > layout.units) {
      throw reprise::UsageError("--failures " + std::to_string(f) + " is more than the " +
                                std::to_string(layout.units) + " " + (layout.nodes ? "nodes" : "processes") +
                                " there are");
    }
  }
  const ModelAnswer model = ask_model(options, layout.units);
  if (!model.expected && options.trials == 0) {
    throw reprise::UsageError("no closed form for this layout (" + model.reason + "); add --simulate TRIALS");
  }
  if (!options.json) {
    std::printf("layout: %lld processes, %lld copies of every block", options.processes, options.copies);
    if (layout.nodes) std::printf(", %d nodes of %lld processes (node-major slots)", layout.units, options.per_node);
    std::printf("\n");
  }
  print_model(options, layout, model);
  if (options.trials == 0) return 0;
  const std::string why = simulator_refusal(options, layout);
  if (!why.empty()) {
    if (options.json) {
      std::printf("{\"source\":\"simulator\",%s,\"skipped\":%s}\n", layout.json.c_str(), quoted(why).c_str());
    } else {
      std::printf("simulator: skipped: %s\n", why.c_str());
    }
    return 0;
  }
  print_simulation(options, layout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    if (options.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(options);
  } catch (const reprise::UsageError& error) {
    std::fprintf(stderr, "%s: %s (%s --help lists the flags)\n", kProgram, error.what(), kProgram);
    return 2;
  }
}
