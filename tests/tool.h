/* tool.h - running the mfm command-line tool from the tests: the program named by the
   environment variable MFM_TOOL, else ./build/mfm (make builds it before the tests). */
#ifndef TESTS_TOOL_H
#define TESTS_TOOL_H

#include "../modern_fm.h"

#include <stddef.h>

/* The tool's path, made absolute so that commands may change directory first. */
const char *tool_path(void);

/* Runs the shell command `args` with $MFM set to the tool (so "\"$MFM\" eval m d" runs it;
   args may chain commands and redirect), stdout and stderr kept in scratch files and copied
   into out and errs (either may be NULL). Returns the exit status of the last command, or
   -1 when the shell did not exit normally. */
int tool_shell(const char *args, char *out, size_t out_size, char *errs, size_t err_size);

/* A data file the tool wrote or read, read back through the library with labels of `task`;
   NULL (a failed check) when it cannot be read. */
mfm_dataset *tool_read_data(const char *path, mfm_task task);

#endif
