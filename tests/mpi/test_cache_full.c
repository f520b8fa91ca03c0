/* A full node cache during the partner copy (docs/levels.md "Benchmarks", issue 32): a tmpfs that
 * cannot hold the partner copies is a clear "no space left" error on every rank, and nothing of
 * the save stays. The receive writes each chunk from a buffer (mpi/save_levels.c); a receive
 * straight into an mmap of the new file (tried for issue 32, not faster on tmpfs) must take the
 * file's room with fallocate first: without it this test dies of SIGBUS in MPI_Recv (a tmpfs page
 * that cannot be had). Nodes simulated with MPICKPT_RANKS_PER_NODE=K (ctest sets it); needs 2
 * nodes or more, and root (it mounts a small tmpfs; otherwise it skips, exit 77).
 *
 *   test_cache_full OUTDIR per-rank|per-node
 *
 * Every node's cache (OUTDIR/full/mnt/%n) is on one tmpfs sized so that the ranks' own data files
 * fit and their partner copies do not (about 1 MiB per rank, the tmpfs 1.5x the data + 512 KiB):
 *   full   a manager's save ckpt-1 fails with CKPT_ENOSPC on every rank (the same message,
 *          naming a partner copy and "no space"); nothing of it stays in any node's cache (no
 *          data file, no temp file, no index); no process died of a signal
 *   grown  the tmpfs remounted 4x as large, the next save commits with every partner copy whole
 *          and the restore gives its exact values
 */

#include "mpi_check.h"
#include "cache_util.h"
#include "coll.h"
#include "mpickpt.h"
#include "tmpfs.h"

#include <string.h>
#include <sys/stat.h>

#define begin_case(...) check_case(1, __VA_ARGS__)

static int g_rank, g_size, g_k, g_nnodes;
static const char *g_out;
static ckpt_layout g_layout;

/* Rank 0: every node's checkpoint directory holds committed checkpoints only (no temp file, no
 * data file without its index). Collective. */
static void caches_clean(const char *cache, const char *what)
{
    for (int k = 0; k < g_nnodes; k++) {
        char dir[4600];
        node_dir(dir, sizeof dir, cache, k);
        check_dir_clean(dir, NULL, what);
    }
}

/* Rank 0: the data files of the newest save, each on two nodes (its own and its partner's) with
 * the same size: `want` files in all. Collective. */
static void copies_whole(const char *cache, int want, const char *what)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank != 0)
        return;
    char names[64][256];
    long long sizes[64];
    int seen[64] = { 0 }, n = 0;
    for (int k = 0; k < g_nnodes; k++) {
        char dir[4600], path[4900];
        node_dir(dir, sizeof dir, cache, k);
        DIR *d = opendir(dir);
        struct dirent *de;
        struct stat st;
        while (d && (de = readdir(d)) != NULL) {
            if (!strstr(de->d_name, ".data-"))
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            int i = 0;
            while (i < n && strcmp(names[i], de->d_name) != 0)
                i++;
            if (i == n && n < 64)
                snprintf(names[n++], sizeof names[0], "%s", de->d_name);
            if (i < 64) {
                CHECK_MSG(!seen[i] || sizes[i] == (long long)st.st_size,
                          "%s: the copies of %s differ in size", what, de->d_name);
                sizes[i] = (long long)st.st_size;
                seen[i]++;
            }
        }
        if (d)
            closedir(d);
    }
    CHECK_MSG(n == want, "%s: %d data files, want %d", what, n, want);
    for (int i = 0; i < n; i++)
        CHECK_MSG(seen[i] == 2, "%s: %s is on %d nodes, want 2", what, names[i], seen[i]);
}

static ckpt_manager *full_manager(ckpt_saver *s, const char *dir, const char *pat)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.cache_dir = pat;
    o.redundancy = CKPT_REDUNDANCY_PARTNER;
    o.persist_every = 1000; /* every save to the cache only */
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, "ckpt_manager_create") || !mg)
        MPI_Abort(MPI_COMM_WORLD, 2);
    return mg;
}

int main(int argc, char **argv)
{
    if (!cache_test_start(&argc, &argv, "test_cache_full", &g_rank, &g_size, &g_out, &g_layout,
                          &g_k, &g_nnodes))
        return 2;
    if (g_nnodes < 2) {
        if (g_rank == 0)
            printf("SKIP: partner copies need 2 nodes (%d ranks, %d per node)\n", g_size, g_k);
        MPI_Finalize();
        return 77;
    }
    char base[2200], dir[2300], cache[2400], pat[2500];
    snprintf(base, sizeof base, "%s/full", g_out);
    snprintf(dir, sizeof dir, "%s/persistent", base);
    snprintf(g_mnt, sizeof g_mnt, "%s/mnt", base);
    snprintf(pat, sizeof pat, "%s/%%n", g_mnt);
    snprintf(cache, sizeof cache, "%s", g_mnt);
    if (g_rank == 0) {
        char cmd[4800];
        snprintf(cmd, sizeof cmd, "umount '%s' 2>/dev/null; rm -rf '%s'", g_mnt, base);
        if (system(cmd) != 0)
            printf("  could not clear %s\n", base);
    }
    make_dir(g_mnt);

    /* 1024 rows of 1 KiB of "big" per rank */
    const int64_t big_rows = 1024 * (int64_t)g_size;
    uint64_t data = tm_stored_bytes(g_size, big_rows, 1);
    long size_kib = (long)(data * 3 / 2 / 1024) + 512;
    char reason[600];
    begin_case("full: a %ld KiB tmpfs for %llu bytes of data, %d ranks in nodes of %d (%s)",
               size_kib, (unsigned long long)data, g_size, g_k, argv[2]);
    tmpfs_mount(g_rank, size_kib, reason, sizeof reason);
    if (reason[0]) {
        if (g_rank == 0)
            printf("SKIP: cannot mount a tmpfs: %s\n", reason);
        MPI_Finalize();
        return 77;
    }

    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, big_rows));
    ckpt_saver *s = cache_new_saver(g_layout);
    register_or_die(&m, s);
    ckpt_manager *mg = full_manager(s, dir, pat);

    tm_fill(&m, 1);
    ckpt_manager_save_info info = { 0, 1, 0, 0 };
    int rc = ckpt_manager_save(mg, &info, NULL, 0);
    if (coll(rc, CKPT_ENOSPC, "full: the save whose partner copies do not fit")) {
        CHECK_MSG(contains_ci(g_msg, "partner copy") && contains_ci(g_msg, "no space"),
                  "full: the message names no partner copy or no full disk: %s", g_msg);
        if (g_rank == 0)
            printf("  full -> %s\n", g_msg);
    }
    caches_clean(cache, "full: after the failed save");

    begin_case("grown: the tmpfs 4x as large, the next save commits and restores");
    char cmd[4800];
    snprintf(cmd, sizeof cmd, "mount -o remount,size=%ldk '%s'", size_kib * 4, g_mnt);
    CHECK_MSG(rank0_system(g_rank, cmd) == 0, "could not grow %s", g_mnt);
    tm_fill(&m, 2);
    info.step = 2;
    coll(ckpt_manager_save(mg, &info, NULL, 0), CKPT_OK, "grown: the save");
    caches_clean(cache, "grown: after the save");
    copies_whole(cache, g_layout == CKPT_LAYOUT_PER_NODE ? g_nnodes : g_size, "grown");
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(&m);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, "grown: the restore")) {
        CHECK_MSG(res.restored && res.step == 2, "grown: restored %d step %lld", res.restored,
                  (long long)res.step);
        check_values(&m, 2, TM_RESTORED, "grown: the values");
    }
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
    tm_free(&m);
    umount_at_exit();
    return check_mpi_done("test_cache_full");
}
