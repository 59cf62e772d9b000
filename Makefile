# kerasc: the two commands every user needs are `make demo` and `make check`.
# Both install what is missing (scripts/deps.sh), build with CMake, and run.

BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 30
DEMO_MODEL ?= tools/node_modules/nsfwjs/dist/models/mobilenet_v2/model.min.js
DEMO_IMAGE ?= data/images/chelsea.jpg

.PHONY: all deps build demo check check-asan check-valgrind bench bench-quick bench-layers bench-cluster fuzz fuzz-long clean

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/build.ninja $(BUILD)/Makefile:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: deps $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/kerasc predict $(DEMO_MODEL) $(DEMO_IMAGE)

check: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

check-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DKC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS)

# The golden tests (every zoo, application and real model) under valgrind,
# on the plain kernel paths: oneDNN's JIT kernels read past the end of their
# own padded buffers by design, which memcheck reports; kerasc's oneDNN
# wrapper is covered by check-asan instead.
check-valgrind: build
	KC_DNNL=0 KC_SANDBOX_TIME_SCALE=100 valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
		--suppressions=tests/valgrind.supp ./$(BUILD)/tests/test_zoo

# Side-by-side CPU benchmark against ONNX Runtime, torch and tfjs-wasm
# (installs the peers; see bench/README.md). Not part of make check.
bench: build
	bash tools/bench/run_bench.sh

bench-quick: build
	bash tools/bench/run_bench.sh --quick

# Per-stage and per-kernel time against ONNX Runtime's profile
# (tools/bench/layer_compare.py, three rounds in turns; run make bench once
# first for the models and peers).
MODEL ?= resnet50
BATCH ?= 1
ROUNDS ?= 3
bench-layers: build
	/usr/bin/python3 tools/bench/layer_compare.py bench/models/$(MODEL).keras bench/models/$(MODEL).onnx \
		--batch $(BATCH) --iters $$(( $(BATCH) > 1 ? 12 : 40 )) --rounds $(ROUNDS) --by-kernel

# Split-run pipeline throughput in a namespace testbed with capped links
# (needs root; see tools/bench/cluster_bench.sh). Not part of make check.
bench-cluster: build
	bash tools/bench/cluster_bench.sh $(BUILD)

fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DKC_FUZZ=ON -DKC_TESTS=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	bash scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-long:
	$(MAKE) fuzz FUZZ_SECONDS=600

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
