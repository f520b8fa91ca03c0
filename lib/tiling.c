/*
 * Exact tiling: do the stored pieces of one tensor cover each of its elements exactly once?
 *
 * Takes the pieces' boxes as lib/validate.c laid them out (tiling.h), each already checked to lie
 * inside the tensor's shape, with their element count. Guarantees: an exact tiling always passes
 * (on every rank, whatever the random seed); a duplicate, an overlap or a gap is always found,
 * except with probability below 2^-56 per tensor for a wrong cover in two or more active
 * dimensions; the error names the duplicate or an overlapping pair (or the gap), within a capped
 * search (ckpt__index_set_search_budget). O(d n log n) time, O(n) memory besides the caller's
 * scratch. Called by ckpt__index_validate() (lib/validate.c) only; the method is described below.
 */
#include "tiling.h"

#include "internal.h"
#include "validate.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* By start, then count (dimension by dimension), then rank. */
static int cmp_vrow(const struct vrow *x, const struct vrow *y, int nd)
{
    for (int i = 0; i < 2 * nd; i++) {
        if (x->x[i] != y->x[i])
            return x->x[i] < y->x[i] ? -1 : 1;
    }
    return (x->p->rank > y->p->rank) - (x->p->rank < y->p->rank);
}

/*
 * Sorts ord[0..n) by cmp_vrow with a natural merge sort of pointers. Pieces arrive in runs (a
 * merge lists them rank by rank, each rank's in order; a tensor split by rows over the ranks is
 * sorted already), so this merges the runs it finds, log2(runs) passes, instead of sorting from
 * scratch (qsort took half the validation time at 10^6 pieces); O(n log n) at worst, and it moves
 * pointers, not rows.
 */
static int sort_rows(const struct vrow **ord, size_t n, int nd)
{
    if (n < 2)
        return CKPT_OK;
    const struct vrow **tmp = malloc(n * sizeof *tmp);
    size_t *run = malloc((n + 1) * sizeof *run), nr = 0; /* run k is [run[k], run[k + 1]) */
    if (!tmp || !run) {
        free((void *)tmp);
        free(run);
        return ckpt__error(CKPT_ENOMEM, "out of memory sorting %zu pieces", n);
    }
    run[nr++] = 0;
    for (size_t i = 1; i < n; i++)
        if (cmp_vrow(ord[i - 1], ord[i], nd) > 0)
            run[nr++] = i;
    run[nr] = n;
    const struct vrow **src = ord, **dst = tmp;
    while (nr > 1) {
        size_t m = 0;
        for (size_t k = 0; k < nr; k += 2) { /* runs k and k + 1 (or k alone, the last) */
            size_t lo = run[k], mid = run[k + 1], hi = k + 2 <= nr ? run[k + 2] : mid;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                dst[o++] = cmp_vrow(src[j], src[i], nd) < 0 ? src[j++] : src[i++];
            while (i < mid)
                dst[o++] = src[i++];
            while (j < hi)
                dst[o++] = src[j++];
            run[m++] = lo; /* run[] up to k + 2 is read: writing m <= k / 2 is safe */
        }
        run[m] = n;
        nr = m;
        const struct vrow **sw = src;
        src = dst;
        dst = sw;
    }
    if (src != ord)
        memcpy((void *)ord, (const void *)src, n * sizeof *ord);
    free((void *)tmp);
    free(run);
    return CKPT_OK;
}

static void vrow_slice(ckpt_slice *s, const struct vrow *r, int nd)
{
    memset(s, 0, sizeof *s);
    s->ndims = nd;
    for (int d = 0; d < nd; d++) {
        s->start[d] = r->x[d];
        s->count[d] = r->x[nd + d];
    }
}

static void fmt_vrow(char *buf, size_t n, const ckpt_shape *sh, const struct vrow *r)
{
    ckpt_slice s;
    vrow_slice(&s, r, sh->ndims);
    fmt_slice(buf, n, sh, &s);
}

/*
 * ---- exact tiling in O(d n log n) -------------------------------------------------------------
 *
 * After the per-piece checks and the duplicate check, the pieces of a tensor must tile it: every
 * element covered exactly once. Comparing pairs is quadratic when many pieces share a range along
 * the dimension a sweep would use (a split along an inner axis, a grid), so the decision never
 * compares pieces:
 *
 * - Only "active" dimensions matter, those in which some piece does not span the whole extent.
 *   None: the single piece is the tensor. One: the pieces are intervals of that dimension, sorted
 *   already; a linear sweep decides exactly and names the culprit.
 * - Two or more: the element counts must add up to the tensor's (exact), and a fingerprint must
 *   match. The distinct piece boundaries of each active dimension i (with 0 and the extent) cut it
 *   into compressed intervals; interval j gets a pseudo-random weight r[i][j] mod p = 2^61 - 1.
 *   A box's fingerprint is the product over dimensions of the sum of the weights of the intervals
 *   it spans (a difference of prefix sums). How many pieces cover an element is constant on each
 *   compressed cell, so sum over pieces of fingerprint - fingerprint of the whole tensor
 *   = sum over cells of (multiplicity - 1) * product of the cell's weights. For an exact tiling
 *   this is 0 whatever the weights: a valid tensor always passes, on every rank, with any seed.
 *   Otherwise it is a nonzero polynomial of degree <= d in the weights, which vanishes with
 *   probability <= d/p < 2^-56 (Schwartz-Zippel). The weights come from a per-process random seed
 *   (getrandom), so a crafted index cannot be built to collide.
 * - Only a wrong cover pays for a culprit, found by bisection rather than by a sweep (which needs
 *   a quadratic number of comparisons for the same inputs that made the old check slow): a box R
 *   of compressed cells starts as the whole tensor; R is halved along its longest dimension and
 *   the search goes on in a half that must hold a bad cell. With the pieces clipped to a box,
 *   "covered > volume" proves a cell covered twice in it (exact integers), and covered counts and
 *   fingerprints both add over the two halves: when R has an excess, one half has; when R's
 *   counts balance but its fingerprint does not, either a half has an excess or a half's
 *   fingerprint is off. A single cell with an excess is covered by >= 2 pieces: they are the
 *   overlapping pair reported (a truthful message whatever the weights). Each step visits only
 *   the pieces that meet R, at most d log2(2n + 2) steps; the visits are capped (hostile input
 *   cannot make the error path slow), and a capped search reports that the pieces overlap or
 *   leave a gap. When the counts are short there is a gap, reported as such.
 */

#define FP_P ((UINT64_C(1) << 61) - 1)
/* Piece-dimension visits the culprit search may make: a few tenths of a second. */
#define SEARCH_BUDGET_DEFAULT ((uint64_t)64 << 20)

static uint64_t search_budget = SEARCH_BUDGET_DEFAULT;

void ckpt__index_set_search_budget(uint64_t visits)
{
    search_budget = visits ? visits : SEARCH_BUDGET_DEFAULT;
}

static uint64_t fp_mul(uint64_t a, uint64_t b)
{
    __extension__ typedef unsigned __int128 u128;
    u128 x = (u128)a * b; /* < 2^122 */
    uint64_t r = ((uint64_t)x & FP_P) + (uint64_t)(x >> 61);
    r = (r & FP_P) + (r >> 61);
    return r >= FP_P ? r - FP_P : r;
}

static uint64_t fp_add(uint64_t a, uint64_t b)
{
    uint64_t s = a + b;
    return s >= FP_P ? s - FP_P : s;
}

static uint64_t fp_sub(uint64_t a, uint64_t b)
{
    return a >= b ? a - b : a + FP_P - b;
}

static uint64_t mix64(uint64_t x) /* splitmix64's finalizer: a bijection */
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebu;
    return x ^ x >> 31;
}

static uint64_t fp_seed;
static pthread_once_t fp_seed_once = PTHREAD_ONCE_INIT;

static void fp_seed_init(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s)
        s = mix64((uint64_t)time(NULL) ^ (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&s);
    fp_seed = s;
}

/* Weight of compressed interval j of tensor dimension d. */
static uint64_t fp_weight(int d, size_t j)
{
    return mix64(fp_seed ^ mix64((uint64_t)d << 56 ^ (uint64_t)j)) % FP_P;
}

/* One active dimension: its compressed coordinates and the prefix sums of their weights. */
struct tdim {
    int d;
    size_t nx;     /* distinct boundaries: nx - 1 intervals */
    int64_t *xs;   /* sorted distinct boundaries, 0 and the extent included */
    uint64_t *pre; /* pre[j] = weights of the intervals [xs[i], xs[i+1]) for i < j, mod p */
};

/* What validate_tensor knows when it checks the tiling. */
struct tiling {
    const char *what, *name;
    int bad;
    const ckpt_shape *shape;
    const char *rows;               /* n rows of `stride` bytes, each box inside the shape */
    const struct vrow *const *ord; /* the rows sorted by sort_rows, no two boxes equal */
    size_t n, stride;
    int64_t total, covered;
    int nact;
    struct tdim dim[CKPT_MAX_DIMS];
};

static const struct vrow *row(const struct tiling *t, size_t i)
{
    return (const struct vrow *)(const void *)(t->rows + i * t->stride);
}

static int64_t r_start(const struct tiling *t, const struct vrow *r, int d)
{
    (void)t;
    return r->x[d];
}

static int64_t r_count(const struct tiling *t, const struct vrow *r, int d)
{
    return r->x[t->shape->ndims + d];
}

static int64_t r_end(const struct tiling *t, const struct vrow *r, int d)
{
    return r_start(t, r, d) + r_count(t, r, d); /* no overflow: checked against the shape */
}

static int tiling_gap(const struct tiling *t)
{
    return ckpt__error(t->bad, "%s: tensor '%s': stored pieces cover %lld of %lld elements (gap)",
                       t->what, t->name, (long long)t->covered, (long long)t->total);
}

static int tiling_overlap(const struct tiling *t, const struct vrow *a, const struct vrow *b)
{
    char sa[256], sb[256];
    fmt_vrow(sa, sizeof sa, t->shape, a);
    fmt_vrow(sb, sizeof sb, t->shape, b);
    return ckpt__error(t->bad, "%s: tensor '%s': slice %s (rank %d) overlaps slice %s (rank %d)",
                       t->what, t->name, sa, a->p->rank, sb, b->p->rank);
}

static int tiling_unlocated(const struct tiling *t)
{
    return ckpt__error(t->bad, "%s: tensor '%s': its %zu pieces overlap or leave a gap", t->what,
                       t->name, t->n);
}

/* One active dimension d: the pieces, sorted by their start in d (the other dimensions are
 * whole), must follow one another from 0 to the extent. Exact. */
static int tiling_1d(const struct tiling *t, int d)
{
    int64_t reach = 0;
    const struct vrow *far = NULL; /* the piece that reaches furthest so far */
    for (size_t k = 0; k < t->n; k++) {
        const struct vrow *r = t->ord[k];
        if (r_count(t, r, d) == 0)
            continue;
        if (r_start(t, r, d) < reach)
            return tiling_overlap(t, far, r);
        if (r_end(t, r, d) > reach) {
            reach = r_end(t, r, d);
            far = r;
        }
    }
    /* disjoint: the counts add up exactly when nothing is missing */
    return t->covered == t->total ? CKPT_OK : tiling_gap(t);
}

static void tiling_free(struct tiling *t)
{
    for (int k = 0; k < t->nact; k++) {
        free(t->dim[k].xs);
        free(t->dim[k].pre);
    }
}

/* Sorts a[0..n) holding values in [0, max] (LSD radix sort, 11 bits a pass, as many passes as max
 * has bits) with tmp[0..n) as scratch; returns a or tmp, whichever holds the result. */
static int64_t *radix_sort(int64_t *a, int64_t *tmp, size_t n, int64_t max)
{
    for (int shift = 0; shift < 63 && (uint64_t)max >> shift; shift += 11) {
        size_t cnt[2048] = { 0 }, sum = 0;
        for (size_t i = 0; i < n; i++)
            cnt[(uint64_t)a[i] >> shift & 2047]++;
        for (size_t b = 0; b < 2048; b++) {
            size_t c = cnt[b];
            cnt[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[cnt[(uint64_t)a[i] >> shift & 2047]++] = a[i];
        int64_t *sw = a;
        a = tmp;
        tmp = sw;
    }
    return a;
}

/* Fills t->dim[k] for tensor dimension d. */
static int tdim_build(struct tiling *t, int k, int d)
{
    struct tdim *x = &t->dim[k];
    size_t m = 0, cap = 2 * t->n + 2; /* n rows of >= 8 bytes fit in memory: no overflow */
    int64_t *all = malloc(2 * cap * sizeof *all);
    x->d = d;
    if (!all)
        return ckpt__error(CKPT_ENOMEM, "%s: out of memory validating tensor '%s'", t->what,
                           t->name);
    all[m++] = 0;
    all[m++] = t->shape->dims[d];
    for (size_t i = 0; i < t->n; i++) {
        all[m++] = r_start(t, row(t, i), d);
        all[m++] = r_end(t, row(t, i), d);
    }
    int64_t *v = radix_sort(all, all + cap, m, t->shape->dims[d]);
    size_t u = 1;
    for (size_t i = 1; i < m; i++)
        if (v[i] != v[u - 1])
            v[u++] = v[i];
    x->nx = u;
    x->xs = malloc(u * sizeof *x->xs);
    x->pre = malloc(u * sizeof *x->pre);
    if (x->xs)
        memcpy(x->xs, v, u * sizeof *x->xs);
    free(all);
    if (!x->xs || !x->pre)
        return ckpt__error(CKPT_ENOMEM, "%s: out of memory validating tensor '%s'", t->what,
                           t->name);
    x->pre[0] = 0;
    for (size_t j = 1; j < u; j++)
        x->pre[j] = fp_add(x->pre[j - 1], fp_weight(d, j - 1));
    return CKPT_OK;
}

/* Index of boundary `v` (present) in x->xs. Branch-free: the fingerprint looks up two
 * boundaries per piece and dimension, in no predictable order. */
static size_t tdim_find(const struct tdim *x, int64_t v)
{
    size_t lo = 0, len = x->nx;
    while (len > 1) {
        size_t half = len / 2;
        lo += x->xs[lo + half] <= v ? half : 0;
        len -= half;
    }
    return lo;
}

/* 1 when the pieces' fingerprints add up to the whole tensor's. */
static int tiling_fingerprint_ok(const struct tiling *t)
{
    uint64_t sum = 0, whole = 1;
    for (int k = 0; k < t->nact; k++)
        whole = fp_mul(whole, t->dim[k].pre[t->dim[k].nx - 1]);
    for (size_t i = 0; i < t->n; i++) {
        const struct vrow *r = row(t, i);
        uint64_t f = 1;
        for (int k = 0; k < t->nact && f; k++) {
            const struct tdim *x = &t->dim[k];
            size_t s = tdim_find(x, r_start(t, r, x->d)), e = tdim_find(x, r_end(t, r, x->d));
            f = fp_mul(f, fp_sub(x->pre[e], x->pre[s]));
        }
        sum = fp_add(sum, f);
    }
    return sum == whole;
}

/* Clips a piece spanning compressed boundaries se[0]..se[1] of active dimension x to [lo, hi):
 * the length of the clipped part (0 when they do not meet) and, in *w, its weight. */
static int64_t clip(const struct tdim *x, const uint32_t *se, size_t lo, size_t hi, uint64_t *w)
{
    size_t l = se[0] > lo ? se[0] : lo, h = se[1] < hi ? se[1] : hi;
    if (h <= l)
        return 0;
    *w = fp_sub(x->pre[h], x->pre[l]);
    return x->xs[h] - x->xs[l];
}

/* The cover is wrong (counts or fingerprint): finds an overlapping pair by bisection (see above).
 * Counts are over the active dimensions only (the pieces are whole in the others). */
static int tiling_locate(const struct tiling *t)
{
    int nact = t->nact;
    if (t->n > (UINT32_MAX - 2) / 2) /* boundaries are numbered in 32 bits (2^31 pieces: never) */
        return tiling_unlocated(t);
    size_t *live = malloc(t->n * sizeof *live), nl = 0; /* row numbers, in sorted order */
    uint32_t *ci = malloc(t->n * 2 * (size_t)nact * sizeof *ci); /* per row, per active dim */
    int rc = CKPT_OK;
    if (!live || !ci) {
        rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory validating tensor '%s'", t->what,
                         t->name);
        goto done;
    }
    for (size_t i = 0; i < t->n; i++) {
        const struct vrow *r = row(t, i);
        for (int k = 0; k < nact; k++) {
            const struct tdim *x = &t->dim[k];
            ci[(i * (size_t)nact + (size_t)k) * 2] = (uint32_t)tdim_find(x, r_start(t, r, x->d));
            ci[(i * (size_t)nact + (size_t)k) * 2 + 1] = (uint32_t)tdim_find(x, r_end(t, r, x->d));
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        size_t j = (size_t)((const char *)t->ord[i] - t->rows) / t->stride;
        int empty = 0;
        for (int k = 0; k < nact; k++)
            empty |= r_count(t, t->ord[i], t->dim[k].d) == 0;
        if (!empty)
            live[nl++] = j;
    }
    size_t lo[CKPT_MAX_DIMS], hi[CKPT_MAX_DIMS];
    for (int k = 0; k < nact; k++) {
        lo[k] = 0;
        hi[k] = t->dim[k].nx - 1;
    }
    int excess = t->covered > t->total; /* else: the fingerprint is off, the counts balance */
    uint64_t visits = 0;
    for (;;) {
        int ks = -1;
        for (int k = 0; k < nact; k++)
            if (hi[k] - lo[k] > 1 && (ks < 0 || hi[k] - lo[k] > hi[ks] - lo[ks]))
                ks = k;
        if (ks < 0)
            break; /* one cell */
        visits += (uint64_t)nl * (uint64_t)nact;
        if (visits > search_budget) {
            rc = tiling_unlocated(t);
            goto done;
        }
        const struct tdim *xk = &t->dim[ks];
        size_t mid = lo[ks] + (hi[ks] - lo[ks]) / 2;
        int64_t cnt[2] = { 0, 0 }, vol[2] = { 1, 1 };
        uint64_t fpc[2] = { 0, 0 }, rfp[2] = { 1, 1 };
        size_t nin[2] = { 0, 0 };
        for (size_t i = 0; i < nl; i++) {
            const uint32_t *se = ci + live[i] * 2 * (size_t)nact;
            int64_t other = 1;
            uint64_t fo = 1, w = 0;
            for (int k = 0; k < nact; k++)
                if (k != ks) {
                    other *= clip(&t->dim[k], se + 2 * k, lo[k], hi[k], &w);
                    fo = fp_mul(fo, w);
                }
            for (int h = 0; h < 2; h++) {
                int64_t e = clip(xk, se + 2 * ks, h ? mid : lo[ks], h ? hi[ks] : mid, &w);
                if (e > 0) {
                    cnt[h] += other * e; /* at most the piece's count: the sum is <= covered */
                    nin[h]++;
                    fpc[h] = fp_add(fpc[h], fp_mul(fo, w));
                }
            }
        }
        for (int k = 0; k < nact; k++) {
            const struct tdim *x = &t->dim[k];
            for (int h = 0; h < 2; h++) {
                size_t a = k == ks && h ? mid : lo[k], b = k == ks && !h ? mid : hi[k];
                vol[h] *= x->xs[b] - x->xs[a];
                rfp[h] = fp_mul(rfp[h], fp_sub(x->pre[b], x->pre[a]));
            }
        }
        int pick;
        if (cnt[0] > vol[0] && cnt[1] > vol[1])
            pick = nin[1] < nin[0]; /* either holds a double cover: take the fewer pieces */
        else if (cnt[0] > vol[0] || cnt[1] > vol[1])
            pick = cnt[1] > vol[1];
        else if (excess)
            pick = -1; /* cannot happen: the counts add over the halves */
        else
            pick = fpc[0] == rfp[0]; /* the fingerprints add too: one half is off */
        if (pick < 0) {
            rc = tiling_unlocated(t);
            goto done;
        }
        excess = cnt[pick] > vol[pick];
        if (pick)
            lo[ks] = mid;
        else
            hi[ks] = mid;
        size_t keep = 0;
        for (size_t i = 0; i < nl; i++) {
            uint64_t w;
            if (clip(xk, ci + (live[i] * (size_t)nact + (size_t)ks) * 2, lo[ks], hi[ks], &w) > 0)
                live[keep++] = live[i];
        }
        nl = keep;
    }
    /* One cell, covered by every live piece: with an excess, that is two or more of them. */
    rc = excess && nl >= 2 ? tiling_overlap(t, row(t, live[0]), row(t, live[1]))
                           : tiling_unlocated(t);
done:
    free(live);
    free(ci);
    return rc;
}

/* The pieces (t->rows and t->ord filled, `covered` elements in all) tile the tensor exactly, else
 * `bad` naming an overlapping pair or the gap. */
static int check_tiling(struct tiling *t)
{
    if (t->total == 0)
        return CKPT_OK; /* every piece is empty */
    if (t->n == 1)      /* inside the shape and as large: the whole tensor */
        return t->covered == t->total ? CKPT_OK : tiling_gap(t);
    int act[CKPT_MAX_DIMS], nact = 0;
    for (int d = 0; d < t->shape->ndims; d++)
        for (size_t i = 0; i < t->n; i++)
            if (r_start(t, row(t, i), d) != 0 || r_count(t, row(t, i), d) != t->shape->dims[d]) {
                act[nact++] = d;
                break;
            }
    t->nact = 0;
    if (nact == 0) /* n > 1 whole pieces would be duplicates */
        return t->covered == t->total ? CKPT_OK : tiling_gap(t);
    if (nact == 1)
        return tiling_1d(t, act[0]);
    if (t->covered < t->total)
        return tiling_gap(t);
    int rc = CKPT_OK;
    for (int k = 0; k < nact && rc == CKPT_OK; k++) {
        t->dim[k].xs = NULL;
        t->dim[k].pre = NULL;
        t->nact++; /* its arrays, allocated or not, are freed by tiling_free */
        rc = tdim_build(t, k, act[k]);
    }
    if (rc == CKPT_OK && (t->covered > t->total || !tiling_fingerprint_ok(t)))
        rc = tiling_locate(t);
    tiling_free(t);
    return rc;
}


void ckpt__tiling_seed(void)
{
    pthread_once(&fp_seed_once, fp_seed_init);
}

int ckpt__tiling_check(char *scratch, size_t n, const ckpt_shape *shape, int64_t total,
                       int64_t covered, int bad, const char *what, const char *name)
{
    if (n == 1 && (total == 0 || covered == total))
        return CKPT_OK; /* one piece inside the shape, as large: the whole tensor (most tensors) */
    /* Sorted by start, equal boxes are neighbours. */
    int nd = shape->ndims;
    size_t stride = vrow_size(nd);
    const struct vrow **ord = (const struct vrow **)(void *)(scratch + n * stride);
    for (size_t j = 0; j < n; j++)
        ord[j] = (const struct vrow *)(const void *)(scratch + j * stride);
    int rc = sort_rows(ord, n, nd);
    if (rc != CKPT_OK)
        return rc;
    for (size_t a = 1; a < n; a++) {
        const struct vrow *x = ord[a - 1], *y = ord[a];
        if (memcmp(x->x, y->x, 2 * (size_t)nd * sizeof *x->x) == 0) {
            char sa[256];
            fmt_vrow(sa, sizeof sa, shape, y);
            return ckpt__error(bad, "%s: tensor '%s': duplicate slice %s saved by rank %d and "
                                    "rank %d",
                               what, name, sa, x->p->rank, y->p->rank);
        }
    }
    struct tiling tl = { .what = what, .name = name, .bad = bad, .shape = shape, .rows = scratch,
                         .ord = ord, .n = n, .stride = stride, .total = total,
                         .covered = covered };
    return check_tiling(&tl);
}
