# Wraps CMake. `make demo` and `make test` install what is missing, configure and build.
export PATH := $(PATH):/usr/local/cuda/bin
JOBS ?= $(shell nproc)
BUILD ?= build

.PHONY: all deps configure build demo test test-asan fuzz gpu-build clean

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(CMAKE_ARGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/stof run examples/demo.lua

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu

# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: deps
	$(MAKE) test BUILD=build-asan CMAKE_ARGS="-DSTOF_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"

# libFuzzer targets (tests/fuzz/), built with clang, ASan and UBSan in build-fuzz, each run
# for FUZZ_SECONDS on its seed corpus; fails on any crash (logs in build-fuzz/logs/).
FUZZ_SECONDS ?= 30
fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DSTOF_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-fuzz -j $(JOBS) --target fuzz_targets
	bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# For the GPU machine: third-party libraries linked statically, cmocka copied beside.
gpu-build: deps
	cmake -S . -B build-gpu -DSTOF_STATIC=ON -DCMAKE_BUILD_TYPE=Release
	cmake --build build-gpu -j $(JOBS)

clean:
	rm -rf build build-asan build-gpu build-fuzz
