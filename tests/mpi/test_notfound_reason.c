/*
 * CKPT_ENOTFOUND's four meanings told apart by ckpt_error.reason (issue 31), on any number of
 * ranks: every case returns CKPT_ENOTFOUND with the same message on every rank (coll()) and the
 * same reason on every rank.
 *
 *   no checkpoint  a saver restore of a prefix without an index (the chief finds it; the others
 *                  learn it from the agreement), a manager's restore of a step it does not list,
 *                  ckpt_newest_restorable() of an empty directory
 *   no tensor      a manager restore (options version 3: a missing name is CKPT_ENOTFOUND) into a
 *                  registration with a name the checkpoint lacks: an error, not a fall back to the
 *                  older checkpoint (the manager tells it from a damaged checkpoint by the reason
 *                  alone now); a reader's lookup
 *   pinned         the pinned checkpoint whose index is gone (nothing at or above the pin), and a
 *                  dropped checkpoint asked for by step
 *   no metrics     ckpt_saver_metrics_get() before any save
 * And what is not CKPT_ENOTFOUND has no reason; a damaged newest checkpoint (its index gone) is
 * still fallen back past (skipped 1).
 */
#include "mpi_check.h"
#include "mpickpt.h"
#include "mpickpt/manager.h"
#include "restart.h"

#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_size;

/* 1 when the calling thread's error has `reason` on every rank. Collective. */
static int reason_all(int want, const char *what)
{
    const ckpt_error *e = ckpt_error_last();
    int got = e ? e->reason : -1;
    int ok = all_true(got == want);
    CHECK_MSG(got == want, "%s: rank %d has reason %d (%s), expected %d (%s): %s", what, g_rank,
              got, ckpt_reason_name(got), want, ckpt_reason_name(want),
              e ? e->message : "(no error)");
    return ok;
}

static float g_a[4], g_x[4];
static int64_t g_d4 = 4;

static ckpt_saver *saver_a(int with_x)
{
    ckpt_saver *s = NULL;
    ckpt_shape s4;
    ckpt_shape_init(&s4, 1, &g_d4);
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL));
    CHECK_OK(ckpt_saver_add_replicated(s, "a", CKPT_FLOAT32, &s4, g_a, CKPT_REPLICA_PRIMARY));
    if (with_x)
        CHECK_OK(ckpt_saver_add_replicated(s, "x", CKPT_FLOAT32, &s4, g_x, CKPT_REPLICA_PRIMARY));
    return s;
}

/* A manager's checkpoints ckpt-1 (step 10) and ckpt-2 (step 20) of 'a' in dir. */
static void two_checkpoints(const char *dir)
{
    ckpt_saver *s = saver_a(0);
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager"));
    for (int k = 1; k <= 2; k++) {
        for (int i = 0; i < 4; i++)
            g_a[i] = (float)(10 * k + i);
        ckpt_manager_save_info si = { 0, 10 * k, 0, 1 };
        CHECK(coll(ckpt_manager_save(m, &si, NULL, 0), CKPT_OK, "manager save"));
    }
    ckpt_manager_free(m);
    ckpt_saver_free(s);
}

/* Version 3: a registered name the checkpoint lacks is CKPT_ENOTFOUND (not strict). */
static ckpt_manager *manager_v3(ckpt_saver *s, const char *dir)
{
    ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT;
    mo.version = 3;
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, &mo), CKPT_OK, "manager v3"));
    return m;
}

static void rank0_unlink(const char *dir, const char *name)
{
    if (g_rank == 0) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        CHECK_MSG(unlink(p) == 0, "unlink %s", p);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void rank0_control(const char *dir, const ckpt__restart *c)
{
    if (g_rank == 0)
        CHECK_OK(ckpt__restart_write(c, dir));
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_no_checkpoint(const char *out)
{
    check_case(1, "no checkpoint");
    char dir[3200], p[3300];
    snprintf(dir, sizeof dir, "%s/none", out);
    make_dir(dir);
    /* a saver restore of a prefix without an index: only the chief looks */
    ckpt_saver *s = saver_a(0);
    snprintf(p, sizeof p, "%s/nothing-here", dir);
    CHECK(coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_ENOTFOUND, "saver restore"));
    CHECK(reason_all(CKPT_REASON_NO_CHECKPOINT, "saver restore"));
    ckpt_saver_free(s);
    /* local: the newest restorable checkpoint of an empty directory */
    char newest[4200];
    CHECK(ckpt_newest_restorable(newest, sizeof newest, dir) == CKPT_ENOTFOUND);
    CHECK(reason_all(CKPT_REASON_NO_CHECKPOINT, "newest_restorable"));
    /* a manager asked for a step it does not list */
    snprintf(dir, sizeof dir, "%s/steps", out);
    two_checkpoints(dir);
    s = saver_a(0);
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager"));
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK(coll(ckpt_manager_restore_at_step(&r, m, 15), CKPT_ENOTFOUND, "restore_step 15"));
    CHECK(strstr(g_msg, "restorable: 10, 20") != NULL);
    CHECK(reason_all(CKPT_REASON_NO_CHECKPOINT, "restore_step 15"));
    /* what is not CKPT_ENOTFOUND has no reason (a bad argument) */
    CHECK(coll(ckpt_manager_restore_at_counter(&r, m, g_rank == 0 ? 1 : 2),
               g_size > 1 ? CKPT_EINVAL : CKPT_OK, "restore_counter, ranks disagree"));
    if (g_size > 1)
        CHECK(reason_all(CKPT_REASON_NONE, "EINVAL"));
    ckpt_manager_free(m);
    ckpt_saver_free(s);
}

static void test_no_tensor(const char *out)
{
    check_case(1, "no tensor");
    char dir[3200], p[3300];
    snprintf(dir, sizeof dir, "%s/tensor", out);
    two_checkpoints(dir);
    /* 'x' is in neither checkpoint: the registration's error, not a damaged ckpt-2 (no fall
     * back to ckpt-1, nothing skipped) */
    ckpt_saver *s = saver_a(1);
    ckpt_manager *m = manager_v3(s, dir);
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_ENOTFOUND, "restore into 'x'"));
    CHECK(strstr(g_msg, "'x'") != NULL && strstr(g_msg, "ckpt-2") != NULL);
    CHECK(reason_all(CKPT_REASON_NO_TENSOR, "restore into 'x'"));
    CHECK(r.restored == 0 && r.skipped == 0);
    ckpt_manager_free(m);
    ckpt_saver_free(s);
    /* a reader's lookup (local) */
    ckpt_reader *rd = NULL;
    snprintf(p, sizeof p, "%s/ckpt-1", dir);
    CHECK_OK(ckpt_reader_open(&rd, p));
    size_t ti;
    CHECK(ckpt_reader_find(&ti, rd, "x") == CKPT_ENOTFOUND);
    CHECK(reason_all(CKPT_REASON_NO_TENSOR, "reader find"));
    ckpt_reader_free(rd);
    /* the newest one damaged (its index gone): still fallen back past, to ckpt-1 */
    rank0_unlink(dir, "ckpt-2.index");
    s = saver_a(0);
    m = manager_v3(s, dir);
    g_a[0] = -1.0f;
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_OK, "fall back past ckpt-2"));
    CHECK(r.restored == 1 && r.skipped == 1 && r.step == 10 && g_a[0] == 10.0f);
    ckpt_manager_free(m);
    ckpt_saver_free(s);
}

static void test_pinned(const char *out)
{
    check_case(1, "pinned");
    char dir[3200];
    snprintf(dir, sizeof dir, "%s/pin", out);
    two_checkpoints(dir);
    /* ckpt-2 dropped: asked for by its step, refused */
    ckpt__restart c;
    memset(&c, 0, sizeof c);
    ckpt__restart_drop drop = { "ckpt-2", 2 };
    c.drops = &drop;
    c.num_drops = c.cap_drops = 1;
    rank0_control(dir, &c);
    ckpt_saver *s = saver_a(0);
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager"));
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK(coll(ckpt_manager_restore_at_step(&r, m, 20), CKPT_ENOTFOUND, "dropped ckpt-2"));
    CHECK(strstr(g_msg, "dropped") != NULL);
    CHECK(reason_all(CKPT_REASON_PINNED, "dropped ckpt-2"));
    ckpt_manager_free(m);
    /* ckpt-1 pinned (ckpt-2 set aside), then its index gone: the restore stops at the pin */
    memset(&c, 0, sizeof c);
    c.pinned = 1;
    snprintf(c.pin, sizeof c.pin, "ckpt-1");
    c.pin_counter = 1;
    c.pin_through = 2;
    rank0_control(dir, &c);
    rank0_unlink(dir, "ckpt-1.index");
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager"));
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_ENOTFOUND, "pinned, unreadable"));
    CHECK(strstr(g_msg, "pinned") != NULL);
    CHECK(reason_all(CKPT_REASON_PINNED, "pinned, unreadable"));
    CHECK(r.restored == 0);
    ckpt_manager_free(m);
    ckpt_saver_free(s);
}

static void test_no_metrics(void)
{
    check_case(1, "no metrics");
    ckpt_saver *s = saver_a(0);
    ckpt_saver_metrics sm = CKPT_SAVER_METRICS_INIT;
    CHECK(ckpt_saver_metrics_get(&sm, s) == CKPT_ENOTFOUND);
    CHECK(reason_all(CKPT_REASON_NO_METRICS, "last_metrics"));
    ckpt_saver_free(s);
    CHECK(strcmp(ckpt_reason_name(CKPT_REASON_NO_METRICS), "no metrics") == 0);
    CHECK(strcmp(ckpt_reason_name(99), "unknown reason") == 0);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_notfound_reason OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    char out[3000];
    snprintf(out, sizeof out, "%s", argv[1]);
    make_dir(out); /* collective */
    test_no_checkpoint(out);
    test_no_tensor(out);
    test_pinned(out);
    test_no_metrics();
    return check_mpi_done("test_notfound_reason");
}
