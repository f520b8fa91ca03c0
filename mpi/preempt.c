/*
 * Preemption (mpickpt/preempt.h): signal handlers that only set a flag, an optional deadline, and
 * the collective step-boundary check that gives every rank the same answer.
 *
 * The check is one MPI_Allreduce of an int that encodes this rank's view as bits:
 *   (signalled ? 1 : 0) | (deadline reached ? 2 : 0) | (rank 0 only: a due halt request ? 4 : 0)
 * reduced with MPI_BOR, so that no rank's bit is lost (a MAX would turn "rank A signalled" and
 * "rank B past its deadline", 1 and 2, into 2 and lose the signal). Signal wins over halt, halt
 * over deadline. Halt requests (lib/halt.h) are read by rank 0 of the check's communicator only,
 * in the directories registered with ckpt_preempt_watch_dir (the managers register theirs).
 */
#include "mpickpt/preempt.h"

#include "fsutil.h"
#include "halt.h"
#include "mpi_internal.h"
#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PREEMPT_BIT_SIGNAL 1
#define PREEMPT_BIT_DEADLINE 2
#define PREEMPT_BIT_HALT 4
#define PREEMPT_MAX_WATCHED 16

/* Written by the handler: the only state it touches. */
static volatile sig_atomic_t g_signalled;
static volatile sig_atomic_t g_last_signal;

/* Set by ckpt_preempt_set_deadline (not touched by the handler). 0: no deadline. */
static double g_deadline;
static double g_reserve;

/* Directories watched for halt requests (ckpt_preempt_watch_dir); `warned` keeps a bad request
 * file from warning at every step: once per appearance. */
static struct {
    char dir[4096];
    int warned;
} g_watched[PREEMPT_MAX_WATCHED];
static int g_num_watched;

static void on_signal(int sig)
{
    g_last_signal = sig;
    g_signalled = 1;
}

int ckpt_preempt_install(const int *signals, int n)
{
    static const int defaults[] = { SIGTERM, SIGUSR1 };
    if (n < 0 || (n > 0 && !signals))
        return ckpt__error(CKPT_EINVAL, "ckpt_preempt_install: %d signals at %p", n,
                           (const void *)signals);
    if (!signals || n == 0) {
        signals = defaults;
        n = (int)CKPT__ARRAY_LEN(defaults);
    }
    for (int i = 0; i < n; i++) {
        int sig = signals[i];
        if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
            return ckpt__error(CKPT_EINVAL, "ckpt_preempt_install: cannot watch signal %d", sig);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < n; i++) {
        if (sigaction(signals[i], &sa, NULL) != 0)
            return ckpt__error(CKPT_EINVAL, "ckpt_preempt_install: sigaction(%d): %s", signals[i],
                               strerror(errno));
    }
    return CKPT_OK;
}

/* Parses an absolute time (seconds since the epoch) from environment variable @p name into
 * @p out. 0: not set (or empty), 1: set, CKPT_EINVAL: set but not a positive number. */
static int env_time(const char *name, double *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n'))
        end++;
    if (errno || end == s || *end || !isfinite(v) || v <= 0)
        return ckpt__error(CKPT_EINVAL,
                           "%s='%s' is not a time in seconds since the epoch (e.g. `date +%%s`)",
                           name, s);
    *out = v;
    return 1;
}

int ckpt_preempt_set_deadline(double deadline, double reserve_s)
{
    if (isnan(deadline) || !isfinite(reserve_s) || reserve_s < 0)
        return ckpt__error(CKPT_EINVAL, "ckpt_preempt_set_deadline: deadline %g, reserve %g s",
                           deadline, reserve_s);
    if (deadline < 0) {
        /* From the environment: MPICKPT_DEADLINE first, then Slurm's end time. */
        static const char *const vars[] = { "MPICKPT_DEADLINE", "SLURM_JOB_END_TIME" };
        deadline = 0;
        for (size_t i = 0; i < CKPT__ARRAY_LEN(vars); i++) {
            double v = 0;
            int rc = env_time(vars[i], &v);
            if (rc < 0)
                return rc;
            if (rc == 1) {
                deadline = v;
                ckpt__log(CKPT_LOG_DEBUG, "preemption deadline %.0f from %s, reserve %.0f s", v,
                          vars[i], reserve_s);
                break;
            }
        }
    }
    if (isinf(deadline))
        deadline = 0; /* +inf: never */
    g_deadline = deadline;
    g_reserve = reserve_s;
    return CKPT_OK;
}

int ckpt_preempt_signalled(void)
{
    return g_signalled ? 1 : 0;
}

int ckpt_preempt_last_signal(void)
{
    return (int)g_last_signal;
}

void ckpt_preempt_reset(void)
{
    g_signalled = 0;
    g_last_signal = 0;
}

int ckpt_preempt_watch_dir(const char *dir)
{
    if (!dir) {
        g_num_watched = 0;
        return CKPT_OK;
    }
    for (int i = 0; i < g_num_watched; i++)
        if (strcmp(g_watched[i].dir, dir) == 0)
            return CKPT_OK;
    char copy[sizeof g_watched[0].dir];
    int rc = ckpt__path(copy, sizeof copy, "%s", dir);
    if (rc != CKPT_OK)
        return rc;
    if (g_num_watched == PREEMPT_MAX_WATCHED) {
        /* the oldest goes (managers freed long ago, in a process that makes many): the newest
         * PREEMPT_MAX_WATCHED directories are watched */
        ckpt__log(CKPT_LOG_DEBUG, "no longer watching %s for halt requests (the %d newest "
                                  "directories are watched)",
                  g_watched[0].dir, PREEMPT_MAX_WATCHED);
        memmove(&g_watched[0], &g_watched[1], (PREEMPT_MAX_WATCHED - 1) * sizeof g_watched[0]);
        g_num_watched--;
    }
    memcpy(g_watched[g_num_watched].dir, copy, sizeof copy);
    g_watched[g_num_watched++].warned = 0;
    return CKPT_OK;
}

/* 1 when a watched directory holds a due halt request. Costs an open and an fstatat per watched
 * directory when there is none; errors are never recorded (the caller's last error stays). */
static int halt_due(double now)
{
    int due = 0;
    for (int i = 0; i < g_num_watched && !due; i++) {
        /* the caller's last error, put back below: a halt request is no error of theirs */
        ckpt__saved_error keep = ckpt__error_save();
        /* the directory by the checkpoint directory's rules: a chief/ swapped for a link is not
         * followed (its halt request is nobody's) */
        int fd = -1;
        struct stat st;
        int rc = ckpt__ckptdir_open(&fd, NULL, g_watched[i].dir, 0);
        if (rc != CKPT_OK || fstatat(fd, CKPT__HALT_FILE, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            g_watched[i].warned = 0; /* none (or no directory): nothing to say */
            ckpt__close(fd);
            ckpt__error_restore(&keep);
            continue;
        }
        ckpt__halt h;
        rc = ckpt__halt_read_at(&h, fd, g_watched[i].dir);
        close(fd);
        if (rc == CKPT_OK) {
            g_watched[i].warned = 0;
            due = ckpt__halt_due(&h, now);
        } else if (rc != CKPT_ENOTFOUND && !g_watched[i].warned) {
            g_watched[i].warned = 1;
            ckpt__log(CKPT_LOG_WARN, "ignoring the halt request: %s (`mpickpt halt DIR --clear` "
                                     "removes it)",
                      ckpt_error_last()->message);
        }
        ckpt__error_restore(&keep);
    }
    return due;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ckpt_preempt_check(MPI_Comm comm, ckpt_preempt_reason *reason)
{
    int local = 0, all = 0;
    if (g_signalled)
        local |= PREEMPT_BIT_SIGNAL;
    if (g_deadline > 0 && now_s() >= g_deadline - g_reserve)
        local |= PREEMPT_BIT_DEADLINE;
    int rank = 0;
    if (g_num_watched > 0 && MPI_Comm_rank(comm, &rank) == MPI_SUCCESS && rank == 0 &&
        halt_due(now_s()))
        local |= PREEMPT_BIT_HALT;
    /* Always join the collective, even with a bad argument, so that no rank is left waiting. */
    int rc = MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_BOR, comm);
    if (rc != MPI_SUCCESS)
        return ckpt__mpi_error(rc, "MPI_Allreduce of the preemption flags");
    ckpt_preempt_reason r = CKPT_PREEMPT_NONE;
    if (all & PREEMPT_BIT_SIGNAL)
        r = CKPT_PREEMPT_SIGNAL;
    else if (all & PREEMPT_BIT_HALT)
        r = CKPT_PREEMPT_HALT;
    else if (all & PREEMPT_BIT_DEADLINE)
        r = CKPT_PREEMPT_DEADLINE;
    if (r != CKPT_PREEMPT_NONE && local) {
        if (local & PREEMPT_BIT_SIGNAL)
            ckpt__log(CKPT_LOG_INFO, "preemption: signal %d received on this rank",
                      (int)g_last_signal);
        else if (local & PREEMPT_BIT_HALT)
            ckpt__log(CKPT_LOG_INFO, "preemption: a halt request is due (mpickpt halt)");
        else
            ckpt__log(CKPT_LOG_INFO, "preemption: deadline %.0f - %.0f s reached on this rank",
                      g_deadline, g_reserve);
    }
    if (!reason)
        return ckpt__error(CKPT_EINVAL, "ckpt_preempt_check: reason is NULL");
    *reason = r;
    return CKPT_OK;
}
