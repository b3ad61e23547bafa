# reprise: the two commands of the README, and a few more.
#   make demo   set up, build, run the demo (8 processes, 2 killed for real)
#   make test   set up, build, run every test (unit, MPI with real kills, sanitizers)
PRESET ?= release
BUILD  := build/$(PRESET)
# Extra arguments for the demo, e.g. make demo DEMO_ARGS="--seed 7 --kills 3"
DEMO_ARGS ?=

.PHONY: setup build demo test test-release test-asan clean

setup:
	@bash scripts/bootstrap.sh

build: setup
	@cmake --preset $(PRESET) > /dev/null
	@cmake --build --preset $(PRESET)

demo: build
	@scripts/mpirun-checked -n 8 --timeout 120 -- $(BUILD)/examples/heal_demo $(DEMO_ARGS)

test: test-release test-asan

test-release: build
	@ctest --preset $(PRESET)

# Unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: setup
	@cmake --preset asan > /dev/null
	@cmake --build --preset asan --target reprise_unit_tests
	@ctest --preset asan

clean:
	rm -rf build
