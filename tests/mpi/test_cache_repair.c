/* Partner copies repair damage (issue 29, docs/levels.md "Rebuild"): a manager with a cache level
 * and partner redundancy, nodes simulated with MPICKPT_RANKS_PER_NODE=K (ctest sets it), each
 * node's cache directory reached through node_dir() (tests/mpi/cache_util.h).
 *
 *   test_cache_repair OUTDIR LAYOUT      LAYOUT: per-rank or per-node; needs 2 nodes or more
 *
 * Two saves, ckpt-1 (step 10) and ckpt-2 (step 20), in the caches only (nothing drained). Node
 * 1's own data file F of ckpt-2 (the one holding its largest piece, "big", whose index entry has
 * block checksums) and its partner copy on another node are kept, byte for byte, as saved. Each
 * case damages ckpt-2, then restore_or_initialize runs (the same status on every rank):
 *   own-block    a byte of F on node 1 flipped in the second block of the "big" piece
 *   own-piece    a byte of F on node 1 flipped in a small piece (checked by its whole CRC)
 *   partner      a byte of F's partner copy flipped
 *   truncated    F on node 1 cut to half its size
 *   index        a byte of node 0's ckpt-2.index (the chief's copy) flipped
 *   fault        own-block's damage with MPICKPT_FAULT=<node 1's leader>:rebuild: the saver's
 *                restore from the cache fails on every rank naming the fault and moves no
 *                bytes (F still damaged); the next restore repairs it
 * each restoring ckpt-2 exactly on every rank, none skipped, after which both copies of F (and
 * every node's index) are again the saved bytes; and last
 *   both         a byte flipped in F and in its partner copy: ckpt-2 cannot be restored (a
 *                warning naming F), ckpt-1 is restored exactly, one skipped.
 */
#define _XOPEN_SOURCE 700
#include "mpi_check.h"
#include "cache_util.h"
#include "coll.h"
#include "index.h"
#include "mpi_internal.h"
#include "mpickpt.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define begin_case(...) check_case(1, __VA_ARGS__)

static int g_rank, g_size, g_k, g_nnodes;
static const char *g_out;
static ckpt_layout g_layout;

/* What rank 0 found after the saves (every rank gets the numbers). */
static char g_cache[4200], g_file[300];
static int g_pnode = -1;                       /* the node holding F's partner copy */
static long g_big_at = -1, g_small_at = -1;    /* offsets of the bytes to flip in F */
static unsigned char *g_saved, *g_saved_index; /* rank 0: F's and node 0's index bytes */
static long g_saved_len = -1, g_saved_index_len = -1;

/* The warnings rank 0's library logged since the last reset (the fallback's names the file). */
static char g_warnings[16384];

static void on_log(ckpt_log_level level, const char *message, void *payload)
{
    (void)payload;
    if (level <= CKPT_LOG_WARN && strlen(g_warnings) + strlen(message) + 2 < sizeof g_warnings) {
        strcat(g_warnings, message);
        strcat(g_warnings, "\n");
    }
    fprintf(stderr, "[rank %d] %s\n", g_rank, message);
}

static int node_of(int r)
{
    return r / g_k;
}

static int home_of_number(int f)
{
    return g_layout == CKPT_LAYOUT_PER_NODE ? f : node_of(f);
}

static void entry(char *out, size_t n, int node, const char *name)
{
    char d[4300];
    node_dir(d, sizeof d, g_cache, node);
    snprintf(out, n, "%s/%s", d, name);
}

/* Rank 0: byte `at` of `path` xor 0x10. */
static void flip(const char *path, long at)
{
    int fd = open(path, O_RDWR | O_NOFOLLOW);
    unsigned char b = 0;
    int ok = fd >= 0 && pread(fd, &b, 1, at) == 1;
    b ^= 0x10;
    ok = ok && pwrite(fd, &b, 1, at) == 1;
    if (fd >= 0)
        close(fd);
    CHECK_MSG(ok, "flipping byte %ld of %s: %s", at, path, strerror(errno));
}

/* Rank 0: `path` is a regular file holding exactly `want` (len bytes). */
static int holds(const char *path, const unsigned char *want, long len)
{
    unsigned char *b = NULL;
    long n = slurp(path, &b);
    int same = n == len && len >= 0 && memcmp(b, want, (size_t)len) == 0;
    free(b);
    return same;
}

/* Every copy of F and of ckpt-2.index holds the saved bytes (rank 0 looks; every rank checks). */
static void check_whole(const char *what)
{
    int ok = 1;
    if (g_rank == 0) {
        char a[4600];
        entry(a, sizeof a, 1, g_file);
        ok &= holds(a, g_saved, g_saved_len);
        CHECK_MSG(ok, "%s: node 1's %s is not the saved bytes", what, g_file);
        entry(a, sizeof a, g_pnode, g_file);
        int p = holds(a, g_saved, g_saved_len);
        CHECK_MSG(p, "%s: node %d's copy of %s is not the saved bytes", what, g_pnode, g_file);
        ok &= p;
        for (int k = 0; k < g_nnodes; k++) {
            entry(a, sizeof a, k, "ckpt-2.index");
            int i = holds(a, g_saved_index, g_saved_index_len);
            CHECK_MSG(i, "%s: node %d's ckpt-2.index is not the saved bytes", what, k);
            ok &= i;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
}

/* restore_or_initialize into a zeroed model: the checkpoint of `step`, `skipped` newer ones
 * skipped, every value right, on every rank. */
static void restore_expect(ckpt_manager *mg, tm_model *m, int64_t step, int skipped,
                           const char *what)
{
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(m);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, what)) {
        CHECK_MSG(res.restored && res.step == step && res.skipped == skipped,
                  "%s: restored %d step %lld skipped %d, want step %lld skipped %d", what,
                  res.restored, (long long)res.step, res.skipped, (long long)step, skipped);
        check_values(m, step, TM_RESTORED, what);
    }
}

/* Rank 0, after the saves: F (node 1's file holding its largest piece), the bytes to flip, the
 * partner node, the saved bytes. Every rank learns whether it worked. */
static int find_target(void)
{
    int ok = 1;
    if (g_rank == 0) {
        char ipath[4600];
        entry(ipath, sizeof ipath, 0, "ckpt-2.index");
        Mpickpt__Index *idx = NULL;
        CHECK_OK(ckpt__index_load(&idx, ipath));
        const Mpickpt__Piece *big = NULL, *small = NULL;
        for (size_t t = 0; idx && t < idx->n_tensors; t++)
            for (size_t p = 0; p < idx->tensors[t]->n_pieces; p++) {
                const Mpickpt__Piece *pc = idx->tensors[t]->pieces[p];
                int a = -1, b = -1;
                const char *dot = strstr(pc->file, ".data-");
                if (!dot || sscanf(dot, ".data-%d-of-%d", &a, &b) != 2 || home_of_number(a) != 1 ||
                    !pc->bytes || !pc->file_offset)
                    continue;
                if (!big || pc->bytes > big->bytes)
                    big = pc;
                if (pc->n_block_crc32c == 0 && pc->bytes >= 8 && !small)
                    small = pc;
            }
        CHECK_MSG(big && big->n_block_crc32c >= 2, "node 1 has no piece with 2 block checksums");
        CHECK_MSG(small != NULL, "node 1 has no small piece");
        if (big && small && big->n_block_crc32c >= 2) {
            snprintf(g_file, sizeof g_file, "%s", big->file);
            /* the second block of the big piece, and the middle of a small piece in F's file or
             * (per rank) the first small one of node 1 */
            g_big_at = (long)(big->file_offset + big->block_bytes + 3);
            if (strcmp(small->file, big->file) != 0) /* another small piece, in F */
                for (size_t t = 0; t < idx->n_tensors; t++)
                    for (size_t p = 0; p < idx->tensors[t]->n_pieces; p++) {
                        const Mpickpt__Piece *pc = idx->tensors[t]->pieces[p];
                        if (strcmp(pc->file, big->file) == 0 && pc->n_block_crc32c == 0 &&
                            pc->bytes >= 8 && pc->file_offset)
                            small = pc;
                    }
            CHECK_MSG(strcmp(small->file, big->file) == 0, "no small piece in %s", big->file);
            g_small_at = (long)(small->file_offset + small->bytes / 2);
        } else {
            ok = 0;
        }
        if (idx)
            mpickpt__index__free_unpacked(idx, NULL);
        for (int k = 0; ok && k < g_nnodes; k++) {
            char p[4600];
            struct stat st;
            entry(p, sizeof p, k, g_file);
            if (k != 1 && lstat(p, &st) == 0 && S_ISREG(st.st_mode))
                g_pnode = k;
        }
        CHECK_MSG(!ok || g_pnode >= 0, "no partner copy of %s", g_file);
        ok &= g_pnode >= 0;
        if (ok) {
            char p[4600];
            entry(p, sizeof p, 1, g_file);
            g_saved_len = slurp(p, &g_saved);
            entry(p, sizeof p, 0, "ckpt-2.index");
            g_saved_index_len = slurp(p, &g_saved_index);
            ok = g_saved_len > 0 && g_saved_index_len > 0;
        }
        printf("  target: %s (node 1, partner copy on node %d), flips at %ld and %ld\n", g_file,
               g_pnode, g_big_at, g_small_at);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(g_file, sizeof g_file, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(&g_pnode, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok;
}

enum { D_OWN_BLOCK, D_OWN_PIECE, D_PARTNER, D_TRUNCATED, D_INDEX, D_BOTH };

/* Rank 0 damages ckpt-2 as `how` says. */
static void damage(int how)
{
    if (g_rank == 0) {
        char own[4600], copy[4600], index0[4600];
        entry(own, sizeof own, 1, g_file);
        entry(copy, sizeof copy, g_pnode, g_file);
        entry(index0, sizeof index0, 0, "ckpt-2.index");
        switch (how) {
        case D_OWN_BLOCK:
            flip(own, g_big_at);
            break;
        case D_OWN_PIECE:
            flip(own, g_small_at);
            break;
        case D_PARTNER:
            flip(copy, g_big_at);
            break;
        case D_TRUNCATED:
            CHECK_MSG(truncate(own, g_saved_len / 2) == 0, "truncate %s", own);
            break;
        case D_INDEX:
            flip(index0, g_saved_index_len / 2);
            break;
        case D_BOTH:
            flip(own, g_big_at);
            flip(copy, g_small_at);
            break;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    if (!cache_test_start(&argc, &argv, "test_cache_repair", &g_rank, &g_size, &g_out, &g_layout,
                          &g_k, &g_nnodes))
        return 2;
    CHECK_MSG(g_nnodes >= 2, "needs 2 nodes or more (MPICKPT_RANKS_PER_NODE), has %d", g_nnodes);
    if (g_nnodes < 2)
        return check_mpi_done("test_cache_repair");
    if (g_rank == 0)
        ckpt_log_set(on_log, CKPT_LOG_WARN, NULL);
    make_dir(g_out);
    char dir[4200], pat[4300], what[300];
    snprintf(dir, sizeof dir, "%s/dir", g_out);
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", g_cache);

    begin_case("ckpt-1 and ckpt-2 saved to the caches, %d nodes of %d ranks, partner copies",
               g_nnodes, g_k);
    ckpt_saver *s = cache_new_saver(g_layout);
    tm_model m;
    /* "big": 1100 rows of 1 KiB per rank, a piece of two 1 MiB blocks (format 2 block CRCs) */
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, (int64_t)1100 * g_size));
    register_or_die(&m, s);
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.cache_dir = pat;
    o.redundancy = CKPT_REDUNDANCY_PARTNER;
    o.persist_every = 1000; /* both only in the caches: a failed cache restore falls back */
    o.cache_max_to_keep = 2;
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, "ckpt_manager_create"))
        goto done;
    for (int n = 1; n <= 2; n++) {
        tm_fill(&m, n * 10);
        ckpt_manager_save_info info = { 0, n * 10, 0, 0 };
        char out[4400];
        snprintf(what, sizeof what, "manager save %d", n);
        if (!coll(ckpt_manager_save(mg, &info, out, sizeof out), CKPT_OK, what))
            goto done;
    }
    CHECK_OK(ckpt_saver_sync(s));
    MPI_Barrier(MPI_COMM_WORLD);
    if (!find_target())
        goto done;
    restore_expect(mg, &m, 20, 0, "restore of the undamaged ckpt-2");

    static const struct {
        int how;
        const char *name;
    } cases[] = { { D_OWN_BLOCK, "own-block: a byte of node 1's own file flipped (block CRC)" },
                  { D_OWN_PIECE, "own-piece: a byte of node 1's own file flipped (piece CRC)" },
                  { D_PARTNER, "partner: a byte of the partner copy flipped" },
                  { D_TRUNCATED, "truncated: node 1's own file cut to half" },
                  { D_INDEX, "index: a byte of node 0's (the chief's) ckpt-2.index flipped" } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        begin_case("%s", cases[c].name);
        damage(cases[c].how);
        restore_expect(mg, &m, 20, 0, cases[c].name);
        check_whole(cases[c].name);
    }

    /* the fault step of the rebuild still stops it before any byte moves: F stays damaged */
    snprintf(what, sizeof what, "fault: own-block's damage, MPICKPT_FAULT=%d:rebuild", g_k);
    begin_case("%s", what);
    damage(D_OWN_BLOCK);
    char fault[64];
    snprintf(fault, sizeof fault, "%d:rebuild", g_k); /* node 1's leader */
    set_fault(fault);
    int unavailable = -1;
    int rc = ckpt__saver_restore_cache(s, "ckpt-2", NULL, NULL, &unavailable);
    set_fault(NULL);
    if (coll(rc, CKPT_EIO, what))
        CHECK_MSG(strstr(g_msg, "injected fault at rebuild") != NULL, "%s: message: %s", what,
                  g_msg);
    CHECK_MSG(unavailable == 1, "%s: unavailable %d, want 1", what, unavailable);
    if (g_rank == 0) {
        char own[4600];
        entry(own, sizeof own, 1, g_file);
        CHECK_MSG(!holds(own, g_saved, g_saved_len), "%s: %s was replaced despite the fault",
                  what, own);
    }
    snprintf(what, sizeof what, "fault: then the restore without it");
    restore_expect(mg, &m, 20, 0, what);
    check_whole(what);

    /* both copies damaged: no intact copy, ckpt-2 is skipped with a warning naming F */
    snprintf(what, sizeof what, "both: a byte of %s flipped on node 1 and on node %d", g_file,
             g_pnode);
    begin_case("%s", what);
    damage(D_BOTH);
    g_warnings[0] = '\0';
    restore_expect(mg, &m, 10, 1, what);
    if (g_rank == 0)
        CHECK_MSG(strstr(g_warnings, "ckpt-2") && strstr(g_warnings, g_file) &&
                      strstr(g_warnings, "cannot be restored from the cache"),
                  "%s: no warning naming %s: %s", what, g_file, g_warnings);
done:
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
    tm_free(&m);
    free(g_saved);
    free(g_saved_index);
    return check_mpi_done("test_cache_repair");
}
