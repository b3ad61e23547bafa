// A store source must not see the detail headers of a layer above it: this
// must not compile.
#include "reprise/detail/checkpoint_internals.hpp"

int layer_probe_detail_upward() { return 0; }
