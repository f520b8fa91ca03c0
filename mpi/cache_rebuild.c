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
 * file). A node holds a file or the index only as a regular file: a link, FIFO or directory
 * planted under the name counts as missing. From that, every leader computes the same plan: for
 * each file, each target (home, partner) that lacks it is sent it by the first node that holds it
 * (home first, then partner, then any). A file that no node holds is lost: the rebuild fails
 * naming it, and the manager falls back to an older checkpoint. The leaders agree before any
 * bytes move (every one can hold, map and receive what the plan gives it); then every leader
 * posts all its sends (nonblocking, from a read-only mapping) before it receives, so transfers in
 * any pattern cannot deadlock; a received file is written under a temp name (O_EXCL), fsynced and
 * renamed: the rename replaces only what stood under a name the node lacked (a planted link or
 * FIFO, a file of the wrong size), never following it; a planted directory fails the rename, and
 * the rebuild, naming it.
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

/* The leaders' part (s->node_rank == 0). Every step that may fail on one leader (reading,
 * allocating, mapping) comes before an agreement of the leaders, and messages are posted only
 * once every leader can take part: a leader never waits for a message another one will not
 * send. */
static int rebuild_leader(ckpt_saver *s, const char *name, int *rebuilt)
{
    MPI_Comm lc = s->leader_comm;
    int me = s->node, n = s->nnodes, local = CKPT_OK, rc = CKPT_OK, dirfd = -1;
    char iname[320];
    uint8_t *file = NULL, *held = NULL, *all = NULL, *buf = NULL;
    Mpickpt__Index *idx = NULL;
    rb_move *plan = NULL;
    void **maps = NULL;
    MPI_Request *req = NULL;
    size_t nf = 0, nreq = 0;
    local = ckpt__path(iname, sizeof iname, "%s.index", name);
    if (local == CKPT_OK) /* (a node that lost everything lost its directory too: made again
                           * before the rebuild, ckpt__cache_reopen) */
        local = ckpt__cache_dirfd(s, &dirfd);
    /* A copy of the index is a regular file, as a held data file is (step 2). Anything else
     * planted under its name (a link, a FIFO, a directory) is no copy: taken for one, it would
     * keep this node from being rebuilt, or, as the source, fail the restore on every leader
     * while another node holds the index. It is replaced by the rename of the rebuilt index
     * below (a directory fails that rename, naming it). */
    int have = 0;
    if (local == CKPT_OK) {
        have = ckpt__stat_regular(NULL, dirfd, iname, s->cache.dir) == CKPT_OK;
        if (!have)
            ckpt_error_clear(); /* a missing or planted index is what this looks for */
    }
    /* 1. the index, from the lowest node that has it */
    int mine = have ? me : n, src = n;
    if (MPI_Allreduce(&mine, &src, 1, MPI_INT, MPI_MIN, lc) != MPI_SUCCESS) {
        rc = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the index's holder failed");
        goto out;
    }
    if (src == n) {
        rc = ckpt__error(CKPT_ENOTFOUND, "no node's cache holds %s", iname);
        goto out;
    }
    const uint8_t *payload = NULL;
    size_t plen = 0, flen = 0;
    if (me == src && local == CKPT_OK &&
        (local = ckpt__read_file_at(&file, &flen, dirfd, iname, (size_t)1 << 34, s->cache.dir)) ==
            CKPT_OK)
        local = ckpt__container_open(&payload, &plen, file, flen, CKPT__MAGIC_INDEX, iname);
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
    if (local == CKPT_OK && !have) {
        local = ckpt__write_file_atomic_at(dirfd, iname, file, flen, s->cache.dir, NULL);
        *rebuilt += local == CKPT_OK;
    }
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
        held[f] = ckpt__stat_regular(&size, dirfd, idx->files[f]->name, s->cache.dir) == CKPT_OK &&
                  size == idx->files[f]->bytes;
    }
    ckpt_error_clear(); /* a missing file is what this looks for */
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
        int targets[2] = { hm, s->cache.pnode ? s->cache.pnode[hm] : -1 };
        if (h[(size_t)hm * nf])
            mv->from = hm;
        else if (targets[1] >= 0 && h[(size_t)targets[1] * nf])
            mv->from = targets[1];
        for (int k = 0; mv->from < 0 && k < n; k++)
            if (h[(size_t)k * nf])
                mv->from = k;
        for (int t = 0; t < 2; t++) {
            if (targets[t] < 0 || h[(size_t)targets[t] * nf])
                continue;
            if (mv->from < 0) {
                if (local == CKPT_OK)
                    local = ckpt__error(CKPT_ENOTFOUND,
                                        "%s is lost: no node's cache holds it (its node %d%s)",
                                        idx->files[f]->name, hm,
                                        s->cache.pnode ? " and its partner both lost it" : "");
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
        }
    if (nreq && MPI_Waitall((int)nreq, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EMPI, "MPI_Waitall of the rebuild failed");
    if (local == CKPT_OK && *rebuilt)
        local = ckpt__fsync_fd(dirfd, s->cache.dir);
out:
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
    if (rebuilt)
        ckpt__log(CKPT_LOG_INFO, "node %d: %d files of %s rebuilt in its cache %s", s->node,
                  rebuilt, name, s->cache.dir);
    return ckpt_mpi_agree(s->comm, local);
}
