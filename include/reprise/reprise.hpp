#pragma once
/// \file
/// Everything reprise offers, in one include.

#include "reprise/block.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/data_loss.hpp"
#include "reprise/driver.hpp"
#include "reprise/environment.hpp"
#include "reprise/error.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/incremental.hpp"
#include "reprise/incremental_sink.hpp"
#include "reprise/inject.hpp"
#include "reprise/memory_sink.hpp"
#include "reprise/ownership.hpp"
#include "reprise/placement.hpp"
#include "reprise/protected_memory.hpp"
#include "reprise/rank.hpp"
#include "reprise/slot_layout.hpp"
#include "reprise/store.hpp"
#include "reprise/variable_store.hpp"
#include "reprise/version.hpp"
