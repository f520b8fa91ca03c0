/* Collective saver: save/restore round trips, temp cleanup, counters, restore info, and restores
 * across rank counts (N -> M), on the test model of model.h.
 *
 *   test_saver OUTDIR roundtrip LAYOUT
 *   test_saver OUTDIR write LAYOUT N_EXPECTED STEP      writes OUTDIR/ck (recreates OUTDIR)
 *   test_saver OUTDIR read LAYOUT STEP N_WRITER         restores OUTDIR/ck written by N_WRITER
 * ranks
 *
 * LAYOUT is "shared", "per-rank" or "per-node" (for read: the layout the checkpoint must report;
 * per-node: nodes of MPICKPT_RANKS_PER_NODE ranks, model.h). Variants for write/roundtrip:
 * "shared-coll" (shared with collective MPI-IO) and "shared-shard" / "per-rank-shard" /
 * "per-node-shard" (max_shard_bytes = SHARD_BYTES: every stored piece split). Every check runs on
 * every rank; every rank exits with the same code (check_mpi_done). */
#include "mpi_check.h"
#include "coll.h"
#include "mpickpt.h"
#include "mpickpt/saver.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_rank, g_size;
static const char *g_outdir;
static ckpt_layout g_layout;
static int g_collective_io;
static int64_t g_max_shard; /* 0: no sharding */
#define SHARD_BYTES 48

static int64_t epoch_for(int64_t step)
{
    return step / 10 + 1000;
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* Runs a collective, checks its status against @p expected and that every rank agrees (coll.h). */
#define CHECK_COLL(call, expected) coll((call), (expected), #call)

static int path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* After a successful save: no `*_temp` entry, no `.tmp` index, no non-empty `workertemp_*` in
 * @p dir. Returns the number of leftovers. */
static int check_no_temp(const char *dir, const char *what)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "%s: cannot list %s: %s", what, dir, strerror(errno));
    if (!d)
        return 1;
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strstr(n, "_temp") || strstr(n, ".tmp")) {
            bad++;
            CHECK_MSG(0, "%s: leftover %s/%s after a successful save", what, dir, n);
        } else if (strncmp(n, "workertemp_", 11) == 0) {
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", dir, n);
            DIR *s = opendir(sub);
            struct dirent *se;
            while (s && (se = readdir(s)) != NULL) {
                if (strcmp(se->d_name, ".") && strcmp(se->d_name, "..")) {
                    bad++;
                    CHECK_MSG(0, "%s: leftover %s/%s after a successful save", what, sub,
                              se->d_name);
                }
            }
            if (s)
                closedir(s);
        }
    }
    closedir(d);
    check_count++;
    return bad;
}

/* The index and the data files of a committed checkpoint written by @p nranks ranks. */
static void check_files(const char *prefix, int nranks, ckpt_layout layout, const char *what)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s.index", prefix);
    CHECK_MSG(path_exists(p), "%s: %s missing", what, p);
    int nfiles = tm_data_files(layout, nranks);
    for (int i = 0; i < nfiles; i++) {
        snprintf(p, sizeof p, "%s.data-%05d-of-%05d", prefix, i, nfiles);
        CHECK_MSG(path_exists(p), "%s: %s missing", what, p);
    }
    /* and no other data file of this checkpoint (per-node: one per node, not per rank) */
    char dir[PATH_MAX], stem[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s", prefix);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : prefix;
    snprintf(stem, sizeof stem, "%s.data-", base);
    if (slash)
        *slash = '\0';
    DIR *d = opendir(slash ? dir : ".");
    int count = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        count += strncmp(e->d_name, stem, strlen(stem)) == 0;
    if (d)
        closedir(d);
    CHECK_MSG(count == nfiles, "%s: %d data files of %s, want %d (%s layout, %d ranks)", what,
              count, base, nfiles, ckpt_layout_name(layout), nranks);
}

static void check_restore_info(const ckpt_restore_info *ri, int64_t counter, int64_t step,
                               int world, ckpt_layout layout, const char *what)
{
    CHECK_MSG(ri->save_counter == counter, "%s: save_counter %" PRId64 ", want %" PRId64, what,
              ri->save_counter, counter);
    CHECK_MSG(ri->epoch == epoch_for(step), "%s: epoch %" PRId64 ", want %" PRId64, what, ri->epoch,
              epoch_for(step));
    CHECK_MSG(ri->step == step, "%s: step %" PRId64 ", want %" PRId64, what, ri->step, step);
    CHECK_MSG(ri->world_size == world, "%s: world_size %d, want %d", what, (int)ri->world_size,
              world);
    CHECK_MSG(ri->layout == layout, "%s: layout %s, want %s", what, ckpt_layout_name(ri->layout),
              ckpt_layout_name(layout));
}

/* Rank 0 looks at a checkpoint with the single-process reader: header, kinds, naming of
 * components and blobs, piece placement per layout, CRCs, and values straight from disk. */
static void check_on_disk(const char *prefix, int nranks, int64_t counter, int64_t step,
                          ckpt_layout layout)
{
    ckpt_reader *rd = NULL;
    CHECK_OK(ckpt_reader_open(&rd, prefix));
    if (!rd)
        return;
    const ckpt_header *h = ckpt_reader_header(rd);
    CHECK_EQ_INT(h->world_size, nranks);
    CHECK_EQ_INT(h->layout, layout);
    CHECK_EQ_INT(h->save_counter, counter);
    CHECK_EQ_INT(h->step, step);
    CHECK_EQ_INT(h->epoch, epoch_for(step));

    struct {
        const char *name;
        ckpt_kind kind;
    } want[] = {{"w", CKPT_KIND_PARTITIONED},   {"w_cols", CKPT_KIND_PARTITIONED},
                {"bias", CKPT_KIND_REPLICATED}, {"global_step", CKPT_KIND_REPLICATED},
                {"empty", CKPT_KIND_FULL},      {"full_r0", CKPT_KIND_FULL},
                {"rng", CKPT_KIND_COMPONENT},   {"loader/rank_0", CKPT_KIND_BLOB}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t idx = 0;
        ckpt_tensor_info ti;
        int rc = ckpt_reader_find(&idx, rd, want[i].name);
        CHECK_MSG(rc == CKPT_OK, "on disk: tensor %s missing", want[i].name);
        if (rc != CKPT_OK)
            continue;
        CHECK_OK(ckpt_reader_tensor(&ti, rd, idx));
        CHECK_MSG(ti.kind == want[i].kind, "on disk: %s has kind %s, want %s", want[i].name,
                  ckpt_kind_name(ti.kind), ckpt_kind_name(want[i].kind));
        if ((want[i].kind == CKPT_KIND_REPLICATED || want[i].kind == CKPT_KIND_FULL) &&
            strcmp(want[i].name, "empty") != 0 && !g_max_shard)
            CHECK_MSG(ti.num_pieces == 1, "on disk: %s has %zu pieces, want 1", want[i].name,
                      ti.num_pieces);
    }
    /* max_shard_bytes: every stored piece of every tensor fits. */
    for (size_t i = 0; g_max_shard && i < ckpt_reader_num_tensors(rd); i++) {
        ckpt_tensor_info ti;
        if (ckpt_reader_tensor(&ti, rd, i) != CKPT_OK)
            continue;
        for (size_t j = 0; j < ti.num_pieces; j++) {
            ckpt_piece_info pi;
            if (ckpt_reader_piece(&pi, rd, i, j) == CKPT_OK)
                CHECK_MSG(pi.bytes <= (uint64_t)g_max_shard,
                          "%s piece %zu: %" PRIu64 " bytes > max_shard_bytes %" PRId64, ti.name, j,
                          pi.bytes, g_max_shard);
        }
    }
    /* Tensor count: w, w_cols, bias, global_step, empty, full_r<k>, rng + components,
     * loader/rank_<k>. */
    CHECK_EQ_INT(ckpt_reader_num_tensors(rd), 5 + 3 * (size_t)nranks);

    /* "w": one piece per rank; shared = one dataset with dataset_start == start; per-rank =
     * the rank's own file, dataset_start 0. */
    size_t wi = 0;
    if (ckpt_reader_find(&wi, rd, "w") == CKPT_OK) {
        ckpt_tensor_info ti;
        CHECK_OK(ckpt_reader_tensor(&ti, rd, wi));
        if (!g_max_shard)
            CHECK_EQ_INT(ti.num_pieces, nranks);
        const char *ds0 = NULL;
        for (size_t j = 0; j < ti.num_pieces; j++) {
            ckpt_piece_info pi;
            if (ckpt_reader_piece(&pi, rd, wi, j) != CKPT_OK)
                continue;
            char want_file[64];
            const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
            if (layout == CKPT_LAYOUT_SHARED) {
                snprintf(want_file, sizeof want_file, "%s.data-00000-of-00001", base);
                if (!ds0)
                    ds0 = pi.dataset;
                CHECK_MSG(strcmp(pi.dataset, ds0) == 0, "shared: w pieces in datasets %s and %s",
                          ds0, pi.dataset);
                CHECK_MSG(ckpt_slice_equal(&pi.dataset_slice, &pi.slice),
                          "shared: w piece %zu dataset_start != start", j);
            } else {
                tm_data_file_name(want_file, sizeof want_file, base, layout, nranks,
                                  (int)pi.rank);
                CHECK_MSG(pi.dataset_slice.start[0] == 0 && pi.dataset_slice.start[1] == 0,
                          "%s: w piece %zu dataset_start not 0", ckpt_layout_name(layout), j);
            }
            CHECK_MSG(strcmp(pi.file, want_file) == 0, "w piece %zu (rank %d) in file %s, want %s",
                      j, (int)pi.rank, pi.file, want_file);
            int64_t r0, nr;
            tm_part(TM_W_ROWS, nranks, pi.rank, &r0, &nr);
            if (g_max_shard) {
                CHECK_MSG(pi.bytes <= (uint64_t)g_max_shard,
                          "w piece %zu of %" PRIu64 " bytes > max_shard_bytes %" PRId64, j,
                          pi.bytes, g_max_shard);
                CHECK_MSG(pi.slice.start[0] >= r0 &&
                              pi.slice.start[0] + pi.slice.count[0] <= r0 + nr,
                          "w piece of rank %d holds rows %" PRId64 "+%" PRId64
                          ", outside its rows %" PRId64 "+%" PRId64,
                          (int)pi.rank, pi.slice.start[0], pi.slice.count[0], r0, nr);
            } else
                CHECK_MSG(pi.slice.start[0] == r0 && pi.slice.count[0] == nr,
                          "w piece of rank %d holds rows %" PRId64 "+%" PRId64 ", want %" PRId64
                          "+%" PRId64,
                          (int)pi.rank, pi.slice.start[0], pi.slice.count[0], r0, nr);
        }
    }

    /* Values straight from disk. */
    float w[TM_W_ROWS * TM_W_COLS];
    CHECK_OK(ckpt_reader_read(rd, "w", CKPT_FLOAT32, NULL, w, sizeof w));
    int bad = 0;
    for (int i = 0; i < TM_W_ROWS * TM_W_COLS; i++)
        bad += w[i] != (float)tm_float_value(TM_ID_W, i, step);
    CHECK_MSG(bad == 0, "on disk: %d values of w differ", bad);
    int64_t wc[TM_WC_ROWS * TM_WC_COLS];
    CHECK_OK(ckpt_reader_read(rd, "w_cols", CKPT_INT64, NULL, wc, sizeof wc));
    bad = 0;
    for (int i = 0; i < TM_WC_ROWS * TM_WC_COLS; i++)
        bad += wc[i] != tm_int_value(TM_ID_W_COLS, i, step);
    CHECK_MSG(bad == 0, "on disk: %d values of w_cols differ", bad);
    for (int c = 0; c < nranks; c++) {
        char name[64];
        uint64_t rng[TM_RNG_LEN] = {0, 0};
        if (c == 0)
            snprintf(name, sizeof name, "rng");
        else
            snprintf(name, sizeof name, "rng/parallel_component_%d", c);
        CHECK_OK(ckpt_reader_read(rd, name, CKPT_UINT64, NULL, rng, sizeof rng));
        for (int j = 0; j < TM_RNG_LEN; j++)
            CHECK_MSG(rng[j] == tm_rng_value(c, j, step), "on disk: %s[%d] = %" PRIu64, name, j,
                      rng[j]);
        double full[TM_FULL_ELEMS];
        snprintf(name, sizeof name, "full_r%d", c);
        CHECK_OK(ckpt_reader_read(rd, name, CKPT_FLOAT64, NULL, full, sizeof full));
        bad = 0;
        for (int i = 0; i < TM_FULL_ELEMS; i++)
            bad += full[i] != tm_float_value(TM_ID_FULL0 + c, i, step);
        CHECK_MSG(bad == 0, "on disk: %d values of %s differ", bad, name);

        char want_blob[64], blob[64] = {0};
        int len = (int)tm_blob_text(want_blob, sizeof want_blob, c, step);
        snprintf(name, sizeof name, "loader/rank_%d", c);
        size_t bi = 0;
        if (ckpt_reader_find(&bi, rd, name) == CKPT_OK) {
            ckpt_tensor_info ti;
            CHECK_OK(ckpt_reader_tensor(&ti, rd, bi));
            CHECK_MSG(ti.dtype == CKPT_UINT8 && ti.shape.ndims == 1 && ti.shape.dims[0] == len,
                      "on disk: %s is %s ndims %d dim0 %" PRId64 ", want uint8 [%d]", name,
                      ckpt_dtype_name(ti.dtype), ti.shape.ndims, ti.shape.dims[0], len);
            if (ti.dtype == CKPT_UINT8 && ti.shape.ndims == 1 && ti.shape.dims[0] == len) {
                CHECK_OK(ckpt_reader_read(rd, name, CKPT_UINT8, NULL, blob, (size_t)len));
                CHECK_MSG(memcmp(blob, want_blob, (size_t)len) == 0, "on disk: %s = '%s'", name,
                          blob);
            }
        } else {
            CHECK_MSG(0, "on disk: %s missing", name);
        }
    }
    CHECK_OK(ckpt_reader_verify(rd, NULL, NULL));
    ckpt_reader_free(rd);
}

static ckpt_saver *make_saver_on(MPI_Comm comm, ckpt_layout layout)
{
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = layout;
    o.collective_io = g_collective_io;
    o.max_shard_bytes = g_max_shard;
    ckpt_saver *s = NULL;
    CHECK_COLL(ckpt_saver_create(&s, comm, &o), CKPT_OK);
    return s;
}

static ckpt_saver *make_saver(ckpt_layout layout)
{
    return make_saver_on(MPI_COMM_WORLD, layout);
}

/* ---- roundtrip ---------------------------------------------------------------------------- */

static void save_and_check(ckpt_saver *s, tm_model *m, const char *prefix, int64_t step,
                           int64_t want_counter)
{
    char want[PATH_MAX], got[PATH_MAX];
    ckpt_save_info si = { .epoch = epoch_for(step), .step = step };
    snprintf(want, sizeof want, "%s-%" PRId64, prefix, want_counter);
    memset(got, 0, sizeof got);
    tm_fill(m, step);
    CHECK_COLL(ckpt_saver_save(s, prefix, &si, got, sizeof got), CKPT_OK);
    CHECK_MSG(strcmp(got, want) == 0, "save returned name '%s', want '%s'", got, want);
    CHECK_EQ_INT(ckpt_saver_counter(s), want_counter);
    check_files(want, g_size, g_layout, "save");
}

static void restore_and_check(ckpt_saver *s, tm_model *m, const char *prefix, int64_t counter,
                              int64_t step, const char *what)
{
    ckpt_restore_info ri;
    memset(&ri, 0xff, sizeof ri);
    tm_zero(m);
    CHECK_COLL(ckpt_saver_restore(s, prefix, NULL, &ri), CKPT_OK);
    check_model(m, step, TM_RESTORED, what);
    check_restore_info(&ri, counter, step, g_size, g_layout, what);
    CHECK_MSG(ckpt_saver_counter(s) == counter,
              "%s: counter after restore %" PRId64 ", want %" PRId64, what, ckpt_saver_counter(s),
              counter);
}

static int blob_ok_save(const void **data, size_t *len, void *payload)
{
    (void)payload;
    *data = "x";
    *len = 1;
    return CKPT_OK;
}

static int blob_fail_save(const void **data, size_t *len, void *payload)
{
    (void)data, (void)len, (void)payload;
    return CKPT_EIO;
}

static int blob_ok_restore(const void *data, size_t len, void *payload)
{
    (void)data, (void)len, (void)payload;
    return CKPT_OK;
}

static int blob_fail_restore(const void *data, size_t len, void *payload)
{
    (void)data, (void)len, (void)payload;
    return CKPT_ECORRUPT;
}

/* Registrations that cannot be restored or saved: the same error on every rank, nothing
 * committed. */
static void negative_cases(const char *good_prefix, const char *prefix)
{
    char p[PATH_MAX];
    float f[8] = {0};
    double d[8] = {0};
    ckpt_saver *s = make_saver(g_layout);
    if (!s)
        return;
    ckpt_shape sh7 = tm_shape(1, 7, 0), sh8 = tm_shape(1, 8, 0);

    snprintf(p, sizeof p, "%s/does-not-exist", g_outdir);
    CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &sh7, f, CKPT_REPLICA_PRIMARY));
    CHECK_COLL(ckpt_saver_restore(s, p, NULL, NULL), CKPT_ENOTFOUND);

    ckpt_saver_clear(s);
    CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT64, &sh7, d, CKPT_REPLICA_PRIMARY));
    CHECK_COLL(ckpt_saver_restore(s, good_prefix, NULL, NULL), CKPT_EMISMATCH);

    ckpt_saver_clear(s);
    CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &sh8, f, CKPT_REPLICA_PRIMARY));
    CHECK_COLL(ckpt_saver_restore(s, good_prefix, NULL, NULL), CKPT_EMISMATCH);

    /* Only the last rank asks for a name the checkpoint lacks: every rank fails. */
    ckpt_saver_clear(s);
    CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &sh7, f, CKPT_REPLICA_PRIMARY));
    if (g_rank == g_size - 1)
        CHECK_OK(ckpt_saver_add_full(s, "no_such_tensor", CKPT_FLOAT32, &sh7, f));
    CHECK_COLL(ckpt_saver_restore(s, good_prefix, NULL, NULL), CKPT_ENOTFOUND);

    /* A partitioned tensor with a gap: refused before anything is committed. */
    ckpt_saver_clear(s);
    ckpt_slice half;
    int64_t st = 0, ct = 4;
    ckpt_slice_init(&half, 1, &st, &ct);
    if (g_rank == 0)
        CHECK_OK(ckpt_saver_add_slice(s, "gappy", CKPT_FLOAT32, &sh8, &half, f));
    snprintf(p, sizeof p, "%s/gap", g_outdir);
    CHECK_COLL(ckpt_saver_write(s, p, NULL), CKPT_EMISMATCH);
    char idx[PATH_MAX + 16];
    snprintf(idx, sizeof idx, "%s.index", p);
    CHECK_MSG(!path_exists(idx), "failed save committed %s", idx);

    /* Every rank registers the same slice: duplicates (at 1 rank: a gap again). */
    ckpt_saver_clear(s);
    CHECK_OK(ckpt_saver_add_slice(s, "dup", CKPT_FLOAT32, &sh8, &half, f));
    snprintf(p, sizeof p, "%s/dup", g_outdir);
    CHECK_COLL(ckpt_saver_write(s, p, NULL), CKPT_EMISMATCH);
    snprintf(idx, sizeof idx, "%s.index", p);
    CHECK_MSG(!path_exists(idx), "failed save committed %s", idx);

    /* A replicated tensor registered on rank 0 only (at 1 rank: fine). */
    ckpt_saver_clear(s);
    if (g_rank == 0)
        CHECK_OK(ckpt_saver_add_replicated(s, "repl", CKPT_FLOAT32, &sh7, f, CKPT_REPLICA_PRIMARY));
    snprintf(p, sizeof p, "%s/repl", g_outdir);
    CHECK_COLL(ckpt_saver_write(s, p, NULL), g_size == 1 ? CKPT_OK : CKPT_EMISMATCH);

    /* A registered saver fails on the last rank at save: nothing committed, all fail alike. */
    ckpt_saver_clear(s);
    ckpt_blob_callbacks save_fails = {g_rank == g_size - 1 ? blob_fail_save : blob_ok_save,
                                      blob_ok_restore};
    CHECK_OK(ckpt_saver_add_blob(s, "b", &save_fails, NULL));
    CHECK_OK(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &sh7, f, CKPT_REPLICA_PRIMARY));
    snprintf(p, sizeof p, "%s/blobfail", g_outdir);
    int rc = ckpt_saver_write(s, p, NULL);
    CHECK_MSG(rc != CKPT_OK, "save with a failing registered saver returned %d", rc);
    coll(rc, COLL_ANY, "save with a failing registered saver");
    snprintf(idx, sizeof idx, "%s.index", p);
    CHECK_MSG(!path_exists(idx), "failed save committed %s", idx);

    /* A registered saver fails on the last rank at restore: every rank fails. */
    ckpt_saver_clear(s);
    ckpt_blob_callbacks restore_fails = {blob_ok_save, g_rank == g_size - 1 ? blob_fail_restore
                                                                            : blob_ok_restore};
    CHECK_OK(ckpt_saver_add_blob(s, "loader", &restore_fails, NULL));
    rc = ckpt_saver_restore(s, good_prefix, NULL, NULL);
    CHECK_MSG(rc != CKPT_OK, "restore with a failing registered saver returned %d", rc);
    coll(rc, COLL_ANY, "restore with a failing registered saver");
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(g_outdir, "after failed saves");

    /* Damaged data: one flipped byte in rank 0's piece of w in ckpt-1; ckpt-3's data file cut
     * short. Every rank reports CKPT_ECORRUPT, whichever rank reads the damage. */
    ckpt_saver_clear(s);
    int64_t r0, nr;
    tm_part(TM_W_ROWS, g_size, g_rank, &r0, &nr);
    float *w = calloc((size_t)(nr * TM_W_COLS) + 1, sizeof *w);
    ckpt_shape wsh = tm_shape(2, TM_W_ROWS, TM_W_COLS);
    ckpt_slice wsl = tm_slice2(r0, 0, nr, TM_W_COLS);
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &wsh, &wsl, w));
    snprintf(p, sizeof p, "%s-1", prefix);
    if (g_rank == 0)
        CHECK_OK(tm_flip_piece_byte(p, "w", 0, NULL, 0));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_COLL(ckpt_saver_restore(s, p, NULL, NULL), CKPT_ECORRUPT);
    snprintf(p, sizeof p, "%s-3", prefix);
    if (g_rank == 0) {
        char data[PATH_MAX + 64];
        tm_data_file_name(data, sizeof data, p, g_layout, g_size, 0);
        struct stat sb;
        CHECK(stat(data, &sb) == 0 && truncate(data, sb.st_size - 1) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_COLL(ckpt_saver_restore(s, p, NULL, NULL), CKPT_ECORRUPT);
    free(w);

    ckpt_saver_free(s);
}

/* Two savers on disjoint halves of the job (even and odd ranks) save and restore at the same
 * time: the saver must use its own communicator only. */
static void split_case(void)
{
    if (g_size < 2)
        return;
    int color = g_rank % 2, sr = 0, ss = 1;
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &sub);
    MPI_Comm_rank(sub, &sr);
    MPI_Comm_size(sub, &ss);
    char dir[PATH_MAX], prefix[PATH_MAX + 8], what[64];
    snprintf(dir, sizeof dir, "%s/split_%d", g_outdir, color);
    snprintf(prefix, sizeof prefix, "%s/ck", dir);
    snprintf(what, sizeof what, "sub-communicator %d (%d ranks)", color, ss);
    if (sr == 0)
        CHECK(mkdir_p(dir) == 0);
    MPI_Barrier(sub);
    ckpt_saver *s = make_saver_on(sub, g_layout);
    if (s) {
        tm_model m;
        CHECK_OK(tm_setup(&m, s, ss, sr, ss));
        tm_fill(&m, 70);
        ckpt_save_info si = { .epoch = epoch_for(70), .step = 70 };
        CHECK_COLL(ckpt_saver_write(s, prefix, &si), CKPT_OK);
        check_files(prefix, ss, g_layout, what);
        tm_zero(&m);
        ckpt_restore_info ri;
        memset(&ri, 0xff, sizeof ri);
        CHECK_COLL(ckpt_saver_restore(s, prefix, NULL, &ri), CKPT_OK);
        check_model(&m, 70, TM_RESTORED, what);
        check_restore_info(&ri, 0, 70, ss, g_layout, what);
        ckpt_saver_free(s);
        tm_free(&m);
    }
    MPI_Comm_free(&sub);
}

static void mode_roundtrip(void)
{
    char prefix[PATH_MAX], p[PATH_MAX + 32];
    snprintf(prefix, sizeof prefix, "%s/ckpt", g_outdir);
    if (g_rank == 0)
        CHECK(mkdir_p(g_outdir) == 0);
    MPI_Barrier(MPI_COMM_WORLD);

    ckpt_saver *s = make_saver(g_layout);
    if (!s)
        return;
    tm_model m;
    CHECK_OK(tm_setup(&m, s, g_size, g_rank, g_size));
    CHECK_EQ_INT(ckpt_saver_counter(s), 0);

    /* Two saves: -1 and -2, no temp left, both committed. */
    save_and_check(s, &m, prefix, 10, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(g_outdir, "after save 1");
    save_and_check(s, &m, prefix, 20, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(g_outdir, "after save 2");
    snprintf(p, sizeof p, "%s-1", prefix);
    check_files(p, g_size, g_layout, "ckpt-1 after save 2");
    if (g_rank == 0) {
        snprintf(p, sizeof p, "%s-2", prefix);
        check_on_disk(p, g_size, 2, 20, g_layout);
        snprintf(p, sizeof p, "%s-1", prefix);
        check_on_disk(p, g_size, 1, 10, g_layout);
    }
    /* The values registered at save time were left alone by the save. */
    m.blob_calls = 1, m.blob_rank = g_rank, m.blob_step = 20;
    check_model(&m, 20, TM_RESTORED, "buffers after save");

    /* Restore -2 and -1 into zeroed buffers. */
    snprintf(p, sizeof p, "%s-2", prefix);
    restore_and_check(s, &m, p, 2, 20, "restore ckpt-2");
    snprintf(p, sizeof p, "%s-1", prefix);
    restore_and_check(s, &m, p, 1, 10, "restore ckpt-1");

    /* After restoring ckpt-1 the counter is 1, so the next save targets ckpt-2, which exists.
     * saver.h does not say whether that overwrites or fails: accept either, agreed everywhere,
     * and a failure must leave ckpt-2 intact and the counter unchanged. */
    int64_t ck2_step = 20;
    {
        char got[PATH_MAX] = "";
        ckpt_save_info si2 = { .epoch = epoch_for(15), .step = 15 };
        tm_fill(&m, 15);
        int rc2 = ckpt_saver_save(s, prefix, &si2, got, sizeof got);
        coll(rc2, COLL_ANY, "save after restoring an older checkpoint");
        snprintf(p, sizeof p, "%s-2", prefix);
        if (rc2 == CKPT_OK) {
            CHECK_MSG(strcmp(got, p) == 0, "save after restoring ckpt-1 wrote '%s'", got);
            restore_and_check(s, &m, p, 2, 15, "restore overwritten ckpt-2");
            ck2_step = 15;
        } else {
            if (g_rank == 0)
                printf("note: save after restoring ckpt-1 returned %d (%s): %s\n", rc2,
                       ckpt_strerror(rc2), ckpt_error_last() ? ckpt_error_last()->message : "");
            CHECK_EQ_INT(ckpt_saver_counter(s), 1);
            restore_and_check(s, &m, p, 2, 20, "ckpt-2 after a refused save");
        }
        MPI_Barrier(MPI_COMM_WORLD);
        check_no_temp(g_outdir, "after save over an existing counter");
    }

    /* A fresh saver over the same buffers: restore sets its counter, the next save is -3. */
    ckpt_saver *s2 = make_saver(g_layout);
    if (s2) {
        CHECK_OK(tm_register(&m, s2));
        snprintf(p, sizeof p, "%s-2", prefix);
        restore_and_check(s2, &m, p, 2, ck2_step, "fresh saver restores ckpt-2");
        save_and_check(s2, &m, prefix, 30, 3);
        MPI_Barrier(MPI_COMM_WORLD);
        check_no_temp(g_outdir, "after save 3");
        snprintf(p, sizeof p, "%s-3", prefix);
        restore_and_check(s2, &m, p, 3, 30, "restore ckpt-3");
        ckpt_saver_free(s2);
    }

    /* write(): exactly the prefix, no counter; counter 0 recorded and restored. */
    int64_t before = ckpt_saver_counter(s);
    char exact[PATH_MAX];
    snprintf(exact, sizeof exact, "%s/exact", g_outdir);
    tm_fill(&m, 40);
    ckpt_save_info si = { .epoch = epoch_for(40), .step = 40 };
    CHECK_COLL(ckpt_saver_write(s, exact, &si), CKPT_OK);
    CHECK_EQ_INT(ckpt_saver_counter(s), before);
    check_files(exact, g_size, g_layout, "write");
    snprintf(p, sizeof p, "%s-%" PRId64 ".index", exact, before + 1);
    CHECK_MSG(!path_exists(p), "write() created %s", p);
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(g_outdir, "after write");
    if (g_rank == 0)
        check_on_disk(exact, g_size, 0, 40, g_layout);
    restore_and_check(s, &m, exact, 0, 40, "restore write()");

    /* The training-state layout: <work>/chief/<name>; workers' temp under <work>. */
    char work[PATH_MAX], chief[PATH_MAX + 8], cprefix[PATH_MAX + 16];
    snprintf(work, sizeof work, "%s/run", g_outdir);
    snprintf(chief, sizeof chief, "%s/chief", work);
    snprintf(cprefix, sizeof cprefix, "%s/ck", chief);
    if (g_rank == 0)
        CHECK(mkdir_p(chief) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    tm_fill(&m, 50);
    si.epoch = epoch_for(50);
    si.step = 50;
    CHECK_COLL(ckpt_saver_write(s, cprefix, &si), CKPT_OK);
    check_files(cprefix, g_size, g_layout, "write to chief/");
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(work, "after write to chief/ (work dir)");
    check_no_temp(chief, "after write to chief/");
    restore_and_check(s, &m, cprefix, 0, 50, "restore chief/ck");

    /* write() over an existing checkpoint's prefix must not leave it half-replaced: either it
     * succeeds and restores the new values, or it fails everywhere and the old one is intact. */
    tm_fill(&m, 60);
    si.epoch = epoch_for(60);
    si.step = 60;
    int rc = ckpt_saver_write(s, exact, &si);
    coll(rc, COLL_ANY, "write over an existing prefix");
    if (rc == CKPT_OK)
        restore_and_check(s, &m, exact, 0, 60, "restore overwritten write()");
    else
        restore_and_check(s, &m, exact, 0, 40, "restore after refused overwrite");
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(g_outdir, "after write over an existing prefix");

    ckpt_saver_free(s);
    snprintf(p, sizeof p, "%s-2", prefix);
    negative_cases(p, prefix);
    split_case();
    tm_free(&m);
}

/* ---- N -> M ------------------------------------------------------------------------------- */

static void mode_write(int n_expected, int64_t step)
{
    CHECK_MSG(g_size == n_expected, "write: running on %d ranks, expected %d", g_size, n_expected);
    if (g_rank == 0) {
        rm_rf(g_outdir);
        CHECK(mkdir_p(g_outdir) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/ck", g_outdir);
    ckpt_saver *s = make_saver(g_layout);
    if (!s)
        return;
    tm_model m;
    CHECK_OK(tm_setup(&m, s, g_size, g_rank, g_size));
    tm_fill(&m, step);
    ckpt_save_info si = { .epoch = epoch_for(step), .step = step };
    CHECK_COLL(ckpt_saver_write(s, prefix, &si), CKPT_OK);
    check_files(prefix, g_size, g_layout, "write");
    MPI_Barrier(MPI_COMM_WORLD);
    check_no_temp(g_outdir, "write");
    if (g_rank == 0)
        check_on_disk(prefix, g_size, 0, step, g_layout);
    ckpt_saver_free(s);
    tm_free(&m);
}

static void mode_read(int64_t step, int n_writer)
{
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/ck", g_outdir);
    ckpt_saver *s = make_saver(CKPT_LAYOUT_UNKNOWN);
    if (!s)
        return;
    tm_model m;
    CHECK_OK(tm_setup(&m, s, g_size, g_rank, n_writer));
    int have_own = g_rank < n_writer; /* the writer had this rank: component and blob exist */
    char what[128];
    ckpt_restore_info ri;

    /* Default options. */
    tm_zero(&m);
    memset(&ri, 0xff, sizeof ri);
    int rc = ckpt_saver_restore(s, prefix, NULL, &ri);
    snprintf(what, sizeof what, "restore %d -> %d ranks (default options)", n_writer, g_size);
    coll(rc, COLL_ANY, what);
    if (g_size > n_writer) {
        CHECK_MSG(rc == CKPT_ENOTFOUND,
                  "%s: returned %d (%s), want CKPT_ENOTFOUND: ranks >= %d have no rng component "
                  "or loader blob",
                  what, rc, ckpt_strerror(rc), n_writer);
        const ckpt_error *e = ckpt_error_last();
        CHECK_MSG(rc == CKPT_OK ||
                      (e && (strstr(e->message, "rng") || strstr(e->message, "loader"))),
                  "%s: message does not name the missing component or blob: %s", what,
                  e ? e->message : "(none)");
        /* saver.h does not say whether a failed restore may have run restore callbacks: note it. */
        int calls = m.blob_calls, total = 0;
        MPI_Allreduce(&calls, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (g_rank == 0 && total > 0)
            printf("note: %s failed, yet %d rank(s) ran the loader restore callback\n", what,
                   total);
    } else {
        CHECK_RC(rc, CKPT_OK);
        check_model(&m, step, TM_RESTORED, what);
        check_restore_info(&ri, 0, step, n_writer, g_layout, what);
        CHECK_EQ_INT(ckpt_saver_counter(s), 0);
    }

    /* skip_missing_per_rank: always succeeds; ranks the writer lacked keep rng and loader. */
    ckpt_restore_options ro = CKPT_RESTORE_OPTIONS_INIT;
    ro.skip_missing_per_rank = 1;
    tm_zero(&m);
    memset(&ri, 0xff, sizeof ri);
    snprintf(what, sizeof what, "restore %d -> %d ranks (skip_missing_per_rank)", n_writer, g_size);
    rc = ckpt_saver_restore(s, prefix, &ro, &ri);
    CHECK_RC(rc, CKPT_OK);
    coll(rc, COLL_ANY, what);
    check_model(&m, step, have_own ? TM_RESTORED : TM_UNTOUCHED, what);
    if (rc == CKPT_OK)
        check_restore_info(&ri, 0, step, n_writer, g_layout, what);

    ckpt_saver_free(s);
    tm_free(&m);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (argc < 4) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_saver OUTDIR roundtrip|write|read LAYOUT [args]\n");
        MPI_Finalize();
        return 2;
    }
    g_outdir = argv[1];
    const char *mode = argv[2];
    if (strcmp(argv[3], "shared") == 0)
        g_layout = CKPT_LAYOUT_SHARED;
    else if (strcmp(argv[3], "per-rank") == 0)
        g_layout = CKPT_LAYOUT_PER_RANK;
    else if (strcmp(argv[3], "shared-coll") == 0)
        g_layout = CKPT_LAYOUT_SHARED, g_collective_io = 1;
    else if (strcmp(argv[3], "shared-shard") == 0)
        g_layout = CKPT_LAYOUT_SHARED, g_max_shard = SHARD_BYTES;
    else if (strcmp(argv[3], "per-rank-shard") == 0)
        g_layout = CKPT_LAYOUT_PER_RANK, g_max_shard = SHARD_BYTES;
    else if (strcmp(argv[3], "per-node") == 0) /* nodes: MPICKPT_RANKS_PER_NODE (model.h) */
        g_layout = CKPT_LAYOUT_PER_NODE;
    else if (strcmp(argv[3], "per-node-shard") == 0)
        g_layout = CKPT_LAYOUT_PER_NODE, g_max_shard = SHARD_BYTES;
    else {
        if (g_rank == 0)
            fprintf(stderr, "test_saver: unknown layout %s\n", argv[3]);
        MPI_Finalize();
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "test_saver %s %s", mode, argv[3]);
    if (strcmp(mode, "roundtrip") == 0 && argc == 4) {
        mode_roundtrip();
    } else if (strcmp(mode, "write") == 0 && argc == 6) {
        mode_write(atoi(argv[4]), strtoll(argv[5], NULL, 10));
    } else if (strcmp(mode, "read") == 0 && argc == 6) {
        mode_read(strtoll(argv[4], NULL, 10), atoi(argv[5]));
    } else {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_saver OUTDIR roundtrip LAYOUT | write LAYOUT N STEP | "
                            "read LAYOUT STEP N_WRITER\n");
        MPI_Finalize();
        return 2;
    }
    return check_mpi_done(name);
}
