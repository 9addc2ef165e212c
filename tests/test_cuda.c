/* test_cuda.c - the CUDA runtime where there may be no GPU: NVRTC compiles every kernel through
   the library's own path, the kernel cache (hits, misses, corrupt entries, two writers, an
   unwritable directory), and the errors without a driver or without NVRTC. Environment
   variables steer the loader, which loads once per process, so each case that sets one runs
   in a child process. */
#define _POSIX_C_SOURCE 200809L
#include "runner.h"
#include "scratch.h"
#include "tool.h"
#include "../modern_fm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void test_cuda_forget(void);           /* tests/impl.c */
void test_cuda_small_kernels(int on); /* tests/impl.c: a one-line program instead of the kernels */

/* Runs fn in a child process with `name=value` set and a loader that starts afresh; returns the child's exit code (0 = all
   its checks held; it prints what failed). */
static int in_child(const char *name, const char *value, int (*fn)(void)) {
    pid_t pid;
    int status = 0;
    fflush(stdout);
    if ((pid = fork()) == 0) {
        if (name) setenv(name, value, 1);
        test_cuda_forget();
        _exit(fn());
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* A cache directory of its own for one test, empty. */
static void fresh_cache(char *dir, size_t cap, const char *name) {
    char cmd[700];
    scratch_path(dir, cap, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("  (could not empty %s)\n", dir);
    setenv("MFM_CACHE_DIR", dir, 1);
}

/* NVRTC is on CI's machine; elsewhere these tests say why they did not run. */
static int have_nvrtc(void) {
    mfm_kernel_build b;
    mfm_error e;
    mfm_status st = mfm_cuda_build_kernels("sm_90", &b, &e);
    if (st == MFM_ERR_NVRTC_UNAVAILABLE) {
        runner_skip("%s", e.message);
        return 0;
    }
    return 1;
}

void test_cuda_nvrtc_compiles_every_arch(void) {
    static const char *const archs[] = {"sm_75", "sm_80", "sm_90", "compute_90"};
    char dir[512];
    size_t i;
    unsetenv("MFM_CACHE");
    fresh_cache(dir, sizeof dir, "cache-archs");
    if (!have_nvrtc()) return;
    for (i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        mfm_kernel_build b;
        mfm_error e;
        mfm_status st = mfm_cuda_build_kernels(archs[i], &b, &e);
        if (!CHECK(st == MFM_OK, "%s: %s", archs[i], e.message)) continue;
        CHECK(b.image_bytes > 1000, "%s: an image of %llu bytes", archs[i], (unsigned long long)b.image_bytes);
        CHECK(strcmp(b.kind, i == 3 ? "ptx" : "cubin") == 0, "%s gave %s", archs[i], b.kind);
    }
    {
        mfm_kernel_build b;
        mfm_error e;
        CHECK(mfm_cuda_build_kernels("sm_61", &b, &e) == MFM_ERR_DEVICE_UNSUPPORTED && strstr(e.message, "61"), "sm_61: %s", e.message);
        CHECK(mfm_cuda_build_kernels("banana", &b, &e) == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "banana"), "banana: %s", e.message);
    }
}

/* The one entry of the directory ending in .mfmk, into path; 1 when there is exactly one. */
static int only_entry(const char *dir, char *path, size_t cap) {
    mfm_cache_entry entries[8];
    size_t n = 0;
    char listed[512];
    if (mfm_cache_list(listed, sizeof listed, entries, 8, &n, NULL) != MFM_OK || n != 1) return 0;
    snprintf(path, cap, "%s/v1/%s", dir, entries[0].name);
    return entries[0].valid;
}

void test_cuda_cache_round_trip(void) {
    char dir[512], path[800];
    unsigned char *bytes;
    size_t size, n_removed = 0;
    mfm_kernel_build b;
    mfm_error e;
    unsetenv("MFM_CACHE");
    fresh_cache(dir, sizeof dir, "cache-round-trip");
    test_cuda_small_kernels(1); /* the cache's mechanics, not the kernels: milliseconds a build */
    if (!have_nvrtc()) goto done;
    /* have_nvrtc built sm_90 into this fresh directory: the next build is a hit */
    if (!CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK, "%s", e.message)) goto done;
    CHECK(b.from_cache == 1 && b.stored == 0, "second build: from_cache %d stored %d", b.from_cache, b.stored);
    if (!CHECK(only_entry(dir, path, sizeof path), "the cache holds one valid entry")) goto done;
    CHECK(strstr(path, "cubin-sm_90-nvrtc") != NULL && strstr(path, ".mfmk") != NULL, "entry name %s", path);
    CHECK(strcmp(path, b.path) == 0, "listed %s, built %s", path, b.path);

    /* a flipped payload byte, a truncated file, a foreign key: each a miss that is rewritten */
    if (!CHECK((bytes = read_whole_file(path, &size)) != NULL && size > 1000, "read the entry")) goto done;
    bytes[size / 2] ^= 0x40;
    if (!CHECK(write_whole_file(path, bytes, size), "corrupt the entry")) goto done;
    CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK && b.from_cache == 0 && b.stored == 1, "flipped byte: from_cache %d stored %d", b.from_cache, b.stored);
    CHECK(only_entry(dir, path, sizeof path), "rewritten entry valid");
    if (!CHECK(write_whole_file(path, bytes, 40), "truncate the entry")) goto done;
    CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK && b.from_cache == 0 && b.stored == 1, "truncated: from_cache %d stored %d", b.from_cache, b.stored);
    free(bytes);
    if (!CHECK((bytes = read_whole_file(path, &size)) != NULL && size > 1000, "read the entry")) goto done;
    bytes[32] ^= 1; /* the key echo */
    if (!CHECK(write_whole_file(path, bytes, size), "change the key echo")) goto done;
    CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK && b.from_cache == 0, "foreign key: from_cache %d", b.from_cache);
    CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK && b.from_cache == 1, "then a hit: from_cache %d", b.from_cache);
    free(bytes);

    /* readonly reads but never writes; off neither reads nor writes */
    if (!CHECK(mfm_cache_clear(&n_removed, &e) == MFM_OK && n_removed == 1, "clear removed %zu", n_removed)) goto done;
    setenv("MFM_CACHE", "readonly", 1);
    CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK && b.from_cache == 0 && b.stored == 0, "readonly: stored %d", b.stored);
    CHECK(strstr(b.not_stored, "read-only") != NULL, "readonly: not stored because \"%s\"", b.not_stored);
    snprintf(path, sizeof path, "%s/v1", dir);
    CHECK(count_names_containing(path, ".mfmk") == 0, "readonly wrote nothing");
    setenv("MFM_CACHE", "off", 1);
    CHECK(mfm_cuda_build_kernels("sm_90", &b, &e) == MFM_OK && b.from_cache == 0 && b.path[0] == '\0', "off: path \"%s\"", b.path);
    CHECK(strstr(b.not_stored, "off") != NULL, "off: not stored because \"%s\"", b.not_stored);
done:
    unsetenv("MFM_CACHE");
    test_cuda_small_kernels(0);
}

static int build_sm80(void) {
    mfm_kernel_build b;
    return mfm_cuda_build_kernels("sm_80", &b, NULL) == MFM_OK ? 0 : 1;
}

void test_cuda_cache_two_processes(void) {
    char dir[512], path[800], sub[600];
    pid_t pids[2];
    int i, ok = 1;
    unsetenv("MFM_CACHE");
    fresh_cache(dir, sizeof dir, "cache-two");
    test_cuda_small_kernels(1);
    if (!have_nvrtc()) {
        test_cuda_small_kernels(0);
        return;
    }
    mfm_cache_clear(NULL, NULL);
    fflush(stdout);
    for (i = 0; i < 2; i++)
        if ((pids[i] = fork()) == 0) _exit(build_sm80());
    for (i = 0; i < 2; i++) {
        int status = 0;
        ok &= pids[i] > 0 && waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    CHECK(ok, "both processes built the kernels");
    snprintf(sub, sizeof sub, "%s/v1", dir);
    CHECK(count_names_containing(sub, "cubin-sm_80") == 1, "one sm_80 entry, found %d", count_names_containing(sub, "cubin-sm_80"));
    CHECK(count_names_containing(sub, ".tmp-") == 0, "no temporary file left");
    CHECK(only_entry(dir, path, sizeof path) || count_names_containing(sub, ".mfmk") == 2, "the entry is valid");
    test_cuda_small_kernels(0);
}

void test_cuda_cache_unwritable(void) {
    char file[512];
    mfm_kernel_build b;
    mfm_error e;
    mfm_status st;
    scratch_path(file, sizeof file, "cache-is-a-file");
    REQUIRE(write_whole_file(file, "x", 1), "make a file");
    setenv("MFM_CACHE_DIR", file, 1); /* a file where the folder should be */
    unsetenv("MFM_CACHE");
    test_cuda_small_kernels(1);
    st = mfm_cuda_build_kernels("sm_90", &b, &e);
    test_cuda_small_kernels(0);
    if (st == MFM_ERR_NVRTC_UNAVAILABLE) {
        runner_skip("%s", e.message);
        return;
    }
    CHECK(st == MFM_OK, "an unwritable cache fails nothing: %s", e.message);
    CHECK(b.from_cache == 0 && b.stored == 0, "nothing stored (stored %d)", b.stored);
    CHECK(strstr(b.not_stored, file) != NULL && strstr(b.not_stored, "not a folder") != NULL, "the reason names the folder: \"%s\"", b.not_stored);
}

/* `mfm cache` says why, and fails, where the library could store nothing or a setting means
   nothing (it used to print "not stored" and exit 0, take MFM_CACHE=bogus as on, and list a
   file as an empty cache). */
void test_cuda_cache_tool_reports(void) {
    char file[512], args[1400], out[2048], errs[2048];
    int code;
    mfm_cuda_info info;
    scratch_path(file, sizeof file, "cache-tool-file");
    REQUIRE(write_whole_file(file, "x", 1), "make a file");
    code = tool_shell("MFM_CACHE=bogus \"$MFM\" cache", out, sizeof out, errs, sizeof errs);
    CHECK(code == 1 && strstr(errs, "MFM_CACHE=bogus") && strstr(errs, "on, off or readonly"), "MFM_CACHE=bogus: exit %d, said: %s", code, errs);
    snprintf(args, sizeof args, "MFM_CACHE_DIR='%s' \"$MFM\" cache", file);
    code = tool_shell(args, out, sizeof out, errs, sizeof errs);
    CHECK(code == 1 && strstr(errs, file) && strstr(errs, "not a folder"), "a file as the cache: exit %d, said: %s", code, errs);
    unsetenv("MFM_CACHE");
    mfm_cuda_get_info(0, &info, NULL); /* loads NVRTC, compiles nothing */
    if (!info.nvrtc_version) {
        runner_skip("no NVRTC here: the tool cannot compile the kernels");
        return;
    }
    /* a folder below a file can never be made: the system's reason, and exit 1 */
    snprintf(args, sizeof args, "MFM_CACHE_DIR='%s/below' \"$MFM\" cache --build sm_90", file);
    code = tool_shell(args, out, sizeof out, errs, sizeof errs);
    CHECK(code == 1 && strstr(errs, "not stored") && strstr(errs, "Not a directory") && strstr(errs, file), "an unwritable cache: exit %d, said: %s",
          code, errs);
}

/* The GPU settings without any GPU or NVRTC: mfm_cuda_configure against the environment, and
   the settings that mean nothing refused with a sentence that names them. */
static int settings_child(void) {
    mfm_cuda_config c;
    mfm_error e;
    char dir[512];
    size_t n = 7;
    int bad = 0;
    memset(&c, 0, sizeof c);
    c.cache_mode = (mfm_cache_mode)9;
    if (mfm_cuda_configure(&c, &e) != MFM_ERR_INVALID_PARAM || !strstr(e.message, "cache_mode = 9")) bad |= 1;
    /* the environment, then the settings over it */
    setenv("MFM_CACHE_DIR", "/tmp/mfm-env-cache", 1);
    if (mfm_cache_list(dir, sizeof dir, NULL, 0, &n, &e) != MFM_OK || strcmp(dir, "/tmp/mfm-env-cache/v1") != 0) bad |= 2;
    c.cache_mode = MFM_CACHE_DEFAULT;
    c.cache_dir = "/tmp/mfm-set-cache";
    if (mfm_cuda_configure(&c, &e) != MFM_OK || mfm_cache_list(dir, sizeof dir, NULL, 0, &n, &e) != MFM_OK || strcmp(dir, "/tmp/mfm-set-cache/v1") != 0)
        bad |= 4;
    c.cache_mode = MFM_CACHE_OFF;
    if (mfm_cuda_configure(&c, &e) != MFM_OK || mfm_cache_list(dir, sizeof dir, NULL, 0, &n, &e) != MFM_OK || dir[0] != '\0') bad |= 8;
    /* NULL: back to the environment; an MFM_CACHE that names no mode is an error where the cache is used */
    setenv("MFM_CACHE", "bogus", 1);
    if (mfm_cuda_configure(NULL, &e) != MFM_OK) bad |= 16;
    if (mfm_cache_list(dir, sizeof dir, NULL, 0, &n, &e) != MFM_ERR_INVALID_PARAM || !strstr(e.message, "MFM_CACHE=bogus")) bad |= 32;
    c.cache_mode = MFM_CACHE_ON; /* the setting wins over the environment */
    c.cache_dir = NULL;
    if (mfm_cuda_configure(&c, &e) != MFM_OK || mfm_cache_list(dir, sizeof dir, NULL, 0, &n, &e) != MFM_OK) bad |= 64;
    /* a cache folder that is a file */
    setenv("MFM_CACHE_DIR", "/etc/passwd", 1);
    if (mfm_cache_list(dir, sizeof dir, NULL, 0, &n, &e) != MFM_ERR_INVALID_PARAM || !strstr(e.message, "/etc/passwd") || !strstr(e.message, "not a folder"))
        bad |= 128;
    if (mfm_cache_clear(&n, &e) != MFM_ERR_INVALID_PARAM || n != 0) bad |= 256;
    /* the driver's path: taken before the first load, named in the failure, fixed after it */
    c.driver_library = "/nonexistent/libcuda-set.so.1";
    if (mfm_cuda_configure(&c, &e) != MFM_OK) bad |= 512;
    if (mfm_cuda_available() || mfm_cuda_get_info(0, NULL, &e) == MFM_OK) bad |= 1024;
    {
        mfm_cuda_info info;
        if (mfm_cuda_get_info(0, &info, &e) != MFM_ERR_CUDA_UNAVAILABLE || !strstr(e.message, "/nonexistent/libcuda-set.so.1")) bad |= 2048;
    }
    c.driver_library = "/nonexistent/other.so.1";
    if (mfm_cuda_configure(&c, &e) != MFM_ERR_INVALID_ARGUMENT || !strstr(e.message, "driver_library") ||
        !strstr(e.message, "/nonexistent/libcuda-set.so.1"))
        bad |= 4096;
    if (bad) printf("  settings_child: failed checks 0x%x (last message: %s)\n", bad, e.message);
    return bad ? 1 : 0;
}

void test_cuda_settings(void) {
    CHECK(in_child(NULL, NULL, settings_child) == 0, "the GPU settings (see the line above)");
}

/* Without libcuda: CUDA says "no driver" (and a CUDA fit leaves the model as it was), AUTO
   predicts and trains on the CPU exactly like CPU. */
static int no_driver_child(void) {
    static const uint64_t off[] = {0, 2, 3};
    static const uint32_t feat[] = {0, 1, 2}, fld[] = {0, 1, 0};
    static const float y[] = {1, 0};
    mfm_params p;
    mfm_csr d;
    mfm_model *m = NULL, *c = NULL;
    mfm_error e;
    float cpu[2], other[2], v_before[24], v_cpu[24], v_auto[24];
    int bad = 0;
    mfm_cuda_info info;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.init_scale = 0.5;
    d.n_rows = 2;
    d.row_offsets = off;
    d.features = feat;
    d.fields = fld;
    if (mfm_cuda_available()) bad |= 1;
    if (mfm_cuda_get_info(0, &info, &e) != MFM_ERR_CUDA_UNAVAILABLE || !strstr(e.message, "no CUDA driver")) bad |= 2;
    if (mfm_model_create(&p, 3, 2, 1, &m, &e) != MFM_OK) return 64;
    if (mfm_predict(m, &d, MFM_OUTPUT_SCORE, cpu, 2, &e) != MFM_OK) bad |= 4;
    p.backend = MFM_BACKEND_CUDA;
    if (mfm_model_set_params(m, &p, &e) != MFM_OK) bad |= 8;
    if (mfm_predict(m, &d, MFM_OUTPUT_SCORE, other, 2, &e) != MFM_ERR_CUDA_UNAVAILABLE || !strstr(e.message, "no CUDA driver") ||
        !strstr(e.message, "/nonexistent/libcuda.so.1"))
        bad |= 16;
    if (mfm_cuda_prepare(0, &e) != MFM_ERR_CUDA_UNAVAILABLE || !strstr(e.message, "/nonexistent/libcuda.so.1")) bad |= 16;
    p.backend = MFM_BACKEND_AUTO;
    if (mfm_model_set_params(m, &p, &e) != MFM_OK) bad |= 8;
    if (mfm_predict(m, &d, MFM_OUTPUT_SCORE, other, 2, &e) != MFM_OK || memcmp(cpu, other, sizeof cpu) != 0) bad |= 32;
    d.labels = y;
    p.backend = MFM_BACKEND_CUDA;
    if (mfm_model_set_params(m, &p, &e) != MFM_OK || mfm_model_clone(m, &c, &e) != MFM_OK) bad |= 8;
    mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v_before, 24, NULL);
    if (mfm_fit(m, &d, &e) != MFM_ERR_CUDA_UNAVAILABLE || !strstr(e.message, "no CUDA driver")) bad |= 64;
    mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v_auto, 24, NULL);
    if (memcmp(v_before, v_auto, sizeof v_auto) != 0) bad |= 128;
    p.backend = MFM_BACKEND_AUTO;
    if (mfm_model_set_params(m, &p, &e) != MFM_OK || mfm_fit(m, &d, &e) != MFM_OK) bad |= 256;
    p.backend = MFM_BACKEND_CPU;
    if (mfm_model_set_params(c, &p, &e) != MFM_OK || mfm_fit(c, &d, &e) != MFM_OK) bad |= 256;
    mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v_auto, 24, NULL);
    mfm_model_get_tensor(c, MFM_TENSOR_V, 0, 0, v_cpu, 24, NULL);
    if (memcmp(v_cpu, v_auto, sizeof v_auto) != 0 || memcmp(v_cpu, v_before, sizeof v_cpu) == 0) bad |= 512;
    mfm_model_free(c);
    mfm_model_free(m);
    if (bad) printf("  no-driver child: failed checks %#x (%s)\n", bad, e.message);
    return bad;
}

void test_cuda_no_driver(void) {
    int code = in_child("MFM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", no_driver_child);
    CHECK(code == 0, "the child's checks: exit %d", code);
}

static int nvrtc_missing_child(void) {
    mfm_kernel_build b;
    mfm_error e;
    char dir[512];
    fresh_cache(dir, sizeof dir, "cache-no-nvrtc"); /* an empty cache: nothing to fall back on */
    if (mfm_cuda_build_kernels("sm_90", &b, &e) != MFM_ERR_NVRTC_UNAVAILABLE || !strstr(e.message, "/nonexistent/libnvrtc.so.13")) {
        printf("  no-NVRTC child: %s\n", e.message);
        return 1;
    }
    return 0;
}

void test_cuda_nvrtc_path_missing(void) {
    int code = in_child("MFM_NVRTC_PATH", "/nonexistent/libnvrtc.so.13", nvrtc_missing_child);
    CHECK(code == 0, "the child's checks: exit %d", code);
}

/* One training row with one non-zero. */
static mfm_csr one_row(void) {
    static const uint64_t off[] = {0, 1};
    static const uint32_t feat[] = {0};
    static const float y[] = {1};
    mfm_csr d;
    memset(&d, 0, sizeof d);
    d.n_rows = 1, d.row_offsets = off, d.features = feat, d.labels = y;
    return d;
}

/* The GPU's training switches are checked like every other parameter, the list of devices for
   several GPUs included, before any GPU is asked for. */
void test_cuda_training_params(void) {
    const int twice[] = {1, 0, 1}, negative[] = {0, -1};
    const mfm_csr d = one_row();
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    memset(&p, 0, sizeof p);
    p.backend = MFM_BACKEND_CUDA;
    p.deterministic = 2;
    CHECK(mfm_train(&p, &d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "deterministic = 2") && m == NULL, "deterministic 2: %s", e.message);
    p.deterministic = 1;
    p.backend = (mfm_backend)7;
    CHECK(mfm_train(&p, &d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "backend"), "backend 7: %s", e.message);
    p.backend = MFM_BACKEND_CUDA;
    p.n_devices = 3, p.devices = twice;
    CHECK(mfm_train(&p, &d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "device 1 twice") && strstr(e.message, "devices[0] and devices[2]") && !m,
          "device 1 twice: %s", e.message);
    p.n_devices = 2, p.devices = negative;
    CHECK(mfm_train(&p, &d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "devices[1] = -1") && !m, "device -1: %s", e.message);
    p.n_devices = MFM_MAX_DEVICES + 1, p.devices = NULL;
    CHECK(mfm_train(&p, &d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "n_devices = 17") && !m, "17 devices: %s", e.message);
    p.n_devices = 2, p.backend = MFM_BACKEND_CPU;
    CHECK(mfm_train(&p, &d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "backend is CPU") && !m, "two devices on the CPU: %s", e.message);
    mfm_model_free(m);
}

/* NCCL is looked for only where several GPUs are asked for, and first: a machine without it
   (or with a wrong MFM_NCCL_LIBRARY) says so before the driver is needed. */
static int nccl_missing_child(void) {
    const char *library = getenv("MFM_NCCL_LIBRARY");
    const mfm_csr d = one_row();
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    mfm_cuda_info info;
    int bad = 0;
    memset(&p, 0, sizeof p);
    p.backend = MFM_BACKEND_CUDA, p.n_devices = 2;
    if (mfm_train(&p, &d, &m, &e) != MFM_ERR_NCCL_UNAVAILABLE || m) bad |= 1;
    if (!strstr(e.message, library) || !strstr(e.message, strchr(library, '/') ? "no such file" : "has no ncclGetVersion")) bad |= 2;
    mfm_cuda_get_info(0, &info, NULL);
    if (info.nccl_version != 0 || info.nccl_path[0]) bad |= 4;
    { /* a path that failed may be replaced, and is then looked at afresh */
        mfm_cuda_config c;
        memset(&c, 0, sizeof c);
        c.nccl_library = "libnccl-other.so.2";
        if (mfm_cuda_configure(&c, &e) != MFM_OK) bad |= 8;
        if (mfm_train(&p, &d, &m, &e) != MFM_ERR_NCCL_UNAVAILABLE || !strstr(e.message, "libnccl-other.so.2") || strstr(e.message, library)) bad |= 16;
    }
    if (bad) printf("  no-NCCL child (%s): failed checks %#x (%s)\n", library, bad, e.message);
    return bad;
}

static int nccl_found_child(void) {
    mfm_cuda_info info;
    mfm_cuda_get_info(0, &info, NULL);
    if (info.nccl_version) printf("  NCCL %d found: %s\n", info.nccl_version, info.nccl_path);
    else printf("  (this machine has no NCCL where the library looks: nothing to check)\n");
    return info.nccl_version && (info.nccl_version < 2000 || !strstr(info.nccl_path, "libnccl.so.2")) ? 1 : 0; /* 2.x: 2000 and up (2.9 on: 20900 and up) */
}

void test_cuda_nccl_loader(void) {
    CHECK(in_child("MFM_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", nccl_missing_child) == 0, "MFM_NCCL_LIBRARY names no file");
    CHECK(in_child("MFM_NCCL_LIBRARY", "libm.so.6", nccl_missing_child) == 0, "MFM_NCCL_LIBRARY names a library that is not NCCL");
    CHECK(in_child(NULL, NULL, nccl_found_child) == 0, "NCCL as found by the search");
}
