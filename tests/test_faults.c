/* test_faults.c - files under faults: every output the library and the tool write goes through
   one writer (a unique temporary file renamed into place; devices, FIFOs and standard output in
   place; links written through), and nothing that existed before is lost when a save is killed
   (kill -9, SIGINT, SIGTERM), runs out of room (RLIMIT_FSIZE), cannot be written, or races
   another writer. Also the tool's refusals: an output that is an input, --cache on a pipe or
   over a file that is no cache, --resume with options that cannot apply; a stale cache is
   caught by its digest, a failed write to standard output fails the command. Each failure is
   checked to say what and where. The tool is run as tool.h says (MFM_TOOL, else ./build/mfm). */
#if !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif
#include "../modern_fm.h"
#include "runner.h"
#include "scratch.h"
#include "testdata.h"
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEMP_MARK ".mfm.tmp-" /* in every temporary name: ".NAME.mfm.tmp-PID-RANDOM" */

/* ---- helpers ---- */

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static int same_bytes(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = read_whole_file(a, &na), *y = read_whole_file(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int file_has(const char *path, const char *text) {
    size_t n;
    unsigned char *b = read_whole_file(path, &n);
    int same = b && n == strlen(text) && memcmp(b, text, n) == 0;
    free(b);
    return same;
}

static int write_text(const char *path, const char *text) { return write_whole_file(path, text, strlen(text)); }

static int copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = read_whole_file(from, &n);
    int ok = b && write_whole_file(to, b, n);
    free(b);
    return ok;
}

static int path_mode(const char *path, mode_t *mode) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    *mode = st.st_mode;
    return 1;
}

/* Removes the temporary files a kill -9 left (nothing can remove those but the next run or a
   person), checking that each is named as one: hidden, with the mark. Returns how many. */
static int remove_temporaries_in(const char *dir) {
    char cmd[600], out[256];
    int n = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd, "ls -a %s", dir);
    if (!(f = popen(cmd, "r"))) return 0;
    while (fgets(out, sizeof out, f)) {
        char path[1024];
        out[strcspn(out, "\n")] = '\0';
        if (!strstr(out, TEMP_MARK)) continue;
        CHECK(out[0] == '.', "a temporary file is not hidden: %s", out);
        snprintf(path, sizeof path, "%s/%s", dir, out);
        remove(path);
        n++;
    }
    pclose(f);
    return n;
}

static mfm_model *new_model(uint64_t seed, uint32_t n_features, int k) {
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FM;
    p.k = k;
    p.seed = seed;
    p.init_scale = 0.5;
    if (mfm_model_create(&p, n_features, 0, 2, &m, &e) != MFM_OK) (void)CHECK(0, "mfm_model_create: %s", e.message);
    return m;
}

static int tool_present(void) {
    if (access(tool_path(), X_OK) == 0) return 1;
    runner_skip("the tool %s is not built (make builds it; MFM_TOOL names another)", tool_path());
    return 0;
}

/* Click-log-like libffm files the tests write (tests/testdata.h), and a small trained FFM model
   (g.model), for the tool. */
static int tool_files(char *train, char *test, char *model, size_t size) {
    char cmd[2048], errs[2048];
    scratch_path(train, size, "tr.ffm");
    scratch_path(test, size, "te.ffm");
    scratch_path(model, size, "g.model");
    if (!testdata_write_ffm(train, 200, 1, 0, NULL) || !testdata_write_ffm(test, 200, 2, 0, NULL))
        return CHECK(0, "cannot write the data files into %s", scratch_dir());
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --model ffm -k 4 -t 2 -l 0.001 --quiet %s %s", train, model);
    return CHECK(tool_shell(cmd, NULL, 0, errs, sizeof errs) == 0, "'%s' failed: %s", cmd, errs);
}

/* ---- the library's writer ---- */

/* mfm_output_*: a new file appears only at commit; an abort or a failure leaves the old one;
   a user's NAME.tmp is never touched; a link is written through; special files in place. */
void test_faults_output_writer(void) {
    char path[512], user_tmp[600], link[512], target[512], dir[600];
    mfm_output_file *f = NULL;
    mfm_error e;
    mfm_status st;
    mode_t mode = 0;
    const char *temp;
    scratch_path(path, sizeof path, "out.txt");
    snprintf(user_tmp, sizeof user_tmp, "%s.tmp", path);
    REQUIRE(write_text(path, "old\n") && write_text(user_tmp, "the user's own file\n"), "cannot write in %s", scratch_dir());
    chmod(path, 0640);
    /* open: the temporary file exists now, hidden and marked, beside the path */
    st = mfm_output_open(path, &f, &e);
    REQUIRE(st == MFM_OK, "mfm_output_open: %s", e.message);
    temp = mfm_output_temp_path(f);
    if (CHECK(temp != NULL, "a regular file is written through a temporary file"))
        CHECK(strstr(temp, "/.out.txt" TEMP_MARK) != NULL && access(temp, F_OK) == 0, "temporary file %s: missing or misnamed", temp);
    fputs("new\n", mfm_output_stream(f));
    CHECK(file_has(path, "old\n"), "the old file changed before the commit");
    st = mfm_output_commit(f, &e);
    CHECK(st == MFM_OK && file_has(path, "new\n"), "commit: %s", st ? e.message : "the file does not hold the new text");
    CHECK(path_mode(path, &mode) && (mode & 0777) == 0640, "the replaced file's permissions %o became %o", 0640, (unsigned)(mode & 0777));
    CHECK(file_has(user_tmp, "the user's own file\n"), "the user's %s was touched", user_tmp);
    CHECK(count_names_containing(scratch_dir(), TEMP_MARK) == 0, "a committed output left its temporary file");
    /* abort: nothing changes */
    REQUIRE(mfm_output_open(path, &f, &e) == MFM_OK, "%s", e.message);
    fputs("half", mfm_output_stream(f));
    mfm_output_abort(f);
    CHECK(file_has(path, "new\n") && count_names_containing(scratch_dir(), TEMP_MARK) == 0, "abort changed the file or left its temporary file");
    /* a link: the file it names is replaced, the link stays; a dangling link makes its target */
    scratch_path(link, sizeof link, "link.txt");
    scratch_path(target, sizeof target, "target.txt");
    REQUIRE(write_text(target, "target\n") && symlink("target.txt", link) == 0, "cannot make a link: %s", strerror(errno));
    REQUIRE(mfm_output_open(link, &f, &e) == MFM_OK, "%s", e.message);
    fputs("through\n", mfm_output_stream(f));
    CHECK(mfm_output_commit(f, &e) == MFM_OK, "%s", e.message);
    CHECK(path_mode(link, &mode) && S_ISLNK(mode) && file_has(target, "through\n"), "writing through a link replaced the link or missed its target");
    remove(target);
    REQUIRE(mfm_output_open(link, &f, &e) == MFM_OK, "a dangling link: %s", e.message);
    fputs("made\n", mfm_output_stream(f));
    CHECK(mfm_output_commit(f, &e) == MFM_OK && path_mode(link, &mode) && S_ISLNK(mode) && file_has(target, "made\n"), "a dangling link's target was not made");
    /* standard output and /dev/null in place; /dev/null stays a device (the issue: as root it
       was replaced by a regular file) */
    REQUIRE(mfm_output_open("/dev/null", &f, &e) == MFM_OK, "/dev/null: %s", e.message);
    CHECK(mfm_output_temp_path(f) == NULL, "/dev/null is written in place");
    fputs("x\n", mfm_output_stream(f));
    CHECK(mfm_output_commit(f, &e) == MFM_OK, "%s", e.message);
    CHECK(path_mode("/dev/null", &mode) && S_ISCHR(mode), "/dev/null is no longer a character device");
    CHECK(count_names_containing("/dev", TEMP_MARK) == 0, "a temporary file was made in /dev");
    REQUIRE(mfm_output_open("-", &f, &e) == MFM_OK && mfm_output_stream(f) == stdout && mfm_output_temp_path(f) == NULL, "\"-\" is standard output");
    CHECK(mfm_output_commit(f, &e) == MFM_OK, "%s", e.message);
    /* a write error in place: reported with the path and the reason */
    if (access("/dev/full", W_OK) == 0) {
        REQUIRE(mfm_output_open("/dev/full", &f, &e) == MFM_OK, "/dev/full: %s", e.message);
        fputs("x\n", mfm_output_stream(f));
        st = mfm_output_commit(f, &e);
        CHECK(st == MFM_ERR_IO && strstr(e.message, "/dev/full") && strstr(e.message, strerror(ENOSPC)), "/dev/full: %d %s", (int)st, e.message);
    }
    /* refused untouched: a folder, an empty path, a path under a file (what a read-only place
       looks like to root, who passes every permission check) */
    scratch_path(dir, sizeof dir, "folder");
    REQUIRE(mkdir(dir, 0777) == 0, "mkdir %s", dir);
    st = mfm_output_open(dir, &f, &e);
    CHECK(st == MFM_ERR_IO && f == NULL && strstr(e.message, dir) && strstr(e.message, "directory"), "a folder: %d %s", (int)st, e.message);
    rmdir(dir);
    st = mfm_output_open("", &f, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT && f == NULL, "an empty path: %d", (int)st);
    snprintf(dir, sizeof dir, "%s/m.model", path);
    st = mfm_output_open(dir, &f, &e);
    CHECK(st == MFM_ERR_IO && strstr(e.message, dir) && strstr(e.message, strerror(ENOTDIR)), "a path under a file: %d %s", (int)st, e.message);
    CHECK(file_has(path, "new\n"), "a refused output touched %s", path);
    scratch_clean();
}

/* A read-only folder: EACCES, the old file kept. Root passes permission checks, so there only
   the path-under-a-file case above runs. */
/* The save into a read-only folder, as a user whom the folder refuses: as root (CI runs as
   root, and root writes anywhere) in a child that became the unprivileged user 65534 first.
   0 when the save failed with EACCES and a sentence naming the path. */
static int save_refused(const mfm_model *m, const char *path) {
    mfm_error e;
    mfm_status st;
    pid_t pid;
    int status = 0;
    if (geteuid() != 0) {
        st = mfm_model_save(m, path, 0, &e);
        return CHECK(st == MFM_ERR_IO && strstr(e.message, path) && strstr(e.message, strerror(EACCES)), "a read-only folder: %d %s", (int)st, e.message)
                   ? 0
                   : 1;
    }
    fflush(stdout);
    if ((pid = fork()) == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        st = mfm_model_save(m, path, 0, &e);
        if (st == MFM_ERR_IO && strstr(e.message, path) && strstr(e.message, strerror(EACCES))) _exit(0);
        printf("  as user 65534, a save into a read-only folder gave %d: %s\n", (int)st, e.message);
        fflush(stdout);
        _exit(1);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return CHECK(0, "the unprivileged child did not finish"), 1;
    if (WEXITSTATUS(status) == 3) {
        runner_skip("running as root and cannot become user 65534 to meet a read-only folder");
        return 0;
    }
    return CHECK(WEXITSTATUS(status) == 0, "a read-only folder refused the save with EACCES, naming the path (see above)") ? 0 : 1;
}

void test_faults_unwritable_folder(void) {
    char dir[512], path[600];
    mfm_model *m = new_model(1, 100, 4);
    mfm_error e;
    if (!m) return;
    scratch_path(dir, sizeof dir, "ro");
    snprintf(path, sizeof path, "%s/m.model", dir);
    if (CHECK(mkdir(dir, 0777) == 0 && mfm_model_save(m, path, 1, &e) == MFM_OK, "set-up") && CHECK(chmod(dir, 0555) == 0, "chmod")) {
        size_t before, after;
        unsigned char *old = read_whole_file(path, &before), *now;
        save_refused(m, path);
        now = read_whole_file(path, &after);
        CHECK(old && now && before == after && memcmp(old, now, before) == 0, "the old model changed");
        CHECK(count_names_containing(dir, TEMP_MARK) == 0, "a temporary file was left in the folder");
        free(old);
        free(now);
        chmod(dir, 0777);
    }
    remove(path);
    rmdir(dir);
    mfm_model_free(m);
    scratch_clean();
}

/* The set-up of the interrupted saves: model a saved at `name` (the file a save in progress
   replaces), and a and b saved as references (a.ref, b.ref) to compare the survivor with. */
static int two_models_saved(const mfm_model *a, const mfm_model *b, const char *name, char path[512], char ref_a[512], char ref_b[512]) {
    mfm_error e;
    scratch_path(path, 512, name);
    scratch_path(ref_a, 512, "a.ref");
    scratch_path(ref_b, 512, "b.ref");
    return CHECK(mfm_model_save(a, ref_a, 1, &e) == MFM_OK && mfm_model_save(b, ref_b, 1, &e) == MFM_OK && mfm_model_save(a, path, 1, &e) == MFM_OK,
                 "set-up saves: %s", e.message);
}

/* kill -9 at random moments of saves: the file at the path is always a whole model, the old
   one or the new one, and the temporary files left behind are hidden and marked. */
void test_faults_kill_during_save(void) {
    char path[512], ref_a[512], ref_b[512];
    mfm_model *a = new_model(11, 60000, 8), *b = new_model(12, 60000, 8);
    int i, left = 0, saw_b = 0;
    unsigned seed = 12345;
    if (!a || !b) goto done;
    if (!two_models_saved(a, b, "kill.model", path, ref_a, ref_b)) goto done;
    for (i = 0; i < 24; i++) {
        int status;
        pid_t pid = fork();
        if (pid == 0) { /* saves the two models in turn until killed */
            int n;
            for (n = 0;; n++) mfm_model_save(n % 2 ? a : b, path, 1, NULL);
        }
        if (!CHECK(pid > 0, "fork: %s", strerror(errno))) break;
        seed = seed * 1103515245u + 12345u;
        sleep_ms((long)(seed >> 16) % 40);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (!CHECK(same_bytes(path, ref_a) || same_bytes(path, ref_b), "after kill -9 number %d the file is neither model", i + 1)) break;
        saw_b |= same_bytes(path, ref_b);
        left += remove_temporaries_in(scratch_dir());
    }
    CHECK(saw_b, "no save completed in 24 runs: the test does not test");
    (void)left; /* some runs die mid-save: their temporary files are left, hidden and marked */
done:
    mfm_model_free(a);
    mfm_model_free(b);
    scratch_clean();
}

/* SIGTERM and SIGINT during saves, in a process that handles them as the tool does: no
   temporary file is left, and the file is a whole model. */
static void remove_and_reraise(int sig) {
    mfm_output_remove_temporaries();
    signal(sig, SIG_DFL);
    raise(sig);
}

void test_faults_signal_during_save(void) {
    char path[512], ref_a[512], ref_b[512];
    mfm_model *a = new_model(21, 60000, 8), *b = new_model(22, 60000, 8);
    int i;
    unsigned seed = 777;
    if (!a || !b) goto done;
    if (!two_models_saved(a, b, "sig.model", path, ref_a, ref_b)) goto done;
    for (i = 0; i < 16; i++) {
        int status, sig = i % 2 ? SIGINT : SIGTERM;
        pid_t pid = fork();
        if (pid == 0) {
            int n;
            signal(SIGINT, remove_and_reraise);
            signal(SIGTERM, remove_and_reraise);
            for (n = 0;; n++) mfm_model_save(n % 2 ? a : b, path, 1, NULL);
        }
        if (!CHECK(pid > 0, "fork: %s", strerror(errno))) break;
        seed = seed * 1103515245u + 12345u;
        sleep_ms(5 + (long)(seed >> 16) % 30);
        kill(pid, sig);
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sig, "the saver did not die of signal %d", sig);
        if (!CHECK(count_names_containing(scratch_dir(), TEMP_MARK) == 0, "signal %d during a save left a temporary file (run %d)", sig, i + 1)) break;
        if (!CHECK(same_bytes(path, ref_a) || same_bytes(path, ref_b), "after signal %d the file is neither model", sig)) break;
    }
done:
    remove_temporaries_in(scratch_dir());
    mfm_model_free(a);
    mfm_model_free(b);
    scratch_clean();
}

/* Past RLIMIT_FSIZE a write fails with EFBIG (the disk-full path): the library says which file
   and why, keeps the old file and removes its temporary file; the same through the tool. */
void test_faults_file_size_limit(void) {
    char path[512], train[512], test[512], model[512], cmd[2048], errs[2048], keep[512];
    mfm_model *small = new_model(31, 10, 2), *big = new_model(32, 200000, 8);
    mfm_error e;
    int status, rc;
    pid_t pid;
    if (!small || !big) goto done;
    scratch_path(path, sizeof path, "limit.model");
    if (!CHECK(mfm_model_save(small, path, 1, &e) == MFM_OK, "%s", e.message)) goto done;
    pid = fork();
    if (pid == 0) {
        struct rlimit lim;
        mfm_error ce;
        mfm_status st;
        signal(SIGXFSZ, SIG_IGN);
        getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = 100000;
        setrlimit(RLIMIT_FSIZE, &lim);
        st = mfm_model_save(big, path, 1, &ce);
        _exit(st == MFM_ERR_IO && strstr(ce.message, path) && strstr(ce.message, strerror(EFBIG)) && strstr(ce.message, "unchanged") ? 0 : 1);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a save past the size limit did not fail with a message naming the file and EFBIG");
    CHECK(count_names_containing(scratch_dir(), TEMP_MARK) == 0, "the failed save left its temporary file");
    {
        mfm_model_file_info fi;
        if (CHECK(mfm_model_file_inspect(path, &fi, &e) == MFM_OK, "the old model is lost: %s", e.message))
            CHECK(fi.model.n_features == 10, "the old model was replaced");
    }
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    scratch_path(keep, sizeof keep, "keep.model");
    copy_file(model, keep);
    snprintf(cmd, sizeof cmd, "ulimit -f 64; \"$MFM\" train --model ffm -k 8 --features 40000 -t 1 --quiet %s %s", train, model);
    rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, model) && strstr(errs, strerror(EFBIG)), "the tool past the size limit: exit %d, %s", rc, errs);
    CHECK(same_bytes(model, keep) && count_names_containing(scratch_dir(), TEMP_MARK) == 0, "the tool lost the old model or left a temporary file");
done:
    mfm_model_free(small);
    mfm_model_free(big);
    scratch_clean();
}

/* Two processes writing one output at once: the result is one writer's whole text, never a mix. */
void test_faults_concurrent_writers(void) {
    char path[512];
    static char text[2][200001];
    int round, i;
    scratch_path(path, sizeof path, "both.txt");
    for (i = 0; i < 2; i++) {
        memset(text[i], i ? 'b' : 'a', sizeof text[i] - 1);
        text[i][sizeof text[i] - 1] = '\0';
    }
    for (round = 0; round < 8; round++) {
        pid_t pid[2];
        int status, failed = 0;
        for (i = 0; i < 2; i++)
            if ((pid[i] = fork()) == 0) {
                mfm_output_file *f;
                size_t at;
                if (mfm_output_open(path, &f, NULL) != MFM_OK) _exit(1);
                for (at = 0; at < sizeof text[i] - 1; at += 1000) fwrite(text[i] + at, 1, 1000, mfm_output_stream(f)), fflush(mfm_output_stream(f));
                _exit(mfm_output_commit(f, NULL) == MFM_OK ? 0 : 1);
            }
        for (i = 0; i < 2; i++) waitpid(pid[i], &status, 0), failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        CHECK(failed == 0, "a writer failed (round %d)", round + 1);
        if (!CHECK(file_has(path, text[0]) || file_has(path, text[1]), "round %d: the output is not one writer's text", round + 1)) break;
    }
    CHECK(count_names_containing(scratch_dir(), TEMP_MARK) == 0, "a temporary file was left");
    scratch_clean();
}

/* A FIFO is written in place: its reader gets every byte and the FIFO stays a FIFO. */
void test_faults_fifo_output(void) {
    char fifo[512], got[512];
    mfm_output_file *f;
    mfm_error e;
    mode_t mode;
    int status;
    pid_t pid;
    scratch_path(fifo, sizeof fifo, "pipe");
    scratch_path(got, sizeof got, "got.txt");
    REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    if ((pid = fork()) == 0) {
        size_t n;
        unsigned char *b = read_whole_file(fifo, &n);
        _exit(b && write_whole_file(got, b, n) ? 0 : 1);
    }
    REQUIRE(mfm_output_open(fifo, &f, &e) == MFM_OK, "%s", e.message);
    CHECK(mfm_output_temp_path(f) == NULL, "a FIFO is written in place");
    fputs("through the pipe\n", mfm_output_stream(f));
    CHECK(mfm_output_commit(f, &e) == MFM_OK, "%s", e.message);
    waitpid(pid, &status, 0);
    CHECK(file_has(got, "through the pipe\n"), "the FIFO's reader did not get the text");
    CHECK(path_mode(fifo, &mode) && S_ISFIFO(mode), "the FIFO was replaced");
    scratch_clean();
}

/* ---- the tool ---- */

/* predict to /dev/null, a FIFO, /dev/stdout and a link; a user's OUT.tmp is left alone; two
   predictions to one OUT give one model's rows, never a mix. */
/* An output that names an open descriptor (/dev/stderr, /dev/fd/N, or a link to one) is written
   through it: a file the shell redirected it to keeps its inode and its earlier lines (it used
   to be replaced by a new file holding only the predictions). */
void test_faults_tool_descriptor_outputs(void) {
    static const char *const cases[3][2] = {{"/dev/stderr", "2>>"}, {"/dev/fd/1", ">>"}, {"LINK", "2>>"}};
    char train[512], test[512], model[512], ref[512], log[512], link[512], cmd[4096], errs[2048], want[70000];
    int i;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    scratch_path(ref, sizeof ref, "ref.txt");
    scratch_path(log, sizeof log, "redirected.log");
    scratch_path(link, sizeof link, "to-stderr");
    snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s %s", model, test, ref);
    if (!CHECK(tool_shell(cmd, NULL, 0, errs, sizeof errs) == 0, "set-up: %s", errs) || !CHECK(symlink("/dev/stderr", link) == 0, "symlink")) goto done;
    for (i = 0; i < 3; i++) {
        struct stat before, after;
        size_t n = 0;
        unsigned char *rows = read_whole_file(ref, &n);
        const char *out = strcmp(cases[i][0], "LINK") ? cases[i][0] : link;
        if (!CHECK(rows && n + 5 < sizeof want && write_whole_file(log, "OLD\n", 4) && stat(log, &before) == 0, "set-up %d", i)) {
            free(rows);
            continue;
        }
        memcpy(want, "OLD\n", 4);
        memcpy(want + 4, rows, n);
        want[4 + n] = '\0';
        free(rows);
        snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s %s %s %s", model, test, out, cases[i][1], log);
        CHECK(tool_shell(cmd, NULL, 0, errs, sizeof errs) == 0, "predict to %s %s log: %s", cases[i][0], cases[i][1], errs);
        CHECK(stat(log, &after) == 0 && after.st_ino == before.st_ino, "predict to %s replaced the file the shell redirected it to", cases[i][0]);
        rows = read_whole_file(log, &n); /* the old line, the rows, then (through standard error) the metrics */
        CHECK(rows && n >= strlen(want) && memcmp(rows, want, strlen(want)) == 0, "predict to %s %s log: the log should hold its old line and then the rows",
              cases[i][0], cases[i][1]);
        free(rows);
    }
done:
    scratch_clean();
}

void test_faults_tool_outputs(void) {
    char train[512], test[512], model[512], other[512], out[512], cmd[8192], errs[2048], ref1[512], ref2[512], link[512], user_tmp[600], fifo[512];
    static char stdout_text[65536];
    mode_t mode;
    int rc, round;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    scratch_path(other, sizeof other, "other.model");
    scratch_path(out, sizeof out, "p.txt");
    scratch_path(ref1, sizeof ref1, "ref1.txt");
    scratch_path(ref2, sizeof ref2, "ref2.txt");
    snprintf(cmd, sizeof cmd,
             "\"$MFM\" train --model ffm -k 4 -t 1 --seed 9 --quiet %s %s && \"$MFM\" predict %s %s %s && \"$MFM\" predict %s %s %s", train, other,
             model, test, ref1, other, test, ref2);
    if (!CHECK(tool_shell(cmd, NULL, 0, errs, sizeof errs) == 0, "set-up: %s", errs)) goto done;
    /* /dev/null and /dev/stdout: in place */
    snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s /dev/null", model, test);
    rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
    CHECK(rc == 0 && path_mode("/dev/null", &mode) && S_ISCHR(mode), "predict to /dev/null: exit %d %s", rc, errs);
    snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s /dev/stdout", model, test);
    rc = tool_shell(cmd, stdout_text, sizeof stdout_text, errs, sizeof errs);
    CHECK(rc == 0 && file_has(ref1, stdout_text), "predict to /dev/stdout: exit %d %s", rc, errs);
    /* a FIFO's reader gets every row */
    scratch_path(fifo, sizeof fifo, "rows.fifo");
    if (CHECK(mkfifo(fifo, 0600) == 0, "mkfifo")) {
        snprintf(cmd, sizeof cmd, "cat %s > %s.got & \"$MFM\" predict %s %s %s; wait", fifo, fifo, model, test, fifo);
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        snprintf(cmd, sizeof cmd, "%s.got", fifo);
        CHECK(rc == 0 && same_bytes(cmd, ref1) && path_mode(fifo, &mode) && S_ISFIFO(mode), "predict to a FIFO: exit %d %s", rc, errs);
    }
    /* a link is written through; OUT.tmp of the user is not touched */
    scratch_path(link, sizeof link, "link.txt");
    snprintf(user_tmp, sizeof user_tmp, "%s.tmp", out);
    if (CHECK(symlink("p.txt", link) == 0 && write_text(user_tmp, "mine\n"), "set-up")) {
        snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s %s", model, test, link);
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        CHECK(rc == 0 && path_mode(link, &mode) && S_ISLNK(mode) && same_bytes(out, ref1), "predict through a link: exit %d %s", rc, errs);
        CHECK(file_has(user_tmp, "mine\n"), "the user's %s was touched", user_tmp);
    }
    /* two predictions at once */
    for (round = 0; round < 4; round++) {
        snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s %s & \"$MFM\" predict %s %s %s & wait %%1; a=$?; wait %%2; b=$?; test $a = 0 -a $b = 0", model,
                 test, out, other, test, out);
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        CHECK(rc == 0, "two predictions to one OUT: %s", errs);
        if (!CHECK(same_bytes(out, ref1) || same_bytes(out, ref2), "two predictions to one OUT left a mix (round %d)", round + 1)) break;
    }
    CHECK(count_names_containing(scratch_dir(), TEMP_MARK) == 0, "a temporary file was left");
done:
    scratch_clean();
}

/* An output that is an input is refused before any work, by path or by inode (a link). */
void test_faults_tool_same_file(void) {
    char train[512], test[512], model[512], cmd[4096], errs[2048], alias[512], alias_model[512], keep[512], keep_model[512], cache[600];
    int rc, i, by_link;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    scratch_path(alias, sizeof alias, "alias.ffm");
    scratch_path(alias_model, sizeof alias_model, "alias.model");
    scratch_path(keep, sizeof keep, "keep.ffm");
    scratch_path(keep_model, sizeof keep_model, "keep.model");
    if (!CHECK(symlink("te.ffm", alias) == 0 && symlink("g.model", alias_model) == 0 && copy_file(test, keep) && copy_file(model, keep_model), "set-up"))
        goto done;
    for (i = 0; i < 4; i++)
        for (by_link = 0; by_link < 2; by_link++) {
            const char *out = by_link ? alias : test, *input = "DATA";
            if (i == 0) snprintf(cmd, sizeof cmd, "\"$MFM\" train -t 1 --quiet %s %s", test, out), input = "TRAIN";
            if (i == 1) snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s %s", model, test, out);
            if (i == 2) out = by_link ? alias_model : model, snprintf(cmd, sizeof cmd, "\"$MFM\" predict %s %s %s", model, test, out), input = "MODEL";
            if (i == 3) snprintf(cmd, sizeof cmd, "\"$MFM\" convert %s %s", test, out), input = "IN";
            rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
            CHECK(rc == 2 && strstr(errs, "same file") && strstr(errs, input) && strstr(errs, out), "'%s': exit %d, %s", cmd, rc, errs);
        }
    CHECK(same_bytes(test, keep) && same_bytes(model, keep_model), "a refused command changed its input");
    /* --cache never overwrites what is not a dataset cache: a model named TRAIN.mfmd */
    snprintf(cache, sizeof cache, "%s.mfmd", train);
    if (CHECK(copy_file(model, cache), "set-up")) {
        snprintf(cmd, sizeof cmd, "\"$MFM\" train --cache -t 1 --quiet %s %s/c.model", train, scratch_dir());
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        CHECK(rc == 1 && strstr(errs, cache) && strstr(errs, "not a modern_fm dataset cache") && same_bytes(cache, model), "--cache over a model: exit %d, %s", rc,
              errs);
        remove(cache);
        snprintf(cmd, sizeof cmd, "\"$MFM\" train --cache -t 1 --quiet %s %s", train, cache);
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        CHECK(rc == 2 && strstr(errs, "same file"), "MODEL = the --cache file: exit %d, %s", rc, errs);
    }
done:
    scratch_clean();
}

/* MODEL is checked, and its temporary file made, before training: a bad path fails at once. */
void test_faults_tool_model_path_first(void) {
    char train[512], test[512], model[512], cmd[2048], out[4096], errs[2048];
    static const char *const bad[] = {"/nonexistent/m.model", "''", "%s/m.model"};
    size_t i;
    int rc;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[600];
        snprintf(path, sizeof path, bad[i], train); /* the last: a path under a file */
        snprintf(cmd, sizeof cmd, "\"$MFM\" train -t 50 %s %s", train, path);
        rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 1 && strstr(out, "epoch") == NULL, "'%s': exit %d, trained before failing: %s", cmd, rc, out);
        CHECK(i == 1 ? strstr(errs, "empty") != NULL : strstr(errs, path) != NULL, "'%s' says %s", cmd, errs);
    }
done:
    scratch_clean();
}

/* SIGINT and SIGTERM while the tool trains (its temporary MODEL file exists from the start):
   the temporary file goes, the old MODEL stays. */
void test_faults_tool_signals(void) {
    char train[512], test[512], model[512], keep[512], big[512];
    int i;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    scratch_path(keep, sizeof keep, "keep.model");
    scratch_path(big, sizeof big, "big.ffm");
    copy_file(model, keep);
    {   /* enough rows that 1000 epochs outlast the signal */
        size_t n, r;
        unsigned char *b = read_whole_file(train, &n);
        FILE *f = fopen(big, "wb");
        for (r = 0; b && f && r < 20; r++) fwrite(b, 1, n, f);
        if (f) fclose(f);
        free(b);
    }
    for (i = 0; i < 2; i++) {
        int sig = i ? SIGTERM : SIGINT, status, temps = 0, waited;
        pid_t pid = fork();
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            signal(SIGINT, SIG_DFL);
            execl(tool_path(), "mfm", "train", "-t", "100000", "--quiet", big, model, (char *)NULL);
            _exit(127);
        }
        if (!CHECK(pid > 0, "fork")) break;
        for (waited = 0; waited < 5000 && !temps; waited += 20) { /* until the temporary file exists */
            sleep_ms(20);
            temps = count_names_containing(scratch_dir(), TEMP_MARK);
        }
        CHECK(temps == 1, "no temporary MODEL file while training");
        sleep_ms(50);
        kill(pid, sig);
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sig, "the tool did not die of signal %d (status %d)", sig, status);
        CHECK(count_names_containing(scratch_dir(), TEMP_MARK) == 0, "signal %d left the temporary MODEL file", sig);
        CHECK(same_bytes(model, keep), "signal %d changed the old MODEL", sig);
    }
done:
    remove_temporaries_in(scratch_dir());
    scratch_clean();
}

/* --cache: fresh only while the text's digest matches (the same size and mtime do not fool it),
   never for a FIFO or standard input; an old cache without a digest is rebuilt. */
void test_faults_tool_cache_digest(void) {
    char train[512], test[512], model[512], cache[600], cmd[2048], out[4096], errs[2048], fifo[512];
    mfm_dataset *text = NULL, *bin = NULL;
    mfm_dataset_info ti, bi;
    struct stat st;
    uint64_t digest = 0;
    size_t n;
    unsigned char *b;
    int rc;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    snprintf(cache, sizeof cache, "%s.mfmd", train);
    /* the library: the digest taken while parsing is the file's, and the cache records it */
    if (CHECK(mfm_dataset_read(train, NULL, &text, NULL) == MFM_OK && mfm_file_digest(train, &digest, NULL) == MFM_OK, "read")) {
        mfm_dataset_get_info(text, &ti);
        CHECK(ti.source_digest == digest && digest != 0, "the parse's digest %llx is not the file's %llx", (unsigned long long)ti.source_digest,
              (unsigned long long)digest);
        if (CHECK(mfm_dataset_write_cache(text, cache, train, NULL) == MFM_OK && mfm_dataset_read(cache, NULL, &bin, NULL) == MFM_OK, "cache")) {
            mfm_dataset_get_info(bin, &bi);
            CHECK(bi.source_digest == digest, "the cache records digest %llx, not %llx", (unsigned long long)bi.source_digest, (unsigned long long)digest);
        }
    }
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --cache -t 1 %s %s/c.model", train, scratch_dir());
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "using the cache"), "a fresh cache was not used: exit %d %s %s", rc, out, errs);
    /* the same size and mtime, other labels: rebuilt */
    stat(train, &st);
    if (CHECK((b = read_whole_file(train, &n)) != NULL, "read")) {
        struct timespec times[2];
        b[0] = b[0] == '0' ? '1' : '0';
        write_whole_file(train, b, n);
        free(b);
        times[0] = st.st_atim;
        times[1] = st.st_mtim;
        utimensat(AT_FDCWD, train, times, 0);
        rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 0 && !strstr(out, "using the cache"), "an edited file with the old size and mtime used the stale cache: %s", out);
        mfm_dataset_free(bin);
        bin = NULL;
        if (CHECK(mfm_dataset_read(cache, NULL, &bin, NULL) == MFM_OK && mfm_file_digest(train, &digest, NULL) == MFM_OK, "read the cache")) {
            mfm_dataset_get_info(bin, &bi);
            CHECK(bi.source_digest == digest && (mfm_dataset_csr(bin).labels[0] == 1.0f) == (mfm_dataset_csr(text).labels[0] == 0.0f),
                  "the rebuilt cache does not hold the new labels");
        }
    }
    /* a cache without a digest (an earlier version's, or a plain binary file) is rebuilt */
    if (text) {
        mfm_csr csr = mfm_dataset_csr(text);
        CHECK(mfm_dataset_write(&csr, cache, MFM_FORMAT_BINARY, NULL) == MFM_OK, "write a binary file");
        rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 0 && !strstr(out, "using the cache"), "a cache without a digest was used: %s", out);
    }
    /* a FIFO and standard input are never cached (and the FIFO is not left waiting) */
    scratch_path(fifo, sizeof fifo, "train.fifo");
    if (CHECK(mkfifo(fifo, 0600) == 0, "mkfifo")) {
        snprintf(cmd, sizeof cmd, "\"$MFM\" train --cache -t 1 %s %s/f.model", fifo, scratch_dir());
        rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 2 && strstr(errs, fifo) && strstr(errs, "--cache"), "--cache on a FIFO: exit %d %s", rc, errs);
    }
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --cache -t 1 - %s/s.model < %s", scratch_dir(), train);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && strstr(errs, "--cache"), "--cache on standard input: exit %d %s", rc, errs);
done:
    mfm_dataset_free(text);
    mfm_dataset_free(bin);
    scratch_clean();
}

/* --resume refuses what cannot apply, naming it; explicit values (zeros too) apply; without
   MODEL the result goes to TRAIN + ".model" and the resumed file stays as it was. */
void test_faults_tool_resume(void) {
    char train[512], test[512], model[512], keep[512], cmd[2048], errs[2048], made[512];
    static const char *const refused[][2] = {
        {"--model fm", "--model"},       {"--optimizer sgd", "--optimizer"}, {"--task regression", "--task"}, {"--normalize", "--normalize"},
        {"--pairs-only", "--pairs-only"}, {"--features 99999", "--features"}, {"--fields 99", "--fields"},     {"-k 4", "-k"},
        {"--seed 3", "--seed"},           {"--init-scale 1", "--init-scale"}, {"--libffm", "--libffm"},
    };
    mfm_model_file_info fi;
    size_t i;
    int rc;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    scratch_path(keep, sizeof keep, "keep.model");
    copy_file(model, keep);
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(cmd, sizeof cmd, "\"$MFM\" train --resume %s %s -t 1 --quiet %s %s/r.model", model, refused[i][0], train, scratch_dir());
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        CHECK(rc == 2 && strstr(errs, refused[i][1]) && strstr(errs, "resume"), "'%s': exit %d, %s", cmd, rc, errs);
    }
    CHECK(count_names_containing(scratch_dir(), "r.model") == 0, "a refused --resume wrote a model");
    /* -l 0 on a model trained with -l 0.001: applied */
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --resume %s -l 0 -t 1 --quiet %s %s/r.model", model, train, scratch_dir());
    rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
    snprintf(made, sizeof made, "%s/r.model", scratch_dir());
    if (CHECK(rc == 0 && mfm_model_file_inspect(made, &fi, NULL) == MFM_OK, "'%s': %s", cmd, errs))
        CHECK(fi.params.l2_linear == 0 && fi.params.l2_factors == 0, "-l 0 was dropped: l2 %g / %g", fi.params.l2_linear, fi.params.l2_factors);
    /* no MODEL: TRAIN's name + ".model" in the current directory; the resumed file unchanged */
    snprintf(cmd, sizeof cmd, "cd %s && \"$MFM\" train --resume g.model -t 1 --quiet tr.ffm", scratch_dir());
    rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
    scratch_path(made, sizeof made, "tr.ffm.model");
    CHECK(rc == 0 && mfm_model_file_inspect(made, &fi, NULL) == MFM_OK, "--resume without MODEL did not write TRAIN.model: %s", errs);
    CHECK(same_bytes(model, keep), "--resume without MODEL overwrote the resumed model");
done:
    scratch_clean();
}

/* A failed write to standard output fails every command (exit 1, the reason said). */
void test_faults_tool_stdout_errors(void) {
    char train[512], test[512], model[512], cmd[2048], errs[2048];
    static const char *const commands[] = {"eval %s %s", "info %s", "predict %s %s -", "convert %s -", "train -t 1 %s %s/t.model", "--help", "--version"};
    size_t i;
    int rc;
    if (!tool_present() || !tool_files(train, test, model, sizeof train)) goto done;
    if (access("/dev/full", W_OK) != 0) {
        runner_skip("no /dev/full on this system");
        goto done;
    }
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        char args[1024];
        if (i == 0 || i == 2) snprintf(args, sizeof args, commands[i], model, test);
        else if (i == 1) snprintf(args, sizeof args, commands[i], model);
        else if (i == 3) snprintf(args, sizeof args, commands[i], test);
        else if (i == 4) snprintf(args, sizeof args, commands[i], train, scratch_dir());
        else snprintf(args, sizeof args, "%s", commands[i]);
        snprintf(cmd, sizeof cmd, "\"$MFM\" %s > /dev/full", args);
        rc = tool_shell(cmd, NULL, 0, errs, sizeof errs);
        CHECK(rc == 1 && strstr(errs, "standard output") && strstr(errs, strerror(ENOSPC)), "'mfm %s > /dev/full': exit %d, %s", args, rc, errs);
    }
done:
    scratch_clean();
}
