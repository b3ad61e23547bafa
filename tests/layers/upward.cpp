// A store source must not see a layer above it: this must not compile.
#include "reprise/checkpoint.hpp"

int layer_probe_upward() { return 0; }
