#include "mpi_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    const char *spec = getenv("MPICKPT_FAULT");
    if (!spec || !*spec)
        return CKPT_OK;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':');
    if (!colon)
        return CKPT_OK;
    *colon = '\0';
    char *end = NULL;
    long target = strtol(buf, &end, 10);
    if (end == buf || *end || target != rank)
        return CKPT_OK;
    char *what = colon + 1, *mode = strchr(what, ':');
    if (mode)
        *mode++ = '\0';
    if (strcmp(what, step) != 0)
        return CKPT_OK;
    if (mode && strcmp(mode, "kill") == 0) {
        fprintf(stderr, "[mpickpt rank %d] MPICKPT_FAULT: killing this rank at %s\n", rank, step);
        fflush(stderr);
        raise(SIGKILL);
    }
    return ckpt__error(CKPT_EIO, "injected fault at %s on rank %d (MPICKPT_FAULT=%s)", step, rank,
                       spec);
}
