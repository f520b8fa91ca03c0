/* Index validation at scale and on hostile input (issue 12): the tiling check on 40,000 and
 * 1,000,000 pieces of one tensor split along dim 0, along an inner axis and as 2-D/3-D grids, each
 * broken four ways (a piece moved by one element, duplicated, dropped, enlarged); crossing pieces
 * and a capped culprit search; random tilings against an element-by-element oracle; UTF-8 tensor
 * names; dataset paths; the save counter's bounds.
 *
 * Speed is shown by finishing inside the CTest TIMEOUT (the quadratic check took minutes for the
 * inner-axis split at 40,000 pieces and hours at 1,000,000); nothing here measures time. */
#include "check.h"
#include "index.h"
#include "mpickpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORLD 64

static const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e && e->message ? e->message : "";
}

/* ---- an index with one tensor, built by hand ------------------------------------------------ */

typedef struct layout {
    int nd;
    int64_t shape[CKPT_MAX_DIMS];
    size_t n;               /* pieces of the valid tiling */
    Mpickpt__Piece *pieces; /* n + 1: the last one is spare (for a duplicate) */
    Mpickpt__Piece **ptrs;  /* n + 1 */
    int64_t *coords;        /* 3 * nd per piece: start, count, dataset_start */
    Mpickpt__Tensor tensor;
    Mpickpt__Tensor *tensors[1];
    Mpickpt__DataFile file;
    Mpickpt__DataFile *files[1];
    Mpickpt__Header header;
    Mpickpt__Index idx;
} layout;

static char dataset_name[] = "/tensors/x";
static char file_name[] = "d0";
static char tensor_name[64] = "x";

static int64_t box_elems(const Mpickpt__Piece *p, int nd)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= p->count[d];
    return n;
}

static void layout_alloc(layout *l, int nd, const int64_t *shape, size_t n)
{
    memset(l, 0, sizeof *l);
    l->nd = nd;
    if (nd > 0)
        memcpy(l->shape, shape, (size_t)nd * sizeof *shape);
    l->n = n;
    l->pieces = calloc(n + 1, sizeof *l->pieces);
    l->ptrs = calloc(n + 1, sizeof *l->ptrs);
    l->coords = calloc((n + 1) * 3 * (size_t)(nd ? nd : 1), sizeof *l->coords);
    if (!l->pieces || !l->ptrs || !l->coords) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t k = 0; k <= n; k++) {
        Mpickpt__Piece *p = &l->pieces[k];
        mpickpt__piece__init(p);
        p->n_start = p->n_count = p->n_dataset_start = (size_t)nd;
        p->start = l->coords + k * 3 * (size_t)nd;
        p->count = p->start + nd;
        p->dataset_start = p->count + nd;
        p->file = file_name;
        p->dataset = dataset_name;
        p->rank = (int32_t)(k % WORLD);
        l->ptrs[k] = p;
    }
    mpickpt__tensor__init(&l->tensor);
    l->tensor.name = tensor_name;
    l->tensor.dtype = MPICKPT__DTYPE__DT_UINT8;
    l->tensor.kind = MPICKPT__KIND__KIND_PARTITIONED;
    l->tensor.n_shape = (size_t)nd;
    l->tensor.shape = l->shape;
    l->tensor.n_pieces = n;
    l->tensor.pieces = l->ptrs;
    l->tensors[0] = &l->tensor;
    mpickpt__data_file__init(&l->file);
    l->file.name = file_name;
    l->files[0] = &l->file;
    mpickpt__header__init(&l->header);
    l->header.format_version = 1;
    l->header.endianness = MPICKPT__ENDIANNESS__LITTLE;
    l->header.world_size = WORLD;
    l->header.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    l->header.save_counter = 1;
    mpickpt__index__init(&l->idx);
    l->idx.header = &l->header;
    l->idx.n_tensors = 1;
    l->idx.tensors = l->tensors;
    l->idx.n_files = 1;
    l->idx.files = l->files;
}

static void layout_free(layout *l)
{
    free(l->pieces);
    free(l->ptrs);
    free(l->coords);
}

/* Records the byte count of piece p (uint8: one byte per element). */
static void set_bytes(const layout *l, Mpickpt__Piece *p)
{
    p->bytes = (uint64_t)box_elems(p, l->nd);
}

/* A grid of g[d] pieces along dimension d, each w[d] wide. Piece k belongs to rank k % WORLD and
 * the pieces are listed rank by rank, as a merge of the ranks' fragments lists them, so the
 * validator's sort has work to do. */
static void layout_grid(layout *l, int nd, const size_t *g, const int64_t *w)
{
    int64_t shape[CKPT_MAX_DIMS];
    size_t n = 1;
    for (int d = 0; d < nd; d++) {
        shape[d] = (int64_t)g[d] * w[d];
        n *= g[d];
    }
    layout_alloc(l, nd, shape, n);
    size_t i = 0;
    for (size_t r = 0; r < WORLD; r++)
        for (size_t k = r; k < n; k += WORLD) {
            Mpickpt__Piece *p = &l->pieces[k];
            size_t rest = k;
            for (int d = nd - 1; d >= 0; d--) {
                p->start[d] = (int64_t)(rest % g[d]) * w[d];
                p->count[d] = w[d];
                rest /= g[d];
            }
            set_bytes(l, p);
            l->ptrs[i++] = p;
        }
}

static int validate(const layout *l)
{
    return ckpt__index_validate(&l->idx, CKPT_ECORRUPT, "test");
}

static void spec_of(char *buf, size_t n, const layout *l, const Mpickpt__Piece *p)
{
    ckpt_shape sh;
    ckpt_slice s;
    ckpt_shape_init(&sh, l->nd, l->shape);
    ckpt_slice_init(&s, l->nd, p->start, p->count);
    ckpt_slice_spec_format(buf, n, &sh, &s);
}

/* ---- the valid tiling and its four breakages ------------------------------------------------ */

/* `what` names the layout; `split` is a dimension with more than one piece, `m` a piece that is
 * not the last along `split` (so moving or growing it by one element stays inside the shape). */
static void check_breakages(layout *l, const char *what, int split, Mpickpt__Piece *m)
{
    char spec[512], want[600];
    int64_t total = 1;
    for (int d = 0; d < l->nd; d++)
        total *= l->shape[d];

    CHECK_RC(validate(l), CKPT_OK);

    /* moved by one element along the split: it overlaps its neighbour and leaves a gap */
    m->start[split]++;
    spec_of(spec, sizeof spec, l, m);
    snprintf(want, sizeof want, "slice %s (rank %d)", spec, m->rank);
    CHECK_RC(validate(l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "overlaps") && strstr(last_msg(), want), "%s moved: %s", what,
              last_msg());
    m->start[split]--;

    /* duplicated (by another rank) */
    Mpickpt__Piece *spare = &l->pieces[l->n];
    memcpy(spare->start, m->start, 3 * (size_t)l->nd * sizeof *m->start);
    spare->bytes = m->bytes;
    spare->rank = (m->rank + 1) % WORLD;
    l->ptrs[l->n] = spare;
    l->tensor.n_pieces = l->n + 1;
    spec_of(spec, sizeof spec, l, m);
    snprintf(want, sizeof want, "duplicate slice %s saved by rank", spec);
    CHECK_RC(validate(l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), want), "%s duplicated: %s", what, last_msg());
    l->tensor.n_pieces = l->n;

    /* dropped: m's slot takes the last listed piece */
    size_t slot = 0;
    while (l->ptrs[slot] != m)
        slot++;
    l->ptrs[slot] = l->ptrs[l->n - 1];
    l->ptrs[l->n - 1] = m;
    l->tensor.n_pieces = l->n - 1;
    snprintf(want, sizeof want, "cover %lld of %lld elements (gap)",
             (long long)(total - box_elems(m, l->nd)), (long long)total);
    CHECK_RC(validate(l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), want), "%s dropped: %s", what, last_msg());
    l->tensor.n_pieces = l->n;

    /* enlarged by one element along the split: it overlaps its neighbour */
    m->count[split]++;
    set_bytes(l, m);
    spec_of(spec, sizeof spec, l, m);
    snprintf(want, sizeof want, "slice %s (rank %d)", spec, m->rank);
    CHECK_RC(validate(l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "overlaps") && strstr(last_msg(), want), "%s enlarged: %s", what,
              last_msg());
    m->count[split]--;
    set_bytes(l, m);
}

/* The piece at grid position pos[]. */
static Mpickpt__Piece *grid_piece(layout *l, const size_t *g, const size_t *pos)
{
    size_t k = 0;
    for (int d = 0; d < l->nd; d++)
        k = k * g[d] + pos[d];
    return &l->pieces[k];
}

static void test_layout(const char *what, int nd, const size_t *g, const int64_t *w, int split)
{
    layout l;
    layout_grid(&l, nd, g, w);
    size_t mid[CKPT_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        mid[d] = (g[d] - 1) / 2; /* not the last along any dimension with two or more */
    char name[128];
    snprintf(name, sizeof name, "%s (%zu pieces)", what, l.n);
    check_breakages(&l, name, split, grid_piece(&l, g, mid));
    layout_free(&l);
}

static void test_scale(void)
{
    static const size_t sizes[2][3] = { { 40000, 200, 20 }, { 1000000, 1000, 100 } };
    for (int i = 0; i < 2; i++) {
        size_t n = sizes[i][0], side = sizes[i][1], cube = sizes[i][2];
        /* dim 0: rows of 2 x 3 */
        size_t g0[2] = { n, 1 };
        int64_t w0[2] = { 2, 3 };
        test_layout("dim-0 split", 2, g0, w0, 0);
        /* inner axis: every piece spans all 3 rows, 2 columns each */
        size_t g1[2] = { 1, n };
        int64_t w1[2] = { 3, 2 };
        test_layout("inner-axis split", 2, g1, w1, 1);
        /* 2-D grid; 3-D grid (40,000 = 20 x 40 x 50, 1,000,000 = 100^3) */
        size_t g2[2] = { side, n / side };
        int64_t w2[2] = { 2, 3 };
        test_layout("2-D grid", 2, g2, w2, 1);
        size_t g3[3] = { cube, i == 0 ? 40 : cube, n / (cube * (i == 0 ? 40 : cube)) };
        int64_t w3[3] = { 2, 1, 2 };
        test_layout("3-D grid", 3, g3, w3, 2);
        if (i == 0)
            test_layout("3-D grid, split along dim 0", 3, g3, w3, 0);
    }
    /* a 4-D grid with a middle axis split, and an inner split of a 3-D tensor */
    size_t g4[4] = { 10, 1, 40, 100 };
    int64_t w4[4] = { 1, 5, 2, 2 };
    test_layout("4-D grid", 4, g4, w4, 3);
    size_t g5[3] = { 1, 40000, 1 };
    int64_t w5[3] = { 4, 2, 7 };
    test_layout("middle-axis split", 3, g5, w5, 1);
}

/* Long thin pieces crossing each other (every row and every column of a 100000 x 100000 tensor):
 * each row crosses 100,000 columns, so a sweep compares 10^10 pairs. The error comes at once; with
 * the culprit search capped, the message says the pieces overlap or leave a gap. */
static void test_hostile(void)
{
    const size_t half = 100000;
    int64_t shape[2] = { (int64_t)half, (int64_t)half };
    layout l;
    layout_alloc(&l, 2, shape, 2 * half);
    for (size_t k = 0; k < 2 * half; k++) {
        Mpickpt__Piece *p = &l.pieces[k];
        int col = k >= half;
        p->start[0] = col ? 0 : (int64_t)k;
        p->count[0] = col ? (int64_t)half : 1;
        p->start[1] = col ? (int64_t)(k - half) : 0;
        p->count[1] = col ? 1 : (int64_t)half;
        set_bytes(&l, p);
    }
    CHECK_RC(validate(&l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "overlaps"), "crossing: %s", last_msg());

    ckpt__index_set_search_budget(1000);
    CHECK_RC(validate(&l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "its 200000 pieces overlap or leave a gap"), "capped: %s",
              last_msg());

    /* Balanced counts (half the rows and half the columns, each only over the other half):
     * the fingerprint finds it; capped, the message is the same. */
    for (size_t k = 0; k < 2 * half; k++) {
        Mpickpt__Piece *p = &l.pieces[k];
        int col = k >= half;
        int64_t i = (int64_t)(col ? k - half : k);
        p->start[col] = i;
        p->count[col] = 1;
        p->start[!col] = i < (int64_t)half / 2 ? (int64_t)half / 2 : 0;
        p->count[!col] = (int64_t)half / 2;
        set_bytes(&l, p);
    }
    /* rows [0, h/2) cover columns [h/2, h), rows [h/2, h) columns [0, h/2); the columns do the
     * same transposed: every element is covered twice or not at all, half of each */
    CHECK_RC(validate(&l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "its 200000 pieces overlap or leave a gap"), "capped: %s",
              last_msg());
    ckpt__index_set_search_budget(0);
    CHECK_RC(validate(&l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "overlaps"), "balanced crossing: %s", last_msg());
    layout_free(&l);
}

/* ---- random tilings against an oracle ------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return n ? rng % n : 0;
}

/* Cuts box (start, count) into at most `budget` (>= 1) random boxes (guillotine cuts), appending
 * them to l's pieces at *k. */
static void guillotine(layout *l, size_t *k, size_t budget, const int64_t *start,
                       const int64_t *count)
{
    int dims[CKPT_MAX_DIMS], nd = 0;
    for (int d = 0; d < l->nd; d++)
        if (count[d] > 1)
            dims[nd++] = d;
    if (nd == 0 || budget < 2 || rnd(4) == 0) {
        Mpickpt__Piece *p = &l->pieces[(*k)++];
        memcpy(p->start, start, (size_t)l->nd * sizeof *start);
        memcpy(p->count, count, (size_t)l->nd * sizeof *count);
        return;
    }
    int d = dims[rnd((uint64_t)nd)];
    int64_t cut = 1 + (int64_t)rnd((uint64_t)count[d] - 1);
    size_t left = 1 + (size_t)rnd(budget - 1);
    int64_t s2[CKPT_MAX_DIMS], c2[CKPT_MAX_DIMS];
    memcpy(s2, start, (size_t)l->nd * sizeof *start);
    memcpy(c2, count, (size_t)l->nd * sizeof *count);
    c2[d] = cut;
    guillotine(l, k, left, s2, c2);
    s2[d] = start[d] + cut;
    c2[d] = count[d] - cut;
    guillotine(l, k, budget - left, s2, c2);
}

static int boxes_meet(const int64_t *s1, const int64_t *c1, const int64_t *s2, const int64_t *c2,
                      int nd)
{
    for (int d = 0; d < nd; d++)
        if (s1[d] >= s2[d] + c2[d] || s2[d] >= s1[d] + c1[d] || c1[d] == 0 || c2[d] == 0)
            return 0;
    return 1;
}

/* Parses the two slices an overlap message names and checks that they are stored pieces that
 * overlap. */
static int overlap_message_true(const layout *l, const char *msg)
{
    const char *a = strstr(msg, ": slice "), *b = strstr(msg, " overlaps slice ");
    if (!a || !b)
        return 0;
    a += strlen(": slice ");
    b += strlen(" overlaps slice ");
    const char *ea = strstr(a, " (rank "), *eb = strstr(b, " (rank ");
    if (!ea || !eb || ea > b)
        return 0;
    char sa[512], sb[512];
    snprintf(sa, sizeof sa, "%.*s", (int)(ea - a), a);
    snprintf(sb, sizeof sb, "%.*s", (int)(eb - b), b);
    ckpt_shape sh;
    ckpt_slice x, y, z;
    if (ckpt_slice_spec_parse(&sh, &x, sa) != CKPT_OK ||
        ckpt_slice_spec_parse(&sh, &y, sb) != CKPT_OK || ckpt_slice_intersect(&z, &x, &y) != 1)
        return 0;
    int found = 0;
    for (size_t k = 0; k < l->tensor.n_pieces; k++) {
        const Mpickpt__Piece *p = l->ptrs[k];
        ckpt_slice s;
        ckpt_slice_init(&s, l->nd, p->start, p->count);
        found |= (ckpt_slice_equal(&s, &x) ? 1 : 0) | (ckpt_slice_equal(&s, &y) ? 2 : 0);
    }
    return found == 3;
}

/* Small random tensors cut into random boxes, then broken (or not) at random; the validator's
 * verdict and message class must match an element-by-element count. */
static void test_random(void)
{
    enum { CAP = 40 };
    int seen[5] = { 0, 0, 0, 0, 0 };
    for (int round = 0; round < 20000; round++) {
        int nd = 1 + (int)rnd(4);
        int64_t shape[CKPT_MAX_DIMS], zero[CKPT_MAX_DIMS] = { 0 };
        int64_t total = 1;
        for (int d = 0; d < nd; d++) {
            shape[d] = 1 + (int64_t)rnd(d == 0 ? 9 : 5);
            total *= shape[d];
        }
        layout l;
        layout_alloc(&l, nd, shape, CAP);
        size_t n = 0;
        guillotine(&l, &n, CAP, zero, shape);
        l.n = l.tensor.n_pieces = n;
        /* break it: 0 none, 1 move, 2 grow or shrink, 3 drop, 4 random box, 5 duplicate */
        int how = (int)rnd(6);
        Mpickpt__Piece *m = &l.pieces[rnd(n)];
        int d = (int)rnd((uint64_t)nd);
        if (how == 1 && m->start[d] + m->count[d] < shape[d])
            m->start[d]++;
        else if (how == 1 && m->start[d] > 0)
            m->start[d]--;
        else if (how == 2 && m->start[d] + m->count[d] < shape[d] && rnd(2))
            m->count[d]++;
        else if (how == 2)
            m->count[d]--;
        else if (how == 3 && n > 1)
            *m = l.pieces[--l.tensor.n_pieces];
        else if (how == 4 || how == 5) {
            Mpickpt__Piece *p = &l.pieces[l.tensor.n_pieces++];
            for (int e = 0; e < nd; e++) {
                p->start[e] = how == 5 ? m->start[e] : (int64_t)rnd((uint64_t)shape[e]);
                p->count[e] = how == 5 ? m->count[e]
                                       : 1 + (int64_t)rnd((uint64_t)(shape[e] - p->start[e]));
            }
        }
        for (size_t k = 0; k < l.tensor.n_pieces; k++) {
            l.ptrs[k] = &l.pieces[k];
            l.pieces[k].rank = (int32_t)k;
            set_bytes(&l, &l.pieces[k]);
        }
        /* the oracle */
        int dup = 0, multi = 0;
        int64_t covered = 0;
        for (size_t a = 0; a < l.tensor.n_pieces; a++) {
            const Mpickpt__Piece *p = &l.pieces[a];
            covered += box_elems(p, nd);
            for (size_t b = a + 1; b < l.tensor.n_pieces; b++) {
                const Mpickpt__Piece *q = &l.pieces[b];
                dup |= memcmp(p->start, q->start, (size_t)nd * sizeof *p->start) == 0 &&
                       memcmp(p->count, q->count, (size_t)nd * sizeof *p->count) == 0;
                multi |= boxes_meet(p->start, p->count, q->start, q->count, nd);
            }
        }
        int rc = validate(&l);
        if (dup) {
            seen[0]++;
            CHECK_MSG(rc == CKPT_ECORRUPT && strstr(last_msg(), "duplicate slice"),
                      "round %d: duplicate: %s", round, last_msg());
        } else if (!multi && covered == total) {
            seen[1]++;
            CHECK_MSG(rc == CKPT_OK, "round %d: a valid tiling refused: %s", round, last_msg());
        } else if (covered < total) {
            seen[2]++; /* a gap (and perhaps overlaps too): either message, true */
            CHECK_MSG(rc == CKPT_ECORRUPT && (strstr(last_msg(), "(gap)") ||
                                              overlap_message_true(&l, last_msg())),
                      "round %d: gap: %s", round, last_msg());
        } else {
            seen[multi ? 3 : 4]++; /* covered >= total and not exact: something overlaps */
            CHECK_MSG(rc == CKPT_ECORRUPT && overlap_message_true(&l, last_msg()),
                      "round %d: overlap: %s", round, last_msg());
        }
        layout_free(&l);
    }
    CHECK_EQ_INT(seen[4], 0); /* the oracle is consistent */
    CHECK(seen[0] > 100 && seen[1] > 1000 && seen[2] > 1000 && seen[3] > 1000);
    printf("random tilings: %d duplicate, %d valid, %d short, %d overlapping\n", seen[0], seen[1],
           seen[2], seen[3]);
}

/* Scalars and empty tensors keep their rules: one piece of a scalar, any distinct empty boxes of
 * an empty tensor. */
static void test_degenerate(void)
{
    layout l;
    layout_alloc(&l, 0, NULL, 2);
    l.pieces[0].bytes = l.pieces[1].bytes = 1;
    l.tensor.n_pieces = 1;
    CHECK_RC(validate(&l), CKPT_OK);
    l.tensor.n_pieces = 2;
    CHECK_RC(validate(&l), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "duplicate slice (scalar)"), "%s", last_msg());
    layout_free(&l);

    int64_t shape[2] = { 0, 4 };
    layout_alloc(&l, 2, shape, 2);
    l.pieces[0].count[1] = 4;
    l.pieces[1].start[1] = 1;
    l.pieces[1].count[1] = 3;
    CHECK_RC(validate(&l), CKPT_OK);

    /* an empty piece inside a tiling covers nothing and overlaps nothing */
    int64_t shape2[2] = { 4, 4 };
    layout_free(&l);
    layout_alloc(&l, 2, shape2, 3);
    int64_t box[3][4] = { { 0, 0, 4, 2 }, { 0, 2, 4, 2 }, { 1, 1, 0, 2 } };
    for (int k = 0; k < 3; k++) {
        l.pieces[k].start[0] = box[k][0];
        l.pieces[k].start[1] = box[k][1];
        l.pieces[k].count[0] = box[k][2];
        l.pieces[k].count[1] = box[k][3];
        set_bytes(&l, &l.pieces[k]);
    }
    CHECK_RC(validate(&l), CKPT_OK);
    layout_free(&l);
}

/* ---- names, dataset paths, save counter ----------------------------------------------------- */

static void test_utf8(void)
{
    static const struct {
        const char *s;
        int ok;
    } cases[] = {
        { "", 1 },
        { "plain/ascii_name:0", 1 },
        /* größe/日本/🙂 */
        { "gr\xc3\xb6\xc3\x9f" "e/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x99\x82", 1 },
        { "\xc2\x80", 1 },                 /* U+0080 */
        { "\xdf\xbf", 1 },                 /* U+07FF */
        { "\xe0\xa0\x80", 1 },             /* U+0800 */
        { "\xed\x9f\xbf", 1 },             /* U+D7FF */
        { "\xee\x80\x80", 1 },             /* U+E000 */
        { "\xef\xbf\xbf", 1 },             /* U+FFFF */
        { "\xf0\x90\x80\x80", 1 },         /* U+10000 */
        { "\xf4\x8f\xbf\xbf", 1 },         /* U+10FFFF */
        { "\xc0\xaf", 0 },                 /* overlong '/' */
        { "\xc1\xbf", 0 },                 /* overlong */
        { "\xe0\x80\xaf", 0 },             /* overlong */
        { "\xe0\x9f\xbf", 0 },             /* overlong */
        { "\xf0\x80\x80\xaf", 0 },         /* overlong */
        { "\xf0\x8f\xbf\xbf", 0 },         /* overlong */
        { "\xed\xa0\x80", 0 },             /* surrogate U+D800 */
        { "\xed\xbf\xbf", 0 },             /* surrogate U+DFFF */
        { "\xf4\x90\x80\x80", 0 },         /* U+110000 */
        { "\xf5\x80\x80\x80", 0 },
        { "\xff", 0 },
        { "\xfe", 0 },
        { "abc\x80", 0 },                  /* lone continuation byte */
        { "\xbf" "abc", 0 },
        { "ab\xc3", 0 },                   /* truncated */
        { "ab\xe6\x97", 0 },
        { "ab\xf0\x9f\x99", 0 },
        { "\xe6\x97" "a", 0 },             /* continuation missing */
        { "\xf0\x9f\x99" "abcdefgh", 0 },
        { "0123456789abcdef\xc3\xa9" "0123456789abcdef", 1 },
        { "0123456789abcdef\xc3" "0123456789abcdef", 0 },
    };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(cases); i++)
        CHECK_MSG(ckpt__utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok,
                  "case %zu: utf8_valid(\"%s\") != %d", i, cases[i].s, cases[i].ok);
    CHECK(ckpt__utf8_valid(NULL, 0));
    CHECK(ckpt__utf8_valid("\xc3\xa9", 1) == 0); /* the length counts, not the NUL */
    CHECK(ckpt__utf8_valid("a\0b", 3) == 1);

    /* in an index: refused with the bytes escaped; from disk CKPT_ECORRUPT */
    int64_t shape[1] = { 4 };
    layout l;
    layout_alloc(&l, 1, shape, 1);
    l.pieces[0].count[0] = 4;
    set_bytes(&l, &l.pieces[0]);
    static const char *bad[] = { "w\xc0\xaf", "w\xed\xa0\x80", "w\x80", "w\xe6\x97", "w\xff" };
    static const char *esc[] = { "w\\xc0\\xaf", "w\\xed\\xa0\\x80", "w\\x80", "w\\xe6\\x97",
                                 "w\\xff" };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        snprintf(tensor_name, sizeof tensor_name, "%s", bad[i]);
        CHECK_RC(validate(&l), CKPT_ECORRUPT);
        CHECK_MSG(strstr(last_msg(), "not valid UTF-8") && strstr(last_msg(), esc[i]),
                  "bad name %zu: %s", i, last_msg());
        size_t len = mpickpt__index__get_packed_size(&l.idx);
        uint8_t *buf = malloc(len);
        mpickpt__index__pack(&l.idx, buf);
        Mpickpt__Index *got = NULL;
        CHECK_RC(ckpt__index_parse(&got, buf, len, "disk.index", NULL, 1), CKPT_ECORRUPT);
        CHECK(got == NULL && strstr(last_msg(), "disk.index"));
        free(buf);
    }
    snprintf(tensor_name, sizeof tensor_name, "%s", cases[2].s);
    CHECK_RC(validate(&l), CKPT_OK);
    snprintf(tensor_name, sizeof tensor_name, "x");
    layout_free(&l);

    /* in a merge of registrations: CKPT_EMISMATCH */
    Mpickpt__Fragment f = MPICKPT__FRAGMENT__INIT;
    size_t cap = 0;
    ckpt_shape s;
    ckpt_slice full;
    ckpt_shape_init(&s, 1, shape);
    ckpt_slice_full(&full, &s);
    CHECK_OK(ckpt__fragment_add(&f, &cap, cases[2].s, CKPT_UINT8, &s, CKPT_KIND_FULL, &full, "d0",
                                "/tensors/gr%C3%B6%C3%9Fe%2F", &full, 4, 0));
    CHECK_OK(ckpt__fragment_add(&f, &cap, "w\xff", CKPT_UINT8, &s, CKPT_KIND_FULL, &full, "d0",
                                "/tensors/w%FF", &full, 4, 0));
    CHECK_OK(ckpt__fragment_add_file(&f, "d0", 8));
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    hdr.format_version = 1;
    hdr.world_size = 1;
    hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    idx.header = &hdr;
    Mpickpt__Fragment *fr[1] = { &f };
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "'w\\xff' is not valid UTF-8"), "%s", last_msg());
    ckpt__index_merged_free(&idx);
    f.n_tensors = 1; /* the valid multi-byte name alone */
    CHECK_OK(ckpt__index_merge(&idx, fr, 1));
    ckpt__index_merged_free(&idx);
    f.n_tensors = 2;
    ckpt__fragment_free_built(&f);
}

static void test_dataset_paths(void)
{
    int64_t shape[1] = { 4 };
    layout l;
    layout_alloc(&l, 1, shape, 1);
    l.pieces[0].count[0] = 4;
    set_bytes(&l, &l.pieces[0]);
    static const struct {
        const char *path;
        int packed, ok;
    } cases[] = {
        { "/tensors/x", 0, 1 },
        { "/tensors/model%2Fdense%2Fkernel", 0, 1 },
        { "/tensors/w#4_0", 0, 1 },
        { "/tensors/%2E..", 0, 1 },
        { "/packs/rank-0", 1, 1 },
        { "/packs/rank-12345", 1, 1 },
        { "/tensors/", 0, 0 },
        { "/tensors", 0, 0 },
        { "/tensors/.", 0, 0 },
        { "/tensors/..", 0, 0 },
        { "/tensors/../x", 0, 0 },
        { "/tensors/a/b", 0, 0 },
        { "/tensors/a/", 0, 0 },
        { "/tensors//x", 0, 0 },
        { "/tensors/x/..", 0, 0 },
        { "tensors/x", 0, 0 },
        { "//tensors/x", 0, 0 },
        { "/other/x", 0, 0 },
        { "", 0, 0 },
        { "/packs/rank-0", 0, 0 },   /* a pack path without packed */
        { "/tensors/x", 1, 0 },      /* packed outside /packs/ */
        { "/packs/", 1, 0 },
        { "/packs/.", 1, 0 },
        { "/packs/..", 1, 0 },
        { "/packs/a/b", 1, 0 },
        { "/packs/../tensors/x", 1, 0 },
    };
    l.header.format_version = 2;
    for (size_t i = 0; i < CKPT__ARRAY_LEN(cases); i++) {
        char path[128];
        snprintf(path, sizeof path, "%s", cases[i].path);
        l.pieces[0].dataset = path;
        l.pieces[0].packed = cases[i].packed;
        int rc = validate(&l);
        CHECK_MSG(rc == (cases[i].ok ? CKPT_OK : CKPT_ECORRUPT), "'%s' (packed %d): %d %s",
                  cases[i].path, cases[i].packed, rc, last_msg());
        if (!cases[i].ok)
            CHECK_MSG(strstr(last_msg(), "bad dataset path"), "%s", last_msg());
    }
    l.pieces[0].dataset = NULL;
    l.pieces[0].packed = 0;
    CHECK_RC(validate(&l), CKPT_ECORRUPT);
    layout_free(&l);
}

static void test_counter(void)
{
    int64_t shape[1] = { 4 };
    layout l;
    layout_alloc(&l, 1, shape, 1);
    l.pieces[0].count[0] = 4;
    set_bytes(&l, &l.pieces[0]);
    static const struct {
        int64_t counter;
        int ok;
    } cases[] = {
        { 0, 1 }, { 1, 1 }, { CKPT__COUNTER_MAX, 1 }, { CKPT__COUNTER_MAX + 1, 0 }, { -1, 0 },
        { INT64_MAX, 0 }, { INT64_MIN, 0 },
    };
    CHECK_EQ_INT(CKPT__COUNTER_MAX, 1000000000000000LL);
    for (size_t i = 0; i < CKPT__ARRAY_LEN(cases); i++) {
        l.header.save_counter = cases[i].counter;
        int rc = validate(&l);
        CHECK_MSG(rc == (cases[i].ok ? CKPT_OK : CKPT_ECORRUPT), "counter %lld: %d %s",
                  (long long)cases[i].counter, rc, last_msg());
        if (!cases[i].ok)
            CHECK_MSG(strstr(last_msg(), "save counter"), "%s", last_msg());
    }
    l.header.save_counter = -1; /* a merge refuses it as a mismatch */
    CHECK_RC(ckpt__index_validate(&l.idx, CKPT_EMISMATCH, "merge"), CKPT_EMISMATCH);
    layout_free(&l);
}

int main(void)
{
    test_utf8();
    test_dataset_paths();
    test_counter();
    test_degenerate();
    test_random();
    test_hostile();
    test_scale();
    return CHECK_DONE();
}
