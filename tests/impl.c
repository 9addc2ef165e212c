/* impl.c - the one translation unit that compiles the library's implementation. */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"
