/* Scale: save, restore and N -> M restore at tens to hundreds of (oversubscribed) ranks with tiny
 * payloads, in every layout (issue 15, CTest label "scale").
 *
 *   test_scale OUTDIR write LAYOUT N          on N ranks: writes OUTDIR/saver/ck with the saver
 *                                             and OUTDIR/mgr/ckpt-1 with the manager; restores
 *                                             both; checks the files on disk
 *   test_scale OUTDIR read LAYOUT N_WRITER    on any number of ranks: restores what the writer of
 *                                             N_WRITER ranks left in OUTDIR (saver and manager)
 *
 * LAYOUT is "per-rank", "shared" or "per-node:K" (nodes of K ranks simulated on one machine). The
 * layout is chosen the way a job chooses it, through the environment (MPICKPT_LAYOUT, and
 * MPICKPT_RANKS_PER_NODE=K for per-node), so that a layout is one more value here and needs no
 * enum of its own; the write fails (never skips) when the library refuses the value.
 *
 * What every rank holds is the test model of model.h: "w" (37 rows, so past 37 ranks most ranks
 * hold none of it), "w_cols", a full tensor full_r<r> per writer rank (spread over the ranks of a
 * reader), replicated "bias" and "global_step", a per-rank component "rng" and blob "loader", and
 * "big", uint32 [G, 256] partitioned by uneven rows over every rank, G = big_rows(N) (1 KiB a row:
 * ~2.5 KiB per rank). Values are a function of the global index and the step only, so any rank
 * count checks them: every rank checks every element it holds after every restore, and rank 0
 * reads every element of every tensor back from disk with the single-process reader.
 *
 * Files: per-rank N data files, each holding one rank's pieces; shared 1; per-node:K ceil(N/K),
 * each holding the pieces of at most K ranks, every rank's pieces in one file. Counted from the
 * index (ckpt_reader) and from the directory.
 *
 * Per-node (several nodes of several ranks: the hierarchical merge, node leaders merging their
 * ranks' fragments) writes the saver's checkpoint a second time with MPICKPT_HIER_MERGE=0 (every
 * fragment to the chief) and rank 0 checks that the two indexes are the same bytes but for the
 * timestamp. */
#include "mpi_check.h"
#include "coll.h"
#include "index.h"
#include "mpickpt.h"

#include <dirent.h>
#include <string.h>

#define STEP_SAVER 7001 /* the saver's checkpoint OUTDIR/saver/ck */
#define STEP_MGR 7002   /* the manager's OUTDIR/mgr/ckpt-1 */
/* Per case (ctest allows 600 s): a phase at 128 oversubscribed ranks takes seconds. */
#define WATCHDOG_S 240

static int g_rank, g_size;
static const char *g_outdir;
static char g_layout[32];    /* "per-rank", "shared", "per-node" */
static int g_ranks_per_node; /* per-node: K */

static int64_t epoch_for(int64_t step)
{
    return step / 10;
}

/* Rows of "big" for a writer of n ranks: 2 to 3 rows per rank, uneven. */
static int64_t big_rows(int n)
{
    return (int64_t)n * 5 / 2 + 1;
}

/* Data files a checkpoint written by n ranks must have. */
static int expected_files(int n)
{
    if (strcmp(g_layout, "shared") == 0)
        return 1;
    if (strcmp(g_layout, "per-node") == 0)
        return (n + g_ranks_per_node - 1) / g_ranks_per_node;
    return n;
}

/* Ranks whose pieces one data file may hold. */
static int ranks_per_file(int n)
{
    if (strcmp(g_layout, "shared") == 0)
        return n;
    if (strcmp(g_layout, "per-node") == 0)
        return g_ranks_per_node;
    return 1;
}

static int parse_layout(const char *arg)
{
    if (strcmp(arg, "per-rank") == 0 || strcmp(arg, "shared") == 0) {
        snprintf(g_layout, sizeof g_layout, "%s", arg);
        return 0;
    }
    if (strncmp(arg, "per-node:", 9) == 0) {
        char *end;
        long k = strtol(arg + 9, &end, 10);
        if (*end || k < 1 || k > 1 << 20)
            return -1;
        snprintf(g_layout, sizeof g_layout, "per-node");
        g_ranks_per_node = (int)k;
        return 0;
    }
    return -1;
}

/* ---- on disk (rank 0, single-process reader) ------------------------------------------------ */

/* Counts a mismatch of an element read from disk (the first few printed). */
static int g_disk_bad;
#define DISK_BAD(...)                                                                              \
    do {                                                                                           \
        if (g_disk_bad++ < 5)                                                                      \
            CHECK_MSG(0, __VA_ARGS__);                                                             \
    } while (0)

/* Reads tensor `name` whole into a fresh buffer of `bytes` bytes (NULL on failure, checked). */
static void *read_whole(ckpt_reader *rd, const char *name, ckpt_dtype dt, size_t bytes)
{
    void *buf = malloc(bytes ? bytes : 1);
    CHECK(buf != NULL);
    if (!buf)
        return NULL;
    int rc = ckpt_reader_read(rd, name, dt, NULL, buf, bytes);
    CHECK_MSG(rc == CKPT_OK, "on disk: reading %s: %s: %s", name, ckpt_strerror(rc), msg_of());
    if (rc != CKPT_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Every element of every tensor of the checkpoint written by n ranks at `step`, read back from
 * disk with the single-process reader. */
static void check_disk_values(ckpt_reader *rd, int n, int64_t step)
{
    g_disk_bad = 0;
    int64_t g = big_rows(n);
    CHECK_EQ_INT(ckpt_reader_num_tensors(rd), 6 + 3 * (size_t)n);

    float *w = read_whole(rd, "w", CKPT_FLOAT32, TM_W_ROWS * TM_W_COLS * sizeof(float));
    for (int64_t i = 0; w && i < TM_W_ROWS * TM_W_COLS; i++)
        if (w[i] != (float)tm_float_value(TM_ID_W, i, step))
            DISK_BAD("on disk: w[flat %" PRId64 "] = %.9g", i, (double)w[i]);
    free(w);
    int64_t *wc = read_whole(rd, "w_cols", CKPT_INT64, TM_WC_ROWS * TM_WC_COLS * sizeof(int64_t));
    for (int64_t i = 0; wc && i < TM_WC_ROWS * TM_WC_COLS; i++)
        if (wc[i] != tm_int_value(TM_ID_W_COLS, i, step))
            DISK_BAD("on disk: w_cols[flat %" PRId64 "] = %" PRId64, i, wc[i]);
    free(wc);
    uint32_t *big = read_whole(rd, "big", CKPT_UINT32, (size_t)g * TM_BIG_COLS * sizeof(uint32_t));
    for (int64_t i = 0; big && i < g * TM_BIG_COLS; i++)
        if (big[i] != tm_big_value(i, step))
            DISK_BAD("on disk: big[flat %" PRId64 "] = %" PRIu32, i, big[i]);
    free(big);
    float *bias = read_whole(rd, "bias", CKPT_FLOAT32, TM_BIAS_LEN * sizeof(float));
    for (int64_t i = 0; bias && i < TM_BIAS_LEN; i++)
        if (bias[i] != (float)tm_float_value(TM_ID_BIAS, i, step))
            DISK_BAD("on disk: bias[%" PRId64 "] = %.9g", i, (double)bias[i]);
    free(bias);
    int64_t *gs = read_whole(rd, "global_step", CKPT_INT64, sizeof(int64_t));
    if (gs && *gs != tm_int_value(TM_ID_GLOBAL_STEP, 0, step))
        DISK_BAD("on disk: global_step = %" PRId64, *gs);
    free(gs);

    for (int k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "full_r%d", k);
        double *f = read_whole(rd, name, CKPT_FLOAT64, TM_FULL_ELEMS * sizeof(double));
        for (int64_t i = 0; f && i < TM_FULL_ELEMS; i++)
            if (f[i] != tm_float_value(TM_ID_FULL0 + k, i, step))
                DISK_BAD("on disk: %s[%" PRId64 "] = %.17g", name, i, f[i]);
        free(f);
        /* the per-rank component: rank 0's under the plain name (saver.h) */
        if (k == 0)
            snprintf(name, sizeof name, "rng");
        else
            snprintf(name, sizeof name, "rng/parallel_component_%d", k);
        uint64_t *c = read_whole(rd, name, CKPT_UINT64, TM_RNG_LEN * sizeof(uint64_t));
        for (int64_t j = 0; c && j < TM_RNG_LEN; j++)
            if (c[j] != tm_rng_value(k, j, step))
                DISK_BAD("on disk: %s[%" PRId64 "] = %" PRIu64, name, j, c[j]);
        free(c);
        /* the blob: a uint8 vector of the text's length */
        char want[TM_BLOB_MAX];
        size_t len = tm_blob_text(want, sizeof want, k, step);
        snprintf(name, sizeof name, "loader/rank_%d", k);
        size_t idx = 0;
        ckpt_tensor_info ti;
        if (ckpt_reader_find(&idx, rd, name) != CKPT_OK ||
            ckpt_reader_tensor(&ti, rd, idx) != CKPT_OK) {
            DISK_BAD("on disk: blob %s missing", name);
            continue;
        }
        CHECK_MSG(ti.shape.ndims == 1 && ti.shape.dims[0] == (int64_t)len,
                  "on disk: %s has %d dims, %lld bytes, want %zu", name, ti.shape.ndims,
                  (long long)ti.shape.dims[0], len);
        if (ti.shape.ndims != 1 || ti.shape.dims[0] != (int64_t)len)
            continue;
        char *b = read_whole(rd, name, CKPT_UINT8, len);
        if (b && memcmp(b, want, len) != 0)
            DISK_BAD("on disk: %s = \"%.*s\", want \"%s\"", name, (int)len, b, want);
        free(b);
    }
    CHECK_MSG(g_disk_bad == 0, "on disk: %d values differ from step %" PRId64, g_disk_bad, step);
}

/* The data files of checkpoint `prefix` (written by n ranks): counted from the index (the distinct
 * files its pieces name; which ranks wrote into each) and from the directory (entries named
 * <name>.data-*). */
static void check_disk_files(const char *prefix, int n, const char *what)
{
    ckpt_reader *rd = NULL;
    int rc = ckpt_reader_open(&rd, prefix); /* also checks every data file exists, full size */
    CHECK_MSG(rc == CKPT_OK, "%s: ckpt_reader_open(%s): %s: %s", what, prefix, ckpt_strerror(rc),
              msg_of());
    if (rc != CKPT_OK)
        return;
    const ckpt_header *h = ckpt_reader_header(rd);
    CHECK_EQ_INT(h->world_size, n);
    CHECK_MSG(strcmp(ckpt_layout_name(h->layout), g_layout) == 0,
              "%s: index says layout %s, want %s", what, ckpt_layout_name(h->layout), g_layout);

    /* file of each rank; ranks of each file */
    const char **files = calloc((size_t)n + 1, sizeof *files);
    int *nfile_ranks = calloc((size_t)n + 1, sizeof *nfile_ranks);
    int *file_of = malloc((size_t)n * sizeof *file_of);
    CHECK(files && nfile_ranks && file_of);
    if (!files || !nfile_ranks || !file_of)
        goto out;
    for (int r = 0; r < n; r++)
        file_of[r] = -1;
    int nfiles = 0, too_many = 0;
    for (size_t i = 0; i < ckpt_reader_num_tensors(rd); i++) {
        ckpt_tensor_info ti;
        CHECK_OK(ckpt_reader_tensor(&ti, rd, i));
        for (size_t j = 0; j < ti.num_pieces; j++) {
            ckpt_piece_info pi;
            if (ckpt_reader_piece(&pi, rd, i, j) != CKPT_OK) {
                CHECK_MSG(0, "%s: piece %zu of %s unreadable", what, j, ti.name);
                continue;
            }
            CHECK_MSG(pi.rank >= 0 && pi.rank < n, "%s: %s piece %zu written by rank %d of %d",
                      what, ti.name, j, (int)pi.rank, n);
            if (pi.rank < 0 || pi.rank >= n)
                continue;
            int f = 0;
            while (f < nfiles && strcmp(files[f], pi.file) != 0)
                f++;
            if (f == nfiles) {
                if (nfiles == n) { /* more files than ranks: counted, not stored */
                    too_many++;
                    continue;
                }
                files[nfiles++] = pi.file;
            }
            if (file_of[pi.rank] == -1) {
                file_of[pi.rank] = f;
                nfile_ranks[f]++;
            } else {
                CHECK_MSG(file_of[pi.rank] == f, "%s: rank %d wrote pieces into %s and %s", what,
                          (int)pi.rank, files[file_of[pi.rank]], pi.file);
            }
        }
    }
    CHECK_MSG(nfiles + too_many == expected_files(n) && too_many == 0,
              "%s: %s layout of %d ranks: the index names %d data files, want %d", what, g_layout,
              n, nfiles + too_many, expected_files(n));
    for (int r = 0; r < n; r++)
        CHECK_MSG(file_of[r] >= 0, "%s: rank %d wrote no piece (no rng component, no loader)", what,
                  r);
    for (int f = 0; f < nfiles; f++)
        CHECK_MSG(nfile_ranks[f] <= ranks_per_file(n),
                  "%s: %s holds the pieces of %d ranks, at most %d in the %s layout", what,
                  files[f], nfile_ranks[f], ranks_per_file(n), g_layout);

    /* the directory: <name>.data-* entries, one per file the index names */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", prefix);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : prefix;
    if (slash)
        *slash = '\0';
    char stem[600];
    snprintf(stem, sizeof stem, "%s.data-", base);
    DIR *d = opendir(slash ? dir : ".");
    CHECK_MSG(d != NULL, "%s: cannot list %s", what, dir);
    int on_disk = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (strncmp(de->d_name, stem, strlen(stem)) == 0)
            on_disk++;
    if (d)
        closedir(d);
    CHECK_MSG(on_disk == expected_files(n), "%s: %d files %s* in %s, want %d", what, on_disk, stem,
              dir, expected_files(n));
    printf("  %s: %d data files for %d ranks (%s layout), %zu tensors\n", what, on_disk, n,
           g_layout, ckpt_reader_num_tensors(rd));

    /* every piece's CRC, then every value */
    rc = ckpt_reader_verify(rd, NULL, NULL);
    CHECK_MSG(rc == CKPT_OK, "%s: ckpt_reader_verify: %s: %s", what, ckpt_strerror(rc), msg_of());
    check_disk_values(rd, n, h->step);
out:
    free(files);
    free(nfile_ranks);
    free(file_of);
    ckpt_reader_free(rd);
}

/* ---- collective steps ---------------------------------------------------------------------- */

/* The restore info of a restore of the writer's checkpoint (n_writer ranks, `step`). */
static void check_info(const ckpt_restore_info *ri, int64_t step, int n_writer, const char *what)
{
    CHECK_MSG(ri->step == step && ri->epoch == epoch_for(step),
              "%s: restore info step %" PRId64 " epoch %" PRId64 ", want %" PRId64 " %" PRId64,
              what, ri->step, ri->epoch, (int64_t)step, epoch_for(step));
    CHECK_MSG(ri->world_size == n_writer, "%s: restore info world_size %d, want %d", what,
              (int)ri->world_size, n_writer);
    CHECK_MSG(strcmp(ckpt_layout_name(ri->layout), g_layout) == 0,
              "%s: restore info layout %s, want %s", what, ckpt_layout_name(ri->layout), g_layout);
}

/* Restores `prefix` (written by n_writer ranks at `step`) into a zeroed model and checks every
 * value on every rank. Ranks the writer did not have keep their rng and loader (skip). */
static void saver_restore(ckpt_saver *s, tm_model *m, const char *prefix, int64_t step,
                          int n_writer, const char *what)
{
    check_case(1, "%s", what);
    ckpt_restore_options ro = CKPT_RESTORE_OPTIONS_INIT;
    ro.skip_missing_per_rank = g_size > n_writer;
    ckpt_restore_info ri;
    memset(&ri, 0xff, sizeof ri);
    tm_zero(m);
    if (!coll(ckpt_saver_restore(s, prefix, &ro, &ri), CKPT_OK, what))
        return;
    check_values(m, step, g_rank < n_writer ? TM_RESTORED : TM_UNTOUCHED, what);
    check_info(&ri, step, n_writer, what);
}

/* A manager over `dir` restores its latest checkpoint (the writer's ckpt-1, n_writer ranks, step
 * STEP_MGR) into a zeroed model; every value checked on every rank. */
static void manager_restore(ckpt_saver *s, tm_model *m, const char *dir, int n_writer,
                            const char *what)
{
    check_case(1, "%s", what);
    ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT;
    mo.skip_missing_per_rank = g_size > n_writer;
    ckpt_manager *mg = NULL;
    char w[256];
    snprintf(w, sizeof w, "%s: ckpt_manager_create", what);
    if (!coll(ckpt_manager_create(&mg, s, dir, &mo), CKPT_OK, w))
        return;
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(m);
    snprintf(w, sizeof w, "%s: ckpt_manager_restore_latest", what);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, w)) {
        CHECK_MSG(res.restored == 1 && res.skipped == 0,
                  "%s: restored %d, skipped %d; want the writer's checkpoint, none skipped", what,
                  res.restored, res.skipped);
        CHECK_MSG(ends_with(res.prefix, "/ckpt-1"), "%s: restored %s, want ckpt-1", what,
                  res.prefix);
        CHECK_MSG(res.step == STEP_MGR && res.epoch == epoch_for(STEP_MGR) &&
                      res.world_size == n_writer && res.save_counter == 1,
                  "%s: restored step %" PRId64 " epoch %" PRId64 " world %d counter %" PRId64
                  ", want %d %" PRId64 " %d 1",
                  what, res.step, res.epoch, (int)res.world_size, res.save_counter, STEP_MGR,
                  epoch_for(STEP_MGR), n_writer);
        if (res.restored)
            check_values(m, STEP_MGR, g_rank < n_writer ? TM_RESTORED : TM_UNTOUCHED, what);
    }
    ckpt_manager_free(mg);
}

/* A saver in the layout under test: the environment names it, as a job's would. A refused layout
 * fails the test on every rank with the library's message (it never skips). Collective. */
static ckpt_saver *layout_saver(void)
{
    setenv("MPICKPT_LAYOUT", g_layout, 1);
    if (g_ranks_per_node > 0) {
        char k[16];
        snprintf(k, sizeof k, "%d", g_ranks_per_node);
        setenv("MPICKPT_RANKS_PER_NODE", k, 1);
        /* simulated nodes: the hierarchical merge only when asked (unless a case says 0) */
        setenv("MPICKPT_HIER_MERGE", "1", 0);
    }
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, NULL);
    char what[160];
    snprintf(what, sizeof what, "ckpt_saver_create with MPICKPT_LAYOUT=%s", g_layout);
    if (!coll(rc, CKPT_OK, what) || !s) {
        if (g_rank == 0)
            fprintf(stderr, "test_scale: FAILED: the library refuses layout '%s' (%s): %s\n",
                    g_layout, ckpt_strerror(rc), g_msg);
        ckpt_saver_free(s);
        return NULL;
    }
    return s;
}

static void join(char *out, size_t n, const char *a, const char *b)
{
    snprintf(out, n, "%s/%s", a, b);
}

/* Rank 0: the indexes of checkpoints `a` and `b` are the same message, byte for byte, but for the
 * header's timestamp. */
static void check_same_index(const char *a, const char *b, const char *what)
{
    char pa[4300], pb[4300];
    snprintf(pa, sizeof pa, "%s.index", a);
    snprintf(pb, sizeof pb, "%s.index", b);
    Mpickpt__Index *ia = NULL, *ib = NULL;
    CHECK_OK(ckpt__index_load(&ia, pa));
    CHECK_OK(ckpt__index_load(&ib, pb));
    if (ia && ib) {
        ia->header->timestamp = ib->header->timestamp = 0;
        size_t na = mpickpt__index__get_packed_size(ia), nb = mpickpt__index__get_packed_size(ib);
        uint8_t *ba = malloc(na ? na : 1), *bb = malloc(nb ? nb : 1);
        CHECK_MSG(ba && bb, "%s: out of memory", what);
        if (ba && bb) {
            mpickpt__index__pack(ia, ba);
            mpickpt__index__pack(ib, bb);
            CHECK_MSG(na == nb && memcmp(ba, bb, na) == 0,
                      "%s: the indexes differ (%zu and %zu bytes; %zu tensors and %zu)", what, na,
                      nb, ia->n_tensors, ib->n_tensors);
        }
        free(ba);
        free(bb);
    }
    if (ia)
        mpickpt__index__free_unpacked(ia, NULL);
    if (ib)
        mpickpt__index__free_unpacked(ib, NULL);
}

/* Per-node: the save again with MPICKPT_HIER_MERGE=0 (every rank's fragment to the chief) into
 * OUTDIR/flat/ck, and its index compared with the hierarchical merge's at `prefix` (nodes of
 * consecutive ranks: the same index). */
static void check_flat_merge(tm_model *m, const char *prefix, const ckpt_save_info *si)
{
    char dir[4096], flat[4200], what[160];
    join(dir, sizeof dir, g_outdir, "flat");
    join(flat, sizeof flat, dir, "ck");
    make_dir(dir);
    snprintf(what, sizeof what, "%s on %d ranks: the index without the hierarchical merge",
             g_layout, g_size);
    check_case(1, "%s", what);
    setenv("MPICKPT_HIER_MERGE", "0", 1);
    ckpt_saver *f = layout_saver();
    setenv("MPICKPT_HIER_MERGE", "1", 1);
    if (!f)
        return;
    register_or_die(m, f);
    tm_fill(m, STEP_SAVER);
    if (coll(ckpt_saver_write(f, flat, si), CKPT_OK, what) && g_rank == 0)
        check_same_index(prefix, flat, what);
    ckpt_saver_free(f);
}

static void mode_write(int n_expected)
{
    CHECK_MSG(g_size == n_expected, "write: running on %d ranks, expected %d", g_size, n_expected);
    if (g_size != n_expected)
        return;
    char sdir[4096], prefix[4200], mdir[4096], what[160];
    join(sdir, sizeof sdir, g_outdir, "saver");
    join(prefix, sizeof prefix, sdir, "ck");
    join(mdir, sizeof mdir, g_outdir, "mgr");
    make_dir(sdir);

    check_case(1, "create a saver (layout %s) on %d ranks", g_layout, g_size);
    ckpt_saver *s = layout_saver();
    if (!s)
        return;
    tm_model m;
    int rc = tm_init(&m, g_size, g_rank, g_size, big_rows(g_size));
    CHECK_OK(rc);
    if (rc != CKPT_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    register_or_die(&m, s);

    /* the saver: write, files, restore */
    snprintf(what, sizeof what, "save %s on %d ranks", g_layout, g_size);
    check_case(1, "%s", what);
    tm_fill(&m, STEP_SAVER);
    ckpt_save_info si = {.epoch = epoch_for(STEP_SAVER), .step = STEP_SAVER};
    if (coll(ckpt_saver_write(s, prefix, &si), CKPT_OK, what)) {
        check_dir_clean(sdir, NULL, what);
        if (g_rank == 0)
            check_disk_files(prefix, g_size, what);
        snprintf(what, sizeof what, "restore %s %d -> %d ranks (saver)", g_layout, g_size, g_size);
        saver_restore(s, &m, prefix, STEP_SAVER, g_size, what);
    }
    if (strcmp(g_layout, "per-node") == 0)
        check_flat_merge(&m, prefix, &si);

    /* the manager: save ckpt-1, restore it */
    snprintf(what, sizeof what, "save %s on %d ranks (manager)", g_layout, g_size);
    check_case(1, "%s", what);
    ckpt_manager *mg = NULL;
    if (coll(ckpt_manager_create(&mg, s, mdir, NULL), CKPT_OK, "ckpt_manager_create")) {
        tm_fill(&m, STEP_MGR);
        ckpt_manager_save_info mi = {.epoch = epoch_for(STEP_MGR), .step = STEP_MGR};
        char out[4200] = "";
        if (coll(ckpt_manager_save(mg, &mi, out, sizeof out), CKPT_OK, what)) {
            check_dir_clean(mdir, DIR_STATE, what);
            if (g_rank == 0)
                check_disk_files(out, g_size, what);
        }
        ckpt_manager_free(mg);
        snprintf(what, sizeof what, "restore %s %d -> %d ranks (manager)", g_layout, g_size,
                 g_size);
        manager_restore(s, &m, mdir, g_size, what);
    }
    ckpt_saver_free(s);
    tm_free(&m);
}

static void mode_read(int n_writer)
{
    char prefix[4200], mdir[4096], what[160];
    snprintf(prefix, sizeof prefix, "%s/saver/ck", g_outdir);
    join(mdir, sizeof mdir, g_outdir, "mgr");
    /* a reader takes the layout from the checkpoint; its own setting must not matter */
    unsetenv("MPICKPT_LAYOUT");
    unsetenv("MPICKPT_RANKS_PER_NODE");
    check_case(1, "create a saver on %d ranks to read %d ranks' checkpoints", g_size, n_writer);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 0, 0);
    tm_model m;
    int rc = tm_init(&m, g_size, g_rank, n_writer, big_rows(n_writer));
    CHECK_OK(rc);
    if (rc != CKPT_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    register_or_die(&m, s);

    if (g_size > n_writer) {
        /* without skip_missing_per_rank: the ranks the writer lacked have no rng component and
         * no loader blob, the same CKPT_ENOTFOUND on every rank */
        snprintf(what, sizeof what, "restore %s %d -> %d ranks (per-rank data missing)", g_layout,
                 n_writer, g_size);
        check_case(1, "%s", what);
        tm_zero(&m);
        rc = ckpt_saver_restore(s, prefix, NULL, NULL);
        if (coll(rc, CKPT_ENOTFOUND, what))
            CHECK_MSG(strstr(g_msg, "rng") || strstr(g_msg, "loader"),
                      "%s: the message names neither rng nor loader: %s", what, g_msg);
    }
    snprintf(what, sizeof what, "restore %s %d -> %d ranks (saver)", g_layout, n_writer, g_size);
    saver_restore(s, &m, prefix, STEP_SAVER, n_writer, what);
    snprintf(what, sizeof what, "restore %s %d -> %d ranks (manager)", g_layout, n_writer, g_size);
    manager_restore(s, &m, mdir, n_writer, what);
    ckpt_saver_free(s);
    tm_free(&m);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    setvbuf(stderr, NULL, _IOLBF, 0);
    check_watchdog_s = WATCHDOG_S;
    const char *usage = "usage: test_scale OUTDIR write LAYOUT N | read LAYOUT N_WRITER\n"
                        "  LAYOUT: per-rank, shared or per-node:K\n";
    long n = argc == 5 ? strtol(argv[4], NULL, 10) : 0;
    if (argc != 5 || parse_layout(argv[3]) != 0 || n < 1 || n > 1 << 20 ||
        (strcmp(argv[2], "write") != 0 && strcmp(argv[2], "read") != 0)) {
        if (g_rank == 0)
            fputs(usage, stderr);
        MPI_Finalize();
        return 2;
    }
    g_outdir = argv[1];
    double t0 = MPI_Wtime();
    if (strcmp(argv[2], "write") == 0)
        mode_write((int)n);
    else
        mode_read((int)n);
    alarm(0);
    if (g_rank == 0)
        printf("  %s %s: %.1f s after MPI_Init\n", argv[2], argv[3], MPI_Wtime() - t0);
    char name[96];
    snprintf(name, sizeof name, "test_scale %s %s", argv[2], argv[3]);
    return check_mpi_done(name);
}
