/* stdio_first.c - compile check: a system header included before the implementation (the
   header asks for it first, but users slip). Built with -std=c99 and
   -Werror=implicit-function-declaration, so a POSIX function that strict C99 headers hide
   (clock_gettime, ...) must still be declared. */
#include <stdio.h>

#include "check.c"
