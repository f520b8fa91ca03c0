/*
 * The public commit hook (saver.h: ckpt_commit_hooks, ckpt_saver_write_ex) from a plain saver
 * user, in sync or async mode (argv[2]):
 *   - both halves run once per committed save on every rank, with the save's prefix and counter;
 *     what each rank's prepare put in the vote reaches every rank's committed half (the maximum
 *     over ranks of each value: one value per rank, and one the chief alone sets); committed may
 *     make collective calls on the communicator it is given;
 *   - a prepare that fails on one rank (with an mpickpt error naming a path) fails the save on
 *     every rank with that code and that rank's message; committed then runs nowhere, the saver's
 *     counter and last metrics stay those of the save before;
 *   - an unknown hooks version (on one rank only) or options version is CKPT_EINVAL on every
 *     rank, nothing written, no hook run; the caller's own status fails the save the same way;
 *   - saves after the failures commit and carry their values again.
 * Only public API. Usage: test_commit_hooks OUTDIR sync|async
 */
#include "mpi_check.h"
#include "coll.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/saver.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int g_rank, g_size;
static char g_out[4096];

typedef struct hook_state {
    int fail_rank; /* -1: none */
    int nprep, ncommitted;
    int64_t counter;
    char prefix[4200];
    ckpt_commit_vote got;
    int comm_sum;        /* an allreduce over committed's comm */
    MPI_Comm saver_comm; /* ckpt_saver_comm(), taken before the saves */
    int on_saver_comm;   /* committed's comm was it */
} hook_state;

/* The values rank r votes: vals[k] for k < 7 is 100 + r when r % 7 == k (else unset), vals[7]
 * is the chief's alone: 0.25 + counter. */
static int prepare(const char *prefix, int64_t counter, ckpt_commit_vote *v, void *payload)
{
    hook_state *h = payload;
    h->nprep++;
    (void)prefix;
    if (g_rank == h->fail_rank) {
        char bad[4400];
        snprintf(bad, sizeof bad, "%s/no-such-checkpoint-of-rank-%d", g_out, g_rank);
        ckpt_reader *r = NULL;
        int rc = ckpt_reader_open(&r, bad); /* fails, naming `bad` */
        ckpt_reader_free(r);
        return rc != CKPT_OK ? rc : CKPT_ERROR;
    }
    v->vals[g_rank % 7] = 100.0 + g_rank;
    if (g_rank == 0)
        v->vals[7] = 0.25 + (double)counter;
    return CKPT_OK;
}

static int committed(MPI_Comm comm, const char *prefix, int64_t counter, const ckpt_commit_vote *v,
                     void *payload)
{
    hook_state *h = payload;
    h->ncommitted++;
    h->counter = counter;
    snprintf(h->prefix, sizeof h->prefix, "%s", prefix);
    h->got = *v;
    h->on_saver_comm = comm == h->saver_comm;
    int one = 1;
    h->comm_sum = 0;
    if (MPI_Allreduce(&one, &h->comm_sum, 1, MPI_INT, MPI_SUM, comm) != MPI_SUCCESS)
        h->comm_sum = -1;
    return CKPT_OK;
}

/* What every rank's committed half must have seen for a save recording `counter`. */
static void expect_vals(const hook_state *h, int64_t counter, const char *what)
{
    for (int k = 0; k < 7; k++) {
        double want = -INFINITY;
        for (int r = 0; r < g_size; r++)
            if (r % 7 == k)
                want = 100.0 + r; /* the largest such r */
        CHECK_MSG(h->got.vals[k] == want, "%s: rank %d: vals[%d] = %g, expected %g", what, g_rank,
                  k, h->got.vals[k], want);
    }
    CHECK_MSG(h->got.vals[7] == 0.25 + (double)counter,
              "%s: rank %d: the chief's vals[7] = %g, expected %g", what, g_rank, h->got.vals[7],
              0.25 + (double)counter);
    CHECK_MSG(h->got.status == CKPT_OK, "%s: rank %d: vote status %d", what, g_rank, h->got.status);
    CHECK_MSG(h->counter == counter, "%s: rank %d: committed saw counter %lld, expected %lld", what,
              g_rank, (long long)h->counter, (long long)counter);
    CHECK_MSG(h->comm_sum == g_size, "%s: rank %d: an allreduce over committed's comm gave %d",
              what, g_rank, h->comm_sum);
}

/* A save of `name` (under g_out) recording `counter`; in async mode its outcome too. */
static int save(ckpt_saver *s, int async, const char *name, const ckpt_save_options *o,
                int *returned)
{
    char prefix[4400];
    snprintf(prefix, sizeof prefix, "%s/%s", g_out, name);
    ckpt_save_info info = {1, 10, 0};
    int rc = ckpt_saver_write_ex(s, prefix, &info, o);
    *returned = rc;
    if (rc == CKPT_OK && async)
        rc = ckpt_saver_sync(s);
    return rc;
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc < 3) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_commit_hooks OUTDIR sync|async\n");
        MPI_Finalize();
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    int async = strcmp(argv[2], "async") == 0;
    check_case(1, "commit hooks, %s, %d ranks", async ? "async" : "sync", g_size);

    ckpt_saver_options so = CKPT_SAVER_OPTIONS_INIT;
    so.async = async;
    ckpt_saver *s = NULL;
    if (!coll(ckpt_saver_create(&s, MPI_COMM_WORLD, &so), CKPT_OK, "create"))
        return check_mpi_done("test_commit_hooks");
    double x[4] = {g_rank, g_rank + 0.5, -1, 2};
    int64_t dims[1] = {4};
    ckpt_shape sh;
    ckpt_shape_init(&sh, 1, dims);
    char tname[64];
    snprintf(tname, sizeof tname, "x_%d", g_rank);
    CHECK_OK(ckpt_saver_add_full(s, tname, CKPT_FLOAT64, &sh, x));

    hook_state h;
    memset(&h, 0, sizeof h);
    h.fail_rank = -1;
    h.saver_comm = ckpt_saver_comm(s);
    ckpt_commit_hooks hooks = CKPT_COMMIT_HOOKS_INIT;
    hooks.prepare = prepare;
    hooks.committed = committed;
    hooks.payload = &h;
    ckpt_save_options o = CKPT_SAVE_OPTIONS_INIT;
    int64_t got_counter = -1;
    o.hooks = &hooks;
    o.counter_out = &got_counter;
    int returned;

    /* 1. a save with both halves */
    check_case(1, "hooked save (%s)", async ? "async" : "sync");
    o.counter = 1;
    coll(save(s, async, "h-1", &o, &returned), CKPT_OK, "h-1");
    CHECK_MSG(h.nprep == 1 && h.ncommitted == 1, "h-1: rank %d: prepare ran %d, committed %d",
              g_rank, h.nprep, h.ncommitted);
    expect_vals(&h, 1, "h-1");
    /* sync: the saver's communicator; async: the writer thread's own */
    CHECK_MSG(h.on_saver_comm == !async, "h-1: committed ran on %s communicator",
              h.on_saver_comm ? "the saver's" : "another");
    CHECK_MSG(h.saver_comm != MPI_COMM_NULL && h.saver_comm != MPI_COMM_WORLD,
              "h-1: ckpt_saver_comm() is not the saver's duplicate");
    CHECK_MSG(got_counter == 1, "h-1: counter_out %lld", (long long)got_counter);
    char want[4400];
    snprintf(want, sizeof want, "%s/h-1", g_out);
    CHECK_MSG(strcmp(h.prefix, want) == 0, "h-1: committed's prefix %s, expected %s", h.prefix,
              want);
    CHECK_MSG(ckpt_saver_counter(s) == 1, "h-1: saver counter %lld",
              (long long)ckpt_saver_counter(s));
    ckpt_restore_info ri;
    memset(x, 0, sizeof x);
    coll(ckpt_saver_restore(s, want, NULL, &ri), CKPT_OK, "h-1: restore");
    CHECK_MSG(ri.save_counter == 1 && x[1] == g_rank + 0.5, "h-1: restored counter %lld, x[1] %g",
              (long long)ri.save_counter, x[1]);

    /* 2. prepare fails on the last rank */
    check_case(1, "prepare fails on rank %d (%s)", g_size - 1, async ? "async" : "sync");
    h.fail_rank = g_size - 1;
    o.counter = 2;
    ckpt_saver_metrics before = CKPT_SAVER_METRICS_INIT, after = CKPT_SAVER_METRICS_INIT;
    char before_prefix[4400] = "";
    CHECK_OK(ckpt_saver_metrics_get(&before, s));
    if (before.prefix) /* valid until the next call: a copy */
        snprintf(before_prefix, sizeof before_prefix, "%s", before.prefix);
    int rc = save(s, async, "h-2", &o, &returned);
    /* the failing reader's reason reaches every rank, sync or async (an async save's error is
     * raised again by the next call on the caller's thread: with its reason and errno) */
    const ckpt_error *e2 = ckpt_error_last();
    int reason2 = e2 && e2->code == rc ? e2->reason : -1;
    int errno2 = e2 && e2->code == rc ? e2->sys_errno : -1;
    CHECK_MSG(rc == CKPT_ENOTFOUND && reason2 == CKPT_REASON_NO_CHECKPOINT,
              "h-2: rank %d: %s, reason %d (%s), expected CKPT_ENOTFOUND, no checkpoint", g_rank,
              ckpt_strerror(rc), reason2, ckpt_reason_name(reason2));
    CHECK_MSG(errno2 == 0, "h-2: rank %d: sys_errno %d, expected 0 (no system call failed)",
              g_rank, errno2);
    if (coll(rc, CKPT_ERROR, "h-2: a prepare fails on the last rank")) {
        char path[4400];
        snprintf(path, sizeof path, "no-such-checkpoint-of-rank-%d", g_size - 1);
        CHECK_MSG(strstr(g_msg, path) && mentions_rank(g_msg, g_size - 1),
                  "h-2: the message does not name rank %d's failure: %s", g_size - 1, g_msg);
    }
    if (async)
        CHECK_MSG(returned == CKPT_OK, "h-2: the async save call returned %d", returned);
    CHECK_MSG(h.nprep == 2, "h-2: rank %d: prepare ran %d times, expected 2", g_rank, h.nprep);
    CHECK_MSG(h.ncommitted == 1, "h-2: rank %d: committed ran after a failed prepare", g_rank);
    CHECK_MSG(ckpt_saver_counter(s) == 1, "h-2: the failed save moved the counter to %lld",
              (long long)ckpt_saver_counter(s));
    CHECK_OK(ckpt_saver_metrics_get(&after, s));
    CHECK_MSG(after.prefix && strcmp(after.prefix, before_prefix) == 0,
              "h-2: last metrics are %s's, not %s's", after.prefix ? after.prefix : "(none)",
              before_prefix);
    h.fail_rank = -1;

    /* 3. version checks: nothing written, no hook run, EINVAL everywhere */
    check_case(1, "versions (%s)", async ? "async" : "sync");
    int np = h.nprep;
    if (g_rank == g_size - 1)
        hooks.version = 99;
    o.counter = 3;
    rc = save(s, async, "h-3", &o, &returned);
    if (coll(rc, CKPT_EINVAL, "h-3: hooks version 99 on the last rank"))
        CHECK_MSG(strstr(g_msg, "ckpt_commit_hooks version 99") != NULL, "h-3: message: %s", g_msg);
    hooks.version = CKPT_COMMIT_HOOKS_VERSION;
    o.version = 99;
    rc = save(s, async, "h-3", &o, &returned);
    if (coll(rc, CKPT_EINVAL, "h-3: options version 99"))
        CHECK_MSG(strstr(g_msg, "ckpt_save_options version 99") != NULL, "h-3: message: %s", g_msg);
    o.version = CKPT_SAVE_OPTIONS_VERSION;
    /* the caller's own status, on rank 0 only: the save fails with it, nothing written */
    ckpt_reader *r = NULL;
    o.status = g_rank == 0 ? ckpt_reader_open(&r, "/nonexistent/caller-status") : CKPT_OK;
    rc = save(s, async, "h-3", &o, &returned);
    if (coll(rc, CKPT_ERROR, "h-3: the caller's status on rank 0"))
        CHECK_MSG(strstr(g_msg, "caller-status") != NULL, "h-3: message: %s", g_msg);
    o.status = CKPT_OK;
    char want3[4400];
    snprintf(want3, sizeof want3, "%s/h-3", g_out);
    CHECK_MSG(h.nprep == np && h.ncommitted == 1, "h-3: rank %d: a refused save ran its hook",
              g_rank);
    CHECK_MSG(all_true(!index_exists(want3)), "h-3: a refused save wrote its index");

    /* 4. it goes on: the next saves commit and carry their values */
    check_case(1, "after the failures (%s)", async ? "async" : "sync");
    o.counter = 4;
    coll(save(s, async, "h-4", &o, &returned), CKPT_OK, "h-4");
    CHECK_MSG(h.ncommitted == 2, "h-4: rank %d: committed ran %d times", g_rank, h.ncommitted);
    expect_vals(&h, 4, "h-4");
    CHECK_MSG(ckpt_saver_counter(s) == 4 && got_counter == 4, "h-4: counter %lld, out %lld",
              (long long)ckpt_saver_counter(s), (long long)got_counter);
    /* no prepare: the committed half sees no values */
    hooks.prepare = NULL;
    o.counter = 5;
    coll(save(s, async, "h-5", &o, &returned), CKPT_OK, "h-5 (committed only)");
    CHECK_MSG(h.ncommitted == 3 && isinf(h.got.vals[0]) && h.got.vals[0] < 0 &&
                  isinf(h.got.vals[7]) && h.counter == 5,
              "h-5: rank %d: committed %d, vals[0] %g, vals[7] %g", g_rank, h.ncommitted,
              h.got.vals[0], h.got.vals[7]);
    /* NULL options: ckpt_saver_write */
    coll(save(s, async, "plain", NULL, &returned), CKPT_OK, "plain (NULL options)");
    CHECK_MSG(h.ncommitted == 3, "plain: rank %d: a save without hooks ran one", g_rank);

    coll(ckpt_saver_close(s), CKPT_OK, "close");
    return check_mpi_done("test_commit_hooks");
}
