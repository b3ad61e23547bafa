#include "runtime.hpp"

#include <memory>

namespace reprise::detail {

namespace {
std::unique_ptr<Runtime>& instance() {
  static std::unique_ptr<Runtime> runtime;
  return runtime;
}
}  // namespace

Runtime* Runtime::current() noexcept { return instance().get(); }

Runtime& Runtime::start() {
  instance() = std::make_unique<Runtime>();
  return *instance();
}

void Runtime::stop() noexcept { instance().reset(); }

}  // namespace reprise::detail

extern "C" __attribute__((visibility("default"))) int reprise_msglog_get_counters(reprise_msglog_counters* counters) {
  const reprise::detail::Runtime* runtime = reprise::detail::Runtime::current();
  if (runtime == nullptr || counters == nullptr) return 1;
  *counters = runtime->counters();
  return 0;
}
