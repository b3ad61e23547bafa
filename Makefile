# reprise: the two commands of the README, and a few more.
#   make demo   set up, build, run the k-means demo (DEMO_RANKS=8 processes, 2 killed for real)
#   make demo-heat  the 3D heat-equation demo (checkpoints, respawn from spares; HEAT_MODE=shrink)
#   make demo-replay  the same, each lost process replaying alone from the message log
#   make test   set up, build, run every test (unit, MPI with real kills, cluster, sanitizers)
#   make bench  set up, build, run every benchmark at its default size (JSON lines)
#   make chaos  set up, build, run the chaos campaign (CHAOS_SEEDS scenarios from CHAOS_FIRST_SEED)
#   make cluster-up NODES=4 / make cluster-down  a cluster of network-namespace nodes (scripts/cluster)
#   make test-cluster  the tests of whole-node losses, on the cluster made by make cluster-up NODES=4
#   make demo-cluster  k-means and heat3d across nodes, each losing a whole node (root)
#   make slurm-up NODES=4 / make slurm-down  a Slurm cluster on those nodes (scripts/slurm; root)
#   make test-slurm  the tests of jobs submitted to Slurm, on a Slurm cluster it makes and removes (root)
#   make docs   the API reference from the public headers: build/docs/html/index.html,
#               and from the Python stubs: build/docs/html/python/index.html; the guide
#               and the reference pages (docs/, README.md): build/docs/html/guide/index.html
PRESET ?= release
BUILD  := build/$(PRESET)
# Extra arguments for the demo, e.g. make demo DEMO_ARGS="--seed 7 --kills 3",
# and its number of processes, e.g. make demo DEMO_RANKS=16 DEMO_ARGS="--kills 4"
DEMO_ARGS ?=
DEMO_RANKS ?= 8

.PHONY: setup build demo demo-heat demo-replay demo-heal test test-release test-asan test-asan-all bench chaos clean docs \
        cluster-up cluster-down test-cluster test-cluster-here demo-cluster slurm-up slurm-down test-slurm

setup:
	@bash scripts/bootstrap.sh

build: setup
	@cmake --preset $(PRESET) > /dev/null
	@cmake --build --preset $(PRESET)

docs: setup
	@scripts/build-api-reference build/docs
	@scripts/build-guide build/docs

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

# The replay: heat3d with the message log preloaded; each process killed
# for real restarts from its checkpoint (on a spare) and replays alone from
# the others' logs while they keep their state (docs/ARCHITECTURE.md §16).
# The grid must equal the serial run bit for bit.
demo-replay: build
	@REPRISE_SPARES=$(HEAT_SPARES) scripts/reprise-run -n $$((8 + $(HEAT_SPARES))) --timeout 120 -- \
	  env $(MSGLOG_PRELOAD) $(BUILD)/examples/heat3d_demo --mode replay $(DEMO_ARGS)

# Live migration: heat3d on 4 processes plus 1 spare; at iteration 40
# process #1 moves to the spare (its state as an in-memory HDF5 image), and
# 2.5 s after the launch the launcher asks #2 to move too (SIGUSR1): no spare
# is left, so a new process is spawned. Nobody rolls back; the grid must
# equal the serial run bit for bit.
demo-migrate: build
	@REPRISE_SPARES=1 scripts/reprise-run -n 5 --timeout 120 --migrate 2@2.5 -- \
	  $(BUILD)/examples/heat3d_demo --kills 0 --n 32 --iterations 30000 --move 1@40 $(DEMO_ARGS)

# The foundation demo: a long sum that heals its communicator.
demo-heal: build
	@scripts/reprise-run -n 8 --timeout 120 -- $(BUILD)/examples/heal_demo $(DEMO_ARGS)

test: test-release test-cluster-here test-slurm test-asan

# Every test but the cluster and Slurm ones (the test presets leave those labels out).
test-release: build
	@ctest --preset $(PRESET)

# The tests of whole-node losses (label cluster) on the 4 nodes of
# make cluster-up NODES=4 (reprise-run says so if they are not up).
test-cluster: build
	@ctest --test-dir $(BUILD) -L cluster --output-on-failure

# $(call tests_on_nodes,LABEL,SCRIPT,NEEDS): the tests labelled LABEL on 4
# nodes that SCRIPT (scripts/cluster, scripts/slurm) makes and removes. Not
# root, or nodes that cannot be made here (SCRIPT says why, with status 2):
# one line says so and skips them.
define tests_on_nodes
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "make test: the $(1) tests need root ($(3)): SKIPPED; run make test as root"; \
	else \
	  status=0; $(2) up 4 || status=$$?; \
	  if [ $$status = 2 ]; then echo "make test: no $(1) nodes can be made here (above): $(1) tests SKIPPED"; exit 0; fi; \
	  [ $$status = 0 ] || exit $$status; \
	  ctest --test-dir $(BUILD) -L $(1) --output-on-failure || status=$$?; \
	  $(2) down; exit $$status; \
	fi
endef

# What make test runs: the cluster tests on a cluster it makes and removes.
test-cluster-here: build
	$(call tests_on_nodes,cluster,scripts/cluster,network namespaces)

# The tests of jobs submitted to Slurm (label slurm), on a Slurm cluster of 4
# nodes it makes and removes (scripts/slurm).
test-slurm: build
	$(call tests_on_nodes,slurm,scripts/slurm,network namespaces and Slurm's daemons)

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
# --copies --repeats --no-kill) and kills one process for real per run; then
# (as root) on 4 nodes x 2 of scripts/cluster, over TCP ("nodes":4), next to
# the 8 processes on one host ("nodes":1) of the loop.
# incremental_bench (one process, no MPI) runs AI-Ckpt's synthetic test with
# INCREMENTAL_ARGS (--mib --cow-mib --iterations --every --orders --modes
# --repeats --seed --dir --sink-mib-per-s --sink --work); trap_bench (one
# process) what a first write to a protected page costs, with TRAP_ARGS
# (--mib --repeats --seed). migrate_bench moves processes live on
# MIGRATE_RANKS processes, the image in memory and through a file on disk,
# with a memcpy baseline (docs/PERFORMANCE.md, "Live migration"): per size in
# MiB of MIGRATE_SIZES, one job moves one process (3 repetitions), another
# all of them (1 repetition), with MIGRATE_ARGS (--repetitions --via --dir
# --copies).
# The message log's benchmarks (docs/PERFORMANCE.md, "Message logging") run
# with libreprise_msglog.so preloaded and measure each MPI call plain (PMPI)
# and logged (MPI, intercepted) in the same run, alternating repetitions:
# msglog_pingpong on 2 processes, 1 byte to 1 MiB by factors of 4, named
# and MPI_ANY_SOURCE receives, with a memcpy baseline, with
# MSGLOG_PINGPONG_ARGS (--max-bytes --factor --repetitions --tests);
# msglog_kernels (cg, master_worker, wavefront, testsome: the share of
# messages that make an event) on MSGLOG_RANKS processes with
# MSGLOG_KERNELS_ARGS (--kernels --repetitions --scale); msglog_wire, without
# the library, times the wire formats a log could use for large messages
# (header piggybacked or in a message of its own) with MSGLOG_WIRE_ARGS
# (--sizes --repetitions).
# replay_bench: one process killed for real, replayed alone from the log
# (RecoveryMode::kReplay, the library preloaded) against every process
# rolling back (kRespawn, no library), per application of REPLAY_APPS on
# REPLAY_RANKS processes, the replacement spawned then taken from a spare,
# with REPLAY_ARGS (--steps --every --kill-step --victim --edge --planes
# --task-work). The victim and its step come from a seed, REPLAY_SEED or one
# drawn from /dev/urandom per line, the same for its replay and rollback jobs.
# bindings_bench (C interface) and bench/bindings_bench.py (Python package):
# a checkpoint of the same bytes through the C++ API and through the binding,
# interleaved in one job, with a memcpy limit, on BINDINGS_RANKS processes with
# BINDINGS_ARGS (--mib --repeats).
BENCH_ARGS ?=
BENCH_RANKS ?= 4
CHECKPOINT_ARGS ?=
CHECKPOINT_RANKS ?= 2 4 8
INCREMENTAL_ARGS ?=
TRAP_ARGS ?=
MIGRATE_ARGS ?=
MIGRATE_RANKS ?= 3
MIGRATE_SIZES ?= 1 8
MSGLOG_PINGPONG_ARGS ?=
MSGLOG_KERNELS_ARGS ?=
MSGLOG_WIRE_ARGS ?=
MSGLOG_RANKS ?= 4
REPLAY_APPS ?= heat3d master_worker
REPLAY_RANKS ?= 8
REPLAY_ARGS ?=
REPLAY_SEED ?=
BINDINGS_ARGS ?=
BINDINGS_RANKS ?= 4
MSGLOG_PRELOAD = LD_PRELOAD=$(CURDIR)/$(BUILD)/src/libreprise_msglog.so
bench: build
	@scripts/reprise-run -n $(BENCH_RANKS) --quiet --timeout 600 -- $(BUILD)/bench/store_bench $(BENCH_ARGS)
	@for n in $(CHECKPOINT_RANKS); do \
	  scripts/reprise-run -n $$n --quiet --timeout 600 -- $(BUILD)/bench/checkpoint_bench $(CHECKPOINT_ARGS) || exit 1; \
	done
	@if [ "$$(id -u)" = 0 ]; then \
	  scripts/cluster up 4 > /dev/null || exit 1; status=0; \
	  scripts/reprise-run --nodes 4 --ppn 2 --quiet --timeout 600 -- $(BUILD)/bench/checkpoint_bench $(CHECKPOINT_ARGS) \
	    || status=$$?; scripts/cluster down > /dev/null; exit $$status; \
	else \
	  echo "make bench: the checkpoint across 4 nodes needs root (network namespaces): skipped" >&2; \
	fi
	@$(BUILD)/bench/incremental_bench $(INCREMENTAL_ARGS)
	@$(BUILD)/bench/trap_bench $(TRAP_ARGS)
	@for s in $(MIGRATE_SIZES); do \
	  scripts/reprise-run -n $(MIGRATE_RANKS) --quiet --timeout 600 -- $(BUILD)/bench/migrate_bench \
	    --sizes $$s --migrating 1 --repetitions 3 $(MIGRATE_ARGS) || exit 1; \
	  scripts/reprise-run -n $(MIGRATE_RANKS) --quiet --timeout 600 -- $(BUILD)/bench/migrate_bench \
	    --sizes $$s --migrating all --repetitions 1 $(MIGRATE_ARGS) || exit 1; \
	done
	@scripts/reprise-run -n 2 --quiet --timeout 600 -- env $(MSGLOG_PRELOAD) $(BUILD)/bench/msglog_pingpong \
	  $(MSGLOG_PINGPONG_ARGS)
	@scripts/reprise-run -n $(MSGLOG_RANKS) --quiet --timeout 600 -- env $(MSGLOG_PRELOAD) $(BUILD)/bench/msglog_kernels \
	  $(MSGLOG_KERNELS_ARGS)
	@scripts/reprise-run -n 2 --quiet --timeout 600 -- $(BUILD)/bench/msglog_wire $(MSGLOG_WIRE_ARGS)
	@for app in $(REPLAY_APPS); do for spares in 0 1; do \
	  seed=$(REPLAY_SEED); [ -n "$$seed" ] || seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
	  REPRISE_SPARES=$$spares scripts/reprise-run -n $$(($(REPLAY_RANKS) + spares)) --quiet --timeout 600 -- \
	    env $(MSGLOG_PRELOAD) $(BUILD)/bench/replay_bench --app $$app --mode replay --seed $$seed $(REPLAY_ARGS) \
	    || exit 1; \
	  REPRISE_SPARES=$$spares scripts/reprise-run -n $$(($(REPLAY_RANKS) + spares)) --quiet --timeout 600 -- \
	    $(BUILD)/bench/replay_bench --app $$app --mode rollback --seed $$seed $(REPLAY_ARGS) || exit 1; \
	done; done
	@scripts/reprise-run -n $(BINDINGS_RANKS) --quiet --timeout 600 -- $(BUILD)/bench/bindings_bench $(BINDINGS_ARGS)
	@PYTHONPATH=$(CURDIR)/$(BUILD)/python scripts/reprise-run -n $(BINDINGS_RANKS) --quiet --timeout 600 -- \
	  .venv/bin/python bench/bindings_bench.py $(BINDINGS_ARGS)

# The chaos campaign (docs/RELIABILITY.md): CHAOS_SEEDS seeded scenarios of
# store, variable store, checkpoint/driver and incremental checkpoints with
# real kills at random moments, each put in one category, then
# CHAOS_REPLAY_SEEDS of the replay family (the message log's replay) and as
# many of replay-steps (the same under Driver::run(steps, step), with
# snapshots); the last line of each is a JSON summary.
# make chaos CHAOS_SEEDS=1000 is the long campaign.
CHAOS_SEEDS ?= 60
CHAOS_FIRST_SEED ?= 1
CHAOS_REPLAY_SEEDS ?= 20
chaos: build
	@scripts/chaos --seeds $(CHAOS_SEEDS) --first-seed $(CHAOS_FIRST_SEED) --build $(BUILD)
	@scripts/chaos --seeds $(CHAOS_REPLAY_SEEDS) --first-seed $(CHAOS_FIRST_SEED) --family replay --build $(BUILD)
	@scripts/chaos --seeds $(CHAOS_REPLAY_SEEDS) --first-seed $(CHAOS_FIRST_SEED) --family replay-steps \
	  --build $(BUILD)

clean:
	rm -rf build

# A cluster of NODES "nodes" on this machine (network namespaces on a
# private bridge; needs root): reprise-run --nodes N --ppn P runs on it.
NODES ?= 4
cluster-up: setup
	@scripts/cluster up $(NODES)

cluster-down:
	@scripts/cluster down

# A Slurm cluster on NODES such nodes: slurmctld and munged here, a slurmd
# in each node (scripts/slurm; needs root). sbatch, srun and squeue find it
# through SLURM_CONF=/tmp/reprise-slurm/slurm.conf.
slurm-up: setup
	@scripts/slurm up $(NODES)

slurm-down:
	@scripts/slurm down

# The demos across nodes, on a cluster of 5 nodes it makes (root; it stays
# up: make cluster-down): k-means on 4 x 3 processes with 2 copies loses
# node 2 at CLUSTER_KILL_AT seconds (every process of it at once); heat3d on
# 4 x 2 workers plus a spare node of 2 spares loses node 3 the same way, and
# the spares take over.
CLUSTER_KILL_AT ?= 4
demo-cluster: build
	@scripts/cluster up 5
	@scripts/reprise-run --nodes 4 --ppn 3 --kill-node 2@$(CLUSTER_KILL_AT) --timeout 120 -- \
	  $(BUILD)/examples/kmeans_demo --copies 2 --kills 0 --iterations 120 $(DEMO_ARGS)
	@REPRISE_SPARES=2 scripts/reprise-run --nodes 5 --ppn 2 --kill-node 3@$(CLUSTER_KILL_AT) --timeout 120 -- \
	  $(BUILD)/examples/heat3d_demo --kills 0 --iterations 300 $(DEMO_ARGS)
