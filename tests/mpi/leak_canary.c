/* Sanitizer builds only: leaks one block on purpose. Its test passes only if LeakSanitizer reports
 * the leak, which proves tests/lsan.supp hides the MPI runtime's leaks and not ours. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *leaked;

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    char *p = malloc(4096);
    memset(p, 1, 4096);
    leaked = p;
    leaked = NULL; /* the only reference is gone */
    MPI_Finalize();
    printf("leak_canary: leaked 4096 bytes\n");
    return 0;
}
