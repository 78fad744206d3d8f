# Entry points (README.md): `make demo` and `make test` work on a fresh
# Debian machine; plain `make` builds into build/.
BUILD      ?= build
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX     ?= /usr/local
CMAKE_ARGS ?=

.PHONY: all deps demo test test-plain test-sanitize test-thread test-long cuda-check bench \
        install clean \
        fuzz fuzz-smoke soak release-check check-docs-slow

all: deps
	cmake -S . -B $(BUILD) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

# The main job on the default simulated device: the GPT trainer at half the
# memory it needs, every dynamic behaviour on, checked against an
# unconstrained copy (about a minute).
demo: all
	mkdir -p $(BUILD)/demo
	$(BUILD)/chameleon train --verify --overflow-at 60,140 \
	    --trace $(BUILD)/demo/trace.json --memory-curve $(BUILD)/demo \
	    --report $(BUILD)/demo/report.html

# The whole suite from scratch, each test once: built with gcc and invariant
# checks, the tests that cannot run under the sanitizers (the Python
# package, the install test, the cases labelled long there); built with
# clang, every other test under AddressSanitizer and UndefinedBehavior-
# Sanitizer; then the threaded parts under ThreadSanitizer. `make
# test-plain` runs the whole suite in the gcc build. What each part costs:
# docs/testing.md.
test: deps
	$(MAKE) test-plain PLAIN_TESTS="-LE sanitized"
	$(MAKE) test-sanitize
	$(MAKE) test-thread

# The builds `make test` and release-check make from scratch use Ninja
# (scripts/install-deps.sh installs it): the Makefile generator's own work
# was a quarter of such a build's CPU (docs/testing.md). A build directory
# that exists keeps the generator it was made with.
GENERATOR = $$(test -f $(1)/CMakeCache.txt || echo -G Ninja)

# CTest ends a test as hung after 1800 s times this (tests/CMakeLists.txt);
# raise it on a machine several times slower than docs/testing.md's.
CHAM_TEST_TIMEOUT_SCALE ?= 1
TEST_CMAKE_ARGS = -DCHAM_DEBUG_CHECKS=ON -DCHAM_TEST_TIMEOUT_SCALE=$(CHAM_TEST_TIMEOUT_SCALE)
ASAN_CMAKE = CC=clang cmake $(call GENERATOR,build-asan) -S . -B build-asan $(TEST_CMAKE_ARGS) \
             -DCHAM_SANITIZE=address,undefined $(CMAKE_ARGS)
ASAN_RUN = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# Which tests of the gcc build to run (ctest options): all, unless `make test`
# says otherwise.
PLAIN_TESTS ?=

test-plain:
	rm -rf build-test
	CC=gcc cmake $(call GENERATOR,build-test) -S . -B build-test $(TEST_CMAKE_ARGS) $(CMAKE_ARGS)
	cmake --build build-test -j $(JOBS)
	ctest --test-dir build-test --output-on-failure -j $(JOBS) $(PLAIN_TESTS)

test-sanitize:
	rm -rf build-asan
	$(ASAN_CMAKE)
	cmake --build build-asan -j $(JOBS)
	$(ASAN_RUN) ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE long

# The sanitizer build's long cases (the model-size and max-size
# experiments' searches: 10 minutes of CPU under ASan; tests/CMakeLists.txt,
# CHAM_LONG_UNDER_SANITIZERS): their assertions also run in test-plain.
# Reuses build-asan as `make test` left it, or makes it.
test-long: deps
	$(ASAN_CMAKE)
	cmake --build build-asan -j $(JOBS)
	$(ASAN_RUN) ctest --test-dir build-asan --output-on-failure -j $(JOBS) -L long

# The threaded parts under ThreadSanitizer: SwapAdvisor's parallel search
# (src/policy/sa_search.c), whose test runs searches on two threads and the
# runtime applying their plans; and the Python package's copy engine
# (python/chameleon/_copier.c, its worker threads), driven from C by
# copier_tsan.c since the interpreter is not built with TSan.
test-thread:
	rm -rf build-tsan
	CC=clang cmake $(call GENERATOR,build-tsan) -S . -B build-tsan -DCHAM_DEBUG_CHECKS=ON \
	  -DCHAM_SANITIZE=thread $(CMAKE_ARGS)
	cmake --build build-tsan -j $(JOBS) --target test_swapadvisor
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_swapadvisor
	clang -std=c11 -g -O1 -fsanitize=thread -DCHAM_DEBUG_CHECKS=1 -Wall -Wextra \
	  -Wpedantic -Werror python/tests/copier_tsan.c -o build-tsan/copier_tsan -lpthread
	TSAN_OPTIONS=halt_on_error=1 build-tsan/copier_tsan

# Everything compiled as a user's Release build would (-O3 -DNDEBUG; gcc
# warns about different things at -O3), warnings as errors. CI runs it.
release-check: deps
	rm -rf build-release
	CC=gcc cmake $(call GENERATOR,build-release) -S . -B build-release -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)
	cmake --build build-release -j $(JOBS)

# The cuda backend's tests alone (they also run in `make test`): the
# backend is always built and loads the CUDA runtime at run time; where the
# toolkit is installed, test_cuda loads its libcudart and test_cuda_abi
# checks src/device/cuda_api.h against its headers (docs/cuda.md).
cuda-check: deps
	cmake -S . -B build-cuda $(CMAKE_ARGS)
	cmake --build build-cuda -j $(JOBS) --target test_cuda test_cuda_abi
	ctest --test-dir build-cuda --output-on-failure -R cuda

# The libFuzzer targets of fuzz/ (docs/fuzzing.md), with clang, ASan and
# UBSan, into build-fuzz/fuzz/; fuzz-smoke runs each for a fixed number of
# runs over its seeds (about a minute in all), as CI does.
fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DCHAM_FUZZ=ON $(CMAKE_ARGS)
	cmake --build build-fuzz --target fuzz_all -j $(JOBS)

fuzz-smoke: fuzz
	scripts/run-fuzz.sh

# The perturbation harness's full count (docs/testing.md): 1,000 seeded
# random training programs, each compared op by op with an unconstrained
# run, both executor modes; a failure prints the line that reproduces it.
# `make test` runs 100 of them. SOAK_FIRST / SOAK_COUNT pick other seeds.
SOAK_FIRST ?= 1
SOAK_COUNT ?= 1000
soak: deps
	cmake -S . -B build-soak -DCHAM_DEBUG_CHECKS=ON $(CMAKE_ARGS)
	cmake --build build-soak -j $(JOBS) --target test_perturb
	build-soak/tests/test_perturb --first $(SOAK_FIRST) --count $(SOAK_COUNT) --jobs $(JOBS)

bench: all
	$(BUILD)/bench/bench_alloc

# The quoted figures whose commands take minutes (marked `slow`:
# scripts/doc-blocks.py), which tests/test_docs.sh leaves out to keep
# `make test` within its time: checked against what their commands print
# now, in a Release build as the docs' figures were made (a quarter hour).
check-docs-slow: deps
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)
	cmake --build build-release -j $(JOBS)
	scripts/doc-blocks.py --check --slow --build build-release README.md docs/*.md

install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-test build-asan build-tsan build-release build-cuda build-fuzz build-soak
