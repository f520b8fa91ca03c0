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
 * nothing, its requesters write nothing, and the agreement right after carries the failing
 * rank's own message. Memory: a rank holds the bytes it fetches and the bytes it was asked for at
 * once (docs/levels.md).
 * This is the node cache's restore side as a storage target (target.h, ckpt__target_cache):
 * open_restore (ckpt__cache_restore_open: the checkpoint's name in the node's cache directory,
 * then the rebuild, cache_rebuild.c), fetch (ckpt__cache_fetch: the chief's own share, the
 * fetch, the agreement) and fetch_done (ckpt__cache_fetch_done).
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

/* The rank that serves file number k. */
static int holder(const ckpt_saver *s, int per_node, int k)
{
    return per_node ? s->node_leaders[k] : k;
}

/* One fetch (fetch_pieces): the arrays of `size` entries are per peer rank d. */
typedef struct fetch {
    ckpt_saver *s;
    const char *base;
    int per_node, of; /* of: the writer's count of data files (nodes or ranks) */
    int dirfd;        /* this node's cache directory */
    int *scount, *rcount, *sdispl, *rdispl; /* the requests' all-to-all, in int64 units */
    int64_t *want, *sorted, *asked; /* this rank's requests, by holder, and those it was asked */
    size_t nwant;
    uint64_t *got_bytes, *give_bytes; /* what d sends this rank, what this rank sends d */
    int *sendable, *peer;             /* each pair's terms: this rank's, and d's */
    uint8_t **give, **got;
    MPI_Request *req;
    int holder_failed; /* a holder this rank asked sends nothing */
} fetch;

/* The arrays and this node's directory; *local's failure, or the allocation's. */
static int fetch_init(fetch *f, ckpt_saver *s, const char *base, const Mpickpt__Index *idx,
                      int local)
{
    memset(f, 0, sizeof *f);
    size_t size = (size_t)s->size;
    f->s = s;
    f->base = base;
    f->per_node = idx && idx->header->layout == MPICKPT__LAYOUT__LAYOUT_PER_NODE;
    f->of = f->per_node ? s->nnodes : s->size;
    f->dirfd = -1;
    f->scount = calloc(size, sizeof *f->scount);
    f->rcount = calloc(size, sizeof *f->rcount);
    f->sdispl = calloc(size, sizeof *f->sdispl);
    f->rdispl = calloc(size, sizeof *f->rdispl);
    f->got_bytes = calloc(size, sizeof *f->got_bytes);
    f->give_bytes = calloc(size, sizeof *f->give_bytes);
    f->sendable = calloc(size * 2, sizeof *f->sendable);
    f->peer = calloc(size * 2, sizeof *f->peer);
    if ((!f->scount || !f->rcount || !f->sdispl || !f->rdispl || !f->got_bytes ||
         !f->give_bytes || !f->sendable || !f->peer) &&
        local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        local = ckpt__cache_dirfd(s, &f->dirfd);
    return local;
}

static void fetch_free(fetch *f)
{
    for (int d = 0; d < f->s->size; d++) {
        if (f->give)
            free(f->give[d]);
        if (f->got)
            free(f->got[d]);
    }
    free(f->give);
    free(f->got);
    free(f->req);
    free(f->asked);
    free(f->sorted);
    free(f->want);
    free(f->scount);
    free(f->rcount);
    free(f->sdispl);
    free(f->rdispl);
    free(f->got_bytes);
    free(f->give_bytes);
    free(f->sendable);
    free(f->peer);
    ckpt__close(f->dirfd);
}

/* 1. what this rank needs from other nodes: whole pieces of files its node lacks (f->want). */
static int want_pieces(fetch *f, const Mpickpt__Index *idx, int local)
{
    ckpt_saver *s = f->s;
    size_t cap = 0;
    for (size_t t = 0; idx && local == CKPT_OK && t < idx->n_tensors; t++) {
        const Mpickpt__Tensor *tn = idx->tensors[t];
        for (size_t p = 0; local == CKPT_OK && p < tn->n_pieces; p++) {
            const Mpickpt__Piece *pc = tn->pieces[p];
            if (ckpt__exists_at(f->dirfd, pc->file))
                continue;
            int of = 0, k = ckpt__data_name_number(pc->file, f->base, &of);
            if (k < 0 || of != f->of) {
                local = ckpt__error(CKPT_EINVAL,
                                    "rank %d: %s is not on this node and was written by a job of "
                                    "another shape (%d %s; this one has %d): the cache restores "
                                    "on the writer's shape only",
                                    s->rank, pc->file, of, f->per_node ? "nodes" : "ranks", f->of);
                break;
            }
            if (!pc->file_offset && pc->bytes) {
                local = ckpt__error(CKPT_EINVAL, "rank %d: tensor '%s' in %s has no recorded "
                                                 "file offset to fetch",
                                    s->rank, tn->name, pc->file);
                break;
            }
            if (f->nwant == cap) {
                cap = cap ? 2 * cap : 64;
                int64_t *g = realloc(f->want, cap * RQ_N * sizeof *g);
                if (!g) {
                    local = ckpt__error(CKPT_ENOMEM, "out of memory");
                    break;
                }
                f->want = g;
            }
            int64_t *w = f->want + f->nwant * RQ_N;
            w[RQ_FILE] = k;
            w[RQ_OFF] = (int64_t)pc->file_offset;
            w[RQ_LEN] = (int64_t)pc->bytes;
            f->nwant++;
        }
    }
    if (local != CKPT_OK)
        f->nwant = 0;
    return local;
}

/* The requests sorted by holder (a counting pass: requests go out grouped by destination), the
 * counts and displacements to send, the bytes to receive from each holder. */
static int sort_wants(fetch *f, int local)
{
    ckpt_saver *s = f->s;
    f->sorted = malloc((f->nwant ? f->nwant : 1) * RQ_N * sizeof *f->sorted);
    if (!f->sorted && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory"), f->nwant = 0;
    for (size_t i = 0; f->scount && i < f->nwant; i++)
        f->scount[holder(s, f->per_node, (int)f->want[i * RQ_N + RQ_FILE])] += RQ_N;
    for (int d = 1; f->sdispl && f->scount && d < s->size; d++)
        f->sdispl[d] = f->sdispl[d - 1] + f->scount[d - 1];
    int *fill = calloc((size_t)s->size, sizeof *fill);
    if (!fill && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory"), f->nwant = 0;
    for (size_t i = 0; fill && f->sorted && i < f->nwant; i++) {
        int d = holder(s, f->per_node, (int)f->want[i * RQ_N + RQ_FILE]);
        memcpy(f->sorted + f->sdispl[d] + fill[d], f->want + i * RQ_N, RQ_N * sizeof *f->want);
        fill[d] += RQ_N;
        f->got_bytes[d] += (uint64_t)f->want[i * RQ_N + RQ_LEN];
    }
    free(fill);
    return local;
}

/* 2. the requests, all to all (every rank takes part, with zero counts when failing). A rank
 * that cannot hold the counts or the requests cannot take part: every rank is told first.
 * Collective; the same status everywhere. */
static int exchange_requests(fetch *f)
{
    ckpt_saver *s = f->s;
    int ok = f->scount && f->rcount && f->sdispl && f->rdispl && f->got_bytes && f->give_bytes &&
             f->sendable && f->peer;
    int rc = all_can(s, ok, "the fetch's counts");
    if (rc != CKPT_OK)
        return rc;
    if (MPI_Alltoall(f->scount, 1, MPI_INT, f->rcount, 1, MPI_INT, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoall of the fetch requests' counts failed");
    size_t nasked = 0;
    for (int d = 0; d < s->size; d++) {
        f->rdispl[d] = (int)nasked;
        nasked += (size_t)f->rcount[d];
    }
    f->asked = malloc((nasked ? nasked : 1) * sizeof *f->asked);
    if (rc == CKPT_OK && (rc = all_can(s, f->asked != NULL, "the fetch requests")) != CKPT_OK)
        return rc;
    if (rc == CKPT_OK && MPI_Alltoallv(f->sorted, f->scount, f->sdispl, MPI_INT64_T, f->asked,
                                       f->rcount, f->rdispl, MPI_INT64_T, s->comm) != MPI_SUCCESS)
        rc = ckpt__error(CKPT_EMPI, "MPI_Alltoallv of the fetch requests failed");
    return rc;
}

/* 3. everything this rank needs is allocated, and what it was asked is read, before anyone
 * posts a message: a rank that cannot send or receive a pair's bytes says so in the status
 * exchange (exchange_bytes), and that pair exchanges nothing (no peer waits for a message never
 * sent). This rank's status. */
static int read_asked(fetch *f, int local)
{
    ckpt_saver *s = f->s;
    int size = s->size;
    f->give = calloc((size_t)size, sizeof *f->give);
    f->got = calloc((size_t)size, sizeof *f->got);
    size_t nreq = 0;
    for (int d = 0; d < size; d++) {
        uint64_t total = 0;
        for (int i = f->rdispl[d]; i < f->rdispl[d] + f->rcount[d]; i += RQ_N)
            total += f->asked[i + RQ_LEN] > 0 ? (uint64_t)f->asked[i + RQ_LEN] : 0;
        f->give_bytes[d] = total;
        nreq += (size_t)((f->got_bytes[d] + s->chunk - 1) / s->chunk +
                         (f->give_bytes[d] + s->chunk - 1) / s->chunk);
    }
    f->req = malloc((nreq ? nreq : 1) * sizeof *f->req);
    if ((!f->give || !f->got || !f->req) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the fetch", s->rank);
    int injected = ckpt__fault(s->rank, "fetch"); /* as if the buffers below could not be had */
    if (injected != CKPT_OK && local == CKPT_OK)
        local = injected;
    for (int d = 0; f->give && f->got && local == CKPT_OK && d < size; d++) {
        if (f->got_bytes[d] && !(f->got[d] = malloc((size_t)f->got_bytes[d])))
            local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for %llu bytes fetched from rank %d",
                                s->rank, (unsigned long long)f->got_bytes[d], d);
        if (local == CKPT_OK && f->give_bytes[d] &&
            !(f->give[d] = malloc((size_t)f->give_bytes[d])))
            local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for %llu bytes asked by rank %d",
                                s->rank, (unsigned long long)f->give_bytes[d], d);
    }
    for (int d = 0; f->give && local == CKPT_OK && d < size; d++) {
        uint64_t at = 0;
        for (int i = f->rdispl[d]; local == CKPT_OK && i < f->rdispl[d] + f->rcount[d];
             i += RQ_N) {
            int64_t k = f->asked[i + RQ_FILE], off = f->asked[i + RQ_OFF],
                    len = f->asked[i + RQ_LEN];
            char name[320];
            int fd = -1;
            uint64_t fsize = 0;
            int st = ckpt__path(name, sizeof name, "%s.data-%05lld-of-%05d", f->base,
                                (long long)k, f->of);
            if (st == CKPT_OK && f->dirfd >= 0 &&
                (st = ckpt__file_open(&fd, &fsize, f->dirfd, name, O_RDONLY, s->cache.dir)) !=
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
                st = ckpt__pread_full(fd, f->give[d] + at, (size_t)len, (uint64_t)off, "pread",
                                      name);
            ckpt__close(fd);
            local = st;
            at += (uint64_t)(len > 0 ? len : 0);
        }
    }
    return local;
}

/* 3b. each pair's terms, both ways: {this rank sends to d, this rank receives from d}. A failing
 * rank neither sends nor receives; a requester whose holder sends nothing writes and reads
 * nothing, and the agreement after the fetch carries the holder's own message.
 * 4. the bytes, both ways, nonblocking and in chunks: d -> this rank when d sends and this rank
 * receives, this rank -> d when this rank sends and d receives (both sides know both).
 * Collective; an MPI failure is returned. */
static int exchange_bytes(fetch *f, int local)
{
    ckpt_saver *s = f->s;
    int size = s->size, rc = CKPT_OK;
    for (int d = 0; d < size; d++) {
        f->sendable[2 * d] = local == CKPT_OK && f->give_bytes[d] > 0;
        f->sendable[2 * d + 1] = local == CKPT_OK && f->got_bytes[d] > 0;
    }
    if (MPI_Alltoall(f->sendable, 2, MPI_INT, f->peer, 2, MPI_INT, s->comm) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Alltoall of the holders' statuses failed");
    for (int d = 0; d < size; d++)
        f->holder_failed |= f->got_bytes[d] > 0 && !f->peer[2 * d];
    uint64_t chunk = s->chunk;
    size_t q = 0;
    for (int d = 0; rc == CKPT_OK && d < size; d++)
        if (f->sendable[2 * d + 1] && f->peer[2 * d])
            rc = ckpt__irecv_bytes(s->comm, d, TAG_FETCH, f->got[d], f->got_bytes[d], chunk, f->req,
                                   &q, "of fetched bytes");
    for (int d = 0; rc == CKPT_OK && d < size; d++)
        if (f->sendable[2 * d] && f->peer[2 * d + 1])
            rc = ckpt__isend_bytes(s->comm, d, TAG_FETCH, f->give[d], f->give_bytes[d], chunk,
                                   f->req, &q, "of fetched bytes");
    if (q && MPI_Waitall((int)q, f->req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the fetch failed");
    return rc;
}

/* 5. what arrived, into sparse files of the same names in this rank's scratch directory, which
 * reader `r` then opens; *scratch_fd for ckpt__cache_fetch_done. This rank's status. */
static int write_fetched(fetch *f, ckpt_reader *r, int local, int *scratch_fd)
{
    ckpt_saver *s = f->s;
    char scratch[64];
    snprintf(scratch, sizeof scratch, "fetch_%d", s->rank);
    int sfd = -1;
    if (local == CKPT_OK && f->nwant > 0 && !f->holder_failed) {
        ckpt__rmtree_at(f->dirfd, scratch, s->cache.dir); /* a crashed restore's */
        local = ckpt__subdir_open(&sfd, f->dirfd, scratch, 1, s->cache.dir);
    }
    for (int d = 0; sfd >= 0 && local == CKPT_OK && d < s->size; d++) {
        uint64_t at = 0;
        for (int i = f->sdispl[d]; local == CKPT_OK && i < f->sdispl[d] + f->scount[d];
             i += RQ_N) {
            const int64_t *w = f->sorted + i;
            char name[320];
            int fd = -1;
            local = ckpt__path(name, sizeof name, "%s.data-%05lld-of-%05d", f->base,
                               (long long)w[RQ_FILE], f->of);
            if (local == CKPT_OK) /* not O_APPEND: Linux's pwrite would ignore the offset */
                local = ckpt__exists_at(sfd, name)
                            ? ckpt__file_open(&fd, NULL, sfd, name, O_RDWR, scratch)
                            : ckpt__file_create(&fd, sfd, name, O_WRONLY, scratch);
            if (local == CKPT_OK)
                local = ckpt__pwrite_full(fd, f->got[d] + at, (size_t)w[RQ_LEN],
                                          (uint64_t)w[RQ_OFF], "pwrite", name);
            ckpt__close(fd);
            at += (uint64_t)w[RQ_LEN];
        }
    }
    if (sfd >= 0 && local == CKPT_OK) {
        ckpt__reader_set_fetched(r, sfd);
        *scratch_fd = f->dirfd; /* the caller removes fetch_<rank> below it */
        f->dirfd = -1;
    } else {
        ckpt__close(sfd);
    }
    return local;
}

/* The pieces of r's share that other nodes hold, fetched (above). This rank's status. */
static int fetch_pieces(ckpt_saver *s, ckpt_reader *r, const char *base, int local,
                        int *scratch_fd)
{
    *scratch_fd = -1;
    const Mpickpt__Index *idx = local == CKPT_OK ? ckpt__reader_index(r) : NULL;
    fetch f;
    local = fetch_init(&f, s, base, idx, local);
    local = want_pieces(&f, idx, local);
    local = sort_wants(&f, local);
    int rc = exchange_requests(&f);
    if (rc == CKPT_OK) {
        local = read_asked(&f, local);
        rc = exchange_bytes(&f, local);
    }
    if (rc == CKPT_OK)
        local = write_fetched(&f, r, local, scratch_fd);
    fetch_free(&f);
    return rc != CKPT_OK ? rc : local;
}

/* The node cache's fetch (target.h): the chief's own share (its reads, like every rank's, decide
 * what it fetches from other nodes), then the pieces other nodes hold, fetched, and an
 * agreement: a holder's failure, in its own words. */
int ckpt__cache_fetch(ckpt_saver *s, ckpt_reader **r, const char *prefix, const char *name,
                      int *local, int *scratch_fd)
{
    int st = *local;
    if (s->rank == 0 && st == CKPT_OK)
        st = ckpt__restore_own_share(s, prefix, r);
    st = fetch_pieces(s, *r, name, st, scratch_fd);
    return *local = ckpt_mpi_agree(s->comm, st);
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

/* The node cache's names of a restore (target.h): the checkpoint's name in this rank's node's
 * cache directory, as the node cache names a save (its `place`, save_levels.c: a plain file
 * name, the directory of a wiped node made again), agreed; then what a lost or wiped node lacks,
 * copied back from the nodes that hold it (cache_rebuild.c). Collective. */
int ckpt__cache_restore_open(ckpt_saver *s, char *prefix, size_t size, char *name, size_t nsize)
{
    int st = CKPT_OK;
    if (!s->cache.on) /* place's own message would name a save */
        st = ckpt__error(CKPT_EINVAL, "a restore from the cache level without a cache");
    else if ((st = ckpt__path(name, nsize, "%s", prefix)) == CKPT_OK)
        st = ckpt__target_cache.place(s, prefix, size);
    int rc = ckpt_mpi_agree(s->comm, st);
    if (rc != CKPT_OK)
        return rc;
    return ckpt__cache_rebuild(s, name);
}
