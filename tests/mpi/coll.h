/* What the MPI tests of the async writer and of hostile inputs (test_async, test_hostile_mpi)
 * share: the check that a collective call returned the same status and message on every rank,
 * string and file tests, and the threads of this process. Include after mpi_check.h, in one
 * translation unit per program (g_msg is per program). */
#ifndef MPICKPT_TESTS_COLL_H
#define MPICKPT_TESTS_COLL_H

#include "mpickpt/common.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

static char g_msg[4096]; /* the message of the last error seen by coll() */

static inline unsigned long hash_str(const char *p)
{
    unsigned long h = 5381;
    for (; p && *p; p++)
        h = h * 33 + (unsigned char)*p;
    return h;
}

static inline int comm_rank(MPI_Comm comm)
{
    int r = 0;
    MPI_Comm_rank(comm, &r);
    return r;
}

/* The status `rc` of a collective over `comm`, right after it returned: the same code and (on
 * error) the same message on every rank of `comm`, equal to `expected`. Returns 1 when all of that
 * holds on every rank. The message is kept in g_msg. Collective over `comm`. */
static inline int coll_on(MPI_Comm comm, int rc, int expected, const char *what)
{
    const ckpt_error *e = ckpt_error_last();
    snprintf(g_msg, sizeof g_msg, "%s", rc != CKPT_OK && e && e->message ? e->message : "");
    int ecode = e ? e->code : 0;
    int v[2] = { rc, -rc }, r[2];
    MPI_Allreduce(v, r, 2, MPI_INT, MPI_MIN, comm);
    int ok = r[0] == -r[1];
    CHECK_MSG(ok, "%s: ranks returned different codes (min %d %s, max %d %s); this rank %d: %s",
              what, r[0], ckpt_strerror(r[0]), -r[1], ckpt_strerror(-r[1]), rc, g_msg);
    CHECK_MSG(rc == expected, "%s: returned %d (%s), expected %d (%s)%s%s", what, rc,
              ckpt_strerror(rc), expected, ckpt_strerror(expected), rc ? ": " : "", g_msg);
    ok &= rc == expected;
    /* the messages are compared when every rank failed with the same code (every rank joins the
     * reduction whatever its own status) */
    unsigned long h = rc != CKPT_OK ? hash_str(g_msg) : 0, hm[2] = { h, ~h }, hr[2];
    MPI_Allreduce(hm, hr, 2, MPI_UNSIGNED_LONG, MPI_MIN, comm);
    if (rc != CKPT_OK) {
        CHECK_MSG(ecode == rc, "%s: ckpt_error_last() code %d, returned %d", what, ecode, rc);
        int same = hr[0] == ~hr[1];
        CHECK_MSG(same || r[0] != -r[1], "%s: ranks hold different messages; this rank: %s",
                  what, g_msg);
        ok &= same;
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (comm_rank(comm) == 0 && rc != CKPT_OK)
        printf("  %s -> %s: %s\n", what, ckpt_strerror(rc), g_msg);
    fflush(stdout);
    return all;
}

static inline int coll(int rc, int expected, const char *what)
{
    return coll_on(MPI_COMM_WORLD, rc, expected, what);
}

static inline int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0)
            return 1;
    return 0;
}

static inline int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* `path` exists (a link counts, not followed). */
static inline int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static inline int index_exists(const char *prefix)
{
    char p[4400];
    snprintf(p, sizeof p, "%s.index", prefix);
    return exists(p);
}

/* The ids of this process's threads (/proc/self/task) into ids[0..max); returns how many. */
static inline int thread_ids(long *ids, int max)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < max)
        if (isdigit((unsigned char)de->d_name[0]))
            ids[n++] = atol(de->d_name);
    closedir(d);
    return n;
}

static inline int has_id(const long *ids, int n, long id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

/* Sleeps `s` seconds (resumed after a signal). */
static inline void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#endif
