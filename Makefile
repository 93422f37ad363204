# resccl: `make run` runs the default job, `make test` runs every test but the slow ones
# (exhaustive sweeps, every dtype through nvcc and NVRTC, long fuzzing), `make test-slow` those.
# Both install missing Debian packages first and build with CMake.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RUN ?= algorithms/allreduce_ring.lua

.PHONY: all deps build run test test-slow clean install bench

all: build

deps:
	@tools/dev/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/resccl run $(RUN)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE slow

test-slow: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L slow

bench: build
	tools/dev/compile-bench $(BUILD)/resccl

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
