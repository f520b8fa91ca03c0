/* Sanitizer builds only: leaks one block on purpose in a program without MPI, which unwinds at
 * malloc the fast way (ckpt_asan_fast_unwind, tests/cmake/MpickptTesting.cmake). Its test passes
 * only if LeakSanitizer reports the leak with this file in the stack: leak checking is live in
 * every program that ckpt_asan_fast_unwind names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *leaked;

int main(void)
{
    char *p = malloc(4096);
    memset(p, 1, 4096);
    leaked = p;
    leaked = NULL; /* the only reference is gone */
    printf("leak_canary_serial: leaked 4096 bytes\n");
    return 0;
}
