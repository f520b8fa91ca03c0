/*
 * ckpt_manager_save_ex() (issue 31): what a layer above the manager needs its ranks to agree on
 * rides the save's first collective call (ckpt_manager_save_options), in sync and async mode:
 *
 *   error     one rank's error (its code, message, errno, reason) is the error of every rank,
 *             naming that rank; nothing is saved, the checkpoint before stays the latest
 *   check     values that differ across ranks are CKPT_EMISMATCH with reason CKPT_REASON_CHECK on
 *             every rank, nothing saved; an error on any rank wins over differing checks; alike
 *             values (or none) save, and the checkpoint restores exactly
 *   options   an unknown version, or a positive code, is CKPT_EINVAL on every rank
 *
 * Every failure leaves the manager usable: the next save commits and restores exactly.
 */
#include "mpi_check.h"
#include "mpickpt.h"
#include "mpickpt/manager.h"

#include "coll.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int g_rank, g_size;
static double g_w[16]; /* this rank's shard, rank * 1000 + step + i */
static float g_b[4];   /* replicated: step + i */
static int64_t g_d16 = 16, g_d4 = 4;

static void fill(int64_t step)
{
    for (int i = 0; i < 16; i++)
        g_w[i] = g_rank * 1000.0 + (double)step + i;
    for (int i = 0; i < 4; i++)
        g_b[i] = (float)(step + i);
}

/* 1 on every rank when the restored values are step's on every rank. Collective. */
static int values_of(int64_t step)
{
    int ok = 1;
    for (int i = 0; i < 16; i++)
        ok &= g_w[i] == g_rank * 1000.0 + (double)step + i;
    for (int i = 0; i < 4; i++)
        ok &= g_b[i] == (float)(step + i);
    CHECK_MSG(ok, "rank %d: values are not step %lld's (w[0] %g, b[0] %g)", g_rank,
              (long long)step, g_w[0], (double)g_b[0]);
    return all_true(ok);
}

/* The step of the manager's latest checkpoint, restored into the registrations (scribbled
 * first). */
static int64_t restore_latest(ckpt_manager *m)
{
    fill(-77);
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_OK, "restore"));
    CHECK(r.restored);
    return r.restored ? r.step : -1;
}

/* A save of step `step` with `opts`; its status, agreed (coll() checks code and message). */
static int save(ckpt_manager *m, ckpt_saver *s, int64_t step, const ckpt_manager_save_options *o,
                int want, const char *what)
{
    fill(step);
    char out[4400] = "x";
    ckpt_manager_save_info si = { 0, step, 0, 1 };
    int rc = ckpt_manager_save_ex(out, sizeof out, m, &si, o);
    CHECK(coll(rc, want, what));
    if (rc == CKPT_OK)
        CHECK_MSG(strstr(out, "/ckpt-") != NULL, "%s: out is '%s'", what, out);
    else
        CHECK_MSG(out[0] == '\0', "%s: out is '%s' after a failure", what, out);
    /* the async save's own outcome too (every failure here is found before anything is written) */
    if (rc == CKPT_OK)
        CHECK(coll(ckpt_saver_sync(s), CKPT_OK, "sync"));
    return rc;
}

static void run(const char *out, int async)
{
    check_case(1, "save_ex, async %d", async);
    char dir[3200];
    snprintf(dir, sizeof dir, "%s/%s", out, async ? "async" : "sync");
    ckpt_shape s16, s4;
    ckpt_shape_init(&s16, 1, &g_d16);
    ckpt_shape_init(&s4, 1, &g_d4);
    ckpt_saver_options so = CKPT_SAVER_OPTIONS_INIT;
    so.async = async;
    ckpt_saver *s = NULL;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, &so));
    CHECK_OK(ckpt_saver_add_replicated(s, "w", CKPT_FLOAT64, &s16, g_w,
                                       CKPT_REPLICA_PER_COMPONENT));
    CHECK_OK(ckpt_saver_add_replicated(s, "b", CKPT_FLOAT32, &s4, g_b, CKPT_REPLICA_PRIMARY));
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager"));

    /* no options, and options with no error and no check: saved */
    CHECK(save(m, s, 1, NULL, CKPT_OK, "save_ex, no options") == CKPT_OK);
    ckpt_manager_save_options o = CKPT_MANAGER_SAVE_OPTIONS_INIT;
    CHECK(save(m, s, 2, &o, CKPT_OK, "save_ex, empty options") == CKPT_OK);
    CHECK(restore_latest(m) == 2 && values_of(2));

    /* the last rank's error, with its errno: every rank's, naming it; nothing saved */
    ckpt_error e;
    memset(&e, 0, sizeof e);
    e.code = CKPT_ENOSPC;
    e.message = "the state's leaf 'opt/x' has no room";
    e.sys_errno = EDQUOT;
    o.error = g_rank == g_size - 1 ? &e : NULL;
    save(m, s, 3, &o, CKPT_ENOSPC, "the last rank's error");
    CHECK_MSG(mentions_rank(g_msg, g_size - 1) && strstr(g_msg, "'opt/x' has no room"),
              "message: %s", g_msg);
    CHECK_MSG(ckpt_error_last()->sys_errno == EDQUOT, "errno %d", ckpt_error_last()->sys_errno);
    CHECK(restore_latest(m) == 2 && values_of(2));

    /* a reason travels too; and an error on rank 0 wins over checks that differ */
    memset(&e, 0, sizeof e);
    e.code = CKPT_ENOTFOUND;
    e.message = "no tensor 'emb' in the caller's state";
    e.reason = CKPT_REASON_NO_TENSOR;
    o.error = g_rank == 0 ? &e : NULL;
    o.check = (uint64_t)g_rank + 1;
    save(m, s, 4, &o, CKPT_ENOTFOUND, "rank 0's error, checks unlike");
    CHECK_MSG(mentions_rank(g_msg, 0) && strstr(g_msg, "'emb'"), "message: %s", g_msg);
    CHECK(ckpt_error_last()->reason == CKPT_REASON_NO_TENSOR);

    /* checks that differ: CKPT_EMISMATCH, reason CKPT_REASON_CHECK, on every rank */
    o.error = NULL;
    o.check = g_rank == g_size - 1 ? 0xfeedULL : 0xbeefULL;
    save(m, s, 5, &o, g_size > 1 ? CKPT_EMISMATCH : CKPT_OK, "checks unlike");
    if (g_size > 1) {
        CHECK(ckpt_error_last()->reason == CKPT_REASON_CHECK);
        CHECK_MSG(strstr(g_msg, "check") != NULL, "message: %s", g_msg);
        CHECK(restore_latest(m) == 2 && values_of(2));
    } else {
        CHECK(restore_latest(m) == 5 && values_of(5));
    }

    /* alike checks: saved */
    o.check = 0x0123456789abcdefULL;
    CHECK(save(m, s, 6, &o, CKPT_OK, "checks alike") == CKPT_OK);
    CHECK(restore_latest(m) == 6 && values_of(6));

    /* bad options on one rank: CKPT_EINVAL on every rank */
    ckpt_manager_save_options bad = o;
    bad.version = 99;
    save(m, s, 7, g_rank == g_size - 1 ? &bad : &o, CKPT_EINVAL, "unknown version");
    CHECK(mentions_rank(g_msg, g_size - 1) && strstr(g_msg, "version 99"));
    memset(&e, 0, sizeof e);
    e.code = 5;
    e.message = "not an error";
    o.error = g_rank == 0 ? &e : NULL;
    save(m, s, 7, &o, CKPT_EINVAL, "positive code");
    CHECK(mentions_rank(g_msg, 0) && strstr(g_msg, "positive"));

    /* the manager still saves and restores */
    o.error = NULL;
    CHECK(save(m, s, 8, &o, CKPT_OK, "save after the failures") == CKPT_OK);
    CHECK(restore_latest(m) == 8 && values_of(8));
    ckpt_manager_free(m);
    CHECK_OK(ckpt_saver_close(s)); /* frees it */
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_manager_save_ex OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    char out[3000];
    snprintf(out, sizeof out, "%s", argv[1]);
    make_dir(out); /* collective */
    run(out, 0);
    run(out, 1);
    return check_mpi_done("test_manager_save_ex");
}
