/* Block checksums (format 2): a piece larger than one block (1 MiB) records the CRC-32C of every
 * block, so a read of some rows of it reads and checks only the blocks that hold them.
 *
 *   mpirun -np N test_blocks OUTDIR
 *
 * Every rank saves its rows of a ~4 MiB-per-rank float32 tensor (per-rank, shared and per-node
 * layouts),
 * then reads row windows through ckpt_reader_read (inside one block, across block and piece
 * boundaries, with a column range) and restores through a saver whose row split is shifted by
 * half a block; every value is checked on every rank. Then a byte of one block is flipped: rows
 * outside that block still read, rows inside it fail naming the block, verify fails, and a saver
 * restore fails on every rank. */
#include "index.h"
#include "mpi_check.h"
#include "mpickpt.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COLS 1024                                  /* float32: 4 KiB rows */
#define ROWS_PER_BLOCK ((int64_t)(CKPT__CRC_BLOCK / (COLS * 4)))

static int g_rank, g_size;
static int64_t g_rows;

static float value(int64_t i, int64_t j)
{
    return (float)(i * COLS + j);
}

static void fill(float *buf, int64_t r0, int64_t nrows)
{
    for (int64_t i = 0; i < nrows; i++)
        for (int64_t j = 0; j < COLS; j++)
            buf[i * COLS + j] = value(r0 + i, j);
}

/* Values of rows [r0, r0+nr) x cols [c0, c0+nc) in buf (dense). Returns the first bad index+1. */
static int64_t check_box(const float *buf, int64_t r0, int64_t nr, int64_t c0, int64_t nc)
{
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++)
            if (buf[i * nc + j] != value(r0 + i, c0 + j))
                return i * nc + j + 1;
    return 0;
}

/* Row boundary i of a split into n parts, shifted by `shift` rows (0 < i < n). */
static int64_t bound(int i, int n, int64_t shift)
{
    if (i <= 0)
        return 0;
    if (i >= n)
        return g_rows;
    return (int64_t)i * g_rows / n + shift;
}

static ckpt_saver *make_saver(ckpt_layout layout, int64_t shift, float **buf)
{
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = layout;
    ckpt_saver *s = NULL;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, &o));
    int64_t r0 = bound(g_rank, g_size, shift), r1 = bound(g_rank + 1, g_size, shift);
    int64_t dims[2] = { g_rows, COLS };
    ckpt_shape sh;
    ckpt_shape_init(&sh, 2, dims);
    ckpt_slice sl = { 2, { r0, 0 }, { r1 - r0, COLS } };
    *buf = malloc((size_t)((r1 - r0) * COLS) * sizeof(float) + 1);
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &sh, &sl, *buf));
    return s;
}

/* Reads rows [r0, r0+nr) x cols [c0, c0+nc) through a fresh reader; returns its status. */
static int read_box(const char *prefix, int64_t r0, int64_t nr, int64_t c0, int64_t nc, int check)
{
    ckpt_reader *r = NULL;
    int rc = ckpt_reader_open(&r, prefix);
    CHECK_OK(rc);
    if (rc != CKPT_OK)
        return rc;
    float *buf = malloc((size_t)(nr * nc) * sizeof(float) + 1);
    ckpt_slice sl = { 2, { r0, c0 }, { nr, nc } };
    rc = ckpt_reader_read(r, "w", CKPT_FLOAT32, &sl, buf, (size_t)(nr * nc) * sizeof(float));
    if (rc == CKPT_OK && check) {
        int64_t bad = check_box(buf, r0, nr, c0, nc);
        CHECK_MSG(bad == 0, "%s rows %lld+%lld cols %lld+%lld: element %lld wrong", prefix,
                  (long long)r0, (long long)nr, (long long)c0, (long long)nc, (long long)bad - 1);
    }
    free(buf);
    ckpt_reader_free(r);
    return rc;
}

/* The piece rank `owner` wrote, from the index (its blocks, file and dataset). */
static const Mpickpt__Piece *piece_of(ckpt_reader *r, int owner)
{
    const Mpickpt__Index *idx = ckpt__reader_index(r);
    for (size_t i = 0; i < idx->n_tensors; i++)
        if (strcmp(idx->tensors[i]->name, "w") == 0)
            for (size_t j = 0; j < idx->tensors[i]->n_pieces; j++)
                if (idx->tensors[i]->pieces[j]->rank == owner)
                    return idx->tensors[i]->pieces[j];
    return NULL;
}

static void check_layout(const char *outdir, ckpt_layout layout)
{
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/ck-%s", outdir, ckpt_layout_name(layout));
    check_case(1, "save %s", ckpt_layout_name(layout));
    float *wbuf;
    ckpt_saver *s = make_saver(layout, 0, &wbuf);
    int64_t r0 = bound(g_rank, g_size, 0), r1 = bound(g_rank + 1, g_size, 0);
    fill(wbuf, r0, r1 - r0);
    CHECK_OK(ckpt_saver_write(s, prefix, NULL));

    /* Format 2, and every piece of more than one block has one checksum per block. */
    ckpt_reader *r = NULL;
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (r) {
        CHECK_EQ_INT(ckpt_reader_header(r)->format_version, 2);
        for (int k = 0; k < g_size; k++) {
            const Mpickpt__Piece *p = piece_of(r, k);
            CHECK(p != NULL);
            if (!p)
                continue;
            uint64_t nb = (p->bytes + CKPT__CRC_BLOCK - 1) / CKPT__CRC_BLOCK;
            CHECK_EQ_INT(p->block_bytes, (unsigned)CKPT__CRC_BLOCK);
            CHECK_EQ_INT(p->n_block_crc32c, nb);
            CHECK(nb >= 3);
        }
        ckpt_reader_free(r);
    }

    /* Row windows, each rank its own share of them. */
    check_case(1, "row windows %s", ckpt_layout_name(layout));
    int64_t b1 = bound(1, g_size, 0) - 3; /* 3 rows before the first piece boundary */
    if (b1 > g_rows - 10)
        b1 = g_rows - 10;
    int64_t win[][4] = {
        { 0, 1, 0, COLS },                                      /* one row of block 0 */
        { ROWS_PER_BLOCK - 1, 2, 0, COLS },                     /* across a block boundary */
        { ROWS_PER_BLOCK, ROWS_PER_BLOCK, 0, COLS },            /* exactly block 1 */
        { 100, 700, 0, COLS },                                  /* blocks 0..3 */
        { b1, 10, 0, COLS },                                    /* across a piece boundary */
        { 10, 300, 5, 100 },                                    /* a column range */
        { g_rows - 5, 5, 0, COLS },                             /* the last rows */
        { 0, g_rows, 0, COLS },                                 /* everything */
        { g_rows / 2, g_rows / 3, COLS - 1, 1 },                /* the last column */
    };
    for (size_t i = 0; i < sizeof win / sizeof win[0]; i++)
        if ((int)i % g_size == g_rank || i == 1 || i == 4)
            CHECK_OK(read_box(prefix, win[i][0], win[i][1], win[i][2], win[i][3], 1));

    /* A saver restore whose split is shifted by half a block: every rank reads parts of two
     * pieces (at one rank, the whole tensor). */
    check_case(1, "shifted restore %s", ckpt_layout_name(layout));
    float *rbuf;
    int64_t shift = ROWS_PER_BLOCK / 2;
    ckpt_saver *rs = make_saver(layout, shift, &rbuf);
    int64_t s0 = bound(g_rank, g_size, shift), s1 = bound(g_rank + 1, g_size, shift);
    memset(rbuf, 0xff, (size_t)((s1 - s0) * COLS) * sizeof(float));
    CHECK_OK(ckpt_saver_restore(rs, prefix, NULL, NULL));
    int64_t bad = check_box(rbuf, s0, s1 - s0, 0, COLS);
    CHECK_MSG(bad == 0, "shifted restore: element %lld of rows %lld..%lld wrong", (long long)bad - 1,
              (long long)s0, (long long)s1);

    /* Damage block 1 of the last rank's piece. */
    check_case(1, "damaged block %s", ckpt_layout_name(layout));
    int owner = g_size - 1;
    int64_t p0 = bound(owner, g_size, 0);
    if (g_rank == 0) {
        ckpt_reader *dr = NULL;
        CHECK_OK(ckpt_reader_open(&dr, prefix));
        const Mpickpt__Piece *p = dr ? piece_of(dr, owner) : NULL;
        CHECK(p != NULL);
        if (p) {
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", outdir, p->file);
            hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
            hid_t d = f >= 0 ? H5Dopen2(f, p->dataset, H5P_DEFAULT) : H5I_INVALID_HID;
            haddr_t a = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
            CHECK(a != HADDR_UNDEF);
            /* the piece starts at its dataset_start row of the dataset */
            uint64_t at = (uint64_t)a + (uint64_t)p->dataset_start[0] * COLS * 4 +
                          CKPT__CRC_BLOCK + 100;
            if (d >= 0)
                H5Dclose(d);
            if (f >= 0)
                H5Fclose(f);
            FILE *fp = fopen(path, "r+b");
            CHECK(fp != NULL);
            if (fp) {
                unsigned char b = 0;
                CHECK(fseek(fp, (long)at, SEEK_SET) == 0 && fread(&b, 1, 1, fp) == 1);
                b ^= 0x20;
                CHECK(fseek(fp, (long)at, SEEK_SET) == 0 && fwrite(&b, 1, 1, fp) == 1);
                fclose(fp);
            }
        }
        ckpt_reader_free(dr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* rows of blocks 0 and 2 of that piece still read; block 1's fail, naming it */
    CHECK_OK(read_box(prefix, p0, 10, 0, COLS, 1));
    CHECK_OK(read_box(prefix, p0 + 2 * ROWS_PER_BLOCK + 1, 10, 0, COLS, 1));
    CHECK_RC(read_box(prefix, p0 + ROWS_PER_BLOCK + 3, 2, 0, COLS, 0), CKPT_ECORRUPT);
    const ckpt_error *e = ckpt_error_last();
    CHECK_MSG(e && strstr(e->message, "checksum mismatch in block 1"), "message: %s",
              e ? e->message : "(none)");
    ckpt_reader *vr = NULL;
    CHECK_OK(ckpt_reader_open(&vr, prefix));
    if (vr)
        CHECK_RC(ckpt_reader_verify(vr, NULL, NULL), CKPT_ECORRUPT);
    ckpt_reader_free(vr);
    /* the saver's restore fails on every rank, whichever rank read the bad block */
    CHECK_RC(ckpt_saver_restore(s, prefix, NULL, NULL), CKPT_ECORRUPT);

    ckpt_saver_free(rs);
    ckpt_saver_free(s);
    free(rbuf);
    free(wbuf);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc != 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_blocks OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    /* Options: version 1 (before pack_max_bytes) is still accepted, an unknown one is not. */
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    ckpt_saver *s = NULL;
    o.version = 1;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, &o));
    ckpt_saver_free(s);
    s = NULL;
    o.version = CKPT_SAVER_OPTIONS_VERSION + 1;
    CHECK_RC(ckpt_saver_create(&s, MPI_COMM_WORLD, &o), CKPT_EINVAL);
    CHECK(s == NULL);

    /* An index whose container checks but whose message has no header: the chief refuses it and
     * the other ranks, which unpack the broadcast payload without validating it, must too. */
    char nohdr[4096];
    snprintf(nohdr, sizeof nohdr, "%s/nohdr", argv[1]);
    if (g_rank == 0) {
        Mpickpt__Index empty = MPICKPT__INDEX__INIT;
        uint8_t *buf = NULL;
        size_t len = 0;
        char ipath[4200];
        snprintf(ipath, sizeof ipath, "%s.index", nohdr);
        CHECK_OK(ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &empty.base));
        FILE *fp = fopen(ipath, "wb");
        CHECK(fp && fwrite(buf, 1, len, fp) == len);
        if (fp)
            fclose(fp);
        free(buf);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    float *nbuf;
    g_rows = 16;
    s = make_saver(CKPT_LAYOUT_PER_RANK, 0, &nbuf);
    CHECK_RC(ckpt_saver_restore(s, nohdr, NULL, NULL), CKPT_ECORRUPT);
    const ckpt_error *ne = ckpt_error_last();
    CHECK_MSG(ne && strstr(ne->message, "no header"), "message: %s", ne ? ne->message : "(none)");
    ckpt_saver_free(s);
    free(nbuf);

    /* ~3.9 MiB per rank: four checksum blocks per piece, the last one partial. */
    g_rows = (int64_t)g_size * (3 * ROWS_PER_BLOCK + 213);
    check_layout(argv[1], CKPT_LAYOUT_PER_RANK);
    check_layout(argv[1], CKPT_LAYOUT_SHARED);
    /* nodes of MPICKPT_RANKS_PER_NODE ranks (tests/CMakeLists.txt), or one node */
    check_layout(argv[1], CKPT_LAYOUT_PER_NODE);
    return check_mpi_done("test_blocks");
}
