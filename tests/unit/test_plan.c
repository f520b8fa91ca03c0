/* lib/plan.h without mpirun: registrations and their errors, the replicated tensors' primary rank,
 * the sharding policy (every piece within the limit unless one element is larger, never empty,
 * the pieces tiling each registration exactly: counted element by element), a piece's bytes (in
 * the source when contiguous there, else copied: checked value by value), and the plan's fragments
 * of several simulated ranks merged (lib/merge.h): a valid plan, overlaps, gaps, dtype/shape/kind
 * disagreement, a replicated tensor some ranks did not register. */
#include "phases.h"

#include "index.h"
#include "plan.h"

#include <stdint.h>

/* ---- shapes, slices and registrations -------------------------------------------------------- */

static ckpt_shape shape_of(int nd, const int64_t *dims)
{
    ckpt_shape s;
    if (ckpt_shape_init(&s, nd, dims) != CKPT_OK) {
        fprintf(stderr, "bad test shape\n");
        exit(2);
    }
    return s;
}

static ckpt_slice slice_of(int nd, const int64_t *start, const int64_t *count)
{
    ckpt_slice s;
    if (ckpt_slice_init(&s, nd, start, count) != CKPT_OK) {
        fprintf(stderr, "bad test slice\n");
        exit(2);
    }
    return s;
}

static ckpt_slice full_of(const ckpt_shape *s)
{
    ckpt_slice f;
    ckpt_slice_full(&f, s);
    return f;
}

/* A buffer that plan functions never read (registrations need data; the plan only points). */
static int64_t dummy[4096];

static int add(ckpt__regs *r, int rank, const char *name, ckpt_dtype dt, const ckpt_shape *sh,
               const ckpt_slice *sl, ckpt_kind kind)
{
    return ckpt__regs_add(r, rank, name, name, dt, sh, sl, kind, dummy);
}

static int add_full(ckpt__regs *r, int rank, const char *name, ckpt_dtype dt, int nd,
                    const int64_t *dims, ckpt_kind kind)
{
    ckpt_shape sh = shape_of(nd, dims);
    ckpt_slice sl = full_of(&sh);
    return add(r, rank, name, dt, &sh, &sl, kind);
}

/* ---- 1. registrations ------------------------------------------------------------------------ */

static void test_regs_add(void)
{
    ckpt__regs r = { 0 };
    int64_t d43[2] = { 4, 3 };
    ckpt_shape sh = shape_of(2, d43);
    ckpt_slice full = full_of(&sh);
    float w[12] = { 0 };

    /* a registration is copied: strings owned, the rest by value, the data pointer kept */
    char name[16] = "w", stored[16] = "w@rank-5";
    CHECK_OK(ckpt__regs_add(&r, 5, name, stored, CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL, w));
    strcpy(name, "changed");
    strcpy(stored, "changed");
    CHECK_EQ_INT(r.n, 1);
    CHECK(strcmp(r.v[0].name, "w") == 0 && strcmp(r.v[0].stored, "w@rank-5") == 0);
    CHECK(r.v[0].name != name && r.v[0].stored != stored);
    CHECK_EQ_INT(r.v[0].dtype, CKPT_FLOAT32);
    CHECK_EQ_INT(r.v[0].kind, CKPT_KIND_FULL);
    CHECK(ckpt_shape_equal(&r.v[0].shape, &sh) && ckpt_slice_equal(&r.v[0].slice, &full));
    CHECK(r.v[0].data == w);

    /* names are UTF-8 text; an invalid one is refused with its bytes escaped in the message */
    static const char *const bad_utf8[] = { "bad\xff", "\xc0\xaf", "\xed\xa0\x80", "x\xe2\x82",
                                            NULL };
    for (int i = 0; bad_utf8[i]; i++) {
        CHECK_RC(ckpt__regs_add(&r, 0, bad_utf8[i], bad_utf8[i], CKPT_FLOAT32, &sh, &full,
                                CKPT_KIND_FULL, w),
                 CKPT_EINVAL);
        CHECK_MSG(strstr(last_msg(), "not valid UTF-8") && strstr(last_msg(), "\\x"),
                  "message: %s", last_msg());
    }
    CHECK_OK(add(&r, 0, "gewicht/\xc3\xa4/\xe6\x97\xa5\xf0\x9f\x98\x80", CKPT_FLOAT32, &sh,
                 &full, CKPT_KIND_FULL));
    CHECK_EQ_INT(r.n, 2);

    /* empty and over-long names */
    CHECK_RC(add(&r, 0, "", CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL), CKPT_EINVAL);
    char lng[4098];
    memset(lng, 'n', sizeof lng - 1);
    lng[4097] = '\0';
    CHECK_RC(add(&r, 0, lng, CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL), CKPT_EINVAL);
    lng[4096] = '\0';
    CHECK_OK(add(&r, 0, lng, CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL));
    CHECK_EQ_INT(r.n, 3);

    /* duplicates among this rank's stored names, whatever the kinds; the message names the
     * tensor and the rank */
    CHECK_RC(ckpt__regs_add(&r, 5, "w", "w@rank-5", CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL,
                            w),
             CKPT_EINVAL);
    CHECK_MSG(strstr(last_msg(), "'w'") && strstr(last_msg(), "already registered") &&
                  strstr(last_msg(), "rank 5"),
              "message: %s", last_msg());
    CHECK_RC(ckpt__regs_add(&r, 5, "w2", "w@rank-5", CKPT_FLOAT32, &sh, &full,
                            CKPT_KIND_REPLICATED, w),
             CKPT_EINVAL);
    /* a partitioned tensor may have several slices on one rank (the plan checks the tiling) ... */
    int64_t s0[2] = { 0, 0 }, s2[2] = { 2, 0 }, c2[2] = { 2, 3 };
    ckpt_slice top = slice_of(2, s0, c2), bottom = slice_of(2, s2, c2);
    CHECK_OK(add(&r, 0, "p", CKPT_FLOAT32, &sh, &top, CKPT_KIND_PARTITIONED));
    CHECK_OK(add(&r, 0, "p", CKPT_FLOAT32, &sh, &bottom, CKPT_KIND_PARTITIONED));
    /* ... but a name registered as partitioned cannot be registered again as another kind */
    CHECK_RC(add(&r, 0, "p", CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL), CKPT_EINVAL);
    CHECK_MSG(strstr(last_msg(), "'p'"), "message: %s", last_msg());
    size_t n_before = r.n;

    /* NULL data: refused unless the slice is empty, or the registration is a blob */
    CHECK_RC(ckpt__regs_add(&r, 0, "nodata", "nodata", CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL,
                            NULL),
             CKPT_EINVAL);
    CHECK_MSG(strstr(last_msg(), "'nodata'") && strstr(last_msg(), "NULL"), "message: %s",
              last_msg());
    int64_t d0[2] = { 0, 3 };
    ckpt_shape empty = shape_of(2, d0);
    ckpt_slice efull = full_of(&empty);
    CHECK_OK(ckpt__regs_add(&r, 0, "empty", "empty", CKPT_FLOAT32, &empty, &efull,
                            CKPT_KIND_FULL, NULL));
    int64_t zc[2] = { 0, 3 };
    ckpt_slice none = slice_of(2, s2, zc); /* this rank holds no rows of a partitioned tensor */
    CHECK_OK(ckpt__regs_add(&r, 0, "part0", "part0", CKPT_FLOAT32, &sh, &none,
                            CKPT_KIND_PARTITIONED, NULL));
    CHECK_OK(ckpt__regs_add(&r, 0, "blob", "blob", CKPT_UINT8, &sh, &full, CKPT_KIND_BLOB, NULL));
    CHECK_EQ_INT(r.n, n_before + 3);
    n_before = r.n;

    /* dtypes */
    static const int bad_dt[] = { 0, -1, 14, 999 };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad_dt); i++) {
        CHECK_RC(add(&r, 0, "dt", (ckpt_dtype)bad_dt[i], &sh, &full, CKPT_KIND_FULL),
                 CKPT_EINVAL);
        CHECK_MSG(strstr(last_msg(), "'dt'") && strstr(last_msg(), "dtype"), "message: %s",
                  last_msg());
    }

    /* slices outside the shape, of another rank than the shape, negative dims */
    int64_t s3[2] = { 3, 0 }, c23[2] = { 2, 3 }, s_neg[2] = { 0, 0 }, c_big[2] = { 4, 4 };
    ckpt_slice out1 = slice_of(2, s3, c23), out2 = slice_of(2, s_neg, c_big);
    int64_t one_d = 4;
    ckpt_slice rank1 = slice_of(1, s_neg, &one_d);
    const ckpt_slice *outs[] = { &out1, &out2, &rank1 };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(outs); i++) {
        CHECK_RC(add(&r, 0, "outside", CKPT_FLOAT32, &sh, outs[i], CKPT_KIND_PARTITIONED),
                 CKPT_EINVAL);
        CHECK_MSG(strstr(last_msg(), "'outside'"), "message: %s", last_msg());
    }
    ckpt_shape negshape = sh;
    negshape.dims[1] = -3;
    CHECK_RC(add(&r, 0, "negative", CKPT_FLOAT32, &negshape, &full, CKPT_KIND_FULL),
             CKPT_EINVAL);
    CHECK_MSG(strstr(last_msg(), "'negative'"), "message: %s", last_msg());
    /* nothing was appended by a refused registration */
    CHECK_EQ_INT(r.n, n_before);

    /* clear keeps the array for reuse, free releases it (LeakSanitizer checks both) */
    ckpt__regs_clear(&r);
    CHECK_EQ_INT(r.n, 0);
    CHECK(r.cap > 0 && r.v != NULL);
    CHECK_OK(add(&r, 0, "w", CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL));
    CHECK_EQ_INT(r.n, 1);
    ckpt__regs_free(&r);
    CHECK(r.v == NULL && r.n == 0 && r.cap == 0);
}

/* ---- 2. the writers of replicated tensors -------------------------------------------------- */

/* Registers 40 replicated tensors of sizes 1..40 (x 4 bytes) plus one of each other kind, in the
 * order given by `reverse`; the writers by stored name: wr[k] for "rep_<k>". */
static void writers_of(int size, int reverse, int *wr)
{
    ckpt__regs r = { 0 };
    int64_t d3 = 3;
    CHECK_OK(add_full(&r, 0, "full", CKPT_FLOAT32, 1, &d3, CKPT_KIND_FULL));
    for (int j = 0; j < 40; j++) {
        int k = reverse ? 39 - j : j;
        char name[32];
        snprintf(name, sizeof name, "rep_%d", k);
        int64_t d = (int64_t)(k % 20) + 1; /* two of each size: ties broken by name */
        CHECK_OK(add_full(&r, 0, name, CKPT_FLOAT32, 1, &d, CKPT_KIND_REPLICATED));
    }
    int *w = NULL;
    CHECK_OK(ckpt__replica_writers(&r, size, &w));
    CHECK(w != NULL);
    if (w) {
        CHECK_EQ_INT(w[0], -1); /* not replicated */
        for (size_t i = 1; i < r.n; i++) {
            int k = atoi(r.v[i].stored + 4);
            CHECK_MSG(w[i] >= 0 && w[i] < size, "writer of %s over %d ranks: %d", r.v[i].stored,
                      size, w[i]);
            wr[k] = w[i];
        }
    }
    free(w);
    ckpt__regs_free(&r);
}

static void test_replica_writers(void)
{
    static const int sizes[] = { 1, 2, 3, 4, 7, 64, 1000 };
    for (size_t t = 0; t < CKPT__ARRAY_LEN(sizes); t++) {
        int size = sizes[t], a[40], b[40];
        writers_of(size, 0, a);
        writers_of(size, 1, b);
        /* the same on every rank, whatever the order of registration */
        for (int k = 0; k < 40; k++)
            CHECK_MSG(a[k] == b[k], "rep_%d over %d ranks: %d or %d", k, size, a[k], b[k]);
        /* balanced: the most loaded rank writes at most the mean plus the largest tensor */
        uint64_t *load = calloc((size_t)size, sizeof *load), total = 0, most = 0;
        for (int k = 0; k < 40; k++) {
            uint64_t bytes = 4u * (uint64_t)(k % 20 + 1);
            load[a[k]] += bytes;
            total += bytes;
        }
        for (int r = 0; r < size; r++)
            most = load[r] > most ? load[r] : most;
        CHECK_MSG(most * (uint64_t)size <= total + 80u * (uint64_t)size,
                  "over %d ranks the most loaded writes %llu of %llu", size,
                  (unsigned long long)most, (unsigned long long)total);
        /* every rank of a small job writes some; with more ranks than tensors, one each */
        for (int r = 0; r < size && r < 40; r++)
            CHECK_MSG(load[r] > 0, "rank %d of %d writes nothing", r, size);
        free(load);
    }
    /* the largest tensor goes to rank 0, the next to rank 1 (of 4): not every copy is rank 0's */
    ckpt__regs r = { 0 };
    int64_t d1 = 1, d9 = 9;
    CHECK_OK(add_full(&r, 0, "small", CKPT_FLOAT32, 1, &d1, CKPT_KIND_REPLICATED));
    CHECK_OK(add_full(&r, 0, "big", CKPT_FLOAT32, 1, &d9, CKPT_KIND_REPLICATED));
    int *w = NULL;
    CHECK_OK(ckpt__replica_writers(&r, 4, &w));
    CHECK(w && w[0] == 1 && w[1] == 0);
    free(w);
    ckpt__regs_free(&r);
    /* no replicated tensor: no array */
    CHECK_OK(add_full(&r, 0, "full", CKPT_FLOAT32, 1, &d1, CKPT_KIND_FULL));
    w = (int *)&r; /* set to NULL by the call */
    CHECK_OK(ckpt__replica_writers(&r, 4, &w));
    CHECK(w == NULL);
    ckpt__regs_free(&r);
}

/* ---- 3. the sharding policy ------------------------------------------------------------------ */

/* Linear index in the global shape of the element at `idx`. */
static int64_t linear(const ckpt_shape *sh, const int64_t *idx)
{
    int64_t l = 0;
    for (int d = 0; d < sh->ndims; d++)
        l = l * sh->dims[d] + idx[d];
    return l;
}

/* Calls fn for every element of box (global coordinates), in row-major order; stops early when
 * fn returns non-zero. */
static void for_each(const ckpt_slice *box, int (*fn)(const int64_t *idx, void *arg), void *arg)
{
    int64_t n;
    if (ckpt_slice_num_elements(&n, box) != CKPT_OK || n == 0)
        return;
    int64_t idx[CKPT_MAX_DIMS];
    for (int d = 0; d < box->ndims; d++)
        idx[d] = box->start[d];
    for (;;) {
        if (fn(idx, arg))
            return;
        int d = box->ndims - 1;
        while (d >= 0 && ++idx[d] == box->start[d] + box->count[d]) {
            idx[d] = box->start[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

typedef struct cover_ctx {
    const ckpt_shape *shape;
    uint8_t *count;
} cover_ctx;

static int cover_one(const int64_t *idx, void *arg)
{
    cover_ctx *c = arg;
    uint8_t *v = &c->count[linear(c->shape, idx)];
    if (*v < 255)
        (*v)++;
    return 0;
}

static int inside(const ckpt_slice *in, const ckpt_slice *box)
{
    if (in->ndims != box->ndims)
        return 0;
    for (int d = 0; d < box->ndims; d++)
        if (box->start[d] < in->start[d] ||
            box->start[d] + box->count[d] > in->start[d] + in->count[d])
            return 0;
    return 1;
}

/*
 * Checks the pieces of registration ri against the policy for limit `max`: each inside the
 * registration's slice, within the limit unless it is one element, never empty unless the
 * registration is (then exactly one empty piece), exactly one piece equal to the slice when there
 * is no limit; and together they cover every element of the slice exactly once and nothing else
 * (counted in an array over the global shape). Returns the number of pieces.
 */
static size_t check_tiling(const ckpt__regs *regs, const ckpt__pieces *ps, size_t ri,
                           int64_t max, const char *what)
{
    const ckpt__reg *g = &regs->v[ri];
    size_t esize = ckpt_dtype_size(g->dtype);
    int64_t total, reg_n;
    CHECK_OK(ckpt_shape_num_elements(&total, &g->shape));
    CHECK_OK(ckpt_slice_num_elements(&reg_n, &g->slice));
    cover_ctx c = { &g->shape, calloc((size_t)(total ? total : 1), 1) };
    size_t np = 0;
    for (size_t j = 0; j < ps->n; j++) {
        const ckpt__piece *p = &ps->v[j];
        if (p->reg != ri)
            continue;
        np++;
        int64_t pn;
        CHECK_OK(ckpt_slice_num_elements(&pn, &p->slice));
        CHECK_MSG(inside(&g->slice, &p->slice), "%s max %lld: piece %zu outside the slice", what,
                  (long long)max, j);
        CHECK_MSG(pn > 0 || reg_n == 0, "%s max %lld: piece %zu is empty", what, (long long)max,
                  j);
        CHECK_EQ_INT(ckpt__piece_len(regs, p), (uint64_t)pn * esize);
        if (max > 0)
            CHECK_MSG((uint64_t)pn * esize <= (uint64_t)max || pn == 1,
                      "%s max %lld: piece %zu has %lld bytes", what, (long long)max, j,
                      (long long)pn * (long long)esize);
        if (inside(&g->slice, &p->slice))
            for_each(&p->slice, cover_one, &c);
    }
    /* every element of the shape: once when in this rank's slice, else never */
    int64_t bad = 0, idx[CKPT_MAX_DIMS] = { 0 };
    ckpt_slice all = full_of(&g->shape);
    for (int64_t l = 0; l < total; l++) {
        int in = 1;
        for (int d = 0; d < g->shape.ndims; d++)
            in &= idx[d] >= g->slice.start[d] && idx[d] < g->slice.start[d] + g->slice.count[d];
        bad += c.count[l] != (in ? 1 : 0);
        for (int d = all.ndims - 1; d >= 0 && ++idx[d] == all.count[d]; d--)
            idx[d] = 0;
    }
    CHECK_MSG(bad == 0, "%s max %lld: %lld elements covered wrongly", what, (long long)max,
              (long long)bad);
    if (reg_n == 0)
        CHECK_MSG(np == 1, "%s max %lld: %zu pieces of an empty registration", what,
                  (long long)max, np);
    else
        CHECK_MSG(np >= 1, "%s max %lld: no piece", what, (long long)max);
    if (max <= 0) {
        CHECK_MSG(np == 1, "%s: %zu pieces without a limit", what, np);
        for (size_t j = 0; j < ps->n; j++)
            if (ps->v[j].reg == ri)
                CHECK(ckpt_slice_equal(&ps->v[j].slice, &g->slice));
    }
    free(c.count);
    return np;
}

/* The pieces come registration by registration, in order (ckpt__plan_fragment relies on it). */
static void check_order(const ckpt__pieces *ps)
{
    for (size_t j = 1; j < ps->n; j++)
        CHECK_MSG(ps->v[j].reg >= ps->v[j - 1].reg, "piece %zu of registration %zu after %zu", j,
                  ps->v[j].reg, ps->v[j - 1].reg);
}

/* Plans one registration (alone) at every limit in `limits` and checks it. */
static void sweep(const char *what, ckpt_dtype dt, const ckpt_shape *sh, const ckpt_slice *sl,
                  const int64_t *limits, size_t nlimits)
{
    ckpt__regs r = { 0 };
    ckpt__pieces ps = { 0 };
    CHECK_OK(ckpt__regs_add(&r, 0, what, what, dt, sh, sl, CKPT_KIND_PARTITIONED, dummy));
    for (size_t i = 0; i < nlimits; i++) {
        CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, limits[i]));
        check_tiling(&r, &ps, 0, limits[i], what);
    }
    ckpt__pieces_free(&ps);
    ckpt__regs_free(&r);
}

static void test_sharding(void)
{
    int64_t limits[200];
    size_t nl = 0;
    limits[nl++] = -5;
    limits[nl++] = 0;
    for (int64_t m = 1; m <= 130; m++)
        limits[nl++] = m;
    limits[nl++] = 255;
    limits[nl++] = 256;
    limits[nl++] = 1000;
    limits[nl++] = INT64_MAX;

    /* 2-d, 3-d, 5-d; split axes further and further in as the limit shrinks */
    int64_t d2[2] = { 6, 4 }, d3[3] = { 3, 4, 5 }, d5[5] = { 2, 3, 2, 3, 4 };
    ckpt_shape s2 = shape_of(2, d2), s3 = shape_of(3, d3), s5 = shape_of(5, d5);
    ckpt_slice f2 = full_of(&s2), f3 = full_of(&s3), f5 = full_of(&s5);
    sweep("2d-f32", CKPT_FLOAT32, &s2, &f2, limits, nl);
    sweep("3d-i16", CKPT_INT16, &s3, &f3, limits, nl);
    sweep("5d-u8", CKPT_UINT8, &s5, &f5, limits, nl);
    sweep("5d-f64", CKPT_FLOAT64, &s5, &f5, limits, nl);
    /* leading and inner axes of extent 1 */
    int64_t d1[4] = { 1, 5, 1, 3 };
    ckpt_shape s1 = shape_of(4, d1);
    ckpt_slice f1 = full_of(&s1);
    sweep("4d-ones", CKPT_INT32, &s1, &f1, limits, nl);
    /* partitioned slices that do not start at 0 */
    int64_t dp[3] = { 10, 7, 3 }, sp[3] = { 4, 2, 1 }, cp[3] = { 3, 5, 2 };
    ckpt_shape shp = shape_of(3, dp);
    ckpt_slice slp = slice_of(3, sp, cp);
    sweep("part-offset", CKPT_FLOAT64, &shp, &slp, limits, nl);
    /* 0-d scalars: one piece whatever the limit, even one smaller than the element */
    ckpt_shape s0 = shape_of(0, NULL);
    ckpt_slice f0 = full_of(&s0);
    sweep("scalar", CKPT_FLOAT64, &s0, &f0, limits, nl);
    /* empty tensors: one empty piece */
    int64_t de1[2] = { 0, 5 }, de2[3] = { 4, 0, 3 };
    ckpt_shape se1 = shape_of(2, de1), se2 = shape_of(3, de2);
    ckpt_slice fe1 = full_of(&se1), fe2 = full_of(&se2);
    sweep("empty-outer", CKPT_FLOAT32, &se1, &fe1, limits, nl);
    sweep("empty-inner", CKPT_FLOAT32, &se2, &fe2, limits, nl);
    /* a partitioned rank that holds nothing of a non-empty tensor */
    int64_t zs[3] = { 10, 0, 0 }, zc[3] = { 0, 7, 3 };
    ckpt_slice none = slice_of(3, zs, zc);
    sweep("part-none", CKPT_FLOAT64, &shp, &none, limits, nl);

    /* exact counts at a few limits, as the policy says: whole rows when they fit, else pieces
     * of single elements at worst */
    ckpt__regs r = { 0 };
    ckpt__pieces ps = { 0 };
    CHECK_OK(add(&r, 0, "m", CKPT_FLOAT32, &s2, &f2, CKPT_KIND_FULL)); /* 6x4 float32: 96 B */
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 96));
    CHECK_EQ_INT(ps.n, 1);
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 95));
    CHECK_MSG(ps.n > 1, "96 bytes in %zu piece(s) under a 95-byte limit", ps.n);
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 32)); /* two rows of 16 B per piece */
    CHECK_EQ_INT(ps.n, 3);
    for (size_t j = 0; j < ps.n && ps.n == 3; j++) {
        CHECK_EQ_INT(ps.v[j].slice.start[0], 2 * (int64_t)j);
        CHECK_EQ_INT(ps.v[j].slice.count[0], 2);
        CHECK_EQ_INT(ps.v[j].slice.count[1], 4);
    }
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 4)); /* the 1-element limit */
    CHECK_EQ_INT(ps.n, 24);
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 3)); /* a limit smaller than one element */
    CHECK_EQ_INT(ps.n, 24);
    check_tiling(&r, &ps, 0, 3, "m");
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 1));
    CHECK_EQ_INT(ps.n, 24);
    /* a 3-d box whose split axis is the innermost: 3x4x5 int16, 6 bytes = 3 elements per piece,
     * each row of 5 in pieces of 3 and 2 */
    ckpt__regs_clear(&r);
    CHECK_OK(add(&r, 0, "t", CKPT_INT16, &s3, &f3, CKPT_KIND_FULL));
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 6));
    CHECK_EQ_INT(ps.n, 3 * 4 * 2);
    for (size_t j = 0; j < ps.n; j++) {
        CHECK_EQ_INT(ps.v[j].slice.count[0], 1);
        CHECK_EQ_INT(ps.v[j].slice.count[1], 1);
        CHECK_EQ_INT(ps.v[j].slice.count[2], j % 2 == 0 ? 3 : 2);
    }
    check_tiling(&r, &ps, 0, 6, "t");

    /* several registrations and kinds on one rank of 4: blobs never, replicated tensors only on
     * their primary, the others always; pieces in registration order */
    ckpt__regs_clear(&r);
    int64_t db[1] = { 100 };
    const char *rep = "opt/lr";
    CHECK_OK(add(&r, 0, "a", CKPT_FLOAT32, &s2, &f2, CKPT_KIND_FULL));
    CHECK_OK(ckpt__regs_add(&r, 0, "blob", "blob/part-0", CKPT_UINT8, &(ckpt_shape){ 1, { 100 } },
                            &(ckpt_slice){ 1, { 0 }, { 100 } }, CKPT_KIND_BLOB, NULL));
    CHECK_OK(add_full(&r, 0, rep, CKPT_FLOAT32, 0, NULL, CKPT_KIND_REPLICATED));
    CHECK_OK(add_full(&r, 0, "c/parallel_component_0", CKPT_INT64, 1, db, CKPT_KIND_COMPONENT));
    CHECK_OK(add(&r, 0, "p", CKPT_FLOAT64, &shp, &slp, CKPT_KIND_PARTITIONED));
    int stores_rep = 0;
    for (int rank = 0; rank < 4; rank++) {
        for (int k = 0; k < 3; k++) {
            int64_t max = k == 0 ? 0 : k == 1 ? 24 : 7;
            CHECK_OK(ckpt__plan_pieces(&ps, &r, rank, 4, max));
            check_order(&ps);
            size_t per[5] = { 0 };
            for (size_t j = 0; j < ps.n; j++)
                per[ps.v[j].reg < 5 ? ps.v[j].reg : 0]++;
            CHECK_EQ_INT(per[1], 0); /* the blob */
            int *wr = NULL;
            CHECK_OK(ckpt__replica_writers(&r, 4, &wr));
            int primary = wr && wr[2] == rank;
            free(wr);
            CHECK_EQ_INT(per[2] > 0, primary);
            if (k == 0)
                stores_rep += primary;
            for (size_t i = 0; i < 5; i++)
                if (i != 1 && (i != 2 || primary))
                    check_tiling(&r, &ps, i, max, r.v[i].name);
        }
    }
    CHECK_EQ_INT(stores_rep, 1); /* exactly one rank of the four stores the replicated tensor */
    /* the pieces are replaced at each call, not appended */
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 0));
    CHECK_EQ_INT(ps.n, 4);
    ckpt__pieces_free(&ps);
    CHECK(ps.v == NULL && ps.n == 0);
    ckpt__regs_free(&r);
}

/* ---- 4. a piece's bytes ---------------------------------------------------------------------- */

/* The bytes of global element l of a tensor: distinct for every element and every byte. */
static void elem_bytes(uint8_t *out, size_t esize, int64_t l)
{
    uint64_t v = (uint64_t)l * 0x9E3779B97F4A7C15u + 0x0123456789ABCDEFu;
    for (size_t b = 0; b < esize; b++)
        out[b] = (uint8_t)(v >> (8 * (b % 8))) ^ (uint8_t)b;
}

/* A dense buffer holding `sl` of a tensor of shape `sh`, each element elem_bytes(its index). */
typedef struct fill_ctx {
    const ckpt_shape *sh;
    size_t esize;
    uint8_t *p;
} fill_ctx;

static int fill_one(const int64_t *idx, void *arg)
{
    fill_ctx *f = arg;
    elem_bytes(f->p, f->esize, linear(f->sh, idx));
    f->p += f->esize;
    return 0;
}

static uint8_t *make_src(const ckpt_shape *sh, const ckpt_slice *sl, size_t esize)
{
    int64_t n;
    ckpt_slice_num_elements(&n, sl);
    uint8_t *buf = malloc((size_t)(n ? n : 1) * esize);
    fill_ctx f = { sh, esize, buf };
    for_each(sl, fill_one, &f);
    return buf;
}

typedef struct cmp_ctx {
    const ckpt_shape *sh;
    size_t esize;
    const uint8_t *p;
    int64_t bad;
} cmp_ctx;

static int cmp_one(const int64_t *idx, void *arg)
{
    cmp_ctx *c = arg;
    uint8_t want[16];
    elem_bytes(want, c->esize, linear(c->sh, idx));
    c->bad += memcmp(want, c->p, c->esize) != 0;
    c->p += c->esize;
    return 0;
}

/* 1 when p lies in [base, base + len). */
static int points_into(const void *p, const void *base, size_t len)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
    return a >= b && a < b + len;
}

/* Gets piece p's bytes and checks them element by element; returns 1 when they were copied into
 * the scratch buffer, 0 when they point into the source (-1 on error). */
static int check_piece_bytes(const ckpt__reg *g, const void *src, size_t src_len,
                             const ckpt__piece *p, ckpt__scratch *sc, const char *what)
{
    const void *out = NULL;
    size_t len = 0;
    int rc = ckpt__piece_bytes(g, src, p, sc, &out, &len);
    CHECK_OK(rc);
    if (rc != CKPT_OK || !out)
        return -1;
    size_t esize = ckpt_dtype_size(g->dtype);
    int64_t n;
    ckpt_slice_num_elements(&n, &p->slice);
    CHECK_EQ_INT(len, (uint64_t)n * esize);
    cmp_ctx c = { &g->shape, esize, out, 0 };
    for_each(&p->slice, cmp_one, &c);
    CHECK_MSG(c.bad == 0, "%s: %lld elements of a piece differ", what, (long long)c.bad);
    int copied = sc->buf && out == sc->buf;
    int direct = points_into(out, src, src_len);
    CHECK_MSG(n == 0 || copied != direct, "%s: the bytes are neither the source's nor the copy's",
              what);
    if (copied)
        CHECK(sc->size >= len);
    return copied;
}

/* 1 when box is one contiguous run of the row-major buffer holding `in`. */
static int contiguous(const ckpt_slice *in, const ckpt_slice *box)
{
    int d = 0, nd = box->ndims;
    while (d < nd && box->count[d] == 1)
        d++;
    for (int e = d + 1; e < nd; e++)
        if (box->count[e] != in->count[e])
            return 0;
    return 1;
}

static void test_piece_bytes(void)
{
    static const struct {
        const char *what;
        ckpt_dtype dt;
        int nd;
        int64_t dims[5], start[5], count[5];
    } cases[] = {
        { "2d", CKPT_INT32, 2, { 6, 4 }, { 0, 0 }, { 6, 4 } },
        { "3d-inner", CKPT_INT16, 3, { 3, 4, 5 }, { 0, 0, 0 }, { 3, 4, 5 } },
        { "5d", CKPT_FLOAT64, 5, { 2, 3, 2, 3, 4 }, { 0 }, { 2, 3, 2, 3, 4 } },
        { "partitioned", CKPT_FLOAT64, 3, { 10, 7, 3 }, { 4, 2, 1 }, { 3, 5, 2 } },
        { "partitioned-rows", CKPT_UINT8, 2, { 9, 5 }, { 3, 0 }, { 4, 5 } },
    };
    static const int64_t limits[] = { 0, 1, 3, 8, 16, 24, 40, 100 };
    ckpt__scratch sc = { NULL, 0 };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(cases); i++) {
        ckpt_shape sh = shape_of(cases[i].nd, cases[i].dims);
        ckpt_slice sl = slice_of(cases[i].nd, cases[i].start, cases[i].count);
        size_t esize = ckpt_dtype_size(cases[i].dt);
        int64_t n;
        ckpt_slice_num_elements(&n, &sl);
        uint8_t *src = make_src(&sh, &sl, esize);
        ckpt__regs r = { 0 };
        ckpt__pieces ps = { 0 };
        CHECK_OK(ckpt__regs_add(&r, 0, cases[i].what, cases[i].what, cases[i].dt, &sh, &sl,
                                CKPT_KIND_PARTITIONED, src));
        for (size_t k = 0; k < CKPT__ARRAY_LEN(limits); k++) {
            CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, limits[k]));
            for (size_t j = 0; j < ps.n; j++) {
                int copied = check_piece_bytes(&r.v[0], src, (size_t)n * esize, &ps.v[j], &sc,
                                               cases[i].what);
                /* from the source exactly when contiguous there (the whole registration is) */
                CHECK_MSG(copied == !contiguous(&sl, &ps.v[j].slice),
                          "%s max %lld piece %zu: copied %d", cases[i].what,
                          (long long)limits[k], j, copied);
            }
        }
        ckpt__pieces_free(&ps);
        ckpt__regs_free(&r);
        free(src);
    }

    /* hand-made pieces of a 6x4 int32 registration: contiguous ones point into the source at the
     * right offset, the others are copied into the scratch buffer, which only grows */
    int64_t d[2] = { 6, 4 };
    ckpt_shape sh = shape_of(2, d);
    ckpt_slice sl = full_of(&sh);
    uint8_t *src = make_src(&sh, &sl, 4);
    ckpt__reg g = { .name = "m", .stored = "m", .dtype = CKPT_INT32, .shape = sh, .slice = sl,
                    .kind = CKPT_KIND_FULL, .data = src };
    static const struct {
        int64_t start[2], count[2];
        int contiguous;
    } hand[] = {
        { { 2, 0 }, { 2, 4 }, 1 }, /* whole rows */
        { { 1, 1 }, { 1, 3 }, 1 }, /* part of one row */
        { { 5, 3 }, { 1, 1 }, 1 }, /* one element */
        { { 1, 1 }, { 3, 2 }, 0 }, /* a column block */
        { { 0, 3 }, { 6, 1 }, 0 }, /* a column */
        { { 0, 0 }, { 6, 3 }, 0 },
    };
    free(sc.buf);
    sc = (ckpt__scratch){ NULL, 0 };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(hand); i++) {
        ckpt__piece p = { 0, slice_of(2, hand[i].start, hand[i].count) };
        void *buf_before = sc.buf;
        size_t size_before = sc.size;
        const void *out = NULL;
        size_t len = 0;
        int copied = check_piece_bytes(&g, src, 24 * 4, &p, &sc, "hand-made");
        CHECK_MSG(copied == !hand[i].contiguous, "piece %zu: copied %d", i, copied);
        CHECK(sc.size >= size_before);
        if (hand[i].contiguous) {
            CHECK_OK(ckpt__piece_bytes(&g, src, &p, &sc, &out, &len));
            CHECK(out == src + 4 * (hand[i].start[0] * 4 + hand[i].start[1]));
            CHECK(sc.buf == buf_before && sc.size == size_before);
        }
    }
    /* the largest copy (6x3 = 72 bytes) sized the buffer; a smaller one reuses it */
    CHECK_EQ_INT(sc.size, 72);
    void *kept = sc.buf;
    ckpt__piece small = { 0, slice_of(2, (int64_t[]){ 0, 0 }, (int64_t[]){ 2, 2 }) };
    CHECK_EQ_INT(check_piece_bytes(&g, src, 24 * 4, &small, &sc, "small copy"), 1);
    CHECK(sc.buf == kept && sc.size == 72);
    /* an empty piece has no bytes */
    const void *out = NULL;
    size_t len = 99;
    ckpt__piece empty = { 0, slice_of(2, (int64_t[]){ 6, 0 }, (int64_t[]){ 0, 4 }) };
    CHECK_OK(ckpt__piece_bytes(&g, src, &empty, &sc, &out, &len));
    CHECK_EQ_INT(len, 0);
    CHECK(out != NULL);
    free(src);
    free(sc.buf);

    /*
     * Regression (found by this test, fixed in lib/plan.c contiguous_in): a piece contiguous in
     * the source was copied into the scratch buffer when an axis before its first partial axis
     * has extent 1 in the registration ([1,4,8] split into [1,2,8] pieces; a batch dimension of
     * 1): the loop that skips the leading single-index axes stopped at such an axis. plan.h
     * promises those bytes come from the source buffer (no memcpy per piece per save).
     */
    int64_t d148[3] = { 1, 4, 8 };
    sh = shape_of(3, d148);
    sl = full_of(&sh);
    src = make_src(&sh, &sl, 4);
    g.shape = sh;
    g.slice = sl;
    g.data = src;
    sc = (ckpt__scratch){ NULL, 0 };
    ckpt__regs r = { 0 };
    ckpt__pieces ps = { 0 };
    CHECK_OK(ckpt__regs_add(&r, 0, "batch1", "batch1", CKPT_FLOAT32, &sh, &sl, CKPT_KIND_FULL,
                            src));
    CHECK_OK(ckpt__plan_pieces(&ps, &r, 0, 1, 64));
    CHECK_EQ_INT(ps.n, 2);
    for (size_t j = 0; j < ps.n; j++) {
        CHECK(contiguous(&sl, &ps.v[j].slice));
        int copied = check_piece_bytes(&r.v[0], src, 32 * 4, &ps.v[j], &sc, "batch1");
        CHECK_MSG(copied == 0, "lib/plan.c contiguous_in: piece %zu of a [1,4,8] tensor "
                               "(rows %lld..%lld) is contiguous in the source but was copied",
                  j, (long long)ps.v[j].slice.start[1],
                  (long long)(ps.v[j].slice.start[1] + ps.v[j].slice.count[1] - 1));
    }
    ckpt__pieces_free(&ps);
    ckpt__regs_free(&r);
    free(src);
    free(sc.buf);
}

/* ---- 5. the plan's fragments of several simulated ranks, merged ------------------------------ */

typedef struct sim_rank {
    ckpt__regs regs;
    ckpt__pieces pieces;
    Mpickpt__Fragment frag;
} sim_rank;

static void sim_init(sim_rank *s, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&s[i], 0, sizeof s[i]);
        mpickpt__fragment__init(&s[i].frag);
    }
}

static void sim_free(sim_rank *s, int n)
{
    for (int i = 0; i < n; i++) {
        ckpt__fragment_free_built(&s[i].frag);
        ckpt__pieces_free(&s[i].pieces);
        ckpt__regs_free(&s[i].regs);
    }
}

/* Every rank's pieces and fragment, then the merge (header as the saver's plan step sets it) and
 * the replicated check. `merged` is left for the caller to free when the merge succeeded. */
static int sim_plan(Mpickpt__Index *merged, Mpickpt__Header *h, sim_rank *s, int size,
                    int64_t max)
{
    Mpickpt__Fragment *frags[16];
    for (int r = 0; r < size; r++) {
        CHECK_OK(ckpt__plan_pieces(&s[r].pieces, &s[r].regs, r, size, max));
        ckpt__fragment_free_built(&s[r].frag);
        CHECK_OK(ckpt__plan_fragment(&s[r].frag, &s[r].regs, &s[r].pieces, r));
        frags[r] = &s[r].frag;
    }
    mpickpt__header__init(h);
    h->format_version = CKPT_FORMAT_VERSION;
    h->world_size = size;
    h->layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    mpickpt__index__init(merged);
    merged->header = h;
    ckpt_error_clear();
    int rc = ckpt__index_merge(merged, frags, (size_t)size);
    if (rc == CKPT_OK)
        rc = ckpt__plan_check_replicated(merged, frags, (size_t)size, size);
    return rc;
}

/* The fragment of rank r says exactly what it registered and the pieces it stores. */
static void check_fragment(const sim_rank *s, int r)
{
    const Mpickpt__Fragment *f = &s->frag;
    char file[32];
    snprintf(file, sizeof file, "plan-%d", r);
    CHECK_EQ_INT(f->rank, r);
    CHECK(f->n_files == 1 && strcmp(f->files[0]->name, file) == 0);
    size_t want = 0, j = 0;
    for (size_t i = 0; i < s->regs.n; i++)
        want += s->regs.v[i].kind != CKPT_KIND_BLOB;
    CHECK_EQ_INT(f->n_tensors, want);
    size_t t = 0;
    for (size_t i = 0; i < s->regs.n && t < f->n_tensors; i++) {
        const ckpt__reg *g = &s->regs.v[i];
        if (g->kind == CKPT_KIND_BLOB)
            continue;
        const Mpickpt__Tensor *x = f->tensors[t++];
        CHECK(strcmp(x->name, g->stored) == 0);
        CHECK_EQ_INT(x->dtype, g->dtype);
        CHECK_EQ_INT(x->kind, g->kind);
        CHECK_EQ_INT(x->n_shape, g->shape.ndims);
        for (size_t d = 0; d < x->n_shape && d < (size_t)g->shape.ndims; d++)
            CHECK_EQ_INT(x->shape[d], g->shape.dims[d]);
        size_t first = j;
        while (j < s->pieces.n && s->pieces.v[j].reg == i)
            j++;
        CHECK_EQ_INT(x->n_pieces, j - first);
        for (size_t k = 0; k < x->n_pieces && first + k < j; k++) {
            const Mpickpt__Piece *p = x->pieces[k];
            const ckpt_slice *sl = &s->pieces.v[first + k].slice;
            CHECK_EQ_INT(p->n_start, sl->ndims);
            CHECK_EQ_INT(p->n_count, sl->ndims);
            for (int d = 0; d < sl->ndims && (size_t)d < p->n_start; d++) {
                CHECK_EQ_INT(p->start[d], sl->start[d]);
                CHECK_EQ_INT(p->count[d], sl->count[d]);
            }
            CHECK_EQ_INT(p->rank, r);
            CHECK(strcmp(p->file, file) == 0);
            CHECK_EQ_INT(p->bytes, ckpt__piece_len(&s->regs, &s->pieces.v[first + k]));
        }
    }
    CHECK_EQ_INT(j, s->pieces.n);
}

static const Mpickpt__Tensor *find_tensor(const Mpickpt__Index *idx, const char *name)
{
    for (size_t i = 0; i < idx->n_tensors; i++)
        if (strcmp(idx->tensors[i]->name, name) == 0)
            return idx->tensors[i];
    return NULL;
}

/* Partitioned "w" (6x4 float32) split by rows between the ranks as rows[r]..rows[r+1]. */
static void reg_rows(sim_rank *s, int r, const int64_t *rows, ckpt_dtype dt, int64_t cols)
{
    int64_t d[2] = { 6, cols }, st[2] = { rows[r], 0 }, ct[2] = { rows[r + 1] - rows[r], cols };
    ckpt_shape sh = shape_of(2, d);
    ckpt_slice sl = slice_of(2, st, ct);
    CHECK_OK(add(&s[r].regs, r, "w", dt, &sh, &sl, CKPT_KIND_PARTITIONED));
}

static void expect_mismatch(sim_rank *s, int size, const char *tensor, const char *extra,
                            const char *what)
{
    Mpickpt__Index m;
    Mpickpt__Header h;
    char quoted[128];
    snprintf(quoted, sizeof quoted, "'%s'", tensor);
    int rc = sim_plan(&m, &h, s, size, 16);
    CHECK_MSG(rc == CKPT_EMISMATCH, "%s: merge returned %d: %s", what, rc, last_msg());
    CHECK_MSG(strstr(last_msg(), quoted) && (!extra || strstr(last_msg(), extra)),
              "%s: message: %s", what, last_msg());
    ckpt__index_merged_free(&m);
}

static void test_plan_merge(void)
{
    enum { SIZE = 3 };
    sim_rank s[SIZE];
    static const int64_t rows[SIZE + 1] = { 0, 2, 4, 6 };
    const char *rep = "opt/lr";
    int64_t d5 = 5, d8 = 8;

    /* a valid plan: partitioned rows, a full tensor on rank 0, a replicated scalar everywhere,
     * a component and a blob per rank, at several limits */
    static const int64_t limits[] = { 0, 16, 7 };
    for (size_t k = 0; k < CKPT__ARRAY_LEN(limits); k++) {
        sim_init(s, SIZE);
        for (int r = 0; r < SIZE; r++) {
            char comp[64];
            snprintf(comp, sizeof comp, "c/parallel_component_%d", r);
            reg_rows(s, r, rows, CKPT_FLOAT32, 4);
            if (r == 0)
                CHECK_OK(add_full(&s[r].regs, r, "b", CKPT_INT64, 1, &d5, CKPT_KIND_FULL));
            CHECK_OK(add_full(&s[r].regs, r, rep, CKPT_FLOAT32, 0, NULL, CKPT_KIND_REPLICATED));
            CHECK_OK(add_full(&s[r].regs, r, comp, CKPT_INT32, 1, &d8, CKPT_KIND_COMPONENT));
            CHECK_OK(ckpt__regs_add(&s[r].regs, r, "rng", "rng/part", CKPT_UINT8,
                                    &(ckpt_shape){ 1, { 3 } }, &(ckpt_slice){ 1, { 0 }, { 3 } },
                                    CKPT_KIND_BLOB, NULL));
        }
        Mpickpt__Index m;
        Mpickpt__Header h;
        CHECK_OK(sim_plan(&m, &h, s, SIZE, limits[k]));
        for (int r = 0; r < SIZE; r++)
            check_fragment(&s[r], r);
        /* w, b, the replicated scalar, three components; no blob */
        CHECK_EQ_INT(m.n_tensors, 6);
        for (size_t i = 1; i < m.n_tensors; i++)
            CHECK(strcmp(m.tensors[i - 1]->name, m.tensors[i]->name) < 0);
        CHECK(find_tensor(&m, "rng/part") == NULL);
        const Mpickpt__Tensor *w = find_tensor(&m, "w"), *lr = find_tensor(&m, rep);
        CHECK(w && lr);
        if (w) {
            size_t want = 0;
            for (int r = 0; r < SIZE; r++)
                for (size_t j = 0; j < s[r].pieces.n; j++)
                    want += s[r].pieces.v[j].reg == 0;
            CHECK_EQ_INT(w->n_pieces, want);
            if (limits[k] == 0)
                CHECK_EQ_INT(w->n_pieces, SIZE);
        }
        if (lr) /* stored once, by its writer (the only replicated tensor: rank 0) */
            CHECK(lr->n_pieces == 1 && lr->pieces[0]->rank == 0);
        CHECK_EQ_INT(m.n_files, SIZE);
        ckpt__index_merged_free(&m);
        sim_free(s, SIZE);
    }

    /* overlapping partitioned slices from two ranks */
    sim_init(s, SIZE); /* rows 0..2, 2..3, 4..5 */
    reg_rows(s, 0, (const int64_t[]){ 0, 3 }, CKPT_FLOAT32, 4);
    reg_rows(s, 1, rows, CKPT_FLOAT32, 4);
    reg_rows(s, 2, rows, CKPT_FLOAT32, 4);
    expect_mismatch(s, SIZE, "w", NULL, "overlap");
    sim_free(s, SIZE);

    /* a gap: row 2 belongs to no rank (rows 0..1, 3, 4..5) */
    sim_init(s, SIZE);
    reg_rows(s, 0, rows, CKPT_FLOAT32, 4);
    reg_rows(s, 1, (const int64_t[]){ 0, 3, 4, 6 }, CKPT_FLOAT32, 4);
    reg_rows(s, 2, rows, CKPT_FLOAT32, 4);
    expect_mismatch(s, SIZE, "w", NULL, "gap");
    sim_free(s, SIZE);

    /* dtype, shape and kind disagreement: the message names the tensor and both ranks */
    sim_init(s, SIZE);
    for (int r = 0; r < SIZE; r++)
        reg_rows(s, r, rows, r == 2 ? CKPT_FLOAT64 : CKPT_FLOAT32, 4);
    expect_mismatch(s, SIZE, "w", "rank 2", "dtype");
    sim_free(s, SIZE);
    sim_init(s, SIZE);
    for (int r = 0; r < SIZE; r++)
        reg_rows(s, r, rows, CKPT_FLOAT32, r == 1 ? 5 : 4);
    expect_mismatch(s, SIZE, "w", "rank 1", "shape");
    sim_free(s, SIZE);
    sim_init(s, SIZE);
    for (int r = 0; r < SIZE; r++)
        if (r == 0)
            CHECK_OK(add_full(&s[r].regs, r, "k", CKPT_INT64, 1, &d5, CKPT_KIND_FULL));
        else
            CHECK_OK(add_full(&s[r].regs, r, "k", CKPT_INT64, 1, &d5, CKPT_KIND_REPLICATED));
    expect_mismatch(s, SIZE, "k", NULL, "kind");
    sim_free(s, SIZE);
    /* a full tensor registered by two ranks: both store it */
    sim_init(s, SIZE);
    CHECK_OK(add_full(&s[0].regs, 0, "f", CKPT_INT64, 1, &d5, CKPT_KIND_FULL));
    CHECK_OK(add_full(&s[2].regs, 2, "f", CKPT_INT64, 1, &d5, CKPT_KIND_FULL));
    expect_mismatch(s, SIZE, "f", NULL, "full twice");
    sim_free(s, SIZE);
    /* the same partitioned slice registered twice on one rank */
    sim_init(s, SIZE);
    for (int r = 0; r < SIZE; r++)
        reg_rows(s, r, rows, CKPT_FLOAT32, 4);
    reg_rows(s, 1, rows, CKPT_FLOAT32, 4);
    expect_mismatch(s, SIZE, "w", NULL, "slice twice");
    sim_free(s, SIZE);

    /* a replicated tensor registered on 2 of 3 ranks, its primary among them: the merge passes,
     * the replicated check names it */
    sim_init(s, SIZE);
    for (int r = 0; r < 2; r++)
        CHECK_OK(add_full(&s[r].regs, r, rep, CKPT_FLOAT32, 0, NULL, CKPT_KIND_REPLICATED));
    CHECK_OK(add_full(&s[2].regs, 2, "other", CKPT_FLOAT32, 0, NULL, CKPT_KIND_FULL));
    {
        Mpickpt__Index m;
        Mpickpt__Header h;
        int rc = sim_plan(&m, &h, s, SIZE, 0);
        CHECK_RC(rc, CKPT_EMISMATCH);
        CHECK_MSG(strstr(last_msg(), rep) && strstr(last_msg(), "2 of 3"), "message: %s",
                  last_msg());
        /* ... and it is the replicated check that found it: the merge alone passes */
        Mpickpt__Fragment *frags[SIZE] = { &s[0].frag, &s[1].frag, &s[2].frag };
        ckpt__index_merged_free(&m);
        mpickpt__index__init(&m);
        m.header = &h;
        CHECK_OK(ckpt__index_merge(&m, frags, SIZE));
        CHECK_RC(ckpt__plan_check_replicated(&m, frags, SIZE, SIZE), CKPT_EMISMATCH);
        CHECK_OK(ckpt__plan_check_replicated(&m, frags, SIZE, 2));
        ckpt__index_merged_free(&m);
    }
    sim_free(s, SIZE);
    /* ... registered on ranks 0 and 1 only, not on the last: an error naming it all the same */
    const char *rep2 = "opt/beta";
    sim_init(s, SIZE);
    for (int r = 0; r < 2; r++)
        CHECK_OK(add_full(&s[r].regs, r, rep2, CKPT_FLOAT32, 0, NULL, CKPT_KIND_REPLICATED));
    expect_mismatch(s, SIZE, rep2, NULL, "replicated without its primary");
    sim_free(s, SIZE);
}

/* A name registered as a full tensor, then as a partitioned one on the same rank: the two
 * registrations cannot both stand. ckpt__regs_add accepts the second (it skips the duplicate check
 * for partitioned registrations); the plan's merge refuses it at the first save. */
static void test_kind_conflict(void)
{
    enum { SIZE = 2 };
    sim_rank s[SIZE];
    int64_t d[2] = { 4, 3 };
    ckpt_shape sh = shape_of(2, d);
    ckpt_slice full = full_of(&sh);
    sim_init(s, SIZE);
    CHECK_OK(add(&s[0].regs, 0, "x", CKPT_FLOAT32, &sh, &full, CKPT_KIND_FULL));
    int rc = add(&s[0].regs, 0, "x", CKPT_FLOAT32, &sh, &full, CKPT_KIND_PARTITIONED);
    CHECK_MSG(rc == CKPT_EINVAL || rc == CKPT_OK, "second registration: %d", rc);
    if (rc == CKPT_OK) /* then the plan must refuse it */
        expect_mismatch(s, SIZE, "x", NULL, "full then partitioned");
    sim_free(s, SIZE);
}

int main(void)
{
    phases_init("test_plan");
    test_regs_add();
    test_replica_writers();
    test_sharding();
    test_piece_bytes();
    test_plan_merge();
    test_kind_conflict();
    return CHECK_DONE();
}
