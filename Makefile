# The two commands a new user needs: `make demo` and `make test`. Both run the idempotent set-up first.
BUILD ?= build
JOBS ?= $(shell nproc)
# ccache keys on paths relative to the checkout, so clones in other folders share cached objects.
export CCACHE_BASEDIR := $(CURDIR)

.PHONY: setup build test demo bench fuzz clean

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@bash scripts/run_tests.sh $(BUILD)

demo: build
	@bash scripts/demo.sh $(BUILD)

bench: build
	@$(BUILD)/dflash bench attention --json docs/bench_attention.json

# The parsers' fuzz targets for longer than `make test` does: FUZZ_SECONDS per target, or FUZZ_RUNS executions
# each (docs/BENCHMARKS.md: FUZZ_RUNS=1000000). FUZZ_TARGETS picks some (default: all).
FUZZ_SECONDS ?= 300
fuzz: build
	@bash scripts/fuzz.sh --build $(BUILD) $(if $(FUZZ_RUNS),--runs $(FUZZ_RUNS),--seconds $(FUZZ_SECONDS)) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD) $(BUILD)-pypkg
