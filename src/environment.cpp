#include "reprise/environment.hpp"

#include <mpi.h>

namespace reprise {

Environment::Environment(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) {
    MPI_Query_thread(&_thread_level);
    return;
  }
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &_thread_level);
  _owns = true;
}

Environment::~Environment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (_owns && finalized == 0) MPI_Finalize();
}

}  // namespace reprise
