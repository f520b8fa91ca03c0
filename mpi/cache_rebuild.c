/*
 * The cache level's rebuild (docs/levels.md): before a restore from the cache, checkpoint `name`
 * is made whole again on every node — each data file on its home node (the node of the ranks that
 * wrote it) and, with partner redundancy, on that node's partner, and the index on every node —
 * by copying what a lost or wiped node lacks from a node that still holds it.
 *
 * The node leaders do the work, on their own communicator; the other ranks join the check of
 * their node's files (with partner redundancy) and the agreement at the end. The lowest node that
 * holds an intact copy of the index (its container's CRC) broadcasts it; every leader parses and
 * validates it, writes it when its node lacks it or holds other bytes (a damaged copy), and says
 * which data files its node holds intact (an allgather of one byte per file). A node holds a file
 * or the index only as a regular file: a link, FIFO or directory planted under the name counts as
 * missing. A data file is intact when it has the recorded size and, with partner redundancy (there
 * is another copy to repair it from), when every piece the index places in it passes the index's
 * checksums (the block CRCs where the piece has them, else its CRC-32C): the node's ranks share
 * that read, by bytes. A damaged copy counts as missing, so an intact copy replaces it. From that,
 * every leader computes the same plan: for each file, each target (home, partner) that lacks an
 * intact copy is sent it by the first node that holds one (home first, then partner, then any).
 * A file of which no node holds an intact copy is lost: the rebuild fails naming it (and which
 * copies are damaged), and the manager falls back to the persistent copy or an older checkpoint.
 * The leaders agree before any bytes move (every one can hold, map and receive what the plan gives
 * it); then every leader posts all its sends (nonblocking, from a read-only mapping) before it
 * receives, so transfers in any pattern cannot deadlock; a received file is written under a temp
 * name (O_EXCL), fsynced and renamed: the rename replaces only what stood under a name the node
 * lacked (a planted link or FIFO, a file of the wrong size or a damaged one), never following it;
 * a planted directory fails the rename, and the rebuild, naming it.
 */
#include "saver_internal.h"

#include "crc32c_internal.h"
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
#define TAG_CHECK 0x6c63 /* a node rank's list of pieces to check, from its leader */

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

/* Every leader can go on (`ok` here): CKPT_OK everywhere, else CKPT_EPEER where it could (the
 * failing leader keeps its own error; the agreement of the whole job after carries it). */
static int leaders_can(MPI_Comm lc, int ok, int *rc)
{
    int all = 0;
    if (*rc == CKPT_OK && MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, lc) != MPI_SUCCESS)
        *rc = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the leaders' statuses failed");
    return *rc == CKPT_OK && all;
}

/* The plan for one file: the node that sends it (-1: none holds it) and its targets lacking it
 * (-1: none). */
typedef struct {
    int from, to[2];
} rb_move;

/* What a node holds of a data file (one byte per file in the leaders' allgather). */
enum { RB_NONE = 0, RB_INTACT = 1, RB_DAMAGED = 2 };

/* The check of a node's data files works on pieces the leader lists for each of the node's ranks
 * (only the leader holds the index): each piece as words of a uint64_t stream, C_N words then its
 * block CRCs, two to a word (the first in the low half). */
enum { C_FILE, C_OFF, C_BYTES, C_CRC, C_RANK, C_BLOCK, C_NBLOCKS, C_N };

/* Words of a piece with `nblocks` block CRCs in the stream. */
static uint64_t piece_words(uint64_t nblocks)
{
    return C_N + (nblocks + 1) / 2;
}

/* One listed piece `w` (its bytes in open file `fd`, `fsize` bytes) against the index's checksums:
 * each block's CRC-32C where the piece has block checksums (format 2), and the piece's CRC-32C
 * (then combined from its blocks', so each byte is read once), read through `buf` (`cap` bytes).
 * CKPT_OK, or CKPT_ECORRUPT / CKPT_EIO with a message naming the piece (the caller names the
 * file). */
static int check_piece(int fd, uint64_t fsize, const uint64_t *w, uint8_t *buf, size_t cap)
{
    uint64_t off0 = w[C_OFF], bytes = w[C_BYTES], nb = w[C_NBLOCKS];
    int rank = (int)w[C_RANK];
    if (off0 > fsize || bytes > fsize - off0)
        return ckpt__error(CKPT_ECORRUPT, "the piece of rank %d at bytes %llu..%llu lies past "
                                          "the file's end (%llu bytes)",
                           rank, (unsigned long long)off0, (unsigned long long)(off0 + bytes),
                           (unsigned long long)fsize);
    uint64_t bsize = nb ? w[C_BLOCK] : bytes;
    uint32_t whole = 0;
    uint64_t b = 0;
    for (uint64_t off = 0; off < bytes; off += bsize, b++) {
        uint64_t blen = bytes - off < bsize ? bytes - off : bsize;
        uint32_t crc = 0;
        for (uint64_t done = 0; done < blen;) {
            size_t n = blen - done < cap ? (size_t)(blen - done) : cap;
            int rc = ckpt__pread_crc(fd, off0 + off + done, buf, n, &crc);
            if (rc != CKPT_OK)
                return ckpt__error_wrap(rc, "the piece of rank %d at bytes %llu..%llu", rank,
                                        (unsigned long long)off0,
                                        (unsigned long long)(off0 + bytes));
            done += n;
        }
        uint32_t want = b < nb ? (uint32_t)(w[C_N + b / 2] >> (32 * (b % 2))) : 0u;
        if (nb && (b >= nb || crc != want))
            return ckpt__error(CKPT_ECORRUPT,
                               "the piece of rank %d at bytes %llu..%llu: block %llu checksum "
                               "mismatch (stored %08x, computed %08x)",
                               rank, (unsigned long long)off0, (unsigned long long)(off0 + bytes),
                               (unsigned long long)b, want, crc);
        whole = nb ? ckpt__crc32c_combine(whole, crc, blen) : crc;
    }
    if (whole != (uint32_t)w[C_CRC])
        return ckpt__error(CKPT_ECORRUPT,
                           "the piece of rank %d at bytes %llu..%llu: checksum mismatch (stored "
                           "%08x, computed %08x)",
                           rank, (unsigned long long)off0, (unsigned long long)(off0 + bytes),
                           (uint32_t)w[C_CRC], whole);
    return CKPT_OK;
}

/* A file's name and number in the index, sorted by name (the pieces name their file). */
typedef struct {
    const char *name;
    size_t f;
} rb_name;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const rb_name *)a)->name, ((const rb_name *)b)->name);
}

/*
 * The leader's lists (*work[r], len[r] words, for each of its node's r < node_size ranks; free
 * each and the array): every piece with a recorded offset of the files its node holds at the
 * right size (held[f] == RB_INTACT), in index order, cut into node_size runs of about equal
 * bytes. Also the names of those files, each NUL-terminated by file number (an empty name for the
 * others): *names, *nlen bytes. A piece without a recorded offset is reached through HDF5 only and
 * is left to the restore's read, which checks its CRC-32C (the saver records every offset,
 * docs/format.md).
 */
static int list_checks(const ckpt_saver *s, const Mpickpt__Index *idx, const uint8_t *held,
                       uint64_t ***work, uint64_t *len, char **names, uint64_t *nlen)
{
    size_t nf = idx->n_files, k = (size_t)s->node_size;
    rb_name *byname = malloc((nf ? nf : 1) * sizeof *byname);
    uint64_t **w = calloc(k, sizeof *w), *fill = calloc(k, sizeof *fill);
    int rc = byname && w && fill ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    *nlen = 0;
    for (size_t f = 0; rc == CKPT_OK && f < nf; f++) {
        byname[f].name = idx->files[f]->name;
        byname[f].f = f;
        *nlen += (held[f] == RB_INTACT ? strlen(byname[f].name) : 0) + 1;
    }
    if (rc == CKPT_OK)
        qsort(byname, nf, sizeof *byname, cmp_name);
    if (rc == CKPT_OK && !(*names = malloc(*nlen ? (size_t)*nlen : 1)))
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t f = 0, at = 0; rc == CKPT_OK && f < nf; f++) {
        size_t n = held[f] == RB_INTACT ? strlen(idx->files[f]->name) : 0;
        memcpy(*names + at, idx->files[f]->name, n);
        (*names)[at + n] = '\0';
        at += n + 1;
    }
    memset(len, 0, k * sizeof *len);
    /* pass 0 counts the bytes, pass 1 the words of each run, pass 2 writes them */
    uint64_t total = 0, per = 1;
    for (int pass = 0; rc == CKPT_OK && pass < 3; pass++) {
        uint64_t at = 0;
        for (size_t t = 0; t < idx->n_tensors; t++)
            for (size_t j = 0; j < idx->tensors[t]->n_pieces; j++) {
                const Mpickpt__Piece *p = idx->tensors[t]->pieces[j];
                rb_name key = { p->file, 0 };
                const rb_name *hit = bsearch(&key, byname, nf, sizeof *byname, cmp_name);
                if (!hit || held[hit->f] != RB_INTACT || !p->bytes || !p->file_offset)
                    continue;
                size_t r = (size_t)(at / per);
                uint64_t nb = p->block_bytes ? p->n_block_crc32c : 0;
                at += p->bytes;
                if (pass == 0) {
                    total += p->bytes;
                } else if (pass == 1) {
                    len[r] += piece_words(nb);
                } else {
                    uint64_t *q = w[r] + fill[r];
                    memset(q, 0, piece_words(nb) * sizeof *q);
                    q[C_FILE] = hit->f;
                    q[C_OFF] = p->file_offset;
                    q[C_BYTES] = p->bytes;
                    q[C_CRC] = p->crc32c;
                    q[C_RANK] = (uint64_t)(p->rank >= 0 ? p->rank : 0);
                    q[C_BLOCK] = p->block_bytes;
                    q[C_NBLOCKS] = nb;
                    for (uint64_t b = 0; b < nb; b++)
                        q[C_N + b / 2] |= (uint64_t)p->block_crc32c[b] << (32 * (b % 2));
                    fill[r] += piece_words(nb);
                }
            }
        if (pass == 0)
            per = total / k + 1;
        for (size_t r = 0; pass == 1 && rc == CKPT_OK && r < k; r++)
            if (!(w[r] = malloc(len[r] ? (size_t)len[r] * sizeof **w : 1)))
                rc = ckpt__error(CKPT_ENOMEM, "out of memory for the list of %s's pieces",
                                 s->cache.dir);
    }
    free(byname);
    free(fill);
    *work = w;
    return rc;
}

/* This rank's list (`n` words) checked in its node's cache directory `dirfd`: bad[f] set for each
 * file with a piece that fails (the first failure per file logged, naming the file). CKPT_OK, or
 * an error that stops the check (out of memory). */
static int check_list(const ckpt_saver *s, const uint64_t *w, uint64_t n, const char *const *fname,
                      size_t nf, uint8_t *bad, int dirfd)
{
    int *fds = malloc((nf ? nf : 1) * sizeof *fds);
    uint64_t *sizes = calloc(nf ? nf : 1, sizeof *sizes);
    size_t cap = (size_t)256 << 10; /* ckpt__pread_crc's own chunk: checked while in cache */
    uint8_t *buf = malloc(cap);
    if (!fds || !sizes || !buf) {
        free(fds);
        free(sizes);
        free(buf);
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory to check its node's cache files",
                           s->rank);
    }
    for (size_t f = 0; f < nf; f++)
        fds[f] = -1;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    for (uint64_t i = 0; i + C_N <= n; i += piece_words(w[i + C_NBLOCKS])) {
        const uint64_t *q = w + i;
        size_t f = (size_t)q[C_FILE];
        if (f >= nf || bad[f] || i + piece_words(q[C_NBLOCKS]) > n)
            continue;
        int st = CKPT_OK;
        if (fds[f] < 0)
            st = ckpt__file_open(&fds[f], &sizes[f], dirfd, fname[f], O_RDONLY, s->cache.dir);
        if (st == CKPT_OK)
            st = check_piece(fds[f], sizes[f], q, buf, cap);
        if (st != CKPT_OK) { /* damage (or a file that went away): not an error here */
            bad[f] = 1;
            const ckpt_error *e = ckpt_error_last();
            ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s in %s is damaged: %s", s->node,
                      fname[f], s->cache.dir, e ? e->message : ckpt_strerror(st));
            ckpt__error_restore(&keep); /* logged: the caller's pending error back */
        }
    }
    for (size_t f = 0; f < nf; f++)
        ckpt__close(fds[f]);
    free(fds);
    free(sizes);
    free(buf);
    return CKPT_OK;
}

/*
 * The check of the node's data files, collective over s->node_comm (with partner redundancy
 * only: without another copy a damaged file cannot be repaired, and the restore's own read finds
 * the damage). The leader passes `ok` (0: it failed before, and the node's other ranks return at
 * once), the index and held[] (what its node holds at the recorded size); the others pass NULLs.
 * The leader lists each rank's run of pieces (list_checks) and sends it with the names of the
 * files; every rank, the leader too, checks its run; a byte-wise maximum over the node gives the
 * leader the damaged files, which become RB_DAMAGED in held[], and whether a rank failed (out of
 * memory). Every rank takes part in every step whatever its status, and no bytes are sent before
 * the node agreed that every rank can hold them. Returns this rank's status; damage is no error.
 */
static int check_node(ckpt_saver *s, const char *name, int ok, const Mpickpt__Index *idx,
                      uint8_t *held)
{
    MPI_Comm nc = s->node_comm;
    int leader = s->node_rank == 0, local = CKPT_OK, dirfd = -1;
    size_t k = (size_t)s->node_size;
    uint64_t **work = NULL, *len = NULL, nlen = 0, mine = 0;
    char *names = NULL;
    const char **fname = NULL;
    uint8_t *bad = NULL;
    if (leader && ok) {
        if (!(len = calloc(k, sizeof *len)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        else
            local = list_checks(s, idx, held, &work, len, &names, &nlen);
        ok = local == CKPT_OK;
    }
    uint64_t head[3] = { (uint64_t)ok, nlen, leader && idx ? idx->n_files : 0 };
    if (MPI_Bcast(head, 3, MPI_UINT64_T, 0, nc) != MPI_SUCCESS) {
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the check of %s's files failed", name);
        goto out;
    }
    if (!head[0])
        goto out; /* the leader failed: its error reaches every rank at the agreement */
    size_t nf = (size_t)head[2];
    nlen = head[1];
    if (MPI_Scatter(len, 1, MPI_UINT64_T, &mine, 1, MPI_UINT64_T, 0, nc) != MPI_SUCCESS) {
        local = ckpt__error(CKPT_EMPI, "MPI_Scatter of the check of %s's files failed", name);
        goto out;
    }
    if (!leader) {
        names = malloc(nlen ? (size_t)nlen : 1);
        if (!(work = calloc(1, sizeof *work)) ||
            !(work[0] = malloc(mine ? (size_t)mine * sizeof **work : 1)))
            local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory to check %s's files",
                                s->rank, name);
    }
    bad = calloc(nf + 1, 1);
    fname = malloc((nf ? nf : 1) * sizeof *fname);
    if ((!names || !bad || !fname) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory to check %s's files", s->rank,
                            name);
    int can = local == CKPT_OK, all = 0;
    if (MPI_Allreduce(&can, &all, 1, MPI_INT, MPI_MIN, nc) != MPI_SUCCESS) {
        local = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the check of %s's files failed", name);
        goto out;
    }
    if (!all) {
        if (local == CKPT_OK)
            local = ckpt__error(CKPT_EPEER, "a rank of node %d cannot check %s's files", s->node,
                                name);
        goto out;
    }
    int rc = ckpt__bcast_bytes(nc, 0, names, nlen, s->chunk);
    for (size_t r = 1; leader && rc == CKPT_OK && r < k; r++)
        rc = ckpt__send_bytes(nc, (int)r, TAG_CHECK, work[r], len[r] * sizeof **work, s->chunk);
    if (!leader && rc == CKPT_OK)
        rc = ckpt__recv_bytes(nc, 0, TAG_CHECK, work[0], mine * sizeof **work, s->chunk);
    if (rc != CKPT_OK) {
        local = rc;
        goto out;
    }
    for (size_t f = 0, at = 0; f < nf; f++) { /* the names, by file number */
        fname[f] = at < nlen ? names + at : "";
        at += strnlen(fname[f], (size_t)(nlen - (at < nlen ? at : nlen))) + 1;
    }
    local = ckpt__cache_dirfd(s, &dirfd);
    if (local == CKPT_OK)
        local = check_list(s, work[0], leader ? len[0] : mine, fname, nf, bad, dirfd);
    bad[nf] = local != CKPT_OK;
    if (MPI_Allreduce(MPI_IN_PLACE, bad, (int)nf + 1, MPI_UNSIGNED_CHAR, MPI_MAX, nc) !=
        MPI_SUCCESS) {
        if (local == CKPT_OK)
            local = ckpt__error(CKPT_EMPI, "MPI_Allreduce of %s's damaged files failed", name);
        goto out;
    }
    if (leader) {
        for (size_t f = 0; f < nf; f++)
            if (bad[f])
                held[f] = RB_DAMAGED;
        if (bad[nf] && local == CKPT_OK)
            local = ckpt__error(CKPT_EPEER, "a rank of node %d could not check %s's files",
                                s->node, name);
    }
out:
    for (size_t r = 0; work && r < (leader ? k : 1); r++)
        free(work[r]);
    free(work);
    free(len);
    free(names);
    free(fname);
    free(bad);
    ckpt__close(dirfd);
    return local;
}

/* " node K's copy is damaged" / " node K has none", for the message of a lost file. */
static void copy_state(char *out, size_t n, int node, uint8_t state)
{
    snprintf(out, n, state == RB_DAMAGED ? "node %d's copy is damaged" : "node %d has none",
             node);
}

/* This node's copy of the index `iname`: *have a regular file under its name, *intact its
 * container checks (*own, *olen its bytes, *payload and *plen inside them); a damaged one is
 * said. A missing, planted or damaged index is what the rebuild looks for: the caller's pending
 * error is put back. Local. */
static void own_index(const ckpt_saver *s, int dirfd, const char *iname, int *have, int *intact,
                      uint8_t **own, size_t *olen, const uint8_t **payload, size_t *plen)
{
    ckpt__saved_error keep = ckpt__error_save();
    *have = ckpt__stat_regular(NULL, dirfd, iname, s->cache.dir) == CKPT_OK;
    *intact = *have &&
              ckpt__read_file_at(own, olen, dirfd, iname, (size_t)1 << 34, s->cache.dir) ==
                  CKPT_OK &&
              ckpt__container_open(payload, plen, *own, *olen, CKPT__MAGIC_INDEX, iname) ==
                  CKPT_OK;
    if (*have && !*intact)
        ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s in %s is damaged: %s", s->node, iname,
                  s->cache.dir, ckpt_error_last() ? ckpt_error_last()->message : "");
    ckpt__error_restore(&keep);
}

/* What this node holds of each data file of `idx` (held[f]: RB_*), by its size. A missing file
 * is what this looks for: the caller's pending error is put back. Local. */
static void holdings(const ckpt_saver *s, const Mpickpt__Index *idx, int dirfd, uint8_t *held)
{
    ckpt__saved_error keep = ckpt__error_save();
    for (size_t f = 0; f < idx->n_files; f++) {
        uint64_t size = 0;
        if (ckpt__stat_regular(&size, dirfd, idx->files[f]->name, s->cache.dir) != CKPT_OK)
            held[f] = RB_NONE;
        else if (size == idx->files[f]->bytes)
            held[f] = RB_INTACT;
        else {
            held[f] = RB_DAMAGED;
            ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s has %llu bytes, the index says %llu",
                      s->node, idx->files[f]->name, (unsigned long long)size,
                      (unsigned long long)idx->files[f]->bytes);
        }
    }
    ckpt__error_restore(&keep);
}

/* The plan, the same on every leader (so are its errors): for each file, each target lacking it
 * is sent it by its home, else its partner, else the first node holding it. all[k * nf + f]:
 * what node k holds of file f. `local` in, this leader's status out. Local. */
static int plan_moves(const ckpt_saver *s, const Mpickpt__Index *idx, const char *name,
                      int per_node, const uint8_t *all, rb_move *plan, int local)
{
    size_t nf = idx ? idx->n_files : 0;
    int n = s->nnodes;
    for (size_t f = 0; f < nf; f++) {
        const uint8_t *h = all + f; /* h[k * nf]: node k holds file f */
        rb_move *mv = &plan[f];
        int hm = home_node(s, idx->files[f]->name, name, per_node);
        mv->from = mv->to[0] = mv->to[1] = -1;
        if (hm < 0) {
            if (local == CKPT_OK)
                local = ckpt__error(CKPT_EINVAL,
                                    "%s was not written by a job of this shape: the cache "
                                    "rebuilds on the writer's shape only",
                                    idx->files[f]->name);
            continue;
        }
        int targets[2] = { hm, s->cache.pnode ? s->cache.pnode[hm] : -1 }, damaged = 0;
        if (h[(size_t)hm * nf] == RB_INTACT)
            mv->from = hm;
        else if (targets[1] >= 0 && h[(size_t)targets[1] * nf] == RB_INTACT)
            mv->from = targets[1];
        for (int k = 0; k < n; k++) {
            if (mv->from < 0 && h[(size_t)k * nf] == RB_INTACT)
                mv->from = k;
            damaged |= h[(size_t)k * nf] == RB_DAMAGED;
        }
        for (int t = 0; t < 2; t++) {
            if (targets[t] < 0 || h[(size_t)targets[t] * nf] == RB_INTACT)
                continue;
            if (mv->from < 0) {
                char a[64], b[64] = "";
                copy_state(a, sizeof a, hm, h[(size_t)hm * nf]);
                if (targets[1] >= 0)
                    copy_state(b, sizeof b, targets[1], h[(size_t)targets[1] * nf]);
                if (local == CKPT_OK && !damaged)
                    local = ckpt__error(CKPT_ENOTFOUND,
                                        "%s is lost: no node's cache holds it (its node %d%s)",
                                        idx->files[f]->name, hm,
                                        s->cache.pnode ? " and its partner both lost it" : "");
                if (local == CKPT_ENOTFOUND)
                    ckpt__error_set_reason(local, CKPT_REASON_NO_CHECKPOINT);
                else if (local == CKPT_OK)
                    local = ckpt__error(CKPT_ECORRUPT,
                                        "%s is lost: no node's cache holds an intact copy (its "
                                        "%s%s%s)",
                                        idx->files[f]->name, a, targets[1] >= 0 ? ", its partner "
                                                                                : "",
                                        b);
                break;
            }
            mv->to[t] = targets[t];
        }
    }
    return local;
}

/* The files this node sends (plan[f].from is this node), mapped read-only into maps[f].
 * `local` in, this leader's status out. Local. */
static int map_sends(const ckpt_saver *s, const Mpickpt__Index *idx, const rb_move *plan,
                     int dirfd, void **maps, int local)
{
    size_t nf = idx ? idx->n_files : 0;
    int me = s->node;
    if (local == CKPT_OK) /* MPICKPT_FAULT=<leader>:rebuild: as if it could not map them */
        local = ckpt__fault(s->rank, "rebuild");
    for (size_t f = 0; f < nf && local == CKPT_OK; f++) {
        const rb_move *mv = &plan[f];
        uint64_t bytes = idx->files[f]->bytes;
        if (mv->from != me || (mv->to[0] < 0 && mv->to[1] < 0) || bytes == 0)
            continue;
        int fd = -1;
        local = ckpt__file_open(&fd, NULL, dirfd, idx->files[f]->name, O_RDONLY, s->cache.dir);
        void *m = local == CKPT_OK ? mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED, fd, 0)
                                   : MAP_FAILED;
        if (local == CKPT_OK && m == MAP_FAILED)
            local = ckpt__errno(errno, "mmap (rebuild)", idx->files[f]->name);
        ckpt__close(fd);
        if (m != MAP_FAILED)
            maps[f] = m;
    }
    return local;
}

/* The bytes among the leaders: every send posted first, then the receives (any pattern, no
 * deadlock), each received file written whole under its name (ckpt__cache_recv_file).
 * *local: this leader's status; *rebuilt counts the files it received. Collective over the
 * leaders; an MPI failure is returned. */
static int move_files(ckpt_saver *s, const Mpickpt__Index *idx, const rb_move *plan,
                      const uint8_t *held, void **maps, MPI_Request *req, uint8_t *buf,
                      uint64_t chunk, int dirfd, int *local, int *rebuilt)
{
    MPI_Comm lc = s->leader_comm;
    size_t nf = idx ? idx->n_files : 0, nreq = 0;
    int me = s->node, rc = CKPT_OK;
    for (size_t f = 0; f < nf && rc == CKPT_OK; f++)
        for (int t = 0; t < 2 && rc == CKPT_OK; t++) {
            const rb_move *mv = &plan[f];
            uint64_t bytes = idx->files[f]->bytes;
            if (mv->from != me || mv->to[t] < 0)
                continue;
            rc = ckpt__isend_bytes(lc, mv->to[t], TAG_RB, maps[f], bytes, chunk, req, &nreq,
                                   "for the rebuild");
        }
    for (size_t f = 0; f < nf && rc == CKPT_OK; f++)
        for (int t = 0; t < 2 && rc == CKPT_OK; t++) {
            const rb_move *mv = &plan[f];
            if (mv->to[t] != me)
                continue;
            rc = ckpt__cache_recv_file(s, lc, mv->from, TAG_RB, dirfd, idx->files[f]->name,
                                       idx->files[f]->bytes, buf, chunk, local, "rebuilt file");
            *rebuilt += *local == CKPT_OK && rc == CKPT_OK;
            if (*local == CKPT_OK && rc == CKPT_OK && held[f] == RB_DAMAGED)
                ckpt__log(CKPT_LOG_WARN, "node %d: its damaged copy of %s replaced by node %d's "
                                         "intact one",
                          me, idx->files[f]->name, mv->from);
        }
    if (nreq && MPI_Waitall((int)nreq, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the rebuild failed");
    return rc;
}

/* 1. the index, from the lowest node that has an intact copy (this node's: have, intact, its
 * bytes *own of olen, their payload): every leader gets its bytes (*file, *flen) and parses them
 * (*idx); a node lacking the index, or holding other bytes under its name (damaged), writes the
 * source's (*rebuilt). *local: this leader's status; a failure every leader meets is returned.
 * Collective over the leaders. */
static int share_index(ckpt_saver *s, const char *iname, int dirfd, int have, int intact,
                       uint8_t **own, size_t olen, const uint8_t *payload, size_t plen,
                       uint8_t **file, size_t *flen, Mpickpt__Index **idx, int *local,
                       int *rebuilt)
{
    MPI_Comm lc = s->leader_comm;
    int me = s->node, n = s->nnodes, rc = CKPT_OK;
    int mine[2] = { intact ? me : n, -have }, got[2] = { n, 0 };
    if (MPI_Allreduce(mine, got, 2, MPI_INT, MPI_MIN, lc) != MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the index's holder failed");
        return rc;
    }
    int src = got[0];
    if (src == n) {
        rc = ckpt__error(CKPT_ENOTFOUND, got[1] ? "no node's cache holds an intact copy of %s"
                                                : "no node's cache holds %s",
                         iname);
        ckpt__error_set_reason(rc, CKPT_REASON_NO_CHECKPOINT);
        return rc;
    }
    if (me == src) { /* its own copy is the one sent */
        *file = *own, *flen = olen;
        *own = NULL;
    }
    int64_t head[2] = { *local, (int64_t)*flen };
    if (MPI_Bcast(head, 2, MPI_INT64_T, src, lc) != MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index's size failed");
        return rc;
    }
    if (head[0] != CKPT_OK) { /* the source's own error, for every leader */
        rc = me == src ? *local : ckpt__error((int)head[0], "node %d's %s is damaged", src, iname);
        return rc;
    }
    if (me != src && !(*file = malloc(head[1] ? (size_t)head[1] : 1)) && *local == CKPT_OK)
        *local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for the index", s->rank);
    if (!leaders_can(lc, *file != NULL, &rc)) {
        if (rc == CKPT_OK)
            rc = *local != CKPT_OK
                     ? *local
                     : ckpt__error(CKPT_EPEER, "a node's leader cannot hold %s", iname);
        return rc;
    }
    rc = ckpt__bcast_bytes(lc, src, *file, (uint64_t)head[1], s->chunk);
    *flen = (size_t)head[1];
    if (rc != CKPT_OK)
        return rc;
    if (*local == CKPT_OK && me != src)
        *local = ckpt__container_open(&payload, &plen, *file, *flen, CKPT__MAGIC_INDEX, iname);
    if (*local == CKPT_OK)
        *local = ckpt__index_parse(idx, payload, plen, iname, NULL, 1);
    /* a node lacking the index, or holding other bytes under its name (damaged), takes the
     * source's */
    if (*local == CKPT_OK && me != src &&
        (!intact || olen != *flen || memcmp(*own, *file, *flen) != 0)) {
        *local = ckpt__write_file_atomic_at(dirfd, iname, *file, *flen, s->cache.dir, NULL);
        *rebuilt += *local == CKPT_OK;
        if (*local == CKPT_OK && have)
            ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s replaced by node %d's", me, iname,
                      src);
    }
    return rc;
}

/* The leaders' part (s->node_rank == 0). Every step that may fail on one leader (reading,
 * allocating, mapping) comes before an agreement of the leaders, and messages are posted only
 * once every leader can take part: a leader never waits for a message another one will not
 * send. With partner redundancy it also leads its node's check of the files (check_node), once
 * on every path: its node's other ranks wait for it. */
static int rebuild_leader(ckpt_saver *s, const char *name, int *rebuilt)
{
    MPI_Comm lc = s->leader_comm;
    int n = s->nnodes, local = CKPT_OK, rc = CKPT_OK, dirfd = -1;
    int check = s->cache.pnode != NULL, checked = 0;
    char iname[320];
    uint8_t *file = NULL, *own = NULL, *held = NULL, *all = NULL, *buf = NULL;
    Mpickpt__Index *idx = NULL;
    rb_move *plan = NULL;
    void **maps = NULL;
    MPI_Request *req = NULL;
    size_t nf = 0;
    local = ckpt__path(iname, sizeof iname, "%s.index", name);
    if (local == CKPT_OK) /* (a node that lost everything lost its directory too: made again
                           * before the rebuild, ckpt__cache_reopen) */
        local = ckpt__cache_dirfd(s, &dirfd);
    /* A copy of the index is a regular file, as a held data file is (step 2). Anything else
     * planted under its name (a link, a FIFO, a directory) is no copy: taken for one, it would
     * keep this node from being rebuilt, or, as the source, fail the restore on every leader
     * while another node holds the index. It is replaced by the rename of the rebuilt index
     * below (a directory fails that rename, naming it). A copy whose container does not check
     * (its CRC: a flipped byte, a truncation) is no copy either, and is replaced the same way. */
    int have = 0, intact = 0;
    const uint8_t *payload = NULL;
    size_t plen = 0, flen = 0, olen = 0;
    if (local == CKPT_OK)
        own_index(s, dirfd, iname, &have, &intact, &own, &olen, &payload, &plen);
    /* 1. the index, from the lowest node that has an intact copy */
    rc = share_index(s, iname, dirfd, have, intact, &own, olen, payload, plen, &file, &flen, &idx,
                     &local, rebuilt);
    if (rc != CKPT_OK)
        goto out;
    free(own);
    own = NULL;
    /* 2. who holds what (every leader parsed the same index, or failed to); what it needs
     * allocated first */
    nf = idx ? idx->n_files : 0;
    int per_node = idx && idx->header->layout == MPICKPT__LAYOUT__LAYOUT_PER_NODE;
    uint64_t chunk = s->chunk < ((uint64_t)64 << 20) ? s->chunk : ((uint64_t)64 << 20);
    size_t cap = 0;
    for (size_t f = 0; f < nf; f++)
        cap += 2 * (size_t)((idx->files[f]->bytes + chunk - 1) / chunk);
    if (local == CKPT_OK) {
        held = calloc(nf ? nf : 1, 1);
        all = malloc((nf ? nf : 1) * (size_t)n);
        plan = calloc(nf ? nf : 1, sizeof *plan);
        maps = calloc(nf ? nf : 1, sizeof *maps);
        req = malloc((cap ? cap : 1) * sizeof *req);
        buf = malloc((size_t)chunk);
        if (!held || !all || !plan || !maps || !req || !buf)
            local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the rebuild", s->rank);
    }
    if (!leaders_can(lc, local == CKPT_OK, &rc))
        goto out; /* a leader that failed reports it */
    holdings(s, idx, dirfd, held);
    /* the bytes of what looks whole, against the index's checksums, by the node's ranks */
    if (check) {
        checked = 1;
        local = check_node(s, name, 1, idx, held);
    }
    if (MPI_Allgather(held, (int)(nf ? nf : 1), MPI_BYTE, all, (int)(nf ? nf : 1), MPI_BYTE, lc) !=
        MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Allgather of the holdings failed");
        goto out;
    }
    /* 3. the plan, the same on every leader (so are its errors) */
    local = plan_moves(s, idx, name, per_node, all, plan, local);
    /* the files this node sends, mapped read-only; then the leaders agree to move bytes */
    local = map_sends(s, idx, plan, dirfd, maps, local);
    if (!leaders_can(lc, local == CKPT_OK, &rc))
        goto out;
    /* 4. the bytes */
    rc = move_files(s, idx, plan, held, maps, req, buf, chunk, dirfd, &local, rebuilt);
    if (local == CKPT_OK && *rebuilt)
        local = ckpt__fsync_fd(dirfd, s->cache.dir);
out:
    if (check && !checked) /* its node's ranks wait for the check: told there is none */
        (void)check_node(s, name, 0, NULL, NULL);
    for (size_t f = 0; maps && f < nf; f++)
        if (maps[f])
            munmap(maps[f], (size_t)idx->files[f]->bytes);
    free(maps);
    free(plan);
    free(req);
    free(buf);
    free(held);
    free(all);
    free(file);
    free(own);
    if (idx)
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
    else if (s->nnodes > 1 && s->cache.pnode) /* its share of the check of its node's files */
        local = check_node(s, name, 0, NULL, NULL);
    if (rebuilt)
        ckpt__log(CKPT_LOG_INFO, "node %d: %d files of %s rebuilt in its cache %s", s->node,
                  rebuilt, name, s->cache.dir);
    return ckpt_mpi_agree(s->comm, local);
}
