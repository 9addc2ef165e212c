/* impl.c - the one translation unit that compiles the library's implementation. */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

/* The library's internal checksum, for tests that craft binary files with a valid one
   (declared in ref.h). */
#include <stddef.h>
#include <stdint.h>
uint64_t test_checksum(const void *data, size_t n);
uint64_t test_checksum(const void *data, size_t n) { return mfm__checksum(data, n); }
