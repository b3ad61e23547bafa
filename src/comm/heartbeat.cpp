#include "reprise/heartbeat.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "log.hpp"
#include "reprise/error.hpp"
#include "inject_detail.hpp"
#include "requests.hpp"

namespace reprise {

namespace {

constexpr int kBeatTag = 1;
constexpr int kBeatWord = 0;  // what a beat carries (static: it outlives its send)
constexpr int kKillTag = 3;   // "kill this pid of your node": a watcher on another node asks

/// Sends `word` (which must outlive the send) without waiting for it: a
/// message to a process that died is simply lost.
void post(const int& word, int to, int tag, MPI_Comm channel) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(&word, 1, MPI_INT, to, tag, channel, &request) == MPI_SUCCESS) detail::let_go(request);
}

/// What the kernel of this node says about process `pid`.
enum class Liveness { kGone, kStopped, kRunning };

Liveness liveness_of(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return Liveness::kGone;
  // "pid (command) state ...": the command may hold spaces and parentheses.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return Liveness::kGone;
  switch (text[close + 2]) {
    case 'T':  // stopped by a signal
    case 't':  // stopped by a tracer
      return Liveness::kStopped;
    case 'Z':
    case 'X':
    case 'x':
      return Liveness::kGone;
    default:
      return Liveness::kRunning;
  }
}

/// Kills process `pid` of this node, `original` in the job, if its kernel says
/// it is stopped: a silent process that runs is late (starved of CPU on a
/// busy node), not hung, and is left alone; one line says so.
void kill_if_stopped(int pid, OriginalRank original, double timeout_seconds) {
  const Liveness liveness = liveness_of(pid);
  if (liveness == Liveness::kStopped) {
    ::kill(static_cast<pid_t>(pid), SIGKILL);
  } else if (liveness == Liveness::kRunning) {
    logging::warning(
        "Heartbeat: process %d was silent for over %.3g s but is running, so it is late (a busy node?), not hung: "
        "not killed; raise HeartbeatConfig::timeout_seconds if this repeats",
        original.value(), timeout_seconds);
  }
}

}  // namespace

Heartbeat::Heartbeat(Comm& comm, HeartbeatConfig config) : _comm(comm), _config(config) {
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    throw UsageError("reprise::Heartbeat: needs MPI_THREAD_MULTIPLE, but MPI granted less; initialise MPI with "
                     "reprise::Environment or MPI_Init_thread(MPI_THREAD_MULTIPLE)");
  }
  if (!(_config.period_seconds > 0) || !(_config.timeout_seconds > _config.period_seconds)) {
    throw UsageError("reprise::Heartbeat: the period (" + std::to_string(_config.period_seconds) +
                     " s) must be positive and below the timeout (" + std::to_string(_config.timeout_seconds) + " s)");
  }
  start();
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::start() {
  // Through PMPI: the message log (libreprise_msglog.so) leaves the beats
  // of this thread out, and follows the application's calls only.
  _comm.check(PMPI_Comm_dup(_comm.raw(), &_channel), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(_channel, MPI_ERRORS_RETURN);
  _rank = _comm.rank().value();
  _pid = _comm.allgather(static_cast<int>(::getpid()));
  _host = _comm.node_of_each_member();
  _original = _comm.members();
  _running = true;
  _thread = std::thread([this] { watch(); });
}

void Heartbeat::stop() {
  if (!_running.exchange(false)) return;
  _thread.join();
  MPI_Comm_free(&_channel);
}

void Heartbeat::restart() {
  stop();
  start();
}

std::vector<OriginalRank> Heartbeat::declared_hung() const {
  const std::lock_guard lock(_mutex);
  return _declared;
}

// Beats to the previous rank, listens to the next one.
void Heartbeat::watch() {
  using Clock = std::chrono::steady_clock;
  const int p = static_cast<int>(_pid.size());
  if (p < 2) {
    while (_running) std::this_thread::sleep_for(std::chrono::duration<double>(_config.period_seconds));
    return;
  }
  const int watcher = (_rank + p - 1) % p;
  const int watched = (_rank + 1) % p;
  const auto period = std::chrono::duration<double>(_config.period_seconds);
  const auto timeout = std::chrono::duration<double>(_config.timeout_seconds);
  auto last_heard = Clock::now();
  auto next_beat = Clock::now();
  bool declared = false;
  while (_running) {
    const auto now = Clock::now();
    if (now >= next_beat) {
      if (!detail::heartbeat_silenced()) post(kBeatWord, watcher, kBeatTag, _channel);
      next_beat = now + std::chrono::duration_cast<Clock::duration>(period);
    }
    // Named sources only: a wildcard probe fails once any process has died.
    int arrived = 0;
    while (MPI_Iprobe(watched, kBeatTag, _channel, &arrived, MPI_STATUS_IGNORE) == MPI_SUCCESS && arrived != 0) {
      int word = 0;
      if (MPI_Recv(&word, 1, MPI_INT, watched, kBeatTag, _channel, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      last_heard = Clock::now();
      if (declared) {
        clear_declaration(watched);
        declared = false;
      }
    }
    serve_kill_requests();
    if (!declared && Clock::now() - last_heard > timeout) {
      declared = true;
      declare_hung(watched);
    }
    std::this_thread::sleep_for(std::min(std::chrono::duration<double>(0.005), period / 4));
  }
}

// A process is killed by someone on its node (pids mean something only
// there), and only if its kernel says it is stopped: here if it is this node,
// else by the first other member on its node, asked by message. Alone on its
// node, nothing can check or stop it.
void Heartbeat::declare_hung(int watched) {
  const OriginalRank original = _original[static_cast<std::size_t>(watched)];
  {
    const std::lock_guard lock(_mutex);
    _declared.push_back(original);
  }
  const auto host = _host[static_cast<std::size_t>(watched)];
  if (host == _host[static_cast<std::size_t>(_rank)]) {
    kill_if_stopped(_pid[static_cast<std::size_t>(watched)], original, _config.timeout_seconds);
    return;
  }
  for (int mate = 0; mate < static_cast<int>(_host.size()); ++mate) {
    if (mate != watched && _host[static_cast<std::size_t>(mate)] == host) {
      _kill_request = _pid[static_cast<std::size_t>(watched)];
      post(_kill_request, mate, kKillTag, _channel);
      return;
    }
  }
  logging::warning(
      "Heartbeat: process %d has been silent for over %.3g s and is alone on its node, where nothing can check or "
      "stop it",
      original.value(), _config.timeout_seconds);
}

// Its beats came again: it was late, not hung.
void Heartbeat::clear_declaration(int watched) {
  const OriginalRank original = _original[static_cast<std::size_t>(watched)];
  const std::lock_guard lock(_mutex);
  const auto found = std::find(_declared.rbegin(), _declared.rend(), original);
  if (found != _declared.rend()) _declared.erase(std::next(found).base());
}

// Requests come from the watcher of a process of this node (the rank before
// it), asked by name: a wildcard probe fails once any process has died.
void Heartbeat::serve_kill_requests() {
  const int p = static_cast<int>(_pid.size());
  const auto my_host = _host[static_cast<std::size_t>(_rank)];
  for (int member = 0; member < p; ++member) {
    if (member == _rank || _host[static_cast<std::size_t>(member)] != my_host) continue;
    const int watcher = (member + p - 1) % p;
    if (_host[static_cast<std::size_t>(watcher)] == my_host) continue;  // it kills by itself
    int arrived = 0;
    if (MPI_Iprobe(watcher, kKillTag, _channel, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS || arrived == 0) continue;
    int pid = 0;
    if (MPI_Recv(&pid, 1, MPI_INT, watcher, kKillTag, _channel, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
    // Only a process of this job on this node: the pid of the member it watches.
    if (pid == _pid[static_cast<std::size_t>(member)])
      kill_if_stopped(pid, _original[static_cast<std::size_t>(member)], _config.timeout_seconds);
  }
}

}  // namespace reprise
