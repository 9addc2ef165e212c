/* scratch.c - see scratch.h. */
#if !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif
#include "scratch.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static char dir_name[64];

/* Removes path and, where it is a directory (not a link to one), everything under it. */
static void remove_tree(const char *path) {
    struct stat st;
    DIR *d;
    struct dirent *e;
    char child[512];
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode) && (d = opendir(path)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            remove_tree(child);
        }
        closedir(d);
        rmdir(path);
        return;
    }
    remove(path);
}

const char *scratch_dir(void) {
    struct stat st;
    if (!dir_name[0]) { /* a folder of this name was left by an earlier process with this id: start empty */
        snprintf(dir_name, sizeof dir_name, "build/test-tmp-%ld", (long)getpid());
        remove_tree(dir_name);
    }
    if (stat(dir_name, &st) == 0) return dir_name;
    mkdir("build", 0777);
    if (mkdir(dir_name, 0777) != 0) return NULL;
    return dir_name;
}

void scratch_path(char *buf, size_t size, const char *name) {
    const char *d = scratch_dir();
    snprintf(buf, size, "%s/%s", d ? d : "build", name);
}

void scratch_clean(void) {
    if (dir_name[0]) remove_tree(dir_name);
}

unsigned char *read_whole_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *b = NULL;
    size_t cap = 0, n = 0, got;
    *size = 0;
    if (!f) return NULL;
    do {
        if (n + 65536 + 1 > cap) {
            unsigned char *bigger;
            cap = cap ? 2 * cap : 1 << 20;
            bigger = (unsigned char *)realloc(b, cap);
            if (!bigger) {
                free(b);
                fclose(f);
                return NULL;
            }
            b = bigger;
        }
        got = fread(b + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    fclose(f);
    b[n] = 0;
    *size = n;
    return b;
}

int write_whole_file(const char *path, const void *bytes, size_t size) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(bytes, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    return ok;
}

int count_names_containing(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}
