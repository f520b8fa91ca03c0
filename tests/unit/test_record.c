/* lib/record.h without mpirun: a written piece's CRC-32C and block checksums (one per
 * CKPT__CRC_BLOCK above one block), the record's ownership of names and block CRCs, its data files,
 * and the fragment made of it (every field equal to the record's), merged with another simulated
 * rank's into an index that validates (format 2 exactly when blocks or packing are used). */
#include "phases.h"

#include "index.h"
#include "record.h"

#include <stdint.h>

static uint8_t *pattern(size_t len, uint32_t seed)
{
    uint8_t *b = malloc(len ? len : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)x;
    }
    return b;
}

/* A piece of `elems` uint8 elements of a 1-d tensor of `total` at `start`. */
static ckpt__written piece_1d(const char *name, const char *dataset, int64_t total, int64_t start,
                              int64_t elems)
{
    ckpt__written w = { .name = name, .dtype = CKPT_UINT8, .kind = CKPT_KIND_PARTITIONED,
                        .dataset = dataset };
    ckpt_shape_init(&w.shape, 1, &total);
    ckpt_slice_init(&w.slice, 1, &start, &elems);
    int64_t zero = 0;
    ckpt_slice_init(&w.dataset_slice, 1, &zero, &elems);
    return w;
}

static void test_crcs(void)
{
    const size_t B = CKPT__CRC_BLOCK;
    static const struct {
        size_t len, blocks;
    } t[] = {
        { 0, 0 },     { 1, 0 },     { 100, 0 },         { B - 1, 0 },
        { B, 0 },     { B + 1, 2 }, { 2 * B, 2 },       { 2 * B + 7, 3 },
        { 3 * B + B / 2, 4 },
    };
    ckpt__record r;
    ckpt__record_init(&r);
    uint64_t sum = 0;
    for (size_t i = 0; i < CKPT__ARRAY_LEN(t); i++) {
        size_t len = t[i].len;
        uint8_t *data = pattern(len, (uint32_t)i);
        char name[32];
        snprintf(name, sizeof name, "t%zu", i);
        ckpt__written w = piece_1d(name, "/tensors/x", (int64_t)len, 0, (int64_t)len);
        w.crc = 0xdeadbeef; /* computed, not taken from w */
        CHECK_OK(ckpt__record_add_data(&r, &w, data, len));
        CHECK_EQ_INT(r.n, i + 1);
        const ckpt__written *x = &r.v[r.n - 1];
        CHECK_EQ_INT(x->bytes, len);
        CHECK_MSG(x->crc == ckpt_crc32c(data, len), "len %zu: crc %08x, expected %08x", len,
                  x->crc, ckpt_crc32c(data, len));
        CHECK_EQ_INT(x->n_block, t[i].blocks);
        CHECK_EQ_INT(x->block_crc != NULL, t[i].blocks > 0);
        for (size_t b = 0; b < x->n_block && x->block_crc; b++) {
            size_t off = b * B, n = len - off < B ? len - off : B;
            CHECK_MSG(x->block_crc[b] == ckpt_crc32c(data + off, n),
                      "len %zu block %zu: %08x, expected %08x", len, b, x->block_crc[b],
                      ckpt_crc32c(data + off, n));
        }
        /* the block CRCs together are the piece's: the last block ends the data */
        if (x->n_block)
            CHECK_EQ_INT((x->n_block - 1) * B < len && x->n_block * B >= len, 1);
        sum += len;
        free(data);
    }
    CHECK_EQ_INT(ckpt__record_bytes(&r), sum);
    ckpt__record_free(&r);
    CHECK(r.v == NULL && r.n == 0 && r.nfiles == 0);
    CHECK_EQ_INT(ckpt__record_bytes(&r), 0);
}

static void test_ownership_and_files(void)
{
    ckpt__record r;
    ckpt__record_init(&r);
    char name[32] = "layer/w", dataset[32] = "/tensors/layer%2Fw";
    ckpt__written w = piece_1d(name, dataset, 10, 0, 10);
    w.bytes = 10;
    w.crc = 0x12345678;
    w.n_block = 3;
    w.block_crc = malloc(3 * sizeof *w.block_crc); /* owned by the record from here on */
    w.block_crc[0] = 1;
    w.block_crc[1] = 2;
    w.block_crc[2] = 3;
    CHECK_OK(ckpt__record_add(&r, &w));
    strcpy(name, "changed");
    strcpy(dataset, "changed");
    CHECK(strcmp(r.v[0].name, "layer/w") == 0 && r.v[0].name != name);
    CHECK(strcmp(r.v[0].dataset, "/tensors/layer%2Fw") == 0 && r.v[0].dataset != dataset);
    CHECK_EQ_INT(r.v[0].crc, 0x12345678);
    CHECK(r.v[0].block_crc == w.block_crc && r.v[0].n_block == 3);
    /* many pieces: the array grows, earlier entries intact */
    for (int i = 0; i < 100; i++) {
        char n[32];
        snprintf(n, sizeof n, "p%d", i);
        ckpt__written x = piece_1d(n, "/packs/rank-0", 100, i, 1);
        x.bytes = 1;
        x.crc = (uint32_t)i;
        x.packed = 1;
        x.pack_offset = (uint64_t)i;
        CHECK_OK(ckpt__record_add(&r, &x));
    }
    CHECK_EQ_INT(r.n, 101);
    CHECK(strcmp(r.v[0].name, "layer/w") == 0);
    CHECK(strcmp(r.v[100].name, "p99") == 0 && r.v[100].pack_offset == 99);
    CHECK_EQ_INT(ckpt__record_bytes(&r), 110);

    /* at most two data files per record (the per-rank file and nothing else, or the shared one) */
    CHECK_OK(ckpt__record_add_file(&r, "m.data-00001-of-00002", 4096));
    CHECK_OK(ckpt__record_add_file(&r, "m.data-00000-of-00001", 8192));
    CHECK_EQ_INT(r.nfiles, 2);
    CHECK_RC(ckpt__record_add_file(&r, "third", 1), CKPT_ERROR);
    CHECK_EQ_INT(r.nfiles, 2);
    CHECK(strcmp(r.files[0].name, "m.data-00001-of-00002") == 0 && r.files[0].bytes == 4096);
    CHECK(strcmp(r.files[1].name, "m.data-00000-of-00001") == 0 && r.files[1].bytes == 8192);
    ckpt__record_free(&r); /* frees the names, datasets and block CRCs (LeakSanitizer) */
}

/* Every field of the fragment equals the record's. */
static void check_fragment(const Mpickpt__Fragment *f, const ckpt__record *r, int rank,
                           const char *file)
{
    CHECK_EQ_INT(f->rank, rank);
    CHECK_EQ_INT(f->n_tensors, r->n);
    for (size_t i = 0; i < f->n_tensors && i < r->n; i++) {
        const Mpickpt__Tensor *t = f->tensors[i];
        const ckpt__written *w = &r->v[i];
        CHECK(strcmp(t->name, w->name) == 0 && t->name != w->name);
        CHECK_EQ_INT(t->dtype, w->dtype);
        CHECK_EQ_INT(t->kind, w->kind);
        CHECK_EQ_INT(t->n_shape, w->shape.ndims);
        for (int d = 0; d < w->shape.ndims && (size_t)d < t->n_shape; d++)
            CHECK_EQ_INT(t->shape[d], w->shape.dims[d]);
        CHECK_EQ_INT(t->n_pieces, 1);
        if (t->n_pieces != 1)
            continue;
        const Mpickpt__Piece *p = t->pieces[0];
        int nd = w->slice.ndims;
        CHECK(p->n_start == (size_t)nd && p->n_count == (size_t)nd &&
              p->n_dataset_start == (size_t)nd);
        for (int d = 0; d < nd && p->n_start == (size_t)nd && p->n_dataset_start == (size_t)nd;
             d++) {
            CHECK_EQ_INT(p->start[d], w->slice.start[d]);
            CHECK_EQ_INT(p->count[d], w->slice.count[d]);
            CHECK_EQ_INT(p->dataset_start[d], w->dataset_slice.start[d]);
        }
        CHECK_EQ_INT(p->rank, rank);
        CHECK(strcmp(p->file, file) == 0);
        CHECK(strcmp(p->dataset, w->dataset) == 0);
        CHECK_EQ_INT(p->bytes, w->bytes);
        CHECK_EQ_INT(p->crc32c, w->crc);
        CHECK_EQ_INT(p->packed, w->packed != 0);
        CHECK_EQ_INT(p->pack_offset, w->pack_offset);
        CHECK_EQ_INT(p->n_block_crc32c, w->n_block);
        CHECK_EQ_INT(p->block_bytes, w->n_block ? CKPT__CRC_BLOCK : 0);
        if (p->n_block_crc32c == w->n_block && w->n_block)
            CHECK(p->block_crc32c != w->block_crc &&
                  memcmp(p->block_crc32c, w->block_crc, w->n_block * sizeof *w->block_crc) == 0);
    }
    CHECK_EQ_INT(f->n_files, r->nfiles);
    for (size_t i = 0; i < f->n_files && i < r->nfiles; i++) {
        CHECK(strcmp(f->files[i]->name, r->files[i].name) == 0);
        CHECK_EQ_INT(f->files[i]->bytes, r->files[i].bytes);
    }
}

/* Two simulated ranks write a 1-d uint8 tensor of `total` bytes half each (rank 1's half in
 * blocks when large) and a packed 2x3 int32 tensor on rank 0; their records become fragments
 * that merge into an index that validates. */
static void test_fragments_merge(int64_t total, int pack, uint32_t want_version)
{
    ckpt__record r[2];
    Mpickpt__Fragment f[2];
    char file[2][64];
    int64_t half = total / 2;
    for (int rank = 0; rank < 2; rank++) {
        ckpt__record_init(&r[rank]);
        mpickpt__fragment__init(&f[rank]);
        snprintf(file[rank], sizeof file[rank], "m.data-%05d-of-00002", rank);
        int64_t start = rank ? half : 0, n = rank ? total - half : half;
        uint8_t *data = pattern((size_t)n, (uint32_t)rank + 7);
        ckpt__written w = piece_1d("big", "/tensors/big%3A0", total, start, n);
        CHECK_OK(ckpt__record_add_data(&r[rank], &w, data, (size_t)n));
        free(data);
        if (rank == 0) {
            int32_t small[6] = { 1, 2, 3, 4, 5, 6 };
            int64_t dims[2] = { 2, 3 }, zero[2] = { 0, 0 };
            ckpt__written s = { .name = "small", .dtype = CKPT_INT32, .kind = CKPT_KIND_FULL,
                                .dataset = pack ? "/packs/rank-0" : "/tensors/small",
                                .packed = pack, .pack_offset = pack ? 64 : 0 };
            ckpt_shape_init(&s.shape, 2, dims);
            ckpt_slice_full(&s.slice, &s.shape);
            ckpt_slice_init(&s.dataset_slice, 2, zero, dims);
            CHECK_OK(ckpt__record_add_data(&r[rank], &s, small, sizeof small));
        }
        CHECK_OK(ckpt__record_add_file(&r[rank], file[rank], 1000 + (uint64_t)rank));
        CHECK_OK(ckpt__record_fragment(&f[rank], &r[rank], rank, file[rank]));
        check_fragment(&f[rank], &r[rank], rank, file[rank]);
    }
    Mpickpt__Header h = MPICKPT__HEADER__INIT;
    h.format_version = CKPT_FORMAT_VERSION;
    h.world_size = 2;
    h.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    Mpickpt__Index m = MPICKPT__INDEX__INIT;
    m.header = &h;
    Mpickpt__Fragment *frags[2] = { &f[0], &f[1] };
    CHECK_OK(ckpt__index_merge(&m, frags, 2));
    CHECK_EQ_INT(m.n_tensors, 2);
    CHECK_EQ_INT(m.n_files, 2);
    if (m.n_tensors == 2) {
        CHECK(strcmp(m.tensors[0]->name, "big") == 0 && m.tensors[0]->n_pieces == 2);
        CHECK(strcmp(m.tensors[1]->name, "small") == 0 && m.tensors[1]->n_pieces == 1);
    }
    CHECK_EQ_INT(ckpt__index_format_version(&m), want_version);
    h.format_version = ckpt__index_format_version(&m);
    CHECK_OK(ckpt__index_validate(&m, CKPT_ECORRUPT, "record test"));
    ckpt__index_merged_free(&m);
    for (int rank = 0; rank < 2; rank++) {
        ckpt__fragment_free_built(&f[rank]);
        ckpt__record_free(&r[rank]);
    }
}

int main(void)
{
    phases_init("test_record");
    test_crcs();
    test_ownership_and_files();
    /* small pieces, unpacked: a format-1 index; packed or with block CRCs: format 2 */
    test_fragments_merge(1000, 0, 1);
    test_fragments_merge(1000, 1, 2);
    test_fragments_merge((int64_t)(5 * CKPT__CRC_BLOCK) / 2 * 2, 0, 2);
    return CHECK_DONE();
}
