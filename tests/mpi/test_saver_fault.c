/* Collective saver under injected faults and bad input (usage: test_saver_fault OUTDIR LAYOUT).
 *
 * 1. A small model (uneven row-partitioned float32 "w", one full tensor per rank, a replicated
 *    primary, a blob) is saved at OUTDIR/ck (-> ck-1) with the values of step 1.
 * 2. For every protocol step (plan, write, agree, merge, commit) and failing rank (0, size-1),
 *    MPICKPT_FAULT=<rank>:<step> makes that save fail: every rank must return CKPT_EIO with a
 *    message naming the fault and the rank, nothing may be committed or left behind, and ck-1 still
 *    restores the step-1 values everywhere.
 * 3. A clean save afterwards succeeds and restores (the saver survives failures; nothing hangs).
 * 4. Bad input (mismatched, duplicate, overlapping, missing slices; partial replicated; restore
 *    with a wrong dtype, shape or name; a deleted data file; a missing prefix; a truncated index)
 *    is the same clear error on every rank, and nothing is committed.
 * A watchdog aborts the job (naming the case) when one collective call does not return. */
#include "mpi_check.h"
#include "mpickpt.h"
#include "mpickpt/saver.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COLS 5
#define FULL_N 6
#define REP_N 4

static int g_rank, g_size;
static char g_dir[2048];
static ckpt_layout g_layout;
static const char *g_layout_name;

/* The per-case watchdog of mpi_check.h. */
#define begin_case(...) check_case(0, __VA_ARGS__)

/* ---- the model ---- */

typedef struct model {
    int64_t row0, rows, total_rows;
    float w[4 * COLS]; /* at most 4 rows per rank */
    int64_t full[FULL_N];
    double rep[REP_N];
    char blob[64];
    size_t blob_len;
    char blob_in[64];
    size_t blob_in_len;
    int blob_restores;
} model;

/* Rows of rank r: uneven (2, 3, 4, 2, 3, ...). */
static int64_t rows_of(int r)
{
    return 2 + (r % 3);
}

static int64_t row0_of(int r)
{
    int64_t s = 0;
    for (int i = 0; i < r; i++)
        s += rows_of(i);
    return s;
}

static void model_init(model *m)
{
    memset(m, 0, sizeof *m);
    m->row0 = row0_of(g_rank);
    m->rows = rows_of(g_rank);
    m->total_rows = row0_of(g_size);
}

static float w_value(int step, int64_t grow, int64_t col)
{
    return (float)(step * 1000 + grow * 10 + col) + 0.25f;
}

/* The blob of a step; its length changes with the step (a plan must not fix blob sizes). */
static size_t blob_text(char *buf, size_t n, int step)
{
    return (size_t)snprintf(buf, n, "blob step=%d rank=%d %.*s", step, g_rank, step % 8,
                            "xxxxxxxx");
}

static void model_fill(model *m, int step)
{
    for (int64_t i = 0; i < m->rows; i++)
        for (int64_t j = 0; j < COLS; j++)
            m->w[i * COLS + j] = w_value(step, m->row0 + i, j);
    for (int k = 0; k < FULL_N; k++)
        m->full[k] = (int64_t)step * 1000000 + g_rank * 100 + k;
    for (int k = 0; k < REP_N; k++)
        m->rep[k] = step + 0.5 * k;
    m->blob_len = blob_text(m->blob, sizeof m->blob, step);
}

static void model_zero(model *m)
{
    memset(m->w, 0, sizeof m->w);
    memset(m->full, 0, sizeof m->full);
    memset(m->rep, 0, sizeof m->rep);
    memset(m->blob_in, 0, sizeof m->blob_in);
    m->blob_in_len = 0;
    m->blob_restores = 0;
}

/* Number of wrong values after a restore of `step`'s values (printed). */
static int model_wrong(const model *m, int step)
{
    int bad = 0;
    for (int64_t i = 0; i < m->rows; i++)
        for (int64_t j = 0; j < COLS; j++)
            if (m->w[i * COLS + j] != w_value(step, m->row0 + i, j)) {
                if (bad++ < 3)
                    fprintf(stderr, "[rank %d] w[%" PRId64 ",%" PRId64 "] = %g, want %g\n", g_rank,
                            m->row0 + i, j, (double)m->w[i * COLS + j],
                            (double)w_value(step, m->row0 + i, j));
            }
    for (int k = 0; k < FULL_N; k++)
        if (m->full[k] != (int64_t)step * 1000000 + g_rank * 100 + k) {
            if (bad++ < 6)
                fprintf(stderr, "[rank %d] full[%d] = %" PRId64 "\n", g_rank, k, m->full[k]);
        }
    for (int k = 0; k < REP_N; k++)
        if (m->rep[k] != step + 0.5 * k) {
            if (bad++ < 9)
                fprintf(stderr, "[rank %d] rep[%d] = %g\n", g_rank, k, m->rep[k]);
        }
    char want[64];
    size_t wl = blob_text(want, sizeof want, step);
    if (m->blob_restores != 1 || m->blob_in_len != wl || memcmp(m->blob_in, want, wl) != 0) {
        bad++;
        fprintf(stderr, "[rank %d] blob restored %d times as \"%.*s\", want once \"%s\"\n", g_rank,
                m->blob_restores, (int)m->blob_in_len, m->blob_in, want);
    }
    return bad;
}

static int blob_save(const void **data, size_t *len, void *payload)
{
    model *m = payload;
    *data = m->blob;
    *len = m->blob_len;
    return 0;
}

static int blob_restore(const void *data, size_t len, void *payload)
{
    model *m = payload;
    m->blob_restores++;
    if (len > sizeof m->blob_in)
        return CKPT_ECORRUPT;
    memcpy(m->blob_in, data, len);
    m->blob_in_len = len;
    return 0;
}

static const ckpt_blob_callbacks blob_cb = { blob_save, blob_restore };

static ckpt_shape shape1(int64_t a)
{
    ckpt_shape s;
    ckpt_shape_init(&s, 1, &a);
    return s;
}

static ckpt_shape shape2(int64_t a, int64_t b)
{
    ckpt_shape s;
    int64_t d[2] = { a, b };
    ckpt_shape_init(&s, 2, d);
    return s;
}

static ckpt_slice rows_slice(int64_t r0, int64_t nr, int64_t cols)
{
    ckpt_slice s;
    int64_t st[2] = { r0, 0 }, ct[2] = { nr, cols };
    ckpt_slice_init(&s, 2, st, ct);
    return s;
}

static void full_name(char *buf, size_t n, int r)
{
    snprintf(buf, n, "full/rank_%d", r);
}

/* Registers the whole model; returns the first error. */
static int model_register(ckpt_saver *s, model *m)
{
    ckpt_shape ws = shape2(m->total_rows, COLS);
    ckpt_slice sl = rows_slice(m->row0, m->rows, COLS);
    int rc = ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &sl, m->w);
    char fname[64];
    full_name(fname, sizeof fname, g_rank);
    ckpt_shape fs = shape1(FULL_N), rs = shape1(REP_N);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_full(s, fname, CKPT_INT64, &fs, m->full);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_replicated(s, "rep", CKPT_FLOAT64, &rs, m->rep, CKPT_REPLICA_PRIMARY);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_blob(s, "rng", &blob_cb, m);
    return rc;
}

static ckpt_saver *new_saver(void)
{
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = g_layout;
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, &o);
    CHECK_OK(rc);
    if (rc != CKPT_OK || !s) {
        fprintf(stderr, "[rank %d] cannot create a saver; giving up\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return s;
}

/* ---- checks ---- */

static const char *msg_of(void)
{
    const ckpt_error *e = ckpt_error_last();
    return (e && e->message) ? e->message : "(no message)";
}

static unsigned long hash_str(const char *p)
{
    unsigned long h = 5381;
    for (; *p; p++)
        h = h * 33 + (unsigned char)*p;
    return h;
}

/* Every rank returned `rc`: same code everywhere (min == max), equal to `expected` (or, when
 * `expected` is CKPT_ERROR, any error), with the same message everywhere. Returns 1 when all of it
 * holds on every rank. */
static int check_collective_rc(int rc, int expected, const char *what)
{
    int mn, mx;
    MPI_Allreduce(&rc, &mn, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&rc, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int ok = 1;
    CHECK_MSG(mn == mx, "%s: ranks returned different codes (min %d %s, max %d %s)", what, mn,
              ckpt_strerror(mn), mx, ckpt_strerror(mx));
    ok &= mn == mx;
    if (expected == CKPT_ERROR) {
        CHECK_MSG(rc < 0, "%s: returned %d (%s), expected an error", what, rc, ckpt_strerror(rc));
        ok &= rc < 0;
    } else {
        CHECK_MSG(rc == expected, "%s: returned %d (%s), expected %d (%s): %s", what, rc,
                  ckpt_strerror(rc), expected, ckpt_strerror(expected),
                  rc == CKPT_OK ? "(success)" : msg_of());
        ok &= rc == expected;
    }
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        CHECK_MSG(e && e->code == rc, "%s: ckpt_error_last() code %d, returned %d", what,
                  e ? e->code : 0, rc);
        unsigned long h = hash_str(msg_of()), hmin, hmax;
        MPI_Allreduce(&h, &hmin, 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&h, &hmax, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
        CHECK_MSG(hmin == hmax, "%s: ranks hold different messages; this rank: %s", what, msg_of());
        ok &= hmin == hmax;
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (g_rank == 0 && rc != CKPT_OK)
        printf("  %s -> %s: %s\n", what, ckpt_strerror(rc), msg_of());
    return all;
}

/* 1 when `msg` names rank `r`: "rank 3", "ranks 0 and 3", "ranks 0, 3", "rank=3", "rank_3". */
static int mentions_rank(const char *msg, int r)
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
static const char *body_of(const char *msg)
{
    if (strncmp(msg, "rank ", 5) == 0) {
        const char *h = strstr(msg, " (host ");
        const char *c = h ? strstr(h, "): ") : NULL;
        if (c)
            return c + 3;
    }
    return msg;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int index_exists(const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.index", g_dir, name);
    return exists(p);
}

/* Rank 0 lists OUTDIR after a failed save: only committed checkpoints (an index and data files
 * with that index) and empty workertemp_* directories may be there. Collective (barrier). */
static void check_dir_clean(const char *what)
{
    MPI_Barrier(MPI_COMM_WORLD); /* every rank has returned from the save */
    if (g_rank != 0)
        return;
    DIR *d = opendir(g_dir);
    CHECK_MSG(d != NULL, "%s: cannot list %s", what, g_dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", g_dir, n);
        if (strncmp(n, "workertemp_", 11) == 0) {
            DIR *w = opendir(path);
            CHECK_MSG(w != NULL, "%s: %s is not a directory", what, path);
            if (!w)
                continue;
            struct dirent *we;
            while ((we = readdir(w)) != NULL) {
                if (strcmp(we->d_name, ".") == 0 || strcmp(we->d_name, "..") == 0)
                    continue;
                CHECK_MSG(0, "%s: left in %s: %s", what, n, we->d_name);
            }
            closedir(w);
        } else if (ends_with(n, "_temp")) {
            CHECK_MSG(0, "%s: temp directory left: %s", what, path);
        } else if (ends_with(n, ".index") || strcmp(n, "metrics.jsonl") == 0) {
            continue; /* committed checkpoints, and the per-save metrics log */
        } else if (strstr(n, ".data-") != NULL) {
            char base[1024];
            size_t bl = (size_t)(strstr(n, ".data-") - n);
            snprintf(base, sizeof base, "%.*s", (int)bl, n);
            CHECK_MSG(index_exists(base), "%s: data file without an index: %s", what, path);
        } else {
            CHECK_MSG(0, "%s: unexpected entry left: %s", what, path);
        }
    }
    closedir(d);
}

/* The checkpoint `name` was not committed (rank 0 looks; result shared). */
static void check_not_committed(const char *name, const char *what)
{
    if (g_rank == 0)
        CHECK_MSG(!index_exists(name), "%s: %s/%s.index exists: a failed save committed", what,
                  g_dir, name);
}

static void set_fault(const char *value)
{
    if (value)
        setenv("MPICKPT_FAULT", value, 1);
    else
        unsetenv("MPICKPT_FAULT");
}

/* Restores `prefix` into a zeroed model and checks every value is `step`'s. */
static void restore_and_check(ckpt_saver *s, model *m, const char *name, int step, const char *what)
{
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/%s", g_dir, name);
    model_zero(m);
    ckpt_restore_info ri;
    memset(&ri, 0, sizeof ri);
    int rc = ckpt_saver_restore(s, prefix, NULL, &ri);
    char w[512];
    snprintf(w, sizeof w, "%s: restore %s", what, name);
    if (!check_collective_rc(rc, CKPT_OK, w))
        return;
    int bad = model_wrong(m, step);
    CHECK_MSG(bad == 0, "%s: %d values differ from step %d", w, bad, step);
    CHECK_EQ_INT(ri.step, step);
    CHECK_EQ_INT(ri.world_size, g_size);
    CHECK_EQ_INT(ri.layout, g_layout);
    CHECK_EQ_INT(ckpt_saver_counter(s), ri.save_counter);
    int bad_all = 0;
    MPI_Allreduce(&bad, &bad_all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0 && bad_all)
        printf("  %s: %d wrong values over all ranks\n", w, bad_all);
}

static int64_t counter_same_everywhere(ckpt_saver *s, const char *what)
{
    int64_t c = ckpt_saver_counter(s), mn, mx;
    MPI_Allreduce(&c, &mn, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&c, &mx, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(mn == mx, "%s: save counters differ between ranks (%" PRId64 "..%" PRId64 ")", what,
              mn, mx);
    return c;
}

/* ---- 1-3: faults in every protocol step ---- */

static const char *const fault_steps[] = { "plan", "write", "agree", "merge", "commit" };

static void test_faults(void)
{
    model m;
    model_init(&m);
    ckpt_saver *s = new_saver();
    CHECK_OK(model_register(s, &m));

    char prefix[4096], out[4096];
    snprintf(prefix, sizeof prefix, "%s/ck", g_dir);

    /* 1. the good checkpoint */
    begin_case("good save ck-1");
    set_fault(NULL);
    model_fill(&m, 1);
    ckpt_save_info info = { .epoch = 0, .step = 1 };
    int rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
    check_collective_rc(rc, CKPT_OK, "save ck-1");
    char want[4096];
    snprintf(want, sizeof want, "%s-1", prefix);
    CHECK_MSG(strcmp(out, want) == 0, "save wrote \"%s\", want \"%s\"", out, want);
    CHECK_EQ_INT(ckpt_saver_counter(s), 1);
    check_dir_clean("after save ck-1");
    begin_case("restore ck-1");
    restore_and_check(s, &m, "ck-1", 1, "after save ck-1");

    /* 2. each step fails on rank 0, then on the last rank */
    int fail_ranks[2] = { 0, g_size - 1 };
    int nfail = g_size > 1 ? 2 : 1;
    int bumped_on_failure = -1; /* 0/1 once observed; must be the same in every case */
    for (size_t si = 0; si < sizeof fault_steps / sizeof fault_steps[0]; si++) {
        for (int fi = 0; fi < nfail; fi++) {
            const char *step = fault_steps[si];
            int fr = fail_ranks[fi];
            char what[256], fault[64];
            snprintf(fault, sizeof fault, "%d:%s", fr, step);
            snprintf(what, sizeof what, "MPICKPT_FAULT=%s (%d ranks, %s)", fault, g_size,
                     g_layout_name);
            begin_case("%s", what);

            model_fill(&m, 2);
            info.step = 2;
            int64_t before = counter_same_everywhere(s, what);
            set_fault(fault);
            out[0] = '\0';
            rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
            set_fault(NULL);

            if (check_collective_rc(rc, CKPT_EIO, what)) {
                const char *msg = msg_of();
                CHECK_MSG(strstr(msg, "injected fault") != NULL,
                          "%s: message lacks \"injected fault\": %s", what, msg);
                /* named by the failing rank's own message, not only by the agreement prefix */
                CHECK_MSG(mentions_rank(body_of(msg), fr), "%s: message does not name rank %d: %s",
                          what, fr, msg);
            }

            /* The counter: same on every rank, unchanged or bumped by one, and consistently so. */
            int64_t after = counter_same_everywhere(s, what);
            CHECK_MSG(after == before || after == before + 1,
                      "%s: counter went from %" PRId64 " to %" PRId64, what, before, after);
            int bumped = after == before + 1;
            if (bumped_on_failure < 0) {
                bumped_on_failure = bumped;
                if (g_rank == 0)
                    printf("  a failed ckpt_saver_save %s the save counter (%" PRId64
                           " -> %" PRId64 ")\n",
                           bumped ? "BUMPS" : "does not bump", before, after);
            }
            CHECK_MSG(bumped == bumped_on_failure,
                      "%s: counter bumped on failure in some cases only (%" PRId64 " -> %" PRId64
                      ")",
                      what, before, after);

            /* Nothing committed under the name this save would have used, nothing left behind. */
            char name[64];
            snprintf(name, sizeof name, "ck-%" PRId64, before + 1);
            check_not_committed(name, what);
            snprintf(name, sizeof name, "ck-%" PRId64, after);
            if (after != 1)
                check_not_committed(name, what);
            check_dir_clean(what);
            if (g_rank == 0)
                CHECK_MSG(index_exists("ck-1"), "%s: ck-1.index disappeared", what);

            /* The previous checkpoint is intact. */
            restore_and_check(s, &m, "ck-1", 1, what);
            CHECK_EQ_INT(ckpt_saver_counter(s), 1);
        }
    }

    /* 3. the saver still works: a clean save of the step-2 values */
    begin_case("clean save after the faults");
    set_fault(NULL);
    model_fill(&m, 2);
    info.step = 2;
    out[0] = '\0';
    rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
    check_collective_rc(rc, CKPT_OK, "clean save after the faults");
    snprintf(want, sizeof want, "%s-2", prefix);
    CHECK_MSG(strcmp(out, want) == 0, "clean save wrote \"%s\", want \"%s\"", out, want);
    CHECK_EQ_INT(ckpt_saver_counter(s), 2);
    check_dir_clean("after the clean save");
    begin_case("restore ck-2");
    restore_and_check(s, &m, "ck-2", 2, "after the clean save");
    restore_and_check(s, &m, "ck-1", 1, "ck-1 after the clean save");

    /* A fault named for a rank that does not exist changes nothing. */
    begin_case("fault on a rank outside the job");
    char fault[64];
    snprintf(fault, sizeof fault, "%d:write", g_size + 5);
    set_fault(fault);
    model_fill(&m, 3);
    info.step = 3;
    snprintf(prefix, sizeof prefix, "%s/other", g_dir);
    rc = ckpt_saver_write(s, prefix, &info);
    set_fault(NULL);
    check_collective_rc(rc, CKPT_OK, "write with a fault on a rank outside the job");
    restore_and_check(s, &m, "other", 3, "fault on a rank outside the job");

    begin_case("free the fault saver");
    ckpt_saver_free(s);

    /* The first save of a fresh saver fails in its (not yet cached) plan; the failed plan must
     * not be reused: the next save plans again and succeeds. */
    begin_case("plan fault on the first save of a fresh saver");
    s = new_saver();
    model_init(&m);
    CHECK_OK(model_register(s, &m));
    model_fill(&m, 5);
    info.step = 5;
    snprintf(fault, sizeof fault, "%d:plan", g_size - 1);
    set_fault(fault);
    snprintf(prefix, sizeof prefix, "%s/fresh", g_dir);
    rc = ckpt_saver_save(s, prefix, &info, NULL, 0);
    set_fault(NULL);
    if (check_collective_rc(rc, CKPT_EIO, "plan fault on the first save of a fresh saver"))
        CHECK_MSG(strstr(msg_of(), "injected fault") != NULL, "fresh plan fault: message: %s",
                  msg_of());
    check_not_committed("fresh-1", "plan fault on the first save of a fresh saver");
    check_dir_clean("plan fault on the first save of a fresh saver");
    rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
    check_collective_rc(rc, CKPT_OK, "save after a failed first plan");
    begin_case("restore after a failed first plan");
    restore_and_check(s, &m, "fresh-1", 5, "after a failed first plan");
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- 4. bad input ---- */

/* Saves with `s` at OUTDIR/<name> and checks the error, that nothing was committed and that
 * nothing was left behind. Returns 1 when the code matched on every rank. */
static int save_fails(ckpt_saver *s, const char *name, int expected, const char *what)
{
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/%s", g_dir, name);
    ckpt_save_info info = { .epoch = 0, .step = 9 };
    int rc = ckpt_saver_save(s, prefix, &info, NULL, 0);
    int ok = check_collective_rc(rc, expected, what);
    char n[300];
    snprintf(n, sizeof n, "%s-1", name);
    check_not_committed(n, what);
    check_dir_clean(what);
    return ok;
}

static int restore_fails(ckpt_saver *s, const char *name, int expected, const char *what)
{
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/%s", g_dir, name);
    int rc = ckpt_saver_restore(s, prefix, NULL, NULL);
    return check_collective_rc(rc, expected, what);
}

static void test_bad_registrations(void)
{
    model m;
    model_init(&m);
    ckpt_shape ws = shape2(m.total_rows, COLS);
    ckpt_slice mine = rows_slice(m.row0, m.rows, COLS);
    float extra[4 * COLS];
    memset(extra, 0, sizeof extra);

    if (g_size > 1) {
        /* the last rank registers "w" as float64, the others as float32 */
        begin_case("mismatched dtype");
        ckpt_saver *s = new_saver();
        double wd[4 * COLS];
        memset(wd, 0, sizeof wd);
        if (g_rank == g_size - 1)
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT64, &ws, &mine, wd));
        else
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &mine, m.w));
        if (save_fails(s, "bad_dtype", CKPT_EMISMATCH, "mismatched dtype")) {
            const char *b = body_of(msg_of());
            int other = 0;
            for (int r = 0; r < g_size - 1; r++)
                other |= mentions_rank(b, r);
            CHECK_MSG(mentions_rank(b, g_size - 1) && other,
                      "mismatched dtype: message does not name both ranks: %s", msg_of());
        }
        ckpt_saver_free(s);

        /* the last rank registers rank 0's rows of "w" as well: a duplicate slice */
        begin_case("duplicate slice");
        s = new_saver();
        CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &mine, m.w));
        if (g_rank == g_size - 1) {
            ckpt_slice dup = rows_slice(0, rows_of(0), COLS);
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &dup, extra));
        }
        if (save_fails(s, "bad_dup", CKPT_EMISMATCH, "duplicate slice"))
            CHECK_MSG(strstr(msg_of(), "duplicate") != NULL,
                      "duplicate slice: message lacks \"duplicate\": %s", msg_of());
        ckpt_saver_free(s);

        /* the last rank registers row 0 as well: it overlaps rank 0's rows 0..1 */
        begin_case("overlapping slices");
        s = new_saver();
        CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &mine, m.w));
        if (g_rank == g_size - 1) {
            ckpt_slice ov = rows_slice(0, 1, COLS);
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &ov, extra));
        }
        if (save_fails(s, "bad_overlap", CKPT_EMISMATCH, "overlapping slices"))
            CHECK_MSG(strstr(msg_of(), "overlap") != NULL,
                      "overlapping slices: message lacks \"overlaps\": %s", msg_of());
        ckpt_saver_free(s);

        /* a replicated primary registered on every rank but the last */
        begin_case("replicated on some ranks only");
        s = new_saver();
        ckpt_shape rs = shape1(REP_N);
        CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &mine, m.w));
        if (g_rank != g_size - 1)
            CHECK_OK(ckpt_saver_add_replicated(s, "rep", CKPT_FLOAT64, &rs, m.rep,
                                               CKPT_REPLICA_PRIMARY));
        save_fails(s, "bad_rep", CKPT_ERROR, "replicated primary on some ranks only");
        ckpt_saver_free(s);
    }

    /* nobody registers the last row of "w": a gap */
    begin_case("gap");
    ckpt_saver *s = new_saver();
    ckpt_shape big = shape2(m.total_rows + 1, COLS);
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &big, &mine, m.w));
    if (save_fails(s, "bad_gap", CKPT_EMISMATCH, "gap"))
        CHECK_MSG(strstr(msg_of(), "gap") != NULL, "gap: message lacks \"gap\": %s", msg_of());
    /* the failed plan is not kept: fixed registrations save and restore */
    begin_case("save after fixing the gap");
    ckpt_saver_clear(s);
    model_init(&m);
    CHECK_OK(model_register(s, &m));
    model_fill(&m, 6);
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/fixed", g_dir);
    ckpt_save_info info = { .epoch = 0, .step = 6 };
    check_collective_rc(ckpt_saver_write(s, prefix, &info), CKPT_OK, "save after fixing the gap");
    restore_and_check(s, &m, "fixed", 6, "after fixing the gap");
    ckpt_saver_free(s);
    alarm(0);
}

static void test_bad_restores(void)
{
    model m;
    model_init(&m);
    ckpt_shape ws = shape2(m.total_rows, COLS);
    ckpt_slice mine = rows_slice(m.row0, m.rows, COLS);

    /* wrong dtype: "w" was saved as float32 (ck-2 from test_faults) */
    begin_case("restore with a wrong dtype");
    ckpt_saver *s = new_saver();
    double wd[4 * COLS];
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT64, &ws, &mine, wd));
    restore_fails(s, "ck-2", CKPT_EMISMATCH, "restore with a wrong dtype");
    ckpt_saver_free(s);

    /* wrong global shape: one more column */
    begin_case("restore with a wrong shape");
    s = new_saver();
    ckpt_shape wide = shape2(m.total_rows, COLS + 1);
    ckpt_slice mine_wide = rows_slice(m.row0, m.rows, COLS + 1);
    float ww[4 * (COLS + 1)];
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &wide, &mine_wide, ww));
    restore_fails(s, "ck-2", CKPT_EMISMATCH, "restore with a wrong global shape");
    ckpt_saver_free(s);

    /* a name the checkpoint lacks, registered on the last rank only */
    begin_case("restore of a missing name");
    s = new_saver();
    ckpt_shape rs = shape1(REP_N), fs = shape1(FULL_N);
    CHECK_OK(ckpt_saver_add_replicated(s, "rep", CKPT_FLOAT64, &rs, m.rep, CKPT_REPLICA_PRIMARY));
    if (g_rank == g_size - 1)
        CHECK_OK(ckpt_saver_add_full(s, "no_such_tensor", CKPT_INT64, &fs, m.full));
    if (restore_fails(s, "ck-2", CKPT_ENOTFOUND, "restore of a name not in the checkpoint"))
        CHECK_MSG(strstr(msg_of(), "no_such_tensor") != NULL,
                  "missing name: message lacks the name: %s", msg_of());
    ckpt_saver_free(s);

    /* a prefix that does not exist */
    begin_case("restore of a missing prefix");
    s = new_saver();
    model_init(&m);
    CHECK_OK(model_register(s, &m));
    restore_fails(s, "never-saved", CKPT_ENOTFOUND, "restore of a prefix that does not exist");
    ckpt_saver_free(s);

    /* a data file deleted by rank 0 (per-rank: the last rank's; shared: the only one) */
    begin_case("restore with a deleted data file");
    s = new_saver();
    model_init(&m);
    CHECK_OK(model_register(s, &m));
    model_fill(&m, 4);
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/del", g_dir);
    ckpt_save_info info = { .epoch = 0, .step = 4 };
    int rc = ckpt_saver_write(s, prefix, &info);
    check_collective_rc(rc, CKPT_OK, "write del");
    char victim[1024] = "";
    if (g_rank == 0) {
        DIR *d = opendir(g_dir);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL)
            if (strncmp(de->d_name, "del.data-", 9) == 0 && strcmp(de->d_name, victim) > 0)
                snprintf(victim, sizeof victim, "%s", de->d_name);
        if (d)
            closedir(d);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", g_dir, victim);
        CHECK_MSG(victim[0] && unlink(path) == 0, "cannot delete a data file of del (\"%s\")",
                  victim);
    }
    MPI_Bcast(victim, (int)sizeof victim, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (restore_fails(s, "del", CKPT_ECORRUPT, "restore with a deleted data file"))
        CHECK_MSG(victim[0] && strstr(msg_of(), victim) != NULL,
                  "deleted data file: message does not name %s: %s", victim, msg_of());

    /* a truncated index: cut in half, then only its CRC cut off */
    begin_case("restore of a truncated index");
    snprintf(prefix, sizeof prefix, "%s/trunc", g_dir);
    rc = ckpt_saver_write(s, prefix, &info);
    check_collective_rc(rc, CKPT_OK, "write trunc");
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/trunc.index", g_dir);
    struct stat st;
    off_t full_len = 0;
    if (g_rank == 0) {
        CHECK(stat(ipath, &st) == 0);
        full_len = st.st_size;
        CHECK(truncate(ipath, full_len / 2) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    restore_fails(s, "trunc", CKPT_ECORRUPT, "restore of an index cut in half");
    if (g_rank == 0)
        CHECK(truncate(ipath, full_len - 1) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    restore_fails(s, "trunc", CKPT_ECORRUPT, "restore of an index missing its last byte");
    ckpt_saver_free(s);

    /* after all that, the good checkpoint still restores with a fresh saver */
    begin_case("final restore of ck-2");
    s = new_saver();
    model_init(&m);
    CHECK_OK(model_register(s, &m));
    restore_and_check(s, &m, "ck-2", 2, "final restore of ck-2");
    ckpt_saver_free(s);
    alarm(0);
}

int main(int argc, char **argv)
{
    check_watchdog_s = 45; /* seconds a case may take */
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc != 3 || (strcmp(argv[2], "shared") != 0 && strcmp(argv[2], "per-rank") != 0)) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_saver_fault OUTDIR shared|per-rank\n");
        MPI_Finalize();
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    g_layout_name = argv[2];
    g_layout = strcmp(argv[2], "shared") == 0 ? CKPT_LAYOUT_SHARED : CKPT_LAYOUT_PER_RANK;
    unsetenv("MPICKPT_FAULT"); /* only what this test sets */
    if (g_rank == 0)
        mkdir(g_dir, 0755);
    MPI_Barrier(MPI_COMM_WORLD);

    test_faults();
    test_bad_registrations();
    test_bad_restores();

    return check_mpi_done("test_saver_fault");
}
