/* Single-process checkpoint writer/reader: round trips of every dtype and shape kind, sub-slice
 * reads across pieces, and the error for each kind of damage or bad input. */
#include "check.h"
#include "fsutil.h"
#include "index.h"
#include "mpickpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096];

/* Deterministic bytes of element i of a tensor: every byte pattern is legal for integer types; for
 * float types we write integral values so equality is exact. */
static void fill(void *buf, ckpt_dtype dt, int64_t n, int64_t offset)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t v = i + offset;
        switch (dt) {
        case CKPT_FLOAT32: ((float *)buf)[i] = (float)v * 0.5f - 3.0f; break;
        case CKPT_FLOAT64: ((double *)buf)[i] = (double)v * 0.25 - 7.0; break;
        case CKPT_FLOAT16: ((uint16_t *)buf)[i] = (uint16_t)(0x3C00 + (v % 512)); break;
        case CKPT_BFLOAT16: ((uint16_t *)buf)[i] = (uint16_t)(0x3F80 + (v % 64)); break;
        case CKPT_INT8: ((int8_t *)buf)[i] = (int8_t)(v % 200 - 100); break;
        case CKPT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(v % 251); break;
        case CKPT_BOOL: ((uint8_t *)buf)[i] = (uint8_t)(v % 3 == 0); break;
        case CKPT_INT16: ((int16_t *)buf)[i] = (int16_t)(v * 7 - 3000); break;
        case CKPT_UINT16: ((uint16_t *)buf)[i] = (uint16_t)(v * 7); break;
        case CKPT_INT32: ((int32_t *)buf)[i] = (int32_t)(v * 1000 - 123456); break;
        case CKPT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(v * 100000u); break;
        case CKPT_INT64: ((int64_t *)buf)[i] = v * 1000000007LL - 5; break;
        case CKPT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v * 0x100000001ULL; break;
        default: break;
        }
    }
}

static const char *prefix_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static ckpt_shape shape2(int64_t a, int64_t b)
{
    ckpt_shape s;
    int64_t d[2] = { a, b };
    ckpt_shape_init(&s, 2, d);
    return s;
}

static ckpt_slice rows(int64_t r0, int64_t nr, int64_t cols)
{
    ckpt_slice s;
    int64_t st[2] = { r0, 0 }, ct[2] = { nr, cols };
    ckpt_slice_init(&s, 2, st, ct);
    return s;
}

static const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e ? e->message : "";
}

/* Writes a checkpoint with a 6x4 float32 tensor in three row pieces and a few others. */
static int write_sample(const char *prefix, int64_t epoch)
{
    ckpt_writer *w;
    ckpt_writer_options o = CKPT_WRITER_OPTIONS_INIT;
    o.epoch = epoch;
    o.step = 42;
    o.save_counter = 3;
    int rc = ckpt_writer_open(&w, prefix, &o);
    if (rc != CKPT_OK)
        return rc;
    ckpt_shape s = shape2(6, 4);
    float buf[8];
    for (int p = 0; p < 3 && rc == CKPT_OK; p++) {
        ckpt_slice sl = rows(2 * p, 2, 4);
        fill(buf, CKPT_FLOAT32, 8, 8 * p);
        rc = ckpt_writer_add(w, "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", CKPT_FLOAT32, &s,
                             &sl, buf);
    }
    int64_t v[5];
    ckpt_shape s1;
    int64_t d1 = 5;
    ckpt_shape_init(&s1, 1, &d1);
    fill(v, CKPT_INT64, 5, 0);
    if (rc == CKPT_OK)
        rc = ckpt_writer_add(w, "step/counter", CKPT_INT64, &s1, NULL, v);
    if (rc == CKPT_OK)
        rc = ckpt_writer_commit(w);
    ckpt_writer_free(w);
    return rc;
}

static void test_roundtrip_all_dtypes(void)
{
    char prefix[4200];
    prefix_of(prefix, sizeof prefix, "all");
    ckpt_writer *w;
    CHECK_OK(ckpt_writer_open(&w, prefix, NULL));
    int64_t dims3[3] = { 3, 5, 7 };
    ckpt_shape s3;
    ckpt_shape_init(&s3, 3, dims3);
    unsigned char *buf = malloc(3 * 5 * 7 * 8), *back = malloc(3 * 5 * 7 * 8);
    char name[64];
    for (int dt = 1; dt < CKPT_DTYPE_COUNT; dt++) {
        fill(buf, (ckpt_dtype)dt, 105, dt);
        snprintf(name, sizeof name, "t/%s", ckpt_dtype_name((ckpt_dtype)dt));
        CHECK_OK(ckpt_writer_add(w, name, (ckpt_dtype)dt, &s3, NULL, buf));
    }
    /* scalar, zero-size dims, a name that looks like a path */
    ckpt_shape scalar, zero;
    ckpt_shape_init(&scalar, 0, NULL);
    int64_t zd[2] = { 4, 0 };
    ckpt_shape_init(&zero, 2, zd);
    double pi = 3.25;
    CHECK_OK(ckpt_writer_add(w, "scalar", CKPT_FLOAT64, &scalar, NULL, &pi));
    CHECK_OK(ckpt_writer_add(w, "empty", CKPT_INT32, &zero, NULL, NULL));
    CHECK_OK(ckpt_writer_add(w, "../../etc/passwd", CKPT_FLOAT64, &scalar, NULL, &pi));
    CHECK_OK(ckpt_writer_add(w, ".", CKPT_FLOAT64, &scalar, NULL, &pi));
    CHECK_OK(ckpt_writer_commit(w));
    ckpt_writer_free(w);
    /* names never became paths: only the index and one data file exist next to the prefix */
    struct stat st;
    char p2[8400];
    snprintf(p2, sizeof p2, "%s_temp", prefix);
    CHECK(stat(p2, &st) != 0);
    snprintf(p2, sizeof p2, "%s.data-00000-of-00001", prefix);
    CHECK(stat(p2, &st) == 0);

    ckpt_reader *r;
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (!r)
        return;
    CHECK_EQ_INT(ckpt_reader_num_tensors(r), CKPT_DTYPE_COUNT - 1 + 4);
    CHECK_EQ_INT(ckpt_reader_header(r)->format_version, 1);
    CHECK_EQ_INT(ckpt_reader_header(r)->world_size, 1);
    for (int dt = 1; dt < CKPT_DTYPE_COUNT; dt++) {
        fill(buf, (ckpt_dtype)dt, 105, dt);
        snprintf(name, sizeof name, "t/%s", ckpt_dtype_name((ckpt_dtype)dt));
        size_t bytes = 105 * ckpt_dtype_size((ckpt_dtype)dt);
        memset(back, 0xAB, bytes);
        CHECK_OK(ckpt_reader_read(r, name, (ckpt_dtype)dt, NULL, back, bytes));
        CHECK_MSG(memcmp(buf, back, bytes) == 0, "values of %s differ", name);
        size_t idx;
        ckpt_tensor_info ti;
        CHECK_OK(ckpt_reader_find(&idx, r, name));
        CHECK_OK(ckpt_reader_tensor(&ti, r, idx));
        CHECK(ti.dtype == (ckpt_dtype)dt && ckpt_shape_equal(&ti.shape, &s3));
        CHECK(ti.kind == CKPT_KIND_FULL && ti.num_pieces == 1);
        /* a sub-box of a single piece */
        ckpt_slice sub;
        int64_t st3[3] = { 1, 2, 3 }, ct3[3] = { 2, 2, 4 };
        ckpt_slice_init(&sub, 3, st3, ct3);
        size_t esz = ckpt_dtype_size((ckpt_dtype)dt);
        CHECK_OK(ckpt_reader_read(r, name, (ckpt_dtype)dt, &sub, back, 16 * esz));
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 4; c++) {
                    size_t gi = (size_t)((1 + a) * 35 + (2 + b) * 7 + (3 + c));
                    size_t li = (size_t)(a * 8 + b * 4 + c);
                    CHECK(memcmp(back + li * esz, buf + gi * esz, esz) == 0);
                }
    }
    double got = 0;
    CHECK_OK(ckpt_reader_read(r, "scalar", CKPT_FLOAT64, NULL, &got, sizeof got));
    CHECK(got == 3.25);
    got = 0;
    CHECK_OK(ckpt_reader_read(r, "../../etc/passwd", CKPT_FLOAT64, NULL, &got, sizeof got));
    CHECK(got == 3.25);
    CHECK_OK(ckpt_reader_read(r, "empty", CKPT_INT32, NULL, NULL, 0));
    CHECK_OK(ckpt_reader_verify(r, NULL, NULL));
    /* wrong dtype, out-of-range slice, unknown name, wrong buffer size */
    CHECK_RC(ckpt_reader_read(r, "scalar", CKPT_FLOAT32, NULL, &got, 4), CKPT_EMISMATCH);
    CHECK(strstr(last_msg(), "scalar") && strstr(last_msg(), "float64"));
    ckpt_slice bad;
    int64_t bst[3] = { 2, 0, 0 }, bct[3] = { 2, 5, 7 };
    ckpt_slice_init(&bad, 3, bst, bct);
    CHECK_RC(ckpt_reader_read(r, "t/float32", CKPT_FLOAT32, &bad, back, 70 * 4), CKPT_EINVAL);
    CHECK_RC(ckpt_reader_read(r, "nope", CKPT_FLOAT32, NULL, back, 4), CKPT_ENOTFOUND);
    CHECK_RC(ckpt_reader_read(r, "t/float32", CKPT_FLOAT32, NULL, back, 7), CKPT_EINVAL);
    ckpt_reader_free(r);
    free(buf);
    free(back);
}

static void test_pieces_and_subslices(void)
{
    char prefix[4200];
    prefix_of(prefix, sizeof prefix, "pieces");
    CHECK_OK(write_sample(prefix, 5));
    ckpt_reader *r;
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (!r)
        return;
    const ckpt_header *h = ckpt_reader_header(r);
    CHECK(h->epoch == 5 && h->step == 42 && h->save_counter == 3);
    size_t i;
    ckpt_tensor_info ti;
    CHECK_OK(ckpt_reader_find(&i, r, "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"));
    CHECK_OK(ckpt_reader_tensor(&ti, r, i));
    CHECK(ti.kind == CKPT_KIND_PARTITIONED && ti.num_pieces == 3);
    float all[24], want[24], part[12];
    fill(want, CKPT_FLOAT32, 24, 0);
    CHECK_OK(ckpt_reader_read(r, ti.name, CKPT_FLOAT32, NULL, all, sizeof all));
    CHECK(memcmp(all, want, sizeof all) == 0);
    /* rows 1..4, cols 1..3: spans all three pieces */
    ckpt_slice sub;
    int64_t st[2] = { 1, 1 }, ct[2] = { 4, 3 };
    ckpt_slice_init(&sub, 2, st, ct);
    CHECK_OK(ckpt_reader_read(r, ti.name, CKPT_FLOAT32, &sub, part, sizeof part));
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            CHECK(part[a * 3 + b] == want[(1 + a) * 4 + 1 + b]);
    ckpt_piece_info pi;
    CHECK_OK(ckpt_reader_piece(&pi, r, i, 0));
    CHECK(pi.bytes == 32 && pi.slice.count[0] == 2 && pi.rank == 0);
    CHECK(strstr(pi.dataset, "/tensors/model%2Fdense%2F") == pi.dataset);
    ckpt_reader_free(r);

    /* EEXISTS without overwrite; overwrite replaces */
    CHECK_RC(write_sample(prefix, 6), CKPT_EEXISTS);
    ckpt_writer *w;
    ckpt_writer_options o = CKPT_WRITER_OPTIONS_INIT;
    o.overwrite = 1;
    o.epoch = 9;
    CHECK_OK(ckpt_writer_open(&w, prefix, &o));
    double one = 1;
    ckpt_shape sc;
    ckpt_shape_init(&sc, 0, NULL);
    CHECK_OK(ckpt_writer_add(w, "only", CKPT_FLOAT64, &sc, NULL, &one));
    CHECK_OK(ckpt_writer_commit(w));
    ckpt_writer_free(w);
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (r) {
        CHECK(ckpt_reader_header(r)->epoch == 9 && ckpt_reader_num_tensors(r) == 1);
        ckpt_reader_free(r);
    }
}

/* Adds pieces of a 6x4 tensor given as (row start, row count) pairs; returns the commit status. */
static int commit_rows(const char *name, const int64_t (*pr)[2], int n)
{
    char prefix[4200];
    prefix_of(prefix, sizeof prefix, name);
    ckpt_writer *w;
    int rc = ckpt_writer_open(&w, prefix, NULL);
    if (rc != CKPT_OK)
        return rc;
    float buf[24] = { 0 };
    ckpt_shape s = shape2(6, 4);
    for (int i = 0; i < n && rc == CKPT_OK; i++) {
        ckpt_slice sl = rows(pr[i][0], pr[i][1], 4);
        rc = ckpt_writer_add(w, "w", CKPT_FLOAT32, &s, &sl, buf);
    }
    if (rc == CKPT_OK)
        rc = ckpt_writer_commit(w);
    ckpt_writer_free(w);
    /* whatever happened, nothing half-written is left: no temp dir, and an index only on success */
    char p[8400];
    struct stat st;
    snprintf(p, sizeof p, "%s_temp", prefix);
    CHECK_MSG(stat(p, &st) != 0, "temp dir left behind for %s", name);
    snprintf(p, sizeof p, "%s.index", prefix);
    CHECK((stat(p, &st) == 0) == (rc == CKPT_OK));
    snprintf(p, sizeof p, "%s.data-00000-of-00001", prefix);
    CHECK((stat(p, &st) == 0) == (rc == CKPT_OK));
    return rc;
}

static void test_validation(void)
{
    const int64_t ok[3][2] = { { 0, 2 }, { 2, 2 }, { 4, 2 } };
    CHECK_OK(commit_rows("v_ok", ok, 3));
    const int64_t dup[3][2] = { { 0, 2 }, { 2, 4 }, { 2, 4 } };
    CHECK_RC(commit_rows("v_dup", dup, 3), CKPT_EINVAL); /* same slice twice in one file */
    CHECK(strstr(last_msg(), "added twice") != NULL);
    const int64_t overlap[2][2] = { { 0, 4 }, { 3, 3 } };
    CHECK_RC(commit_rows("v_overlap", overlap, 2), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "overlaps") && strstr(last_msg(), "6 4 0,4:-") &&
                  strstr(last_msg(), "6 4 3,3:-"),
              "message: %s", last_msg());
    const int64_t gap[2][2] = { { 0, 2 }, { 3, 3 } };
    CHECK_RC(commit_rows("v_gap", gap, 2), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "cover 20 of 24"), "message: %s", last_msg());

    /* fragments from two "ranks": duplicate names both owners; dtype disagreement */
    Mpickpt__Fragment f0 = MPICKPT__FRAGMENT__INIT, f1 = MPICKPT__FRAGMENT__INIT;
    size_t c0 = 0, c1 = 0;
    f0.rank = 0;
    f1.rank = 1;
    ckpt_shape s = shape2(6, 4);
    ckpt_slice a = rows(0, 3, 4), b = rows(3, 3, 4), z = rows(0, 3, 4);
    CHECK_OK(ckpt__fragment_add(&f0, &c0, "w", CKPT_FLOAT32, &s, CKPT_KIND_PARTITIONED, &a, "d0",
                                "/tensors/w", &z, 48, 0));
    CHECK_OK(ckpt__fragment_add(&f1, &c1, "w", CKPT_FLOAT32, &s, CKPT_KIND_PARTITIONED, &a, "d1",
                                "/tensors/w", &z, 48, 0));
    CHECK_OK(ckpt__fragment_add_file(&f0, "d0", 1));
    CHECK_OK(ckpt__fragment_add_file(&f1, "d1", 1));
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    hdr.format_version = 1;
    hdr.world_size = 2;
    hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    idx.header = &hdr;
    Mpickpt__Fragment *fr[2] = { &f0, &f1 };
    CHECK_RC(ckpt__index_merge(&idx, fr, 2), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "duplicate slice 6 4 0,3:- saved by rank 0 and rank 1"),
              "message: %s", last_msg());
    ckpt__index_merged_free(&idx);
    f1.tensors[0]->pieces[0]->start[0] = 3;
    CHECK_OK(ckpt__index_merge(&idx, fr, 2));
    ckpt__index_merged_free(&idx);
    f1.tensors[0]->dtype = MPICKPT__DTYPE__DT_FLOAT64;
    CHECK_RC(ckpt__index_merge(&idx, fr, 2), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "rank 0") && strstr(last_msg(), "rank 1") &&
                  strstr(last_msg(), "float64"),
              "message: %s", last_msg());
    ckpt__index_merged_free(&idx);
    (void)b;
    ckpt__fragment_free_built(&f0);
    ckpt__fragment_free_built(&f1);
}

/* Copies the files of checkpoint `src` to `dst` (same directory). */
/* Packed pieces (format 2): accepted only in a format-2 index, under /packs/, at dataset start 0,
 * with an offset that cannot overflow; an unpacked piece carries no offset. */
static void test_packed_validation(void)
{
    Mpickpt__Fragment f = MPICKPT__FRAGMENT__INIT;
    size_t cap = 0;
    f.rank = 0;
    ckpt_shape s = shape2(6, 4);
    ckpt_slice a = rows(0, 3, 4), b = rows(3, 3, 4), z = rows(0, 3, 4);
    CHECK_OK(ckpt__fragment_add(&f, &cap, "w", CKPT_FLOAT32, &s, CKPT_KIND_PARTITIONED, &a, "d0",
                                "/packs/rank-0", &z, 48, 0));
    CHECK_OK(ckpt__fragment_add(&f, &cap, "w", CKPT_FLOAT32, &s, CKPT_KIND_PARTITIONED, &b, "d0",
                                "/tensors/w", &z, 48, 0));
    CHECK_OK(ckpt__fragment_add_file(&f, "d0", 1));
    Mpickpt__Piece *pk = f.tensors[0]->pieces[0], *pl = f.tensors[1]->pieces[0];
    pk->packed = 1;
    pk->pack_offset = 4096;
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    hdr.format_version = 2;
    hdr.world_size = 1;
    hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    idx.header = &hdr;
    Mpickpt__Fragment *fr[1] = { &f };
    CHECK_OK(ckpt__index_merge(&idx, fr, 1));
    CHECK_EQ_INT(ckpt__index_format_version(&idx), 2);
    ckpt__index_merged_free(&idx);

    hdr.format_version = 1; /* a format-1 index cannot hold packed pieces */
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "bad packed piece"), "message: %s", last_msg());
    ckpt__index_merged_free(&idx);
    hdr.format_version = 2;

    pk->dataset_start[0] = 1; /* a packed piece sits at the start of its 1-D range */
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    ckpt__index_merged_free(&idx);
    pk->dataset_start[0] = 0;

    pk->pack_offset = UINT64_MAX - 8; /* offset + bytes overflows */
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    ckpt__index_merged_free(&idx);
    pk->pack_offset = 0;

    pk->packed = 0; /* an unpacked piece must name a dataset under /tensors/ */
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "bad dataset path"), "message: %s", last_msg());
    ckpt__index_merged_free(&idx);
    pk->packed = 1;

    pl->pack_offset = 8; /* an offset without packed */
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "pack offset on an unpacked piece"), "message: %s", last_msg());
    ckpt__index_merged_free(&idx);
    pl->pack_offset = 0;
    pl->dataset = (free(pl->dataset), strdup("/packs/rank-0")); /* a pack path without packed */
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    ckpt__index_merged_free(&idx);
    pl->dataset = (free(pl->dataset), strdup("/tensors/w"));

    /* Block checksums: ceil(bytes / block_bytes) of them, format 2 only. */
    pl->block_bytes = 20;
    pl->n_block_crc32c = 3; /* 48 bytes in blocks of 20 */
    pl->block_crc32c = calloc(3, sizeof *pl->block_crc32c);
    CHECK_OK(ckpt__index_merge(&idx, fr, 1));
    ckpt__index_merged_free(&idx);
    pl->n_block_crc32c = 2;
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    CHECK_MSG(strstr(last_msg(), "2 block checksums for 48 bytes in blocks of 20"), "message: %s",
              last_msg());
    ckpt__index_merged_free(&idx);
    pl->n_block_crc32c = 3;
    pl->block_bytes = 0;
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    ckpt__index_merged_free(&idx);
    pl->block_bytes = 20;
    pk->packed = 0; /* the only format-2 feature left is the block checksums */
    pk->dataset = (free(pk->dataset), strdup("/tensors/w#0"));
    hdr.format_version = 1;
    CHECK_RC(ckpt__index_merge(&idx, fr, 1), CKPT_EMISMATCH);
    ckpt__index_merged_free(&idx);
    hdr.format_version = 2;
    CHECK_OK(ckpt__index_merge(&idx, fr, 1));
    CHECK_EQ_INT(ckpt__index_format_version(&idx), 2);
    ckpt__index_merged_free(&idx);
    ckpt__fragment_free_built(&f);
}

static void copy_ckpt(const char *src, const char *dst)
{
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "cp '%s.index' '%s.index' && cp '%s.data-00000-of-00001' "
                              "'%s.data-00000-of-00001'",
             src, dst, src, dst);
    /* the data file name is recorded in the index relative to the prefix's base name, so the copy
     * keeps referring to src's data file name: rename the copy's index only for damage tests that
     * touch the index; data tests damage a copy in a separate directory instead */
    CHECK(system(cmd) == 0);
}

static void test_damage(void)
{
    char good[4200], sub[4300], p[8400];
    prefix_of(good, sizeof good, "damage/base");
    snprintf(sub, sizeof sub, "%s/damage", dir);
    CHECK_OK(ckpt__mkdir_p(sub, 0755));
    CHECK_OK(write_sample(good, 1));
    ckpt_reader *r = NULL;

    /* flipped byte inside the float tensor's data: verify and read name the tensor */
    {
        char d2[4300], pre2[4400];
        snprintf(d2, sizeof d2, "%s/flip", dir);
        CHECK_OK(ckpt__mkdir_p(d2, 0755));
        snprintf(pre2, sizeof pre2, "%s/base", d2);
        char cmd[20000];
        snprintf(cmd, sizeof cmd, "cp '%s'.* '%s'/", good, d2);
        CHECK(system(cmd) == 0);
        /* find the first piece's bytes in the file: its float values are unique in the file */
        float needle[8];
        fill(needle, CKPT_FLOAT32, 8, 8); /* piece rows 2-3 */
        snprintf(p, sizeof p, "%s.data-00000-of-00001", pre2);
        uint8_t *data;
        size_t len;
        CHECK_OK(ckpt__read_file(&data, &len, p, 1 << 30));
        long off = -1;
        for (size_t i = 0; data && i + sizeof needle <= len; i++)
            if (memcmp(data + i, needle, sizeof needle) == 0)
                off = (long)i;
        CHECK(off >= 0);
        if (off >= 0) {
            data[off + 5] ^= 0x10;
            FILE *f = fopen(p, "r+b");
            CHECK(f != NULL);
            if (f) {
                fseek(f, off + 5, SEEK_SET);
                fputc(data[off + 5], f);
                fclose(f);
            }
        }
        free(data);
        CHECK_OK(ckpt_reader_open(&r, pre2)); /* sizes are right: open succeeds */
        if (r) {
            CHECK_RC(ckpt_reader_verify(r, NULL, NULL), CKPT_ECORRUPT);
            float all[24];
            CHECK_RC(ckpt_reader_read(r, "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                                      CKPT_FLOAT32, NULL, all, sizeof all),
                     CKPT_ECORRUPT);
            CHECK_MSG(strstr(last_msg(), "model/dense/kernel") && strstr(last_msg(), "checksum") &&
                          strstr(last_msg(), "6 4 2,2:-"),
                      "message: %s", last_msg());
            /* the undamaged tensor still reads */
            int64_t v[5];
            CHECK_OK(ckpt_reader_read(r, "step/counter", CKPT_INT64, NULL, v, sizeof v));
            ckpt_reader_free(r);
            r = NULL;
        }
    }

    /* truncated index */
    snprintf(p, sizeof p, "%s.index", good);
    uint8_t *ib;
    size_t ilen;
    CHECK_OK(ckpt__read_file(&ib, &ilen, p, 1 << 20));
    char tr[4400];
    snprintf(tr, sizeof tr, "%s/damage/trunc", dir);
    snprintf(p, sizeof p, "%s.index", tr);
    CHECK_OK(ckpt__write_file_atomic(p, ib, ilen - 3));
    CHECK_RC(ckpt_reader_open(&r, tr), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), p) && strstr(last_msg(), "truncated"), "message: %s", last_msg());
    /* a flipped byte in the index payload */
    ib[40] ^= 1;
    CHECK_OK(ckpt__write_file_atomic(p, ib, ilen));
    CHECK_RC(ckpt_reader_open(&r, tr), CKPT_ECORRUPT);
    CHECK(strstr(last_msg(), "checksum") != NULL);
    ib[40] ^= 1;
    /* an index from a future format version */
    ib[8] = 2;
    CHECK_OK(ckpt__write_file_atomic(p, ib, ilen));
    CHECK_RC(ckpt_reader_open(&r, tr), CKPT_EVERSION);
    CHECK(strstr(last_msg(), "version 2") != NULL);
    ib[8] = 1;
    /* garbage */
    CHECK_OK(ckpt__write_file_atomic(p, "hello", 5));
    CHECK_RC(ckpt_reader_open(&r, tr), CKPT_ECORRUPT);
    free(ib);

    /* no index at all */
    prefix_of(p, sizeof p, "damage/none");
    CHECK_RC(ckpt_reader_open(&r, p), CKPT_ENOTFOUND);

    /* truncated data file, then missing data file */
    snprintf(p, sizeof p, "%s.data-00000-of-00001", good);
    CHECK(truncate(p, 100) == 0);
    CHECK_RC(ckpt_reader_open(&r, good), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "data-00000-of-00001") && strstr(last_msg(), "100 bytes"),
              "message: %s", last_msg());
    CHECK(unlink(p) == 0);
    CHECK_RC(ckpt_reader_open(&r, good), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "missing") && strstr(last_msg(), "data-00000-of-00001"),
              "message: %s", last_msg());
    (void)copy_ckpt;
}

int main(void)
{
    const char *base = getenv("MPICKPT_TEST_DIR");
    snprintf(dir, sizeof dir, "%s", base ? base : "/tmp/mpickpt_test_checkpoint");
    ckpt__rmtree(dir);
    CHECK_OK(ckpt__mkdir_p(dir, 0755));
    test_roundtrip_all_dtypes();
    test_pieces_and_subslices();
    test_validation();
    test_packed_validation();
    test_damage();
    return CHECK_DONE();
}
