// reprise._reprise: the library's C++ classes for Python (nanobind). The
// package reprise (python/reprise/__init__.py) imports it after mpi4py and
// starts MPI through reprise::Environment before anything else.

#include <reprise/version.hpp>

#include "bindings.hpp"

NB_MODULE(_reprise, module) {
  module.doc() = "reprise's C++ library; use the package reprise, which starts MPI first.";
  module.attr("__version__") = reprise::kVersion;
  reprise::python::bind_errors(module);
  reprise::python::bind_environment(module);
  reprise::python::bind_comm(module);
  reprise::python::bind_checkpoint(module);
  reprise::python::bind_driver(module);
  reprise::python::bind_migration(module);
  reprise::python::bind_store(module);
  reprise::python::bind_disk(module);
  reprise::python::bind_incremental(module);
  reprise::python::bind_inject(module);
}
