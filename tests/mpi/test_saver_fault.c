/* Collective saver under injected faults and bad input (usage: test_saver_fault OUTDIR LAYOUT,
 * shared, per-rank or per-node).
 *
 * 1. The test model (model.h: row- and column-partitioned tensors, a full tensor per rank,
 *    replicated primaries, a per-rank component, a blob whose length changes with the step) is
 *    saved at OUTDIR/ck (-> ck-1) with the values of step 1.
 * 2. For every protocol step (plan, write, agree, merge, commit; per-node also node) and failing
 *    rank (0, size-1),
 *    MPICKPT_FAULT=<rank>:<step> makes that save fail: every rank must return CKPT_EIO with a
 *    message naming the fault and the rank, nothing may be committed or left behind, and ck-1 still
 *    restores the step-1 values everywhere.
 * 3. A clean save afterwards succeeds and restores (the saver survives failures; nothing hangs).
 * 4. Bad input (mismatched, duplicate, overlapping, missing slices; partial replicated; restore
 *    with a wrong dtype, shape or name; a deleted data file; a missing prefix; a truncated index)
 *    is the same clear error on every rank, and nothing is committed.
 * A watchdog aborts the job (naming the case) when one collective call does not return. */
#include "mpi_check.h"
#include "coll.h"
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

static int g_rank, g_size;
static char g_dir[2048];
static ckpt_layout g_layout;
static const char *g_layout_name;

/* The per-case watchdog of mpi_check.h. */
#define begin_case(...) check_case(0, __VA_ARGS__)

/* ---- the model (model.h) ---- */

/* This rank's part of the model of this job, registered with `s`; returns the first error. */
static int model_setup(tm_model *m, ckpt_saver *s)
{
    int rc = tm_init(m, g_size, g_rank, g_size, 0);
    return rc != CKPT_OK ? rc : tm_register(m, s);
}

static ckpt_saver *new_saver(void)
{
    return new_saver_on(MPI_COMM_WORLD, g_layout, 0, 0);
}

/* ---- checks ---- */

/* The checkpoint OUTDIR/<name> is committed. */
static int index_exists_in_dir(const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return index_exists(p);
}

/* After a failed save, only committed checkpoints and empty workertemp_* directories are left
 * in OUTDIR (coll.h). Collective. */
static void check_outdir_clean(const char *what)
{
    check_dir_clean(g_dir, NULL, what);
}

/* The checkpoint `name` was not committed (rank 0 looks; result shared). */
static void check_not_committed(const char *name, const char *what)
{
    if (g_rank == 0)
        CHECK_MSG(!index_exists_in_dir(name), "%s: %s/%s.index exists: a failed save committed",
                  what, g_dir, name);
}

/* Restores OUTDIR/<name> into a zeroed model and checks every value is `step`'s (coll.h). */
static void restore_and_check(ckpt_saver *s, tm_model *m, const char *name, int step,
                              const char *what)
{
    char prefix[4096], w[512];
    snprintf(prefix, sizeof prefix, "%s/%s", g_dir, name);
    snprintf(w, sizeof w, "%s: restore %s", what, name);
    ckpt_restore_info ri;
    if (restore_check(s, m, prefix, step, g_layout, &ri, w))
        CHECK_EQ_INT(ckpt_saver_counter(s), ri.save_counter);
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

/* "node" (per-node layout only): a member fails before telling its leader; a leader (rank 0, and
 * the last rank when it leads a node) after its ranks sent their lists, before the file exists.
 * "node-merge" (per-node with several nodes of which some have several ranks: the hierarchical
 * merge): a leader (rank 0, and the last node's) after its node's fragments arrived. */
static const char *const fault_steps[] = { "plan",   "write", "agree",
                                           "merge",  "commit", "node",
                                           "node-merge" };

/* Ranks per simulated node, when the hierarchical merge runs (0 otherwise): the saver's rule
 * (mpi/save_node.c) on MPICKPT_RANKS_PER_NODE and MPICKPT_HIER_MERGE=1 (CMake sets both). */
static int hier_ranks_per_node(void)
{
    const char *e = getenv("MPICKPT_RANKS_PER_NODE"), *h = getenv("MPICKPT_HIER_MERGE");
    int k = e ? atoi(e) : 0;
    if (g_layout != CKPT_LAYOUT_PER_NODE || k <= 0 || !h || strcmp(h, "1") != 0)
        return 0;
    int nnodes = (g_size + k - 1) / k;
    return nnodes > 1 && nnodes < g_size ? k : 0;
}

static void test_faults(void)
{
    tm_model m;
    ckpt_saver *s = new_saver();
    CHECK_OK(model_setup(&m, s));

    char prefix[4096], out[4096];
    snprintf(prefix, sizeof prefix, "%s/ck", g_dir);

    /* 1. the good checkpoint */
    begin_case("good save ck-1");
    set_fault(NULL);
    tm_fill(&m, 1);
    ckpt_save_info info = { .epoch = 0, .step = 1 };
    int rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
    coll(rc, CKPT_OK, "save ck-1");
    char want[4096];
    snprintf(want, sizeof want, "%s-1", prefix);
    CHECK_MSG(strcmp(out, want) == 0, "save wrote \"%s\", want \"%s\"", out, want);
    CHECK_EQ_INT(ckpt_saver_counter(s), 1);
    check_outdir_clean("after save ck-1");
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
            if (strcmp(step, "node") == 0 && g_layout != CKPT_LAYOUT_PER_NODE)
                continue;
            if (strcmp(step, "node-merge") == 0) { /* leaders only: rank 0, the last node's */
                int k = hier_ranks_per_node();
                if (k == 0 || (fi == 1 && (g_size - 1) / k == 0))
                    continue;
                fr = fi == 0 ? 0 : (g_size - 1) / k * k;
            }
            char what[256], fault[64];
            snprintf(fault, sizeof fault, "%d:%s", fr, step);
            snprintf(what, sizeof what, "MPICKPT_FAULT=%s (%d ranks, %s)", fault, g_size,
                     g_layout_name);
            begin_case("%s", what);

            tm_fill(&m, 2);
            info.step = 2;
            int64_t before = counter_same_everywhere(s, what);
            set_fault(fault);
            out[0] = '\0';
            rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
            set_fault(NULL);

            if (coll(rc, CKPT_EIO, what)) {
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
            check_outdir_clean(what);
            if (g_rank == 0)
                CHECK_MSG(index_exists_in_dir("ck-1"), "%s: ck-1.index disappeared", what);

            /* The previous checkpoint is intact. */
            restore_and_check(s, &m, "ck-1", 1, what);
            CHECK_EQ_INT(ckpt_saver_counter(s), 1);
        }
    }

    /* 3. the saver still works: a clean save of the step-2 values */
    begin_case("clean save after the faults");
    set_fault(NULL);
    tm_fill(&m, 2);
    info.step = 2;
    out[0] = '\0';
    rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
    coll(rc, CKPT_OK, "clean save after the faults");
    snprintf(want, sizeof want, "%s-2", prefix);
    CHECK_MSG(strcmp(out, want) == 0, "clean save wrote \"%s\", want \"%s\"", out, want);
    CHECK_EQ_INT(ckpt_saver_counter(s), 2);
    check_outdir_clean("after the clean save");
    begin_case("restore ck-2");
    restore_and_check(s, &m, "ck-2", 2, "after the clean save");
    restore_and_check(s, &m, "ck-1", 1, "ck-1 after the clean save");

    /* A fault named for a rank that does not exist changes nothing. */
    begin_case("fault on a rank outside the job");
    char fault[64];
    snprintf(fault, sizeof fault, "%d:write", g_size + 5);
    set_fault(fault);
    tm_fill(&m, 3);
    info.step = 3;
    snprintf(prefix, sizeof prefix, "%s/other", g_dir);
    rc = ckpt_saver_write(s, prefix, &info);
    set_fault(NULL);
    coll(rc, CKPT_OK, "write with a fault on a rank outside the job");
    restore_and_check(s, &m, "other", 3, "fault on a rank outside the job");

    begin_case("free the fault saver");
    ckpt_saver_free(s);

    /* The first save of a fresh saver fails in its (not yet cached) plan; the failed plan must
     * not be reused: the next save plans again and succeeds. */
    begin_case("plan fault on the first save of a fresh saver");
    s = new_saver();
    CHECK_OK(model_setup(&m, s));
    tm_fill(&m, 5);
    info.step = 5;
    snprintf(fault, sizeof fault, "%d:plan", g_size - 1);
    set_fault(fault);
    snprintf(prefix, sizeof prefix, "%s/fresh", g_dir);
    rc = ckpt_saver_save(s, prefix, &info, NULL, 0);
    set_fault(NULL);
    if (coll(rc, CKPT_EIO, "plan fault on the first save of a fresh saver"))
        CHECK_MSG(strstr(msg_of(), "injected fault") != NULL, "fresh plan fault: message: %s",
                  msg_of());
    check_not_committed("fresh-1", "plan fault on the first save of a fresh saver");
    check_outdir_clean("plan fault on the first save of a fresh saver");
    rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
    coll(rc, CKPT_OK, "save after a failed first plan");
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
    int ok = coll(rc, expected, what);
    char n[300];
    snprintf(n, sizeof n, "%s-1", name);
    check_not_committed(n, what);
    check_outdir_clean(what);
    return ok;
}

static int restore_fails(ckpt_saver *s, const char *name, int expected, const char *what)
{
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/%s", g_dir, name);
    int rc = ckpt_saver_restore(s, prefix, NULL, NULL);
    return coll(rc, expected, what);
}

static void test_bad_registrations(void)
{
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    ckpt_shape ws = tm_shape(2, TM_W_ROWS, TM_W_COLS);
    ckpt_slice mine = tm_slice2(m.w_row0, 0, m.w_nrows, TM_W_COLS);
    static float extra[TM_W_ROWS * TM_W_COLS]; /* zeros */

    if (g_size > 1) {
        /* the last rank registers "w" as float64, the others as float32 */
        begin_case("mismatched dtype");
        ckpt_saver *s = new_saver();
        if (g_rank == g_size - 1)
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT64, &ws, &mine, m.wd));
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
            int64_t r0, n0;
            tm_part(TM_W_ROWS, g_size, 0, &r0, &n0);
            ckpt_slice dup = tm_slice2(r0, 0, n0, TM_W_COLS);
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &dup, extra));
        }
        if (save_fails(s, "bad_dup", CKPT_EMISMATCH, "duplicate slice"))
            CHECK_MSG(strstr(msg_of(), "duplicate") != NULL,
                      "duplicate slice: message lacks \"duplicate\": %s", msg_of());
        ckpt_saver_free(s);

        /* the last rank registers row 0 as well: it overlaps rank 0's rows */
        begin_case("overlapping slices");
        s = new_saver();
        CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &mine, m.w));
        if (g_rank == g_size - 1) {
            ckpt_slice ov = tm_slice2(0, 0, 1, TM_W_COLS);
            CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &ov, extra));
        }
        if (save_fails(s, "bad_overlap", CKPT_EMISMATCH, "overlapping slices"))
            CHECK_MSG(strstr(msg_of(), "overlap") != NULL,
                      "overlapping slices: message lacks \"overlaps\": %s", msg_of());
        ckpt_saver_free(s);

        /* a replicated primary registered on every rank but the last */
        begin_case("replicated on some ranks only");
        s = new_saver();
        ckpt_shape rs = tm_shape(1, TM_BIAS_LEN, 0);
        CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &ws, &mine, m.w));
        if (g_rank != g_size - 1)
            CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &rs, m.bias,
                                               CKPT_REPLICA_PRIMARY));
        save_fails(s, "bad_rep", CKPT_ERROR, "replicated primary on some ranks only");
        ckpt_saver_free(s);
    }

    /* nobody registers the last row of "w": a gap */
    begin_case("gap");
    ckpt_saver *s = new_saver();
    ckpt_shape big = tm_shape(2, TM_W_ROWS + 1, TM_W_COLS);
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &big, &mine, m.w));
    if (save_fails(s, "bad_gap", CKPT_EMISMATCH, "gap"))
        CHECK_MSG(strstr(msg_of(), "gap") != NULL, "gap: message lacks \"gap\": %s", msg_of());
    /* the failed plan is not kept: fixed registrations save and restore */
    begin_case("save after fixing the gap");
    ckpt_saver_clear(s);
    CHECK_OK(model_setup(&m, s));
    tm_fill(&m, 6);
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/fixed", g_dir);
    ckpt_save_info info = { .epoch = 0, .step = 6 };
    coll(ckpt_saver_write(s, prefix, &info), CKPT_OK, "save after fixing the gap");
    restore_and_check(s, &m, "fixed", 6, "after fixing the gap");
    ckpt_saver_free(s);
    alarm(0);
}

static void test_bad_restores(void)
{
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    ckpt_shape ws = tm_shape(2, TM_W_ROWS, TM_W_COLS);
    ckpt_slice mine = tm_slice2(m.w_row0, 0, m.w_nrows, TM_W_COLS);

    /* wrong dtype: "w" was saved as float32 (ck-2 from test_faults) */
    begin_case("restore with a wrong dtype");
    ckpt_saver *s = new_saver();
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT64, &ws, &mine, m.wd));
    restore_fails(s, "ck-2", CKPT_EMISMATCH, "restore with a wrong dtype");
    ckpt_saver_free(s);

    /* wrong global shape: one more column */
    begin_case("restore with a wrong shape");
    s = new_saver();
    ckpt_shape wide = tm_shape(2, TM_W_ROWS, TM_W_COLS + 1);
    ckpt_slice mine_wide = tm_slice2(m.w_row0, 0, m.w_nrows, TM_W_COLS + 1);
    static float ww[TM_W_ROWS * (TM_W_COLS + 1)];
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &wide, &mine_wide, ww));
    restore_fails(s, "ck-2", CKPT_EMISMATCH, "restore with a wrong global shape");
    ckpt_saver_free(s);

    /* a name the checkpoint lacks, registered on the last rank only */
    begin_case("restore of a missing name");
    s = new_saver();
    ckpt_shape rs = tm_shape(1, TM_BIAS_LEN, 0), fs = tm_shape(1, 2, 0);
    CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &rs, m.bias, CKPT_REPLICA_PRIMARY));
    if (g_rank == g_size - 1)
        CHECK_OK(ckpt_saver_add_full(s, "no_such_tensor", CKPT_INT64, &fs, m.extra));
    if (restore_fails(s, "ck-2", CKPT_ENOTFOUND, "restore of a name not in the checkpoint"))
        CHECK_MSG(strstr(msg_of(), "no_such_tensor") != NULL,
                  "missing name: message lacks the name: %s", msg_of());
    ckpt_saver_free(s);

    /* a prefix that does not exist */
    begin_case("restore of a missing prefix");
    s = new_saver();
    CHECK_OK(model_setup(&m, s));
    restore_fails(s, "never-saved", CKPT_ENOTFOUND, "restore of a prefix that does not exist");
    ckpt_saver_free(s);

    /* a data file deleted by rank 0 (per-rank: the last rank's; shared: the only one) */
    begin_case("restore with a deleted data file");
    s = new_saver();
    CHECK_OK(model_setup(&m, s));
    tm_fill(&m, 4);
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/del", g_dir);
    ckpt_save_info info = { .epoch = 0, .step = 4 };
    int rc = ckpt_saver_write(s, prefix, &info);
    coll(rc, CKPT_OK, "write del");
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
    coll(rc, CKPT_OK, "write trunc");
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
    CHECK_OK(model_setup(&m, s));
    restore_and_check(s, &m, "ck-2", 2, "final restore of ck-2");
    ckpt_saver_free(s);
    alarm(0);
}

int main(int argc, char **argv)
{
    check_watchdog_s = 45; /* seconds a case may take */
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc != 3 || tm_layout(argv[2]) == CKPT_LAYOUT_UNKNOWN) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_saver_fault OUTDIR shared|per-rank|per-node\n");
        MPI_Finalize();
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    g_layout_name = argv[2];
    g_layout = tm_layout(argv[2]); /* per-node: nodes of MPICKPT_RANKS_PER_NODE ranks */
    unsetenv("MPICKPT_FAULT"); /* only what this test sets */
    if (g_rank == 0)
        mkdir(g_dir, 0755);
    MPI_Barrier(MPI_COMM_WORLD);

    test_faults();
    test_bad_registrations();
    test_bad_restores();

    return check_mpi_done("test_saver_fault");
}
