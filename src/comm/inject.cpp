#include "reprise/inject.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "log.hpp"
#include "inject_detail.hpp"
#include "mix.hpp"
#include "settings.hpp"
#include "reprise/comm.hpp"
#include "reprise/error.hpp"

namespace reprise::inject {

namespace {

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kRunning:
      return "running";
    case Outcome::kPassed:
      return "passed";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kKilled:
      return "killed";
    case Outcome::kHung:
      return "hung";
    case Outcome::kAbandoned:
      return "abandoned";
    case Outcome::kMigrated:
      return "migrated";
  }
  return "failed";
}

// Uniform in [0, bound); the modulo bias is below 2^-40 for the bounds used here.
std::uint64_t uniform_below(std::uint64_t& state, std::uint64_t bound) { return detail::splitmix64(state) % bound; }

double uniform_unit(std::uint64_t& state) { return static_cast<double>(detail::splitmix64(state) >> 11U) * 0x1.0p-53; }

void check_steps(std::uint64_t steps) {
  if (steps < 2) {
    throw UsageError("inject::Schedule: a random schedule needs at least 2 steps (faults fall in [1, steps))");
  }
}

struct ArmedPoint {
  std::string point;
  OriginalRank victim;
  Action action;
  unsigned passes_left;            // the fault fires when this reaches 0
  std::vector<NodeMember> node{};  // not empty: the victim's whole node dies
};

std::mutex armed_mutex;
std::vector<ArmedPoint> armed_points;
std::atomic<bool> anything_armed{false};

[[noreturn]] void carry_out(Action action, OriginalRank me) {
  if (action == Action::kHang) hang(me);
  if (action == Action::kCrash) {
    record_outcome(Outcome::kKilled, me, "crashed on purpose");
    std::fflush(stdout);
    ::raise(SIGSEGV);
  }
  kill_self(me);
}

/// The last outcome recorded, as an `Outcome` value; -1 before the first.
std::atomic<int> last_outcome{-1};

}  // namespace

namespace {

/// Writes process `pid`'s outcome file (see `record_outcome`).
void write_outcome(int pid, Outcome outcome, OriginalRank me, std::string_view reason) {
  const std::string dir = settings::text(settings::kOutcomeDir, settings::OnRefusal::kExit);
  if (dir.empty()) return;
  std::string line = outcome_name(outcome);
  line += ' ';
  line += std::to_string(me.value());
  if (!reason.empty()) {
    line += ' ';
    for (char c : reason) line += (c == '\n') ? ' ' : c;
  }
  line += '\n';
  const std::string final_path = dir + "/" + std::to_string(pid);
  // Its own temporary name per writer: kill_node writes other processes' files.
  const std::string temp_path = final_path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const ssize_t written = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (written == static_cast<ssize_t>(line.size())) ::rename(temp_path.c_str(), final_path.c_str());
}

}  // namespace

void record_outcome(Outcome outcome, OriginalRank me, std::string_view reason) {
  last_outcome.store(static_cast<int>(outcome));
  write_outcome(::getpid(), outcome, me, reason);
}

std::optional<Outcome> recorded_outcome() noexcept {
  const int outcome = last_outcome.load();
  if (outcome < 0) return std::nullopt;
  return static_cast<Outcome>(outcome);
}

void kill_self(OriginalRank me) {
  std::fflush(stdout);
  std::fflush(stderr);
  wait_until_output_read();
  record_outcome(Outcome::kKilled, me);
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

void kill_node(std::span<const NodeMember> node, OriginalRank me) {
  const int self = ::getpid();
  // The records before the kills (two members may kill each other), the
  // kills back to back (the node goes at once), the records again (a member
  // may have replaced its record just before it died).
  const auto record_others = [&] {
    for (const auto& member : node) {
      if (member.pid != self) write_outcome(member.pid, Outcome::kKilled, member.rank, "with its node");
    }
  };
  record_others();
  for (const auto& member : node) {
    if (member.pid != self && member.pid > 0) ::kill(member.pid, SIGKILL);
  }
  record_others();
  kill_self(me);
}

void wait_until_output_read() noexcept {
  constexpr int kPolls = 1000;  // 1 ms apart
  constexpr timespec kPause{.tv_sec = 0, .tv_nsec = 1'000'000};
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat about {};
    if (::fstat(fd, &about) != 0 || !S_ISFIFO(about.st_mode)) continue;
    for (int poll = 0; poll < kPolls; ++poll) {
      int unread = 0;
      if (::ioctl(fd, FIONREAD, &unread) != 0 || unread == 0) break;
      ::nanosleep(&kPause, nullptr);
    }
  }
}

void hang(OriginalRank me) {
  std::fflush(stdout);
  std::fflush(stderr);
  wait_until_output_read();
  record_outcome(Outcome::kHung, me);
  // Every thread stops, as on a frozen node; only SIGKILL (or SIGCONT) ends it.
  for (;;) ::kill(::getpid(), SIGSTOP);
}

namespace {

/// Until when (steady clock, nanoseconds since its epoch) the heartbeat is silenced.
std::atomic<std::int64_t> heartbeat_silent_until{0};

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void silence_heartbeat(double seconds) {
  const auto span = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
  heartbeat_silent_until.store(steady_now_ns() + span.count());
}

Schedule::Schedule(std::vector<Fault> faults) : _faults(std::move(faults)) {
  std::sort(_faults.begin(), _faults.end(),
            [](const Fault& a, const Fault& b) { return a.step != b.step ? a.step < b.step : a.rank < b.rank; });
}

namespace {

/// Reads `text` whole as a number from 0 up; says what is wrong otherwise.
template <class Number>
std::optional<std::string> read_number(std::string_view text, const char* what, Number& value) {
  const auto quoted = std::string(what) + " \"" + std::string(text) + "\"";
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) return quoted + " is too large";
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || value < 0) {
    return quoted + " is not a whole number from 0 up";
  }
  return std::nullopt;
}

}  // namespace

Schedule Schedule::parse(std::string_view text) { return parse(text, "fault schedule \"" + std::string(text) + "\""); }

Schedule Schedule::parse(std::string_view text, std::string source) {
  std::vector<Fault> faults;
  std::set<OriginalRank> seen;
  auto fail = [&](std::string_view entry, const std::string& why) -> UsageError {
    return UsageError(source + ": entry \"" + std::string(entry) + "\": " + why +
                      "; expected RANK@STEP[:hang|:crash] or nodeK@STEP, e.g. 3@10,5@20:hang,node2@30");
  };
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (entry.empty()) continue;
    Fault fault;
    std::string_view place = entry;
    if (entry.starts_with("node")) {
      const auto at = entry.find('@');
      if (at == std::string_view::npos) throw fail(entry, "no '@' between the node and the step");
      if (auto why = read_number(entry.substr(4, at - 4), "the node", fault.node)) throw fail(entry, *why);
      if (fault.node < 1) throw fail(entry, "nodes count from 1");
      if (auto why = read_number(entry.substr(at + 1), "the step", fault.step)) throw fail(entry, *why);
      fault.rank = OriginalRank{-fault.node};  // a placeholder until bind_nodes
      if (!seen.insert(fault.rank).second) {
        throw fail(entry, "node " + std::to_string(fault.node) + " already has a fault (a node dies once)");
      }
      faults.push_back(fault);
      continue;
    }
    if (const auto colon = entry.find(':'); colon != std::string_view::npos) {
      const auto action = entry.substr(colon + 1);
      if (action == "hang") fault.action = Action::kHang;
      else if (action == "crash") fault.action = Action::kCrash;
      else if (action != "kill")
        throw fail(entry, "the action \"" + std::string(action) + "\" is not kill, hang or crash");
      place = entry.substr(0, colon);
    }
    const auto at = place.find('@');
    if (at == std::string_view::npos) throw fail(entry, "no '@' between the rank and the step");
    int rank = 0;
    if (auto why = read_number(place.substr(0, at), "the rank", rank)) throw fail(entry, *why);
    if (auto why = read_number(place.substr(at + 1), "the step", fault.step)) throw fail(entry, *why);
    fault.rank = OriginalRank{rank};
    if (!seen.insert(fault.rank).second) {
      throw fail(entry, "rank " + std::to_string(rank) + " already has a fault (a process dies once)");
    }
    faults.push_back(fault);
  }
  Schedule schedule(std::move(faults));
  schedule._source = std::move(source);
  return schedule;
}

Schedule Schedule::from_env(const char* variable) {
  const settings::Setting* setting = settings::named(variable);
  if (setting == nullptr) {
    const char* text = std::getenv(variable);
    return text == nullptr ? Schedule{} : parse(text, std::string(variable) + "=\"" + text + "\"");
  }
  const settings::Found found = settings::find(*setting);
  if (found.text.empty()) return Schedule{};
  const std::string origin = found.source == settings::Source::kFile ? " (from " + found.origin + ")" : "";
  return parse(found.text, std::string(variable) + "=\"" + found.text + "\"" + origin);
}

void Schedule::bind_nodes(Comm& comm) {
  if (std::none_of(_faults.begin(), _faults.end(), [](const Fault& fault) { return fault.node > 0; })) return;
  const auto& key = comm.node_of_each_member();
  const auto pids = comm.allgather(static_cast<int>(::getpid()));
  std::map<int, std::vector<NodeMember>> by_key;  // the key is the node's lowest rank: ordered as promised
  for (int r = 0; r < comm.size(); ++r) {
    by_key[key[static_cast<std::size_t>(r)]].push_back(
        {comm.original_rank(Rank{r}), pids[static_cast<std::size_t>(r)]});
  }
  std::vector<std::vector<NodeMember>> nodes;
  for (auto& [lowest, members] : by_key) nodes.push_back(std::move(members));
  std::vector<Fault> bound;
  for (const Fault& fault : _faults) {
    if (fault.node == 0) {
      bound.push_back(fault);
      continue;
    }
    if (fault.node > static_cast<int>(nodes.size())) {
      throw UsageError((_source.empty() ? "fault schedule \"" + to_string() + "\"" : _source) + ": node " +
                       std::to_string(fault.node) + " does not exist: the job runs on " + std::to_string(nodes.size()) +
                       " node(s)");
    }
    const auto& members = nodes[static_cast<std::size_t>(fault.node - 1)];
    for (const auto& member : members) bound.push_back({member.rank, fault.step, Action::kKill, fault.node, members});
  }
  std::string source = std::move(_source);
  *this = Schedule(std::move(bound));
  _source = std::move(source);
}

void Schedule::validate(int processes) const {
  for (const Fault& fault : _faults) {
    if (fault.node == 0 && fault.rank.value() >= processes) {
      throw UsageError((_source.empty() ? "fault schedule \"" + to_string() + "\"" : _source) + ": rank " +
                       std::to_string(fault.rank.value()) + " does not exist: the job has " +
                       std::to_string(processes) + " processes, original ranks 0 to " + std::to_string(processes - 1));
    }
  }
}

Schedule Schedule::random(std::uint64_t seed, int ranks, std::uint64_t steps, double expected_fraction) {
  check_steps(steps);
  if (ranks < 1 || !(expected_fraction >= 0.0 && expected_fraction <= 1.0)) {
    throw UsageError("inject::Schedule::random: need ranks >= 1 and 0 <= expected_fraction <= 1");
  }
  std::vector<Fault> faults;
  for (int rank = 0; rank < ranks; ++rank) {
    std::uint64_t state = seed ^ (0x5bd1e995ULL * static_cast<std::uint64_t>(rank + 1));
    if (uniform_unit(state) < expected_fraction) {
      faults.push_back(
          Fault{.rank = OriginalRank{rank}, .step = 1 + uniform_below(state, steps - 1), .action = Action::kKill});
    }
  }
  return Schedule(std::move(faults));
}

Schedule Schedule::random_exact(std::uint64_t seed, int ranks, std::uint64_t steps, int count, int first_rank) {
  check_steps(steps);
  if (first_rank < 0 || count < 0 || count > ranks - first_rank || static_cast<std::uint64_t>(count) > steps - 1) {
    throw UsageError("inject::Schedule::random_exact: cannot pick " + std::to_string(count) + " ranks from [" +
                     std::to_string(first_rank) + ", " + std::to_string(ranks) + ") at distinct steps below " +
                     std::to_string(steps));
  }
  std::uint64_t state = seed;
  std::vector<int> candidates;
  for (int rank = first_rank; rank < ranks; ++rank) candidates.push_back(rank);
  std::set<std::uint64_t> used_steps;
  std::vector<Fault> faults;
  for (int i = 0; i < count; ++i) {
    const auto pick = i + uniform_below(state, candidates.size() - static_cast<std::size_t>(i));
    std::swap(candidates[static_cast<std::size_t>(i)], candidates[pick]);
    std::uint64_t step = 0;
    do {
      step = 1 + uniform_below(state, steps - 1);
    } while (!used_steps.insert(step).second);
    faults.push_back(
        Fault{.rank = OriginalRank{candidates[static_cast<std::size_t>(i)]}, .step = step, .action = Action::kKill});
  }
  return Schedule(std::move(faults));
}

std::optional<Fault> Schedule::at(OriginalRank rank, std::uint64_t step) const {
  for (const Fault& fault : _faults) {
    if (fault.rank == rank && fault.step == step) return fault;
  }
  return std::nullopt;
}

Schedule& Schedule::operator=(const Schedule& other) {
  if (this != &other) *this = Schedule(other);
  return *this;
}

Schedule::Schedule(Schedule&& other) noexcept
    : _faults(std::move(other._faults)),
      _source(std::move(other._source)),
      _applied_by(std::exchange(other._applied_by, std::nullopt)),
      _last_step(other._last_step) {}

Schedule& Schedule::operator=(Schedule&& other) noexcept {
  _faults = std::move(other._faults);
  _source = std::move(other._source);
  _applied_by = std::exchange(other._applied_by, std::nullopt);
  _last_step = other._last_step;
  return *this;
}

Schedule::~Schedule() {
  if (!_applied_by) return;
  // A fault carried out ended this process: any planned for it never fired.
  for (const Fault& fault : _faults) {
    if (fault.rank != *_applied_by) continue;
    logging::warning("the fault %d@%llu%s never fired: process #%d applied the schedule up to step %llu only",
                     fault.rank.value(), static_cast<unsigned long long>(fault.step),
                     _source.empty() ? "" : (" of " + _source).c_str(), _applied_by->value(),
                     static_cast<unsigned long long>(_last_step));
  }
}

void Schedule::apply(OriginalRank me, std::uint64_t step, bool is_replacement) const {
  if (is_replacement) return;
  _applied_by = me;
  _last_step = std::max(_last_step, step);
  if (auto fault = at(me, step)) {
    if (!fault->node_members.empty()) kill_node(fault->node_members, me);
    carry_out(fault->action, me);
  }
}

std::string Schedule::to_string() const {
  std::ostringstream out;
  std::set<int> nodes_written;
  bool first = true;
  for (const Fault& fault : _faults) {
    if (fault.node > 0 && !nodes_written.insert(fault.node).second) continue;
    if (!first) out << ',';
    first = false;
    if (fault.node > 0) {
      out << "node" << fault.node << '@' << fault.step;
      continue;
    }
    out << fault.rank.value() << '@' << fault.step;
    if (fault.action == Action::kHang) out << ":hang";
    if (fault.action == Action::kCrash) out << ":crash";
  }
  return out.str();
}

void arm(std::string_view point, OriginalRank victim, Action action, unsigned pass) {
  const std::lock_guard lock(armed_mutex);
  armed_points.push_back(ArmedPoint{std::string(point), victim, action, std::max(pass, 1U)});
  anything_armed.store(true, std::memory_order_release);
}

void arm_node(std::string_view point, OriginalRank me, std::vector<NodeMember> node, unsigned pass) {
  const std::lock_guard lock(armed_mutex);
  armed_points.push_back(ArmedPoint{std::string(point), me, Action::kKill, std::max(pass, 1U), std::move(node)});
  anything_armed.store(true, std::memory_order_release);
}

void disarm_all() {
  const std::lock_guard lock(armed_mutex);
  armed_points.clear();
  anything_armed.store(false, std::memory_order_release);
}

void fault_point(std::string_view point, OriginalRank me) {
  if (!anything_armed.load(std::memory_order_acquire)) return;
  std::optional<Action> action;
  std::vector<NodeMember> node;
  {
    const std::lock_guard lock(armed_mutex);
    auto it = std::find_if(armed_points.begin(), armed_points.end(),
                           [&](const ArmedPoint& armed) { return armed.point == point && armed.victim == me; });
    if (it == armed_points.end() || --it->passes_left > 0) return;
    action = it->action;
    node = std::move(it->node);
    armed_points.erase(it);
  }
  if (!node.empty()) kill_node(node, me);
  carry_out(*action, me);
}

}  // namespace reprise::inject

bool reprise::detail::heartbeat_silenced() noexcept {
  return reprise::inject::steady_now_ns() < reprise::inject::heartbeat_silent_until.load();
}
