// A reprise program whose processes end with an uncaught reprise::DataLost:
// every process (argument "all"), one ("2"), or none ("none"). Run by
// scripts/check-uncaught-error with a plain mpirun, as users run programs.

#include <string>

#include "reprise/reprise.hpp"

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  const std::string who = argc > 1 ? argv[1] : "all";
  if (who == "all" || who == std::to_string(comm.rank().value())) {
    throw reprise::DataLost("blocks [0, 10) have no copy left (thrown on purpose)", {});
  }
  return 0;
}
