// The C interface's one-call program (reprise_run): the environment, a
// checkpoint of one region and the driver over its steps; MPI is finalised
// when the process exits.
#include <string>

#include "handles.hpp"

namespace {

// What reprise_run's step and finish functions are called with.
struct Running {
  const reprise_run_config& config;
  reprise_comm* comm;
};

int call(reprise_run_function function, const Running& running, uint64_t step) {
  const reprise_run_step now{running.comm, reprise_comm_mpi(running.comm), step, running.config.user};
  return function(&now);
}

int run_step(uint64_t number, void* user) {
  const auto& running = *static_cast<const Running*>(user);
  return call(running.config.step, running, number);
}

reprise_status check_config(const reprise_run_config* config) {
  return reprise::capi::guarded("reprise_run", [&] {
    if (config == nullptr) reprise::capi::refuse("config is NULL: pass the state, the steps and the step function");
    if (config->step == nullptr) reprise::capi::refuse("config->step is NULL: pass the function to call for each step");
  });
}

reprise_status finish(const Running& running, const reprise_driver* driver) {
  return reprise::capi::guarded("reprise_run", [&] {
    if (running.config.finish == nullptr) return;
    reprise::capi::last_error().exception = nullptr;
    const int result = call(running.config.finish, running, reprise_driver_step(driver));
    if (result != 0) reprise::capi::raise_returned(result, "the finish function", "this process fails");
  });
}

}  // namespace

extern "C" {

int reprise_run(int* argc, char*** argv, const reprise_run_config* config) {
  reprise_comm* comm = nullptr;
  reprise_checkpoint* checkpoint = nullptr;
  reprise_driver* driver = nullptr;
  int failed = reprise_init(argc, argv) || check_config(config) || reprise_comm_world(&comm) ||
               reprise_checkpoint_create(comm, nullptr, &checkpoint) ||
               reprise_checkpoint_protect(checkpoint, "state", config->state, config->bytes) ||
               reprise_driver_create(comm, checkpoint, &config->driver, &driver);
  if (failed == 0) {
    Running running{*config, comm};
    failed = reprise_driver_run(driver, config->steps, run_step, &running) || finish(running, driver);
  }
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
  reprise_comm_free(comm);
  return reprise::capi::end_at_exit(failed);
}

}  // extern "C"
