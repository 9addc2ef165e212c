# modern_fm - build, test, benchmark and demo. Everything lands in build/.
#   make          tests, bench and demo programs, and the mfm command-line tool (build/mfm)
#   make test     compile checks, the tests, and the tests under ASan + UBSan and TSan (what CI runs)
#   make check    only the sanitizer runs of the tests (TESTS_QUICK sizes, see make test below)
#   make demo     train linear / FM / FFM / FwFM on planted data with build/mfm and compare
#   make examples the programs of examples/ (build/examples/); make examples-check runs and checks them
#   make bench    speed and quality table on Criteo-shaped data (BENCH_ARGS=--quick etc.)
#   make bench-defaults  the experiment behind the training defaults, docs/DEFAULTS.md (DEFAULTS_ARGS)
#   make fuzz     the libFuzzer targets, FUZZ_SECONDS (20) each (make test runs them when clang is there)

CC      ?= cc
CXX     ?= c++
CLANG   ?= clang
MINGW   ?= x86_64-w64-mingw32-gcc
MINGWXX ?= x86_64-w64-mingw32-g++
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Wpedantic -Werror
LDLIBS  := -pthread -lm -ldl
SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all

# xxhash.h (xxHash 0.8, header-only): the system's when installed, else Debian's libxxhash-dev
# unpacked into .deps/ (apt-get download needs no root and installs nothing).
XXHASH  := $(if $(wildcard /usr/include/xxhash.h),,.deps/xxhash/xxhash.h)
XXH_INC := $(if $(XXHASH),-I.deps/xxhash)
CFLAGS  += $(XXH_INC)
HEADERS := modern_fm.h modern_fm_kernels.h bench/synth.h bench/common.h $(XXHASH)
KERNELS := $(sort $(wildcard kernels/*.cu))

TEST_SRC := $(wildcard tests/*.c)
TEST_HDR := $(wildcard tests/*.h)

# A half-written binary must not look up to date after a failed recipe.
.DELETE_ON_ERROR:
.PHONY: all test check compile-checks demo bench bench-serve bench-defaults clean

all: build/tests build/bench build/bench-serve build/bench-defaults build/bench-gpu build/demo-data build/mfm

build:
	mkdir -p build

# ---- tests: every tests/*.c linked together (tests/impl.c holds the implementation) ----

# The sanitizer builds are -O1 (the later flag wins over CFLAGS' -O2): ASan's compile takes a
# third less CPU time than at -O2.
build/tests build/tests-asan build/tests-tsan: $(TEST_SRC) $(TEST_HDR) $(HEADERS) | build
	$(CC) -std=c99 $(WARN) $(CFLAGS) $(EXTRA) -o $@ $(TEST_SRC) $(LDLIBS)
build/tests-asan: EXTRA = -O1 $(SAN)
# the tool's end-to-end tests run ./build/mfm
build/tests build/tests-asan build/tests-tsan: | build/mfm
build/tests-tsan: EXTRA = -O1 -fsanitize=thread

# ---- make test: every step its own target, TEST_JOBS (2) at a time ----
# `make test` first builds the plain tests, mfm and the TSan tests (so that the longest step,
# test-nvrtc, can start at once: make -j starts ready steps in no reliable order), then runs
# `make -j$(TEST_JOBS) --output-sync=target test-steps`: a step's output is printed whole when it
# ends, and a failing step stops the run (make -k test runs every step anyway). A new step (a
# check, a program to run) is one more name in TEST_STEPS. bench, the demo's data generator and
# mfm are built (not run) so that CI sees them compile warning-free.
#
# The test binary takes name parts to run and --skip parts (tests/main.c); TESTS_QUICK=1 asks
# the heavy tests for smaller instances of the same checks (runner_quick in tests/runner.h).
#   test-nvrtc  the tests that build the real kernels with NVRTC (about 15 s of CPU a build,
#               twice that under ASan, whose allocator NVRTC then uses; the mfm tool's builds
#               are not under ASan at all): plain build only
#   test-plain  every other test, plain build, full sizes
#   test-asan   every other test under ASan + UBSan, quick sizes
#   test-tsan   the tests that use threads (their names contain "thread") under TSan, quick
#               sizes; the Hogwild tests that run several threads race on the parameters by
#               design and are not among them
TEST_JOBS   ?= 2
TEST_STEPS  := kernels-fresh test-nvrtc test-asan fuzz test-plain test-tsan compile-checks examples-check \
               build/bench build/bench-serve build/bench-defaults build/bench-gpu build/demo-data build/mfm
NVRTC_TESTS := test_cuda_nvrtc_compiles_every_arch test_cuda_cache_tool_reports test_cli_cache_and_backend
NOT_NVRTC   := $(NVRTC_TESTS:%=--skip %)

.PHONY: test-steps test-nvrtc test-plain test-asan test-tsan
test:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) build/tests build/mfm build/tests-tsan
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-steps
test-steps: $(TEST_STEPS)
	@echo "make test: every step passed"

test-nvrtc: build/tests build/mfm
	./build/tests $(NVRTC_TESTS)
test-plain: build/tests build/mfm
	./build/tests $(NOT_NVRTC)
test-asan: build/tests-asan build/mfm
	TESTS_QUICK=1 ./build/tests-asan $(NOT_NVRTC)
test-tsan: build/tests-tsan build/mfm
	TESTS_QUICK=1 ./build/tests-tsan thread

# The GPU's tests (each skips, saying why, without a driver or a device) and the CUDA runtime's.
.PHONY: test-gpu bench-gpu
test-gpu: kernels-fresh build/tests
	./build/tests test_cuda_
	./build/tests test_gpu_

bench-gpu: build/bench-gpu
	./build/bench-gpu $(BENCH_ARGS)

check: test-asan test-tsan

# ---- compile checks (tests/compile/): the header compiles warning-free in every setting ----
# Native checks are linked and run (a tiny smoke run); the mingw-w64 ones compile only.
# A compiler that is not installed is skipped with a message (.ci/run installs mingw-w64).

have = $(shell command -v $(1) >/dev/null 2>&1 && echo yes)

CHK_C   := tests/compile/check.c
CHK_CXX := tests/compile/check.cpp
NATIVE  := c99 c11 no-cuda static no-threads no-avx cxx11 cxx17 $(if $(call have,$(CLANG)),c99-clang)
CROSS   := $(if $(call have,$(MINGW)),mingw mingw-mfm) $(if $(call have,$(MINGWXX)),mingw-cxx)
MISSING := $(foreach c,$(CLANG) $(MINGW) $(MINGWXX),$(if $(call have,$(c)),,$(c)))

build/check-c99:         CHK = $(CC) -std=c99 $(CHK_C)
build/check-c99-clang:   CHK = $(CLANG) -std=c99 $(CHK_C)
build/check-c11:         CHK = $(CC) -std=c11 $(CHK_C)
build/check-no-cuda:     CHK = $(CC) -std=c99 -DMFM_NO_CUDA $(CHK_C)
build/check-static:      CHK = $(CC) -std=c99 -DMFM_STATIC $(CHK_C)
build/check-no-threads:  CHK = $(CC) -std=c99 -DMFM_NO_THREADS $(CHK_C)
build/check-no-avx:      CHK = $(CC) -std=c99 -DMFM_NO_AVX $(CHK_C)
build/check-cxx11:       CHK = $(CXX) -std=c++11 $(CHK_CXX)
build/check-cxx17:       CHK = $(CXX) -std=c++17 $(CHK_CXX)
build/check-mingw.o:     CHK = $(MINGW) -std=c99 $(CHK_C)
build/check-mingw-cxx.o: CHK = $(MINGWXX) -std=c++11 $(CHK_CXX)
build/check-mingw-mfm.o: CHK = $(MINGW) -std=c99 tools/mfm.c
build/check-mingw-mfm.o: tools/mfm.c

# without -g: debug information is a third of a check's compile time, and no one debugs a check
CHK_FLAGS := $(filter-out -g,$(CFLAGS))

$(NATIVE:%=build/check-%): $(wildcard tests/compile/*) $(HEADERS) | build
	$(CHK) $(WARN) $(CHK_FLAGS) -o $@ $(LDLIBS)

$(CROSS:%=build/check-%.o): $(wildcard tests/compile/*) $(HEADERS) | build
	$(CHK) $(WARN) $(CHK_FLAGS) -c -o $@

# Drop-in: the header copied into an empty folder (cpu: alone; gpu: with modern_fm_kernels.h and
# xxhash.h) and built as a user builds it, with no -I, -pthread or -ldl (glibc 2.34+), as C99
# (with system headers included first, too) and C++17; then run (tests/compile/dropin.c).
XXHASH_H := $(or $(XXHASH),/usr/include/xxhash.h)
DROPIN   := cpu-c99 cpu-headers-first cpu-cxx17 gpu-c99 gpu-headers-first gpu-cxx17

build/dropin/cpu/app.c: tests/compile/dropin.c modern_fm.h
	rm -rf $(@D) && mkdir -p $(@D) && cp modern_fm.h $(@D)/ && cp $< $@
build/dropin/gpu/app.c: tests/compile/dropin.c modern_fm.h modern_fm_kernels.h $(XXHASH_H)
	rm -rf $(@D) && mkdir -p $(@D) && cp modern_fm.h modern_fm_kernels.h $(XXHASH_H) $(@D)/ && cp $< $@

# build/check-dropin-WHERE-HOW: WHERE is the folder, HOW the compile line
dropin_build = cd build/dropin/$(1) && $(2) $(WARN) -O2 -DEXPECT_GPU_PART=$(if $(filter gpu,$(1)),1,0) app.c -o $(CURDIR)/$@
build/check-dropin-cpu-c99 build/check-dropin-cpu-headers-first build/check-dropin-cpu-cxx17 build/check-dropin-mingw.o: build/dropin/cpu/app.c
build/check-dropin-gpu-c99 build/check-dropin-gpu-headers-first build/check-dropin-gpu-cxx17: build/dropin/gpu/app.c
build/check-dropin-cpu-c99:           ; $(call dropin_build,cpu,$(CC) -std=c99) -lm
build/check-dropin-cpu-headers-first: ; $(call dropin_build,cpu,$(CC) -std=c99 -DSYSTEM_HEADERS_FIRST) -lm
build/check-dropin-cpu-cxx17:         ; $(call dropin_build,cpu,$(CXX) -std=c++17 -x c++)
build/check-dropin-gpu-c99:           ; $(call dropin_build,gpu,$(CC) -std=c99) -lm
build/check-dropin-gpu-headers-first: ; $(call dropin_build,gpu,$(CC) -std=c99 -DSYSTEM_HEADERS_FIRST) -lm
build/check-dropin-gpu-cxx17:         ; $(call dropin_build,gpu,$(CXX) -std=c++17 -x c++)
build/check-dropin-mingw.o:           ; $(call dropin_build,cpu,$(MINGW) -std=c99 -c)

CROSS += $(if $(call have,$(MINGW)),dropin-mingw)

compile-checks: $(NATIVE:%=build/check-%) $(DROPIN:%=build/check-dropin-%) $(CROSS:%=build/check-%.o)
	@for c in $(NATIVE); do printf 'compile check %-12s ' $$c; ./build/check-$$c || exit 1; done
	@for c in $(DROPIN); do printf 'compile check dropin-%-17s ' $$c; ./build/check-dropin-$$c || exit 1; done
	@for c in $(CROSS); do echo "compile check $$c (compile only) ok"; done
	@for c in $(MISSING); do echo "compile check SKIPPED: $$c is not installed"; done

# ---- fuzzing (clang's libFuzzer): each target runs FUZZ_SECONDS on a copy of its seed corpus ----
# Seeds: tests/fuzz/corpus_* (tests/fuzz/make_corpus.c wrote them). New inputs go to
# build/fuzz-corpus-*, a crash's input to build/fuzz-*-crash-*, the output to build/fuzz-*.log.

FUZZ_SECONDS ?= 20
FUZZERS      := dataset model

$(FUZZERS:%=build/fuzz-%): build/fuzz-%: tests/fuzz/fuzz_%.c $(HEADERS) | build
	$(CLANG) -std=c99 $(WARN) $(XXH_INC) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $< $(LDLIBS)

# fuzz-NAME runs one target, so that make -j runs them side by side.
.PHONY: fuzz $(FUZZERS:%=fuzz-%)
ifeq ($(call have,$(CLANG)),yes)
fuzz: $(FUZZERS:%=fuzz-%)
$(FUZZERS:%=fuzz-%): fuzz-%: build/fuzz-%
	@rm -rf build/fuzz-corpus-$* && mkdir -p build/fuzz-corpus-$* && cp tests/fuzz/corpus_$*/* build/fuzz-corpus-$*/
	@printf 'fuzz %-8s %s s: ' $* $(FUZZ_SECONDS); \
	./build/fuzz-$* -max_total_time=$(FUZZ_SECONDS) -timeout=30 -artifact_prefix=build/fuzz-$*- build/fuzz-corpus-$* \
	    >build/fuzz-$*.log 2>&1 || { echo FAILED; tail -n 40 build/fuzz-$*.log; exit 1; }; \
	grep '^Done' build/fuzz-$*.log
else
fuzz:
	@echo "fuzz SKIPPED: $(CLANG) is not installed"
endif

# ---- dependencies and generated files ----

.deps/xxhash/xxhash.h:
	rm -rf .deps/xxhash-deb && mkdir -p .deps/xxhash-deb .deps/xxhash
	cd .deps/xxhash-deb && { apt-get download libxxhash-dev >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get download libxxhash-dev; }; }
	dpkg-deb -x .deps/xxhash-deb/libxxhash-dev_*.deb .deps/xxhash-deb/root
	cp .deps/xxhash-deb/root/usr/include/xxhash.h $@

# modern_fm_kernels.h is committed; `make kernels` writes it from kernels/*.cu, and
# `make kernels-fresh` (part of make test) fails when the committed one differs.
build/embed_kernels: tools/embed_kernels.c | build
	$(CC) -std=c99 $(WARN) $(CFLAGS) -o $@ $<

.PHONY: kernels kernels-fresh
kernels: build/embed_kernels
	./build/embed_kernels modern_fm_kernels.h $(KERNELS)

kernels-fresh: build/embed_kernels
	@./build/embed_kernels build/modern_fm_kernels.h $(KERNELS)
	@cmp -s build/modern_fm_kernels.h modern_fm_kernels.h || { echo "modern_fm_kernels.h is stale: run make kernels"; exit 1; }
	@echo "modern_fm_kernels.h is fresh ($(words $(KERNELS)) kernel files)"

# ---- benchmark, demo and the mfm tool ----

build/bench: bench/bench.c bench/roofline.h
build/bench-serve: bench/serve.c
build/bench-defaults: bench/defaults.c
build/bench-gpu: bench/gpu.c
build/demo-data: bench/demo.c
build/mfm: tools/mfm.c
build/bench build/bench-serve build/bench-defaults build/bench-gpu build/demo-data build/mfm: $(HEADERS) | build
	$(CC) -std=c99 $(WARN) $(CFLAGS) -o $@ $(filter %.c,$^) $(LDLIBS)

demo: build/demo-data build/mfm
	sh bench/demo.sh

# ---- examples/: each built by the compile line at its top (examples/build.sh), warning-free ----
EXAMPLES := $(patsubst examples/%.c,build/examples/%,$(wildcard examples/*.c)) \
            $(patsubst examples/%.cpp,build/examples/%,$(wildcard examples/*.cpp))
.PHONY: examples examples-check

examples: $(EXAMPLES)

build/examples/%: examples/%.c examples/build.sh $(HEADERS)
	@CC='$(CC)' CXX='$(CXX)' EXTRA_FLAGS='$(WARN)' sh examples/build.sh build/examples $<
build/examples/%: examples/%.cpp examples/modern_fm.hpp examples/build.sh $(HEADERS)
	@CC='$(CC)' CXX='$(CXX)' EXTRA_FLAGS='$(WARN)' sh examples/build.sh build/examples $<

examples-check: examples
	sh examples/check.sh build/examples

bench: build/bench
	./build/bench $(BENCH_ARGS)

# serving: opening a model file, mfm predict end to end, one-row latency from many threads
# (bench/serve.c; SERVE_ARGS=--features 100000 etc.; writes build/serve/)
bench-serve: build/bench-serve build/mfm
	./build/bench-serve $(SERVE_ARGS)

# the experiment behind the training defaults (docs/DEFAULTS.md); DEFAULTS_ARGS=--quick etc.
bench-defaults: build/bench-defaults
	./build/bench-defaults $(DEFAULTS_ARGS)

clean:
	rm -rf build
