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

/* Parses MPICKPT_FAULT strictly: "<rank>:<step>" or "<rank>:<step>:kill|hold", step one of the
 * protocol's. CKPT_OK with *target = -1 when unset; *mode 0 (fail), 1 (kill) or 2 (hold). */
int ckpt__fault_spec(int *target, char *step, size_t step_size, int *mode)
{
    /* "node": the per-node layout's node file (mpi/save_node.c); "node-merge": a leader's merge
     * of its node's fragments (the hierarchical merge, mpi/save_protocol.c); "partner": a rank
     * before it sends its partner copies (the cache level, mpi/save_levels.c); "drain": a rank
     * as a drain to the persistent directory starts (mpi/cache_drain.c); "fetch": a rank as
     * if its buffers for a cache restore's fetch could not be allocated (mpi/restore_cache.c);
     * "rebuild": a node leader as if it could not map the files it sends in a rebuild
     * (mpi/cache_rebuild.c); no effect where they do not run */
    static const char *const steps[] = { "plan", "write",      "agree",   "merge", "commit",
                                         "node", "node-merge", "partner", "drain", "fetch",
                                         "rebuild" };
    const char *spec = getenv("MPICKPT_FAULT");
    *target = -1;
    *mode = 0;
    step[0] = '\0';
    if (!spec || !*spec)
        return CKPT_OK;
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':'), *end = NULL;
    int ok = n > 0 && (size_t)n < sizeof buf && colon && colon != buf;
    long t = -1;
    if (ok) {
        *colon = '\0';
        errno = 0;
        t = strtol(buf, &end, 10);
        ok = !errno && *end == '\0' && t >= 0 && t <= 0x7fffffffL && buf[0] != '-' &&
             buf[0] != '+' && buf[0] != ' ';
    }
    char *what = ok ? colon + 1 : NULL, *how = what ? strchr(what, ':') : NULL;
    if (how) {
        *how++ = '\0';
        ok = strcmp(how, "kill") == 0 || strcmp(how, "hold") == 0;
    }
    int known = 0;
    for (size_t i = 0; ok && i < CKPT__ARRAY_LEN(steps); i++)
        known |= strcmp(what, steps[i]) == 0;
    if (!ok || !known)
        return ckpt__error(CKPT_EINVAL,
                           "MPICKPT_FAULT='%.100s' is not <rank>:<step>[:kill|:hold] with a step "
                           "among plan, write, agree, merge, commit, node, node-merge, partner, drain, "
                           "fetch, rebuild",
                           spec);
    *target = (int)t;
    *mode = !how ? 0 : strcmp(how, "kill") == 0 ? 1 : 2;
    snprintf(step, step_size, "%s", what);
    return CKPT_OK;
}

int ckpt__fault(int rank, const char *step)
{
    int target, mode;
    char at[16];
    int rc = ckpt__fault_spec(&target, at, sizeof at, &mode);
    if (rc != CKPT_OK || target != rank || strcmp(at, step) != 0 || mode == 2)
        return rc;
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
    if (ckpt__fault_spec(&target, at, sizeof at, &mode) != CKPT_OK) {
        ckpt_error_clear(); /* reported by ckpt__fault() at the same step */
        return;
    }
    if (mode != 2 || target != rank || strcmp(at, step) != 0)
        return;
    const struct timespec ms = { 0, 1000000 };
    for (int i = 0; i < 60000 && !atomic_load(release); i++)
        nanosleep(&ms, NULL);
}
