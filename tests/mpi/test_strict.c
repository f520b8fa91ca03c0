/*
 * Strict restores and the replica check (issue 30), on any number of ranks.
 *
 * Strict restores: a checkpoint of 'a' (replicated), 'b' (replicated), 'opt/s/<i>/m' (30 names)
 * and a blob 'rng' per rank; restored with options version 2 into 'a', 'c' (not in it) and no
 * 'b': strict is CKPT_EMISMATCH on every rank, the same message naming 'c' and 'b', 'a' untouched
 * (nothing read), both lists set; strict = 0 restores 'a' and returns the lists. A version-1
 * options struct (and NULL) keep the old behaviour: 'c' is CKPT_ENOTFOUND, 'b' ignored. Many
 * missing names are grouped by prefix in a bounded message. The manager: options version 4 is
 * strict, ckpt_manager_set_strict(0) restores what matches and ckpt_manager_restore_names lists
 * the rest; version 3 and NULL options restore as before.
 *
 * The replica check: a replicated tensor whose copies differ (rank-dependent) is CKPT_EMISMATCH
 * on every rank at the first save, naming the tensor and the ranks that differ from the writer's
 * copy (at 1 rank: nothing to compare, the save succeeds); replica_mismatch = WARN saves; 'every'
 * catches a divergence at a later save, 'first' (the default) does not recheck; off never checks;
 * a version-2 saver options struct gets the default (first).
 */
#include "mpi_check.h"
#include "mpickpt.h"
#include "mpickpt/manager.h"

#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_size;
static char g_out[3000];

static int has(const ckpt_name_list *l, const char *name)
{
    for (size_t i = 0; i < ckpt_name_list_size(l); i++)
        if (strcmp(ckpt_name_list_get(l, i), name) == 0)
            return 1;
    return 0;
}

static int rng_save(const void **data, size_t *len, void *payload)
{
    *data = payload;
    *len = sizeof(int);
    return CKPT_OK;
}

static int rng_restore(const void *data, size_t len, void *payload)
{
    if (len == sizeof(int))
        memcpy(payload, data, len);
    return CKPT_OK;
}

static ckpt_saver *new_saver(const ckpt_saver_options *o)
{
    ckpt_saver *s = NULL;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, o));
    return s;
}

static float g_a[4], g_b[4], g_m[30][2];
static int g_rng;

/* the checkpoint: a, b, opt/s/<i>/m (i < 30), blob rng */
static void write_ckpt(const char *prefix)
{
    ckpt_saver *s = new_saver(NULL);
    int64_t d4 = 4, d2 = 2;
    ckpt_shape s4, s2;
    ckpt_shape_init(&s4, 1, &d4);
    ckpt_shape_init(&s2, 1, &d2);
    for (int i = 0; i < 4; i++)
        g_a[i] = (float)i + 1, g_b[i] = 10.0f + (float)i;
    CHECK_OK(ckpt_saver_add_replicated(s, "a", CKPT_FLOAT32, &s4, g_a, CKPT_REPLICA_PRIMARY));
    CHECK_OK(ckpt_saver_add_replicated(s, "b", CKPT_FLOAT32, &s4, g_b, CKPT_REPLICA_PRIMARY));
    for (int i = 0; i < 30; i++) {
        char n[64];
        snprintf(n, sizeof n, "opt/s/%d/m", i);
        CHECK_OK(ckpt_saver_add_replicated(s, n, CKPT_FLOAT32, &s2, g_m[i], CKPT_REPLICA_PRIMARY));
    }
    ckpt_blob_callbacks cb = {rng_save, rng_restore};
    g_rng = 100 + g_rank;
    CHECK_OK(ckpt_saver_add_blob(s, "rng", &cb, &g_rng));
    CHECK(coll(ckpt_saver_write(s, prefix, NULL), CKPT_OK, "write"));
    ckpt_saver_free(s);
}

/* a saver with 'a', 'c' (absent from the checkpoint), opt/s/<i>/m and rng; no 'b' */
static ckpt_saver *reader(float *a, float *c, int with_c)
{
    ckpt_saver *s = new_saver(NULL);
    int64_t d4 = 4, d2 = 2;
    ckpt_shape s4, s2;
    ckpt_shape_init(&s4, 1, &d4);
    ckpt_shape_init(&s2, 1, &d2);
    CHECK_OK(ckpt_saver_add_replicated(s, "a", CKPT_FLOAT32, &s4, a, CKPT_REPLICA_PRIMARY));
    if (with_c)
        CHECK_OK(ckpt_saver_add_replicated(s, "c", CKPT_FLOAT32, &s4, c, CKPT_REPLICA_PRIMARY));
    for (int i = 0; i < 30; i++) {
        char n[64];
        snprintf(n, sizeof n, "opt/s/%d/m", i);
        CHECK_OK(ckpt_saver_add_replicated(s, n, CKPT_FLOAT32, &s2, g_m[i], CKPT_REPLICA_PRIMARY));
    }
    ckpt_blob_callbacks cb = {rng_save, rng_restore};
    CHECK_OK(ckpt_saver_add_blob(s, "rng", &cb, &g_rng));
    return s;
}

static void test_strict(const char *prefix)
{
    float a[4] = {-1, -1, -1, -1}, c[4] = {-7, -7, -7, -7};
    ckpt_saver *s = reader(a, c, 1);

    /* strict (INIT): one error on every rank, both lists, nothing read */
    ckpt_name_list *miss = NULL, *unexp = NULL;
    ckpt_restore_options o = CKPT_RESTORE_OPTIONS_INIT;
    o.missing = &miss;
    o.unexpected = &unexp;
    CHECK(o.version == CKPT_RESTORE_OPTIONS_VERSION && o.version >= 2 && o.strict == 1);
    CHECK(coll(ckpt_saver_restore(s, prefix, &o, NULL), CKPT_EMISMATCH, "strict"));
    CHECK_MSG(strstr(g_msg, "1 missing") && strstr(g_msg, "'c'") && strstr(g_msg, "1 unexpected") &&
                  strstr(g_msg, "'b'") && !strstr(g_msg, "'a'"),
              "strict message: %s", g_msg);
    CHECK_MSG(a[0] == -1.0f && c[0] == -7.0f, "strict: data was read before the error");
    CHECK(ckpt_name_list_size(miss) == 1 && has(miss, "c"));
    CHECK(ckpt_name_list_size(unexp) == 1 && has(unexp, "b"));
    ckpt_name_list_free(miss);
    ckpt_name_list_free(unexp);

    /* not strict: 'a' restored, 'c' untouched, the same lists */
    miss = unexp = NULL;
    o.strict = 0;
    CHECK(coll(ckpt_saver_restore(s, prefix, &o, NULL), CKPT_OK, "not strict"));
    CHECK_MSG(a[0] == 1.0f && a[3] == 4.0f && c[0] == -7.0f, "not strict: a %g c %g", a[0], c[0]);
    CHECK(g_rng == 100 + g_rank);
    CHECK(ckpt_name_list_size(miss) == 1 && has(miss, "c"));
    CHECK(ckpt_name_list_size(unexp) == 1 && has(unexp, "b"));
    ckpt_name_list_free(miss);
    ckpt_name_list_free(unexp);

    /* version 1 (the struct of before) and NULL: 'c' is ENOTFOUND, 'b' ignored */
    struct {
        unsigned int version;
        int skip_missing_per_rank;
    } v1 = {1, 0};
    CHECK(coll(ckpt_saver_restore(s, prefix, (const ckpt_restore_options *)&v1, NULL),
               CKPT_ENOTFOUND, "v1"));
    CHECK(strstr(g_msg, "'c'") != NULL);
    CHECK(coll(ckpt_saver_restore(s, prefix, NULL, NULL), CKPT_ENOTFOUND, "NULL options"));
    ckpt_saver_free(s);
    a[0] = -1;
    s = reader(a, c, 0);
    CHECK(coll(ckpt_saver_restore(s, prefix, (const ckpt_restore_options *)&v1, NULL), CKPT_OK,
               "v1 without c"));
    CHECK(a[0] == 1.0f);
    CHECK(coll(ckpt_saver_restore(s, prefix, NULL, NULL), CKPT_OK, "NULL without c"));
    /* ... while version 2 names 'b' */
    CHECK(coll(ckpt_saver_restore(s, prefix, &o, NULL), CKPT_OK, "v2 not strict without c"));
    ckpt_name_list_free(miss); /* the caller's: returned through o.missing and o.unexpected */
    ckpt_name_list_free(unexp);
    o.strict = 1;
    o.missing = o.unexpected = NULL;
    CHECK(coll(ckpt_saver_restore(s, prefix, &o, NULL), CKPT_EMISMATCH, "v2 strict without c"));
    CHECK(strstr(g_msg, "0 missing") && strstr(g_msg, "'b'"));
    ckpt_saver_free(s);
}

/* many missing names: grouped by prefix, a bounded message */
static void test_grouped(const char *prefix)
{
    ckpt_saver *s = new_saver(NULL);
    float v[2 * 300];
    int64_t d2 = 2;
    ckpt_shape s2;
    ckpt_shape_init(&s2, 1, &d2);
    for (int i = 0; i < 300; i++) {
        char n[64];
        snprintf(n, sizeof n, "optim/state/%d/exp_avg_sq_%d", i % 3, i);
        CHECK_OK(
            ckpt_saver_add_replicated(s, n, CKPT_FLOAT32, &s2, v + 2 * i, CKPT_REPLICA_PRIMARY));
    }
    ckpt_restore_options o = CKPT_RESTORE_OPTIONS_INIT;
    CHECK(coll(ckpt_saver_restore(s, prefix, &o, NULL), CKPT_EMISMATCH, "grouped"));
    CHECK_MSG(strstr(g_msg, "300 missing") && strstr(g_msg, "'optim/state/1/*' (100 names)") &&
                  strlen(g_msg) < 1536,
              "grouped message: %s", g_msg);
    ckpt_saver_free(s);
}

static void test_manager(const char *dir)
{
    char prefix[4096];
    ckpt_saver *s = new_saver(NULL);
    float a[4] = {5, 6, 7, 8}, b[4] = {1, 1, 1, 1};
    int64_t d4 = 4;
    ckpt_shape s4;
    ckpt_shape_init(&s4, 1, &d4);
    CHECK_OK(ckpt_saver_add_replicated(s, "a", CKPT_FLOAT32, &s4, a, CKPT_REPLICA_PRIMARY));
    CHECK_OK(ckpt_saver_add_replicated(s, "b", CKPT_FLOAT32, &s4, b, CKPT_REPLICA_PRIMARY));
    ckpt_manager *m = NULL;
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager"));
    ckpt_manager_save_info si = {0, 1, 0, 1};
    CHECK(coll(ckpt_manager_save(m, &si, prefix, sizeof prefix), CKPT_OK, "manager save"));
    ckpt_manager_free(m);
    ckpt_saver_free(s);

    /* restore into 'a' and 'c' */
    float ra[4] = {0}, rc[4] = {0};
    s = new_saver(NULL);
    CHECK_OK(ckpt_saver_add_replicated(s, "a", CKPT_FLOAT32, &s4, ra, CKPT_REPLICA_PRIMARY));
    CHECK_OK(ckpt_saver_add_replicated(s, "c", CKPT_FLOAT32, &s4, rc, CKPT_REPLICA_PRIMARY));
    ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT;
    CHECK(mo.version == 4 && mo.strict_restore == 1);
    CHECK(coll(ckpt_manager_create(&m, s, dir, &mo), CKPT_OK, "manager v4"));
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_EMISMATCH, "manager strict"));
    CHECK(strstr(g_msg, "'c'") && strstr(g_msg, "'b'"));
    CHECK(ra[0] == 0.0f);
    const ckpt_name_list *miss = NULL, *unexp = NULL;
    ckpt_manager_restore_names(m, &miss, &unexp);
    CHECK(has(miss, "c") && has(unexp, "b"));
    ckpt_manager_set_strict(m, 0);
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_OK, "manager not strict"));
    CHECK(r.restored == 1 && ra[0] == 5.0f && rc[0] == 0.0f);
    ckpt_manager_restore_names(m, &miss, &unexp);
    CHECK(ckpt_name_list_size(miss) == 1 && has(miss, "c"));
    CHECK(ckpt_name_list_size(unexp) == 1 && has(unexp, "b"));
    CHECK(coll(ckpt_manager_restore_at_step(&r, m, 1), CKPT_OK, "manager restore_step not strict"));
    ckpt_manager_free(m);
    /* version 3: as before (ENOTFOUND naming 'c') */
    mo.version = 3;
    CHECK(coll(ckpt_manager_create(&m, s, dir, &mo), CKPT_OK, "manager v3"));
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_ENOTFOUND, "manager v3 restore"));
    CHECK(strstr(g_msg, "'c'") != NULL);
    ckpt_manager_restore_names(m, &miss, &unexp);
    CHECK(miss == NULL && unexp == NULL);
    ckpt_manager_free(m);
    /* NULL options: as before too */
    CHECK(coll(ckpt_manager_create(&m, s, dir, NULL), CKPT_OK, "manager NULL"));
    CHECK(coll(ckpt_manager_restore_latest(&r, m), CKPT_ENOTFOUND, "manager NULL restore"));
    ckpt_manager_free(m);
    ckpt_saver_free(s);
}

/* the replica check: `bn` equal everywhere or differing by rank (rank 0 and the odd ranks) */
static int save_bn(ckpt_saver *s, float *bn, int differ, const char *prefix)
{
    for (int i = 0; i < 8; i++)
        bn[i] = (float)i + (differ ? (float)(g_rank % 2) : 0.0f);
    return ckpt_saver_write(s, prefix, NULL);
}

static ckpt_saver *bn_saver(float *bn, float *w, int check, int mismatch, unsigned version)
{
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    CHECK(o.version == 3);
    o.version = version;
    o.check_replicas = check;
    o.replica_mismatch = mismatch;
    ckpt_saver *s = new_saver(&o);
    int64_t d8 = 8, d16 = 16;
    ckpt_shape s8, s16;
    ckpt_shape_init(&s8, 1, &d8);
    ckpt_shape_init(&s16, 1, &d16);
    /* "w" is the larger: rank 0 writes it, so "model/bn/running_mean" is written by rank 1 when
     * there are two ranks or more (the writers are dealt by size: not rank 0's copy) */
    CHECK_OK(ckpt_saver_add_replicated(s, "w", CKPT_FLOAT32, &s16, w, CKPT_REPLICA_PRIMARY));
    CHECK_OK(ckpt_saver_add_replicated(s, "model/bn/running_mean", CKPT_FLOAT32, &s8, bn,
                                       CKPT_REPLICA_PRIMARY));
    return s;
}

static void test_replicas(const char *dir)
{
    float bn[8], w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (float)i;
    char p[4096];

    /* the default (first, error) */
    ckpt_saver *s = bn_saver(bn, w, 0, 0, 3);
    int writer = ckpt_saver_primary_rank(s, "model/bn/running_mean");
    CHECK_MSG(writer == (g_size > 1 ? 1 : 0), "the writer of the smaller tensor: rank %d", writer);
    CHECK_EQ_INT(ckpt_saver_primary_rank(s, "w"), 0);
    CHECK_EQ_INT(ckpt_saver_primary_rank(s, "not registered"), -1);
    snprintf(p, sizeof p, "%s/rep-1", dir);
    int want = g_size > 1 ? CKPT_EMISMATCH : CKPT_OK;
    CHECK(coll(save_bn(s, bn, 1, p), want, "differing replicas"));
    if (g_size > 1) {
        /* ranks whose copy differs from the writer's: those of the other parity */
        char ranks[256] = "";
        for (int r = 0, k = 0; r < g_size; r++)
            if (r % 2 != writer % 2)
                snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "%s%d",
                         k++ ? ", " : "", r);
        char want_txt[400];
        snprintf(want_txt, sizeof want_txt, "'model/bn/running_mean': rank%s %s differ",
                 g_size > 2 ? "s" : "", ranks);
        CHECK_MSG(strstr(g_msg, want_txt) && !strstr(g_msg, "'w'"), "replica message: %s (want %s)",
                  g_msg, want_txt);
        char wr[64];
        snprintf(wr, sizeof wr, "from rank %d's copy", writer);
        CHECK_MSG(strstr(g_msg, wr) != NULL, "replica message: %s", g_msg);
        /* nothing committed */
        char idx[4200];
        snprintf(idx, sizeof idx, "%s.index", p);
        CHECK(access(idx, F_OK) != 0);
    }
    /* equal copies pass (the plan is checked again after the failure) */
    snprintf(p, sizeof p, "%s/rep-1b", dir);
    CHECK(coll(save_bn(s, bn, 0, p), CKPT_OK, "equal replicas"));
    /* first: a later divergence is not checked again */
    snprintf(p, sizeof p, "%s/rep-2", dir);
    CHECK(coll(save_bn(s, bn, 1, p), CKPT_OK, "first: not rechecked"));
    ckpt_saver_free(s);

    /* every: a later divergence is caught */
    s = bn_saver(bn, w, CKPT_CHECK_REPLICAS_EVERY, 0, 3);
    snprintf(p, sizeof p, "%s/rep-3", dir);
    CHECK(coll(save_bn(s, bn, 0, p), CKPT_OK, "every: equal"));
    snprintf(p, sizeof p, "%s/rep-4", dir);
    CHECK(coll(save_bn(s, bn, 1, p), want, "every: diverged"));
    ckpt_saver_free(s);

    /* warn: saved, the writer's copy */
    s = bn_saver(bn, w, 0, CKPT_REPLICA_MISMATCH_WARN, 3);
    snprintf(p, sizeof p, "%s/rep-5", dir);
    CHECK(coll(save_bn(s, bn, 1, p), CKPT_OK, "warn"));
    ckpt_saver_free(s);
    float got[8] = {0};
    s = bn_saver(got, w, 0, 0, 3);
    CHECK(coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_OK, "warn: restore"));
    CHECK_MSG(got[1] == 1.0f + (float)(writer % 2), "warn: restored %g, the writer's is %g", got[1],
              1.0f + (float)(writer % 2));
    ckpt_saver_free(s);

    /* off: never checked */
    s = bn_saver(bn, w, CKPT_CHECK_REPLICAS_OFF, 0, 3);
    snprintf(p, sizeof p, "%s/rep-6", dir);
    CHECK(coll(save_bn(s, bn, 1, p), CKPT_OK, "off"));
    ckpt_saver_free(s);

    /* a version-2 options struct: the default, first */
    s = bn_saver(bn, w, 0, 0, 2);
    snprintf(p, sizeof p, "%s/rep-7", dir);
    CHECK(coll(save_bn(s, bn, 1, p), want, "options v2"));
    ckpt_saver_free(s);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_strict OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    make_dir(g_out); /* collective */
    char prefix[3100], dir[3100];
    snprintf(prefix, sizeof prefix, "%s/strict", g_out);
    write_ckpt(prefix);
    test_strict(prefix);
    test_grouped(prefix);
    snprintf(dir, sizeof dir, "%s/mgr", g_out);
    test_manager(dir);
    snprintf(dir, sizeof dir, "%s/rep", g_out);
    make_dir(dir);
    test_replicas(dir);
    return check_mpi_done("test_strict");
}
