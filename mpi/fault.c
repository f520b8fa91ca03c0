#include "env.h"
#include "mpi_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int ckpt__mpi_error(int mpi_rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", mpi_rc);
    return ckpt__error(CKPT_EMPI, "%s failed: %s", what, text);
}

int ckpt__fault(int rank, const char *step)
{
    int target, mode;
    char at[16];
    int rc = ckpt__fault_spec(&target, at, sizeof at, &mode);
    if (rc != CKPT_OK || target != rank || strcmp(at, step) != 0)
        return rc;
    if (mode == 2) {
        /* ":hold" at "write" is ckpt__fault_hold's (released when the saver gives up); at any
         * other step the rank says so and waits there, at most 120 s, then goes on: a test kills
         * its node (or the job) meanwhile, at a known point (tests/cluster/test_cluster.sh) */
        if (strcmp(step, "write") == 0)
            return CKPT_OK;
        fprintf(stderr, "[mpickpt rank %d] MPICKPT_FAULT: holding this rank at %s\n", rank, step);
        fflush(stderr);
        const struct timespec ms = { 0, 10000000 };
        for (int i = 0; i < 12000; i++)
            nanosleep(&ms, NULL);
        return CKPT_OK;
    }
    if (mode == 1) {
        fprintf(stderr, "[mpickpt rank %d] MPICKPT_FAULT: killing this rank at %s\n", rank, step);
        fflush(stderr);
        raise(SIGKILL);
    }
    return ckpt__error(CKPT_EIO, "injected fault at %s on rank %d (MPICKPT_FAULT=%s)", step, rank,
                       getenv("MPICKPT_FAULT"));
}

void ckpt__fault_hold(int rank, const char *step, atomic_int *release)
{
    int target, mode;
    char at[16];
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    if (ckpt__fault_spec(&target, at, sizeof at, &mode) != CKPT_OK) {
        ckpt__error_restore(&keep); /* reported by ckpt__fault() at the same step */
        return;
    }
    if (mode != 2 || target != rank || strcmp(at, step) != 0)
        return;
    const struct timespec ms = { 0, 1000000 };
    for (int i = 0; i < 60000 && !atomic_load(release); i++)
        nanosleep(&ms, NULL);
}
