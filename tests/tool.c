/* tool.c - see tool.h. */
#if !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif
#include "tool.h"
#include "runner.h"
#include "scratch.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

const char *tool_path(void) {
    static char path[PATH_MAX];
    const char *name = getenv("MFM_TOOL");
    if (!name || !*name) name = "./build/mfm";
    if (!path[0] && !realpath(name, path)) snprintf(path, sizeof path, "%s", name); /* missing: the shell says so */
    return path;
}

int tool_shell(const char *args, char *out, size_t out_size, char *errs, size_t err_size) {
    char *cmd, out_path[512], err_path[512];
    unsigned char *text;
    size_t n, size = strlen(args) + 2 * sizeof out_path + PATH_MAX + 64;
    int status;
    scratch_path(out_path, sizeof out_path, "tool-shell.out");
    scratch_path(err_path, sizeof err_path, "tool-shell.err");
    if (!(cmd = (char *)malloc(size))) return -1;
    snprintf(cmd, size, "MFM='%s'; { %s ; } >%s 2>%s", tool_path(), args, out_path, err_path);
    status = system(cmd);
    free(cmd);
    if (out && out_size) out[0] = '\0';
    if (errs && err_size) errs[0] = '\0';
    if (out && out_size && (text = read_whole_file(out_path, &n)) != NULL) snprintf(out, out_size, "%s", (const char *)text), free(text);
    if (errs && err_size && (text = read_whole_file(err_path, &n)) != NULL) snprintf(errs, err_size, "%s", (const char *)text), free(text);
    remove(out_path);
    remove(err_path);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

mfm_dataset *tool_read_data(const char *path, mfm_task task) {
    mfm_read_options ro;
    mfm_dataset *ds = NULL;
    mfm_error e;
    memset(&ro, 0, sizeof ro);
    ro.task = task;
    if (!CHECK(mfm_dataset_read(path, &ro, &ds, &e) == MFM_OK, "reading %s: %s", path, e.message)) return NULL;
    return ds;
}
