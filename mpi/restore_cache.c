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
 * messages match; a holder that cannot read a range sends zeros and tells its requesters, which
 * drop them: the caller's agreement right after carries the holder's own message.
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
    int *scount = calloc((size_t)size, sizeof *scount), *rcount = calloc((size_t)size, sizeof *rcount);
    int *sdispl = calloc((size_t)size, sizeof *sdispl), *rdispl = calloc((size_t)size, sizeof *rdispl);
    int64_t *want = NULL, *asked = NULL;
    uint64_t *got_bytes = calloc((size_t)size, sizeof *got_bytes);
    uint64_t *give_bytes = calloc((size_t)size, sizeof *give_bytes);
    if ((!scount || !rcount || !sdispl || !rdispl || !got_bytes || !give_bytes) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        local = ckpt__dir_open(&dirfd, s->cache.dir);

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
    int64_t *sorted = malloc((nwant ? nwant : 1) * RQ_N * sizeof *sorted);
    if (!sorted && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory"), nwant = 0;
    for (size_t i = 0; scount && i < nwant; i++)
        scount[holder(s, per_node, (int)want[i * RQ_N + RQ_FILE])] += RQ_N;
    for (int d = 1; sdispl && d < size; d++)
        sdispl[d] = sdispl[d - 1] + scount[d - 1];
    int *fill = calloc((size_t)size, sizeof *fill);
    for (size_t i = 0; fill && sorted && i < nwant; i++) {
        int d = holder(s, per_node, (int)want[i * RQ_N + RQ_FILE]);
        memcpy(sorted + sdispl[d] + fill[d], want + i * RQ_N, RQ_N * sizeof *want);
        fill[d] += RQ_N;
        got_bytes[d] += (uint64_t)want[i * RQ_N + RQ_LEN];
    }
    free(fill);

    /* 2. the requests, all to all (every rank takes part, with zero counts when failing) */
    int ok_arrays = scount && rcount && sdispl && rdispl;
    if (!ok_arrays)
        return local; /* cannot take part in the exchange: out of memory before anything else */
    if (MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoall of the fetch requests' counts failed");
    size_t nasked = 0;
    for (int d = 0; d < size; d++) {
        rdispl[d] = (int)nasked;
        nasked += (size_t)rcount[d];
    }
    asked = malloc((nasked ? nasked : 1) * sizeof *asked);
    if (!asked) /* a holder that cannot hold the requests cannot answer: MPI's to fail */
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for fetch requests", s->rank);
    if (rc == CKPT_OK && MPI_Alltoallv(sorted, scount, sdispl, MPI_INT64_T, asked, rcount, rdispl,
                                       MPI_INT64_T, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoallv of the fetch requests failed");

    /* 3. the holder reads what it was asked, one buffer per requester */
    uint8_t **give = calloc((size_t)size, sizeof *give);
    uint8_t **got = calloc((size_t)size, sizeof *got);
    if ((!give || !got) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    for (int d = 0; give && d < size; d++) {
        uint64_t total = 0;
        for (int i = rdispl[d]; i < rdispl[d] + rcount[d]; i += RQ_N)
            total += asked[i + RQ_LEN] > 0 ? (uint64_t)asked[i + RQ_LEN] : 0;
        give_bytes[d] = total;
        if (!total)
            continue;
        if (!(give[d] = calloc(1, (size_t)total))) {
            if (local == CKPT_OK)
                local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for %llu bytes asked by rank %d",
                                    s->rank, (unsigned long long)total, d);
            continue;
        }
        uint64_t at = 0;
        for (int i = rdispl[d]; i < rdispl[d] + rcount[d]; i += RQ_N) {
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
            for (int64_t done = 0; st == CKPT_OK && done < len;) {
                ssize_t n = pread(fd, give[d] + at + done, (size_t)(len - done), off + done);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0)
                    st = ckpt__errno(n < 0 ? errno : EIO, "pread", name);
                else
                    done += n;
            }
            ckpt__close(fd);
            if (st != CKPT_OK && local == CKPT_OK)
                local = st; /* the zeros sent instead fail the requester's checksum */
            at += (uint64_t)(len > 0 ? len : 0);
        }
    }

    /* 3b. each holder's status to its requesters: a requester whose holder failed neither
     * writes nor reads what it got (zeros), and the agreement after the fetch carries the
     * holder's own message */
    int *hst = calloc((size_t)size, sizeof *hst), *hgot = calloc((size_t)size, sizeof *hgot);
    if (!hst || !hgot)
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the fetch", s->rank);
    for (int d = 0; d < size; d++)
        hst[d] = local != CKPT_OK;
    if (rc == CKPT_OK &&
        MPI_Alltoall(hst, 1, MPI_INT, hgot, 1, MPI_INT, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoall of the holders' statuses failed");
    int holder_failed = 0;
    for (int d = 0; d < size; d++)
        holder_failed |= got_bytes[d] > 0 && hgot[d];
    free(hst);
    free(hgot);

    /* 4. the bytes, both ways, nonblocking and in chunks */
    uint64_t chunk = s->chunk;
    size_t nreq = 0;
    for (int d = 0; d < size; d++)
        nreq += (size_t)((got_bytes[d] + chunk - 1) / chunk + (give_bytes[d] + chunk - 1) / chunk);
    MPI_Request *req = malloc((nreq ? nreq : 1) * sizeof *req);
    if (!req)
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the fetch", s->rank);
    size_t q = 0;
    for (int d = 0; rc == CKPT_OK && d < size; d++) {
        if (!got_bytes[d])
            continue;
        if (!(got[d] = malloc((size_t)got_bytes[d])))
            return ckpt__error(CKPT_ENOMEM, "rank %d: no room for %llu fetched bytes", s->rank,
                               (unsigned long long)got_bytes[d]);
        for (uint64_t off = 0; off < got_bytes[d]; off += chunk) {
            uint64_t n = got_bytes[d] - off < chunk ? got_bytes[d] - off : chunk;
            if (MPI_Irecv(got[d] + off, (int)n, MPI_BYTE, d, TAG_FETCH, s->comm, &req[q++]) !=
                MPI_SUCCESS)
                rc = ckpt__error(CKPT_EMPI, "MPI_Irecv of fetched bytes failed");
        }
    }
    static const uint8_t zeros[4096];
    for (int d = 0; rc == CKPT_OK && d < size; d++)
        for (uint64_t off = 0; off < give_bytes[d]; off += chunk) {
            uint64_t n = give_bytes[d] - off < chunk ? give_bytes[d] - off : chunk;
            /* a buffer that could not be allocated: zeros (a checksum failure at the requester) */
            const void *src = give[d] ? give[d] + off : zeros;
            if (!give[d] && n > sizeof zeros)
                return ckpt__error(CKPT_ENOMEM, "rank %d: cannot answer rank %d", s->rank, d);
            if (MPI_Isend(src, (int)n, MPI_BYTE, d, TAG_FETCH, s->comm, &req[q++]) != MPI_SUCCESS)
                rc = ckpt__error(CKPT_EMPI, "MPI_Isend of fetched bytes failed");
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
            for (int64_t done = 0; local == CKPT_OK && done < w[RQ_LEN];) {
                ssize_t n = pwrite(fd, got[d] + at + done, (size_t)(w[RQ_LEN] - done),
                                   w[RQ_OFF] + done);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0)
                    local = ckpt__errno(n < 0 ? errno : ENOSPC, "pwrite", name);
                else
                    done += n;
            }
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
