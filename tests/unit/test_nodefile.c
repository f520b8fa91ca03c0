/* lib/nodefile.h without mpirun: a per-node save of four simulated ranks in two nodes ({0, 1}, led
 * by rank 0 in <base>.<id>_temp, and {2, 3}, led by rank 2 in workertemp_2.<id>), made with the
 * library's MPI-free phases as mpi/save_node.c drives them (each rank's list packed and unpacked
 * as on the wire, the leaders' files, every rank's pwrite through its own descriptor), merged,
 * committed and read back:
 *   save          two data files; every value read back by ckpt_reader (a piece over 1 MiB with
 *                 block checksums, packed pieces, a replicated scalar, an empty tensor, blobs of
 *                 which one is empty), verify, row windows inside blocks, the node files' HDF5
 *                 datasets (each rank's pack under /packs/rank-<r>), the header's layout;
 *   leftover      a node file left by a crashed save (older workertemp_2, another save's
 *                 workertemp_2.<id>) is neither used nor removed;
 *   hostile lists a peer's list with a dataset path of two components, outside /tensors and
 *                 /packs, "..", a byte count that does not fit its box, two pieces, 17 dimensions,
 *                 an invalid dtype, a box outside its shape: CKPT_ECORRUPT naming the rank, nothing
 *                 created that stays open; two ranks claiming one dataset path: an error;
 *   placements    offsets that are too few, too many, or outside the file: CKPT_ECORRUPT, nothing
 *                 written outside the file;
 *   layouts       an index of layout 3 validates; layout 4 is "unknown layout". */
#include "phases.h"

#include "arena.h"
#include "commit.h"
#include "fragment.h"
#include "fsutil.h"
#include "h5io.h"
#include "index.h"
#include "nodefile.h"
#include "paths.h"
#include "plan.h"
#include "record.h"
#include "shard.h"
#include "validate.h"

#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>

enum { SIZE = 4, NODES = 2 };
#define BIG_COLS 1024
#define BIG_ROWS_PER_RANK 300 /* 1.2 MB of float32 per rank: two checksum blocks */
#define PACK_MAX 64

static int leader_of(int r)
{
    return r < 2 ? 0 : 2;
}
static int node_of(int r)
{
    return r < 2 ? 0 : 1;
}

static float big_val(int seed, int64_t i)
{
    return (float)(seed * 7 + i % 100003);
}
static int32_t small_val(int seed, int r, int i)
{
    return seed * 100 + r * 10 + i;
}
static double lr_val(int seed)
{
    return seed + 0.125;
}

typedef struct sim {
    char dir[4200], prefix[4400];
    int dirfd, workfd;
    ckpt__save_names n[SIZE];
    int tempfd[SIZE];
    ckpt__regs regs[SIZE];
    ckpt__pieces pieces[SIZE];
    ckpt__record rec[SIZE];
    ckpt__shard_bufs bufs[SIZE];
    const void *src[SIZE][8];
    const void *blob_data[SIZE][8];
    size_t blob_len[SIZE][8];
    char blob[SIZE][32];
    float *big[SIZE];
    int32_t small[SIZE][3];
    double lr[SIZE];
    float empty[1];
    Mpickpt__Fragment frag[SIZE];
    Mpickpt__Header h;
    char producer[64];
    Mpickpt__Index idx;
    int merged;
} sim;

static int sim_regs(sim *s, int seed)
{
    int64_t dbig[2] = {SIZE * BIG_ROWS_PER_RANK, BIG_COLS}, d3 = 3, de[2] = {0, 3};
    ckpt_shape sbig, s3, s0, se;
    ckpt_shape_init(&sbig, 2, dbig);
    ckpt_shape_init(&s3, 1, &d3);
    ckpt_shape_init(&s0, 0, NULL);
    ckpt_shape_init(&se, 2, de);
    ckpt_slice f3, f0, fe;
    ckpt_slice_full(&f3, &s3);
    ckpt_slice_full(&f0, &s0);
    ckpt_slice_full(&fe, &se);
    int rc = CKPT_OK;
    for (int r = 0; r < SIZE && rc == CKPT_OK; r++) {
        ckpt__regs *g = &s->regs[r];
        int64_t st[2] = {(int64_t)r * BIG_ROWS_PER_RANK, 0}, ct[2] = {BIG_ROWS_PER_RANK, BIG_COLS};
        ckpt_slice rows;
        ckpt_slice_init(&rows, 2, st, ct);
        s->big[r] = malloc((size_t)BIG_ROWS_PER_RANK * BIG_COLS * sizeof(float));
        if (!s->big[r])
            return CKPT_ENOMEM;
        for (int64_t i = 0; i < (int64_t)BIG_ROWS_PER_RANK * BIG_COLS; i++)
            s->big[r][i] = big_val(seed, (int64_t)r * BIG_ROWS_PER_RANK * BIG_COLS + i);
        for (int i = 0; i < 3; i++)
            s->small[r][i] = small_val(seed, r, i);
        s->lr[r] = lr_val(seed);
        char sname[32], bname[32];
        snprintf(sname, sizeof sname, "small_r%d", r);
        snprintf(bname, sizeof bname, "state/rank_%d", r);
        int64_t zero = 0;
        ckpt_shape sb;
        ckpt_shape_init(&sb, 1, &zero);
        ckpt_slice fb;
        ckpt_slice_full(&fb, &sb);
        if ((rc = ckpt__regs_add(g, r, "big", "big", CKPT_FLOAT32, &sbig, &rows,
                                 CKPT_KIND_PARTITIONED, s->big[r])) ||
            (rc = ckpt__regs_add(g, r, sname, sname, CKPT_INT32, &s3, &f3, CKPT_KIND_FULL,
                                 s->small[r])) ||
            (rc = ckpt__regs_add(g, r, "lr", "lr", CKPT_FLOAT64, &s0, &f0, CKPT_KIND_REPLICATED,
                                 &s->lr[r])) ||
            (r == 0 && (rc = ckpt__regs_add(g, r, "empty", "empty", CKPT_FLOAT32, &se, &fe,
                                            CKPT_KIND_FULL, s->empty))) ||
            (rc = ckpt__regs_add(g, r, "state", bname, CKPT_UINT8, &sb, &fb, CKPT_KIND_BLOB,
                                 NULL)) ||
            (rc = ckpt__plan_pieces(&s->pieces[r], g, r, SIZE, 0)))
            break;
        /* the last rank's blob is empty */
        snprintf(s->blob[r], sizeof s->blob[r], "blob of %d at %d", r, seed);
        for (size_t i = 0; i < g->n; i++) {
            s->src[r][i] = g->v[i].data;
            if (g->v[i].kind == CKPT_KIND_BLOB) {
                s->blob_data[r][i] = s->blob[r];
                s->blob_len[r][i] = r == SIZE - 1 ? 0 : strlen(s->blob[r]);
            }
        }
    }
    return rc;
}

static ckpt__shard_input sim_input(sim *s, int r)
{
    return (ckpt__shard_input){.regs = &s->regs[r],
                               .pieces = &s->pieces[r],
                               .src = s->src[r],
                               .blob_data = s->blob_data[r],
                               .blob_len = s->blob_len[r],
                               .pack_max = PACK_MAX,
                               .rank = r};
}

/* Rank r's list as the leader receives it: built, packed, unpacked into `arena`. */
static int wire_list(Mpickpt__Fragment **out, sim *s, int r, ckpt__arena *arena)
{
    Mpickpt__Fragment f = MPICKPT__FRAGMENT__INIT;
    ckpt__shard_input in = sim_input(s, r);
    int rc = ckpt__nodefile_list(&f, &in);
    size_t len = rc == CKPT_OK ? mpickpt__fragment__get_packed_size(&f) : 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (rc == CKPT_OK && buf) {
        mpickpt__fragment__pack(&f, buf);
        *out = mpickpt__fragment__unpack(ckpt__arena_allocator(arena), len, buf);
        if (!*out)
            rc = CKPT_ECORRUPT;
    }
    free(buf);
    ckpt__fragment_free_built(&f);
    return rc;
}

/* Node k: the leader makes the file from its ranks' lists, every rank writes its bytes (the
 * members through descriptors of their own, checked to be the leader's file), the leader lists it.
 */
static int write_node(sim *s, int k)
{
    int ranks[2] = {2 * k, 2 * k + 1};
    int leader = ranks[0];
    Mpickpt__Fragment *lists[2] = {NULL, NULL};
    ckpt__arena *arena = ckpt__arena_new();
    int rc = arena ? CKPT_OK : CKPT_ENOMEM;
    for (int i = 0; i < 2 && rc == CKPT_OK; i++)
        rc = wire_list(&lists[i], s, ranks[i], arena);
    ckpt__nodefile nf;
    ckpt__nodefile_init(&nf);
    if (rc == CKPT_OK)
        rc = ckpt__nodefile_create(&nf, lists, ranks, 2, &s->n[leader], s->tempfd[leader]);
    for (int i = 0; i < 2 && rc == CKPT_OK; i++) {
        int r = ranks[i], fd = nf.fd, dfd = -1;
        ckpt__shard_input in = sim_input(s, r);
        if (r != leader) {
            struct stat st;
            if ((rc = ckpt__node_temp_open(&s->n[r], s->dirfd, s->workfd, &dfd)) ||
                (rc = ckpt__file_open(&fd, NULL, dfd, s->n[r].data_name, O_WRONLY,
                                      s->n[r].node_temp)))
                break;
            CHECK(fstat(fd, &st) == 0 && (uint64_t)st.st_ino == nf.ino &&
                  (uint64_t)st.st_dev == nf.dev);
        }
        rc = ckpt__nodefile_write(&s->rec[r], &in, &s->bufs[r], nf.off + nf.first[i],
                                  nf.first[i + 1] - nf.first[i], nf.size, fd, s->n[r].my_file);
        if (r != leader) {
            ckpt__close(fd);
            ckpt__close(dfd);
        }
    }
    if (rc == CKPT_OK)
        rc = ckpt__record_add_file(&s->rec[leader], s->n[leader].data_name, nf.size);
    ckpt__nodefile_free(&nf);
    ckpt__arena_free(arena);
    return rc;
}

static int sim_prepare(sim *s, const char *dir, const char *base, int seed)
{
    memset(s, 0, sizeof *s);
    s->dirfd = s->workfd = -1;
    for (int r = 0; r < SIZE; r++) {
        s->tempfd[r] = -1;
        mpickpt__fragment__init(&s->frag[r]);
        ckpt__record_init(&s->rec[r]);
    }
    mpickpt__header__init(&s->h);
    mpickpt__index__init(&s->idx);
    pathf(s->dir, sizeof s->dir, "%s", dir);
    pathf(s->prefix, sizeof s->prefix, "%s/%s", dir, base);
    int rc = ckpt__ckptdir_open(&s->dirfd, &s->workfd, dir, 1);
    uint64_t id = ckpt__random_u64(); /* the save's id, the chief's for every rank */
    for (int r = 0; r < SIZE && rc == CKPT_OK; r++)
        if ((rc = ckpt__save_names_init(&s->n[r], s->prefix, r, SIZE, 0, id)) == CKPT_OK)
            rc = ckpt__save_names_node(&s->n[r], node_of(r), NODES, leader_of(r));
    if (rc == CKPT_OK)
        rc = ckpt__temp_fresh(&s->n[0], s->dirfd, &s->tempfd[0], 0);
    for (int r = 1; r < SIZE && rc == CKPT_OK; r++)
        rc = ckpt__temp_open(&s->n[r], r, s->dirfd, s->workfd, &s->tempfd[r]);
    if (rc == CKPT_OK)
        rc = sim_regs(s, seed);
    return rc;
}

static int sim_write(sim *s, int seed)
{
    int rc = CKPT_OK;
    for (int k = 0; k < NODES && rc == CKPT_OK; k++)
        rc = write_node(s, k);
    for (int r = 0; r < SIZE && rc == CKPT_OK; r++)
        rc = ckpt__record_fragment(&s->frag[r], &s->rec[r], r, s->n[r].data_name);
    if (rc != CKPT_OK)
        return rc;
    snprintf(s->producer, sizeof s->producer, "mpickpt %s", ckpt_version());
    s->h.format_version = CKPT_FORMAT_VERSION;
    s->h.endianness = MPICKPT__ENDIANNESS__LITTLE;
    s->h.world_size = SIZE;
    s->h.layout = MPICKPT__LAYOUT__LAYOUT_PER_NODE;
    s->h.save_counter = seed;
    s->h.producer = s->producer;
    s->idx.header = &s->h;
    Mpickpt__Fragment *frags[SIZE];
    for (int r = 0; r < SIZE; r++)
        frags[r] = &s->frag[r];
    if ((rc = ckpt__index_merge(&s->idx, frags, SIZE)) == CKPT_OK)
        s->h.format_version = ckpt__index_format_version(&s->idx);
    s->merged = 1;
    return rc;
}

/* The chief's commit: node k's file from its leader's temp dir. */
static int sim_commit(sim *s)
{
    ckpt__commit_file files[NODES];
    if (s->idx.n_files != NODES)
        return ckpt__error(CKPT_ERROR, "%zu files listed, want %d", s->idx.n_files, NODES);
    for (size_t i = 0; i < s->idx.n_files; i++) {
        const char *name = s->idx.files[i]->name;
        int k = ckpt__data_name_rank(name, s->n[0].base, NODES);
        if (k < 0)
            return ckpt__error(CKPT_ERROR, "unexpected file %s", name);
        files[i] = (ckpt__commit_file){.from_fd = s->tempfd[0], .from_name = name, .name = name};
        if (2 * k != 0) {
            files[i].from_fd = s->workfd;
            ckpt__worker_temp_name(files[i].from_subdir, sizeof files[i].from_subdir, 2 * k,
                                   s->n[0].save_id);
        }
    }
    ckpt__commit_req q = {.dirfd = s->dirfd,
                          .dir = s->dir,
                          .index_name = s->n[0].index_name,
                          .index_shown = s->prefix,
                          .idx = &s->idx,
                          .files = files,
                          .nfiles = NODES};
    return ckpt__commit(&q);
}

static void sim_free(sim *s)
{
    for (int r = 0; r < SIZE; r++) {
        ckpt__temp_cleanup(&s->n[r], r, s->dirfd, s->workfd, s->tempfd[r]);
        ckpt__close(s->tempfd[r]);
    }
    if (s->merged)
        ckpt__index_merged_free(&s->idx);
    for (int r = 0; r < SIZE; r++) {
        ckpt__fragment_free_built(&s->frag[r]);
        ckpt__record_free(&s->rec[r]);
        ckpt__pieces_free(&s->pieces[r]);
        ckpt__regs_free(&s->regs[r]);
        ckpt__shard_bufs_free(&s->bufs[r]);
        free(s->big[r]);
    }
    ckpt__close(s->dirfd);
    ckpt__close(s->workfd);
}

/* Checkpoint dir/base holds the values of save `seed`, read in several ways. */
static void check_reads_back(const char *dir, const char *base, int seed)
{
    char prefix[4400];
    pathf(prefix, sizeof prefix, "%s/%s", dir, base);
    ckpt_reader *r = NULL;
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (!r)
        return;
    const ckpt_header *h = ckpt_reader_header(r);
    CHECK_EQ_INT(h->layout, CKPT_LAYOUT_PER_NODE);
    CHECK_EQ_INT(h->world_size, SIZE);
    CHECK_EQ_INT(h->format_version, 2);
    CHECK_OK(ckpt_reader_verify(r, NULL, NULL));
    CHECK_OK(ckpt_reader_check(r, NULL, NULL));
    size_t n = (size_t)SIZE * BIG_ROWS_PER_RANK * BIG_COLS;
    float *big = malloc(n * sizeof *big);
    CHECK_OK(ckpt_reader_read(r, "big", CKPT_FLOAT32, NULL, big, n * sizeof *big));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += big[i] != big_val(seed, (int64_t)i);
    CHECK_MSG(bad == 0, "%zu values of big differ", bad);
    /* rows inside rank 2's second checksum block, and across ranks 1 and 2 */
    int64_t wins[2][2] = {{2 * BIG_ROWS_PER_RANK + 260, 10}, {2 * BIG_ROWS_PER_RANK - 3, 6}};
    for (int w = 0; w < 2; w++) {
        int64_t st[2] = {wins[w][0], 0}, ct[2] = {wins[w][1], BIG_COLS};
        ckpt_slice sl;
        ckpt_slice_init(&sl, 2, st, ct);
        memset(big, 0, (size_t)wins[w][1] * BIG_COLS * sizeof *big);
        CHECK_OK(ckpt_reader_read(r, "big", CKPT_FLOAT32, &sl, big,
                                  (size_t)wins[w][1] * BIG_COLS * sizeof *big));
        bad = 0;
        for (int64_t i = 0; i < wins[w][1] * BIG_COLS; i++)
            bad += big[i] != big_val(seed, wins[w][0] * BIG_COLS + i);
        CHECK_MSG(bad == 0, "window %d: %zu values of big differ", w, bad);
    }
    free(big);
    for (int k = 0; k < SIZE; k++) {
        char name[32];
        int32_t v[3] = {0, 0, 0};
        snprintf(name, sizeof name, "small_r%d", k);
        CHECK_OK(ckpt_reader_read(r, name, CKPT_INT32, NULL, v, sizeof v));
        for (int i = 0; i < 3; i++)
            CHECK_EQ_INT(v[i], small_val(seed, k, i));
        /* small pieces are packed, in their rank's pack in its node's file */
        size_t ti = 0;
        int packed = 0;
        uint64_t off = 0;
        ckpt_piece_info pi;
        CHECK_OK(ckpt_reader_find(&ti, r, name));
        CHECK_OK(ckpt_reader_piece_packing(&packed, &off, r, ti, 0));
        CHECK(packed);
        CHECK_OK(ckpt_reader_piece(&pi, r, ti, 0));
        char want_ds[32], want_file[64];
        snprintf(want_ds, sizeof want_ds, "/packs/rank-%d", k);
        snprintf(want_file, sizeof want_file, "%s.data-%05d-of-%05d", base, node_of(k), NODES);
        CHECK_MSG(strcmp(pi.dataset, want_ds) == 0 && strcmp(pi.file, want_file) == 0,
                  "%s in %s %s, want %s %s", name, pi.file, pi.dataset, want_file, want_ds);
        char blob[32] = "";
        snprintf(name, sizeof name, "state/rank_%d", k);
        CHECK_OK(ckpt_reader_find(&ti, r, name));
        ckpt_tensor_info t;
        CHECK_OK(ckpt_reader_tensor(&t, r, ti));
        size_t want_len =
            k == SIZE - 1 ? 0 : strlen(pathf(blob, sizeof blob, "blob of %d at %d", k, seed));
        CHECK_EQ_INT(t.shape.dims[0], (int64_t)want_len);
        char got[32] = "";
        if (want_len)
            CHECK_OK(ckpt_reader_read(r, name, CKPT_UINT8, NULL, got, want_len));
        CHECK(memcmp(got, blob, want_len) == 0);
    }
    double lr = 0;
    CHECK_OK(ckpt_reader_read(r, "lr", CKPT_FLOAT64, NULL, &lr, sizeof lr));
    CHECK(lr == lr_val(seed));
    float e[1];
    CHECK_OK(ckpt_reader_read(r, "empty", CKPT_FLOAT32, NULL, e, 0));
    ckpt_reader_free(r);

    /* the node files are plain HDF5: node 1 holds ranks 2 and 3's packs */
    char path[4600];
    hid_t f = H5Fopen(pathf(path, sizeof path, "%s/%s.data-00001-of-00002", dir, base),
                      H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    if (f >= 0) {
        CHECK(H5Lexists(f, "/packs", H5P_DEFAULT) > 0);
        CHECK(H5Lexists(f, "/packs/rank-2", H5P_DEFAULT) > 0);
        CHECK(H5Lexists(f, "/packs/rank-3", H5P_DEFAULT) > 0);
        CHECK(H5Lexists(f, "/packs/rank-0", H5P_DEFAULT) == 0);
        H5Fclose(f);
    }
}

static void test_save(void)
{
    char dir[4200];
    case_dir(dir, sizeof dir, "save");
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ck-1", 1));
    CHECK_OK(sim_write(s, 1));
    CHECK_OK(sim_commit(s));
    /* only the leaders listed a file */
    for (int r = 0; r < SIZE; r++)
        CHECK_EQ_INT(s->rec[r].nfiles, r == leader_of(r) ? 1 : 0);
    sim_free(s);
    CHECK_EQ_INT(count_prefixed(dir, "ck-1.data-"), NODES);
    check_reads_back(dir, "ck-1", 1);

    /* a node file left by a crashed save of the same name (an older version's workertemp_2, or
     * another save's workertemp_2.<id>) is neither used nor removed: this save has its own */
    char p[4400], q[4400];
    memset(s, 0, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ck-2", 2));
    CHECK(mkdir(pathf(p, sizeof p, "%s/workertemp_2", dir), 0755) == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/workertemp_2/ck-2.data-00001-of-00002", dir),
                   "left by a crash") == 0);
    CHECK(mkdir(pathf(q, sizeof q, "%s/workertemp_2.0123456789abcdef", dir), 0755) == 0);
    CHECK(put_text(pathf(q, sizeof q, "%s/workertemp_2.0123456789abcdef/ck-2.data-00001-of-00002",
                         dir),
                   "another save's") == 0);
    CHECK_OK(sim_write(s, 2));
    CHECK_OK(sim_commit(s));
    sim_free(s);
    free(s);
    check_reads_back(dir, "ck-2", 2);
    CHECK(has_text(p, "left by a crash"));
    CHECK(has_text(q, "another save's"));
    CHECK_EQ_INT(count_prefixed(dir, "workertemp_"), 2); /* this save's went */
}

/* ---- hostile lists and placements ------------------------------------------------------------ */

typedef enum bad_list {
    BAD_TWO_COMPONENTS,
    BAD_OUTSIDE,
    BAD_DOTDOT,
    BAD_BYTES,
    BAD_TWO_PIECES,
    BAD_DIMS,
    BAD_DTYPE,
    BAD_BOX,
    BAD_N
} bad_list;

static const char *bad_name(bad_list b)
{
    static const char *const names[BAD_N] = {"a path of two components",
                                             "a path outside",
                                             "..",
                                             "bytes that do not fit the box",
                                             "two pieces",
                                             "17 dimensions",
                                             "an invalid dtype",
                                             "a box outside its shape"};
    return names[b];
}

/* A list of one dataset (a float32 [4]) made bad in way b. */
static void make_bad(Mpickpt__Fragment *f, size_t *cap, bad_list b)
{
    int64_t d4 = 4;
    ckpt_shape sh;
    ckpt_shape_init(&sh, 1, &d4);
    ckpt_slice full;
    ckpt_slice_full(&full, &sh);
    const char *path = b == BAD_TWO_COMPONENTS ? "/tensors/a/b"
                       : b == BAD_OUTSIDE      ? "/etc/x"
                       : b == BAD_DOTDOT       ? "/tensors/.."
                                               : "/tensors/x";
    Mpickpt__Tensor *t = NULL;
    size_t np = b == BAD_TWO_PIECES ? 2 : 1;
    CHECK_OK(ckpt__fragment_tensor(&t, f, cap, "x", CKPT_FLOAT32, &sh, CKPT_KIND_FULL, np));
    for (size_t i = 0; t && i < np; i++)
        CHECK_OK(
            ckpt__fragment_piece(t, i, 1, &full, "", path, &full, b == BAD_BYTES ? 17 : 16, 0));
    if (!t)
        return;
    if (b == BAD_DIMS)
        t->n_shape = 17;
    if (b == BAD_DTYPE)
        t->dtype = (Mpickpt__DType)99;
    if (b == BAD_BOX)
        t->pieces[0]->start[0] = 2;
}

static void test_hostile_lists(void)
{
    char dir[4200], prefix[4400];
    case_dir(dir, sizeof dir, "hostile");
    pathf(prefix, sizeof prefix, "%s/ck", dir);
    int dirfd = -1, workfd = -1, tempfd = -1;
    ckpt__save_names n;
    CHECK_OK(ckpt__ckptdir_open(&dirfd, &workfd, dir, 1));
    CHECK_OK(ckpt__save_names_init(&n, prefix, 0, 2, 0, ckpt__random_u64()));
    CHECK_OK(ckpt__save_names_node(&n, 0, 1, 0));
    CHECK_OK(ckpt__temp_fresh(&n, dirfd, &tempfd, 0));
    int ranks[2] = {0, 1};
    for (int b = 0; b < BAD_N; b++) {
        Mpickpt__Fragment good = MPICKPT__FRAGMENT__INIT, bad = MPICKPT__FRAGMENT__INIT;
        size_t c1 = 0, c2 = 0;
        int64_t d2 = 2;
        ckpt_shape sh;
        ckpt_shape_init(&sh, 1, &d2);
        ckpt_slice full;
        ckpt_slice_full(&full, &sh);
        CHECK_OK(ckpt__fragment_add(&good, &c1, "g", CKPT_INT64, &sh, CKPT_KIND_FULL, &full, "",
                                    "/tensors/g", &full, 16, 0));
        make_bad(&bad, &c2, (bad_list)b);
        Mpickpt__Fragment *lists[2] = {&good, &bad};
        ckpt__nodefile nf;
        int rc = ckpt__nodefile_create(&nf, lists, ranks, 2, &n, tempfd);
        CHECK_MSG(rc == CKPT_ECORRUPT && strstr(last_msg(), "rank 1"),
                  "a list with %s: returned %d: %s", bad_name((bad_list)b), rc, last_msg());
        CHECK(nf.fd == -1 && !nf.off);
        ckpt__fragment_free_built(&good);
        ckpt__fragment_free_built(&bad);
    }
    /* two ranks claiming one dataset */
    Mpickpt__Fragment a = MPICKPT__FRAGMENT__INIT, b = MPICKPT__FRAGMENT__INIT;
    size_t ca = 0, cb = 0;
    int64_t d2 = 2;
    ckpt_shape sh;
    ckpt_shape_init(&sh, 1, &d2);
    ckpt_slice full;
    ckpt_slice_full(&full, &sh);
    CHECK_OK(ckpt__fragment_add(&a, &ca, "g", CKPT_INT64, &sh, CKPT_KIND_FULL, &full, "",
                                "/tensors/g", &full, 16, 0));
    CHECK_OK(ckpt__fragment_add(&b, &cb, "g", CKPT_INT64, &sh, CKPT_KIND_FULL, &full, "",
                                "/tensors/g", &full, 16, 0));
    Mpickpt__Fragment *lists[2] = {&a, &b};
    ckpt__nodefile nf;
    int rc = ckpt__nodefile_create(&nf, lists, ranks, 2, &n, tempfd);
    CHECK_MSG(rc != CKPT_OK && strstr(last_msg(), "/tensors/g"),
              "one dataset claimed twice: returned %d: %s", rc, last_msg());
    CHECK(nf.fd == -1);

    /* placements: one good file of rank 0's one dataset, then wrong offsets */
    Mpickpt__Fragment *one[1] = {&a};
    CHECK_OK(ckpt__nodefile_create(&nf, one, ranks, 1, &n, tempfd));
    int64_t val[2] = {11, 22};
    ckpt__regs regs = {0};
    ckpt__pieces pieces = {0};
    ckpt__shard_bufs bufs = {0};
    CHECK_OK(ckpt__regs_add(&regs, 0, "g", "g", CKPT_INT64, &sh, &full, CKPT_KIND_FULL, val));
    CHECK_OK(ckpt__plan_pieces(&pieces, &regs, 0, 1, 0));
    const void *src[1] = {val};
    ckpt__shard_input in = {.regs = &regs, .pieces = &pieces, .src = src, .pack_max = 0, .rank = 0};
    uint64_t size_before = nf.size;
    uint64_t wrong[3][2] = {{nf.off[0], 0}, {nf.size - 8, 0}, {UINT64_MAX - 4, 0}};
    size_t counts[5] = {0, 2, 1, 1, 1};
    const uint64_t *offs[5] = {wrong[0], wrong[0], wrong[1], wrong[2], nf.off};
    for (int i = 0; i < 5; i++) {
        ckpt__record rec;
        ckpt__record_init(&rec);
        rc = ckpt__nodefile_write(&rec, &in, &bufs, offs[i], counts[i], nf.size, nf.fd, n.my_file);
        if (i < 4)
            CHECK_MSG(rc == CKPT_ECORRUPT, "placement %d: returned %d: %s", i, rc, last_msg());
        else
            CHECK_OK(rc);
        ckpt__record_free(&rec);
    }
    struct stat st;
    CHECK(fstat(nf.fd, &st) == 0 && (uint64_t)st.st_size == size_before);
    ckpt__nodefile_free(&nf);
    ckpt__fragment_free_built(&a);
    ckpt__fragment_free_built(&b);
    ckpt__pieces_free(&pieces);
    ckpt__regs_free(&regs);
    ckpt__shard_bufs_free(&bufs);
    ckpt__temp_cleanup(&n, 0, dirfd, workfd, tempfd);
    ckpt__close(tempfd);
    ckpt__close(dirfd);
    ckpt__close(workfd);
}

/* Layout 3 is known; 4 is not. */
static void test_layouts(void)
{
    Mpickpt__Header h = MPICKPT__HEADER__INIT;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    h.format_version = 1;
    h.world_size = 1;
    h.layout = MPICKPT__LAYOUT__LAYOUT_PER_NODE;
    idx.header = &h;
    CHECK_OK(ckpt__index_validate(&idx, CKPT_ECORRUPT, "test"));
    h.layout = (Mpickpt__Layout)4;
    CHECK_RC(ckpt__index_validate(&idx, CKPT_ECORRUPT, "test"), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "unknown layout 4"), "message: %s", last_msg());
    CHECK(strcmp(ckpt_layout_name(CKPT_LAYOUT_PER_NODE), "per-node") == 0);
}

int main(void)
{
    phases_init("test_nodefile");
    ckpt__h5_init();
    test_save();
    test_hostile_lists();
    test_layouts();
    return CHECK_DONE();
}
