/*
 * The cache level's restore (docs/levels.md): every rank reads its node's cache directory, and
 * the pieces of data files that another node holds are fetched over MPI first.
 *
 * A data file's holder follows from its name and the index's layout, for a job with the writer's
 * shape (checked): per-rank "<name>.data-R-of-N" is held by rank R's node, and rank R serves it;
 * per-node "<name>.data-K-of-M" by node K, whose leader serves it. Each rank asks each holder for
 * the whole pieces of its share of the index that lie in files its node lacks ({file number,
 * offset, length}, one all-to-all of counts and one of requests); holders pread them and send them
 * back (nonblocking both ways, chunked); each rank writes what it received into sparse files of
 * the same names in its own scratch directory (fetch_<rank> in its node's cache directory), which
 * its reader opens for files missing from the node's directory: the pieces' CRC-32C then checks
 * every fetched byte as it checks a local read. Every rank takes part whatever its status, so the
 * messages match: each rank allocates and reads everything first, then every pair agrees (one
 * all-to-all of statuses) whether its bytes travel; a rank that failed sends and receives
 * nothing, its requesters write nothing, and the caller's agreement right after carries the
 * failing rank's own message. Memory: a rank holds the bytes it fetches and the bytes it was
 * asked for at once (docs/levels.md).
 */
#include "saver_internal.h"

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

#define TAG_FETCH 0x6c72

/* Every rank can take part in the next exchange (`ok` here): CKPT_OK everywhere, else the same
 * failure everywhere. Collective. */
static int all_can(const ckpt_saver *s, int ok, const char *what)
{
    int all = 0;
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, s->comm) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Allreduce before %s failed", what);
    if (all)
        return CKPT_OK;
    return ok ? ckpt__error(CKPT_ENOMEM, "another rank is out of memory for %s", what)
              : ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for %s", s->rank, what);
}

/* One request: file number K (of the writer's `of`), the byte range. */
enum { RQ_FILE, RQ_OFF, RQ_LEN, RQ_N };

/* File `name` of checkpoint `base`: its number and the count it is "of"; -1 when not a data file
 * name of that checkpoint. */
static int file_number(const char *name, const char *base, int *of)
{
    size_t n = strlen(base);
    int a = -1, b = -1, used = 0;
    if (strncmp(name, base, n) != 0 ||
        sscanf(name + n, ".data-%5d-of-%5d%n", &a, &b, &used) != 2 || name[n + (size_t)used])
        return -1;
    *of = b;
    return a >= 0 && a < b ? a : -1;
}

/* The rank that serves file number k. */
static int holder(const ckpt_saver *s, int per_node, int k)
{
    return per_node ? s->node_leaders[k] : k;
}

int ckpt__cache_fetch(ckpt_saver *s, ckpt_reader *r, const char *base, int local, int *scratch_fd)
{
    *scratch_fd = -1;
    const Mpickpt__Index *idx = local == CKPT_OK ? ckpt__reader_index(r) : NULL;
    int per_node = idx && idx->header->layout == MPICKPT__LAYOUT__LAYOUT_PER_NODE;
    int size = s->size, rc = CKPT_OK;
    int dirfd = -1;
    int *scount = calloc((size_t)size, sizeof *scount);
    int *rcount = calloc((size_t)size, sizeof *rcount);
    int *sdispl = calloc((size_t)size, sizeof *sdispl);
    int *rdispl = calloc((size_t)size, sizeof *rdispl);
    int64_t *want = NULL, *asked = NULL;
    uint64_t *got_bytes = calloc((size_t)size, sizeof *got_bytes);
    uint64_t *give_bytes = calloc((size_t)size, sizeof *give_bytes);
    int *sendable = calloc((size_t)size * 2, sizeof *sendable);
    int *peer = calloc((size_t)size * 2, sizeof *peer);
    uint8_t **give = NULL, **got = NULL;
    MPI_Request *req = NULL;
    int64_t *sorted = NULL;
    int holder_failed = 0;
    if ((!scount || !rcount || !sdispl || !rdispl || !got_bytes || !give_bytes || !sendable ||
         !peer) &&
        local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        local = ckpt__cache_dirfd(s, &dirfd);

    /* 1. what this rank needs from other nodes: whole pieces of files its node lacks */
    size_t nwant = 0, cap = 0;
    for (size_t t = 0; idx && local == CKPT_OK && t < idx->n_tensors; t++) {
        const Mpickpt__Tensor *tn = idx->tensors[t];
        for (size_t p = 0; local == CKPT_OK && p < tn->n_pieces; p++) {
            const Mpickpt__Piece *pc = tn->pieces[p];
            if (ckpt__exists_at(dirfd, pc->file))
                continue;
            int of = 0, k = file_number(pc->file, base, &of);
            if (k < 0 || of != (per_node ? s->nnodes : s->size)) {
                local = ckpt__error(CKPT_EINVAL,
                                    "rank %d: %s is not on this node and was written by a job of "
                                    "another shape (%d %s; this one has %d): the cache restores "
                                    "on the writer's shape only",
                                    s->rank, pc->file, of, per_node ? "nodes" : "ranks",
                                    per_node ? s->nnodes : s->size);
                break;
            }
            if (!pc->file_offset && pc->bytes) {
                local = ckpt__error(CKPT_EINVAL, "rank %d: tensor '%s' in %s has no recorded "
                                                 "file offset to fetch",
                                    s->rank, tn->name, pc->file);
                break;
            }
            if (nwant == cap) {
                cap = cap ? 2 * cap : 64;
                int64_t *g = realloc(want, cap * RQ_N * sizeof *g);
                if (!g) {
                    local = ckpt__error(CKPT_ENOMEM, "out of memory");
                    break;
                }
                want = g;
            }
            int64_t *w = want + nwant * RQ_N;
            w[RQ_FILE] = k;
            w[RQ_OFF] = (int64_t)pc->file_offset;
            w[RQ_LEN] = (int64_t)pc->bytes;
            nwant++;
        }
    }
    if (local != CKPT_OK)
        nwant = 0;
    /* sorted by holder (a counting pass: requests go out grouped by destination) */
    sorted = malloc((nwant ? nwant : 1) * RQ_N * sizeof *sorted);
    if (!sorted && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory"), nwant = 0;
    for (size_t i = 0; scount && i < nwant; i++)
        scount[holder(s, per_node, (int)want[i * RQ_N + RQ_FILE])] += RQ_N;
    for (int d = 1; sdispl && d < size; d++)
        sdispl[d] = sdispl[d - 1] + scount[d - 1];
    int *fill = calloc((size_t)size, sizeof *fill);
    if (!fill && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory"), nwant = 0;
    for (size_t i = 0; fill && sorted && i < nwant; i++) {
        int d = holder(s, per_node, (int)want[i * RQ_N + RQ_FILE]);
        memcpy(sorted + sdispl[d] + fill[d], want + i * RQ_N, RQ_N * sizeof *want);
        fill[d] += RQ_N;
        got_bytes[d] += (uint64_t)want[i * RQ_N + RQ_LEN];
    }
    free(fill);

    /* 2. the requests, all to all (every rank takes part, with zero counts when failing). A rank
     * that cannot hold the counts or the requests cannot take part: every rank is told first. */
    int ok = scount && rcount && sdispl && rdispl && got_bytes && give_bytes && sendable && peer;
    if ((rc = all_can(s, ok, "the fetch's counts")) != CKPT_OK)
        goto out;
    if (MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoall of the fetch requests' counts failed");
    size_t nasked = 0;
    for (int d = 0; d < size; d++) {
        rdispl[d] = (int)nasked;
        nasked += (size_t)rcount[d];
    }
    asked = malloc((nasked ? nasked : 1) * sizeof *asked);
    if (rc == CKPT_OK && (rc = all_can(s, asked != NULL, "the fetch requests")) != CKPT_OK)
        goto out;
    if (rc == CKPT_OK && MPI_Alltoallv(sorted, scount, sdispl, MPI_INT64_T, asked, rcount, rdispl,
                                       MPI_INT64_T, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoallv of the fetch requests failed");
    if (rc != CKPT_OK)
        goto out;

    /* 3. everything this rank needs is allocated, and what it was asked is read, before anyone
     * posts a message: a rank that cannot send or receive a pair's bytes says so in the status
     * exchange below, and that pair exchanges nothing (no peer waits for a message never sent) */
    give = calloc((size_t)size, sizeof *give);
    got = calloc((size_t)size, sizeof *got);
    size_t nreq = 0;
    for (int d = 0; d < size; d++) {
        uint64_t total = 0;
        for (int i = rdispl[d]; i < rdispl[d] + rcount[d]; i += RQ_N)
            total += asked[i + RQ_LEN] > 0 ? (uint64_t)asked[i + RQ_LEN] : 0;
        give_bytes[d] = total;
        nreq += (size_t)((got_bytes[d] + s->chunk - 1) / s->chunk +
                         (give_bytes[d] + s->chunk - 1) / s->chunk);
    }
    req = malloc((nreq ? nreq : 1) * sizeof *req);
    if ((!give || !got || !req) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the fetch", s->rank);
    int injected = ckpt__fault(s->rank, "fetch"); /* as if the buffers below could not be had */
    if (injected != CKPT_OK && local == CKPT_OK)
        local = injected;
    for (int d = 0; give && got && local == CKPT_OK && d < size; d++) {
        if (got_bytes[d] && !(got[d] = malloc((size_t)got_bytes[d])))
            local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for %llu bytes fetched from rank %d",
                                s->rank, (unsigned long long)got_bytes[d], d);
        if (local == CKPT_OK && give_bytes[d] && !(give[d] = malloc((size_t)give_bytes[d])))
            local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for %llu bytes asked by rank %d",
                                s->rank, (unsigned long long)give_bytes[d], d);
    }
    for (int d = 0; give && local == CKPT_OK && d < size; d++) {
        uint64_t at = 0;
        for (int i = rdispl[d]; local == CKPT_OK && i < rdispl[d] + rcount[d]; i += RQ_N) {
            int64_t k = asked[i + RQ_FILE], off = asked[i + RQ_OFF], len = asked[i + RQ_LEN];
            char name[320];
            int fd = -1;
            uint64_t fsize = 0;
            int st = ckpt__path(name, sizeof name, "%s.data-%05lld-of-%05d", base, (long long)k,
                                per_node ? s->nnodes : s->size);
            if (st == CKPT_OK && dirfd >= 0 &&
                (st = ckpt__file_open(&fd, &fsize, dirfd, name, O_RDONLY, s->cache.dir)) !=
                    CKPT_OK)
                st = ckpt__error_wrap(st, "rank %d: cannot send rank %d its pieces of %s",
                                      s->rank, d, name);
            if (st == CKPT_OK && (off < 0 || len < 0 || (uint64_t)off > fsize ||
                                  (uint64_t)len > fsize - (uint64_t)off))
                st = ckpt__error(CKPT_ECORRUPT, "rank %d: rank %d asked for bytes %lld..%lld of "
                                                "%s, which has %llu",
                                 s->rank, d, (long long)off, (long long)(off + len), name,
                                 (unsigned long long)fsize);
            if (st == CKPT_OK)
                st = ckpt__pread_full(fd, give[d] + at, (size_t)len, (uint64_t)off, "pread", name);
            ckpt__close(fd);
            local = st;
            at += (uint64_t)(len > 0 ? len : 0);
        }
    }

    /* 3b. each pair's terms, both ways: {this rank sends to d, this rank receives from d}. A
     * failing rank neither sends nor receives; a requester whose holder sends nothing writes
     * and reads nothing, and the agreement after the fetch carries the holder's own message. */
    for (int d = 0; d < size; d++) {
        sendable[2 * d] = local == CKPT_OK && give_bytes[d] > 0;
        sendable[2 * d + 1] = local == CKPT_OK && got_bytes[d] > 0;
    }
    if (MPI_Alltoall(sendable, 2, MPI_INT, peer, 2, MPI_INT, s->comm) != MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoall of the holders' statuses failed");
        goto out;
    }
    for (int d = 0; d < size; d++)
        holder_failed |= got_bytes[d] > 0 && !peer[2 * d];

    /* 4. the bytes, both ways, nonblocking and in chunks: d -> this rank when d sends and this
     * rank receives, this rank -> d when this rank sends and d receives (both sides know both) */
    uint64_t chunk = s->chunk;
    size_t q = 0;
    for (int d = 0; rc == CKPT_OK && d < size; d++) {
        if (!(sendable[2 * d + 1] && peer[2 * d]))
            continue;
        for (uint64_t off = 0; off < got_bytes[d]; off += chunk) {
            uint64_t n = got_bytes[d] - off < chunk ? got_bytes[d] - off : chunk;
            if (MPI_Irecv(got[d] + off, (int)n, MPI_BYTE, d, TAG_FETCH, s->comm, &req[q++]) !=
                MPI_SUCCESS)
                rc = ckpt__error(CKPT_EMPI, "MPI_Irecv of fetched bytes failed");
        }
    }
    for (int d = 0; rc == CKPT_OK && d < size; d++) {
        if (!(sendable[2 * d] && peer[2 * d + 1]))
            continue;
        for (uint64_t off = 0; off < give_bytes[d]; off += chunk) {
            uint64_t n = give_bytes[d] - off < chunk ? give_bytes[d] - off : chunk;
            if (MPI_Isend(give[d] + off, (int)n, MPI_BYTE, d, TAG_FETCH, s->comm, &req[q++]) !=
                MPI_SUCCESS)
                rc = ckpt__error(CKPT_EMPI, "MPI_Isend of fetched bytes failed");
        }
    }
    if (q && MPI_Waitall((int)q, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the fetch failed");

    /* 5. what arrived, into sparse files of the same names in this rank's scratch directory */
    char scratch[64];
    snprintf(scratch, sizeof scratch, "fetch_%d", s->rank);
    int sfd = -1;
    if (local == CKPT_OK && rc == CKPT_OK && nwant > 0 && !holder_failed) {
        ckpt__rmtree_at(dirfd, scratch, s->cache.dir); /* a crashed restore's */
        local = ckpt__subdir_open(&sfd, dirfd, scratch, 1, s->cache.dir);
    }
    for (int d = 0; sfd >= 0 && local == CKPT_OK && d < size; d++) {
        uint64_t at = 0;
        for (int i = sdispl[d]; local == CKPT_OK && i < sdispl[d] + scount[d]; i += RQ_N) {
            const int64_t *w = sorted + i;
            char name[320];
            int fd = -1;
            local = ckpt__path(name, sizeof name, "%s.data-%05lld-of-%05d", base,
                               (long long)w[RQ_FILE], per_node ? s->nnodes : s->size);
            if (local == CKPT_OK) /* not O_APPEND: Linux's pwrite would ignore the offset */
                local = ckpt__exists_at(sfd, name)
                            ? ckpt__file_open(&fd, NULL, sfd, name, O_RDWR, scratch)
                            : ckpt__file_create(&fd, sfd, name, O_WRONLY, scratch);
            if (local == CKPT_OK)
                local = ckpt__pwrite_full(fd, got[d] + at, (size_t)w[RQ_LEN],
                                          (uint64_t)w[RQ_OFF], "pwrite", name);
            ckpt__close(fd);
            at += (uint64_t)w[RQ_LEN];
        }
    }
    if (sfd >= 0 && local == CKPT_OK) {
        ckpt__reader_set_fetched(r, sfd);
        *scratch_fd = dirfd; /* the caller removes fetch_<rank> below it */
        dirfd = -1;
    } else {
        ckpt__close(sfd);
    }
out:
    for (int d = 0; d < size; d++) {
        if (give)
            free(give[d]);
        if (got)
            free(got[d]);
    }
    free(give);
    free(got);
    free(req);
    free(asked);
    free(sorted);
    free(want);
    free(scount);
    free(rcount);
    free(sdispl);
    free(rdispl);
    free(got_bytes);
    free(give_bytes);
    free(sendable);
    free(peer);
    ckpt__close(dirfd);
    return rc != CKPT_OK ? rc : local;
}

void ckpt__cache_fetch_done(const ckpt_saver *s, int dirfd)
{
    if (dirfd < 0)
        return;
    char scratch[64];
    snprintf(scratch, sizeof scratch, "fetch_%d", s->rank);
    ckpt__rmtree_at(dirfd, scratch, s->cache.dir);
    ckpt__close(dirfd);
}
