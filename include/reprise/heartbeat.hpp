#pragma once
/// \file
/// `Heartbeat`: hang detection among buddies. A process that stops
/// responding (a frozen node, a process stopped by a signal) never makes MPI
/// report a failure, so the job would wait forever. With a heartbeat each
/// process is watched by its buddy; one silent for longer than the timeout
/// is declared failed and killed, and ULFM then reports it like a crash.

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <mpi.h>

#include "reprise/comm.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// How often processes beat and how long a silence is tolerated.
struct HeartbeatConfig {
  double period_seconds = 0.05;  ///< between two beats
  double timeout_seconds = 1.0;  ///< silence after which a process is declared hung, > period
};

/// A background thread per process (needs `MPI_THREAD_MULTIPLE`) that sends
/// a beat to its watcher (the previous rank) every period and watches the
/// next rank. A watched process silent for `timeout_seconds` is declared hung
/// and checked on its own node (pids and process states mean something only
/// there): by its watcher when they share a node, else by a process of that
/// node that the watcher asks. It is killed with SIGKILL if its kernel says it
/// is stopped (a frozen process); one that is running is late, starved of CPU
/// on a busy node, and is left alone with one line on stderr, and its
/// declaration is withdrawn when its beats come again. A process alone on its
/// node cannot be checked or stopped (one line says so). After a recovery call
/// `restart()` (the `Driver` does it for you when you pass the heartbeat).
class Heartbeat {
 public:
  /// Collective: starts watching on `comm`. `UsageError` if MPI lacks
  /// `MPI_THREAD_MULTIPLE` or the period and timeout make no sense.
  Heartbeat(Comm& comm, HeartbeatConfig config = {});
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Collective, on the recovered communicator: watches its members anew.
  void restart();

  /// Original ranks this process declared hung so far and has not heard
  /// from since (those killed, and those it waits for).
  [[nodiscard]] std::vector<OriginalRank> declared_hung() const;

 private:
  void start();
  void stop();
  void watch();
  void declare_hung(int watched);
  void clear_declaration(int watched);
  void serve_kill_requests();

  Comm& _comm;
  HeartbeatConfig _config;
  MPI_Comm _channel = MPI_COMM_NULL;  // the thread's own communicator
  std::vector<int> _pid;              // by rank in `_channel`
  std::vector<int> _host;             // a key per host, by rank
  std::vector<OriginalRank> _original;
  int _rank = 0;
  int _kill_request = 0;  // the pid asked to be killed (outlives its send)
  std::atomic<bool> _running{false};
  std::thread _thread;
  mutable std::mutex _mutex;
  std::vector<OriginalRank> _declared;
};

}  // namespace reprise
