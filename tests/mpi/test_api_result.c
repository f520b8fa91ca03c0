/*
 * The growable output structs (issue 31): ckpt_saver_metrics (ckpt_saver_metrics_get) and
 * ckpt_manager_restore_result (ckpt_manager_restore_latest, _restore_at_step, _restore_at_counter,
 * ckpt_training_restore_result), on any number of ranks.
 *
 * Each field is asserted on every rank and found the same on every rank: the prefix (a pointer the
 * saver or manager owns, no fixed buffer), counters, epoch, step, world size, bytes. A version the
 * library does not know (0, or one newer than CKPT_*_VERSION) is CKPT_EINVAL on every rank with
 * nothing else written; passed by one rank only to a chosen restore, CKPT_EINVAL on every rank.
 * The deprecated wrappers (ckpt_saver_last_metrics, ckpt_manager_restore_or_initialize,
 * _restore_step, _restore_counter, ckpt_training_restored, ckpt_manager_state) still work and
 * report the same values as their replacements.
 */
#include "mpi_check.h"
#include "mpickpt.h"
#include "mpickpt/manager.h"

#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size;

#define N 16
static float g_w[N];  /* this rank's tensor */
static float g_r[4];  /* replicated */

/* 1 when string `s` is the same on every rank. Collective. */
static int same_everywhere(const char *s)
{
    unsigned long h = hash_str(s), lo = 0, hi = 0;
    MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

static int same_i64_everywhere(int64_t v)
{
    int64_t lo = 0, hi = 0;
    MPI_Allreduce(&v, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

static ckpt_saver *new_saver(void)
{
    ckpt_saver *s = NULL;
    if (!coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, "saver_create"))
        return NULL;
    int64_t dn = N, d4 = 4;
    ckpt_shape sn, s4;
    ckpt_shape_init(&sn, 1, &dn);
    ckpt_shape_init(&s4, 1, &d4);
    char name[64];
    snprintf(name, sizeof name, "w/%d", g_rank);
    CHECK_OK(ckpt_saver_add_full(s, name, CKPT_FLOAT32, &sn, g_w));
    CHECK_OK(ckpt_saver_add_replicated(s, "r", CKPT_FLOAT32, &s4, g_r, CKPT_REPLICA_PRIMARY));
    return s;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/* The deprecated ckpt_saver_last_metrics(): the same values as `m`. */
static void legacy_metrics(const ckpt_saver *s, const ckpt_saver_metrics *m)
{
    ckpt_save_metrics old;
    memset(&old, 0x5a, sizeof old);
    CHECK_OK(ckpt_saver_last_metrics(s, &old));
    CHECK_MSG(strcmp(old.prefix, m->prefix) == 0, "last_metrics: prefix \"%s\", want \"%s\"",
              old.prefix, m->prefix);
    CHECK_MSG(old.async == m->async && old.bytes == m->bytes && old.ranks == m->ranks &&
                  old.write_s == m->write_s && old.commit_s == m->commit_s,
              "last_metrics: async %d bytes %llu ranks %d differ from metrics_get's", old.async,
              (unsigned long long)old.bytes, (int)old.ranks);
}
#pragma GCC diagnostic pop

static void test_metrics(const char *dir)
{
    check_case(1, "saver metrics");
    ckpt_saver *s = new_saver();
    if (!s)
        return;
    ckpt_saver_metrics m = CKPT_SAVER_METRICS_INIT;
    int rc = ckpt_saver_metrics_get(&m, s);
    CHECK_MSG(rc == CKPT_ENOTFOUND, "before any save: %d, want CKPT_ENOTFOUND", rc);
    ckpt_error_clear();
    char prefix[3200];
    snprintf(prefix, sizeof prefix, "%s/m-%d", dir, g_size);
    for (int i = 0; i < N; i++)
        g_w[i] = (float)(g_rank * 100 + i);
    ckpt_save_info info = { 2, 20, 1 };
    if (!coll(ckpt_saver_write(s, prefix, &info), CKPT_OK, "write"))
        goto out;
    CHECK_OK(ckpt_saver_metrics_get(&m, s));
    CHECK_EQ_INT(m.version, CKPT_SAVER_METRICS_VERSION);
    CHECK_MSG(m.prefix && strcmp(m.prefix, prefix) == 0, "metrics prefix \"%s\", want \"%s\"",
              m.prefix ? m.prefix : "(null)", prefix);
    CHECK_EQ_INT(m.async, 0);
    CHECK_EQ_INT(m.ranks, g_size);
    /* every rank's tensor and the replicated one at least (the index's bytes may be added) */
    uint64_t payload = (uint64_t)g_size * N * sizeof(float) + 4 * sizeof(float);
    CHECK_MSG(m.bytes >= payload, "metrics bytes %llu < the %llu registered",
              (unsigned long long)m.bytes, (unsigned long long)payload);
    CHECK(same_everywhere(m.prefix ? m.prefix : ""));
    CHECK(same_i64_everywhere((int64_t)m.bytes));
    legacy_metrics(s, &m);

    /* versions this library does not know: CKPT_EINVAL, nothing else written */
    unsigned int bad[2] = { 0, CKPT_SAVER_METRICS_VERSION + 1 };
    for (int k = 0; k < 2; k++) {
        ckpt_saver_metrics b = CKPT_SAVER_METRICS_INIT;
        b.version = bad[k];
        b.prefix = "untouched";
        b.ranks = -7;
        char w[64];
        snprintf(w, sizeof w, "metrics_get version %u", bad[k]);
        CHECK(coll(ckpt_saver_metrics_get(&b, s), CKPT_EINVAL, w));
        CHECK_MSG(strcmp(b.prefix, "untouched") == 0 && b.ranks == -7, "%s wrote the struct",
                  w);
    }
out:
    ckpt_saver_free(s);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
/* The old struct of a deprecated restore equals the new one. */
static void same_as_legacy(const ckpt_manager_restored *old, const ckpt_manager_restore_result *r,
                           const char *what)
{
    CHECK_MSG(strcmp(old->prefix, r->prefix) == 0 && old->restored == r->restored &&
                  old->save_counter == r->save_counter && old->epoch == r->epoch &&
                  old->step == r->step && old->end_of_epoch == r->end_of_epoch &&
                  old->world_size == r->world_size && old->skipped == r->skipped,
              "%s: the deprecated result (%d \"%s\" counter %lld step %lld) differs from the "
              "new (%d \"%s\" counter %lld step %lld)",
              what, old->restored, old->prefix, (long long)old->save_counter,
              (long long)old->step, r->restored, r->prefix, (long long)r->save_counter,
              (long long)r->step);
}

static void legacy_manager(ckpt_manager *mg, const ckpt_manager_restore_result *latest,
                           const ckpt_manager_restore_result *first)
{
    ckpt_manager_restored old;
    memset(&old, 0x5a, sizeof old);
    if (coll(ckpt_manager_restore_or_initialize(mg, &old), CKPT_OK, "restore_or_initialize"))
        same_as_legacy(&old, latest, "restore_or_initialize");
    memset(&old, 0x5a, sizeof old);
    if (coll(ckpt_manager_restore_step(&old, mg, first->step), CKPT_OK, "restore_step"))
        same_as_legacy(&old, first, "restore_step");
    memset(&old, 0x5a, sizeof old);
    if (coll(ckpt_manager_restore_counter(&old, mg, latest->save_counter), CKPT_OK,
             "restore_counter"))
        same_as_legacy(&old, latest, "restore_counter");
    /* ckpt_manager_state(): the same entries as a copy (no save in flight here) */
    const ckpt_state *st = ckpt_manager_state(mg);
    ckpt_state *c = NULL;
    CHECK_OK(ckpt_manager_state_copy(&c, mg));
    CHECK_MSG(st && c && st->num_entries == c->num_entries && st->num_entries == 2 &&
                  st->entries[1].save_counter == c->entries[1].save_counter,
              "ckpt_manager_state: %zu entries, the copy %zu", st ? st->num_entries : 0,
              c ? c->num_entries : 0);
    ckpt_state_free(c);
}

static void legacy_training(const ckpt_training *t, const ckpt_manager_restore_result *r)
{
    const ckpt_manager_restored *old = ckpt_training_restored(t);
    same_as_legacy(old, r, "ckpt_training_restored");
}
#pragma GCC diagnostic pop

/* `r` on every rank: restored from <dir>/ckpt-<counter> at epoch/step counter, counter * 10. */
static void check_result(const ckpt_manager_restore_result *r, const char *dir, int64_t counter,
                         const char *what)
{
    char want[3300];
    snprintf(want, sizeof want, "%s/ckpt-%lld", dir, (long long)counter);
    CHECK_MSG(r->version == CKPT_MANAGER_RESTORE_RESULT_VERSION, "%s: version %u changed", what,
              r->version);
    CHECK_MSG(r->restored == 1 && r->prefix && strcmp(r->prefix, want) == 0,
              "%s: restored %d \"%s\", want 1 \"%s\"", what, r->restored,
              r->prefix ? r->prefix : "(null)", want);
    CHECK_MSG(r->save_counter == counter && r->epoch == counter && r->step == counter * 10 &&
                  r->end_of_epoch == 1 && r->world_size == g_size && r->skipped == 0,
              "%s: counter %lld epoch %lld step %lld end %d world %d skipped %d", what,
              (long long)r->save_counter, (long long)r->epoch, (long long)r->step,
              r->end_of_epoch, (int)r->world_size, r->skipped);
    CHECK(same_everywhere(r->prefix ? r->prefix : ""));
    CHECK(same_i64_everywhere(r->save_counter));
    CHECK(same_i64_everywhere(r->step));
}

static void test_manager(const char *dir)
{
    check_case(1, "manager restore result");
    ckpt_saver *s = new_saver();
    if (!s)
        return;
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, NULL), CKPT_OK, "manager_create"))
        goto out;
    /* nothing yet: restored 0, prefix "" */
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&r, mg), CKPT_OK, "restore_latest (empty)"))
        CHECK_MSG(r.restored == 0 && r.prefix && r.prefix[0] == '\0' && r.skipped == 0,
                  "empty: restored %d prefix \"%s\"", r.restored, r.prefix ? r.prefix : "(null)");
    for (int64_t k = 1; k <= 2; k++) {
        ckpt_manager_save_info si = { k, k * 10, 1, 1 };
        coll(ckpt_manager_save(mg, &si, NULL, 0), CKPT_OK, "manager_save");
    }
    r = (ckpt_manager_restore_result)CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&r, mg), CKPT_OK, "restore_latest"))
        check_result(&r, dir, 2, "restore_latest");
    ckpt_manager_restore_result first = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_at_step(&first, mg, 10), CKPT_OK, "restore_at_step"))
        check_result(&first, dir, 1, "restore_at_step 10");
    ckpt_manager_restore_result second = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_at_counter(&second, mg, 2), CKPT_OK, "restore_at_counter"))
        check_result(&second, dir, 2, "restore_at_counter 2");

    /* versions this library does not know: CKPT_EINVAL on every rank, nothing else written */
    unsigned int bad[2] = { 0, CKPT_MANAGER_RESTORE_RESULT_VERSION + 1 };
    for (int k = 0; k < 2; k++) {
        char w[96];
        ckpt_manager_restore_result b = CKPT_MANAGER_RESTORE_RESULT_INIT;
        b.version = bad[k];
        b.prefix = "untouched";
        b.save_counter = -7;
        snprintf(w, sizeof w, "restore_latest version %u", bad[k]);
        CHECK(coll(ckpt_manager_restore_latest(&b, mg), CKPT_EINVAL, w));
        snprintf(w, sizeof w, "restore_at_step version %u", bad[k]);
        CHECK(coll(ckpt_manager_restore_at_step(&b, mg, 10), CKPT_EINVAL, w));
        snprintf(w, sizeof w, "restore_at_counter version %u", bad[k]);
        CHECK(coll(ckpt_manager_restore_at_counter(&b, mg, 1), CKPT_EINVAL, w));
        CHECK_MSG(strcmp(b.prefix, "untouched") == 0 && b.save_counter == -7,
                  "version %u: the struct was written", bad[k]);
    }
    /* one rank's unknown version: CKPT_EINVAL on every rank (the chosen restores agree on it) */
    ckpt_manager_restore_result one = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (g_rank == g_size - 1)
        one.version = CKPT_MANAGER_RESTORE_RESULT_VERSION + 1;
    CHECK(coll(ckpt_manager_restore_at_step(&one, mg, 10), CKPT_EINVAL,
               "restore_at_step, the last rank's version unknown"));
    CHECK(coll(ckpt_manager_restore_at_counter(&one, mg, 1), CKPT_EINVAL,
               "restore_at_counter, the last rank's version unknown"));
    /* ... and restore_latest, which has no agreement of the chosen one's to fold it into: without
     * its own, the other ranks went on into the restore's collectives and hung (watchdog) */
    check_watchdog_s = 30;
    check_case(1, "restore_latest, the last rank's version unknown (%d ranks)", g_size);
    ckpt_manager_restore_result lone = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (g_rank == g_size - 1)
        lone.version = 0;
    if (coll(ckpt_manager_restore_latest(&lone, mg), CKPT_EINVAL,
             "restore_latest, the last rank's version unknown"))
        CHECK_MSG(mentions_rank(g_msg, g_size - 1) &&
                      strstr(g_msg, "unknown ckpt_manager_restore_result version 0"),
                  "restore_latest: the message does not name rank %d's version: %s", g_size - 1,
                  g_msg);
    CHECK_MSG(lone.restored == 0, "restore_latest: rank %d restored after a refused version",
              g_rank);
    lone = (ckpt_manager_restore_result)CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&lone, mg), CKPT_OK, "restore_latest after the refusal"))
        check_result(&lone, dir, 2, "restore_latest after the refusal");
    check_watchdog_s = 90;
    check_case(0, "manager restore result (legacy)");
    legacy_manager(mg, &second, &first);
    ckpt_manager_free(mg);
out:
    ckpt_saver_free(s);
}

static void test_training(const char *dir)
{
    check_case(1, "training restore result");
    ckpt_saver *s = new_saver();
    if (!s)
        return;
    ckpt_training *t = NULL;
    if (!coll(ckpt_training_create(&t, s, dir, NULL), CKPT_OK, "training_create"))
        goto out;
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK_OK(ckpt_training_restore_result(&r, t)); /* before any restore: nothing */
    CHECK_MSG(r.restored == 0 && r.prefix && r.prefix[0] == '\0',
              "before a restore: restored %d prefix \"%s\"", r.restored,
              r.prefix ? r.prefix : "(null)");
    coll(ckpt_training_back_up(t, 1, 10, 1), CKPT_OK, "back_up"); /* ckpt-1: epoch 1, step 10 */
    int restored = 0;
    if (coll(ckpt_training_restore(t, &restored), CKPT_OK, "training_restore")) {
        CHECK_EQ_INT(restored, 1);
        CHECK_OK(ckpt_training_restore_result(&r, t));
        char chief[3300];
        snprintf(chief, sizeof chief, "%s/chief", dir);
        check_result(&r, chief, 1, "training_restore_result");
        legacy_training(t, &r);
    }
    unsigned int bad[2] = { 0, CKPT_MANAGER_RESTORE_RESULT_VERSION + 1 };
    for (int k = 0; k < 2; k++) {
        ckpt_manager_restore_result b = CKPT_MANAGER_RESTORE_RESULT_INIT;
        b.version = bad[k];
        int rc = ckpt_training_restore_result(&b, t);
        CHECK_MSG(rc == CKPT_EINVAL && b.prefix == NULL,
                  "training_restore_result version %u: %d, want CKPT_EINVAL", bad[k], rc);
        ckpt_error_clear();
    }
    ckpt_training_free(t);
out:
    ckpt_saver_free(s);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_api_result OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    char dir[3100];
    snprintf(dir, sizeof dir, "%s", argv[1]);
    make_dir(dir); /* collective */
    test_metrics(dir);
    snprintf(dir, sizeof dir, "%s/mgr", argv[1]);
    test_manager(dir);
    snprintf(dir, sizeof dir, "%s/train", argv[1]);
    test_training(dir);
    return check_mpi_done("test_api_result");
}
