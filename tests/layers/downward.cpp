// A store source may use the public headers of comm, the layer below.
#include "reprise/comm.hpp"

int layer_probe_downward() { return reprise::Comm::process_failed_error_class(); }
