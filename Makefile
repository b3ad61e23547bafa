# reprise: the two commands of the README, and a few more.
#   make demo   set up, build, run the k-means demo (DEMO_RANKS=8 processes, 2 killed for real)
#   make demo-heat  the 3D heat-equation demo (checkpoints, respawn from spares; HEAT_MODE=shrink)
#   make test   set up, build, run every test (unit, MPI with real kills, sanitizers)
#   make bench  set up, build, run every benchmark at its default size (JSON lines)
#   make chaos  set up, build, run the chaos campaign (CHAOS_SEEDS scenarios from CHAOS_FIRST_SEED)
#   make cluster-up NODES=4 / make cluster-down  a cluster of network-namespace nodes (scripts/cluster)
PRESET ?= release
BUILD  := build/$(PRESET)
# Extra arguments for the demo, e.g. make demo DEMO_ARGS="--seed 7 --kills 3",
# and its number of processes, e.g. make demo DEMO_RANKS=16 DEMO_ARGS="--kills 4"
DEMO_ARGS ?=
DEMO_RANKS ?= 8

.PHONY: setup build demo demo-heat demo-heal test test-release test-asan test-asan-all bench chaos clean \
        cluster-up cluster-down

setup:
	@bash scripts/bootstrap.sh

build: setup
	@cmake --preset $(PRESET) > /dev/null
	@cmake --build --preset $(PRESET)

demo: build
	@scripts/reprise-run -n $(DEMO_RANKS) --timeout 120 -- $(BUILD)/examples/kmeans_demo $(DEMO_ARGS)

# The 3D heat equation under the checkpoint/recovery driver; bitwise check.
# 8 workers plus HEAT_SPARES spare processes that respawn() takes instead of
# spawning new ones (HEAT_SPARES=0 spawns).
HEAT_MODE ?= respawn
HEAT_SPARES ?= 2
demo-heat: build
	@REPRISE_SPARES=$(HEAT_SPARES) scripts/reprise-run -n $$((8 + $(HEAT_SPARES))) --timeout 120 -- \
	  $(BUILD)/examples/heat3d_demo --mode $(HEAT_MODE) $(DEMO_ARGS)

# The foundation demo: a long sum that heals its communicator.
demo-heal: build
	@scripts/reprise-run -n 8 --timeout 120 -- $(BUILD)/examples/heal_demo $(DEMO_ARGS)

test: test-release test-asan

test-release: build
	@ctest --preset $(PRESET)

# Unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: setup
	@cmake --preset asan > /dev/null
	@cmake --build --preset asan --target reprise_unit_tests
	@ctest --preset asan

# Every test, MPI ones with real kills included, under AddressSanitizer and
# UBSan (slower, so not part of make test). Leak checks are off because Open
# MPI itself leaks at exit; PMIX_MCA_gds=hash because ASan's shadow memory
# takes the address where PMIx maps its shared memory in spawned processes.
# The 2 GiB-message test is left out: under ASan it needs far more memory.
test-asan-all: setup
	@cmake --preset asan > /dev/null
	@cmake --build --preset asan
	@ASAN_OPTIONS=detect_leaks=0 PMIX_MCA_gds=hash ctest --test-dir build/asan --output-on-failure -E AboveIntMaxBytes

# Each benchmark prints one JSON object per measurement. store_bench runs on
# BENCH_RANKS processes with BENCH_ARGS (--copies --block-bytes --perm-bytes
# --mib-per-rank --repeats --disk-dir); checkpoint_bench runs on each of
# CHECKPOINT_RANKS (weak scaling) with CHECKPOINT_ARGS (--mib-per-rank
# --copies --repeats --no-kill) and kills one process for real per run.
# incremental_bench (one process, no MPI) runs AI-Ckpt's synthetic test with
# INCREMENTAL_ARGS (--mib --cow-mib --iterations --every --orders --modes
# --repeats --seed --dir --sink-mib-per-s --sink --work); trap_bench (one
# process) what a first write to a protected page costs, with TRAP_ARGS
# (--mib --repeats --seed).
BENCH_ARGS ?=
BENCH_RANKS ?= 4
CHECKPOINT_ARGS ?=
CHECKPOINT_RANKS ?= 2 4 8
INCREMENTAL_ARGS ?=
TRAP_ARGS ?=
bench: build
	@scripts/reprise-run -n $(BENCH_RANKS) --quiet --timeout 600 -- $(BUILD)/bench/store_bench $(BENCH_ARGS)
	@for n in $(CHECKPOINT_RANKS); do \
	  scripts/reprise-run -n $$n --quiet --timeout 600 -- $(BUILD)/bench/checkpoint_bench $(CHECKPOINT_ARGS) || exit 1; \
	done
	@$(BUILD)/bench/incremental_bench $(INCREMENTAL_ARGS)
	@$(BUILD)/bench/trap_bench $(TRAP_ARGS)

# The chaos campaign (docs/RELIABILITY.md): CHAOS_SEEDS seeded scenarios of
# store, variable store, checkpoint/driver and incremental checkpoints with
# real kills at random moments, each put in one category; the last line is
# a JSON summary.
# make chaos CHAOS_SEEDS=1000 is the long campaign.
CHAOS_SEEDS ?= 60
CHAOS_FIRST_SEED ?= 1
chaos: build
	@scripts/chaos --seeds $(CHAOS_SEEDS) --first-seed $(CHAOS_FIRST_SEED) --build $(BUILD)

clean:
	rm -rf build

# A cluster of NODES "nodes" on this machine (network namespaces on a
# private bridge; needs root): reprise-run --nodes N --ppn P runs on it.
NODES ?= 4
cluster-up: setup
	@scripts/cluster up $(NODES)

cluster-down:
	@scripts/cluster down
