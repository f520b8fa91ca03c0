/*
 * The cache level's rebuild (docs/levels.md): before a restore from the cache, checkpoint `name`
 * is made whole again on every node — each data file on its home node (the node of the ranks that
 * wrote it) and, with partner redundancy, on that node's partner, and the index on every node —
 * by copying what a lost or wiped node lacks from a node that still holds it.
 *
 * The node leaders do the work, on their own communicator; the other ranks only join the
 * agreement at the end. The lowest node that holds the index broadcasts it; every leader parses
 * and validates it (a damaged copy is an error, not a guess), writes it when its node lacks it,
 * and says which data files its node holds with the recorded size (an allgather of one byte per
 * file). From that, every leader computes the same plan: for each file, each target (home,
 * partner) that lacks it is sent it by the first node that holds it (home first, then partner,
 * then any). A file that no node holds is lost: the rebuild fails naming it, and the manager
 * falls back to an older checkpoint. Every leader posts all its sends (nonblocking, from a
 * read-only mapping) before it receives, so transfers in any pattern cannot deadlock; a received
 * file is written under a temp name, fsynced and renamed, and it replaces nothing (its name was
 * missing on that node).
 */
#include "saver_internal.h"

#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TAG_RB 0x6c62

/* The node that wrote data file `name` of checkpoint `base` (the writer's shape must be this
 * job's), or -1. */
static int home_node(const ckpt_saver *s, const char *name, const char *base, int per_node)
{
    size_t n = strlen(base);
    int a = -1, b = -1, used = 0;
    if (strncmp(name, base, n) != 0 ||
        sscanf(name + n, ".data-%5d-of-%5d%n", &a, &b, &used) != 2 || name[n + (size_t)used])
        return -1;
    if (per_node)
        return b == s->nnodes && a >= 0 && a < b ? a : -1;
    return b == s->size && a >= 0 && a < b ? s->cache.node_of[a] : -1;
}

/* The leaders' part (s->node_rank == 0). */
static int rebuild_leader(ckpt_saver *s, const char *name, int *rebuilt)
{
    MPI_Comm lc = s->leader_comm;
    int me = s->node, n = s->nnodes, local = CKPT_OK, rc = CKPT_OK, dirfd = -1;
    char iname[320];
    local = ckpt__path(iname, sizeof iname, "%s.index", name);
    if (local == CKPT_OK) /* a node that lost everything lost its directory too */
        local = ckpt__mkdir_p(s->cache.dir, 0700);
    if (local == CKPT_OK)
        local = ckpt__dir_open(&dirfd, s->cache.dir);
    int have = local == CKPT_OK && ckpt__exists_at(dirfd, iname);
    /* 1. the index, from the lowest node that has it */
    int mine = have ? me : n, src = n;
    if (MPI_Allreduce(&mine, &src, 1, MPI_INT, MPI_MIN, lc) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Allreduce of the index's holder failed");
    if (src == n) {
        ckpt__close(dirfd);
        return ckpt__error(CKPT_ENOTFOUND, "no node's cache holds %s", iname);
    }
    uint8_t *file = NULL;
    const uint8_t *payload = NULL;
    size_t plen = 0, flen = 0;
    if (me == src && local == CKPT_OK &&
        (local = ckpt__read_file_at(&file, &flen, dirfd, iname, (size_t)1 << 34, s->cache.dir)) ==
            CKPT_OK)
        local = ckpt__container_open(&payload, &plen, file, flen, CKPT__MAGIC_INDEX, iname);
    int64_t head[2] = { local, (int64_t)flen };
    if (MPI_Bcast(head, 2, MPI_INT64_T, src, lc) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index's size failed");
    if (rc == CKPT_OK && head[0] != CKPT_OK) { /* the source's own error, for every leader */
        rc = me == src ? local : ckpt__error((int)head[0], "node %d's %s is damaged", src, iname);
        free(file);
        ckpt__close(dirfd);
        return rc;
    }
    if (rc == CKPT_OK && me != src && !(file = malloc(head[1] ? (size_t)head[1] : 1)))
        return ckpt__error(CKPT_ENOMEM, "rank %d: no room for the index", s->rank); /* MPI's */
    if (rc == CKPT_OK)
        rc = ckpt__bcast_bytes(lc, src, file, (uint64_t)head[1], s->chunk);
    flen = (size_t)head[1];
    Mpickpt__Index *idx = NULL;
    if (rc == CKPT_OK && local == CKPT_OK && me != src)
        local = ckpt__container_open(&payload, &plen, file, flen, CKPT__MAGIC_INDEX, iname);
    if (rc == CKPT_OK && local == CKPT_OK)
        local = ckpt__index_parse(&idx, payload, plen, iname, NULL, 1);
    if (rc == CKPT_OK && local == CKPT_OK && !have) {
        local = ckpt__write_file_atomic_at(dirfd, iname, file, flen, s->cache.dir, NULL);
        *rebuilt += local == CKPT_OK;
    }
    free(file);
    if (rc != CKPT_OK) {
        if (idx)
            mpickpt__index__free_unpacked(idx, NULL);
        ckpt__close(dirfd);
        return rc;
    }
    /* 2. who holds what (every leader parsed the same index, or failed to) */
    int ok = local == CKPT_OK, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, lc) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the leaders' statuses failed");
    if (rc != CKPT_OK || !all_ok) {
        if (idx)
            mpickpt__index__free_unpacked(idx, NULL);
        ckpt__close(dirfd);
        return rc != CKPT_OK ? rc : local; /* a leader that failed reports it */
    }
    size_t nf = idx->n_files;
    int per_node = idx->header->layout == MPICKPT__LAYOUT__LAYOUT_PER_NODE;
    uint8_t *held = calloc(nf ? nf : 1, 1), *all = malloc((nf ? nf : 1) * (size_t)n);
    int *home = malloc((nf ? nf : 1) * sizeof *home);
    if (!held || !all || !home)
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the rebuild", s->rank);
    for (size_t f = 0; f < nf; f++) {
        uint64_t size = 0;
        held[f] = ckpt__stat_regular(&size, dirfd, idx->files[f]->name, s->cache.dir) == CKPT_OK &&
                  size == idx->files[f]->bytes;
        home[f] = home_node(s, idx->files[f]->name, name, per_node);
    }
    ckpt_error_clear(); /* a missing file is what this looks for */
    if (MPI_Allgather(held, (int)(nf ? nf : 1), MPI_BYTE, all, (int)(nf ? nf : 1), MPI_BYTE, lc) !=
        MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Allgather of the holdings failed");
    /* 3. the plan, the same on every leader; sends first, then receives */
    size_t nmaps = 0;
    void **maps = calloc(nf ? nf : 1, sizeof *maps);
    uint64_t *mlen = calloc(nf ? nf : 1, sizeof *mlen);
    size_t nreq = 0, qcap = 64;
    MPI_Request *req = malloc(qcap * sizeof *req);
    uint64_t chunk = s->chunk < ((uint64_t)64 << 20) ? s->chunk : ((uint64_t)64 << 20);
    if (!maps || !mlen || !req)
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the rebuild", s->rank);
    for (int pass = 0; pass < 2 && rc == CKPT_OK; pass++) { /* 0: sends, 1: receives */
        uint8_t *buf = pass ? malloc((size_t)chunk) : NULL;
        if (pass && !buf)
            return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the rebuild", s->rank);
        for (size_t f = 0; f < nf && rc == CKPT_OK; f++) {
            const uint8_t *h = all + f; /* h[k * nf]: node k holds file f */
            int hm = home[f];
            if (hm < 0) {
                if (local == CKPT_OK)
                    local = ckpt__error(CKPT_EINVAL,
                                        "%s was not written by a job of this shape: the cache "
                                        "rebuilds on the writer's shape only",
                                        idx->files[f]->name);
                continue;
            }
            int targets[2] = { hm, s->cache.pnode ? s->cache.pnode[hm] : -1 };
            int from = -1;
            if (h[(size_t)hm * nf])
                from = hm;
            else if (targets[1] >= 0 && h[(size_t)targets[1] * nf])
                from = targets[1];
            for (int k = 0; from < 0 && k < n; k++)
                if (h[(size_t)k * nf])
                    from = k;
            for (int t = 0; t < 2; t++) {
                int to = targets[t];
                if (to < 0 || h[(size_t)to * nf])
                    continue;
                if (from < 0) {
                    if (local == CKPT_OK)
                        local = ckpt__error(CKPT_ENOTFOUND,
                                            "%s is lost: no node's cache holds it (its node %d%s)",
                                            idx->files[f]->name, hm,
                                            s->cache.pnode ? " and its partner both lost it" : "");
                    break;
                }
                uint64_t bytes = idx->files[f]->bytes;
                if (pass == 0 && me == from) {
                    if (!maps[f] && bytes > 0) {
                        int fd = -1;
                        int st = ckpt__file_open(&fd, NULL, dirfd, idx->files[f]->name, O_RDONLY,
                                                 s->cache.dir);
                        void *m = st == CKPT_OK ? mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED,
                                                       fd, 0)
                                                : MAP_FAILED;
                        ckpt__close(fd);
                        if (m == MAP_FAILED) /* a holder that cannot read: MPI's to fail */
                            return ckpt__error(CKPT_EIO, "rank %d: cannot map %s for the rebuild",
                                               s->rank, idx->files[f]->name);
                        maps[f] = m;
                        mlen[f] = bytes;
                        nmaps++;
                    }
                    for (uint64_t off = 0; off < bytes; off += chunk) {
                        uint64_t c = bytes - off < chunk ? bytes - off : chunk;
                        if (nreq == qcap) {
                            MPI_Request *g = realloc(req, 2 * qcap * sizeof *g);
                            if (!g)
                                return ckpt__error(CKPT_ENOMEM, "out of memory");
                            req = g;
                            qcap *= 2;
                        }
                        if (MPI_Isend((uint8_t *)maps[f] + off, (int)c, MPI_BYTE, to, TAG_RB, lc,
                                      &req[nreq++]) != MPI_SUCCESS)
                            rc = ckpt__error(CKPT_EMPI, "MPI_Isend for the rebuild failed");
                    }
                } else if (pass == 1 && me == to) {
                    rc = ckpt__cache_recv_file(s, lc, from, TAG_RB, dirfd, idx->files[f]->name,
                                               bytes, buf, chunk, &local, "rebuilt file");
                    *rebuilt += local == CKPT_OK;
                }
            }
        }
        free(buf);
    }
    if (nreq && MPI_Waitall((int)nreq, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the rebuild failed");
    if (local == CKPT_OK && *rebuilt)
        local = ckpt__fsync_fd(dirfd, s->cache.dir);
    for (size_t f = 0; f < nf; f++)
        if (maps[f])
            munmap(maps[f], (size_t)mlen[f]);
    (void)nmaps;
    free(maps);
    free(mlen);
    free(req);
    free(held);
    free(all);
    free(home);
    mpickpt__index__free_unpacked(idx, NULL);
    ckpt__close(dirfd);
    return rc != CKPT_OK ? rc : local;
}

int ckpt__cache_rebuild(ckpt_saver *s, const char *name)
{
    int local = CKPT_OK, rebuilt = 0;
    if (!s->cache.on)
        local = ckpt__error(CKPT_EINVAL, "a rebuild of the cache level without a cache");
    else if (!ckpt__safe_filename(name))
        local = ckpt__error(CKPT_EINVAL, "checkpoint name '%s' is not a plain file name", name);
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK)
        return rc;
    if (s->nnodes > 1 && s->node_rank == 0)
        local = rebuild_leader(s, name, &rebuilt);
    if (rebuilt)
        ckpt__log(CKPT_LOG_INFO, "node %d: %d files of %s rebuilt in its cache %s", s->node,
                  rebuilt, name, s->cache.dir);
    return ckpt_mpi_agree(s->comm, local);
}
