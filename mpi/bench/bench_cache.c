/*
 * mpickpt-bench's cache rows (docs/levels.md): the blocking time of a sync save of the large model
 * to the cache level, without and with partner copies, against a raw write+fsync of the same
 * bytes into the same node directory in the same run (interleaved). The cache directory is
 * DIR/cache/%n: give --dir on a tmpfs (/dev/shm) to measure a RAM-disk cache. Nodes are
 * MPICKPT_RANKS_PER_NODE's (one machine simulates them) or the shared-memory ones; partner needs
 * two nodes and is skipped (with the reason) otherwise.
 */
#include "bench.h"
#include "mpi_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This rank's node index and whether it is the node's first rank, as the saver numbers nodes
 * (ranks [k*K, (k+1)*K) with MPICKPT_RANKS_PER_NODE=K; else the shared-memory nodes, numbered by
 * their lowest ranks in rank order, mpi/save_node.c: node 0 on one machine, each its own on real
 * nodes, tests/cluster/bench_cluster.sh). */
static int my_node(int *first)
{
    const char *e = getenv("MPICKPT_RANKS_PER_NODE");
    int k = e ? atoi(e) : 0;
    if (k > 0) {
        *first = g_rank % k == 0;
        return g_rank / k;
    }
    int nr = 0, leader = g_rank, node = 0;
    MPI_Comm_rank(g_node, &nr);
    *first = nr == 0;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, g_node);
    int *all = malloc((size_t)g_size * sizeof *all);
    if (!all)
        die("my_node", CKPT_ENOMEM);
    MPI_Allgather(&leader, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < leader; r++)
        node += all[r] == r; /* a leader below mine: a node numbered before mine */
    free(all);
    return node;
}

/* Every entry of `dir` whose name starts with `stem` removed (the node's first rank). */
static void remove_stem(const char *dir, const char *stem, int first)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (first) {
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL)
            if (strncmp(de->d_name, stem, strlen(stem)) == 0) {
                char p[4600];
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                unlink(p);
            }
        if (d)
            closedir(d);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static double timed_cache_save(ckpt_saver *s, const char *name, int64_t counter, result *r, int i)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    so.counter = counter;
    int rc = ckpt__saver_save_cache(s, name, NULL, &so);
    return timed_save_end(s, t0, rc, "a save to the cache", r, i);
}

void run_cache(const opts *o, large_model *m)
{
    static result r;
    static char why[2][600];
    /* the cache of a checkpoint directory of identity 0 (lib/identity.h), none persistent */
    static const char id[] = "00000000000000000000000000000000";
    char pat[4200], node_dir[4300], dir[4400], base[4500];
    int first = 0, node = my_node(&first);
    snprintf(pat, sizeof pat, "%s/cache/%%n", o->dir);
    snprintf(node_dir, sizeof node_dir, "%s/cache/%d", o->dir, node);
    snprintf(dir, sizeof dir, "%s/mpickpt-%s", node_dir, id);
    snprintf(base, sizeof base, "%s/bench-raw-%05d.bin", node_dir, g_rank);
    for (int red = 0; red < 2; red++) {
        result_begin(&r, o, red ? "cache_partner" : "cache", "write+fsync", m->bytes);
        ckpt_saver *s = make_saver(o, 0);
        large_register(s, m, 0);
        int rc = ckpt__saver_cache_init(s, pat, red ? CKPT__REDUNDANCY_PARTNER
                                                    : CKPT__REDUNDANCY_NONE, NULL, id, NULL);
        if (rc != CKPT_OK) {
            snprintf(why[red], sizeof why[red], "%s", ckpt_error_last()->message);
            r.skipped = why[red];
            print_result(o, &r);
            ckpt_saver_free(s);
            continue;
        }
        /* warm-up: the plan, the first allocation in the directory */
        timed_cache_save(s, "bench-cache-0", 1, NULL, 0);
        remove_stem(dir, "bench-cache-0.", first);
        timed_plain_write(base, m->arena, m->bytes);
        remove_all(base);
        for (int i = 0; i < o->reps; i++) {
            char name[64], stem[80];
            snprintf(name, sizeof name, "bench-cache-%d", i + 1);
            snprintf(stem, sizeof stem, "%s.", name);
            for (int k = 0; k < 2; k++) {
                if ((k == 0) == (i % 2 == 0)) {
                    r.lib[i] = timed_cache_save(s, name, i + 2, &r, i);
                    remove_stem(dir, stem, first);
                } else {
                    r.base[i] = timed_plain_write(base, m->arena, m->bytes);
                    remove_all(base);
                }
            }
        }
        ckpt_saver_free(s);
        print_result(o, &r);
    }
}

/* A fixed amount of arithmetic over `x` (a training step's stand-in): seconds it took, max over
 * ranks. */
static double compute(float *x, size_t n, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int k = 0; k < iters; k++)
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] * 0.999f + 0.5f;
    double t = now() - t0;
    volatile float sink = x[n / 2];
    (void)sink;
    return max_all(t);
}

/*
 * The drain's cost to training: a manager with a cache level and an async saver; after each save
 * returns, the ranks compute (a fixed loop) while the writer thread writes the cache and, every
 * save in the "drain" row (persist_every 1), drains it to DIR/persist; the loop's time is compared
 * with the same loop while nothing runs in the background. The "cache_bg" row (persist_every
 * large: no drain) separates the cache save's own cost from the drain's.
 */
void run_cache_drain(const opts *o, large_model *m)
{
    static result r;
    static char why[600];
    int provided = 0;
    MPI_Query_thread(&provided);
    size_t n = (size_t)4 << 20; /* 16 MiB of floats */
    float *x = alloc_touched(n * sizeof *x);
    char pat[4200], dir[4300];
    snprintf(pat, sizeof pat, "%s/cache/%%n", o->dir);
    snprintf(dir, sizeof dir, "%s/persist", o->dir);
    for (int row = 0; row < 2; row++) {
        result_begin(&r, o, row ? "drain_compute" : "cache_bg_compute", "compute alone",
                     m->bytes);
        if (provided != MPI_THREAD_MULTIPLE) {
            r.skipped = "needs MPI_THREAD_MULTIPLE (the async saver)";
            print_result(o, &r);
            continue;
        }
        ckpt_saver *s = make_saver(o, 1);
        large_register(s, m, 0);
        ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT;
        mo.cache_dir = pat;
        mo.persist_every = row ? 1 : 1000000;
        mo.cache_max_to_keep = 1;
        mo.max_to_keep = 1;
        ckpt_manager *mg = NULL;
        int rc = ckpt_manager_create(&mg, s, dir, &mo);
        if (rc != CKPT_OK) {
            snprintf(why, sizeof why, "%s", ckpt_error_last()->message);
            r.skipped = why;
            print_result(o, &r);
            ckpt_saver_free(s);
            continue;
        }
        ckpt_manager_save_info si = { 0, 0, 0, 1 };
        if ((rc = ckpt_manager_save(mg, &si, NULL, 0)) != CKPT_OK ||
            (rc = ckpt_saver_sync(s)) != CKPT_OK) /* warm-up */
            die("a warm-up save to the cache", rc);
        int iters = 200; /* ~0.2 s here: longer than the save and its drain in the background */
        for (int i = 0; i < o->reps; i++) {
            for (int k = 0; k < 2; k++) {
                if ((k == 0) == (i % 2 == 0)) {
                    si.step = i + 1;
                    if ((rc = ckpt_manager_save(mg, &si, NULL, 0)) != CKPT_OK)
                        die("ckpt_manager_save", rc);
                    r.lib[i] = compute(x, n, iters);
                    if ((rc = ckpt_saver_sync(s)) != CKPT_OK)
                        die("ckpt_saver_sync", rc);
                } else {
                    r.base[i] = compute(x, n, iters);
                }
            }
        }
        ckpt_manager_free(mg);
        if ((rc = ckpt_saver_close(s)) != CKPT_OK)
            die("ckpt_saver_close", rc);
        print_result(o, &r);
    }
    free(x);
}
