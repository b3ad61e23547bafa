// A store source may use the detail headers of comm, the layer below.
#include "reprise/detail/comm_internals.hpp"

int layer_probe_detail_downward() { return static_cast<int>(reprise::detail::FirstAgreement::kAgree); }
