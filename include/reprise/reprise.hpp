#pragma once
/// \file
/// Everything reprise offers, in one include.
///
/// \mainpage The reprise API reference
/// Every public header, class and function, from the headers' comments.
/// The [user guide](guide/docs/guide/index.html) (`docs/guide/` in the source tree) says when to use each part, with a
/// minimal program, beside the [README](guide/index.html); `reprise.hpp` includes every header but the
/// message log's (`msglog.h`, `msglog.hpp`) and the preloaded heap's (`heap.h`).
/// The Python package `reprise` has a reference of its own, from its type
/// stubs: [reprise for Python](python/index.html).

#include "reprise/block.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/data_loss.hpp"
#include "reprise/disk_level.hpp"
#include "reprise/driver.hpp"
#include "reprise/element_type.hpp"
#include "reprise/environment.hpp"
#include "reprise/error.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/image.hpp"
#include "reprise/incremental.hpp"
#include "reprise/incremental_sink.hpp"
#include "reprise/inject.hpp"
#include "reprise/memory_sink.hpp"
#include "reprise/migration.hpp"
#include "reprise/ownership.hpp"
#include "reprise/placement.hpp"
#include "reprise/protected_memory.hpp"
#include "reprise/rank.hpp"
#include "reprise/slot_layout.hpp"
#include "reprise/store.hpp"
#include "reprise/variable_store.hpp"
#include "reprise/version.hpp"
