// A checkpoint source must not reach into comm's internals (the ULFM
// wrapper), only its public headers: this must not compile.
#include "ulfm.hpp"

int layer_probe_internal_below() { return 0; }
