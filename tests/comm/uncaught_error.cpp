// A reprise program whose processes end with an uncaught reprise::DataLost:
// every process (argument "all"), one ("2"), none ("none"), or every process
// after its Environment has finalised MPI ("after"). Run by
// scripts/check-uncaught-error with a plain mpirun, as users run programs.

#include <string>

#include "reprise/reprise.hpp"

namespace {

[[noreturn]] void lose_data() { throw reprise::DataLost("blocks [0, 10) have no copy left (thrown on purpose)", {}); }

}  // namespace

int main(int argc, char** argv) {
  const std::string who = argc > 1 ? argv[1] : "all";
  {
    reprise::Environment environment(argc, argv);
    auto comm = reprise::Comm::world();
    if (who == "all" || who == std::to_string(comm.rank().value())) lose_data();
  }
  if (who == "after") lose_data();
  return 0;
}
