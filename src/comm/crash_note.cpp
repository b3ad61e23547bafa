#include "crash_note.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <string>

#include "log.hpp"

namespace reprise::detail {

namespace {

constexpr std::array kSignals{SIGSEGV, SIGBUS};

/// The handlers found at install (Open MPI's, or the default), by signal.
std::array<struct sigaction, kSignals.size()> previous{};
std::atomic<bool> installed{false};

/// Recovery scopes alive in this process.
std::atomic<int> recovering{0};

/// The line, written when a scope opens (a handler may not format).
std::array<char, 512> line{};
std::atomic<int> line_length{0};

/// The default action: a fault's instruction runs again and ends the
/// process; a signal sent (kill, raise) is raised again.
void die_of(int signal, const siginfo_t* info) {
  ::signal(signal, SIG_DFL);
  if (info == nullptr || info->si_code <= 0) ::raise(signal);
}

void forward(int signal, siginfo_t* info, void* context) {
  for (std::size_t k = 0; k < kSignals.size(); ++k) {
    if (kSignals[k] != signal) continue;
    const auto& before = previous[k];
    if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
      before.sa_sigaction(signal, info, context);
      return;
    }
    if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN && before.sa_handler != nullptr) {
      before.sa_handler(signal);
      return;
    }
  }
  die_of(signal, info);
}

void on_crash(int signal, siginfo_t* info, void* context) {
  if (recovering.load() == 0) {
    forward(signal, info, context);
    return;
  }
  (void)!::write(STDERR_FILENO, line.data(), static_cast<std::size_t>(line_length.load()));
  die_of(signal, info);
}

}  // namespace

void install_crash_note() {
  if (installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_sigaction = on_crash;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  for (std::size_t k = 0; k < kSignals.size(); ++k) ::sigaction(kSignals[k], &action, &previous[k]);
}

RecoveryScope::RecoveryScope(OriginalRank me) noexcept {
  if (recovering.fetch_add(1) == 0) {
    char who[48];
    if (me.value() >= 0) {
      std::snprintf(who, sizeof who, "process #%d (pid %d)", me.value(), static_cast<int>(::getpid()));
    } else {
      std::snprintf(who, sizeof who, "new process (pid %d)", static_cast<int>(::getpid()));
    }
    const std::string prefix = logging::prefix(logging::Level::kError);  // the logger's, for the handler's write
    const int length = std::snprintf(
        line.data(), line.size(),
        "%s%s crashed inside MPI during a recovery (Open MPI 5.0 can when it learns of a failure while it revokes "
        "or builds a communicator, docs/RELIABILITY.md); the others recover from its loss as from any failure\n",
        prefix.c_str(), who);
    line_length = length < 0 ? 0 : std::min(length, static_cast<int>(line.size()) - 1);
  }
}

RecoveryScope::~RecoveryScope() { recovering.fetch_sub(1); }

}  // namespace reprise::detail
