/* What the MPI tests share besides the model (model.h): the check that a collective call returned
 * the same status and message on every rank, reading rank numbers out of messages, the model's
 * values checked on every rank, a checkpoint directory holding nothing but committed checkpoints,
 * string and file tests, and the threads of this process. Include after mpi_check.h, in one
 * translation unit per program (g_msg, and check.h's counters, are per program). */
#ifndef MPICKPT_TESTS_COLL_H
#define MPICKPT_TESTS_COLL_H

#include "model.h"
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

/* 1 when v is true on every rank of MPI_COMM_WORLD. Collective. */
static inline int all_true(int v)
{
    int all = 0;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static inline int comm_rank(MPI_Comm comm)
{
    int r = 0;
    MPI_Comm_rank(comm, &r);
    return r;
}

/* coll_on's `expected`: any status, as long as every rank returned the same (and the same
 * message). CKPT_ERROR as `expected` means any error. */
#define COLL_ANY 1

/* The status `rc` of a collective over `comm`, right after it returned: the same code and (on
 * error) the same message on every rank of `comm`, equal to `expected` (see COLL_ANY). Returns 1
 * when all of that holds on every rank. The message is kept in g_msg. Collective over `comm`. */
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
    int as_expected = expected == COLL_ANY ? 1 : expected == CKPT_ERROR ? rc < 0 : rc == expected;
    if (expected == CKPT_ERROR)
        CHECK_MSG(as_expected, "%s: returned %d (%s), expected an error", what, rc,
                  ckpt_strerror(rc));
    else
        CHECK_MSG(as_expected, "%s: returned %d (%s), expected %d (%s)%s%s", what, rc,
                  ckpt_strerror(rc), expected, ckpt_strerror(expected), rc ? ": " : "", g_msg);
    ok &= as_expected;
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

/* The message of the last error of this thread. */
static inline const char *msg_of(void)
{
    const ckpt_error *e = ckpt_error_last();
    return (e && e->message) ? e->message : "(no message)";
}

/* 1 when `msg` names rank `r`: "rank 3", "ranks 0 and 3", "ranks 0, 3", "rank=3", "rank_3",
 * "rank #3". */
static inline int mentions_rank(const char *msg, int r)
{
    for (const char *p = msg; (p = strstr(p, "rank")) != NULL;) {
        p += 4;
        if (*p == 's')
            p++;
        for (;;) {
            while (*p == ' ' || *p == '=' || *p == '_' || *p == ',' || *p == '#')
                p++;
            if (strncmp(p, "and ", 4) == 0) {
                p += 4;
                continue;
            }
            if (!isdigit((unsigned char)*p))
                break;
            char *end;
            long v = strtol(p, &end, 10);
            if (v == r)
                return 1;
            p = end;
        }
    }
    return 0;
}

/* The message without ckpt_mpi_agree's "rank N (host H): " prefix. */
static inline const char *body_of(const char *msg)
{
    if (strncmp(msg, "rank ", 5) == 0) {
        const char *h = strstr(msg, " (host ");
        const char *c = h ? strstr(h, "): ") : NULL;
        if (c)
            return c + 3;
    }
    return msg;
}

/* MPICKPT_FAULT set to `value` (NULL: unset). */
static inline void set_fault(const char *value)
{
    if (value)
        setenv("MPICKPT_FAULT", value, 1);
    else
        unsetenv("MPICKPT_FAULT");
}

/* ---- savers ---- */

/* A saver over `comm` with these options, its status compared over the ranks; the job aborts when
 * it cannot be created. Collective over `comm`. */
static inline ckpt_saver *new_saver_on(MPI_Comm comm, ckpt_layout layout, int async,
                                       double close_timeout_s)
{
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = layout;
    o.async = async;
    o.close_timeout_s = close_timeout_s;
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, comm, &o);
    if (!coll_on(comm, rc, CKPT_OK, "ckpt_saver_create") || !s) {
        fprintf(stderr, "[rank %d] cannot create a saver; giving up\n", comm_rank(MPI_COMM_WORLD));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return s;
}

/* ---- the model's values ---- */

/* The model holds the values of `step` on this rank (tm_check, which prints what differs): one
 * check. Returns the number of wrong values. Local. */
static inline int check_model(const tm_model *m, int64_t step, tm_expect e, const char *what)
{
    int bad = tm_check(m, step, e, what);
    CHECK_MSG(bad == 0, "%s: %d values differ from step %lld%s", what, bad, (long long)step,
              e == TM_UNTOUCHED ? " (per-rank values: untouched expected)" : "");
    return bad;
}

/* check_model on every rank; rank 0 prints the total. Collective. */
static inline void check_values(const tm_model *m, int64_t step, tm_expect e, const char *what)
{
    int bad = check_model(m, step, e, what), all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (comm_rank(MPI_COMM_WORLD) == 0 && all)
        printf("  %s: %d wrong values over all ranks\n", what, all);
}

/* The model registered with `s` (tm_register) on every rank of MPI_COMM_WORLD, or the job aborts.
 * Collective. */
static inline void register_or_die(tm_model *m, ckpt_saver *s)
{
    int rc = tm_register(m, s), ok = rc == CKPT_OK, all = 0;
    CHECK_OK(rc);
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all)
        MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Restores `prefix` with `s` into a zeroed model: the same status on every rank, the values of
 * `step` everywhere (TM_RESTORED), and a restore info that says `step`, this job's size and
 * `layout`. *ri (may be NULL) receives the restore info. Returns 1 when the restore succeeded on
 * every rank. Collective. */
static inline int restore_check(ckpt_saver *s, tm_model *m, const char *prefix, int64_t step,
                                ckpt_layout layout, ckpt_restore_info *ri_out, const char *what)
{
    ckpt_restore_info ri;
    memset(&ri, 0, sizeof ri);
    tm_zero(m);
    int ok = coll(ckpt_saver_restore(s, prefix, NULL, &ri), CKPT_OK, what);
    if (ok) {
        int size = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        check_values(m, step, TM_RESTORED, what);
        CHECK_MSG(ri.step == step, "%s: restore info step %lld, want %lld", what,
                  (long long)ri.step, (long long)step);
        CHECK_MSG(ri.world_size == size, "%s: restore info world_size %d, want %d", what,
                  (int)ri.world_size, size);
        CHECK_MSG(ri.layout == layout, "%s: restore info layout %s, want %s", what,
                  ckpt_layout_name(ri.layout), ckpt_layout_name(layout));
    }
    if (ri_out)
        *ri_out = ri;
    return ok;
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

/* Rank 0 creates `dir` and its parents; collective (barrier after). */
static inline void make_dir(const char *dir)
{
    if (comm_rank(MPI_COMM_WORLD) == 0) {
        char p[4096];
        snprintf(p, sizeof p, "%s", dir);
        int ok = 1;
        for (char *c = p + 1; ok && *c; c++)
            if (*c == '/') {
                *c = '\0';
                ok = mkdir(p, 0755) == 0 || errno == EEXIST;
                *c = '/';
            }
        ok = ok && (mkdir(p, 0755) == 0 || errno == EEXIST);
        CHECK_MSG(ok, "cannot create %s: %s", dir, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A manager's directory may hold its state file. */
static const char *const DIR_STATE[] = { "checkpoint", NULL };

/* Rank 0 lists `dir`: only committed checkpoints (an index; data files with their index),
 * metrics.jsonl, lock, identity, empty workertemp_* directories and the names in the
 * NULL-terminated `allow` (may be NULL; DIR_STATE for a manager's directory) may be there.
 * Collective (barrier first: every rank has returned from the call before). */
static inline void check_dir_clean(const char *dir, const char *const *allow, const char *what)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm_rank(MPI_COMM_WORLD) != 0)
        return;
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "%s: cannot list %s", what, dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        int allowed = 0;
        for (size_t i = 0; allow && allow[i]; i++)
            allowed |= strcmp(n, allow[i]) == 0;
        if (allowed)
            continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        if (strncmp(n, "workertemp_", 11) == 0) {
            DIR *w = opendir(path);
            CHECK_MSG(w != NULL, "%s: %s is not a directory", what, path);
            if (!w)
                continue;
            struct dirent *we;
            while ((we = readdir(w)) != NULL)
                if (strcmp(we->d_name, ".") != 0 && strcmp(we->d_name, "..") != 0)
                    CHECK_MSG(0, "%s: left in %s: %s", what, path, we->d_name);
            closedir(w);
        } else if (ends_with(n, "_temp")) {
            CHECK_MSG(0, "%s: temp directory left: %s", what, path);
        } else if (ends_with(n, ".index") || strcmp(n, "metrics.jsonl") == 0 ||
                   strcmp(n, "lock") == 0 || strcmp(n, "identity") == 0) {
            continue; /* committed checkpoints, the per-save metrics log, the directory's lock
                       * (a manager held it) and identity (a cache level was set up) */
        } else if (strstr(n, ".data-") != NULL) {
            char base[4600];
            snprintf(base, sizeof base, "%s/%.*s", dir, (int)(strstr(n, ".data-") - n), n);
            CHECK_MSG(index_exists(base), "%s: data file without an index: %s", what, path);
        } else {
            CHECK_MSG(0, "%s: unexpected entry left: %s", what, path);
        }
    }
    closedir(d);
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

#define MAX_THREADS 256

/* The ids of this process's threads now that `before` (nbefore ids) lacks, into started[];
 * returns how many: the threads a call started. */
static inline int threads_started(long *started, const long *before, int nbefore)
{
    long now[MAX_THREADS];
    int n = thread_ids(now, MAX_THREADS), k = 0;
    for (int i = 0; i < n; i++)
        if (!has_id(before, nbefore, now[i]))
            started[k++] = now[i];
    return k;
}

/* Waits until the threads in `ids` have exited (each polled; a hang guard of about 120 s, not a
 * measurement), so that nothing of an abandoned save runs or is inside MPI when the test goes on
 * and finalizes. Collective (barrier after). */
static inline void wait_threads_gone(const long *ids, int n, const char *what)
{
    int alive = 0;
    for (int polls = 0; polls < 6000; polls++) {
        long now[MAX_THREADS];
        int k = thread_ids(now, MAX_THREADS);
        alive = 0;
        for (int i = 0; i < n; i++)
            alive += has_id(now, k, ids[i]);
        if (!alive)
            break;
        sleep_s(0.02);
    }
    CHECK_MSG(alive == 0, "%s: %d thread(s) the save started are still running", what, alive);
    MPI_Barrier(MPI_COMM_WORLD);
}

#endif
