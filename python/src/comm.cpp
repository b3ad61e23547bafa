// reprise.Comm: the job's communicator with failure semantics. Its MPI side
// is an mpi4py communicator (Comm.mpi), remade from the current handle after
// every shrink or respawn; mpi4py never frees a communicator it made from a
// handle, so reprise keeps owning it.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.hpp"

namespace reprise::python {

nb::list as_list(const std::vector<OriginalRank>& ranks) {
  nb::list list;
  for (const auto rank : ranks) list.append(rank.value());
  return list;
}

namespace {

nb::object mpi_of(const Comm& comm) {
  const auto handle = reinterpret_cast<std::intptr_t>(comm.raw());
  return nb::module_::import_("mpi4py.MPI").attr("Comm").attr("fromhandle")(handle);
}

void bind_comm_queries(nb::class_<Comm>& cls) {
  cls.def_prop_ro(
         "rank", [](const Comm& comm) { return comm.rank().value(); },
         "This process's position in the communicator now.")
      .def_prop_ro("size", &Comm::size, "Number of processes now.")
      .def_prop_ro("original_size", &Comm::original_size, "Number of processes the job started with.")
      .def_prop_ro(
          "original_rank", [](const Comm& comm) { return comm.original_rank().value(); },
          "This process's rank at the start of the job (a replacement takes its predecessor's).")
      .def_prop_ro(
          "members", [](const Comm& comm) { return as_list(comm.members()); },
          "The original rank of every member, by current rank.")
      .def(
          "missing", [](const Comm& comm) { return as_list(comm.missing()); },
          "Original ranks that are no longer members (lost and not replaced).")
      .def_prop_ro(
          "failed", [](const Comm& comm) { return as_list(comm.failed()); },
          "Every original rank whose process has failed so far, sorted.")
      .def_prop_ro("epoch", &Comm::epoch, "How many recoveries led to this communicator.")
      .def_prop_ro("is_replacement", &Comm::is_replacement,
                   "True in a process spawned (or taken from the spares) to replace a failed one.")
      .def_prop_ro("migrated_in", &Comm::migrated_in,
                   "True in a process started by a live migration (Migration.arrive() comes next); such a "
                   "process is a replacement too.")
      .def(
          "rank_of",
          [](const Comm& comm, int original) -> std::optional<int> {
            const auto rank = comm.rank_of(OriginalRank{original});
            if (!rank) return std::nullopt;
            return rank->value();
          },
          nb::arg("original_rank"), "Current rank of an original rank, or None if that process is gone.")
      .def_prop_ro("mpi", &mpi_of,
                   "The communicator now, as an mpi4py MPI.Intracomm (a new one after each shrink or respawn: "
                   "take it again after a recovery). Its errors are returned, so mpi4py raises MPI.Exception; "
                   "inside a Driver's step that exception recovers like ProcessFailed.")
      .def_prop_ro(
          "handle", [](const Comm& comm) { return reinterpret_cast<std::intptr_t>(comm.raw()); },
          "The MPI_Comm handle now, as an integer (MPI.Comm.fromhandle takes it).");
}

}  // namespace

void bind_comm(nb::module_& module) {
  nb::class_<Comm> cls(module, "Comm",
                       "A communicator that knows who its members were at the start of the job, raises "
                       "ProcessFailed or Revoked when members die, and heals by shrink() or respawn().");
  cls.def_static("world", &Comm::world,
                 "The job's communicator. In a process spawned to replace a failed one, this joins the "
                 "survivors and returns the healed communicator, in which the process holds its predecessor's "
                 "original rank.")
      .def_static("fault_tolerant", &Comm::fault_tolerant,
                  "True if MPI has ULFM and the job was started with it (reprise-run does).");
  bind_comm_queries(cls);
  cls.def(
         "check", [](Comm& comm, int code, const std::string& what) { comm.check(code, what); }, nb::arg("code"),
         nb::arg("what"), "Raises the reprise error for an MPI return code of a call on mpi (what names the call).")
      .def("barrier", &Comm::barrier, "Barrier; raises ProcessFailed or Revoked if a member failed.")
      .def("revoke", &Comm::revoke, "Revokes the communicator: every member's pending and next calls raise.")
      .def(
          "shrink", [](Comm& comm) { comm = comm.shrink(); },
          "Collective over the survivors: replaces this communicator, in place, by one without the failed "
          "processes.")
      .def(
          "respawn", [](Comm& comm) { comm = comm.respawn(); },
          "Collective over the survivors: replaces this communicator, in place, by one in which new processes "
          "(this program started again with the same arguments, or spares) hold the failed original ranks.");
}

}  // namespace reprise::python
