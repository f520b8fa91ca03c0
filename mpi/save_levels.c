/*
 * The node cache as a storage target (target.h: ckpt__target_cache; docs/levels.md): every rank's
 * checkpoint directory is its node's cache directory (cache_dir.c holds it), each data file is
 * also written on the partner node before the pre-commit vote, and every node's leader holds a
 * copy of the index.
 *
 *   cache_place    the save's name, a plain file name, in this node's cache directory (made again
 *                  when the node's cache was wiped)
 *   cache_reserves no up-front reservation on tmpfs
 *   cache_copies   after the owners moved their files into place: partner_copy (each rank sends
 *                  the files it owns to its partner rank, nonblocking sends from a read-only
 *                  mapping, so a ring of partners cannot deadlock, and receives those of the ranks
 *                  it protects into its node's directory: temp name, fsync, a rename that never
 *                  replaces, a name taken is CKPT_EEXISTS), then index_copies (the chief's index,
 *                  stamped and packed, to the node leaders, which write it, never over an
 *                  existing index)
 *   cache_undo     a save that is not committed: the partner copies and the index copy this rank
 *                  placed are removed
 *   cache_commit   the directory commit (target_dir.c) of the index the copies hold
 * and, in other modules of the cache level: the restore's open_restore and fetch (restore_cache.c,
 * with the rebuild of cache_rebuild.c), the gc and the sweep (cache_dir.c), the drain to the
 * persistent directory (cache_drain.c).
 * None of these agrees: a failure stays in the failing rank's status and reaches every rank at the
 * save's pre-commit vote, and every rank takes part in every transfer whatever its status, so the
 * messages always match. ckpt__cache_recv_file is the rebuild's receive too (cache_rebuild.c).
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
#include <sys/mman.h>
#include <unistd.h>

#define TAG_CP_HEAD 0x6c68 /* a sender's {status, number of files}, to its partner */
#define TAG_CP_FILE 0x6c66 /* a file's size and name */
#define TAG_CP_DATA 0x6c64 /* its bytes, in chunks */
#define PARTNER_CHUNK ((uint64_t)4 << 20) /* a cache-resident buffer: received, then written */

typedef struct {
    int64_t size;
    char name[320];
} cp_file;

/* ---- partner copies ---------------------------------------------------------------------- */

/* ckpt__cache_recv_file, whose final rename replaces what stands under `name` (`replace`: the
 * rebuild, which fills in a name its node lacks) or never does (a partner copy: a name taken is
 * not this save's, CKPT_EEXISTS naming it). */
static int recv_into(ckpt_saver *s, MPI_Comm comm, int src, int tag, int dirfd, const char *name,
                     uint64_t bytes, uint8_t *buf, uint64_t chunk, int *local, const char *what,
                     int replace)
{
    char tmp[400];
    int fd = -1, rc = CKPT_OK;
    if (*local == CKPT_OK && (*local = ckpt__temp_name(tmp, sizeof tmp, name)) == CKPT_OK)
        *local = ckpt__file_create(&fd, dirfd, tmp, O_WRONLY, s->cache.dir);
    for (uint64_t off = 0; off < bytes && rc == CKPT_OK; off += chunk) {
        uint64_t n = bytes - off < chunk ? bytes - off : chunk;
        if (MPI_Recv(buf, (int)n, MPI_BYTE, src, tag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            rc = ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv of a %s (%s) from rank %d failed",
                             s->rank, what, name, src);
        if (rc == CKPT_OK && *local == CKPT_OK)
            *local = ckpt__pwrite_full(fd, buf, (size_t)n, off, what, name);
    }
    if (*local == CKPT_OK && rc == CKPT_OK)
        *local = ckpt__fsync_fd(fd, name);
    ckpt__close(fd);
    /* only a file received whole takes its name */
    if (*local == CKPT_OK && rc == CKPT_OK &&
        (replace ? renameat(dirfd, tmp, dirfd, name) : ckpt__rename_noreplace(dirfd, tmp, dirfd,
                                                                               name)) != 0) {
        int err = errno; /* before snprintf, which may change it */
        char shown[4600];
        snprintf(shown, sizeof shown, "%s/%s", s->cache.dir, name);
        *local = err == EEXIST ? ckpt__name_taken(dirfd, name, shown)
                               : ckpt__errno(err, what, name);
    }
    if ((*local != CKPT_OK || rc != CKPT_OK) && fd >= 0)
        unlinkat(dirfd, tmp, 0);
    return rc;
}

int ckpt__cache_recv_file(ckpt_saver *s, MPI_Comm comm, int src, int tag, int dirfd,
                          const char *name, uint64_t bytes, uint8_t *buf, uint64_t chunk,
                          int *local, const char *what)
{
    return recv_into(s, comm, src, tag, dirfd, name, bytes, buf, chunk, local, what, 1);
}

/* A partner copy: its name checked (a data file of this checkpoint), then received (above);
 * recorded in placed[] once in place. */
static int recv_file(ckpt_saver *s, save_ctx *c, int src, const cp_file *h, uint8_t *buf,
                     uint64_t chunk, int *local, char **placed, size_t *nplaced)
{
    if (*local == CKPT_OK) {
        /* the one name the sender may send: its own data file of this checkpoint (per rank:
         * number `src` of the ranks; per node: its node's of the nodes) — never another file of
         * this node's, which the copy would replace */
        char want[320];
        int per_node = s->layout == CKPT_LAYOUT_PER_NODE;
        int st = ckpt__path(want, sizeof want, "%s.data-%05d-of-%05d", c->n.base,
                            per_node ? s->cache.node_of[src] : src, per_node ? s->nnodes : s->size);
        if (st != CKPT_OK || strcmp(h->name, want) != 0 || h->size < 0)
            *local = ckpt__error(CKPT_ECORRUPT,
                                 "rank %d: rank %d sent a partner copy named '%s' (%lld bytes), "
                                 "not its data file of %s (%s)",
                                 s->rank, src, h->name, (long long)h->size, c->n.base, want);
    }
    int rc = recv_into(s, c->comm, src, TAG_CP_DATA, c->dirfd, h->name,
                       (uint64_t)(h->size > 0 ? h->size : 0), buf, chunk, local, "partner copy", 0);
    if (*local == CKPT_OK) {
        if (!(placed[*nplaced] = strdup(h->name)))
            *local = ckpt__error(CKPT_ENOMEM, "out of memory");
        else
            (*nplaced)++;
    }
    return rc;
}

/* The partner copies of the ranks this rank protects, received into its node's directory;
 * placed[] (grown) lists those in place. *local: this rank's status (while not CKPT_OK the bytes
 * are received and dropped); an MPI failure is returned. */
static int recv_copies(ckpt_saver *s, save_ctx *c, uint64_t chunk, int *local, char ***placed,
                       size_t *nplaced)
{
    int rc = CKPT_OK;
    size_t cap = 0;
    /* the receive buffer, kept across saves (its pages are faulted in once) */
    if (s->cache.nfrom > 0 && !s->cache.rbuf)
        s->cache.rbuf = malloc(PARTNER_CHUNK);
    uint8_t *buf = s->cache.rbuf;
    if (!buf && s->cache.nfrom > 0) { /* still receive what the senders send, and drop it */
        static uint8_t sink[PARTNER_CHUNK];
        buf = sink;
        if (*local == CKPT_OK)
            *local = ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    for (int k = 0; k < s->cache.nfrom && rc == CKPT_OK; k++) {
        int src = s->cache.from[k];
        int64_t h[2];
        if (MPI_Recv(h, 2, MPI_INT64_T, src, TAG_CP_HEAD, c->comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS) {
            rc = ckpt__error(CKPT_EMPI, "MPI_Recv from rank %d failed", src);
            break;
        }
        if (h[1] < 0 || h[1] > 1 << 20) {
            rc = ckpt__error(CKPT_EMPI, "rank %d announced %lld partner files", src,
                             (long long)h[1]);
            break;
        }
        char **grown = realloc(*placed, (cap + (size_t)h[1] + 1) * sizeof *grown);
        if (grown) {
            *placed = grown;
            cap += (size_t)h[1];
        } else if (*local == CKPT_OK) { /* the files are still received (and dropped) */
            *local = ckpt__error(CKPT_ENOMEM, "out of memory");
        }
        for (int64_t i = 0; i < h[1] && rc == CKPT_OK; i++) {
            cp_file fh;
            if (MPI_Recv(&fh, (int)sizeof fh, MPI_BYTE, src, TAG_CP_FILE, c->comm,
                         MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                rc = ckpt__error(CKPT_EMPI, "MPI_Recv from rank %d failed", src);
                break;
            }
            fh.name[sizeof fh.name - 1] = '\0';
            rc = recv_file(s, c, src, &fh, buf, chunk, local, *placed, nplaced);
        }
    }
    return rc;
}

static int partner_copy(ckpt_saver *s, save_ctx *c, int local, char ***placed, size_t *nplaced)
{
    *placed = NULL;
    *nplaced = 0;
    if (s->cache.partner < 0)
        return local;
    uint64_t chunk = s->chunk < PARTNER_CHUNK ? s->chunk : PARTNER_CHUNK;
    size_t nf = local == CKPT_OK ? c->rec.nfiles : 0, nmapped = 0;
    cp_file *hdrs = calloc(nf ? nf : 1, sizeof *hdrs);
    void **maps = calloc(nf ? nf : 1, sizeof *maps);
    size_t nreq = 1;
    if ((!hdrs || !maps) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    /* this rank's files, mapped read-only (from their final place: they moved already) */
    for (size_t i = 0; i < nf && local == CKPT_OK; i++) {
        int fd;
        uint64_t size;
        snprintf(hdrs[i].name, sizeof hdrs[i].name, "%s", c->rec.files[i].name);
        if ((local = ckpt__file_open(&fd, &size, c->dirfd, hdrs[i].name, O_RDONLY,
                                     s->cache.dir)) != CKPT_OK)
            break;
        hdrs[i].size = (int64_t)size;
        nmapped = i + 1;
        if (size > 0) {
            maps[i] = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
            if (maps[i] == MAP_FAILED) {
                maps[i] = NULL;
                local = ckpt__errno(errno, "mmap", hdrs[i].name);
            }
        }
        close(fd);
        nreq += 1 + (size_t)((size + chunk - 1) / chunk);
    }
    if (local != CKPT_OK)
        nf = 0, nreq = 1;
    MPI_Request *req = malloc(nreq * sizeof *req);
    int64_t head[2] = { local, (int64_t)nf };
    if (!req) { /* still tell the partner, blocking: it receives before it waits on its own */
        if (local == CKPT_OK)
            local = head[0] = ckpt__error(CKPT_ENOMEM, "out of memory");
        head[1] = 0;
        nf = 0;
    }
    int rc = CKPT_OK;
    size_t q = 0;
    if (req) {
        if (MPI_Isend(head, 2, MPI_INT64_T, s->cache.partner, TAG_CP_HEAD, c->comm, &req[q++]) !=
            MPI_SUCCESS)
            rc = ckpt__error(CKPT_EMPI, "MPI_Isend to the partner failed");
        for (size_t i = 0; i < nf && rc == CKPT_OK; i++) {
            if (MPI_Isend(&hdrs[i], (int)sizeof hdrs[i], MPI_BYTE, s->cache.partner, TAG_CP_FILE,
                          c->comm, &req[q++]) != MPI_SUCCESS)
                rc = ckpt__error(CKPT_EMPI, "MPI_Isend to the partner failed");
            if (rc == CKPT_OK)
                rc = ckpt__isend_bytes(c->comm, s->cache.partner, TAG_CP_DATA, maps[i],
                                       (uint64_t)hdrs[i].size, chunk, req, &q, "to the partner");
        }
    } else if (MPI_Send(head, 2, MPI_INT64_T, s->cache.partner, TAG_CP_HEAD, c->comm) !=
               MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Send to the partner failed");
    }

    /* the files of the ranks this rank protects */
    if (rc == CKPT_OK)
        rc = recv_copies(s, c, chunk, &local, placed, nplaced);
    if (local == CKPT_OK && *nplaced > 0)
        local = ckpt__fsync_fd(c->dirfd, s->cache.dir);
    if (req && MPI_Waitall((int)q, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the partner copies failed");
    for (size_t i = 0; i < nmapped; i++)
        if (maps[i])
            munmap(maps[i], (size_t)hdrs[i].size);
    free(req);
    free(maps);
    free(hdrs);
    return rc != CKPT_OK ? rc : local;
}

/* ---- index copies ------------------------------------------------------------------------ */

static int index_copies(ckpt_saver *s, save_ctx *c, int local, const uint8_t *packed, size_t len,
                        int *wrote)
{
    *wrote = 0;
    if (s->node_rank != 0 || s->nnodes < 2)
        return local;
    MPI_Comm lc = c->comm == s->async_comm && s->leader_async_comm != MPI_COMM_NULL
                      ? s->leader_async_comm
                      : s->leader_comm;
    /* the chief without an index to send (a failure some rank reports) sends EPEER */
    int st = local != CKPT_OK ? local : packed ? CKPT_OK : CKPT_EPEER;
    int64_t head[2] = { s->rank == 0 ? st : CKPT_OK, s->rank == 0 ? (int64_t)len : 0 };
    if (MPI_Bcast(head, 2, MPI_INT64_T, 0, lc) != MPI_SUCCESS)
        return local != CKPT_OK ? local
                                : ckpt__error(CKPT_EMPI, "MPI_Bcast of the index's size failed");
    if (head[0] != CKPT_OK) /* the chief's failure: it reports it */
        return local;
    uint64_t total = (uint64_t)head[1], chunk = s->chunk;
    uint8_t *buf = (uint8_t *)packed, *sink = NULL;
    if (s->rank != 0 && !(buf = malloc(total ? (size_t)total : 1))) {
        /* no room for the index: take part in the broadcast chunk by chunk, write nothing */
        if (local == CKPT_OK)
            local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for the index (%llu bytes)",
                                s->rank, (unsigned long long)total);
        if (!(sink = malloc(total < chunk ? (size_t)total + 1 : (size_t)chunk)))
            return local; /* cannot even take part: the broadcast is MPI's to fail */
    }
    int rc = CKPT_OK;
    for (uint64_t off = 0; off < total; off += chunk) {
        uint64_t n = total - off < chunk ? total - off : chunk;
        if (MPI_Bcast(buf ? buf + off : sink, (int)n, MPI_BYTE, 0, lc) != MPI_SUCCESS &&
            rc == CKPT_OK)
            rc = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index failed");
    }
    if (s->rank != 0 && buf && local == CKPT_OK && rc == CKPT_OK) {
        int renamed = 0;
        /* never over an index this save did not write (lib/commit.c) */
        local = ckpt__write_file_new_at(c->dirfd, c->n.index_name, buf, (size_t)total,
                                        s->cache.dir, &renamed);
        *wrote = renamed;
    }
    if (s->rank != 0)
        free(buf);
    free(sink);
    return local != CKPT_OK ? local : rc;
}

/* ---- the target ---------------------------------------------------------------------------- */

static int cache_place(ckpt_saver *s, char *prefix, size_t size)
{
    char name[4096];
    int local;
    if (!s->cache.on)
        local = ckpt__error(CKPT_EINVAL, "a save to the cache level without a cache");
    else if (!ckpt__safe_filename(prefix))
        local = ckpt__error(CKPT_EINVAL, "checkpoint name '%s' is not a plain file name", prefix);
    else if ((local = ckpt__path(name, sizeof name, "%s", prefix)) == CKPT_OK &&
             (local = ckpt__cache_reopen(s)) == CKPT_OK) /* a wiped node's, made again */
        local = ckpt__path(prefix, size, "%s/%s", s->cache.at, name);
    return local;
}

/* A cache on tmpfs is not reserved: fallocate there zero-fills every page the save then writes
 * again (half the speed); a full tmpfs is met while writing, a failure like any. */
static int cache_reserves(const ckpt_saver *s)
{
    return !s->cache.tmpfs;
}

static int cache_copies(ckpt_saver *s, save_ctx *c, int local, Mpickpt__Index *idx,
                        ckpt__target_copies *x)
{
    memset(x, 0, sizeof *x);
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "partner");
    local = partner_copy(s, c, local, &x->placed, &x->nplaced);
    uint8_t *packed = NULL;
    size_t len = 0;
    if (idx && local == CKPT_OK) { /* the chief, which merged */
        idx->header->timestamp = ckpt__now_seconds(); /* its commit: the same bytes */
        local = ckpt__container_pack(&packed, &len, CKPT__MAGIC_INDEX, &idx->base);
    }
    local = index_copies(s, c, local, packed, len, &x->wrote_index);
    free(packed);
    return local;
}

static void cache_undo(save_ctx *c, const ckpt__target_copies *x)
{
    if (x->wrote_index)
        unlinkat(c->dirfd, c->n.index_name, 0);
    for (size_t i = 0; i < x->nplaced; i++)
        unlinkat(c->dirfd, x->placed[i], 0);
    if (x->wrote_index || x->nplaced)
        (void)fsync(c->dirfd);
}

/* The metrics of a save to the cache go to the persistent directory's, where `mpickpt stats`
 * reads them (the node's cache is no place for them: it is neither shared nor kept); none when
 * the cache level has no persistent directory (the benchmark). */
static int cache_metrics_open(const save_job *j, int *fd)
{
    const char *persistent = j->s->cache.persistent;
    int pfd = -1;
    *fd = -1;
    if (!persistent[0])
        return CKPT_OK;
    int rc = ckpt__ckptdir_open(&pfd, NULL, persistent, 0);
    if (rc == CKPT_OK)
        rc = ckpt__file_open_append(fd, pfd, "metrics.jsonl", persistent);
    ckpt__close(pfd);
    return rc;
}

const ckpt__target_ops ckpt__target_cache = {
    .what = " to the cache",
    .node_local = 1,
    .place = cache_place,
    .reserves = cache_reserves,
    .copies = cache_copies,
    .undo = cache_undo,
    .commit = ckpt__target_commit_index, /* stamped by cache_copies */
    .metrics_open = cache_metrics_open,
    .open_restore = ckpt__cache_restore_open, /* restore_cache.c, cache_rebuild.c */
    .fetch = ckpt__cache_fetch,               /* restore_cache.c */
    .fetch_done = ckpt__cache_fetch_done,
    .gc = ckpt__cache_gc,       /* cache_dir.c */
    .sweep = ckpt__cache_sweep, /* cache_dir.c */
    .drain = ckpt__cache_drain, /* cache_drain.c */
};
