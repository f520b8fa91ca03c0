/* lib/merge.h without mpirun: the hierarchical merge (node leaders merge their node's fragments with
 * ckpt__fragment_merge, the chief merges their results with ckpt__index_merge) gives the flat
 * merge's index byte for byte, for nodes of every size from 1 rank to all, uneven nodes, two levels
 * of leaders and ranks with no tensors; the results survive packing and unpacking (as they travel
 * to the chief); nodes of non-consecutive ranks give the same tensors and pieces, listed node by
 * node. Disagreeing dtypes, overlaps, gaps and empty names fail the hierarchical merge as they fail
 * the flat one, naming the ranks that registered them (not their leaders). */
#include "check.h"
#include "index.h"
#include "mpickpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R 24 /* simulated ranks */

static const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e && e->message ? e->message : "";
}

/* The faults a test can plant in rank `fault_rank`'s fragment. */
enum fault { NONE, DTYPE, OVERLAP, GAP, EMPTY_NAME, SHAPE };

static void add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dt, int nd,
                const int64_t *dims, ckpt_kind kind, const int64_t *st, const int64_t *ct,
                const char *file, const char *dset)
{
    ckpt_shape shape;
    ckpt_slice slice, dslice;
    int64_t zero[4] = { 0, 0, 0, 0 };
    CHECK_OK(ckpt_shape_init(&shape, nd, dims));
    CHECK_OK(ckpt_slice_init(&slice, nd, st, ct));
    CHECK_OK(ckpt_slice_init(&dslice, nd, zero, ct));
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= ct[d];
    CHECK_OK(ckpt__fragment_add(f, cap, name, dt, &shape, kind, &slice, file, dset, &dslice,
                                (uint64_t)n * ckpt_dtype_size(dt), (uint32_t)(n * 7 + 1)));
}

/*
 * Rank r's fragment: a mix of what a save holds. Ranks 17 and 22 hold nothing (their fragment has no
 * tensor and no file). The others: a row-split matrix over all of them (uneven rows), a 2-D grid
 * over ranks 0..15 (4x4 blocks), a vector split over ranks 0..5 in two pieces per rank (one entry
 * with two pieces), a tensor split over ranks 8..11 as two entries per rank (the same name twice in
 * one fragment), a packed piece with block checksums per rank, full tensors of their own and
 * replicated primaries spread over the ranks.
 */
static void make_fragment(Mpickpt__Fragment *f, int r, enum fault fault, int fault_rank)
{
    size_t cap = 0;
    char file[64], name[128], dset[160];
    mpickpt__fragment__init(f);
    f->rank = r;
    if (r == 17 || r == 22)
        return;
    snprintf(file, sizeof file, "ckpt-1.data-%05d-of-%05d", r, R);
    int faulty = r == fault_rank;
    int na = 0, me = -1; /* active ranks, and r's place among them */
    for (int q = 0; q < R; q++)
        if (q != 17 && q != 22) {
            if (q == r)
                me = na;
            na++;
        }

    /* rows split over the active ranks */
    {
        int64_t dims[2] = { 3 * na + 5, 8 };
        int64_t r0 = (int64_t)me * dims[0] / na, r1 = (int64_t)(me + 1) * dims[0] / na;
        if (faulty && fault == OVERLAP)
            r0--; /* one row also held by the rank before */
        if (faulty && fault == GAP)
            r1--;
        int64_t st[2] = { r0, 0 }, ct[2] = { r1 - r0, 8 };
        add(f, &cap, "model/layer_00/dense/kernel", faulty && fault == DTYPE ? CKPT_FLOAT64
                                                                             : CKPT_FLOAT32,
            2, dims, CKPT_KIND_PARTITIONED, st, ct, file, "/tensors/model%2Flayer_00%2Fdense");
    }
    /* a 4x4 grid over ranks 0..15 */
    if (r < 16) {
        int64_t dims[2] = { 16, faulty && fault == SHAPE ? 21 : 20 },
                st[2] = { (r / 4) * 4, (r % 4) * 5 }, ct[2] = { 4, 5 };
        add(f, &cap, "model/layer_01/attn/qkv", CKPT_BFLOAT16, 2, dims, CKPT_KIND_PARTITIONED, st,
            ct, file, "/tensors/model%2Flayer_01%2Fattn%2Fqkv");
    }
    /* two pieces in one entry, ranks 0..5 */
    if (r < 6) {
        Mpickpt__Tensor *t;
        int64_t dims[1] = { 60 };
        ckpt_shape shape;
        ckpt_shape_init(&shape, 1, dims);
        CHECK_OK(ckpt__fragment_tensor(&t, f, &cap, "model/embed/table", CKPT_INT64, &shape,
                                       CKPT_KIND_PARTITIONED, 2));
        for (int k = 0; k < 2; k++) {
            int64_t st = r * 10 + k * 5, ct = 5, z = 0;
            ckpt_slice s, ds;
            ckpt_slice_init(&s, 1, &st, &ct);
            ckpt_slice_init(&ds, 1, &z, &ct);
            snprintf(dset, sizeof dset, "/tensors/model%%2Fembed%%2Ftable#%lld", (long long)st);
            CHECK_OK(ckpt__fragment_piece(t, (size_t)k, r, &s, file, dset, &ds, 40, (uint32_t)st));
        }
    }
    /* the same name in two entries of one fragment, ranks 8..11 */
    if (r >= 8 && r < 12) {
        int64_t dims[1] = { 16 };
        for (int k = 0; k < 2; k++) {
            int64_t st[1] = { (r - 8) * 4 + k * 2 }, ct[1] = { 2 };
            snprintf(dset, sizeof dset, "/tensors/model%%2Fbias#%lld", (long long)st[0]);
            add(f, &cap, "model/bias", CKPT_INT32, 1, dims, CKPT_KIND_PARTITIONED, st, ct, file,
                dset);
        }
    }
    /* a packed piece with block checksums (format 2) */
    {
        snprintf(name, sizeof name, "model/packed/rank_%02d", r);
        int64_t dims[1] = { 1000 }, st[1] = { 0 }, ct[1] = { 1000 };
        add(f, &cap, name, CKPT_UINT8, 1, dims, CKPT_KIND_FULL, st, ct, file, "/packs/p0");
        Mpickpt__Piece *p = f->tensors[f->n_tensors - 1]->pieces[0];
        p->packed = 1;
        p->pack_offset = 4096;
        p->block_bytes = 256;
        p->n_block_crc32c = 4;
        p->block_crc32c = calloc(4, sizeof *p->block_crc32c);
        CHECK(p->block_crc32c != NULL);
    }
    /* full tensors of its own, and replicated primaries (tensor g's primary is rank g % R) */
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "model/experts/rank_%02d/expert_%d/w", r, i);
        int64_t dims[2] = { 4, 4 }, st[2] = { 0, 0 };
        add(f, &cap, faulty && fault == EMPTY_NAME && i == 1 ? "" : name, CKPT_FLOAT16, 2, dims,
            CKPT_KIND_FULL, st, dims, file, "/tensors/e");
    }
    for (int g = r; g < 3 * R; g += R) {
        snprintf(name, sizeof name, "model/norm_%03d/gamma", g);
        int64_t dims[1] = { 32 }, st[1] = { 0 };
        add(f, &cap, name, CKPT_FLOAT32, 1, dims, CKPT_KIND_REPLICATED, st, dims, file,
            "/tensors/n");
    }
    CHECK_OK(ckpt__fragment_add_file(f, file, 1 << 20));
}

static void header(Mpickpt__Header *h)
{
    mpickpt__header__init(h);
    h->format_version = 2;
    h->endianness = MPICKPT__ENDIANNESS__LITTLE;
    h->world_size = R;
    h->layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    h->save_counter = 3;
    h->producer = "test_merge";
}

/* The packed index of a merge of `frags`, or NULL when it fails (*rc: its status). */
static uint8_t *merged_bytes(size_t *len, int *rc, Mpickpt__Fragment *const *frags, size_t n)
{
    Mpickpt__Header h;
    Mpickpt__Index idx;
    header(&h);
    mpickpt__index__init(&idx);
    idx.header = &h;
    uint8_t *buf = NULL;
    *len = 0;
    if ((*rc = ckpt__index_merge(&idx, frags, n)) == CKPT_OK) {
        *len = mpickpt__index__get_packed_size(&idx);
        buf = malloc(*len ? *len : 1);
        CHECK(buf && mpickpt__index__pack(&idx, buf) == *len);
    }
    ckpt__index_merged_free(&idx);
    return buf;
}

/* A fragment as the next level receives it: packed by the sender, unpacked by the receiver. */
static Mpickpt__Fragment *travel(const Mpickpt__Fragment *f)
{
    size_t len = mpickpt__fragment__get_packed_size(f);
    uint8_t *buf = malloc(len ? len : 1);
    CHECK(buf && mpickpt__fragment__pack(f, buf) == len);
    Mpickpt__Fragment *u = mpickpt__fragment__unpack(NULL, len, buf);
    CHECK(u != NULL);
    free(buf);
    return u;
}

/*
 * The hierarchical merge of frags[0..n) in nodes given by `node_of` (node index per fragment;
 * nodes listed in order 0..nnodes-1, each taking its fragments in their order), with a second
 * level of leaders when `level2` > 0 (groups of `level2` consecutive node results). Returns the
 * chief's packed index (NULL on failure, *rc its status: the first failing step's).
 */
static uint8_t *hier_bytes(size_t *len, int *rc, Mpickpt__Fragment *const *frags, size_t n,
                           const int *node_of, int nnodes, int level2)
{
    Mpickpt__Fragment *res[R] = { NULL }, *sent[R] = { NULL }, *mine[R] = { NULL };
    uint8_t *out = NULL;
    int nres = 0;
    *rc = CKPT_OK;
    *len = 0;
    for (int k = 0; k < nnodes && *rc == CKPT_OK; k++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (node_of[i] == k)
                mine[m++] = frags[i];
        Mpickpt__Fragment part;
        *rc = ckpt__fragment_merge(&part, mine, m);
        if (*rc == CKPT_OK) {
            CHECK_EQ_INT(part.rank, m ? mine[0]->rank : 0);
            sent[nres++] = travel(&part);
        }
        ckpt__fragment_merged_free(&part);
    }
    if (*rc == CKPT_OK && level2 > 0) { /* leaders of leaders */
        int n2 = 0;
        for (int a = 0; a < nres && *rc == CKPT_OK; a += level2) {
            int b = a + level2 < nres ? a + level2 : nres;
            Mpickpt__Fragment part;
            *rc = ckpt__fragment_merge(&part, sent + a, (size_t)(b - a));
            if (*rc == CKPT_OK)
                res[n2++] = travel(&part);
            ckpt__fragment_merged_free(&part);
        }
        for (int i = 0; i < nres; i++)
            mpickpt__fragment__free_unpacked(sent[i], NULL);
        memcpy(sent, res, (size_t)n2 * sizeof *res);
        nres = n2;
    }
    if (*rc == CKPT_OK)
        out = merged_bytes(len, rc, sent, (size_t)nres);
    for (int i = 0; i < nres; i++)
        mpickpt__fragment__free_unpacked(sent[i], NULL);
    return out;
}

static uint32_t rng_state = 12345;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state % n;
}

/* Consecutive nodes: every size, uneven random splits, two levels; all equal to the flat merge. */
static void test_equal_to_flat(void)
{
    Mpickpt__Fragment f[R], *fp[R];
    for (int r = 0; r < R; r++) {
        make_fragment(&f[r], r, NONE, -1);
        fp[r] = &f[r];
    }
    size_t flen, hlen;
    int rc;
    uint8_t *flat = merged_bytes(&flen, &rc, fp, R);
    CHECK_OK(rc);
    CHECK(flat && flen > 1000);
    /* sanity: the flat index is what the fragments hold */
    Mpickpt__Index *idx = flat ? mpickpt__index__unpack(NULL, flen, flat) : NULL;
    CHECK(idx != NULL);
    if (idx) {
        CHECK_OK(ckpt__index_validate(idx, CKPT_ECORRUPT, "flat"));
        size_t pieces = 0;
        for (size_t i = 0; i < idx->n_tensors; i++)
            pieces += idx->tensors[i]->n_pieces;
        /* 22 active ranks: rows 22, grid 16, embed 12, bias 8, packed 22, experts 66, norms 66 */
        CHECK_EQ_INT(pieces, 22 + 16 + 12 + 8 + 22 + 66 + 66);
        CHECK_EQ_INT(idx->n_files, 22);
        mpickpt__index__free_unpacked(idx, NULL);
    }

    int node_of[R];
    for (int k = 1; k <= R; k++) { /* nodes of k ranks (the last one shorter) */
        for (int level2 = 0; level2 <= 3; level2 += 3) {
            for (int r = 0; r < R; r++)
                node_of[r] = r / k;
            uint8_t *h = hier_bytes(&hlen, &rc, fp, R, node_of, (R + k - 1) / k, level2);
            CHECK_OK(rc);
            CHECK_MSG(h && hlen == flen && memcmp(h, flat, flen) == 0,
                      "nodes of %d ranks (level2 %d): index of %zu bytes differs from the flat "
                      "merge's (%zu bytes)",
                      k, level2, hlen, flen);
            free(h);
        }
    }
    for (int trial = 0; trial < 50; trial++) { /* uneven consecutive nodes, some empty */
        int nn = 0;
        for (int r = 0; r < R; r++) {
            if (r > 0 && rnd(3) == 0)
                nn += 1 + (int)rnd(2) * (int)rnd(2); /* sometimes a node with no rank */
            node_of[r] = nn;
        }
        uint8_t *h = hier_bytes(&hlen, &rc, fp, R, node_of, nn + 1, (int)rnd(4));
        CHECK_OK(rc);
        CHECK_MSG(h && hlen == flen && memcmp(h, flat, flen) == 0, "trial %d differs", trial);
        free(h);
    }
    /* a partial merge of nothing, and of one empty fragment, merge to nothing at the chief */
    Mpickpt__Fragment part;
    CHECK_OK(ckpt__fragment_merge(&part, NULL, 0));
    CHECK(part.n_tensors == 0 && part.n_files == 0);
    ckpt__fragment_merged_free(&part);
    CHECK_OK(ckpt__fragment_merge(&part, &fp[17], 1));
    CHECK(part.n_tensors == 0 && part.n_files == 0 && part.rank == 17);
    ckpt__fragment_merged_free(&part);
    ckpt__fragment_merged_free(NULL);

    /* a node of ranks 8..11: the tensor they split (two entries each) is one entry of 8 pieces,
     * sorted by name, its pieces in rank order */
    CHECK_OK(ckpt__fragment_merge(&part, fp + 8, 4));
    CHECK_EQ_INT(part.rank, 8);
    CHECK_EQ_INT(part.n_files, 4);
    for (size_t i = 1; i < part.n_tensors; i++)
        CHECK(strcmp(part.tensors[i - 1]->name, part.tensors[i]->name) < 0);
    int found = 0;
    for (size_t i = 0; i < part.n_tensors; i++) {
        const Mpickpt__Tensor *t = part.tensors[i];
        if (strcmp(t->name, "model/bias") != 0)
            continue;
        found = 1;
        CHECK_EQ_INT(t->n_pieces, 8);
        for (size_t j = 0; j < t->n_pieces; j++) {
            CHECK_EQ_INT(t->pieces[j]->rank, 8 + (int)j / 2);
            CHECK_EQ_INT(t->pieces[j]->start[0], (int64_t)j * 2);
        }
    }
    CHECK(found);
    ckpt__fragment_merged_free(&part);

    free(flat);
    for (int r = 0; r < R; r++)
        ckpt__fragment_free_built(&f[r]);
}

/* Nodes of non-consecutive ranks (round robin): a valid index with the same tensors and, per
 * tensor, the same pieces, listed node by node. */
static void test_round_robin(void)
{
    Mpickpt__Fragment f[R], *fp[R];
    for (int r = 0; r < R; r++) {
        make_fragment(&f[r], r, NONE, -1);
        fp[r] = &f[r];
    }
    size_t flen, hlen;
    int rc, node_of[R];
    uint8_t *flat = merged_bytes(&flen, &rc, fp, R);
    for (int r = 0; r < R; r++)
        node_of[r] = r % 5;
    uint8_t *h = hier_bytes(&hlen, &rc, fp, R, node_of, 5, 0);
    CHECK_OK(rc);
    Mpickpt__Index *a = flat ? mpickpt__index__unpack(NULL, flen, flat) : NULL;
    Mpickpt__Index *b = h ? mpickpt__index__unpack(NULL, hlen, h) : NULL;
    CHECK(a && b);
    if (a && b) {
        CHECK_OK(ckpt__index_validate(b, CKPT_ECORRUPT, "round robin"));
        CHECK_EQ_INT(a->n_tensors, b->n_tensors);
        CHECK_EQ_INT(a->n_files, b->n_files);
        int reordered = 0;
        for (size_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
            const Mpickpt__Tensor *x = a->tensors[i], *y = b->tensors[i];
            CHECK(strcmp(x->name, y->name) == 0 && x->n_pieces == y->n_pieces);
            for (size_t j = 0; j < x->n_pieces && j < y->n_pieces; j++) {
                /* y's pieces: node by node, each node's in rank order */
                size_t k = 0;
                while (k < y->n_pieces && !(y->pieces[k]->rank == x->pieces[j]->rank &&
                                            y->pieces[k]->start[0] == x->pieces[j]->start[0]))
                    k++;
                CHECK_MSG(k < y->n_pieces, "tensor %s: piece %zu missing", x->name, j);
                reordered |= k != j;
                if (j > 0)
                    CHECK(y->pieces[j - 1]->rank % 5 < y->pieces[j]->rank % 5 ||
                          (y->pieces[j - 1]->rank % 5 == y->pieces[j]->rank % 5 &&
                           y->pieces[j - 1]->rank <= y->pieces[j]->rank));
            }
        }
        CHECK(reordered); /* the contract's caveat is real: not byte-identical */
    }
    mpickpt__index__free_unpacked(a, NULL);
    mpickpt__index__free_unpacked(b, NULL);
    free(flat);
    free(h);
    for (int r = 0; r < R; r++)
        ckpt__fragment_free_built(&f[r]);
}

/* A fault planted in one rank fails the hierarchical merge as it fails the flat one, the message
 * naming that rank, whether the fault is inside a node or across nodes. */
static void test_faults(void)
{
    static const struct {
        enum fault fault;
        int rank;
        int rc;
        const char *flat_has, *hier_has; /* substrings of the messages */
    } cases[] = {
        { DTYPE, 6, CKPT_EMISMATCH, "but rank 6 registered float64", "rank 6 registered float64" },
        { DTYPE, 0, CKPT_EMISMATCH, "rank 0 registered float64", "rank 0 registered float64" },
        /* every dimension shown, and what differs (issue 29: "float64/1-d/replicated" twice) */
        { SHAPE, 5, CKPT_EMISMATCH,
          "registered bfloat16 [16,20] partitioned but rank 5 registered bfloat16 [16,21] "
          "partitioned (the shapes differ)",
          "rank 5 registered bfloat16 [16,21] partitioned" },
        { OVERLAP, 12, CKPT_EMISMATCH, "(rank 12)", "(rank 12)" },
        { GAP, 20, CKPT_EMISMATCH, "(gap)", "(gap)" },
        { EMPTY_NAME, 13, CKPT_EINVAL, "rank 13 registered a tensor with an empty name",
          "rank 13 registered a tensor with an empty name" },
    };
    for (size_t c = 0; c < CKPT__ARRAY_LEN(cases); c++) {
        Mpickpt__Fragment f[R], *fp[R];
        for (int r = 0; r < R; r++) {
            make_fragment(&f[r], r, cases[c].fault, cases[c].rank);
            fp[r] = &f[r];
        }
        size_t len;
        int rc, node_of[R];
        char flat_msg[1024];
        uint8_t *b = merged_bytes(&len, &rc, fp, R);
        CHECK_MSG(rc == cases[c].rc && !b, "case %zu: flat merge returned %d", c, rc);
        snprintf(flat_msg, sizeof flat_msg, "%s", last_msg());
        CHECK_MSG(strstr(flat_msg, cases[c].flat_has), "case %zu: flat message: %s", c, flat_msg);
        free(b);
        for (int k = 1; k <= R; k *= 2) { /* the fault inside a node, or across nodes */
            for (int r = 0; r < R; r++)
                node_of[r] = r / k;
            b = hier_bytes(&len, &rc, fp, R, node_of, (R + k - 1) / k, k == 4 ? 2 : 0);
            CHECK_MSG(rc == cases[c].rc && !b, "case %zu, nodes of %d: returned %d", c, k, rc);
            CHECK_MSG(strstr(last_msg(), cases[c].hier_has), "case %zu, nodes of %d: message: %s",
                      c, k, last_msg());
            /* the chief's validation sees the flat merge's index: the same words */
            if (cases[c].fault == OVERLAP || cases[c].fault == GAP)
                CHECK_MSG(strcmp(last_msg(), flat_msg) == 0, "case %zu, nodes of %d: '%s' vs '%s'",
                          c, k, last_msg(), flat_msg);
            free(b);
        }
        for (int r = 0; r < R; r++)
            ckpt__fragment_free_built(&f[r]);
    }
}

int main(void)
{
    test_equal_to_flat();
    test_round_robin();
    test_faults();
    return CHECK_DONE();
}
