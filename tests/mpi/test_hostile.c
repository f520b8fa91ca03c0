/* Issue 12, "files that lie", at restore: a collective restore of a checkpoint whose data file has
 * a dataset with external storage in /etc/passwd, the index's sizes and CRC-32Cs rewritten to
 * match what HDF5 would return for it.
 *
 *   mpirun -np N test_hostile OUTDIR
 *
 * Each rank registers rows [2r, 2r+2) of "w" (int32 [2N, 8]) and a tensor of its own, "f_r<r>"
 * (int32 [4]), and saves them (per-rank layout). Then rank 0 rewrites its data file: once with the
 * small pieces packed (its dataset /packs/rank-0, both of its pieces in it, replaced), once with
 * packing off (its dataset of "w" replaced). ckpt_saver_restore must fail with CKPT_ECORRUPT and
 * the same message on every rank: the restore reads each piece at the file offset the index
 * records (never HDF5's pointer to /etc/passwd), so the bytes there do not match the rewritten
 * CRC-32C, or lie past the end of the rewritten file; an index without offsets (older writers)
 * goes through HDF5, whose storage check names the dataset and its external storage. Rank 0's
 * buffers may hold only the sentinel or the values it saved, and no rank's buffers a run of
 * /etc/passwd's bytes. */
#include "hostile_h5.h"
#include "mpi_check.h"
#include "coll.h"
#include "mpickpt.h"
#include "mpickpt/saver.h"

#include <string.h>

#define COLS 8
#define SENTINEL 0x5A

static int g_rank, g_size;

/* The data file and dataset that hold rank 0's piece of "w" in the index at `prefix`. */
static int rank0_dataset(const char *prefix, char *file, size_t fsize, char *dset, size_t dsize)
{
    char ipath[4200];
    snprintf(ipath, sizeof ipath, "%s.index", prefix);
    Mpickpt__Index *idx = NULL;
    if (ckpt__index_load(&idx, ipath) != CKPT_OK)
        return -1;
    int found = -1;
    for (size_t i = 0; i < idx->n_tensors && found; i++)
        for (size_t j = 0; j < idx->tensors[i]->n_pieces && found; j++) {
            const Mpickpt__Piece *p = idx->tensors[i]->pieces[j];
            if (strcmp(idx->tensors[i]->name, "w") == 0 && p->rank == 0) {
                snprintf(file, fsize, "%s", p->file);
                snprintf(dset, dsize, "%s", p->dataset);
                found = 0;
            }
        }
    mpickpt__index__free_unpacked(idx, NULL);
    return found;
}

static void run_case(const char *outdir, int packed, const uint8_t *secret, size_t slen)
{
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/ck-%s", outdir, packed ? "packed" : "unpacked");
    check_case(1, "restore of an external-storage dataset (%s)", packed ? "packed" : "unpacked");

    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = CKPT_LAYOUT_PER_RANK;
    o.pack_max_bytes = packed ? 0 : -1;
    ckpt_saver *s = NULL;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, &o));
    if (!s)
        return;
    int32_t w[2 * COLS], f[4];
    for (int i = 0; i < 2 * COLS; i++)
        w[i] = (g_rank * 2 * COLS + i) * 10 + 7;
    for (int i = 0; i < 4; i++)
        f[i] = -(g_rank * 100 + i);
    int64_t dw[2] = {2 * (int64_t)g_size, COLS}, df = 4, st[2] = {2 * (int64_t)g_rank, 0};
    int64_t ct[2] = {2, COLS};
    ckpt_shape sw, sf;
    ckpt_slice mine;
    ckpt_shape_init(&sw, 2, dw);
    ckpt_shape_init(&sf, 1, &df);
    ckpt_slice_init(&mine, 2, st, ct);
    char fname[64];
    snprintf(fname, sizeof fname, "f_r%d", g_rank);
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_INT32, &sw, &mine, w));
    CHECK_OK(ckpt_saver_add_full(s, fname, CKPT_INT32, &sf, f));
    int rc = ckpt_saver_write(s, prefix, NULL);
    coll(rc, CKPT_OK, "write");

    /* Rank 0 makes its data file lie; every rank learns whether that worked. */
    int made = 0;
    if (g_rank == 0 && rc == CKPT_OK) {
        char file[256], dset[1024], data[4600], ipath[4200];
        uint8_t *bytes = NULL;
        size_t n = 0;
        snprintf(ipath, sizeof ipath, "%s.index", prefix);
        made = rank0_dataset(prefix, file, sizeof file, dset, sizeof dset) == 0 &&
               strncmp(dset, packed ? "/packs/" : "/tensors/", packed ? 7 : 9) == 0;
        CHECK_MSG(made, "rank 0's piece of w is not where expected (packed %d)", packed);
        snprintf(data, sizeof data, "%s/%s", outdir, file);
        made = made && hostile_apply(data, dset, H_EXT_PASSWD, NULL, &bytes, &n) == 0 &&
               hostile_fix_index(ipath, file, data, dset, bytes, n) == 0;
        CHECK_MSG(made, "cannot rewrite %s", data);
        free(bytes);
    }
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (made) {
        memset(w, SENTINEL, sizeof w);
        memset(f, SENTINEL, sizeof f);
        rc = ckpt_saver_restore(s, prefix, NULL, NULL);
        coll(rc, CKPT_ECORRUPT, "restore");
        const ckpt_error *e = ckpt_error_last();
        const char *msg = e ? e->message : "";
        CHECK_MSG((strstr(msg, "has external storage") &&
                   strstr(msg, packed ? "/packs/rank-0" : "/tensors/w")) ||
                      (strstr(msg, "tensor '") &&
                       (strstr(msg, "checksum mismatch") || strstr(msg, "past the file's end"))),
                  "restore: message should name the piece and its checksum or extent, or the "
                  "dataset and its external storage: %s", msg);
        CHECK_MSG(!hostile_holds_secret(w, sizeof w, secret, slen, 8) &&
                      !hostile_holds_secret(f, sizeof f, secret, slen, 8),
                  "restore left bytes of %s in a registered buffer", HOSTILE_SECRET);
        if (g_rank == 0) { /* the sentinel, or what rank 0 saved: nothing else */
            int ok = 1;
            for (int i = 0; i < 2 * COLS; i++)
                ok &= ((uint32_t)w[i] == 0x5A5A5A5Au) || w[i] == i * 10 + 7;
            for (int i = 0; i < 4; i++)
                ok &= ((uint32_t)f[i] == 0x5A5A5A5Au) || f[i] == -i;
            CHECK_MSG(ok, "restore wrote into rank 0's buffers something it did not save");
        }
    }
    ckpt_saver_free(s);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc != 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_hostile OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    size_t slen = 0;
    uint8_t *secret = hostile_slurp(HOSTILE_SECRET, &slen);
    CHECK(secret != NULL && slen >= 128);
    if (secret) {
        run_case(argv[1], 1, secret, slen);
        run_case(argv[1], 0, secret, slen);
        size_t now_len = 0;
        uint8_t *now = hostile_slurp(HOSTILE_SECRET, &now_len);
        CHECK_MSG(now && now_len == slen && memcmp(now, secret, slen) == 0, "%s changed",
                  HOSTILE_SECRET);
        free(now);
    }
    free(secret);
    return check_mpi_done("test_hostile");
}
