/* The cache level's save (docs/levels.md, mpi/save_levels.c), nodes simulated with
 * MPICKPT_RANKS_PER_NODE=K (ctest sets it), each with its own directory OUTDIR/cache/<node>.
 *
 *   test_cache OUTDIR LAYOUT      LAYOUT: per-rank or per-node
 *
 * Cases:
 *   setup     the cache's refusals: partner redundancy on one node (or one failure group), a
 *             pattern without %n on simulated nodes, an unknown % sequence — each the same error
 *             on every rank
 *   targets   the storage targets' operations (mpi/target.h): the node cache's restore, drain,
 *             sweep and gc are its table's, the persistent directory has none of the upkeep; on
 *             a saver without a cache level a restore from the cache and a drain are refused
 *             with the same error on every rank (the restore "unavailable"), sweep and gc do
 *             nothing
 *   partner   a save to the cache with partner copies: on every node the index (the same bytes on
 *             every node), its own data files, and its partner's copies of the files of the node it
 *             protects, byte for byte — nothing else; every file on exactly two nodes, in different
 *             failure groups ("rack" names in the second round); the values, restored from the
 *             files gathered into one directory, on every rank
 *   faults    MPICKPT_FAULT=<r>:partner (a rank fails before it sends its copies) and <r>:commit
 *             (after the copies and the index copies were placed): the save fails on every rank
 *             and leaves nothing of it on any node; the previous checkpoint is intact
 *   none      redundancy none: each node holds only its own files and the index
 *   manager   a manager with a cache level: levels, drains, restores, lost nodes
 *   reshape   a job restarted on half the ranks over the same caches (2 ranks or more): the
 *             whole job commits ckpt-1..4 to the cache, ckpt-4's drain failing
 *             (MPICKPT_FAULT=0:drain); the half restores (ckpt-4 from the caches when its node
 *             holds every file of it, else the persistent ckpt-2) and saves ckpt-5..7. The drain of the
 *             caches' ckpt-4, of another shape, is skipped with one warning naming both shapes
 *             and never tried ("No such file" nowhere); of the same shape (per-node, one node in
 *             both jobs) it is restored and drained. Every value right, on every rank
 */
#define _XOPEN_SOURCE 700
#include "mpi_check.h"
#include "cache_util.h"
#include "coll.h"
#include "index.h"
#include "levels.h"
#include "mpi_internal.h"
#include "mpickpt.h"
#include "state_copy.h"
#include "logcap.h"
#include "target.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define begin_case(...) check_case(0, __VA_ARGS__)

static int g_rank, g_size, g_k, g_nnodes;

static const char *g_out;
static ckpt_layout g_layout;

static int node_of(int r)
{
    return r / g_k;
}

/* The node whose ranks wrote data file `name` of checkpoint `base`. */
static int home_of(const char *name, const char *base)
{
    int a = -1, b = -1;
    const char *p = name + strlen(base);
    if (sscanf(p, ".data-%d-of-%d", &a, &b) != 2)
        return -1;
    return g_layout == CKPT_LAYOUT_PER_NODE ? a : node_of(a);
}

/* Rank 0: is `name` an entry of directory `dir` (workertemp_* and in-flight temp dirs aside)? */
static int listed(const char *dir, const char *name)
{
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Rank 0: the regular files of `dir` whose name starts with `stem` (its checkpoint's). */
static int count_files(const char *dir, const char *stem)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, stem, strlen(stem)) == 0 && listed(dir, de->d_name))
            n++;
    closedir(d);
    return n;
}

/*
 * Rank 0 checks checkpoint `base` in every node's directory: the index the same bytes everywhere;
 * every data file on its home node and (partner) on exactly one other node of another group
 * (`group_of`), byte for byte, or (none) only at home; no other file of it. Then it gathers the
 * files into OUTDIR/<gather>/ for a restore. Returns 1 when everything is where it should be.
 */
static int check_nodes(const char *cache, const char *base, int partner, const int *group_of,
                       const char *gather, const char *what)
{
    if (g_rank != 0)
        return 1;
    int ok = 1;
    char dir[4200], path[4600], idxname[300];
    snprintf(idxname, sizeof idxname, "%s.index", base);
    unsigned char *idx0 = NULL;
    node_dir(dir, sizeof dir, cache, 0);
    snprintf(path, sizeof path, "%s/%s", dir, idxname);
    long n0 = slurp(path, &idx0);
    CHECK_MSG(n0 > 0, "%s: node 0 has no %s", what, idxname);
    int nodes_with_index = partner ? g_nnodes : g_nnodes; /* every node holds the index */
    for (int k = 1; n0 > 0 && k < nodes_with_index; k++) {
        unsigned char *b = NULL;
        node_dir(dir, sizeof dir, cache, k);
        snprintf(path, sizeof path, "%s/%s", dir, idxname);
        long n = slurp(path, &b);
        CHECK_MSG(n == n0 && memcmp(b, idx0, (size_t)n0) == 0,
                  "%s: node %d's %s differs from node 0's (%ld and %ld bytes)", what, k, idxname,
                  n, n0);
        ok &= n == n0;
        free(b);
    }
    free(idx0);
    Mpickpt__Index *idx = NULL;
    node_dir(dir, sizeof dir, cache, 0);
    snprintf(path, sizeof path, "%s/%s", dir, idxname);
    CHECK_OK(ckpt__index_load(&idx, path));
    if (!idx)
        return 0;
    char gdir[4200];
    snprintf(gdir, sizeof gdir, "%s/%s", g_out, gather);
    mkdir(gdir, 0755);
    int expected_entries[256] = { 0 };
    for (int k = 0; k < g_nnodes && k < 256; k++)
        expected_entries[k] = 1; /* the index */
    for (size_t f = 0; f < idx->n_files; f++) {
        const char *name = idx->files[f]->name;
        int home = home_of(name, base);
        CHECK_MSG(home >= 0 && home < g_nnodes, "%s: data file %s has no home node", what, name);
        if (home < 0 || home >= g_nnodes)
            continue;
        unsigned char *orig = NULL;
        node_dir(dir, sizeof dir, cache, home);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        long no = slurp(path, &orig);
        CHECK_MSG(no >= 0, "%s: %s is not on its node %d", what, name, home);
        ok &= no >= 0;
        expected_entries[home]++;
        int copies = 0;
        for (int k = 0; k < g_nnodes; k++) {
            if (k == home)
                continue;
            unsigned char *b = NULL;
            node_dir(dir, sizeof dir, cache, k);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            long n = slurp(path, &b);
            if (n >= 0) {
                copies++;
                expected_entries[k]++;
                CHECK_MSG(n == no && memcmp(b, orig, (size_t)n) == 0,
                          "%s: node %d's copy of %s differs from node %d's", what, k, name, home);
                if (group_of)
                    CHECK_MSG(group_of[k] != group_of[home],
                              "%s: %s's copy is on node %d, in node %d's failure group %d", what,
                              name, k, home, group_of[k]);
            }
            free(b);
        }
        CHECK_MSG(copies == (partner ? 1 : 0), "%s: %s is on %d nodes besides its own, want %d",
                  what, name, copies, partner ? 1 : 0);
        ok &= copies == (partner ? 1 : 0);
        /* into the gathered directory */
        snprintf(path, sizeof path, "%s/%s", gdir, name);
        FILE *g = fopen(path, "wb");
        CHECK_MSG(g && (no <= 0 || fwrite(orig, 1, (size_t)no, g) == (size_t)no), "%s: copy %s",
                  what, path);
        if (g)
            fclose(g);
        free(orig);
    }
    /* nothing else of the checkpoint on any node */
    for (int k = 0; k < g_nnodes && k < 256; k++) {
        node_dir(dir, sizeof dir, cache, k);
        int n = count_files(dir, base);
        char stem[300];
        snprintf(stem, sizeof stem, "%s.", base);
        n = count_files(dir, stem);
        CHECK_MSG(n == expected_entries[k], "%s: node %d holds %d files of %s, want %d", what, k,
                  n, base, expected_entries[k]);
        ok &= n == expected_entries[k];
    }
    /* the index too */
    unsigned char *b = NULL;
    long n = slurp(path, &b);
    (void)n;
    free(b);
    snprintf(path, sizeof path, "%s/%s", gdir, idxname);
    char src[4600];
    node_dir(dir, sizeof dir, cache, 0);
    snprintf(src, sizeof src, "%s/%s", dir, idxname);
    unsigned char *ib = NULL;
    long in = slurp(src, &ib);
    FILE *g = fopen(path, "wb");
    if (g && in > 0)
        fwrite(ib, 1, (size_t)in, g);
    if (g)
        fclose(g);
    free(ib);
    mpickpt__index__free_unpacked(idx, NULL);
    return ok;
}

/* Rank 0: no file of checkpoint `base` on any node. */
static void check_gone(const char *cache, const char *base, const char *what)
{
    if (g_rank != 0)
        return;
    char dir[4200], stem[300];
    snprintf(stem, sizeof stem, "%s.", base);
    for (int k = 0; k < g_nnodes; k++) {
        node_dir(dir, sizeof dir, cache, k);
        int n = count_files(dir, stem);
        CHECK_MSG(n == 0, "%s: node %d still holds %d files of %s", what, k, n, base);
    }
}

/* Rank 0: node k's cache directory removed, as a lost node's. */
static void rm_node(const char *cache, int k)
{
    char dir[4200];
    node_dir(dir, sizeof dir, cache, k);
    CHECK_MSG(nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "rm -rf %s failed", dir);
}

/* Rank 0: no fetch_<rank> scratch directory left on any node after a restore. */
static void check_no_scratch(const char *cache, const char *what)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank != 0)
        return;
    char dir[4200], p[4400];
    for (int k = 0; k < g_nnodes; k++)
        for (int r = 0; r < g_size; r++) {
            node_dir(dir, sizeof dir, cache, k);
            snprintf(p, sizeof p, "%s/fetch_%d", dir, r);
            CHECK_MSG(!exists(p), "%s: %s was left behind", what, p);
        }
}

static ckpt_saver *new_saver(void)
{
    return cache_new_saver(g_layout);
}

static void test_setup(void)
{
    begin_case("setup refusals");
    ckpt_saver *s = new_saver();
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/cache-setup/%%n", g_out);
    if (g_nnodes < 2) {
        coll(ckpt__saver_cache_init(s, pat, CKPT__REDUNDANCY_PARTNER, NULL, CACHE_TEST_ID, NULL),
             CKPT_EINVAL, "partner redundancy on one node");
        CHECK_MSG(strstr(g_msg, "two nodes") != NULL, "message: %s", g_msg);
    } else {
        coll(ckpt__saver_cache_init(s, pat, CKPT__REDUNDANCY_PARTNER, "one-rack", CACHE_TEST_ID,
                                    NULL),
             CKPT_EINVAL, "partner redundancy in one failure group");
        CHECK_MSG(strstr(g_msg, "failure groups") != NULL, "message: %s", g_msg);
        snprintf(pat, sizeof pat, "%s/cache-setup/shared", g_out);
        coll(ckpt__saver_cache_init(s, pat, CKPT__REDUNDANCY_NONE, NULL, CACHE_TEST_ID, NULL),
             CKPT_EINVAL, "a pattern without %n on simulated nodes");
        CHECK_MSG(strstr(g_msg, "%n") != NULL, "message: %s", g_msg);
    }
    snprintf(pat, sizeof pat, "%s/cache-setup/%%n-%%r", g_out);
    coll(ckpt__saver_cache_init(s, pat, CKPT__REDUNDANCY_NONE, NULL, CACHE_TEST_ID, NULL),
         CKPT_EINVAL, "an unknown % sequence");
    ckpt_saver_free(s);
}

/* The two storage targets' tables, and the node cache's operations on a saver without a cache
 * level (refused alike on every rank, or nothing done). */
static void test_targets(void)
{
    begin_case("storage targets: the operations, and without a cache level");
    const ckpt__target_ops *p = ckpt__target_of(0), *c = ckpt__target_of(1);
    CHECK(p == &ckpt__target_persistent && c == &ckpt__target_cache);
    CHECK(!p->node_local && c->node_local);
    for (int i = 0; i < 2; i++) { /* the save's and the restore's: every target has them */
        const ckpt__target_ops *t = i ? c : p;
        CHECK(t->place && t->reserves && t->copies && t->undo && t->commit && t->metrics_open);
        CHECK(t->open_restore && t->fetch && t->fetch_done);
    }
    CHECK(!p->gc && !p->sweep && !p->drain); /* the manager's, or the drain's destination */
    CHECK(c->gc == ckpt__cache_gc && c->sweep == ckpt__cache_sweep &&
          c->drain == ckpt__cache_drain);
    ckpt_saver *s = new_saver();
    int unavailable = -1;
    if (coll(ckpt__saver_restore_cache(s, "ck-1", NULL, NULL, &unavailable), CKPT_EINVAL,
             "a restore from the cache without a cache level"))
        CHECK_MSG(strstr(g_msg, "a restore from the cache level without a cache") != NULL,
                  "message: %s", g_msg);
    CHECK_MSG(unavailable == 1, "unavailable %d, want 1", unavailable);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/targets-persistent", g_out);
    ckpt__drain_shape shape = { .other = -1 };
    if (coll(ckpt__cache_drain(s, MPI_COMM_WORLD, "ck-1", dir, &shape), CKPT_EINVAL,
             "a drain without a cache level"))
        CHECK_MSG(strstr(g_msg, "a drain without a cache level") != NULL, "message: %s", g_msg);
    CHECK_MSG(shape.other == 0, "drain: shape.other %d, want 0", shape.other);
    coll(c->sweep(s, MPI_COMM_WORLD, "ck", NULL, 0), CKPT_OK, "a sweep without a cache level");
    coll(ckpt_mpi_agree(MPI_COMM_WORLD, c->gc(s)), CKPT_OK, "a gc without a cache level");
    ckpt_saver_free(s);
}

/* A save of the model at `step` to the cache as `base`. */
static int save_cache(ckpt_saver *s, tm_model *m, const char *base, int64_t step, int64_t counter)
{
    tm_fill(m, step);
    ckpt_save_info info = { .epoch = 0, .step = step };
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    so.counter = counter;
    int rc = ckpt__saver_save_cache(s, base, &info, &so);
    return rc == CKPT_OK ? ckpt_saver_sync(s) : rc; /* async: its commit */
}

/* A restore of ck-1 from the cache under MPICKPT_FAULT=`fault`: CKPT_EIO with `message` on
 * every rank, reported as "unavailable" (before the registered values were read). */
static void restore_fault(ckpt_saver *s, const char *fault, const char *message, const char *what)
{
    begin_case("%s", what);
    int unavailable = -1;
    setenv("MPICKPT_FAULT", fault, 1);
    int rc = ckpt__saver_restore_cache(s, "ck-1", NULL, NULL, &unavailable);
    unsetenv("MPICKPT_FAULT");
    if (coll(rc, CKPT_EIO, what))
        CHECK_MSG(strstr(g_msg, message) != NULL, "%s: message: %s", what, g_msg);
    CHECK_MSG(unavailable == 1, "%s: unavailable %d, want 1", what, unavailable);
}

static void run(int partner, int groups, const char *tag)
{
    char cache[4200], pat[4300], what[200];
    snprintf(cache, sizeof cache, "%s/cache-%s", g_out, tag);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    begin_case("%s: %s redundancy%s, %d nodes of %d ranks", tag, partner ? "partner" : "no",
               groups ? " in two racks" : "", g_nnodes, g_k);
    ckpt_saver *s = new_saver();
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    int group_of[256];
    for (int k = 0; k < g_nnodes && k < 256; k++)
        group_of[k] = k < g_nnodes / 2 ? 0 : 1;
    char group[32];
    snprintf(group, sizeof group, "rack-%d", group_of[node_of(g_rank)]);
    int rc = ckpt__saver_cache_init(s, pat, partner ? CKPT__REDUNDANCY_PARTNER
                                                    : CKPT__REDUNDANCY_NONE,
                                    groups ? group : NULL, CACHE_TEST_ID, NULL);
    if (!coll(rc, CKPT_OK, "ckpt__saver_cache_init"))
        goto done;
    snprintf(what, sizeof what, "%s: save ck-1", tag);
    if (coll(save_cache(s, &m, "ck-1", 11, 1), CKPT_OK, what)) {
        char gather[64];
        snprintf(gather, sizeof gather, "gathered-%s", tag);
        int placed = all_true(check_nodes(cache, "ck-1", partner, groups ? group_of : NULL,
                                          gather, what));
        if (placed) {
            char prefix[4400];
            snprintf(prefix, sizeof prefix, "%s/%s/ck-1", g_out, gather);
            restore_check(s, &m, prefix, 11, g_layout, NULL, what);
        }
        /* from the cache itself: each rank reads its node's directory and fetches the rest */
        snprintf(what, sizeof what, "%s: restore ck-1 from the cache", tag);
        begin_case("%s", what);
        tm_zero(&m);
        ckpt_restore_info ri;
        memset(&ri, 0, sizeof ri);
        if (coll(ckpt__saver_restore_cache(s, "ck-1", NULL, &ri, NULL), CKPT_OK, what)) {
            check_values(&m, 11, TM_RESTORED, what);
            CHECK_EQ_INT(ri.step, 11);
            CHECK_EQ_INT(ri.world_size, g_size);
        }
        check_no_scratch(cache, what);
        /* a rank that cannot allocate its fetch buffers: every rank gets its error, none waits
         * for bytes never sent; then the same restore succeeds */
        int fetch_ranks[2] = { 0, g_size - 1 };
        for (int fi = 0; fi < (g_size > 1 ? 2 : 1); fi++) {
            char fault[64];
            snprintf(fault, sizeof fault, "%d:fetch", fetch_ranks[fi]);
            snprintf(what, sizeof what, "%s: restore ck-1 from the cache, MPICKPT_FAULT=%s", tag,
                     fault);
            tm_zero(&m);
            restore_fault(s, fault, "injected fault at fetch", what);
            check_no_scratch(cache, what);
        }
        snprintf(what, sizeof what, "%s: restore ck-1 from the cache after the fetch faults", tag);
        begin_case("%s", what);
        tm_zero(&m);
        if (coll(ckpt__saver_restore_cache(s, "ck-1", NULL, NULL, NULL), CKPT_OK, what))
            check_values(&m, 11, TM_RESTORED, what);
    }
    if (!partner || g_nnodes < 2)
        goto wipe;
    /* faults: nothing of ck-2 stays anywhere; ck-1 is intact */
    static const char *const steps[] = { "partner", "commit" };
    int fail_ranks[2] = { 0, g_size - 1 };
    for (size_t si = 0; si < 2; si++)
        for (int fi = 0; fi < 2; fi++) {
            if (strcmp(steps[si], "commit") == 0 && fail_ranks[fi] == 0)
                continue; /* the chief does not take the commit fault */
            char fault[64];
            snprintf(fault, sizeof fault, "%d:%s", fail_ranks[fi], steps[si]);
            snprintf(what, sizeof what, "%s: MPICKPT_FAULT=%s", tag, fault);
            begin_case("%s", what);
            setenv("MPICKPT_FAULT", fault, 1);
            rc = save_cache(s, &m, "ck-2", 12, 2);
            unsetenv("MPICKPT_FAULT");
            if (coll(rc, CKPT_EIO, what))
                CHECK_MSG(strstr(g_msg, "injected fault") != NULL, "%s: message: %s", what,
                          g_msg);
            check_gone(cache, "ck-2", what);
            MPI_Barrier(MPI_COMM_WORLD);
            char gather[64];
            snprintf(gather, sizeof gather, "gathered-%s-after", tag);
            all_true(check_nodes(cache, "ck-1", partner, groups ? group_of : NULL, gather,
                                 what));
        }
wipe:
    if (g_nnodes >= 2 && partner) {
        /* node 1 lost: its whole cache directory removed. The restore rebuilds it (its own files
         * from its partner, the copies it held from their nodes, the index) and restores every
         * value; afterwards every node holds what the save left, byte for byte */
        snprintf(what, sizeof what, "%s: node 1's cache lost, restore ck-1 from the cache", tag);
        begin_case("%s", what);
        if (g_rank == 0)
            rm_node(cache, 1);
        MPI_Barrier(MPI_COMM_WORLD);
        /* first a leader that cannot map what it sends: every rank gets its error, no leader
         * waits for bytes never sent (then the rebuild below does the whole work) */
        int leaders[2] = { 0, (g_nnodes - 1) * g_k };
        for (int li = 0; li < 2; li++) {
            char fault[64], w2[300];
            snprintf(fault, sizeof fault, "%d:rebuild", leaders[li]);
            snprintf(w2, sizeof w2, "%s, MPICKPT_FAULT=%s", what, fault);
            restore_fault(s, fault, "injected fault at rebuild", w2);
        }
        begin_case("%s", what);
        tm_zero(&m);
        if (coll(ckpt__saver_restore_cache(s, "ck-1", NULL, NULL, NULL), CKPT_OK, what))
            check_values(&m, 11, TM_RESTORED, what);
        check_no_scratch(cache, what);
        all_true(check_nodes(cache, "ck-1", partner, groups ? group_of : NULL, "gathered-rebuilt",
                             what));
        /* node 1 and the node holding its copies both lost: the files of node 1 are gone */
        int p1 = g_nnodes == 2 ? 0 : 2; /* node 1's partner without groups */
        if (!groups) {
            snprintf(what, sizeof what, "%s: nodes 1 and %d lost", tag, p1);
            begin_case("%s", what);
            if (g_rank == 0) {
                rm_node(cache, 1);
                rm_node(cache, p1);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            rc = ckpt__saver_restore_cache(s, "ck-1", NULL, NULL, NULL);
            if (coll(rc, g_nnodes == 2 ? CKPT_ENOTFOUND : CKPT_ENOTFOUND, what))
                CHECK_MSG((strstr(g_msg, "lost") != NULL || strstr(g_msg, "no node") != NULL) &&
                              strstr(g_msg, "/proc/self/fd") == NULL, /* the cache by its name */
                          "%s: message: %s", what, g_msg);
            check_no_scratch(cache, what);
        }
    } else if (g_nnodes >= 2) {
        /* no redundancy: a file of node 1 removed is lost, every rank says so */
        snprintf(what, sizeof what, "%s: a file of node 1 lost", tag);
        begin_case("%s", what);
        if (g_rank == 0) {
            char dir[4200], p[4600];
            node_dir(dir, sizeof dir, cache, 1);
            int a = g_layout == CKPT_LAYOUT_PER_NODE ? 1 : g_k; /* node 1's first file */
            snprintf(p, sizeof p, "%s/ck-1.data-%05d-of-%05d", dir, a,
                     g_layout == CKPT_LAYOUT_PER_NODE ? g_nnodes : g_size);
            CHECK_MSG(unlink(p) == 0, "%s: unlink %s", what, p);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        rc = ckpt__saver_restore_cache(s, "ck-1", NULL, NULL, NULL);
        if (coll(rc, CKPT_ENOTFOUND, what))
            CHECK_MSG(strstr(g_msg, "is lost") != NULL && strstr(g_msg, "/proc/self/fd") == NULL,
                      "%s: message: %s", what, g_msg);
        if (g_rank == 0)
            printf("  %s -> %s\n", what, g_msg);
        check_no_scratch(cache, what);
    }
done:
    ckpt_saver_free(s);
    tm_free(&m);
}

/* Rank 0: does `dir`/`name` exist? */
static int has(const char *dir, const char *name)
{
    char p[4600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return exists(p);
}

/* The manager with a cache level: persist every 2nd, the cache keeps 2, the directory keeps 2. */
static ckpt_manager *cache_manager(ckpt_saver *s, const char *dir, const char *pat)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.cache_dir = pat;
    o.redundancy = g_nnodes >= 2 ? CKPT_REDUNDANCY_PARTNER : CKPT_REDUNDANCY_NONE;
    o.persist_every = 2;
    o.cache_max_to_keep = 2;
    o.max_to_keep = 2;
    ckpt_manager *mg = NULL;
    coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, "ckpt_manager_create with a cache");
    return mg;
}

/* The state every rank sees: ckpt-2 persistent, ckpt-4 in both levels, ckpt-5 in the cache. */
static void check_levels(const ckpt_manager *mg, const char *what)
{
    const ckpt_state *st = test_manager_state(mg);
    static const char *const names[] = { "ckpt-2", "ckpt-4", "ckpt-5" };
    static const unsigned levels[] = { CKPT_LEVEL_PERSISTENT,
                                       CKPT_LEVEL_PERSISTENT | CKPT_LEVEL_CACHE,
                                       CKPT_LEVEL_CACHE };
    CHECK_MSG(st->num_entries == 3, "%s: %zu entries, want 3", what, st->num_entries);
    for (size_t i = 0; i < 3 && i < st->num_entries; i++) {
        CHECK_MSG(strcmp(st->entries[i].prefix, names[i]) == 0, "%s: entry %zu is %s, want %s",
                  what, i, st->entries[i].prefix, names[i]);
        CHECK_MSG(st->entries[i].levels == levels[i], "%s: %s is on levels %u, want %u", what,
                  st->entries[i].prefix, st->entries[i].levels, levels[i]);
    }
}

/* restore_or_initialize into the zeroed model: checkpoint of `step` restored, `skipped` newer
 * ones skipped, every value right, on every rank. */
static void restore_expect(ckpt_manager *mg, tm_model *m, int64_t step, int skipped,
                           const char *what)
{
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(m);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, what)) {
        CHECK_MSG(res.restored && res.step == step && res.skipped == skipped,
                  "%s: restored %d step %lld skipped %d", what, res.restored, (long long)res.step,
                  res.skipped);
        check_values(m, step, TM_RESTORED, what);
    }
}

static void run_manager(const char *tag)
{
    char dir[4200], cache[4200], pat[4300], what[200];
    snprintf(dir, sizeof dir, "%s/mgr-%s", g_out, tag);
    snprintf(cache, sizeof cache, "%s/mcache-%s", g_out, tag);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    begin_case("%s: a manager with a cache level, %d nodes", tag, g_nnodes);
    ckpt_saver *s = new_saver();
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    ckpt_manager *mg = cache_manager(s, dir, pat);
    if (!mg)
        goto done;
    for (int step = 1; step <= 5; step++) {
        tm_fill(&m, step * 10);
        ckpt_manager_save_info info = { 0, step * 10, 0, 0 };
        char out[4400];
        snprintf(what, sizeof what, "%s: manager save %d", tag, step);
        if (!coll(ckpt_manager_save(mg, &info, out, sizeof out), CKPT_OK, what))
            goto done;
    }
    CHECK_OK(ckpt_saver_sync(s)); /* async: the last commit and its drain */
    snprintf(what, sizeof what, "%s: after 5 saves", tag);
    check_levels(mg, what);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        /* the directory: ckpt-2 and ckpt-4; the caches: ckpt-4 and ckpt-5 on every node */
        CHECK_MSG(has(dir, "ckpt-2.index") && has(dir, "ckpt-4.index") &&
                      !has(dir, "ckpt-1.index") && !has(dir, "ckpt-3.index") &&
                      !has(dir, "ckpt-5.index"),
                  "%s: the persistent directory holds the wrong checkpoints", what);
        for (int k = 0; k < g_nnodes; k++) {
            char nd[4300];
            node_dir(nd, sizeof nd, cache, k);
            CHECK_MSG(has(nd, "ckpt-4.index") && has(nd, "ckpt-5.index") &&
                          count_files(nd, "ckpt-1.") + count_files(nd, "ckpt-2.") +
                                  count_files(nd, "ckpt-3.") ==
                              0,
                      "%s: node %d's cache holds the wrong checkpoints", what, k);
        }
    }
    ckpt_manager_free(mg);

    /* a manager without the cache level over the same directory: its latest is the newest
     * persistent checkpoint (ckpt-5 is in the caches only), and that is what it restores */
    snprintf(what, sizeof what, "%s: a manager without a cache", tag);
    begin_case("%s", what);
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    {
        ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
        o.max_to_keep = 2;
        ckpt_manager *plain = NULL;
        if (coll(ckpt_manager_create(&plain, s, dir, &o), CKPT_OK, what)) {
            char latest[4400], want[4400];
            snprintf(want, sizeof want, "%s/ckpt-4", dir);
            CHECK_OK(ckpt_manager_latest(plain, latest, sizeof latest));
            CHECK_MSG(strcmp(latest, want) == 0, "%s: latest '%s', want '%s'", what, latest,
                      want);
            tm_zero(&m);
            if (coll(ckpt_manager_restore_latest(&res, plain), CKPT_OK, what))
                CHECK_MSG(res.restored && res.step == 40, "%s: restored %d step %lld", what,
                          res.restored, (long long)res.step);
        }
        ckpt_manager_free(plain);
    }

    /* a crash between the cache's commit of ckpt-5 and the state's update (the state file
     * without it), and what crashed saves left in every cache (a workertemp_<r> with a data
     * file, a temp directory): the next manager adopts ckpt-5 from the chief's node's cache,
     * keeps it everywhere, and removes the leftovers */
    if (g_rank == 0) {
        ckpt_state *st = NULL;
        CHECK_OK(ckpt_state_read(&st, dir));
        if (st && st->num_entries == 3) {
            ckpt_state_remove(st, 2);
            snprintf(st->latest, sizeof st->latest, "%s", st->entries[1].prefix);
            st->save_counter = st->entries[1].save_counter; /* as the state said before */
            /* and ckpt-4's drain committed (its copy in the directory) before the state said
             * so: the next manager lists it in both levels again, it does not drain it anew */
            st->entries[1].levels = CKPT_LEVEL_CACHE;
            CHECK_OK(ckpt__state_write(st, dir));
        }
        ckpt_state_free(st);
        for (int k = 0; k < g_nnodes; k++) {
            char nd[4300], p[4600];
            node_dir(nd, sizeof nd, cache, k);
            snprintf(p, sizeof p, "%s/workertemp_%d", nd, g_size - 1);
            CHECK_MSG(mkdir(p, 0755) == 0, "mkdir %s", p);
            snprintf(p, sizeof p, "%s/workertemp_%d/ckpt-6.data-%05d-of-%05d", nd, g_size - 1,
                     g_size - 1, g_size);
            int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
            CHECK_MSG(fd >= 0 && write(fd, "leftover", 8) == 8, "write %s", p);
            if (fd >= 0)
                close(fd);
            snprintf(p, sizeof p, "%s/ckpt-6_temp", nd);
            CHECK_MSG(mkdir(p, 0755) == 0, "mkdir %s", p);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* a new manager reads the levels back and restores the newest, from the cache */
    snprintf(what, sizeof what, "%s: restore from the cache", tag);
    begin_case("%s", what);
    mg = cache_manager(s, dir, pat);
    if (!mg)
        goto done;
    check_levels(mg, what);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0)
        for (int k = 0; k < g_nnodes; k++) {
            char nd[4300], wt[64];
            node_dir(nd, sizeof nd, cache, k);
            snprintf(wt, sizeof wt, "workertemp_%d", g_size - 1);
            CHECK_MSG(has(nd, "ckpt-5.index") && !has(nd, "ckpt-6_temp") && !has(nd, wt),
                      "%s: node %d's cache: ckpt-5 swept or leftovers kept", what, k);
        }
    restore_expect(mg, &m, 50, 0, what);
    /* a registration the checkpoint does not match: the cache's copy is whole, so the restore
     * fails on every rank, naming the newest checkpoint (ckpt-5, in the cache only) — it does
     * not fall through to an older one, nor start fresh */
    snprintf(what, sizeof what, "%s: a tensor registered that ckpt-5 lacks", tag);
    begin_case("%s", what);
    ckpt_manager_free(mg); /* one manager per directory at a time (its lock), in a process too */
    {
        ckpt_saver *s2 = new_saver();
        tm_model m2;
        CHECK_OK(tm_init(&m2, g_size, g_rank, g_size, 0));
        register_or_die(&m2, s2);
        float extra[4] = { 0 };
        ckpt_shape sh = { 1, { 4 } };
        CHECK_OK(ckpt_saver_add_full(s2, "not-in-the-checkpoint", CKPT_FLOAT32, &sh, extra));
        ckpt_manager *mg2 = cache_manager(s2, dir, pat);
        if (mg2) {
            int rc2 = ckpt_manager_restore_latest(&res, mg2);
            /* strict (CKPT_MANAGER_OPTIONS_INIT, version 4): a mismatch before anything is read */
            if (coll(rc2, CKPT_EMISMATCH, what))
                CHECK_MSG(strstr(g_msg, "not-in-the-checkpoint") && strstr(g_msg, "ckpt-5"),
                          "%s: message: %s", what, g_msg);
            check_levels(mg2, what);
            ckpt_manager_free(mg2);
        }
        ckpt_saver_free(s2);
        tm_free(&m2);
    }
    mg = cache_manager(s, dir, pat);
    if (!mg)
        goto done;
    if (g_nnodes >= 2) {
        snprintf(what, sizeof what, "%s: node 1 lost, restore from the cache", tag);
        begin_case("%s", what);
        if (g_rank == 0)
            rm_node(cache, 1);
        MPI_Barrier(MPI_COMM_WORLD);
        restore_expect(mg, &m, 50, 0, what);
    }
    /* every node lost: ckpt-5 is gone, ckpt-4 comes from the persistent directory */
    snprintf(what, sizeof what, "%s: every cache lost", tag);
    begin_case("%s", what);
    if (g_rank == 0)
        for (int k = 0; k < g_nnodes; k++)
            rm_node(cache, k);
    MPI_Barrier(MPI_COMM_WORLD);
    restore_expect(mg, &m, 40, 1, what);
    ckpt_manager_free(mg);

    /* a training state with a cache level: delete_backup removes its checkpoints from every
     * node's cache too, not only its directory */
    snprintf(what, sizeof what, "%s: training state, delete_backup", tag);
    begin_case("%s", what);
    {
        char tdir[4300], tcache[4300], tpat[4400];
        snprintf(tdir, sizeof tdir, "%s/train-%s", g_out, tag);
        snprintf(tcache, sizeof tcache, "%s/tcache-%s", g_out, tag);
        snprintf(tpat, sizeof tpat, "%s/%%n", tcache);
        ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
        o.cache_dir = tpat;
        o.persist_every = 2;
        ckpt_training *t = NULL;
        if (coll(ckpt_training_create(&t, s, tdir, &o), CKPT_OK, what)) {
            for (int e = 0; e < 3; e++)
                coll(ckpt_training_back_up(t, e, e * 10, 1), CKPT_OK, what);
            CHECK_OK(ckpt_saver_sync(s));
            MPI_Barrier(MPI_COMM_WORLD);
            if (g_rank == 0) {
                char nd[4400];
                node_dir(nd, sizeof nd, tcache, 0);
                CHECK_MSG(count_files(nd, "ckpt-") > 0, "%s: nothing in node 0's cache", what);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            coll(ckpt_training_delete_backup(t), CKPT_OK, what);
            MPI_Barrier(MPI_COMM_WORLD);
            if (g_rank == 0)
                for (int k = 0; k < g_nnodes; k++) {
                    char nd[4400];
                    node_dir(nd, sizeof nd, tcache, k);
                    CHECK_MSG(count_files(nd, "ckpt-") == 0 && !exists(tdir),
                              "%s: node %d's cache still holds %d files of it", what, k,
                              count_files(nd, "ckpt-"));
                }
        }
        ckpt_training_free(t);
    }
done:
    ckpt_saver_free(s);
    tm_free(&m);
}

/* The reshape case (see the top): the whole job's part. */
static void reshape_first(const char *dir, const char *pat, const char *tag)
{
    char what[200];
    ckpt_saver *s = new_saver();
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    ckpt_manager *mg = cache_manager(s, dir, pat);
    for (int step = 1; mg && step <= 4; step++) {
        tm_fill(&m, step * 10);
        ckpt_manager_save_info info = { 0, step * 10, 0, 0 };
        char out[4400];
        if (step == 4) /* committed to the cache, not drained */
            setenv("MPICKPT_FAULT", "0:drain", 1);
        snprintf(what, sizeof what, "%s: the whole job's save %d", tag, step);
        coll(ckpt_manager_save(mg, &info, out, sizeof out), CKPT_OK, what);
        CHECK_OK(ckpt_saver_sync(s)); /* async: its commit and drain */
        unsetenv("MPICKPT_FAULT");
    }
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
    tm_free(&m);
}

/* How many captured warnings contain `word`. */
static int logs_count(const char *word)
{
    int n = 0;
    for (int i = 0; i < g_nlogs; i++)
        n += contains_ci(g_logs[i], word);
    return n;
}

static void run_reshape(const char *tag)
{
    char dir[4200], cache[4200], pat[4300], what[300];
    snprintf(dir, sizeof dir, "%s/reshape-%s", g_out, tag);
    snprintf(cache, sizeof cache, "%s/rcache-%s", g_out, tag);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    int half = g_size / 2, k_nodes = (half + g_k - 1) / g_k;
    /* the caches' ckpt-4 on the half's shape: per-node with as many nodes only */
    int other = g_layout == CKPT_LAYOUT_PER_RANK || k_nodes != g_nnodes;
    begin_case("%s: %d ranks on %d nodes, then %d ranks on %d nodes", tag, g_size, g_nnodes, half,
               k_nodes);
    reshape_first(dir, pat, tag);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank < half ? 0 : MPI_UNDEFINED, g_rank, &sub);
    if (sub != MPI_COMM_NULL) {
        ckpt_log_set(logcap_cb, CKPT_LOG_WARN, NULL);
        g_nlogs = 0;
        ckpt_saver *s = NULL;
        tm_model m;
        CHECK_OK(tm_init(&m, half, g_rank, g_size, 0)); /* the full tensors of the whole job */
        ckpt_manager *mg = NULL;
        ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
        o.cache_dir = pat;
        o.redundancy = k_nodes >= 2 ? CKPT_REDUNDANCY_PARTNER : CKPT_REDUNDANCY_NONE;
        o.persist_every = 2;
        o.cache_max_to_keep = 2;
        o.max_to_keep = 2;
        snprintf(what, sizeof what, "%s: the half's manager", tag);
        if (coll_on(sub, ckpt_saver_create(&s, sub, NULL), CKPT_OK, what) &&
            coll_on(sub, tm_register(&m, s), CKPT_OK, what) &&
            coll_on(sub, ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, what)) {
            ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
            tm_zero(&m);
            snprintf(what, sizeof what, "%s: the half's restore", tag);
            /* ckpt-4 from the caches when this node holds all of it (partner copies), else
             * the persistent ckpt-2 */
            if (coll_on(sub, ckpt_manager_restore_latest(&res, mg), CKPT_OK, what)) {
                CHECK_MSG(res.restored && (res.step == 40 || (other && res.step == 20)),
                          "%s: restored %d step %lld skipped %d", what, res.restored,
                          (long long)res.step, res.skipped);
                check_model(&m, res.step, TM_RESTORED, what);
            }
            for (int step = 5; step <= 7; step++) {
                tm_fill(&m, step * 10);
                ckpt_manager_save_info info = { 0, step * 10, 0, 0 };
                char out[4400];
                snprintf(what, sizeof what, "%s: the half's save %d", tag, step);
                coll_on(sub, ckpt_manager_save(mg, &info, out, sizeof out), CKPT_OK, what);
            }
            CHECK_OK(ckpt_saver_sync(s));
            snprintf(what, sizeof what, "%s: the half's restore after its saves", tag);
            tm_zero(&m);
            if (coll_on(sub, ckpt_manager_restore_latest(&res, mg), CKPT_OK, what)) {
                CHECK_MSG(res.restored && res.step == 70, "%s: restored %d step %lld", what,
                          res.restored, (long long)res.step);
                check_model(&m, 70, TM_RESTORED, what);
            }
            /* what was said (the chief says it), and what the persistent directory holds */
            snprintf(what, sizeof what, "%s: the half's warnings", tag);
            if (g_rank == 0) {
                CHECK_MSG(logs_count("No such file") == 0 && logs_count("drain of ckpt-4") == 0,
                          "%s: the drain of ckpt-4 was tried: %s", what,
                          g_nlogs ? g_logs[g_nlogs - 1] : "");
                int said = logs_count("not drained");
                CHECK_MSG(said == other, "%s: %d warnings of ckpt-4 not drained, want %d", what,
                          said, other);
                const char *const words[] = { "ckpt-4", "written by", "this job has", NULL };
                const char *w = logs_find(words);
                CHECK_MSG(!other || w, "%s: no warning names both shapes", what);
                if (w)
                    printf("  %s: %s\n", what, w);
                CHECK_MSG(has(dir, "ckpt-4.index") == !other && has(dir, "ckpt-6.index"),
                          "%s: the persistent directory: ckpt-4 %d (want %d), ckpt-6 %d", what,
                          has(dir, "ckpt-4.index"), !other, has(dir, "ckpt-6.index"));
            }
        }
        ckpt_manager_free(mg);
        ckpt_saver_free(s);
        tm_free(&m);
        ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
        MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    if (!cache_test_start(&argc, &argv, "test_cache", &g_rank, &g_size, &g_out, &g_layout, &g_k,
                          &g_nnodes))
        return 2;
    make_dir(g_out);
    test_setup();
    test_targets();
    if (g_nnodes >= 2) { /* one node: refused in test_setup */
        run(1, 0, "partner");
        run(1, 1, "racks");
    }
    run(0, 0, "none");
    run_manager("manager");
    if (g_size >= 2)
        run_reshape("reshape");
    return check_mpi_done("test_cache");
}
