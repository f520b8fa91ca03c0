/* lib/share.h without mpirun: a rank's share of an index. An index of R simulated ranks is merged
 * and validated (tensors split by rows over all ranks, by columns, on a 2-d grid, owned whole by
 * one rank, scalars, per-rank blobs); for many wanted boxes — every rank's own slice, random boxes,
 * whole tensors, names the index lacks, a name wanted twice — the packed share is unpacked and
 * compared with a brute-force selection: the same header, the wanted tensors that exist in name
 * order with their dtype, shape and kind, exactly the pieces whose box intersects the wanted box
 * (each field of each piece equal to the index's), and exactly the data files those pieces name. */
#include "check.h"

#include "fragment.h"
#include "index.h"
#include "share.h"
#include "validate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R 40 /* simulated ranks: the row-split tensors have more pieces than the sorted cut-off */

static uint32_t rng = 12345;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void file_name(char *out, size_t size, int rank)
{
    snprintf(out, size, "ck.data-%05d-of-%05d", rank, R);
}

/* Adds rank `rank`'s piece `box` of tensor `name` to its fragment. */
static void add_piece(Mpickpt__Fragment *f, size_t *cap, int rank, const char *name,
                      const ckpt_shape *sh, ckpt_kind kind, const ckpt_slice *box)
{
    char file[64], ds[128];
    file_name(file, sizeof file, rank);
    static unsigned serial;
    snprintf(ds, sizeof ds, "/tensors/d%u-%d", serial++, rank);
    int64_t n = 1;
    for (int d = 0; d < box->ndims; d++)
        n *= box->count[d];
    ckpt_slice dsl = *box;
    for (int d = 0; d < box->ndims; d++)
        dsl.start[d] = 0;
    CHECK_OK(ckpt__fragment_add(f, cap, name, CKPT_FLOAT32, sh, kind, box, file, ds, &dsl,
                                (uint64_t)n * 4, (uint32_t)next_rand()));
}

/* Splits [0, n) into R uneven parts: part r is [*start, *start + *count). */
static void split(int64_t n, int r, int64_t *start, int64_t *count)
{
    *start = n * r / R;
    *count = n * (r + 1) / R - *start;
}

static void build(Mpickpt__Fragment *f)
{
    for (int r = 0; r < R; r++) {
        size_t cap = 0;
        char file[64];
        f[r].rank = r;
        int64_t rows[2] = { 1000, 7 }, cols[2] = { 3, 400 }, grid[2] = { 80, 60 }, whole[2] = { 5, 5 };
        ckpt_shape sr, sc, sg, sw, s0;
        ckpt_shape_init(&sr, 2, rows);
        ckpt_shape_init(&sc, 2, cols);
        ckpt_shape_init(&sg, 2, grid);
        ckpt_shape_init(&sw, 2, whole);
        ckpt_shape_init(&s0, 0, NULL);
        int64_t st[2], ct[2];
        ckpt_slice b;
        /* rows: split along axis 0 */
        split(1000, r, &st[0], &ct[0]);
        st[1] = 0, ct[1] = 7;
        ckpt_slice_init(&b, 2, st, ct);
        add_piece(&f[r], &cap, r, "a/rows", &sr, CKPT_KIND_PARTITIONED, &b);
        /* cols: split along axis 1 */
        split(400, r, &st[1], &ct[1]);
        st[0] = 0, ct[0] = 3;
        ckpt_slice_init(&b, 2, st, ct);
        add_piece(&f[r], &cap, r, "b/cols", &sc, CKPT_KIND_PARTITIONED, &b);
        /* grid: 8 x 5 blocks */
        int gi = r / 5, gj = r % 5;
        st[0] = gi * 10, ct[0] = 10, st[1] = gj * 12, ct[1] = 12;
        ckpt_slice_init(&b, 2, st, ct);
        add_piece(&f[r], &cap, r, "c/grid", &sg, CKPT_KIND_PARTITIONED, &b);
        /* owned whole by one rank each */
        char name[64];
        snprintf(name, sizeof name, "d/full-%02d", r);
        ckpt_slice_full(&b, &sw);
        add_piece(&f[r], &cap, r, name, &sw, CKPT_KIND_FULL, &b);
        if (r == 3) {
            ckpt_slice_full(&b, &s0);
            add_piece(&f[r], &cap, r, "e/scalar", &s0, CKPT_KIND_FULL, &b);
        }
        file_name(file, sizeof file, r);
        CHECK_OK(ckpt__fragment_add_file(&f[r], file, 4096 + (uint64_t)r));
    }
}

/* The brute force: does piece p of tensor t intersect `want` (NULL: all)? */
static int overlaps(const Mpickpt__Tensor *t, const Mpickpt__Piece *p, const ckpt_slice *want)
{
    if (!want)
        return 1;
    ckpt_slice ps, region;
    ckpt__piece_slice(&ps, p, (int)t->n_shape);
    return ckpt_slice_intersect(&region, &ps, want) == 1;
}

static int same_piece(const Mpickpt__Piece *a, const Mpickpt__Piece *b)
{
    if (a->n_start != b->n_start || a->n_count != b->n_count || a->rank != b->rank ||
        strcmp(a->file, b->file) || strcmp(a->dataset, b->dataset) || a->bytes != b->bytes ||
        a->crc32c != b->crc32c || a->n_dataset_start != b->n_dataset_start)
        return 0;
    for (size_t d = 0; d < a->n_start; d++)
        if (a->start[d] != b->start[d] || a->count[d] != b->count[d])
            return 0;
    return 1;
}

typedef struct want {
    const char *name;
    int whole;
    ckpt_slice box;
} want;

/* Checks the share of `w` (n wants) against the brute force over `idx`. */
static void check_share(ckpt__share *sh, const Mpickpt__Index *idx, const want *w, size_t n,
                        const char *what)
{
    Mpickpt__Fragment f = MPICKPT__FRAGMENT__INIT;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        CHECK_OK(ckpt__share_want(&f, &cap, w[i].name, w[i].whole ? NULL : &w[i].box));
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK_OK(ckpt__share_pack(sh, &f, &bytes, &len));
    ckpt__fragment_free_built(&f);
    Mpickpt__Index *got = bytes ? mpickpt__index__unpack(NULL, len, bytes) : NULL;
    free(bytes);
    CHECK_MSG(got != NULL, "%s: the share does not unpack", what);
    if (!got)
        return;
    CHECK_MSG(got->header && got->header->world_size == idx->header->world_size &&
                  got->header->save_counter == idx->header->save_counter,
              "%s: header", what);
    /* expected tensors: the wanted names that exist, in index order */
    size_t k = 0;
    unsigned char *file_used = calloc(idx->n_files, 1);
    for (size_t ti = 0; ti < idx->n_tensors; ti++) {
        const Mpickpt__Tensor *t = idx->tensors[ti];
        int wanted = 0, whole = 0;
        const ckpt_slice *box = NULL;
        for (size_t i = 0; i < n; i++)
            if (strcmp(w[i].name, t->name) == 0) {
                wanted++;
                whole |= w[i].whole;
                box = &w[i].box;
            }
        if (!wanted)
            continue;
        if (wanted > 1 || whole)
            box = NULL;
        CHECK_MSG(k < got->n_tensors && strcmp(got->tensors[k]->name, t->name) == 0,
                  "%s: tensor %s missing or out of order", what, t->name);
        if (k >= got->n_tensors || strcmp(got->tensors[k]->name, t->name) != 0)
            break;
        const Mpickpt__Tensor *g = got->tensors[k++];
        CHECK_MSG(g->dtype == t->dtype && g->kind == t->kind && g->n_shape == t->n_shape &&
                      (t->n_shape == 0 || memcmp(g->shape, t->shape, t->n_shape * 8) == 0),
                  "%s: %s: dtype, kind or shape", what, t->name);
        size_t expect = 0;
        for (size_t j = 0; j < t->n_pieces; j++) {
            if (!overlaps(t, t->pieces[j], box))
                continue;
            expect++;
            int found = 0;
            for (size_t q = 0; q < g->n_pieces && !found; q++)
                found = same_piece(t->pieces[j], g->pieces[q]);
            CHECK_MSG(found, "%s: %s: piece %zu (rank %d) missing", what, t->name, j,
                      t->pieces[j]->rank);
            for (size_t fi = 0; fi < idx->n_files; fi++)
                if (strcmp(idx->files[fi]->name, t->pieces[j]->file) == 0)
                    file_used[fi] = 1;
        }
        CHECK_MSG(g->n_pieces == expect, "%s: %s: %zu pieces, expected %zu", what, t->name,
                  g->n_pieces, expect);
    }
    CHECK_MSG(k == got->n_tensors, "%s: %zu tensors, expected %zu", what, got->n_tensors, k);
    size_t nf = 0;
    for (size_t fi = 0; fi < idx->n_files; fi++) {
        if (!file_used[fi])
            continue;
        CHECK_MSG(nf < got->n_files && strcmp(got->files[nf]->name, idx->files[fi]->name) == 0 &&
                      got->files[nf]->bytes == idx->files[fi]->bytes,
                  "%s: data file %s missing or out of order", what, idx->files[fi]->name);
        nf++;
    }
    CHECK_MSG(nf == got->n_files, "%s: %zu data files, expected %zu", what, got->n_files, nf);
    free(file_used);
    mpickpt__index__free_unpacked(got, NULL);
}

static void random_box(ckpt_slice *b, const Mpickpt__Tensor *t)
{
    int64_t st[CKPT_MAX_DIMS], ct[CKPT_MAX_DIMS];
    for (size_t d = 0; d < t->n_shape; d++) {
        int64_t n = t->shape[d];
        st[d] = (int64_t)(next_rand() % (uint32_t)n);
        ct[d] = 1 + (int64_t)(next_rand() % (uint32_t)(n - st[d]));
        if (next_rand() % 8 == 0)
            ct[d] = 0; /* an empty box reads nothing */
    }
    ckpt_slice_init(b, (int)t->n_shape, st, ct);
}

int main(void)
{
    Mpickpt__Fragment f[R];
    for (int r = 0; r < R; r++)
        mpickpt__fragment__init(&f[r]);
    build(f);
    Mpickpt__Fragment *frags[R];
    for (int r = 0; r < R; r++)
        frags[r] = &f[r];
    Mpickpt__Header h = MPICKPT__HEADER__INIT;
    h.format_version = CKPT_FORMAT_VERSION;
    h.world_size = R;
    h.save_counter = 77;
    h.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    idx.header = &h;
    CHECK_OK(ckpt__index_merge(&idx, frags, R));
    h.format_version = ckpt__index_format_version(&idx);
    CHECK_OK(ckpt__index_validate(&idx, CKPT_ECORRUPT, "share test"));
    ckpt__share *sh = NULL;
    CHECK_OK(ckpt__share_new(&sh, &idx));

    /* every rank's own slices, as a restore at R ranks asks */
    for (int r = 0; r < R; r++) {
        want w[8];
        size_t n = 0;
        for (size_t ti = 0; ti < idx.n_tensors; ti++) {
            const Mpickpt__Tensor *t = idx.tensors[ti];
            for (size_t j = 0; j < t->n_pieces; j++)
                if (t->pieces[j]->rank == r && n < 8) {
                    w[n].name = t->name;
                    w[n].whole = 0;
                    ckpt__piece_slice(&w[n].box, t->pieces[j], (int)t->n_shape);
                    n++;
                }
        }
        char what[64];
        snprintf(what, sizeof what, "rank %d's own slices", r);
        check_share(sh, &idx, w, n, what);
    }
    /* random boxes of every tensor, names the index lacks, whole tensors, a name wanted twice */
    for (int round = 0; round < 400; round++) {
        want w[6];
        size_t n = 0;
        for (int i = 0; i < 4; i++) {
            const Mpickpt__Tensor *t = idx.tensors[next_rand() % idx.n_tensors];
            w[n].name = t->name;
            w[n].whole = next_rand() % 6 == 0;
            random_box(&w[n].box, t);
            n++;
        }
        if (round % 5 == 0)
            w[n++] = (want){ .name = "zz/not-there", .whole = 1 };
        if (round % 7 == 0) {
            w[n] = w[0];
            random_box(&w[n].box, idx.tensors[0]);
            w[n].name = idx.tensors[0]->name;
            w[0].name = idx.tensors[0]->name;
            n++;
        }
        char what[64];
        snprintf(what, sizeof what, "random round %d", round);
        check_share(sh, &idx, w, n, what);
    }
    /* nothing wanted: the header alone */
    check_share(sh, &idx, NULL, 0, "no wants");
    ckpt__share_free(sh);
    ckpt__index_merged_free(&idx);
    for (int r = 0; r < R; r++)
        ckpt__fragment_free_built(&f[r]);
    return CHECK_DONE();
}
