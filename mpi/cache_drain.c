/*
 * The drain of a checkpoint from the cache level to the persistent directory (docs/levels.md),
 * with the save protocol's commit: the chief makes its in-flight directory <name>.<id>_temp there
 * (a vote), every owner copies the data files it owns from its node's cache directory into its
 * own in-flight directory (per-rank: rank r its <name>.data-r-of-N in workertemp_<r>.<id>;
 * per-node: the node's leader its node's file) and fsyncs them, then moves them into place with
 * a rename that never replaces (a vote); the chief fsyncs the directory and writes the cache's
 * index, byte for byte, as the persistent index, never replacing one (the commit point; a vote).
 * A final name taken by anything is CKPT_EEXISTS naming it, left as it is. A failure before the
 * commit removes every file this drain moved; in-flight files are removed in every case. The
 * index is the same bytes as the cache's, so the two copies are the same checkpoint. No rank
 * opens another's in-flight directory, so each draws its own id (no broadcast). Collective over
 * `comm` (the caller's thread's communicator).
 * A checkpoint of another shape (written by another count of ranks or nodes, or in another
 * layout: a job restarted on another shape over the same caches) is not drained: each owner
 * copies the file named for it in this job, which is not one of the writer's. The chief tells
 * from its node's copy of the index before anything is made, and the first vote carries that to
 * every rank (no collective of its own); an index it cannot read leaves the drain to fail on it
 * as before.
 * This is the node cache target's `drain` (target.h: ckpt__target_cache).
 */
#include "saver_internal.h"

#include "commit.h"
#include "fsutil.h"
#include "index.h"
#include "paths.h"
#include "mpickpt/collective.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copies entry `name` of from_fd into a new entry of to_fd (O_EXCL), fsynced. */
static int copy_file(int from_fd, const char *from_shown, int to_fd, const char *to_shown,
                     const char *name)
{
    int in = -1, out = -1;
    uint64_t size = 0;
    int rc = ckpt__file_open(&in, &size, from_fd, name, O_RDONLY, from_shown);
    if (rc == CKPT_OK)
        rc = ckpt__file_create(&out, to_fd, name, O_WRONLY, to_shown);
    size_t cap = (size_t)1 << 20;
    uint8_t *buf = rc == CKPT_OK ? malloc(cap) : NULL;
    if (rc == CKPT_OK && !buf)
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    for (uint64_t off = 0; rc == CKPT_OK && off < size;) {
        ssize_t n = pread(in, buf, cap, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = ckpt__errno(n < 0 ? errno : EIO, "read for the drain", name);
            break;
        }
        rc = ckpt__pwrite_full(out, buf, (size_t)n, off, "write for the drain", name);
        off += (uint64_t)n;
    }
    free(buf);
    if (rc == CKPT_OK)
        rc = ckpt__fsync_fd(out, name);
    ckpt__close(in);
    ckpt__close(out);
    return rc;
}

/* The chief, before anything is made: whether checkpoint `base`, by the index in its node's cache,
 * is of another shape than this job's. v[0] 1 when it is, v[1] the count of its data files, v[2]
 * 1 when per-node; all 0 when it is this job's or its index cannot be read (the drain fails on it
 * then, as it would have). Local. */
static void writer_shape(ckpt_saver *s, int cachefd, const char *index_name, const char *base,
                         double v[3])
{
    v[0] = v[1] = v[2] = 0;
    ckpt__saved_error keep = ckpt__error_save();
    uint8_t *buf = NULL;
    const uint8_t *payload = NULL;
    size_t plen = 0;
    Mpickpt__Index *idx = NULL;
    if (ckpt__index_read_at(&buf, &payload, &plen, cachefd, index_name, s->cache.dir) ==
            CKPT_OK &&
        ckpt__index_parse(&idx, payload, plen, index_name, NULL, 0) == CKPT_OK && idx->header) {
        int per_node = idx->header->layout == MPICKPT__LAYOUT__LAYOUT_PER_NODE;
        int job_per_node = s->layout == CKPT_LAYOUT_PER_NODE;
        int job_of = job_per_node ? s->nnodes : s->size, of = 0, other = per_node != job_per_node;
        for (size_t f = 0; f < idx->n_files; f++) {
            int k = ckpt__data_name_number(idx->files[f]->name, base, &of);
            other |= k < 0 || of != job_of;
        }
        if (other) {
            v[0] = 1;
            v[1] = per_node ? (double)of : (double)idx->header->world_size;
            v[2] = per_node;
        }
    }
    if (idx)
        mpickpt__index__free_unpacked(idx, NULL);
    free(buf);
    ckpt__error_restore(&keep); /* an index not read: the drain says so at its commit */
}

int ckpt__cache_drain(ckpt_saver *s, MPI_Comm comm, const char *name, const char *dir,
                      ckpt__drain_shape *shape)
{
    int local = CKPT_OK, rc;
    ckpt__save_names n;
    int dirfd = -1, workfd = -1, tempfd = -1, cachefd = -1;
    char prefix[4400];
    int per_node = s->layout == CKPT_LAYOUT_PER_NODE;
    if (shape)
        memset(shape, 0, sizeof *shape);
    if (!s->cache.on)
        local = ckpt__error(CKPT_EINVAL, "a drain without a cache level");
    if (local == CKPT_OK)
        local = ckpt__path(prefix, sizeof prefix, "%s/%s", dir, name);
    if (local == CKPT_OK)
        local = ckpt__save_names_init(&n, prefix, s->rank, s->size, 0, ckpt__random_u64());
    if (local == CKPT_OK && per_node)
        local = ckpt__save_names_node(&n, s->node, s->nnodes, s->node_leaders[s->node]);
    if (local == CKPT_OK)
        local = ckpt__ckptdir_open(&dirfd, &workfd, n.dir, 1);
    if (local == CKPT_OK)
        local = ckpt__cache_dirfd(s, &cachefd);
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "drain");
    /* 0. the chief: a checkpoint of another shape is not drained (nothing made) */
    double v[3] = { 0, 0, 0 };
    if (local == CKPT_OK && s->rank == 0)
        writer_shape(s, cachefd, n.index_name, name, v);
    /* 1. the chief's in-flight directory, then everybody's */
    if (local == CKPT_OK && s->rank == 0 && !v[0])
        local = ckpt__temp_fresh(&n, dirfd, &tempfd, 0);
    if ((rc = ckpt__mpi_vote(comm, local, v, 3)) != CKPT_OK)
        goto out;
    if (v[0]) {
        if (shape) {
            shape->other = 1;
            shape->of = (int)v[1];
            shape->per_node = (int)v[2];
            shape->job_of = per_node ? s->nnodes : s->size;
            shape->job_per_node = per_node;
        }
        goto out;
    }
    int owner = !per_node || s->node_rank == 0;
    if (owner && s->rank != 0)
        local = ckpt__temp_open(&n, s->rank, dirfd, workfd, &tempfd);
    /* 2. the owner's file, copied and moved into place */
    ckpt__commit_file f;
    memset(&f, 0, sizeof f);
    size_t moved = 0;
    if (owner && local == CKPT_OK)
        local = copy_file(cachefd, s->cache.dir, tempfd, n.my_temp, n.data_name);
    if (owner && local == CKPT_OK) {
        f.from_fd = tempfd;
        f.from_shown = n.my_temp;
        f.from_name = f.name = n.data_name;
        local = ckpt__commit_move(dirfd, n.dir, &f, 1, &moved, 0);
    }
    if ((rc = ckpt__mpi_vote(comm, local, NULL, 0)) == CKPT_OK) {
        /* 3. the commit point: the cache's index, the same bytes, in the persistent directory */
        if (s->rank == 0) {
            uint8_t *buf = NULL;
            size_t len = 0;
            local = ckpt__read_file_at(&buf, &len, cachefd, n.index_name, (size_t)1 << 34,
                                       s->cache.dir);
            const uint8_t *payload;
            size_t plen;
            if (local == CKPT_OK) /* a damaged copy is refused, not propagated */
                local = ckpt__container_open(&payload, &plen, buf, len, CKPT__MAGIC_INDEX,
                                             n.index_name);
            if (local == CKPT_OK)
                local = ckpt__fsync_fd(dirfd, n.dir);
            int renamed = 0;
            if (local == CKPT_OK)
                local = ckpt__write_file_new_at(dirfd, n.index_name, buf, len, n.dir,
                                                &renamed);
            if (local != CKPT_OK && renamed)
                unlinkat(dirfd, n.index_name, 0);
            free(buf);
        }
        rc = ckpt__mpi_vote(comm, local, NULL, 0);
    }
    if (rc != CKPT_OK)
        ckpt__commit_unmove(dirfd, &f, moved);
out:
    if (dirfd >= 0)
        ckpt__temp_cleanup(&n, s->rank, dirfd, workfd, tempfd);
    ckpt__close(cachefd);
    ckpt__close(tempfd);
    ckpt__close(workfd);
    ckpt__close(dirfd);
    return rc;
}
