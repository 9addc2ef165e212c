/* scratch.h - scratch files for the file tests: one directory per test process under build/,
   whole-file reads and writes, and clean-up. */
#ifndef TESTS_SCRATCH_H
#define TESTS_SCRATCH_H

#include <stddef.h>

/* "build/test-tmp-<pid>", created on first use, emptied first where an earlier process of the
   same id left it (NULL when it cannot be created). */
const char *scratch_dir(void);
/* buf = scratch_dir() + "/" + name. */
void scratch_path(char *buf, size_t size, const char *name);
/* Removes the scratch directory and everything in it, folders included (tests call it last). */
void scratch_clean(void);

/* The whole file in a malloc'd buffer (one spare NUL after it); NULL when it cannot be read. */
unsigned char *read_whole_file(const char *path, size_t *size);
/* Creates or replaces path with the bytes; returns 1 on success. */
int write_whole_file(const char *path, const void *bytes, size_t size);
/* Number of entries of dir whose name contains `part`. */
int count_names_containing(const char *dir, const char *part);

#endif
