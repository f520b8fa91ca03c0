/*
 * The saver's close callbacks (ckpt_saver_on_close) and the lifetime of a manager over its saver
 * in any order of closes (issue 31: the manager through the public saver API only).
 *
 * usage: test_close_order OUTDIR CASE
 *
 *   callbacks
 *       a synchronous saver: two callbacks run once each at close, newest first, with
 *       save_running 0; a callback withdrawn (ckpt_saver_on_close_remove) is not called; a pair
 *       registered twice, a NULL saver or callback, and the removal of a pair not registered are
 *       CKPT_EINVAL. An async saver whose close times out with a save in flight (rank 0 held at
 *       "write" until the close gives up): its callback runs once, with save_running 1 on rank 0
 *       (CKPT_ETIMEDOUT) and on every rank whose close timed out; nothing is committed.
 *   saver_first sync|async
 *       a manager and a training state on one saver, saves made (async: the last still in
 *       flight), then the saver closed first: the saves it waited for are listed; every manager
 *       and training call that needs the saver (save, back_up, restore_latest, restore_at_step,
 *       restore_at_counter, restore_or_initialize, training_restore, delete_backup) returns
 *       CKPT_EINVAL on every rank with the same message saying the saver was closed; the
 *       accessors (state copy, latest) still answer; the frees release both directory locks
 *       (a new manager takes each at once, lock_wait_seconds -1) and the newest checkpoints
 *       restore exactly.
 *   hook_running
 *       an async saver whose close times out while the manager's commit hook is running on a save
 *       that was already committing (MPICKPT_FAULT=0:mgr-hook:hold keeps rank 0's hook running,
 *       after it wrote the state file, until the manager is freed): the manager free returns, the
 *       hook finishes, the manager is released by the hook's thread (no leak of the manager, no
 *       use after free under ASan), the directory's lock is released (a new manager takes it at
 *       once) and the checkpoint that was committing is listed and restores exactly.
 */
#include "mpi_check.h"
#include "mpickpt.h"
#include "mpickpt/manager.h"

#include "coll.h"
#include "state_copy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size;
static const char *g_out;

/* What a close that timed out leaves allocated on purpose (saver.h), kept reachable with the
 * buffers registered with it, so that LeakSanitizer does not report what the library leaves by
 * design. */
static ckpt_saver *g_leaked[4];
static int g_nleaked;
static tm_model g_leaked_model[2];


static void model_init(tm_model *m, int64_t big_kib_per_rank)
{
    if (tm_init(m, g_size, g_rank, 0, big_kib_per_rank * g_size) != CKPT_OK)
        MPI_Abort(MPI_COMM_WORLD, 3);
}

static ckpt_manager *new_manager(ckpt_saver *s, const char *dir)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = 0;
    o.lock_wait_seconds = -1; /* no wait: a lock still held is CKPT_EBUSY at once */
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, "ckpt_manager_create"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    return mg;
}

/* A fresh synchronous saver and manager (it must get the directory's lock at once) restore the
 * newest checkpoint of `dir`: `<dir>/<prefix>`, with the values of `step`. Collective. */
static void check_restores(const char *dir, const char *prefix, int64_t step, int64_t kib,
                           const char *what)
{
    tm_model m;
    model_init(&m, kib);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 0, 0);
    register_or_die(&m, s);
    char w[600], want[600];
    snprintf(w, sizeof w, "%s: a new manager on the directory (its lock released)", what);
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.lock_wait_seconds = -1;
    ckpt_manager *mg = NULL;
    if (coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, w)) {
        tm_sentinel(&m);
        ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
        snprintf(w, sizeof w, "%s: restore", what);
        snprintf(want, sizeof want, "%s/%s", dir, prefix);
        if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, w)) {
            CHECK_MSG(res.restored == 1 && strcmp(res.prefix, want) == 0,
                      "%s: restored %d \"%s\", want %s", w, res.restored, res.prefix, want);
            check_values(&m, step, TM_RESTORED, w);
        }
    }
    ckpt_manager_free(mg);
    coll(ckpt_saver_close(s), CKPT_OK, "close the restorer");
    tm_free(&m);
}

/* ---- callbacks -------------------------------------------------------------------------------- */

static char g_calls[8];
static int g_ncalls, g_running[8];

static void record(int save_running, void *payload)
{
    if (g_ncalls < 8) {
        g_running[g_ncalls] = save_running;
        g_calls[g_ncalls++] = *(const char *)payload;
    }
}

static void other(int save_running, void *payload)
{
    (void)save_running;
    (void)payload;
}

static void case_callbacks(void)
{
    static const char a = 'a', b = 'b', c = 'c';
    check_case(1, "callbacks: registration and order (sync saver, %d ranks)", g_size);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 0, 0);
    CHECK_OK(ckpt_saver_on_close(s, record, (void *)&a));
    CHECK_OK(ckpt_saver_on_close(s, record, (void *)&b));
    CHECK_OK(ckpt_saver_on_close(s, other, (void *)&a)); /* another fn, the same payload */
    CHECK_MSG(ckpt_saver_on_close(s, record, (void *)&a) == CKPT_EINVAL,
              "a pair registered twice is not CKPT_EINVAL");
    CHECK_MSG(ckpt_saver_on_close(s, NULL, (void *)&a) == CKPT_EINVAL, "a NULL fn is accepted");
    CHECK_MSG(ckpt_saver_on_close(NULL, record, (void *)&a) == CKPT_EINVAL,
              "a NULL saver is accepted");
    CHECK_OK(ckpt_saver_on_close(s, record, (void *)&c));
    CHECK_OK(ckpt_saver_on_close_remove(s, record, (void *)&c));
    CHECK_MSG(ckpt_saver_on_close_remove(s, record, (void *)&c) == CKPT_EINVAL,
              "removing a pair not registered is not CKPT_EINVAL");
    CHECK_OK(ckpt_saver_on_close_remove(s, other, (void *)&a));
    g_ncalls = 0;
    coll(ckpt_saver_close(s), CKPT_OK, "close");
    CHECK_MSG(g_ncalls == 2 && g_calls[0] == 'b' && g_calls[1] == 'a' && !g_running[0] &&
                  !g_running[1],
              "close called %d callback(s) (%.*s; running %d %d), want b then a, running 0 0",
              g_ncalls, g_ncalls, g_calls, g_running[0], g_running[1]);

    check_case(1, "callbacks: a close that times out with a save in flight (%d ranks)", g_size);
    tm_model *m = &g_leaked_model[0];
    model_init(m, 64);
    s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 1, 0.001);
    register_or_die(m, s);
    CHECK_OK(ckpt_saver_on_close(s, record, (void *)&a));
    char prefix[2600];
    snprintf(prefix, sizeof prefix, "%s/callbacks", g_out);
    tm_fill(m, 1);
    setenv("MPICKPT_FAULT", "0:write:hold", 1); /* rank 0 waits until its close gives up */
    long before[MAX_THREADS], started[MAX_THREADS];
    int nbefore = thread_ids(before, MAX_THREADS);
    int rc = ckpt_saver_write(s, prefix, NULL);
    int nstarted = threads_started(started, before, nbefore);
    coll(rc, CKPT_OK, "the async save");
    g_ncalls = 0;
    rc = ckpt_saver_close(s);
    g_leaked[g_nleaked++] = s; /* allocated still where the close timed out */
    CHECK_MSG(rc == CKPT_ETIMEDOUT, "close returned %d (%s), want CKPT_ETIMEDOUT", rc,
              ckpt_strerror(rc));
    CHECK_MSG(g_ncalls == 1 && g_calls[0] == 'a', "close called %d callback(s), want 1",
              g_ncalls);
    /* rank 0's save was held until its close gave up; another rank's close may have seen the
     * save end (failed, ETIMEDOUT from rank 0's vote) before its own timeout */
    CHECK_MSG(g_ncalls != 1 || g_rank != 0 || g_running[0] == 1,
              "rank 0: save_running %d after its close timed out, want 1", g_running[0]);
    wait_threads_gone(started, nstarted, "callbacks");
    unsetenv("MPICKPT_FAULT");
    CHECK_MSG(!index_exists(prefix), "the abandoned save was committed: %s.index", prefix);
}

/* ---- saver_first ------------------------------------------------------------------------------ */

/* A call that needs the closed saver: CKPT_EINVAL on every rank, the same message, saying so. */
static void closed_err(int rc, const char *what)
{
    if (coll(rc, CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "saver") && strstr(g_msg, "closed"),
                  "%s: the message does not say the saver was closed: %s", what, g_msg);
}

static void case_saver_first(int async)
{
    const char *mode = async ? "async" : "sync";
    check_case(1, "saver_first %s: the saver closed before its manager and training state (%d "
                  "ranks)",
               mode, g_size);
    char dir[2600], tdir[2600];
    snprintf(dir, sizeof dir, "%s/mgr", g_out);
    snprintf(tdir, sizeof tdir, "%s/train", g_out);
    const int64_t kib = 256;
    tm_model m;
    model_init(&m, kib);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, async, 0);
    register_or_die(&m, s);
    ckpt_manager *mg = new_manager(s, dir);
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.lock_wait_seconds = -1;
    ckpt_training *t = NULL;
    if (!coll(ckpt_training_create(&t, s, tdir, &o), CKPT_OK, "ckpt_training_create"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    tm_fill(&m, 1);
    coll(ckpt_training_back_up(t, 1, 1, 1), CKPT_OK, "back_up 1");
    for (int k = 1; k <= 2; k++) {
        tm_fill(&m, 10 * k);
        ckpt_manager_save_info info = { k, 10 * k, 1, 1 };
        coll(ckpt_manager_save(mg, &info, NULL, 0), CKPT_OK, "manager save");
    }
    /* the manager numbers past the saver's counter (the training state's ckpt-1): ckpt-2 and
     * ckpt-3; async: ckpt-3 may still be in flight, the close waits for it and its hook */
    coll(ckpt_saver_close(s), CKPT_OK, "the saver closed first");

    const ckpt_state *st = test_manager_state(mg);
    CHECK_MSG(st && st->num_entries == 2 && strcmp(st->latest, "ckpt-3") == 0,
              "the manager lists %zu checkpoint(s), latest \"%s\"; want ckpt-2 and ckpt-3",
              st ? st->num_entries : 0, st ? st->latest : "?");
    char latest[3000], want[3000];
    snprintf(want, sizeof want, "%s/ckpt-3", dir);
    CHECK_OK(ckpt_manager_latest(mg, latest, sizeof latest));
    CHECK_MSG(strcmp(latest, want) == 0, "ckpt_manager_latest: \"%s\", want %s", latest, want);

    ckpt_manager_save_info info = { 3, 30, 1, 1 };
    closed_err(ckpt_manager_save(mg, &info, NULL, 0), "ckpt_manager_save");
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    closed_err(ckpt_manager_restore_latest(&res, mg), "ckpt_manager_restore_latest");
    CHECK_MSG(res.restored == 0, "restore_latest after the close: restored %d", res.restored);
    closed_err(ckpt_manager_restore_at_step(&res, mg, 20), "ckpt_manager_restore_at_step");
    closed_err(ckpt_manager_restore_at_counter(&res, mg, 3), "ckpt_manager_restore_at_counter");
    ckpt_manager_restored legacy;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* still exported: must say so too */
    closed_err(ckpt_manager_restore_or_initialize(mg, &legacy),
               "ckpt_manager_restore_or_initialize");
#pragma GCC diagnostic pop
    closed_err(ckpt_training_back_up(t, 2, 2, 1), "ckpt_training_back_up");
    int restored = -1;
    closed_err(ckpt_training_restore(t, &restored), "ckpt_training_restore");
    CHECK_MSG(restored == 0, "training_restore after the close: restored %d", restored);
    closed_err(ckpt_training_delete_backup(t), "ckpt_training_delete_backup");
    ckpt_manager_free(mg);
    ckpt_training_free(t);

    char chief[2700];
    snprintf(chief, sizeof chief, "%s/chief", tdir);
    check_restores(dir, "ckpt-3", 20, kib, "the manager's directory");
    check_restores(chief, "ckpt-1", 1, kib, "the training state's directory");
    tm_free(&m);
}

/* ---- hook_running ----------------------------------------------------------------------------- */

/* Rank 0: until the state file of `dir` lists `prefix` as the latest (about 60 s at most). */
static int wait_listed(const char *dir, const char *prefix)
{
    for (int polls = 0; polls < 3000; polls++) {
        ckpt_state *st = NULL;
        int listed = ckpt_state_read(&st, dir) == CKPT_OK && strcmp(st->latest, prefix) == 0;
        ckpt_state_free(st);
        if (listed)
            return 1;
        sleep_s(0.02);
    }
    return 0;
}

static void case_hook_running(void)
{
    check_case(1, "hook_running: the manager freed while its hook runs on a save left running "
                  "by a timed-out close (%d ranks)",
               g_size);
    check_watchdog_s = 240;
    char dir[2600];
    snprintf(dir, sizeof dir, "%s/mgr", g_out);
    const int64_t kib = 256;
    tm_model *m = &g_leaked_model[1];
    model_init(m, kib);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 1, 0.001);
    register_or_die(m, s);
    ckpt_manager *mg = new_manager(s, dir);
    tm_fill(m, 1);
    ckpt_manager_save_info info = { 1, 1, 1, 1 };
    coll(ckpt_manager_save(mg, &info, NULL, 0), CKPT_OK, "save 1");
    coll(ckpt_saver_sync(s), CKPT_OK, "sync 1");

    /* rank 0's hook of save 2 holds, running, once it wrote the state file */
    setenv("MPICKPT_FAULT", "0:mgr-hook:hold", 1);
    tm_fill(m, 2);
    info.epoch = info.step = 2;
    long before[MAX_THREADS], started[MAX_THREADS];
    int nbefore = thread_ids(before, MAX_THREADS);
    int rc = ckpt_manager_save(mg, &info, NULL, 0);
    int nstarted = threads_started(started, before, nbefore);
    coll(rc, CKPT_OK, "save 2 (async)");
    int listed = g_rank != 0 || wait_listed(dir, "ckpt-2");
    CHECK_MSG(all_true(listed), "rank 0's hook never wrote ckpt-2 into the state file");

    rc = ckpt_saver_close(s);
    if (rc == CKPT_ETIMEDOUT)
        g_leaked[g_nleaked++] = s; /* saver.h: not freed, the writer thread still uses it */
    /* rank 0's hook runs until its manager is freed, after this close: its close times out, and
     * so does another rank's unless that save ended before its own timeout */
    CHECK_MSG(g_rank != 0 || rc == CKPT_ETIMEDOUT, "rank 0: close returned %d (%s), want "
                                                   "CKPT_ETIMEDOUT", rc, ckpt_strerror(rc));
    CHECK_MSG(rc == CKPT_ETIMEDOUT || rc == CKPT_OK, "close returned %d (%s)", rc,
              ckpt_strerror(rc));
    ckpt_manager_free(mg); /* rank 0: while its hook runs; released when the hook returns */
    wait_threads_gone(started, nstarted, "hook_running");
    unsetenv("MPICKPT_FAULT");
    if (g_rank == 0) {
        ckpt_state *st = NULL;
        CHECK_OK(ckpt_state_read(&st, dir));
        CHECK_MSG(st && st->num_entries == 2 && strcmp(st->latest, "ckpt-2") == 0,
                  "the state file lists %zu entries, latest \"%s\"; want ckpt-1 and ckpt-2",
                  st ? st->num_entries : 0, st ? st->latest : "");
        ckpt_state_free(st);
    }
    check_restores(dir, "ckpt-2", 2, kib, "hook_running");
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc < 3) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_close_order OUTDIR callbacks|saver_first sync|async|"
                            "hook_running\n");
        MPI_Finalize();
        return 2;
    }
    g_out = argv[1];
    make_dir(g_out);
    if (strcmp(argv[2], "callbacks") == 0)
        case_callbacks();
    else if (strcmp(argv[2], "saver_first") == 0 && argc > 3)
        case_saver_first(strcmp(argv[3], "async") == 0);
    else if (strcmp(argv[2], "hook_running") == 0)
        case_hook_running();
    else {
        if (g_rank == 0)
            fprintf(stderr, "unknown case %s\n", argv[2]);
        MPI_Finalize();
        return 2;
    }
    return check_mpi_done("test_close_order");
}
