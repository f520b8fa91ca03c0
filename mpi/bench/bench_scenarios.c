/* mpickpt-bench: the models (large: one partitioned and three full float32 tensors per rank;
 * small: many small full tensors) and the scenarios (large, small + restore_small, restore warm,
 * cold and resharded, async), each interleaving the library with its baseline rep by rep and
 * checking restored values outside the timing. Collective: every rank runs every scenario. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t full_base(int owner, int k)
{
    return (uint64_t)owner * 7919u + (uint64_t)k * 104729u;
}

/* The values the large model saves (large_check(m, 0) expects them back). */
static void large_fill(large_model *m)
{
    size_t n = m->tbytes / sizeof(float);
    for (int k = 0; k < NT; k++)
        fill_linear(m->t[k], n,
                    k == 0 ? (uint64_t)g_rank * (uint64_t)m->R * COLS : full_base(g_rank, k));
}

void large_init(large_model *m, long mb)
{
    m->bytes = (size_t)mb << 20;
    m->tbytes = m->bytes / NT;
    m->R = (int64_t)(m->tbytes / (COLS * sizeof(float)));
    m->arena = alloc_touched(m->bytes);
    for (int k = 0; k < NT; k++)
        m->t[k] = (float *)(m->arena + (size_t)k * m->tbytes);
    large_fill(m);
}

/* Registers the large model: as written (reshard = 0), or resharded (1): rank r takes rows
 * [rR + R/2, (r+1)R + R/2) of `part` (the last rank: its last R/2 rows plus rows [0, R/2)), so
 * every rank's box straddles two stored pieces, and the full tensors of rank r-1 (another rank's
 * file). */
void large_register(ckpt_saver *s, large_model *m, int reshard)
{
    int64_t R = m->R, half = R / 2, dims[2] = {(int64_t)g_size * R, COLS}, fd[2] = {R, COLS};
    ckpt_shape gshape, fshape;
    ckpt_shape_init(&gshape, 2, dims);
    ckpt_shape_init(&fshape, 2, fd);
    int rc;
    if (!reshard) {
        int64_t st[2] = {(int64_t)g_rank * R, 0}, ct[2] = {R, COLS};
        ckpt_slice sl;
        ckpt_slice_init(&sl, 2, st, ct);
        if ((rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &sl, m->t[0])))
            die("add_slice", rc);
    } else if (g_rank < g_size - 1) {
        int64_t st[2] = {(int64_t)g_rank * R + half, 0}, ct[2] = {R, COLS};
        ckpt_slice sl;
        ckpt_slice_init(&sl, 2, st, ct);
        if ((rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &sl, m->t[0])))
            die("add_slice", rc);
    } else {
        int64_t st1[2] = {(int64_t)g_rank * R + half, 0}, ct1[2] = {R - half, COLS};
        int64_t st2[2] = {0, 0}, ct2[2] = {half, COLS};
        ckpt_slice a, b;
        ckpt_slice_init(&a, 2, st1, ct1);
        ckpt_slice_init(&b, 2, st2, ct2);
        if ((rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &a, m->t[0])) ||
            (rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &b,
                                       m->t[0] + (size_t)(R - half) * COLS)))
            die("add_slice", rc);
    }
    int owner = reshard ? (g_rank + g_size - 1) % g_size : g_rank;
    for (int k = 1; k < NT; k++) {
        char name[64];
        snprintf(name, sizeof name, "rank%04d/full%d", owner, k);
        if ((rc = ckpt_saver_add_full(s, name, CKPT_FLOAT32, &fshape, m->t[k])))
            die("add_full", rc);
    }
}

/* After a restore with the given registration: are the values the ones that were saved? */
int large_check(const large_model *m, int reshard)
{
    int64_t R = m->R, half = R / 2;
    size_t n = m->tbytes / sizeof(float);
    int ok;
    if (!reshard)
        ok = check_linear(m->t[0], n, (uint64_t)g_rank * (uint64_t)R * COLS);
    else if (g_rank < g_size - 1)
        ok = check_linear(m->t[0], n, (uint64_t)((int64_t)g_rank * R + half) * COLS);
    else
        ok = check_linear(m->t[0], (size_t)(R - half) * COLS,
                          (uint64_t)((int64_t)g_rank * R + half) * COLS) &&
             check_linear(m->t[0] + (size_t)(R - half) * COLS, (size_t)half * COLS, 0);
    int owner = reshard ? (g_rank + g_size - 1) % g_size : g_rank;
    for (int k = 1; k < NT; k++)
        ok = ok && check_linear(m->t[k], n, full_base(owner, k));
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* Small: K tensors of min_kb..max_kb KiB (the same sizes on every rank), contiguous. */
typedef struct small_model {
    unsigned char *arena;
    size_t bytes;
    int k;
    size_t *off, *len;
} small_model;

#define SMALL_SEED 88172645463325252ull /* xorshift, the same sequence on every rank */

/* The next tensor's size: A..B KiB, whole float32s, at least one. */
static size_t small_next_len(uint64_t *x, const opts *o)
{
    size_t lo = (size_t)o->min_kb * 1024, hi = (size_t)o->max_kb * 1024;
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    size_t len = lo + (size_t)(*x % (hi - lo + 1));
    len &= ~(size_t)3; /* whole float32s */
    return len < 4 ? 4 : len;
}

size_t small_model_bytes(const opts *o)
{
    uint64_t x = SMALL_SEED;
    size_t total = 0;
    for (int i = 0; i < o->tensors; i++)
        total += small_next_len(&x, o);
    return total;
}

static void small_init(small_model *m, const opts *o)
{
    m->k = o->tensors;
    m->off = calloc((size_t)m->k, sizeof *m->off);
    m->len = calloc((size_t)m->k, sizeof *m->len);
    uint64_t x = SMALL_SEED;
    size_t total = 0;
    for (int i = 0; i < m->k; i++) {
        size_t len = small_next_len(&x, o);
        m->off[i] = total;
        m->len[i] = len;
        total += len;
    }
    m->bytes = total;
    m->arena = alloc_touched(total);
    fill_linear((float *)m->arena, total / sizeof(float), (uint64_t)g_rank * 31337u);
}

static void small_register(ckpt_saver *s, small_model *m)
{
    for (int i = 0; i < m->k; i++) {
        char name[64];
        snprintf(name, sizeof name, "rank%04d/t%05d", g_rank, i);
        int64_t n = (int64_t)(m->len[i] / sizeof(float));
        ckpt_shape sh;
        ckpt_shape_init(&sh, 1, &n);
        int rc = ckpt_saver_add_full(s, name, CKPT_FLOAT32, &sh, m->arena + m->off[i]);
        if (rc != CKPT_OK)
            die("add_full", rc);
    }
}

/* Creates the saver of o's layout. --layout per-node asks for it through MPICKPT_LAYOUT (the
 * options' layout left "unknown"), so that a build without that layout says so: the code of
 * ckpt_saver_create, the same on every rank, is returned (no exit). Collective. */
int try_make_saver(ckpt_saver **out, const opts *o, int async)
{
    ckpt_saver_options so = CKPT_SAVER_OPTIONS_INIT;
    so.layout = o->layout_env ? CKPT_LAYOUT_UNKNOWN : o->layout;
    so.collective_io = o->collective;
    so.info = o->info;
    so.max_shard_bytes = o->max_shard_bytes;
    so.async = async;
    char old[256] = "";
    const char *had = getenv("MPICKPT_LAYOUT");
    if (had)
        snprintf(old, sizeof old, "%s", had);
    if (o->layout_env)
        setenv("MPICKPT_LAYOUT", o->layout_env, 1);
    *out = NULL;
    int rc = ckpt_saver_create(out, MPI_COMM_WORLD, &so);
    if (o->layout_env) {
        if (had)
            setenv("MPICKPT_LAYOUT", old, 1);
        else
            unsetenv("MPICKPT_LAYOUT");
    }
    return rc;
}

ckpt_saver *make_saver(const opts *o, int async)
{
    ckpt_saver *s = NULL;
    int rc = try_make_saver(&s, o, async);
    if (rc != CKPT_OK)
        die("ckpt_saver_create", rc);
    return s;
}

static void ckpt_path(char *out, size_t n, const opts *o, const char *what, int rep)
{
    snprintf(out, n, "%s/bench-%s-%d", o->dir, what, rep);
}

/* Removes a checkpoint (rank 0) and waits for it (collective). Also used before a save, against
 * the leftovers of an interrupted run. */
void delete_ckpt(const char *prefix)
{
    if (g_rank == 0) {
        int rc = ckpt_checkpoint_delete(prefix);
        if (rc != CKPT_OK && rc != CKPT_ENOTFOUND)
            die("ckpt_checkpoint_delete", rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* One timed sync save: max over ranks; phases into r at sample i (when r != NULL). */
double timed_save(ckpt_saver *s, const char *prefix, result *r, int i)
{
    delete_ckpt(prefix);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    int rc = ckpt_saver_write(s, prefix, NULL);
    return timed_save_end(s, t0, rc, "ckpt_saver_write", r, i);
}

double timed_save_end(ckpt_saver *s, double t0, int rc, const char *what, result *r, int i)
{
    double t = now() - t0;
    if (rc != CKPT_OK)
        die(what, rc);
    t = max_all(t);
    if (r)
        record_phases(s, r, i);
    return t;
}

void result_begin(result *r, const opts *o, const char *scenario, const char *baseline,
                  size_t bytes)
{
    memset(r, 0, sizeof *r);
    r->scenario = scenario;
    r->baseline = baseline;
    r->bytes = bytes;
    r->reps = o->reps;
}

void record_phases(ckpt_saver *s, result *r, int i)
{
    ckpt_saver_metrics m = CKPT_SAVER_METRICS_INIT;
    int rc = ckpt_saver_metrics_get(&m, s);
    if (rc != CKPT_OK)
        die("ckpt_saver_metrics_get", rc);
    r->ph[0][i] = m.write_s;
    r->ph[1][i] = m.agree_s;
    r->ph[2][i] = m.merge_s;
    r->ph[3][i] = m.commit_s;
    if (i + 1 > r->nph)
        r->nph = i + 1;
}

static void baseline_path(char *out, size_t n, const opts *o)
{
    snprintf(out, n, "%s/bench-baseline-%05d.bin", o->dir, g_rank);
}

/* Sync saves of what `s` has registered (`bytes` per rank in `buf`) vs write+fsync, interleaved. */
static void save_scenario(const opts *o, ckpt_saver *s, const char *name, const void *buf,
                          size_t bytes, result *r)
{
    char prefix[4096], base[4096];
    baseline_path(base, sizeof base, o);
    result_begin(r, o, name, "write+fsync", bytes);
    /* warm-up: the plan, HDF5's first use, the file system's first allocation */
    ckpt_path(prefix, sizeof prefix, o, name, 0);
    timed_save(s, prefix, NULL, 0);
    delete_ckpt(prefix);
    timed_plain_write(base, buf, bytes);
    remove_all(base);
    for (int i = 0; i < o->reps; i++) {
        ckpt_path(prefix, sizeof prefix, o, name, i + 1);
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                r->lib[i] = timed_save(s, prefix, r, i);
                delete_ckpt(prefix);
            } else {
                r->base[i] = timed_plain_write(base, buf, bytes);
                remove_all(base);
            }
        }
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  %s rep %d: mpickpt %.4f s, baseline %.4f s\n", name, i, r->lib[i],
                    r->base[i]);
    }
}

void run_large(const opts *o, large_model *m)
{
    static result r;
    memset(&r, 0, sizeof r);
    ckpt_saver *s = make_saver(o, 0);
    large_register(s, m, 0);
    save_scenario(o, s, "large", m->arena, m->bytes, &r);
    ckpt_saver_free(s);
    print_result(o, &r);
}

void run_small(const opts *o)
{
    static result r;
    memset(&r, 0, sizeof r);
    small_model m;
    small_init(&m, o);
    ckpt_saver *s = make_saver(o, 0);
    small_register(s, &m);
    save_scenario(o, s, "small", m.arena, m.bytes, &r);
    print_result(o, &r);

    /* restore_small: that checkpoint restored warm vs read(2) of the same bytes */
    static result rr;
    result_begin(&rr, o, "restore_small", "read (warm)", m.bytes);
    rr.has_chk = 1;
    char prefix[4096], base[4096];
    ckpt_path(prefix, sizeof prefix, o, "restore_small", 0);
    baseline_path(base, sizeof base, o);
    timed_save(s, prefix, &rr, 0); /* its phases go with the row */
    rr.nph = 1;
    plain_write(base, m.arena, m.bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    timed_restore(s, prefix); /* warm-up: page cache, HDF5 */
    timed_plain_read(base, m.arena, m.bytes);
    size_t nf = m.bytes / sizeof(float);
    uint64_t vbase = (uint64_t)g_rank * 31337u;
    for (int i = 0; i < o->reps; i++) {
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                memset(m.arena, 0, m.bytes);
                rr.lib[i] = timed_restore(s, prefix);
                if (!check_linear((const float *)m.arena, nf, vbase)) {
                    fprintf(stderr, "mpickpt-bench: restore_small: restored values are wrong\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            } else {
                rr.base[i] = timed_plain_read(base, m.arena, m.bytes);
            }
        }
        rr.chk[i] = timed_checked_read(base, m.arena, m.bytes);
    }
    fill_linear((float *)m.arena, nf, vbase);
    delete_ckpt(prefix);
    remove_all(base);
    ckpt_saver_free(s);
    print_result(o, &rr);
    free(m.arena);
    free(m.off);
    free(m.len);
}

/* ---- restore --------------------------------------------------------------------------------- */

double timed_restore(ckpt_saver *s, const char *prefix)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    int rc = ckpt_saver_restore(s, prefix, NULL, NULL);
    double t = now() - t0;
    if (rc != CKPT_OK)
        die("ckpt_saver_restore", rc);
    return max_all(t);
}

/* Restores of `prefix` through `s` vs plain reads of `base`, interleaved; cold: drop_caches before
 * each measurement. Checks the restored values after every restore (outside the timing). */
static void restore_reps(const opts *o, ckpt_saver *s, const char *prefix, const char *base,
                         large_model *m, int reshard, int cold, result *r)
{
    for (int i = 0; i < o->reps; i++) {
        for (int k = 0; k < 2; k++) {
            if (cold && !drop_caches(NULL, 0)) {
                if (g_rank == 0)
                    fprintf(stderr, "mpickpt-bench: drop_caches stopped working\n");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if ((k == 0) == (i % 2 == 0)) {
                r->lib[i] = timed_restore(s, prefix);
                if (!large_check(m, reshard)) {
                    if (g_rank == 0)
                        fprintf(stderr, "mpickpt-bench: %s: restored values are wrong\n",
                                r->scenario);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            } else {
                r->base[i] = timed_plain_read(base, m->arena, m->bytes);
            }
        }
        if (cold && !drop_caches(NULL, 0))
            MPI_Abort(MPI_COMM_WORLD, 1);
        r->chk[i] = timed_checked_read(base, m->arena, m->bytes);
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  %s rep %d: mpickpt %.4f s, baseline %.4f s\n", r->scenario, i,
                    r->lib[i], r->base[i]);
    }
}

void run_restore(const opts *o, large_model *m)
{
    static result r[4];
    const char *names[4] = {"restore_warm", "restore_cold", "restore_reshard_warm",
                            "restore_reshard_cold"};
    memset(r, 0, sizeof r);
    char prefix[4096], base[4096], why[256] = "";
    ckpt_path(prefix, sizeof prefix, o, "restore", 0);
    baseline_path(base, sizeof base, o);

    /* The checkpoint (its save's phases go with every restore row), and the baseline file. */
    ckpt_saver *s = make_saver(o, 0);
    large_register(s, m, 0);
    result wr;
    memset(&wr, 0, sizeof wr);
    timed_save(s, prefix, &wr, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    plain_write(base, m->arena, m->bytes);
    MPI_Barrier(MPI_COMM_WORLD);

    int can_cold = o->cold && drop_caches(why, sizeof why);
    if (!o->cold)
        snprintf(why, sizeof why, "--cold 0");
    ckpt_saver *rs = make_saver(o, 0);
    large_register(rs, m, 1);
    for (int v = 0; v < 4; v++) {
        int reshard = v >= 2, cold = v % 2;
        r[v].scenario = names[v];
        r[v].baseline = cold ? "read (cold)" : "read (warm)";
        r[v].bytes = m->bytes;
        r[v].reps = o->reps;
        r[v].nph = 1;
        r[v].has_chk = 1;
        for (int p = 0; p < 4; p++)
            r[v].ph[p][0] = wr.ph[p][0];
        if (cold && !can_cold) {
            r[v].skipped = why;
            print_result(o, &r[v]);
            continue;
        }
        ckpt_saver *use = reshard ? rs : s;
        if (!cold) { /* warm-up: the page cache holds both files, HDF5 is initialized */
            timed_restore(use, prefix);
            timed_plain_read(base, m->arena, m->bytes);
        }
        restore_reps(o, use, prefix, base, m, reshard, cold, &r[v]);
        print_result(o, &r[v]);
    }
    ckpt_saver_free(rs);
    ckpt_saver_free(s);
    delete_ckpt(prefix);
    remove_all(base);
    large_fill(m); /* the buffers hold the resharded values now: back to the saved ones */
}

/* ---- async ----------------------------------------------------------------------------------- */

void run_async(const opts *o, large_model *m)
{
    static result r;
    result_begin(&r, o, "async", "memcpy", m->bytes);
    r.async = 1;
    unsigned char *dst = alloc_touched(m->bytes);
    memcpy(dst, m->arena, m->bytes); /* warm */
    ckpt_saver *s = make_saver(o, 1);
    large_register(s, m, 0);
    char prefix[4096];
    /* warm-up: plan, snapshot buffers allocated and faulted by the library */
    ckpt_path(prefix, sizeof prefix, o, "async", 0);
    delete_ckpt(prefix);
    int rc = ckpt_saver_write(s, prefix, NULL);
    if (rc == CKPT_OK)
        rc = ckpt_saver_sync(s);
    if (rc != CKPT_OK)
        die("async warm-up save", rc);
    delete_ckpt(prefix);
    for (int i = 0; i < o->reps; i++) {
        ckpt_path(prefix, sizeof prefix, o, "async", i + 1);
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                delete_ckpt(prefix);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now();
                rc = ckpt_saver_write(s, prefix, NULL);
                double t1 = now();
                if (rc != CKPT_OK)
                    die("async ckpt_saver_write", rc);
                if ((rc = ckpt_saver_sync(s)) != CKPT_OK)
                    die("ckpt_saver_sync", rc);
                double t2 = now();
                r.lib[i] = max_all(t1 - t0);
                r.bg[i] = max_all(t2 - t0);
                ckpt_saver_metrics mt = CKPT_SAVER_METRICS_INIT;
                if ((rc = ckpt_saver_metrics_get(&mt, s)) != CKPT_OK)
                    die("ckpt_saver_metrics_get", rc);
                r.ph[0][i] = mt.write_s;
                r.ph[1][i] = mt.agree_s;
                r.ph[2][i] = mt.merge_s;
                r.ph[3][i] = mt.commit_s;
                r.nph = i + 1;
                delete_ckpt(prefix);
            } else {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now();
                memcpy(dst, m->arena, m->bytes);
                r.base[i] = max_all(now() - t0);
            }
        }
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  async rep %d: blocking %.4f s, memcpy %.4f s, background %.4f s\n",
                    i, r.lib[i], r.base[i], r.bg[i]);
    }
    if ((rc = ckpt_saver_close(s)) != CKPT_OK)
        die("ckpt_saver_close", rc);
    free(dst);
    print_result(o, &r);
}
