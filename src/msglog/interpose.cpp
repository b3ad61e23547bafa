// The PMPI entry points of libreprise_msglog.so: every MPI call the message
// log intercepts (docs/ARCHITECTURE.md §16).

#include <mpi.h>

#include "runtime.hpp"

#define REPRISE_MSGLOG_EXPORT extern "C" __attribute__((visibility("default")))

REPRISE_MSGLOG_EXPORT int MPI_Init(int* argc, char*** argv) {
  const int code = PMPI_Init(argc, argv);
  if (code == MPI_SUCCESS) reprise::detail::Runtime::start();
  return code;
}

REPRISE_MSGLOG_EXPORT int MPI_Finalize() {
  reprise::detail::Runtime::stop();
  return PMPI_Finalize();
}
