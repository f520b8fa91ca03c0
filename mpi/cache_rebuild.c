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

/* Piece `p` of tensor `tensor`, `bytes` at p->file_offset of open file `fd` (`fsize` bytes),
 * against the index's checksums: each block's CRC-32C where the piece has block checksums (format
 * 2), and the piece's CRC-32C (then combined from its blocks', so the bytes are read once), through
 * `buf` (`cap` bytes). CKPT_OK, or CKPT_ECORRUPT / CKPT_EIO with a message naming the tensor (the
 * caller names the file). */
static int check_piece(int fd, uint64_t fsize, const char *tensor, const Mpickpt__Piece *p,
                       uint8_t *buf, size_t cap)
{
    if (p->file_offset > fsize || p->bytes > fsize - p->file_offset)
        return ckpt__error(CKPT_ECORRUPT, "tensor '%s' (rank %d): bytes %llu..%llu lie past the "
                                          "file's end (%llu bytes)",
                           tensor, p->rank, (unsigned long long)p->file_offset,
                           (unsigned long long)(p->file_offset + p->bytes),
                           (unsigned long long)fsize);
    int blocks = p->n_block_crc32c > 0 && p->block_bytes > 0;
    uint64_t bsize = blocks ? p->block_bytes : p->bytes;
    uint32_t whole = 0;
    size_t b = 0;
    for (uint64_t off = 0; off < p->bytes; off += bsize, b++) {
        uint64_t blen = p->bytes - off < bsize ? p->bytes - off : bsize;
        uint32_t crc = 0;
        for (uint64_t done = 0; done < blen;) {
            size_t n = blen - done < cap ? (size_t)(blen - done) : cap;
            int rc = ckpt__pread_crc(fd, p->file_offset + off + done, buf, n, &crc);
            if (rc != CKPT_OK)
                return ckpt__error_wrap(rc, "tensor '%s' (rank %d)", tensor, p->rank);
            done += n;
        }
        if (blocks && (b >= p->n_block_crc32c || crc != p->block_crc32c[b]))
            return ckpt__error(CKPT_ECORRUPT,
                               "tensor '%s' (rank %d): block %zu checksum mismatch (stored "
                               "%08x, computed %08x)",
                               tensor, p->rank, b,
                               b < p->n_block_crc32c ? p->block_crc32c[b] : 0u, crc);
        whole = blocks ? ckpt__crc32c_combine(whole, crc, blen) : crc;
    }
    if (whole != p->crc32c)
        return ckpt__error(CKPT_ECORRUPT,
                           "tensor '%s' (rank %d): checksum mismatch (stored %08x, computed %08x)",
                           tensor, p->rank, p->crc32c, whole);
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

/* This rank's share of the check of its node's intact-looking files (held[f] == RB_INTACT):
 * every piece of those files with a recorded offset, in index order, cut into node_size runs of
 * about equal bytes; this rank takes run node_rank. bad[f] is set for a file with a piece that
 * fails (its first failure logged); CKPT_OK, or an error that stops the check (out of memory). */
static int check_share(const ckpt_saver *s, const char *name, const Mpickpt__Index *idx,
                       const uint8_t *held, uint8_t *bad, int dirfd)
{
    size_t nf = idx->n_files;
    rb_name *names = malloc((nf ? nf : 1) * sizeof *names);
    int *fds = malloc((nf ? nf : 1) * sizeof *fds);
    uint64_t *sizes = calloc(nf ? nf : 1, sizeof *sizes);
    size_t cap = (size_t)256 << 10; /* ckpt__pread_crc's own chunk: checked while in cache */
    uint8_t *buf = malloc(cap);
    int rc = CKPT_OK;
    if (!names || !fds || !sizes || !buf)
        rc = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory to check %s's files", s->rank,
                         name);
    for (size_t f = 0; rc == CKPT_OK && f < nf; f++) {
        names[f].name = idx->files[f]->name;
        names[f].f = f;
        fds[f] = -1;
    }
    if (rc == CKPT_OK)
        qsort(names, nf, sizeof *names, cmp_name);
    /* the runs: pass 0 counts the bytes, pass 1 checks this rank's run */
    uint64_t total = 0, at = 0, per = 1;
    for (int pass = 0; rc == CKPT_OK && pass < 2; pass++) {
        for (size_t t = 0; t < idx->n_tensors; t++) {
            const Mpickpt__Tensor *tn = idx->tensors[t];
            for (size_t j = 0; j < tn->n_pieces; j++) {
                const Mpickpt__Piece *p = tn->pieces[j];
                rb_name key = { p->file, 0 };
                const rb_name *hit = bsearch(&key, names, nf, sizeof *names, cmp_name);
                /* a piece without a recorded offset is reached through HDF5 only: the restore's
                 * read checks it (the saver records every offset, docs/format.md) */
                if (!hit || held[hit->f] != RB_INTACT || !p->bytes || !p->file_offset)
                    continue;
                uint64_t mine = at / per;
                at += p->bytes;
                if (pass == 0) {
                    total += p->bytes;
                    continue;
                }
                size_t f = hit->f;
                if (mine != (uint64_t)s->node_rank || bad[f])
                    continue;
                int st = CKPT_OK;
                if (fds[f] < 0)
                    st = ckpt__file_open(&fds[f], &sizes[f], dirfd, p->file, O_RDONLY,
                                         s->cache.dir);
                if (st == CKPT_OK)
                    st = check_piece(fds[f], sizes[f], tn->name, p, buf, cap);
                if (st != CKPT_OK) { /* damage (or a file that went away): not an error here */
                    bad[f] = 1;
                    const ckpt_error *e = ckpt_error_last();
                    ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s in %s is damaged: %s",
                              s->node, p->file, s->cache.dir, e ? e->message : ckpt_strerror(st));
                    ckpt_error_clear();
                }
            }
        }
        per = total / (uint64_t)s->node_size + 1;
        at = 0;
    }
    for (size_t f = 0; fds && f < nf; f++)
        ckpt__close(fds[f]);
    free(names);
    free(fds);
    free(sizes);
    free(buf);
    return rc;
}

/*
 * The check of the node's data files, collective over s->node_comm (with partner redundancy
 * only: without another copy a damaged file cannot be repaired, and the restore's own read finds
 * the damage). The leader passes `ok` (0: it failed before, and the node's other ranks return at
 * once), the index (its payload, `plen` bytes, parsed as `lidx`) and held[]: what its node holds
 * at the recorded size. It broadcasts them; the other ranks pass NULLs and parse the payload (the
 * leader validated it). Every rank checks its share (check_share); a byte-wise maximum over the
 * node gives the leader the damaged files, which become RB_DAMAGED in held[], and whether a rank
 * failed (out of memory). Returns this rank's status; damage is not an error.
 */
static int check_node(ckpt_saver *s, const char *name, int ok, const uint8_t *payload,
                      size_t plen, const Mpickpt__Index *lidx, uint8_t *held)
{
    MPI_Comm nc = s->node_comm;
    int leader = s->node_rank == 0, local = CKPT_OK, dirfd = -1;
    int64_t head[3] = { ok, (int64_t)plen, lidx ? (int64_t)lidx->n_files : 0 };
    if (MPI_Bcast(head, 3, MPI_INT64_T, 0, nc) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Bcast of the check of %s's files failed", name);
    if (!head[0])
        return CKPT_OK; /* the leader failed: its error reaches every rank at the agreement */
    size_t nf = (size_t)head[2];
    uint8_t *pay = leader ? (uint8_t *)payload : malloc(head[1] ? (size_t)head[1] : 1);
    uint8_t *hb = leader ? held : malloc(nf ? nf : 1);
    uint8_t *bad = calloc(nf + 1, 1);
    Mpickpt__Index *idx = NULL;
    int can = pay && hb && bad, all = 0;
    if (!can)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory to check %s's files", s->rank,
                            name);
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
    int rc = ckpt__bcast_bytes(nc, 0, pay, (uint64_t)head[1], s->chunk);
    if (rc == CKPT_OK)
        rc = ckpt__bcast_bytes(nc, 0, hb, nf, s->chunk);
    if (rc != CKPT_OK) {
        local = rc;
        goto out;
    }
    if (!leader)
        local = ckpt__index_parse(&idx, pay, (size_t)head[1], name, NULL, 0);
    if (local == CKPT_OK)
        local = ckpt__dir_open(&dirfd, s->cache.dir);
    if (local == CKPT_OK)
        local = check_share(s, name, leader ? lidx : idx, hb, bad, dirfd);
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
    if (idx)
        mpickpt__index__free_unpacked(idx, NULL);
    if (!leader) {
        free(pay);
        free(hb);
    }
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

/* The leaders' part (s->node_rank == 0). Every step that may fail on one leader (reading,
 * allocating, mapping) comes before an agreement of the leaders, and messages are posted only
 * once every leader can take part: a leader never waits for a message another one will not
 * send. With partner redundancy it also leads its node's check of the files (check_node), once
 * on every path: its node's other ranks wait for it. */
static int rebuild_leader(ckpt_saver *s, const char *name, int *rebuilt)
{
    MPI_Comm lc = s->leader_comm;
    int me = s->node, n = s->nnodes, local = CKPT_OK, rc = CKPT_OK, dirfd = -1;
    int check = s->cache.pnode != NULL, checked = 0;
    char iname[320];
    uint8_t *file = NULL, *own = NULL, *held = NULL, *all = NULL, *buf = NULL;
    Mpickpt__Index *idx = NULL;
    rb_move *plan = NULL;
    void **maps = NULL;
    MPI_Request *req = NULL;
    size_t nf = 0, nreq = 0;
    local = ckpt__path(iname, sizeof iname, "%s.index", name);
    if (local == CKPT_OK) /* a node that lost everything lost its directory too */
        local = ckpt__mkdir_p(s->cache.dir, 0700);
    if (local == CKPT_OK)
        local = ckpt__dir_open(&dirfd, s->cache.dir);
    /* A copy of the index is a regular file, as a held data file is (step 2). Anything else
     * planted under its name (a link, a FIFO, a directory) is no copy: taken for one, it would
     * keep this node from being rebuilt, or, as the source, fail the restore on every leader
     * while another node holds the index. It is replaced by the rename of the rebuilt index
     * below (a directory fails that rename, naming it). A copy whose container does not check
     * (its CRC: a flipped byte, a truncation) is no copy either, and is replaced the same way. */
    int have = 0, intact = 0;
    const uint8_t *payload = NULL;
    size_t plen = 0, flen = 0, olen = 0;
    if (local == CKPT_OK) {
        have = ckpt__stat_regular(NULL, dirfd, iname, s->cache.dir) == CKPT_OK;
        intact = have &&
                 ckpt__read_file_at(&own, &olen, dirfd, iname, (size_t)1 << 34, s->cache.dir) ==
                     CKPT_OK &&
                 ckpt__container_open(&payload, &plen, own, olen, CKPT__MAGIC_INDEX, iname) ==
                     CKPT_OK;
        if (have && !intact)
            ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s in %s is damaged: %s", me, iname,
                      s->cache.dir, ckpt_error_last() ? ckpt_error_last()->message : "");
        ckpt_error_clear(); /* a missing, planted or damaged index is what this looks for */
    }
    /* 1. the index, from the lowest node that has an intact copy */
    int mine[2] = { intact ? me : n, -have }, got[2] = { n, 0 };
    if (MPI_Allreduce(mine, got, 2, MPI_INT, MPI_MIN, lc) != MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the index's holder failed");
        goto out;
    }
    int src = got[0];
    if (src == n) {
        rc = ckpt__error(CKPT_ENOTFOUND, got[1] ? "no node's cache holds an intact copy of %s"
                                                : "no node's cache holds %s",
                         iname);
        goto out;
    }
    if (me == src) { /* its own copy is the one sent */
        file = own, flen = olen;
        own = NULL;
    }
    int64_t head[2] = { local, (int64_t)flen };
    if (MPI_Bcast(head, 2, MPI_INT64_T, src, lc) != MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index's size failed");
        goto out;
    }
    if (head[0] != CKPT_OK) { /* the source's own error, for every leader */
        rc = me == src ? local : ckpt__error((int)head[0], "node %d's %s is damaged", src, iname);
        goto out;
    }
    if (me != src && !(file = malloc(head[1] ? (size_t)head[1] : 1)) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: no room for the index", s->rank);
    if (!leaders_can(lc, file != NULL, &rc)) {
        if (rc == CKPT_OK)
            rc = local != CKPT_OK
                     ? local
                     : ckpt__error(CKPT_EPEER, "a node's leader cannot hold %s", iname);
        goto out;
    }
    rc = ckpt__bcast_bytes(lc, src, file, (uint64_t)head[1], s->chunk);
    flen = (size_t)head[1];
    if (rc != CKPT_OK)
        goto out;
    if (local == CKPT_OK && me != src)
        local = ckpt__container_open(&payload, &plen, file, flen, CKPT__MAGIC_INDEX, iname);
    if (local == CKPT_OK)
        local = ckpt__index_parse(&idx, payload, plen, iname, NULL, 1);
    /* a node lacking the index, or holding other bytes under its name (damaged), takes the
     * source's */
    if (local == CKPT_OK && me != src &&
        (!intact || olen != flen || memcmp(own, file, flen) != 0)) {
        local = ckpt__write_file_atomic_at(dirfd, iname, file, flen, s->cache.dir, NULL);
        *rebuilt += local == CKPT_OK;
        if (local == CKPT_OK && have)
            ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s replaced by node %d's", me, iname,
                      src);
    }
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
    for (size_t f = 0; f < nf; f++) {
        uint64_t size = 0;
        if (ckpt__stat_regular(&size, dirfd, idx->files[f]->name, s->cache.dir) != CKPT_OK)
            held[f] = RB_NONE;
        else if (size == idx->files[f]->bytes)
            held[f] = RB_INTACT;
        else {
            held[f] = RB_DAMAGED;
            ckpt__log(CKPT_LOG_WARN, "node %d: its copy of %s has %llu bytes, the index says %llu",
                      me, idx->files[f]->name, (unsigned long long)size,
                      (unsigned long long)idx->files[f]->bytes);
        }
    }
    ckpt_error_clear(); /* a missing file is what this looks for */
    /* the bytes of what looks whole, against the index's checksums, by the node's ranks */
    if (check) {
        checked = 1;
        local = check_node(s, name, 1, payload, plen, idx, held);
    }
    if (MPI_Allgather(held, (int)(nf ? nf : 1), MPI_BYTE, all, (int)(nf ? nf : 1), MPI_BYTE, lc) !=
        MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Allgather of the holdings failed");
        goto out;
    }
    /* 3. the plan, the same on every leader (so are its errors): for each file, each target
     * lacking it is sent it by its home, else its partner, else the first node holding it */
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
    /* the files this node sends, mapped read-only; then the leaders agree to move bytes */
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
    if (!leaders_can(lc, local == CKPT_OK, &rc))
        goto out;
    /* 4. every send posted first, then the receives (any pattern, no deadlock) */
    for (size_t f = 0; f < nf && rc == CKPT_OK; f++)
        for (int t = 0; t < 2 && rc == CKPT_OK; t++) {
            const rb_move *mv = &plan[f];
            uint64_t bytes = idx->files[f]->bytes;
            if (mv->from != me || mv->to[t] < 0)
                continue;
            for (uint64_t off = 0; off < bytes && rc == CKPT_OK; off += chunk) {
                uint64_t c = bytes - off < chunk ? bytes - off : chunk;
                if (MPI_Isend((uint8_t *)maps[f] + off, (int)c, MPI_BYTE, mv->to[t], TAG_RB, lc,
                              &req[nreq++]) != MPI_SUCCESS)
                    rc = ckpt__error(CKPT_EMPI, "MPI_Isend for the rebuild failed");
            }
        }
    for (size_t f = 0; f < nf && rc == CKPT_OK; f++)
        for (int t = 0; t < 2 && rc == CKPT_OK; t++) {
            const rb_move *mv = &plan[f];
            if (mv->to[t] != me)
                continue;
            rc = ckpt__cache_recv_file(s, lc, mv->from, TAG_RB, dirfd, idx->files[f]->name,
                                       idx->files[f]->bytes, buf, chunk, &local, "rebuilt file");
            *rebuilt += local == CKPT_OK && rc == CKPT_OK;
            if (local == CKPT_OK && rc == CKPT_OK && held[f] == RB_DAMAGED)
                ckpt__log(CKPT_LOG_WARN, "node %d: its damaged copy of %s replaced by node %d's "
                                         "intact one",
                          me, idx->files[f]->name, mv->from);
        }
    if (nreq && MPI_Waitall((int)nreq, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the rebuild failed");
    if (local == CKPT_OK && *rebuilt)
        local = ckpt__fsync_fd(dirfd, s->cache.dir);
out:
    if (check && !checked) /* its node's ranks wait for the check: told there is none */
        (void)check_node(s, name, 0, NULL, 0, NULL, NULL);
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
        local = check_node(s, name, 0, NULL, 0, NULL, NULL);
    if (rebuilt)
        ckpt__log(CKPT_LOG_INFO, "node %d: %d files of %s rebuilt in its cache %s", s->node,
                  rebuilt, name, s->cache.dir);
    return ckpt_mpi_agree(s->comm, local);
}
