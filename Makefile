# A thin driver over CMake and ctest; CMakeLists.txt holds the build itself.
#
#   make            build into build/ (optimized, with debug info)
#   make test       install missing dependencies (Debian packages only),
#                   build with -Werror, run every test, then again in
#                   build-asan/ under ASan+UBSan, in build-tsan/ under TSan,
#                   in build-valgrind/ under valgrind memcheck,
#                   then each fuzz target briefly (scripts/fuzz.sh)
#   make fuzz       fuzz each target for FUZZ_SECONDS (default 20) with clang
#   make install    install into $(PREFIX) (default /usr/local); DESTDIR works
#   make demo       build and run the stock demo (scripts/demo.sh)
#   make demo-interop  the same sale with buyers in C (dlock) and in Java
#                   (Redisson, from Maven Central) at once on one lock
#                   (scripts/demo-interop.sh)
#   make bench      build and run the benchmarks (bench/run.sh)
#   make bench-quick  every benchmark workload briefly, as a smoke test of
#                   the benchmark and its peers; like make bench it needs
#                   nodejs, npm (and the npm registry), gnuplot,
#                   python3-redis, Java 17 and Maven (and Maven Central), and
#                   go (and the Go module proxy), which bench/setup.sh
#                   installs or checks
#   make chaos      the long fault-injection run, several minutes (not in CI)
#   make soak       SOAK_SECONDS (600) of mixed load and faults on every lock
#                   kind, watching memory and descriptors (not in CI)
#   make deps       install what the build and the tests need (Debian)
#   make format     clang-format the C sources in place
#   make clean      remove the build trees

PREFIX ?= /usr/local
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
VALGRIND_BUILD ?= build-valgrind
BUILD_TYPE ?= RelWithDebInfo
CMAKE ?= cmake
CTEST ?= ctest
JOBS ?= 2
CMAKE_FLAGS ?=
# Fuzzing time per target at the end of "make test".
TEST_FUZZ_SECONDS ?= 15

# Quieter nested makes (cmake --build runs make again).
MAKEFLAGS += --no-print-directory

# What "make" configures. DLOCK_WERROR is left as it is in the cache, so
# that switching between "make" and "make test" does not rebuild it all.
CONFIGURE = $(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

FORMAT_FILES = $(wildcard include/*.h src/*.c src/*.h src/*/*.c src/*/*.h \
	tools/*.c tools/*.h \
	tests/*.c tests/*.h tests/harness/*.c tests/harness/*.h \
	examples/*.c examples/*.h bench/*.c bench/*.h)

.PHONY: all build test test-build test-asan test-tsan test-valgrind fuzz install demo demo-interop bench bench-quick chaos soak deps format clean help

all: build

build:
	$(CONFIGURE)
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# Steps in order even under make -j: each needs the one before.
test:
	@scripts/install-deps.sh
	$(MAKE) --no-print-directory test-build
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-tsan
	$(MAKE) --no-print-directory test-valgrind
	FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) scripts/fuzz.sh

test-build:
	$(CONFIGURE) -DDLOCK_WERROR=ON
	$(CMAKE) --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

# The sanitizer tree is a Debug build, so that the library's assertions
# are checked too.
test-asan:
	$(CMAKE) -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
		-DDLOCK_SANITIZE=address -DDLOCK_WERROR=ON $(CMAKE_FLAGS)
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

# Also Debug. The tests carry the sanitizer options that make a report fail
# them (tests/CMakeLists.txt).
test-tsan:
	$(CMAKE) -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
		-DDLOCK_SANITIZE=thread -DDLOCK_WERROR=ON $(CMAKE_FLAGS)
	$(CMAKE) --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

# The whole suite, unit and integration tests, under valgrind memcheck
# (about 4 minutes on 2 cores), with longer per-test limits. An optimized
# build, as shipped, where the sanitizer trees are Debug builds.
test-valgrind:
	$(CMAKE) -S . -B $(VALGRIND_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DDLOCK_VALGRIND=ON -DDLOCK_WERROR=ON $(CMAKE_FLAGS)
	$(CMAKE) --build $(VALGRIND_BUILD) -j $(JOBS)
	cd $(VALGRIND_BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

# libFuzzer targets (tests/fuzz), built with clang in build-fuzz/.
fuzz:
	scripts/fuzz.sh

# Configured again with the prefix, which dlock.pc records.
install:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD) -j $(JOBS)
	$(CMAKE) --install $(BUILD)

demo:
	@scripts/install-deps.sh
	$(MAKE) --no-print-directory build
	@test -x scripts/demo.sh || { echo "make demo: scripts/demo.sh is missing" >&2; exit 1; }
	BUILD_DIR=$(abspath $(BUILD)) scripts/demo.sh

demo-interop:
	@scripts/install-deps.sh
	$(MAKE) --no-print-directory build
	BUILD_DIR=$(abspath $(BUILD)) scripts/demo-interop.sh

bench:
	@scripts/install-deps.sh
	$(MAKE) --no-print-directory build
	@test -x bench/run.sh || { echo "make bench: bench/run.sh is missing" >&2; exit 1; }
	BUILD_DIR=$(abspath $(BUILD)) bench/run.sh

# Each workload and contender for a moment: checks that every contender
# ran and the counters its locks guarded, not speed. Not part of make test,
# whose dependencies are Debian packages alone: the contenders include
# node-redlock from the npm registry. The bench programs themselves are
# still built (with -Werror) by make test.
bench-quick:
	$(MAKE) --no-print-directory build
	BUILD_DIR=$(abspath $(BUILD)) bench/run.sh --quick

# Every fault scenario alone, then the mixed ones, each with a summary
# (tests/chaos, docs/reliability.md). CHAOS_ARGS picks others, e.g.
# CHAOS_ARGS="--duration 600 mixed".
CHAOS_ARGS ?= all
chaos:
	@scripts/install-deps.sh
	$(MAKE) --no-print-directory build
	$(BUILD)/dlock_chaos $(CHAOS_ARGS)

# Long mixed load with faults (tests/soak, scripts/soak.sh); the verdict
# says whether memory or descriptors grew.
SOAK_SECONDS ?= 600
soak:
	@scripts/install-deps.sh
	$(MAKE) --no-print-directory build
	BUILD_DIR=$(abspath $(BUILD)) SOAK_SECONDS=$(SOAK_SECONDS) scripts/soak.sh

deps:
	@scripts/install-deps.sh

format:
	clang-format -i $(FORMAT_FILES)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(VALGRIND_BUILD) build-fuzz

help:
	@sed -n '3,/^$$/s/^# \{0,1\}//p' Makefile
