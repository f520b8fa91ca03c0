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
 *
 * And ckpt_manager_restore_ex() / ckpt_training_restore_ex() (the same options on a restore):
 *
 *   which     latest, a step, a save counter: each restores exactly that checkpoint's values;
 *             ranks asking for different restores (or steps), or a `which` that is not one,
 *             are CKPT_EINVAL on every rank, nothing read
 *   error     one rank's error is every rank's, nothing read (the buffers keep their values)
 *   check     unlike: CKPT_EMISMATCH, reason CKPT_REASON_CHECK, nothing read
 *   lenient   one rank's makes a strict manager's restore not strict anywhere: a registration the
 *             checkpoint lacks is listed as missing on every rank, the rest restored exactly;
 *             without it the same restore fails on every rank
 *   training  a training state's restore takes the options (which must be latest)
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

/* A restore_ex of `o`; its agreed status. Every buffer is scribbled first: after a failure it
 * must still hold the scribble (nothing read). */
static int restore_ex(ckpt_manager *m, const ckpt_manager_restore_options *o, int want,
                      const char *what, ckpt_manager_restore_result *r)
{
    fill(-77);
    ckpt_manager_restore_result init = CKPT_MANAGER_RESTORE_RESULT_INIT;
    *r = init;
    int rc = ckpt_manager_restore_ex(r, m, o);
    CHECK(coll(rc, want, what));
    if (rc != CKPT_OK)
        CHECK_MSG(values_of(-77), "%s: values read after a failure", what);
    return rc;
}

/* The manager holds steps 1, 2, 6 and 8 (the saves that committed). */
static void restores(ckpt_manager *m, ckpt_error *e)
{
    ckpt_manager_restore_result r;
    ckpt_manager_restore_options o = CKPT_MANAGER_RESTORE_OPTIONS_INIT;
    CHECK(restore_ex(m, NULL, CKPT_OK, "restore_ex, no options", &r) == CKPT_OK);
    CHECK(r.restored && r.step == 8 && values_of(8));
    o.which = CKPT_MANAGER_RESTORE_STEP;
    o.value = 6;
    CHECK(restore_ex(m, &o, CKPT_OK, "restore_ex, step 6", &r) == CKPT_OK);
    CHECK(r.restored && r.step == 6 && values_of(6));
    int64_t counter = r.save_counter;
    o.which = CKPT_MANAGER_RESTORE_COUNTER;
    o.value = counter;
    CHECK(restore_ex(m, &o, CKPT_OK, "restore_ex, step 6's counter", &r) == CKPT_OK);
    CHECK(r.restored && r.step == 6 && r.save_counter == counter && values_of(6));
    o.which = CKPT_MANAGER_RESTORE_STEP;
    o.value = 2;
    o.check = 0xabcULL;
    CHECK(restore_ex(m, &o, CKPT_OK, "restore_ex, step 2, checks alike", &r) == CKPT_OK);
    CHECK(r.restored && r.step == 2 && values_of(2));

    /* one rank's error; checks unlike */
    /* (a message that names its rank already is passed on as it is: no host added) */
    static char named[128];
    snprintf(named, sizeof named, "rank %d: the state's leaf 'opt/y' is not contiguous", g_rank);
    memset(e, 0, sizeof *e);
    e->code = CKPT_EINVAL;
    e->message = named;
    o.error = g_rank == g_size - 1 ? e : NULL;
    restore_ex(m, &o, CKPT_EINVAL, "restore_ex, the last rank's error", &r);
    char want[128];
    snprintf(want, sizeof want, "rank %d: the state's leaf 'opt/y' is not contiguous",
             g_size - 1);
    CHECK_MSG(strcmp(g_msg, want) == 0, "message: %s", g_msg);
    o.error = NULL;
    o.check = g_rank == 0 ? 1 : 2;
    restore_ex(m, &o, g_size > 1 ? CKPT_EMISMATCH : CKPT_OK, "restore_ex, checks unlike", &r);
    if (g_size > 1)
        CHECK(ckpt_error_last()->reason == CKPT_REASON_CHECK);
    o.check = 0;

    /* ranks asking for different restores, steps; a `which` that is not one */
    if (g_size > 1) {
        o.which = g_rank == 0 ? CKPT_MANAGER_RESTORE_LATEST : CKPT_MANAGER_RESTORE_STEP;
        restore_ex(m, &o, CKPT_EINVAL, "restore_ex, which unlike", &r);
        CHECK(strstr(g_msg, "different restores") != NULL);
        o.which = CKPT_MANAGER_RESTORE_STEP;
        o.value = g_rank == 0 ? 6 : 8;
        restore_ex(m, &o, CKPT_EINVAL, "restore_ex, steps unlike", &r);
        CHECK(strstr(g_msg, "from step 6 to step 8") != NULL);
    }
    o.which = g_rank == g_size - 1 ? 7 : CKPT_MANAGER_RESTORE_LATEST;
    restore_ex(m, &o, CKPT_EINVAL, "restore_ex, which 7", &r);
    CHECK(mentions_rank(g_msg, g_size - 1) && strstr(g_msg, "which 7"));
    ckpt_manager_restore_options bad = CKPT_MANAGER_RESTORE_OPTIONS_INIT;
    bad.version = 42;
    restore_ex(m, g_rank == 0 ? &bad : NULL, CKPT_EINVAL, "restore_ex, unknown version", &r);
    CHECK(mentions_rank(g_msg, 0) && strstr(g_msg, "version 42"));
    /* and then it restores */
    CHECK(restore_ex(m, NULL, CKPT_OK, "restore_ex after the failures", &r) == CKPT_OK);
    CHECK(r.restored && r.step == 8 && values_of(8));
}

/* `dir`'s checkpoints restored into a registration with one name more ("extra"), by a strict
 * manager: an error without leniency, with one rank's the restore lists it missing; then a
 * training state's restore with options. */
static void lenient_and_training(const char *out, const char *dir)
{
    check_case(1, "restore_ex lenient, training");
    ckpt_shape s16, s4;
    ckpt_shape_init(&s16, 1, &g_d16);
    ckpt_shape_init(&s4, 1, &g_d4);
    static float extra[4];
    ckpt_saver *s = NULL;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL));
    CHECK_OK(ckpt_saver_add_replicated(s, "w", CKPT_FLOAT64, &s16, g_w,
                                       CKPT_REPLICA_PER_COMPONENT));
    CHECK_OK(ckpt_saver_add_replicated(s, "b", CKPT_FLOAT32, &s4, g_b, CKPT_REPLICA_PRIMARY));
    CHECK_OK(ckpt_saver_add_replicated(s, "extra", CKPT_FLOAT32, &s4, extra,
                                       CKPT_REPLICA_PRIMARY));
    ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT; /* strict restores */
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, &mo), CKPT_OK, "strict manager"));
    ckpt_manager_restore_result r;
    restore_ex(m, NULL, CKPT_ERROR, "strict restore, a name the checkpoint lacks", &r);
    ckpt_manager_restore_options o = CKPT_MANAGER_RESTORE_OPTIONS_INIT;
    o.lenient = g_rank == g_size - 1;
    CHECK(restore_ex(m, &o, CKPT_OK, "lenient on the last rank", &r) == CKPT_OK);
    CHECK(r.restored && r.step == 8 && values_of(8));
    const ckpt_name_list *miss = NULL, *unexp = NULL;
    ckpt_manager_restore_names(m, &miss, &unexp);
    int listed = miss && ckpt_name_list_size(miss) == 1 &&
                 strcmp(ckpt_name_list_get(miss, 0), "extra") == 0;
    CHECK_MSG(listed, "rank %d: 'extra' not listed as missing", g_rank);
    /* the leniency was this restore's only */
    restore_ex(m, NULL, CKPT_ERROR, "strict again", &r);
    ckpt_manager_free(m);

    /* a training state: its restore with options */
    char tdir[3300];
    snprintf(tdir, sizeof tdir, "%s/training", out);
    ckpt_training *t = NULL;
    CHECK(coll(ckpt_training_create(&t, s, tdir, NULL), CKPT_OK, "training"));
    fill(5);
    CHECK(coll(ckpt_training_back_up(t, 1, 5, 0), CKPT_OK, "back up"));
    int restored = -1;
    ckpt_error e;
    memset(&e, 0, sizeof e);
    e.code = CKPT_EMISMATCH;
    e.message = "the training state's tree changed";
    o = (ckpt_manager_restore_options)CKPT_MANAGER_RESTORE_OPTIONS_INIT;
    o.error = g_rank == 0 ? &e : NULL;
    fill(-77);
    CHECK(coll(ckpt_training_restore_ex(&restored, t, &o), CKPT_EMISMATCH, "training, an error"));
    CHECK(restored == 0 && values_of(-77));
    o.error = NULL;
    o.which = CKPT_MANAGER_RESTORE_STEP;
    o.value = 5;
    CHECK(coll(ckpt_training_restore_ex(&restored, t, &o), CKPT_EINVAL, "training, a step"));
    o.which = CKPT_MANAGER_RESTORE_LATEST;
    CHECK(coll(ckpt_training_restore_ex(&restored, t, &o), CKPT_OK, "training restore"));
    CHECK(restored == 1 && values_of(5) && ckpt_training_initial_step(t, 0) == 6);
    ckpt_training_free(t);
    CHECK_OK(ckpt_saver_close(s));
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
    restores(m, &e);
    ckpt_manager_free(m);
    CHECK_OK(ckpt_saver_close(s)); /* frees it */
    if (!async)
        lenient_and_training(out, dir);
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
