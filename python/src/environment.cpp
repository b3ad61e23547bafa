// MPI started and ended through reprise::Environment, as a C++ program's
// main does: the package calls start() on import (before mpi4py would
// initialise MPI) and finish() at exit, so that the finalize watchdog, the
// outcome records for the launcher and the one-line end of an uncaught error
// work for Python programs too.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <reprise/environment.hpp>
#include <reprise/inject.hpp>

#include "bindings.hpp"

namespace reprise::python {

namespace {

std::unique_ptr<Environment> environment;
std::vector<std::string> arguments;  // what MPI_Init_thread was given, kept while MPI runs
std::vector<char*> argument_pointers;
/// How the launcher's records name this process: its rank in the job's
/// first communicator, -1 in a spawned replacement (or before MPI started).
/// Taken at the start: a replacement that joined has no parent any more.
int launcher_rank = -1;

int rank_in_first_communicator() {
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void start(std::vector<std::string> given) {
  if (environment) return;
  arguments = std::move(given);
  argument_pointers.clear();
  for (auto& argument : arguments) argument_pointers.push_back(argument.data());
  argument_pointers.push_back(nullptr);
  int count = static_cast<int>(arguments.size());
  char** pointers = argument_pointers.data();
  environment = std::make_unique<Environment>(count, pointers);
  launcher_rank = rank_in_first_communicator();
}

/// Ends MPI as Environment's destructor does (MPI_Finalize under the
/// watchdog, also when mpi4py had started MPI before), then the process,
/// without the interpreter's teardown, which would free communicators after
/// MPI_Finalize.
[[noreturn]] void finish(int status) {
  if (environment) {
    environment->set_exit_status(status);
    environment->finalize_at_end();
    environment.reset();
  }
  std::fflush(nullptr);
  std::_Exit(status);
}

/// One line on stderr naming the process and `description` (what was
/// raised), in the shape of the library's error lines ("reprise[RANK]
/// error: ..."), the outcome for the launcher, and kUncaughtExceptionStatus.
[[noreturn]] void end_uncaught(const std::string& description) {
  const int rank = launcher_rank;
  std::string line =
      rank < 0 ? "a replacement process (pid " + std::to_string(::getpid()) + ")" : "process #" + std::to_string(rank);
  line += " ended with " + description;
  std::fflush(stdout);
  const std::string prefix = rank < 0 ? "reprise error: " : "reprise[" + std::to_string(rank) + "] error: ";
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), line.c_str());
  std::fflush(stderr);
  inject::wait_until_output_read();
  inject::record_outcome(inject::Outcome::kFailed, OriginalRank{rank}, line);
  std::_Exit(kUncaughtExceptionStatus);
}

}  // namespace

void bind_environment(nb::module_& module) {
  module.def("_start", &start, nb::arg("argv"),
             "Starts MPI through reprise::Environment (MPI_THREAD_MULTIPLE) unless it runs already.");
  module.def("_finish", &finish, nb::arg("status"),
             "Finalizes MPI under the watchdog and ends the process with status.");
  module.def("_end_uncaught", &end_uncaught, nb::arg("description"),
             "Ends the process for an uncaught error: one line, the outcome recorded, exit status 70.");
  module.attr("UNCAUGHT_EXCEPTION_STATUS") = kUncaughtExceptionStatus;
}

}  // namespace reprise::python
