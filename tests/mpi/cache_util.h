/* Helpers shared by the cache level's tests (test_cache.c, test_cache_hostile.c): nodes of k
 * ranks simulated with MPICKPT_RANKS_PER_NODE, each with its directory CACHE/<node>. */
#ifndef MPICKPT_TESTS_CACHE_UTIL_H
#define MPICKPT_TESTS_CACHE_UTIL_H

#include "mpi_check.h"
#include "coll.h"
#include "mpickpt.h"

#include <dirent.h>
#include <ftw.h>
#include <mpi.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* The identity (lib/identity.h) the tests that set the cache level up on a saver themselves give
 * it (ckpt__saver_cache_init); a manager makes its directory's own. */
#define CACHE_TEST_ID "0123456789abcdef0123456789abcdef"

/* Node `node`'s cache directory under `cache` (the pattern CACHE/%n), as the pattern names it;
 * the checkpoints are in its subdirectory of one checkpoint directory (node_dir). */
static inline void node_base_dir(char *out, size_t n, const char *cache, int node)
{
    snprintf(out, n, "%s/%d", cache, node);
}

/* Where node `node`'s cache copies are: CACHE/<node>/mpickpt-<identity>, of the one checkpoint
 * directory whose cache is there (a manager's, with an identity of its own), else of
 * CACHE_TEST_ID. */
static inline void node_dir(char *out, size_t n, const char *cache, int node)
{
    char base[4096], id[64] = CACHE_TEST_ID;
    node_base_dir(base, sizeof base, cache, node);
    DIR *d = opendir(base);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "mpickpt-", 8) == 0 && strlen(de->d_name) == 8 + 32)
            snprintf(id, sizeof id, "%s", de->d_name + 8);
    if (d)
        closedir(d);
    snprintf(out, n, "%s/mpickpt-%s", base, id);
}

/* Rank 0: the whole regular file `path` (a link is not followed) into *buf (malloc'd); its
 * length, or -1. */
static inline long slurp(const char *path, unsigned char **buf)
{
    *buf = NULL;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n)
        n = -1;
    fclose(f);
    return n;
}

/* nftw callback (FTW_DEPTH | FTW_PHYS): removes each entry, links as links. */
static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* A saver of `layout` on every rank (MPICKPT_LAYOUT), or the job aborts. Collective. */
static inline ckpt_saver *cache_new_saver(ckpt_layout layout)
{
    setenv("MPICKPT_LAYOUT", layout == CKPT_LAYOUT_PER_NODE ? "per-node" : "per-rank", 1);
    ckpt_saver *s = NULL;
    if (!coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, "ckpt_saver_create"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    return s;
}

/* The start of a cache test `name OUTDIR per-rank|per-node`: MPI, the watchdog, no fault from the
 * environment, nodes of MPICKPT_RANKS_PER_NODE ranks (unset: one node). 0 after a usage error
 * (MPI finalized: the program exits 2). */
static inline int cache_test_start(int *argc, char ***argv, const char *name, int *rank, int *size,
                                   const char **out, ckpt_layout *layout, int *k, int *nnodes)
{
    check_watchdog_s = 60;
    check_mpi_init(argc, argv, rank, size);
    unsetenv("MPICKPT_FAULT");
    if (*argc != 3) {
        if (*rank == 0)
            fprintf(stderr, "usage: %s OUTDIR per-rank|per-node\n", name);
        MPI_Finalize();
        return 0;
    }
    *out = (*argv)[1];
    *layout = strcmp((*argv)[2], "per-node") == 0 ? CKPT_LAYOUT_PER_NODE : CKPT_LAYOUT_PER_RANK;
    const char *v = getenv("MPICKPT_RANKS_PER_NODE");
    *k = v ? atoi(v) : 0;
    if (*k <= 0)
        *k = *size; /* one node */
    *nnodes = (*size + *k - 1) / *k;
    return 1;
}

#endif
