// reprise.inject: real failures on demand (SIGKILL), for tests and demos.

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <cstdint>
#include <string>

#include <reprise/inject.hpp>

#include "bindings.hpp"

namespace reprise::python {

namespace {

const char* name_of(inject::Action action) {
  switch (action) {
    case inject::Action::kKill:
      return "kill";
    case inject::Action::kHang:
      return "hang";
    case inject::Action::kCrash:
      return "crash";
  }
  return "kill";
}

nb::list faults_of(const inject::Schedule& schedule) {
  nb::list faults;
  for (const auto& fault : schedule.faults()) {
    faults.append(nb::make_tuple(fault.rank.value(), fault.step, name_of(fault.action)));
  }
  return faults;
}

}  // namespace

void bind_inject(nb::module_& module) {
  auto inject = module.def_submodule("inject", "Real failures on demand: SIGKILL at planned steps.");
  nb::class_<inject::Schedule>(inject, "Schedule",
                               "A plan of faults, the same on every process: \"RANK@STEP[:hang|:crash],...\". "
                               "Faults apply to the processes the job started with, never to replacements.")
      .def(nb::init<>(), "A plan of no faults.")
      .def_static("parse", nb::overload_cast<std::string_view>(&inject::Schedule::parse), nb::arg("text"),
                  "Parses \"3@10,5@20:hang\"; UsageError on anything malformed.")
      .def_static("from_env", &inject::Schedule::from_env, nb::arg("variable") = "REPRISE_FAULTS",
                  "The plan in an environment variable (no faults when unset).")
      .def_static("random_exact", &inject::Schedule::random_exact, nb::arg("seed"), nb::arg("ranks"), nb::arg("steps"),
                  nb::arg("count"), nb::arg("first_rank") = 0,
                  "Exactly count distinct ranks from [first_rank, ranks) fail at distinct steps in [1, steps).")
      .def("validate", &inject::Schedule::validate, nb::arg("processes"),
           "UsageError if a fault names a rank a job of that many processes lacks.")
      .def(
          "apply",
          [](const inject::Schedule& schedule, int original_rank, std::uint64_t step, bool is_replacement) {
            schedule.apply(OriginalRank{original_rank}, step, is_replacement);
          },
          nb::arg("original_rank"), nb::arg("step"), nb::arg("is_replacement"),
          "Carries out the fault planned for original_rank at step, if any (a kill: SIGKILL, the process dies "
          "here), unless this process is a replacement.")
      .def_prop_ro("faults", &faults_of, "The faults as (rank, step, action), sorted by step then rank.")
      .def("__str__", &inject::Schedule::to_string);
  inject.def(
      "kill_self", [](int original_rank) { inject::kill_self(OriginalRank{original_rank}); }, nb::arg("original_rank"),
      "Kills this process for real (SIGKILL), after recording it for the launcher.");
}

}  // namespace reprise::python
