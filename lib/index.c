#include "index.h"

#include "crc32c_internal.h"

#include "fsutil.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/crc32c.h"
#include "mpickpt/dtype.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

const char *ckpt_kind_name(ckpt_kind kind)
{
    switch (kind) {
    case CKPT_KIND_FULL: return "full";
    case CKPT_KIND_PARTITIONED: return "partitioned";
    case CKPT_KIND_REPLICATED: return "replicated";
    case CKPT_KIND_COMPONENT: return "component";
    case CKPT_KIND_BLOB: return "blob";
    default: return "unknown";
    }
}

const char *ckpt_layout_name(ckpt_layout layout)
{
    switch (layout) {
    case CKPT_LAYOUT_SHARED: return "shared";
    case CKPT_LAYOUT_PER_RANK: return "per-rank";
    default: return "unknown";
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

int ckpt__container_pack(uint8_t **out, size_t *len, const char magic[8],
                         const ProtobufCMessage *msg)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    size_t total = CKPT__CONTAINER_HEAD + plen + CKPT__CONTAINER_TAIL;
    uint8_t *buf = malloc(total);
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "cannot allocate %zu bytes for an index", total);
    memcpy(buf, magic, 8);
    put32(buf + 8, CKPT__CONTAINER_VERSION);
    put32(buf + 12, 0);
    put64(buf + 16, plen);
    protobuf_c_message_pack(msg, buf + CKPT__CONTAINER_HEAD);
    put32(buf + CKPT__CONTAINER_HEAD + plen, ckpt_crc32c(buf, CKPT__CONTAINER_HEAD + plen));
    *out = buf;
    *len = total;
    return CKPT_OK;
}

int ckpt__container_open(const uint8_t **payload, size_t *plen, const uint8_t *buf, size_t len,
                         const char magic[8], const char *path)
{
    if (len < CKPT__CONTAINER_HEAD + CKPT__CONTAINER_TAIL || memcmp(buf, magic, 8) != 0)
        return ckpt__error(CKPT_ECORRUPT, "%s: not an mpickpt %s file (bad magic or %zu bytes)",
                           path, memcmp(magic, CKPT__MAGIC_INDEX, 8) == 0 ? "index" : "state", len);
    uint32_t version = get32(buf + 8);
    if (version > CKPT__CONTAINER_VERSION)
        return ckpt__error(CKPT_EVERSION,
                           "%s: container version %u; this mpickpt (%s) reads up to %u", path,
                           version, ckpt_version(), CKPT__CONTAINER_VERSION);
    if (version == 0)
        return ckpt__error(CKPT_ECORRUPT, "%s: format version 0 is invalid", path);
    uint64_t n = get64(buf + 16);
    if (n != len - CKPT__CONTAINER_HEAD - CKPT__CONTAINER_TAIL)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: truncated or padded: header says %llu payload bytes, file has %zu",
                           path, (unsigned long long)n,
                           len - CKPT__CONTAINER_HEAD - CKPT__CONTAINER_TAIL);
    uint32_t want = get32(buf + len - CKPT__CONTAINER_TAIL);
    uint32_t got = ckpt_crc32c(buf, len - CKPT__CONTAINER_TAIL);
    if (want != got)
        return ckpt__error(CKPT_ECORRUPT, "%s: checksum mismatch (stored %08x, computed %08x)", path,
                           want, got);
    *payload = buf + CKPT__CONTAINER_HEAD;
    *plen = (size_t)n;
    return CKPT_OK;
}

static int fill_slice(ckpt_slice *out, size_t n1, const int64_t *a, size_t n2, const int64_t *b,
                      int nd)
{
    if ((int)n1 != nd || (int)n2 != nd || nd > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_ECORRUPT, "piece has %zu/%zu coordinates for a rank-%d tensor", n1,
                           n2, nd);
    out->ndims = nd;
    for (int i = 0; i < nd; i++) {
        out->start[i] = a[i];
        out->count[i] = b[i];
    }
    return CKPT_OK;
}

int ckpt__piece_slice(ckpt_slice *out, const Mpickpt__Piece *p, int nd)
{
    return fill_slice(out, p->n_start, p->start, p->n_count, p->count, nd);
}

int ckpt__piece_dataset_slice(ckpt_slice *out, const Mpickpt__Piece *p, int nd)
{
    return fill_slice(out, p->n_dataset_start, p->dataset_start, p->n_count, p->count, nd);
}

/* ---- validation ---------------------------------------------------------------------------- */

/*
 * A piece being validated, in the scratch space: its message, then its box, start[0..nd) followed
 * by count[0..nd): 8 + 16 nd bytes (a ckpt_slice is 264 bytes, so that 10^6 pieces took 272 MB).
 */
struct vrow {
    const Mpickpt__Piece *p;
    int64_t x[];
};

static size_t vrow_size(int nd)
{
    return sizeof(struct vrow) + 2 * (size_t)nd * sizeof(int64_t);
}

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

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void fmt_slice(char *buf, size_t n, const ckpt_shape *sh, const ckpt_slice *s)
{
    if (sh->ndims == 0 || ckpt_slice_spec_format(buf, n, sh, s) != CKPT_OK)
        snprintf(buf, n, "%s", sh->ndims == 0 ? "(scalar)" : "(slice)");
}

static void fmt_vrow(char *buf, size_t n, const ckpt_shape *sh, const struct vrow *r)
{
    ckpt_slice s;
    vrow_slice(&s, r, sh->ndims);
    fmt_slice(buf, n, sh, &s);
}

/* The dataset paths mpickpt writes (ckpt__h5_dataset_path, the saver's pack datasets; format 1
 * and 2 alike): "/tensors/<c>", or "/packs/<c>" for a packed piece, where <c> is one non-empty
 * component ("%XX"-escaped name, "#s0_s1..." suffix), neither "." nor "..". */
static int dataset_path_ok(const char *ds, int packed)
{
    const char *prefix = packed ? "/packs/" : "/tensors/";
    size_t n = strlen(prefix);
    if (!ds || strncmp(ds, prefix, n) != 0)
        return 0;
    const char *c = ds + n;
    return c[0] != '\0' && !strchr(c, '/') && strcmp(c, ".") != 0 && strcmp(c, "..") != 0;
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

/* Validates one tensor; `scratch` has room for t->n_pieces rows of its rank (vrow_size) and as
 * many pointers. */
static int validate_tensor(const Mpickpt__Tensor *t, int32_t world, uint32_t version,
                           const char *const *files, size_t nfiles, char *scratch, int bad,
                           const char *what)
{
    const char *name = t->name ? t->name : "";
    size_t nlen = strnlen(name, 4097);
    if (nlen == 0 || nlen > 4096)
        return ckpt__error(bad, "%s: tensor with an empty or over-long name", what);
    if (!ckpt__utf8_valid(name, nlen)) {
        char esc[1024];
        return ckpt__error(bad, "%s: tensor name '%s' is not valid UTF-8", what,
                           ckpt__escape_bytes(esc, sizeof esc, name, nlen));
    }
    if (!ckpt_dtype_valid(t->dtype))
        return ckpt__error(bad, "%s: tensor '%s' has invalid dtype %d", what, name, (int)t->dtype);
    if ((int)t->kind < (int)CKPT_KIND_FULL || (int)t->kind > (int)CKPT_KIND_BLOB)
        return ckpt__error(bad, "%s: tensor '%s' has invalid kind %d", what, name, (int)t->kind);
    ckpt_shape shape;
    int64_t total;
    if (t->n_shape > CKPT_MAX_DIMS || ckpt_shape_init(&shape, (int)t->n_shape, t->shape) != CKPT_OK ||
        ckpt_shape_num_elements(&total, &shape) != CKPT_OK)
        return ckpt__error(bad, "%s: tensor '%s' has an invalid shape (%zu dims)", what, name,
                           t->n_shape);
    size_t esize = ckpt_dtype_size((ckpt_dtype)t->dtype);
    /* Every piece's byte count is at most the tensor's: checking this one product for overflow
     * keeps every per-piece product below exact (a wrapped count would size buffers wrongly). */
    uint64_t total_bytes;
    if (__builtin_mul_overflow((uint64_t)total, (uint64_t)esize, &total_bytes) ||
        total_bytes > (uint64_t)INT64_MAX)
        return ckpt__error(bad, "%s: tensor '%s' is too large (%lld elements of %zu bytes)", what,
                           name, (long long)total, esize);
    if (t->n_pieces == 0)
        return ckpt__error(bad, "%s: tensor '%s' has no stored piece", what, name);

    int nd = shape.ndims;
    size_t stride = vrow_size(nd);
    int64_t covered = 0;
    for (size_t j = 0; j < t->n_pieces; j++) {
        const Mpickpt__Piece *p = t->pieces[j];
        struct vrow *v = (struct vrow *)(void *)(scratch + j * stride);
        ckpt_slice s, ds;
        int64_t n;
        char sl[256];
        if (ckpt__piece_slice(&s, p, nd) != CKPT_OK ||
            ckpt__piece_dataset_slice(&ds, p, nd) != CKPT_OK)
            return ckpt__error_wrap(bad, "%s: tensor '%s' piece %zu", what, name, j);
        if (ckpt_slice_validate(&s, &shape) != CKPT_OK)
            return ckpt__error_wrap(bad, "%s: tensor '%s' piece %zu (rank %d) lies outside the shape",
                                    what, name, j, p->rank);
        for (int d = 0; d < ds.ndims; d++)
            if (ds.start[d] < 0 || ds.start[d] > INT64_MAX - ds.count[d])
                return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad dataset offset", what, name,
                                   j);
        if (p->rank < 0 || p->rank >= world)
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: rank %d outside world size %d",
                               what, name, j, p->rank, world);
        if (!p->file || !bsearch(&p->file, files, nfiles, sizeof *files, cmp_str_ptr))
            return ckpt__error(bad, "%s: tensor '%s' piece %zu names data file '%s' not listed in "
                                    "the index",
                               what, name, j, p->file ? p->file : "");
        if (!dataset_path_ok(p->dataset, p->packed))
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad dataset path", what, name, j);
        ckpt_slice_num_elements(&n, &s);
        if (p->packed) {
            int zero = 1;
            for (int d = 0; d < ds.ndims; d++)
                zero &= ds.start[d] == 0;
            if (version < 2 || !zero || p->pack_offset > (uint64_t)INT64_MAX - (uint64_t)n * esize)
                return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad packed piece (format %u, "
                                        "offset %llu)",
                                   what, name, j, version, (unsigned long long)p->pack_offset);
        } else if (p->pack_offset != 0) {
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: pack offset on an unpacked piece",
                               what, name, j);
        }
        if (p->n_block_crc32c > 0 || p->block_bytes != 0) {
            uint64_t bb = p->block_bytes;
            uint64_t nb = bb ? p->bytes / bb + (p->bytes % bb != 0) : 0;
            if (version < 2 || p->block_bytes == 0 || nb != p->n_block_crc32c)
                return ckpt__error(bad, "%s: tensor '%s' piece %zu: %zu block checksums for %llu "
                                        "bytes in blocks of %u (format %u)",
                                   what, name, j, p->n_block_crc32c, (unsigned long long)p->bytes,
                                   p->block_bytes, version);
        }
        if (p->bytes != (uint64_t)n * esize) {
            fmt_slice(sl, sizeof sl, &shape, &s);
            return ckpt__error(bad, "%s: tensor '%s' piece %s: %llu bytes recorded, %llu expected",
                               what, name, sl, (unsigned long long)p->bytes,
                               (unsigned long long)((uint64_t)n * esize));
        }
        if (__builtin_add_overflow(covered, n, &covered))
            return ckpt__error(bad, "%s: tensor '%s': element count overflows", what, name);
        v->p = p;
        memcpy(v->x, s.start, (size_t)nd * sizeof *v->x);
        memcpy(v->x + nd, s.count, (size_t)nd * sizeof *v->x);
    }

    /* Sorted by start, equal boxes are neighbours. */
    const struct vrow **ord = (const struct vrow **)(void *)(scratch + t->n_pieces * stride);
    for (size_t j = 0; j < t->n_pieces; j++)
        ord[j] = (const struct vrow *)(const void *)(scratch + j * stride);
    int rc = sort_rows(ord, t->n_pieces, nd);
    if (rc != CKPT_OK)
        return rc;
    for (size_t a = 1; a < t->n_pieces; a++) {
        const struct vrow *x = ord[a - 1], *y = ord[a];
        if (memcmp(x->x, y->x, 2 * (size_t)nd * sizeof *x->x) == 0) {
            char sa[256];
            fmt_vrow(sa, sizeof sa, &shape, y);
            return ckpt__error(bad, "%s: tensor '%s': duplicate slice %s saved by rank %d and "
                                    "rank %d",
                               what, name, sa, x->p->rank, y->p->rank);
        }
    }
    struct tiling tl = { .what = what, .name = name, .bad = bad, .shape = &shape, .rows = scratch,
                         .ord = ord, .n = t->n_pieces, .stride = stride, .total = total,
                         .covered = covered };
    return check_tiling(&tl);
}

uint32_t ckpt__index_format_version(const Mpickpt__Index *idx)
{
    for (size_t i = 0; i < idx->n_tensors; i++)
        for (size_t j = 0; j < idx->tensors[i]->n_pieces; j++)
            if (idx->tensors[i]->pieces[j]->packed ||
                idx->tensors[i]->pieces[j]->n_block_crc32c > 0)
                return 2;
    return 1;
}

int ckpt__index_validate(const Mpickpt__Index *idx, int bad, const char *what)
{
    const Mpickpt__Header *h = idx->header;
    if (!h)
        return ckpt__error(bad, "%s: index has no header", what);
    if (h->format_version > CKPT_FORMAT_VERSION)
        return ckpt__error(CKPT_EVERSION, "%s: index of format version %u; this mpickpt reads up to %d",
                           what, h->format_version, CKPT_FORMAT_VERSION);
    if (h->format_version == 0)
        return ckpt__error(bad, "%s: index has format version 0", what);
    if (h->endianness != MPICKPT__ENDIANNESS__LITTLE)
        return ckpt__error(bad, "%s: big-endian checkpoints are not supported", what);
    if (h->world_size < 1)
        return ckpt__error(bad, "%s: world size %d", what, h->world_size);
    if (h->layout != MPICKPT__LAYOUT__LAYOUT_SHARED && h->layout != MPICKPT__LAYOUT__LAYOUT_PER_RANK)
        return ckpt__error(bad, "%s: unknown layout %d", what, (int)h->layout);
    if (h->save_counter < 0 || h->save_counter > CKPT__COUNTER_MAX)
        return ckpt__error(bad, "%s: save counter %lld outside [0, %lld]", what,
                           (long long)h->save_counter, (long long)CKPT__COUNTER_MAX);

    int rc = CKPT_OK;
    const char **files = malloc((idx->n_files + 1) * sizeof *files);
    size_t need = vrow_size(0), bytes; /* the largest tensor's rows and pointers to them */
    for (size_t i = 0; i < idx->n_tensors; i++) {
        size_t nd = idx->tensors[i]->n_shape;
        if (ckpt__mul_size(&bytes, idx->tensors[i]->n_pieces,
                           vrow_size(nd > CKPT_MAX_DIMS ? CKPT_MAX_DIMS : (int)nd) +
                               sizeof(struct vrow *)) != 0)
            bytes = SIZE_MAX;
        if (bytes > need)
            need = bytes;
    }
    char *scratch = need < SIZE_MAX ? malloc(need) : NULL;
    pthread_once(&fp_seed_once, fp_seed_init);
    if (!files || !scratch) {
        rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory validating the index", what);
        goto done;
    }
    for (size_t i = 0; i < idx->n_files; i++) {
        files[i] = idx->files[i]->name;
        if (!ckpt__safe_filename(files[i])) {
            rc = ckpt__error(bad, "%s: unsafe data file name '%.300s'", what,
                             files[i] ? files[i] : "");
            goto done;
        }
    }
    qsort(files, idx->n_files, sizeof *files, cmp_str_ptr);
    for (size_t i = 1; i < idx->n_files; i++)
        if (strcmp(files[i - 1], files[i]) == 0) {
            rc = ckpt__error(bad, "%s: data file '%s' listed twice", what, files[i]);
            goto done;
        }
    for (size_t i = 0; i < idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = idx->tensors[i];
        /* first: the name is then known to be non-empty UTF-8, fit to compare and print */
        rc = validate_tensor(t, h->world_size, h->format_version, files, idx->n_files, scratch, bad,
                             what);
        if (rc != CKPT_OK)
            goto done;
        if (i > 0 && strcmp(idx->tensors[i - 1]->name, t->name) >= 0) {
            rc = ckpt__error(bad, "%s: tensors not sorted or '%s' listed twice", what, t->name);
            goto done;
        }
    }
done:
    free(files);
    free(scratch);
    return rc;
}

/* ---- load / store ---------------------------------------------------------------------------- */

int ckpt__index_read_at(uint8_t **buf, const uint8_t **payload, size_t *plen, int dirfd,
                        const char *name, const char *dir)
{
    size_t len = 0;
    char path[4400];
    *buf = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = ckpt__read_file_at(buf, &len, dirfd, name, CKPT__MAX_INDEX_BYTES, dir);
    if (rc == CKPT_OK)
        rc = ckpt__container_open(payload, plen, *buf, len, CKPT__MAGIC_INDEX, path);
    if (rc != CKPT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

int ckpt__index_read(uint8_t **buf, const uint8_t **payload, size_t *plen, const char *path)
{
    size_t len = 0;
    *buf = NULL;
    int rc = ckpt__read_file(buf, &len, path, CKPT__MAX_INDEX_BYTES);
    if (rc == CKPT_OK)
        rc = ckpt__container_open(payload, plen, *buf, len, CKPT__MAGIC_INDEX, path);
    if (rc != CKPT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

int ckpt__index_parse(Mpickpt__Index **out, const uint8_t *payload, size_t plen, const char *path,
                      ProtobufCAllocator *alloc, int validate)
{
    *out = NULL;
    Mpickpt__Index *idx = mpickpt__index__unpack(alloc, plen, payload);
    if (!idx)
        return ckpt__error(CKPT_ECORRUPT, "%s: the index does not parse", path);
    int rc = validate ? ckpt__index_validate(idx, CKPT_ECORRUPT, path) : CKPT_OK;
    if (rc != CKPT_OK) {
        mpickpt__index__free_unpacked(idx, alloc);
        return rc;
    }
    *out = idx;
    return CKPT_OK;
}

int ckpt__index_load(Mpickpt__Index **out, const char *path)
{
    uint8_t *buf;
    const uint8_t *payload;
    size_t plen;
    *out = NULL;
    int rc = ckpt__index_read(&buf, &payload, &plen, path);
    if (rc == CKPT_OK)
        rc = ckpt__index_parse(out, payload, plen, path, NULL, 1);
    free(buf);
    return rc;
}

int ckpt__index_store(const Mpickpt__Index *idx, const char *path)
{
    int rc = ckpt__index_validate(idx, CKPT_EMISMATCH, path);
    if (rc != CKPT_OK)
        return rc;
    return ckpt__index_store_merged(idx, path);
}

int ckpt__index_store_merged_at(const Mpickpt__Index *idx, int dirfd, const char *name,
                                const char *shown)
{
    uint8_t *buf;
    size_t len;
    int rc = ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &idx->base);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__write_file_atomic_at(dirfd, name, buf, len, shown);
    free(buf);
    return rc;
}

int ckpt__index_store_merged(const Mpickpt__Index *idx, const char *path)
{
    int rc;
    uint8_t *buf;
    size_t len;
    if ((rc = ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &idx->base)) != CKPT_OK)
        return rc;
    rc = ckpt__write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

/* ---- merge ------------------------------------------------------------------------------------ */

struct mentry {
    const Mpickpt__Tensor *t;
    int32_t rank;
    size_t group; /* index of its name in the groups */
};

/* One distinct tensor name. */
struct mgroup {
    const char *name;
    uint64_t hash;
    size_t count; /* entries of this name */
    size_t pos;   /* where its next entry goes in the name-sorted order */
};

struct mname {
    const char *name;
    size_t group;
};

static int cmp_mname(const void *a, const void *b)
{
    return strcmp(((const struct mname *)a)->name, ((const struct mname *)b)->name);
}

/* Tensor names share long prefixes ("model/transformer/block_0012/..."), so the hash reads them
 * 8 bytes at a time; murmur3's finalizer spreads the bits for the table index. */
static uint64_t hash_name(const char *s)
{
    size_t n = strlen(s);
    uint64_t h = n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = ((h << 5 | h >> 59) ^ w) * 0x517cc1b727220a95u;
    }
    w = 0;
    memcpy(&w, s, n);
    h = ((h << 5 | h >> 59) ^ w) * 0x517cc1b727220a95u;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
    h *= 0xc4ceb34cd9ed1a53u;
    return h ^ h >> 33;
}

/*
 * Puts the entries in the order of a stable sort by name (strcmp), without sorting them: a hash
 * table gives each entry its name's group, only the distinct names are sorted, and the entries are
 * then placed group by group in their original order (a counting sort). Sorting all entries with
 * qsort cost most of the merge: partitioned tensors give one entry per rank, so there are about
 * twice as many entries as names, and every comparison was a strcmp over long shared prefixes.
 * On success *sorted is a new array of the nt entries, each with its group set.
 */
static int sort_entries(struct mentry **sorted, struct mentry *all, size_t nt)
{
    size_t cap = 16, ng = 0; /* a power of two, at least twice nt: linear probes stay short */
    while (cap < 2 * nt)
        cap *= 2;
    size_t *slots = calloc(cap, sizeof *slots); /* group index + 1; 0 is empty */
    struct mgroup *groups = malloc((nt ? nt : 1) * sizeof *groups);
    struct mname *names = NULL;
    struct mentry *out = NULL;
    *sorted = NULL;
    if (!slots || !groups)
        goto nomem;
    for (size_t k = 0; k < nt; k++) {
        const char *name = all[k].t->name;
        uint64_t h = hash_name(name);
        size_t i = (size_t)h & (cap - 1);
        for (;; i = (i + 1) & (cap - 1)) {
            size_t g = slots[i];
            if (g == 0) {
                groups[ng] = (struct mgroup){ name, h, 0, 0 };
                slots[i] = ++ng;
                g = ng;
            } else if (groups[g - 1].hash != h || strcmp(groups[g - 1].name, name) != 0) {
                continue;
            }
            all[k].group = g - 1;
            groups[g - 1].count++;
            break;
        }
    }
    /* free what is done with before the next allocation: this runs at 1M entries */
    free(slots);
    slots = NULL;
    if (!(names = malloc((ng ? ng : 1) * sizeof *names)))
        goto nomem;
    for (size_t g = 0; g < ng; g++)
        names[g] = (struct mname){ groups[g].name, g };
    qsort(names, ng, sizeof *names, cmp_mname); /* names are distinct: no ties */
    size_t pos = 0;
    for (size_t i = 0; i < ng; i++) {
        struct mgroup *g = &groups[names[i].group];
        g->pos = pos;
        pos += g->count;
    }
    free(names);
    if (!(out = malloc((nt ? nt : 1) * sizeof *out)))
        goto nomem;
    for (size_t k = 0; k < nt; k++)
        out[groups[all[k].group].pos++] = all[k];
    free(groups);
    *sorted = out;
    return CKPT_OK;
nomem:
    free(slots);
    free(groups);
    return ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
}

void ckpt__index_merged_free(Mpickpt__Index *idx)
{
    if (!idx)
        return;
    for (size_t i = 0; i < idx->n_tensors; i++) {
        if (idx->tensors[i]) {
            free(idx->tensors[i]->pieces);
            free(idx->tensors[i]);
        }
    }
    free(idx->tensors);
    free(idx->files);
    idx->tensors = NULL;
    idx->files = NULL;
    idx->n_tensors = idx->n_files = 0;
}

int ckpt__index_merge(Mpickpt__Index *out, Mpickpt__Fragment *const *frags, size_t n)
{
    size_t nt = 0, nf = 0;
    int rc = CKPT_OK;
    for (size_t f = 0; f < n; f++) {
        nt += frags[f]->n_tensors;
        nf += frags[f]->n_files;
    }
    struct mentry *all = malloc((nt ? nt : 1) * sizeof *all), *sorted;
    out->files = malloc((nf ? nf : 1) * sizeof *out->files);
    out->tensors = calloc(nt ? nt : 1, sizeof *out->tensors);
    out->n_tensors = out->n_files = 0;
    if (!all || !out->files || !out->tensors) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
        goto done;
    }
    size_t k = 0;
    for (size_t f = 0; f < n; f++) {
        for (size_t i = 0; i < frags[f]->n_tensors; i++) {
            const Mpickpt__Tensor *t = frags[f]->tensors[i];
            if (!t->name || !t->name[0]) {
                rc = ckpt__error(CKPT_EINVAL, "rank %d registered a tensor with an empty name",
                                 frags[f]->rank);
                goto done;
            }
            all[k].t = t;
            all[k].rank = frags[f]->rank;
            k++;
        }
        for (size_t i = 0; i < frags[f]->n_files; i++)
            out->files[out->n_files++] = frags[f]->files[i];
    }
    if ((rc = sort_entries(&sorted, all, nt)) != CKPT_OK)
        goto done;
    free(all);
    all = sorted;

    for (size_t a = 0; a < nt;) {
        size_t b = a, np = 0;
        const Mpickpt__Tensor *t0 = all[a].t;
        for (; b < nt && all[b].group == all[a].group; b++) {
            const Mpickpt__Tensor *t = all[b].t;
            int same_shape = t->n_shape == t0->n_shape &&
                             (t->n_shape == 0 ||
                              memcmp(t->shape, t0->shape, t->n_shape * sizeof *t->shape) == 0);
            if (t->dtype != t0->dtype || !same_shape || t->kind != t0->kind) {
                rc = ckpt__error(CKPT_EMISMATCH,
                                 "tensor '%s': rank %d registered %s/%zu-d/%s but rank %d "
                                 "registered %s/%zu-d/%s",
                                 t0->name, all[a].rank, ckpt_dtype_name((ckpt_dtype)t0->dtype),
                                 t0->n_shape, ckpt_kind_name((ckpt_kind)t0->kind), all[b].rank,
                                 ckpt_dtype_name((ckpt_dtype)t->dtype), t->n_shape,
                                 ckpt_kind_name((ckpt_kind)t->kind));
                goto done;
            }
            np += t->n_pieces;
        }
        Mpickpt__Tensor *m = malloc(sizeof *m);
        Mpickpt__Piece **pieces = malloc((np ? np : 1) * sizeof *pieces);
        if (!m || !pieces) {
            free(m);
            free(pieces);
            rc = ckpt__error(CKPT_ENOMEM, "out of memory merging tensor '%s'", t0->name);
            goto done;
        }
        *m = *t0; /* borrows name and shape */
        m->pieces = pieces;
        m->n_pieces = 0;
        for (size_t c = a; c < b; c++)
            for (size_t j = 0; j < all[c].t->n_pieces; j++)
                m->pieces[m->n_pieces++] = all[c].t->pieces[j];
        out->tensors[out->n_tensors++] = m;
        a = b;
    }
    rc = ckpt__index_validate(out, CKPT_EMISMATCH, "merge");
done:
    free(all);
    return rc;
}

/* ---- fragments built by a writer ------------------------------------------------------------- */

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int64_t *dup64(const int64_t *v, int n)
{
    int64_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (d && n)
        memcpy(d, v, (size_t)n * sizeof *d);
    return d;
}

static void free_built_piece(Mpickpt__Piece *p)
{
    if (!p)
        return;
    free(p->start);
    free(p->count);
    free(p->dataset_start);
    free(p->file);
    free(p->dataset);
    free(p->block_crc32c);
    free(p);
}

static void free_built_tensor(Mpickpt__Tensor *t)
{
    if (!t)
        return;
    for (size_t j = 0; j < t->n_pieces; j++)
        free_built_piece(t->pieces[j]);
    free(t->pieces);
    free(t->name);
    free(t->shape);
    free(t);
}

int ckpt__fragment_add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dtype,
                       const ckpt_shape *shape, ckpt_kind kind, const ckpt_slice *slice,
                       const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                       uint64_t bytes, uint32_t crc)
{
    if (f->n_tensors == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        Mpickpt__Tensor **nt = realloc(f->tensors, ncap * sizeof *nt);
        if (!nt)
            return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
        f->tensors = nt;
        *cap = ncap;
    }
    Mpickpt__Tensor *t = calloc(1, sizeof *t);
    Mpickpt__Piece *p = calloc(1, sizeof *p);
    Mpickpt__Piece **pp = malloc(sizeof *pp);
    if (!t || !p || !pp)
        goto nomem;
    mpickpt__tensor__init(t);
    mpickpt__piece__init(p);
    t->pieces = pp;
    t->pieces[0] = p;
    t->n_pieces = 1;
    t->name = dupstr(name);
    t->dtype = (Mpickpt__DType)dtype;
    t->kind = (Mpickpt__Kind)kind;
    t->n_shape = (size_t)shape->ndims;
    t->shape = dup64(shape->dims, shape->ndims);
    p->n_start = p->n_count = p->n_dataset_start = (size_t)slice->ndims;
    p->start = dup64(slice->start, slice->ndims);
    p->count = dup64(slice->count, slice->ndims);
    p->dataset_start = dup64(dataset_slice->start, slice->ndims);
    p->file = dupstr(file);
    p->dataset = dupstr(dataset);
    p->bytes = bytes;
    p->crc32c = crc;
    p->rank = f->rank;
    if (!t->name || !t->shape || !p->start || !p->count || !p->dataset_start || !p->file ||
        !p->dataset) {
        free_built_tensor(t);
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    }
    f->tensors[f->n_tensors++] = t;
    return CKPT_OK;
nomem:
    free(t);
    free(p);
    free(pp);
    return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
}

int ckpt__fragment_add_data(Mpickpt__Fragment *f, size_t *cap, const char *name,
                            ckpt_dtype dtype, const ckpt_shape *shape, ckpt_kind kind,
                            const ckpt_slice *slice, const char *file, const char *dataset,
                            const ckpt_slice *dataset_slice, const void *data, size_t len)
{
    size_t nb = len > CKPT__CRC_BLOCK ? (len + CKPT__CRC_BLOCK - 1) / CKPT__CRC_BLOCK : 0;
    uint32_t *blocks = nb ? malloc(nb * sizeof *blocks) : NULL;
    if (nb && !blocks)
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    uint32_t crc = nb ? ckpt__crc32c_blocks(data, len, CKPT__CRC_BLOCK, blocks)
                      : ckpt_crc32c(data, len);
    int rc = ckpt__fragment_add(f, cap, name, dtype, shape, kind, slice, file, dataset,
                                dataset_slice, (uint64_t)len, crc);
    if (rc != CKPT_OK) {
        free(blocks);
        return rc;
    }
    Mpickpt__Piece *p = f->tensors[f->n_tensors - 1]->pieces[0];
    p->block_bytes = nb ? (uint32_t)CKPT__CRC_BLOCK : 0;
    p->n_block_crc32c = nb;
    p->block_crc32c = blocks;
    return CKPT_OK;
}

int ckpt__fragment_add_file(Mpickpt__Fragment *f, const char *name, uint64_t bytes)
{
    Mpickpt__DataFile **nf = realloc(f->files, (f->n_files + 1) * sizeof *nf);
    if (!nf)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    f->files = nf;
    Mpickpt__DataFile *d = malloc(sizeof *d);
    char *n = dupstr(name);
    if (!d || !n) {
        free(d);
        free(n);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    mpickpt__data_file__init(d);
    d->name = n;
    d->bytes = bytes;
    f->files[f->n_files++] = d;
    return CKPT_OK;
}

void ckpt__fragment_free_built(Mpickpt__Fragment *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free_built_tensor(f->tensors[i]);
    for (size_t i = 0; i < f->n_files; i++) {
        free(f->files[i]->name);
        free(f->files[i]);
    }
    free(f->tensors);
    free(f->files);
    mpickpt__fragment__init(f);
}
