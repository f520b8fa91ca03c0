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
 * (ranks [k*K, (k+1)*K) with MPICKPT_RANKS_PER_NODE=K; else the shared-memory node, which is node
 * 0 on one machine). */
static int my_node(int *first)
{
    const char *e = getenv("MPICKPT_RANKS_PER_NODE");
    int k = e ? atoi(e) : 0;
    if (k > 0) {
        *first = g_rank % k == 0;
        return g_rank / k;
    }
    int nr = 0;
    MPI_Comm_rank(g_node, &nr);
    *first = nr == 0;
    return 0;
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
    int rc = ckpt__saver_save_level(s, name, 1, NULL, counter, NULL, NULL);
    double t = now() - t0;
    if (rc != CKPT_OK)
        die("a save to the cache", rc);
    t = max_all(t);
    ckpt_save_metrics m;
    if (r && ckpt_saver_last_metrics(s, &m) == CKPT_OK) {
        r->ph[0][i] = m.write_s;
        r->ph[1][i] = m.agree_s;
        r->ph[2][i] = m.merge_s;
        r->ph[3][i] = m.commit_s;
        if (i + 1 > r->nph)
            r->nph = i + 1;
    }
    return t;
}

void run_cache(const opts *o, large_model *m)
{
    static result r;
    static char why[2][600];
    char pat[4200], dir[4300], base[4400];
    int first = 0, node = my_node(&first);
    snprintf(pat, sizeof pat, "%s/cache/%%n", o->dir);
    snprintf(dir, sizeof dir, "%s/cache/%d", o->dir, node);
    snprintf(base, sizeof base, "%s/bench-raw-%05d.bin", dir, g_rank);
    for (int red = 0; red < 2; red++) {
        memset(&r, 0, sizeof r);
        r.scenario = red ? "cache_partner" : "cache";
        r.baseline = "write+fsync";
        r.bytes = m->bytes;
        r.reps = o->reps;
        ckpt_saver *s = make_saver(o, 0);
        large_register(s, m, 0);
        int rc = ckpt__saver_cache_init(s, pat, red ? CKPT__REDUNDANCY_PARTNER
                                                    : CKPT__REDUNDANCY_NONE, NULL);
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
