#include "reprise/heartbeat.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>

#include "reprise/error.hpp"
#include "reprise/inject.hpp"
#include "requests.hpp"

namespace reprise {

namespace {

constexpr int kBeatTag = 1;
constexpr int kDieTag = 2;
constexpr int kKillTag = 3;  // "kill this pid of your node": a watcher on another node asks

/// Sends `word` (which must outlive the send) without waiting for it: a
/// message to a process that died is simply lost.
void post(const int& word, int to, int tag, MPI_Comm channel) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(&word, 1, MPI_INT, to, tag, channel, &request) == MPI_SUCCESS) detail::let_go(request);
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
  int beat = 0;
  while (_running) {
    const auto now = Clock::now();
    if (now >= next_beat) {
      post(beat, watcher, kBeatTag, _channel);
      next_beat = now + std::chrono::duration_cast<Clock::duration>(period);
    }
    // Named sources only: a wildcard probe fails once any process has died.
    int arrived = 0;
    while (MPI_Iprobe(watched, kBeatTag, _channel, &arrived, MPI_STATUS_IGNORE) == MPI_SUCCESS && arrived != 0) {
      int word = 0;
      if (MPI_Recv(&word, 1, MPI_INT, watched, kBeatTag, _channel, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      last_heard = Clock::now();
    }
    if (MPI_Iprobe(watcher, kDieTag, _channel, &arrived, MPI_STATUS_IGNORE) == MPI_SUCCESS && arrived != 0) {
      inject::kill_self(_original[static_cast<std::size_t>(_rank)]);
    }
    serve_kill_requests();
    if (!declared && Clock::now() - last_heard > timeout) {
      declared = true;
      declare_hung(watched, beat);
    }
    std::this_thread::sleep_for(std::min(std::chrono::duration<double>(0.005), period / 4));
  }
}

// A process is killed by someone on its node: pids mean something only
// there. Here if it is this node; else the first other member on its node,
// asked by message; else (alone on its node) itself, asked by message, which
// only works if its own heartbeat thread still runs.
void Heartbeat::declare_hung(int watched, int beat) {
  {
    const std::lock_guard lock(_mutex);
    _declared.push_back(_original[static_cast<std::size_t>(watched)]);
  }
  const auto host = _host[static_cast<std::size_t>(watched)];
  if (host == _host[static_cast<std::size_t>(_rank)]) {
    ::kill(static_cast<pid_t>(_pid[static_cast<std::size_t>(watched)]), SIGKILL);
    return;
  }
  for (int mate = 0; mate < static_cast<int>(_host.size()); ++mate) {
    if (mate != watched && _host[static_cast<std::size_t>(mate)] == host) {
      _kill_request = _pid[static_cast<std::size_t>(watched)];
      post(_kill_request, mate, kKillTag, _channel);
      return;
    }
  }
  post(beat, watched, kDieTag, _channel);
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
    if (pid == _pid[static_cast<std::size_t>(member)]) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

}  // namespace reprise
