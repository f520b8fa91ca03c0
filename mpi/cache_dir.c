/*
 * The cache level's directory and nodes (docs/levels.md, mpi_internal.h), under the node cache
 * as a storage target (save_levels.c):
 *   ckpt__saver_cache_init   at the manager's creation: nodes (mpi/save_node.c), this node's cache
 *                            directory, failure groups and partners (lib/levels.c)
 *   ckpt__cache_lock         each node leader's lock of its node's cache directory
 *   ckpt__cache_reopen       a node's cache directory made again when it was wiped
 *   ckpt__cache_gc, ckpt__cache_sweep  the leftovers of failed saves, the checkpoints the cache
 *                            no longer keeps, removed by the node leaders: the node cache
 *                            target's gc and sweep (target.h; the manager calls them)
 *   ckpt__saver_has_cache, ckpt__saver_cache_dir, ckpt__saver_cache_shown, ckpt__cache_dirfd
 *                            the manager's and the restore's view of the directory
 */
#include "saver_internal.h"

#include "dirlock.h"
#include "fsutil.h"
#include "identity.h"
#include "index.h"
#include "levels.h"
#include "paths.h"
#include "privdir.h"
#include "mpickpt/collective.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define GROUP_MAX 64

/* ---- init -------------------------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every node's failure group as an int (equal names, equal ints); the ranks of a node must name
 * the same group. Collective (one allgather of GROUP_MAX bytes per rank). */
static int node_groups(ckpt_saver *s, const char *group, const int *node_of, int *groups)
{
    char mine[GROUP_MAX] = { 0 };
    int local = CKPT_OK;
    if (group && strlen(group) >= GROUP_MAX)
        local = ckpt__error(CKPT_EINVAL, "rank %d: failure group '%.40s...' is longer than %d bytes",
                            s->rank, group, GROUP_MAX - 1);
    else if (group)
        snprintf(mine, sizeof mine, "%s", group);
    char *all = malloc((size_t)s->size * GROUP_MAX);
    char **sorted = malloc((size_t)s->nnodes * sizeof *sorted);
    if ((!all || !sorted) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc == CKPT_OK &&
        MPI_Allgather(mine, GROUP_MAX, MPI_CHAR, all, GROUP_MAX, MPI_CHAR, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Allgather of the failure groups failed");
    for (int r = 0; rc == CKPT_OK && local == CKPT_OK && r < s->size; r++) {
        int leader = s->node_leaders[node_of[r]];
        if (strcmp(all + (size_t)r * GROUP_MAX, all + (size_t)leader * GROUP_MAX) != 0)
            local = ckpt__error(CKPT_EINVAL,
                                "ranks %d and %d share a node but name failure groups '%s' and "
                                "'%s'",
                                leader, r, all + (size_t)leader * GROUP_MAX,
                                all + (size_t)r * GROUP_MAX);
    }
    if (rc == CKPT_OK && local == CKPT_OK) {
        /* a group's int: its rank among the distinct names; no names: every node its own */
        int named = 0;
        for (int k = 0; k < s->nnodes; k++) {
            sorted[k] = all + (size_t)s->node_leaders[k] * GROUP_MAX;
            named |= sorted[k][0] != '\0';
        }
        qsort(sorted, (size_t)s->nnodes, sizeof *sorted, cmp_names);
        for (int k = 0; k < s->nnodes; k++) {
            const char *g = all + (size_t)s->node_leaders[k] * GROUP_MAX;
            groups[k] = k;
            if (!named)
                continue;
            for (int j = 0; j < s->nnodes; j++)
                if (strcmp(sorted[j], g) == 0) {
                    groups[k] = j;
                    break;
                }
        }
    }
    if (rc == CKPT_OK)
        rc = ckpt_mpi_agree(s->comm, local);
    free(all);
    free(sorted);
    return rc;
}

/* This rank's partner and the ranks it protects: node k's i-th rank's partner is the
 * (i mod size)-th rank of node k's partner node. Local (from node_of, the same everywhere). */
static int partners(ckpt_saver *s, const int *node_of, const int *groups)
{
    int n = s->nnodes, rc;
    int *pnode = malloc((size_t)n * sizeof *pnode), *count = calloc((size_t)n, sizeof *count);
    int *pos = malloc((size_t)s->size * sizeof *pos);
    if (!pnode || !count || !pos) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = ckpt__partner_nodes(pnode, groups, n)) != CKPT_OK)
        goto done;
    for (int r = 0; r < s->size; r++) /* node rank of r: ranks of a node in rank order */
        pos[r] = count[node_of[r]]++;
    /* partner of rank r: the member of node pnode[node_of[r]] at node rank pos[r] % count */
    int *first = malloc((size_t)n * sizeof *first);
    int *members = malloc((size_t)s->size * sizeof *members);
    if (!first || !members) {
        free(first);
        free(members);
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    for (int k = 0, at = 0; k < n; k++) {
        first[k] = at;
        at += count[k];
    }
    for (int r = 0; r < s->size; r++)
        members[first[node_of[r]] + pos[r]] = r;
    s->cache.nfrom = 0;
    s->cache.from = malloc((size_t)s->size * sizeof *s->cache.from);
    if (!s->cache.from)
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    for (int r = 0; rc == CKPT_OK && r < s->size; r++) {
        int p = pnode[node_of[r]];
        int partner = members[first[p] + pos[r] % count[p]];
        if (r == s->rank)
            s->cache.partner = partner;
        if (partner == s->rank)
            s->cache.from[s->cache.nfrom++] = r;
    }
    free(first);
    free(members);
done:
    if (rc == CKPT_OK) {
        s->cache.pnode = pnode;
        pnode = NULL;
    }
    free(pnode);
    free(count);
    free(pos);
    return rc;
}

/* The node's leader: what else the node's cache directory `base` holds besides this checkpoint
 * directory's subdirectory `mine`, said once (the chief's node as a warning, the others at info
 * level); nothing of it is read, adopted or removed. */
static void report_foreign(const ckpt_saver *s, int basefd, const char *base, const char *mine)
{
    int fd = fcntl(basefd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        ckpt__close(fd);
        return;
    }
    size_t caches = 0, other = 0;
    char first[2][160] = { "", "" };
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, mine))
            continue;
        int c = ckpt__is_cache_subdir(de->d_name);
        if (!(c ? caches++ : other++))
            snprintf(first[c ? 0 : 1], sizeof first[0], "%.150s", de->d_name);
    }
    closedir(d);
    if (caches)
        ckpt__log(s->rank == 0 ? CKPT_LOG_WARN : CKPT_LOG_INFO,
                  "node %d: %s also holds the caches of %zu other checkpoint director%s (%s%s): "
                  "not this job's, never read or removed by it",
                  s->node, base, caches, caches == 1 ? "y" : "ies", first[0],
                  caches > 1 ? ", ..." : "");
    if (other)
        ckpt__log(s->rank == 0 ? CKPT_LOG_WARN : CKPT_LOG_INFO,
                  "node %d: %s holds %zu entr%s that %s not this job's (%s%s; an older mpickpt's "
                  "cache or someone else's files): never read or removed by it",
                  s->node, base, other, other == 1 ? "y" : "ies", other == 1 ? "is" : "are",
                  first[1], other > 1 ? ", ..." : "");
}

/* This rank's view of its node's cache directory (pattern and node given): the directory held
 * open and checked (lib/privdir.h), not the persistent directory nor inside or above it, and its
 * subdirectory for this checkpoint directory's identity, held open in s->cache.fd. With `report`
 * (at the set-up, not when it is made again) the node's leader says what else the node's cache
 * directory holds (other directories' caches, files of an older mpickpt or of others): it is
 * never read or touched. Local. */
static int open_cache_dir(ckpt_saver *s, const char *pattern, const char *identity,
                          const char *persistent, int report)
{
    char base[4096], shown[4096];
    int basefd = -1, pfd = -1;
    char work[4096];
    struct stat pst, bst;
    int rc = ckpt__cache_dir(base, sizeof base, pattern, s->node);
    if (rc == CKPT_OK && persistent) /* a training state's <work>, which holds chief/ */
        rc = ckpt__work_dir(work, sizeof work, persistent);
    if (rc == CKPT_OK && persistent && (rc = ckpt__dir_open(&pfd, work)) == CKPT_OK &&
        fstat(pfd, &pst) != 0)
        rc = ckpt__errno(errno, "stat", work);
    /* A cache that is the persistent directory, below it or above it would put the caches'
     * sweep and the checkpoints it must never touch in one tree: the walk stops on reaching it
     * (before it makes anything inside it), and the persistent directory may not lie below the
     * cache either. */
    if (rc == CKPT_OK)
        rc = ckpt__private_dir_open(&basefd, base, persistent ? &pst : NULL, work);
    if (rc == CKPT_OK && persistent) {
        /* (a walk that cannot be made is a refusal too: the check must not fail open) */
        int below = fstat(basefd, &bst) == 0 ? ckpt__dir_within(basefd, &pst) : -1;
        int above = below >= 0 ? ckpt__dir_within(pfd, &bst) : -1;
        if (below == 1 || above == 1)
            rc = ckpt__error(CKPT_EINVAL,
                             "refusing cache directory %s: it is %s the persistent directory %s; "
                             "a node-local cache must be a directory of its own",
                             base, below == 1 ? "inside" : "above", work);
        else if (below != 0 || above != 0)
            rc = ckpt__error(CKPT_EINVAL,
                             "refusing cache directory %s: whether it lies inside or above the "
                             "persistent directory %s cannot be told (%s)",
                             base, work, strerror(errno));
    }
    ckpt__close(pfd);
    char sub[64];
    if (rc == CKPT_OK)
        rc = ckpt__path(sub, sizeof sub, CKPT__CACHE_SUBDIR_PREFIX "%s", identity);
    if (rc == CKPT_OK && !ckpt__is_cache_subdir(sub))
        rc = ckpt__error(CKPT_EINVAL, "'%s' is not a checkpoint directory identity", identity);
    if (rc == CKPT_OK)
        rc = ckpt__private_subdir_open(&s->cache.fd, basefd, sub, base);
    if (rc == CKPT_OK)
        rc = ckpt__path(shown, sizeof shown, "%s/%s", base, sub);
    if (rc == CKPT_OK)
        memcpy(s->cache.dir, shown, sizeof s->cache.dir);
    if (rc == CKPT_OK)
        rc = ckpt__fd_path(s->cache.at, sizeof s->cache.at, s->cache.fd, s->cache.dir);
    if (rc == CKPT_OK) /* messages name it, not /proc/self/fd/<n> */
        ckpt__error_alias(s->cache.at, s->cache.dir);
    if (rc == CKPT_OK && s->node_rank == 0 && report)
        report_foreign(s, basefd, base, sub);
    ckpt__close(basefd);
    return rc;
}

int ckpt__saver_cache_init(ckpt_saver *s, const char *pattern, int redundancy, const char *group,
                           const char *identity, const char *persistent)
{
    int rc = CKPT_OK, local = CKPT_OK;
    ckpt__saver_cache_free(s);
    if (s->node_comm == MPI_COMM_NULL && (rc = ckpt__save_node_init(s)) != CKPT_OK)
        return rc;
    if (s->nnodes > 1 && (rc = ckpt_mpi_agree(s->comm, ckpt__save_node_leaders(s))) != CKPT_OK)
        return rc;
    if (s->layout == CKPT_LAYOUT_SHARED)
        local = ckpt__error(CKPT_EINVAL, "the cache level needs the per-rank or per-node layout "
                                         "(the shared layout writes one file for every node)");
    else if (redundancy != CKPT__REDUNDANCY_NONE && redundancy != CKPT__REDUNDANCY_PARTNER)
        local = ckpt__error(CKPT_EINVAL, "unknown redundancy %d", redundancy);
    else if (s->ranks_per_node > 0 && s->nnodes > 1 && pattern && !strstr(pattern, "%n"))
        local = ckpt__error(CKPT_EINVAL,
                            "cache directory '%s': nodes are simulated (MPICKPT_RANKS_PER_NODE), "
                            "so it needs %%n to give each node its own directory",
                            pattern);
    if (local == CKPT_OK && persistent)
        local = ckpt__path(s->cache.persistent, sizeof s->cache.persistent, "%s", persistent);
    if (local == CKPT_OK)
        local = ckpt__path(s->cache.pattern, sizeof s->cache.pattern, "%s", pattern);
    if (local == CKPT_OK)
        local = ckpt__path(s->cache.identity, sizeof s->cache.identity, "%s", identity);
    if (local == CKPT_OK)
        local = open_cache_dir(s, pattern, identity, persistent, 1);
    struct statfs sf;
    if (local == CKPT_OK && fstatfs(s->cache.fd, &sf) == 0)
        s->cache.tmpfs = sf.f_type == TMPFS_MAGIC;
    int *node_of = malloc((size_t)s->size * sizeof *node_of);
    int *groups = malloc((size_t)s->nnodes * sizeof *groups);
    if ((!node_of || !groups) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK)
        goto done;
    if (MPI_Allgather(&s->node, 1, MPI_INT, node_of, 1, MPI_INT, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Allgather of the ranks' nodes failed");
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK ||
        (rc = node_groups(s, group, node_of, groups)) != CKPT_OK)
        goto done;
    s->cache.partner = -1;
    if (redundancy == CKPT__REDUNDANCY_PARTNER)
        local = partners(s, node_of, groups);
    if ((rc = ckpt_mpi_agree(s->comm, local)) == CKPT_OK) {
        s->cache.redundancy = redundancy;
        s->cache.on = 1;
        s->cache.node_of = node_of;
        node_of = NULL;
    }
done:
    free(node_of);
    free(groups);
    if (rc != CKPT_OK)
        ckpt__saver_cache_free(s);
    return rc;
}

void ckpt__saver_cache_free(ckpt_saver *s)
{
    if (s->cache.fd >= 0)
        ckpt__error_alias(s->cache.at, NULL);
    ckpt__dirlock_release(s->cache.lock);
    ckpt__close(s->cache.fd);
    free(s->cache.rbuf);
    free(s->cache.from);
    free(s->cache.node_of);
    free(s->cache.pnode);
    memset(&s->cache, 0, sizeof s->cache);
    s->cache.partner = -1;
    s->cache.fd = -1;
}

/* ---- the manager's view ------------------------------------------------------------------ */

int ckpt__cache_dirfd(const ckpt_saver *s, int *fd)
{
    *fd = s->cache.on ? fcntl(s->cache.fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (*fd < 0)
        return s->cache.on ? ckpt__errno(errno, "dup", s->cache.dir)
                           : ckpt__error(CKPT_EINVAL, "no cache level");
    return CKPT_OK;
}

/* The node leader: the lock of the node's cache directory, held open as s->cache.fd. Local. */
static int lock_cache_dir(ckpt_saver *s)
{
    if (s->node_rank != 0)
        return CKPT_OK;
    ckpt__dirlock *l = NULL;
    int rc = ckpt__dirlock_take(&l, s->cache.fd, s->cache.dir, s->cache.lock_wait);
    if (rc == CKPT_OK) {
        ckpt__dirlock_release(s->cache.lock);
        s->cache.lock = l;
    } else if (rc == CKPT_EBUSY) { /* maybe this very job: say what that would mean */
        char m[1400];
        snprintf(m, sizeof m, "%s", ckpt_error_last()->message);
        rc = ckpt__error(CKPT_EBUSY,
                         "%s (node %d's cache; when the holder is another node of this job, the "
                         "cache directory is shared between nodes: give each node its own, e.g. "
                         "with %%n in the pattern)",
                         m, s->node);
    }
    return rc;
}

int ckpt__cache_lock(ckpt_saver *s, double wait_seconds)
{
    int local = CKPT_OK;
    if (!s->cache.on)
        local = ckpt__error(CKPT_EINVAL, "ckpt__cache_lock: no cache level");
    else {
        s->cache.lock_wait = wait_seconds;
        local = lock_cache_dir(s);
    }
    return ckpt_mpi_agree(s->comm, local);
}

int ckpt__cache_reopen(ckpt_saver *s)
{
    struct stat st;
    if (!s->cache.on || (fstat(s->cache.fd, &st) == 0 && st.st_nlink > 0))
        return CKPT_OK;
    ckpt__log(CKPT_LOG_INFO, "node %d: the cache directory %s was removed; making it again",
              s->node, s->cache.dir);
    int old = s->cache.fd;
    char old_at[sizeof s->cache.at];
    memcpy(old_at, s->cache.at, sizeof old_at);
    s->cache.fd = -1;
    int rc = open_cache_dir(s, s->cache.pattern, s->cache.identity,
                            s->cache.persistent[0] ? s->cache.persistent : NULL, 0);
    if (rc == CKPT_OK && s->cache.lock) /* the lock goes with the directory */
        rc = lock_cache_dir(s);
    if (rc != CKPT_OK) {
        if (s->cache.fd >= 0)
            ckpt__error_alias(s->cache.at, NULL);
        ckpt__close(s->cache.fd);
        s->cache.fd = old; /* still the one held: what uses it fails, naming it */
        memcpy(s->cache.at, old_at, sizeof old_at);
        return rc;
    }
    ckpt__error_alias(old_at, NULL);
    close(old);
    return CKPT_OK;
}

int ckpt__saver_has_cache(const ckpt_saver *s)
{
    return s && s->cache.on;
}

const char *ckpt__saver_cache_dir(const ckpt_saver *s)
{
    return s && s->cache.on ? s->cache.at : "";
}

const char *ckpt__saver_cache_shown(const ckpt_saver *s)
{
    return s && s->cache.on ? s->cache.dir : "";
}

/* The counter N of an entry named <stem>-<N> followed by '.' or "_temp", else -1. */
static int64_t entry_counter(const char *name, const char *stem)
{
    size_t n = strlen(stem);
    if (strncmp(name, stem, n) != 0 || name[n] != '-')
        return -1;
    const char *p = name + n + 1;
    int64_t v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 18; p++, digits++)
        v = v * 10 + (*p - '0');
    if (!digits || (*p != '.' && strcmp(p, "_temp") != 0))
        return -1;
    return v;
}

static int kept(int64_t v, const int64_t *keep, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (keep[i] == v)
            return 1;
    return 0;
}

int ckpt__cache_gc(ckpt_saver *s)
{
    if (!s->cache.on || s->node_rank != 0)
        return CKPT_OK;
    size_t removed = 0;
    int rc = ckpt__gc(s->cache.at, 0, NULL, NULL, &removed, 0);
    if (rc == CKPT_OK && removed)
        ckpt__log(CKPT_LOG_INFO, "node %d: removed %zu leftover(s) of unfinished saves in %s",
                  s->node, removed, s->cache.dir);
    return rc;
}

int ckpt__cache_sweep(ckpt_saver *s, MPI_Comm comm, const char *stem, const int64_t *keep,
                      size_t n)
{
    int local = CKPT_OK, removed = 0;
    if (s->cache.on && s->node_rank == 0) {
        int dfd = -1;
        DIR *d = NULL;
        local = ckpt__cache_dirfd(s, &dfd);
        if (local == CKPT_OK)
            local = ckpt__listing_or_close(&d, dfd, s->cache.dir);
        /* pass 0: the indexes (a checkpoint is gone once its index is), pass 1: the rest */
        for (int pass = 0; local == CKPT_OK && pass < 2; pass++) {
            rewinddir(d);
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                int64_t v = entry_counter(de->d_name, stem);
                if (v < 0 || kept(v, keep, n))
                    continue;
                int is_index = ckpt__ends_with(de->d_name, ".index");
                if (pass == 0 && !is_index)
                    continue;
                if (ckpt__ends_with(de->d_name, "_temp"))
                    ckpt__rmtree_at(dirfd(d), de->d_name, s->cache.dir);
                else if (unlinkat(dirfd(d), de->d_name, 0) != 0 && errno != ENOENT)
                    local = ckpt__errno(errno, "unlink", de->d_name);
                removed++;
            }
            if (pass == 0 && removed)
                (void)fsync(dirfd(d));
        }
        if (d)
            closedir(d);
        if (removed)
            ckpt__log(CKPT_LOG_INFO, "node %d: removed %d entries of checkpoints the cache no "
                                     "longer keeps from %s",
                      s->node, removed, s->cache.dir);
    }
    return ckpt_mpi_agree(comm, local);
}
