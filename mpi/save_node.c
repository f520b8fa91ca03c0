/*
 * The per-node layout (docs/design.md §4.2): the ranks of a node write one data file, so that a
 * checkpoint has a file per node instead of one per rank. The MPI-free parts (the datasets of a
 * rank, the file's creation, a rank's pwrite of its bytes) are lib/nodefile.c.
 *
 * Nodes (ckpt__save_node_init, at the saver's creation): MPI_Comm_split_type(MPI_COMM_TYPE_SHARED),
 * or MPI_Comm_split by rank / k when MPICKPT_RANKS_PER_NODE=k (decided by rank 0), so tests
 * simulate nodes of k ranks on one machine. A node's leader is its lowest rank; node k is the
 * k-th leader in rank order; every rank knows every leader (the chief's commit finds node k's
 * file in its leader's in-flight directory). The writer thread of an async saver has its own
 * duplicate of the node communicator.
 *
 * A save (ckpt__save_write_node), on the node's communicator, no MPI-IO:
 *   1. every rank sends the leader a header {status, length of its list of datasets, how many}
 *      (MPI_Gather, 64-bit integers); the leader makes room for every list and says go
 *      (MPI_Bcast) only when every rank and itself are fine; then the lists travel point to point,
 *      in chunks of at most 1 GiB, so no count overflows and nothing is ever sent that cannot be
 *      received in full;
 *   2. the leader creates the file with every dataset allocated (HDF5's metadata written by one
 *      process: lib/nodefile.c) and sends each rank {status, file identity, size} and, when all
 *      went well, its offsets (as many as it said it has, and has room for);
 *   3. every rank opens the file by descriptor in the leader's in-flight directory (checking it
 *      is the very file the leader made), pwrites its bytes at its offsets, recording each piece
 *      with its checksums, and fsyncs; the leader alone lists the file in its record.
 * A rank that fails keeps joining the node's collectives and receiving what its leader sends, so
 * nobody waits forever; the status returned is this rank's own, and a rank told of its leader's
 * or a peer's failure returns CKPT_OK (the caller agrees the statuses over the whole
 * communicator, and the failing rank's message is the one every rank reports).
 */
#include "saver_internal.h"

#include "fragment.h"
#include "fsutil.h"
#include "h5io.h"
#include "nodefile.h"
#include "mpickpt/collective.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TAG_LIST 0x6e6c    /* a rank's dataset list, to its leader */
#define TAG_PLACE 0x6e70   /* the leader's placement header, to a rank */
#define TAG_OFFSETS 0x6e6f /* ... and that rank's offsets */
#define CHUNK ((uint64_t)1 << 30)

/* What each rank tells its leader (MPI_Gather): its status, its list's length and its number of
 * datasets (it has room for that many offsets). */
enum { HD_STATUS, HD_LEN, HD_COUNT, HD_N };
/* What the leader tells each rank: the status, then (when it is CKPT_OK) the file's identity and
 * size; HD_COUNT offsets follow. */
enum { PL_STATUS, PL_DEV, PL_INO, PL_SIZE, PL_N };

/* ---- nodes ----------------------------------------------------------------------------------- */

/* The leaders' communicator (rank order, so the chief is its rank 0) and its duplicate for the
 * writer thread. Collective over s->comm. */
int ckpt__save_node_leaders(ckpt_saver *s)
{
    if (s->leaders_made) /* the same on every rank */
        return CKPT_OK;
    s->leaders_made = 1;
    int local = CKPT_OK;
    int mrc = MPI_Comm_split(s->comm, s->node_rank == 0 ? 0 : MPI_UNDEFINED, s->rank,
                             &s->leader_comm);
    if (mrc != MPI_SUCCESS) {
        s->leader_comm = MPI_COMM_NULL;
        return ckpt__mpi_error(mrc, "MPI_Comm_split of the nodes' leaders");
    }
    if (s->leader_comm == MPI_COMM_NULL)
        return CKPT_OK;
    MPI_Comm_set_errhandler(s->leader_comm, MPI_ERRORS_RETURN);
    if (s->async) {
        mrc = MPI_Comm_dup(s->leader_comm, &s->leader_async_comm);
        if (mrc != MPI_SUCCESS) {
            s->leader_async_comm = MPI_COMM_NULL;
            local = ckpt__mpi_error(mrc, "MPI_Comm_dup of the leaders for the writer thread");
        } else {
            MPI_Comm_set_errhandler(s->leader_async_comm, MPI_ERRORS_RETURN);
        }
    }
    return local;
}

/* Every rank's node (s->node_of) for a layout that does not split nodes (per-rank, shared), at
 * create: the cooperative restore's chief spreads its readers over them (restore_coop.c). Nodes
 * of MPICKPT_RANKS_PER_NODE ranks: computed, no call. Every rank on one node (the default layout
 * found so, or one rank): left NULL, which the restore reads as one node. Otherwise
 * MPI_Comm_split_type (shared memory), its node's lowest rank (an allreduce on the node) and an
 * allgather of those: 3 collective calls and an agreement, once per saver. Only a failed split
 * fails the create; a later failure leaves node_of NULL (the readers then spread by rank only). */
int ckpt__save_node_map(ckpt_saver *s)
{
    if (s->size < 2 || s->one_node)
        return CKPT_OK;
    int *node_of = malloc((size_t)s->size * sizeof *node_of);
    if (s->ranks_per_node > 0) {
        for (int r = 0; node_of && r < s->size; r++)
            node_of[r] = (int)(r / s->ranks_per_node);
        s->node_of = node_of;
        return CKPT_OK;
    }
    MPI_Comm node = MPI_COMM_NULL;
    int local = node_of ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    int mrc = MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL, &node);
    if (mrc != MPI_SUCCESS) {
        node = MPI_COMM_NULL;
        if (local == CKPT_OK)
            local = ckpt__mpi_error(mrc, "MPI_Comm_split_type (the ranks' nodes)");
    }
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK) {
        if (node != MPI_COMM_NULL)
            MPI_Comm_free(&node);
        free(node_of);
        return rc;
    }
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    int leader = s->rank, ok = 1;
    ok &= MPI_Allreduce(&s->rank, &leader, 1, MPI_INT, MPI_MIN, node) == MPI_SUCCESS;
    MPI_Comm_free(&node);
    ok &= MPI_Allgather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, s->comm) == MPI_SUCCESS;
    /* every rank's leader, in place: leaders in rank order are nodes 0, 1, ...; a rank's
     * leader is at or before it (its entry already turned into its node) */
    int n = 0;
    for (int r = 0; ok && r < s->size; r++) {
        int l = node_of[r];
        if (l < 0 || l > r)
            ok = 0;
        else
            node_of[r] = l == r ? n++ : node_of[l];
    }
    if (!ok || n < 2) { /* n == 1: one node, as NULL says */
        free(node_of);
        node_of = NULL;
    }
    s->node_of = node_of;
    return CKPT_OK;
}

int ckpt__save_node_init(ckpt_saver *s)
{
    s->node_comm = s->node_async_comm = MPI_COMM_NULL;
    s->leader_comm = s->leader_async_comm = MPI_COMM_NULL;
    s->hier_merge = s->leaders_made = 0;
    free(s->node_of); /* ckpt__save_node_map's, when the cache level comes later */
    s->node_leaders = s->node_ranks = s->node_of = NULL;
    s->node_hdrs = NULL;
    int local = CKPT_OK, mrc, leader = s->rank;
    if (s->ranks_per_node > 0)
        mrc = MPI_Comm_split(s->comm, (int)(s->rank / s->ranks_per_node), s->rank, &s->node_comm);
    else
        mrc = MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL,
                                  &s->node_comm);
    if (mrc != MPI_SUCCESS) {
        local = ckpt__mpi_error(mrc, "MPI_Comm_split of the nodes");
        s->node_comm = MPI_COMM_NULL;
    } else {
        MPI_Comm_set_errhandler(s->node_comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(s->node_comm, &s->node_rank);
        MPI_Comm_size(s->node_comm, &s->node_size);
        /* split by key = rank: node rank 0 is the lowest rank, but ask rather than assume */
        if (MPI_Allreduce(&s->rank, &leader, 1, MPI_INT, MPI_MIN, s->node_comm) != MPI_SUCCESS)
            local = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the node's leader failed");
    }
    int *all = malloc((size_t)s->size * sizeof *all);
    if (!all && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK && s->node_rank == 0 &&
        !(s->node_hdrs = malloc(HD_N * (size_t)s->node_size * sizeof *s->node_hdrs)))
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc == CKPT_OK) {
        if (MPI_Allgather(&leader, 1, MPI_INT, all, 1, MPI_INT, s->comm) != MPI_SUCCESS)
            local = ckpt__error(CKPT_EMPI, "MPI_Allgather of the nodes' leaders failed");
        /* the leader's members, in rank order (node rank i is the i-th: split by key = rank) */
        if (local == CKPT_OK && s->node_rank == 0 &&
            !(s->node_ranks = malloc((size_t)s->node_size * sizeof *s->node_ranks)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        int m = 0;
        for (int r = 0; local == CKPT_OK && s->node_ranks && r < s->size; r++)
            if (all[r] == leader && m < s->node_size)
                s->node_ranks[m++] = r;
        if (local == CKPT_OK && s->node_ranks && (m != s->node_size || s->node_ranks[0] != s->rank))
            local = ckpt__error(CKPT_EMPI, "rank %d: inconsistent nodes (%d of %d members)",
                                s->rank, m, s->node_size);
        /* leaders in rank order; node k is the k-th; every rank's node (a rank's leader is
         * before it: its node is known when the rank is reached) */
        if (local == CKPT_OK && !(s->node_of = malloc((size_t)s->size * sizeof *s->node_of)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        int n = 0;
        for (int r = 0; local == CKPT_OK && r < s->size; r++) {
            if (all[r] < 0 || all[r] > r || all[all[r]] != all[r]) {
                local =
                    ckpt__error(CKPT_EMPI, "rank %d: inconsistent nodes (rank %d's leader is %d)",
                                s->rank, r, all[r]);
            } else {
                s->node_of[r] = all[r] == r ? n : s->node_of[all[r]];
                if (all[r] == r)
                    all[n++] = r; /* n <= r: entries before r are not read again */
            }
        }
        s->nnodes = n;
        s->node = -1;
        for (int k = 0; local == CKPT_OK && k < n; k++)
            if (all[k] == leader)
                s->node = k;
        if (local == CKPT_OK && s->node < 0)
            local =
                ckpt__error(CKPT_EMPI, "rank %d: its leader %d is not a leader", s->rank, leader);
        if (local == CKPT_OK && !(s->node_leaders = malloc((size_t)n * sizeof *s->node_leaders)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        if (local == CKPT_OK)
            memcpy(s->node_leaders, all, (size_t)n * sizeof *all);
        if (local == CKPT_OK && s->async) {
            mrc = MPI_Comm_dup(s->node_comm, &s->node_async_comm);
            if (mrc != MPI_SUCCESS) {
                local = ckpt__mpi_error(mrc, "MPI_Comm_dup of the node for the writer thread");
                s->node_async_comm = MPI_COMM_NULL;
            } else {
                MPI_Comm_set_errhandler(s->node_async_comm, MPI_ERRORS_RETURN);
            }
        }
        rc = ckpt_mpi_agree(s->comm, local);
    }
    /* The leaders' communicator of the hierarchical merge, where it pays: real nodes, whose
     * leaders merge at the same time (simulated nodes share one machine's cores: there it only
     * adds work, so only MPICKPT_HIER_MERGE=1 asks for it). nnodes is the same everywhere. */
    int hier = s->hier_wanted > 0 || (s->hier_wanted < 0 && s->ranks_per_node == 0);
    if (rc == CKPT_OK && hier && s->nnodes > 1 && s->nnodes < s->size) {
        local = ckpt__save_node_leaders(s);
        if ((rc = ckpt_mpi_agree(s->comm, local)) == CKPT_OK)
            s->hier_merge = 1;
    }
    free(all);
    if (rc != CKPT_OK)
        ckpt__save_node_free(s);
    return rc;
}

void ckpt__save_node_free(ckpt_saver *s)
{
    if (s->leader_async_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->leader_async_comm);
    if (s->leader_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->leader_comm);
    s->hier_merge = s->leaders_made = 0;
    if (s->node_async_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->node_async_comm);
    if (s->node_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->node_comm);
    free(s->node_leaders);
    free(s->node_ranks);
    free(s->node_of);
    free(s->node_hdrs);
    s->node_leaders = s->node_ranks = s->node_of = NULL;
    s->node_hdrs = NULL;
}

/* ---- point to point, 64-bit lengths ---------------------------------------------------------- */

/* Both sides know `len` beforehand and have room for all of it: a message is never truncated
 * (a truncating receive of a large message breaks Open MPI's shared-memory transport). */
static int send_bytes(const void *buf, uint64_t len, int dest, int tag, MPI_Comm comm)
{
    const uint8_t *p = buf;
    for (uint64_t at = 0; at < len; at += CHUNK) {
        uint64_t n = len - at < CHUNK ? len - at : CHUNK;
        if (MPI_Send(p + at, (int)n, MPI_BYTE, dest, tag, comm) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Send of %llu bytes to node rank %d failed",
                               (unsigned long long)n, dest);
    }
    return CKPT_OK;
}

static int recv_bytes(void *buf, uint64_t len, int src, int tag, MPI_Comm comm)
{
    uint8_t *p = buf;
    for (uint64_t at = 0; at < len; at += CHUNK) {
        uint64_t n = len - at < CHUNK ? len - at : CHUNK;
        if (MPI_Recv(p + at, (int)n, MPI_BYTE, src, tag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Recv of %llu bytes from node rank %d failed",
                               (unsigned long long)n, src);
    }
    return CKPT_OK;
}

/* ---- the leader ------------------------------------------------------------------------------ */

/* The leader's part after the gather of headers: room for every rank's list, the go-ahead
 * (MPI_Bcast: the ranks send their lists only when everybody is fine, so nothing is sent that
 * cannot be received), the lists checked, the file made, each rank told where its datasets are.
 * `mine` is the leader's own packed list. On success *nf holds the file (open) and the leader's
 * own offsets are nf->off[0 .. nf->first[1]). */
static int lead(ckpt_saver *s, save_ctx *c, MPI_Comm nc, const uint8_t *mine, int local,
                ckpt__nodefile *nf)
{
    int ns = s->node_size, peer_failed = 0;
    const int64_t *h = s->node_hdrs;
    uint8_t **bufs = calloc((size_t)ns, sizeof *bufs);
    Mpickpt__Fragment **lists = calloc((size_t)ns, sizeof *lists);
    ckpt__arena *arena = ckpt__arena_new();
    if ((!bufs || !lists || !arena) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    for (int i = 1; i < ns; i++)
        peer_failed |= h[HD_N * i + HD_STATUS] != CKPT_OK;
    for (int i = 1; i < ns && local == CKPT_OK && !peer_failed; i++) {
        int64_t len = h[HD_N * i + HD_LEN];
        if (len < 0 || (uint64_t)len > SIZE_MAX || !(bufs[i] = malloc(len ? (size_t)len : 1)))
            local =
                ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for rank %d's list of %lld bytes",
                            s->rank, s->node_ranks[i], (long long)len);
    }
    int go = local == CKPT_OK && !peer_failed;
    if (MPI_Bcast(&go, 1, MPI_INT, 0, nc) != MPI_SUCCESS) {
        if (local == CKPT_OK)
            local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Bcast on the node failed", s->rank);
        go = 0;
    }
    for (int i = 1; i < ns && go; i++) {
        int r = recv_bytes(bufs[i], (uint64_t)h[HD_N * i + HD_LEN], i, TAG_LIST, nc);
        if (r != CKPT_OK && local == CKPT_OK)
            local = r;
    }
    for (int i = 0; go && local == CKPT_OK && i < ns; i++) {
        const uint8_t *b = i == 0 ? mine : bufs[i];
        lists[i] = mpickpt__fragment__unpack(ckpt__arena_allocator(arena),
                                             (size_t)h[HD_N * i + HD_LEN], b);
        if (!lists[i])
            local = ckpt__error(CKPT_ECORRUPT, "rank %d's list of datasets does not parse",
                                s->node_ranks[i]);
        else if ((int64_t)lists[i]->n_tensors != h[HD_N * i + HD_COUNT])
            local = ckpt__error(CKPT_ECORRUPT, "rank %d's list holds %zu datasets, it said %lld",
                                s->node_ranks[i], lists[i]->n_tensors,
                                (long long)h[HD_N * i + HD_COUNT]);
    }
    if (go && local == CKPT_OK) /* tests: a leader failing after its ranks sent their lists */
        local = ckpt__fault(s->rank, "node");
    if (go && local == CKPT_OK) {
        ckpt__h5_lock();
        local = ckpt__nodefile_create(nf, lists, s->node_ranks, (size_t)ns, &c->n, c->tempfd);
        ckpt__h5_unlock();
    }
    /* Every rank is told, whatever happened: a failed leader or peer sends status only. */
    for (int i = 1; i < ns; i++) {
        uint64_t pl[PL_N] = {0};
        int st = local != CKPT_OK ? local : peer_failed ? CKPT_EPEER : CKPT_OK;
        pl[PL_STATUS] = (uint64_t)(int64_t)st;
        if (st == CKPT_OK) {
            pl[PL_DEV] = nf->dev;
            pl[PL_INO] = nf->ino;
            pl[PL_SIZE] = nf->size;
        }
        int r = CKPT_OK;
        if (MPI_Send(pl, PL_N, MPI_UINT64_T, i, TAG_PLACE, nc) != MPI_SUCCESS)
            r = ckpt__error(CKPT_EMPI, "MPI_Send of the placement to node rank %d failed", i);
        else if (st == CKPT_OK) /* as many as the rank said it has (checked above) */
            r = send_bytes(nf->off + nf->first[i],
                           (nf->first[i + 1] - nf->first[i]) * sizeof *nf->off, i, TAG_OFFSETS, nc);
        if (r != CKPT_OK && local == CKPT_OK)
            local = r;
    }
    for (int i = 0; bufs && i < ns; i++)
        free(bufs[i]);
    free(bufs);
    free(lists);
    ckpt__arena_free(arena);
    return local;
}

/* ---- every rank ------------------------------------------------------------------------------ */

/* A rank other than the leader, after the gather of headers: its list sent when the leader says
 * go, its placement received into `off` (room for its `ndata` offsets), its bytes written into
 * the leader's file (opened by descriptor in the leader's in-flight directory, and checked to be
 * the file the leader made). */
static int member(ckpt_saver *s, save_ctx *c, MPI_Comm nc, const ckpt__shard_input *in,
                  const uint8_t *buf, uint64_t len, uint64_t *off, size_t ndata, int local)
{
    int go = 0;
    if (MPI_Bcast(&go, 1, MPI_INT, 0, nc) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Bcast on the node failed", s->rank);
    if (go) { /* only when this rank's header said it is fine */
        int r = send_bytes(buf, len, 0, TAG_LIST, nc);
        if (r != CKPT_OK && local == CKPT_OK)
            local = r;
    }
    uint64_t pl[PL_N];
    if (MPI_Recv(pl, PL_N, MPI_UINT64_T, 0, TAG_PLACE, nc, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return local != CKPT_OK ? local
                                : ckpt__error(CKPT_EMPI,
                                              "rank %d: MPI_Recv of the node file's "
                                              "placement failed",
                                              s->rank);
    if ((int64_t)pl[PL_STATUS] != CKPT_OK)
        return local; /* the leader's failure, or a peer's: theirs to report */
    int r = recv_bytes(off, (uint64_t)ndata * sizeof *off, 0, TAG_OFFSETS, nc);
    if (r != CKPT_OK && local == CKPT_OK)
        local = r;
    int dfd = -1, fd = -1;
    struct stat st;
    if (local == CKPT_OK &&
        (local = ckpt__node_temp_open(&c->n, c->dirfd, c->workfd, &dfd)) == CKPT_OK)
        local = ckpt__file_open(&fd, NULL, dfd, c->n.data_name, O_WRONLY, c->n.node_temp);
    if (local == CKPT_OK && fstat(fd, &st) != 0)
        local = ckpt__errno(errno, "stat", c->n.my_file);
    if (local == CKPT_OK &&
        ((uint64_t)st.st_dev != pl[PL_DEV] || (uint64_t)st.st_ino != pl[PL_INO]))
        local = ckpt__error(CKPT_ECORRUPT,
                            "rank %d: %s is not the file its leader made "
                            "(replaced while the save ran?)",
                            s->rank, c->n.my_file);
    if (local == CKPT_OK)
        local =
            ckpt__nodefile_write(&c->rec, in, &s->bufs, off, ndata, pl[PL_SIZE], fd, c->n.my_file);
    ckpt__close(fd);
    ckpt__close(dfd);
    return local;
}

int ckpt__save_write_node(ckpt_saver *s, save_ctx *c)
{
    /* the writer thread's saves on its own duplicate of the node */
    MPI_Comm nc = c->comm == s->async_comm && s->node_async_comm != MPI_COMM_NULL
                      ? s->node_async_comm
                      : s->node_comm;
    ckpt__shard_input in;
    ckpt__save_shard_input(s, c, &in);
    int local = ckpt__save_names_node(&c->n, s->node, s->nnodes, s->node_leaders[s->node]);
    Mpickpt__Fragment list = MPICKPT__FRAGMENT__INIT;
    uint8_t *buf = NULL;
    uint64_t *off = NULL;
    size_t len = 0, ndata = 0;
    if (local == CKPT_OK)
        local = ckpt__nodefile_list(&list, &in);
    if (local == CKPT_OK) {
        ndata = list.n_tensors;
        len = mpickpt__fragment__get_packed_size(&list);
        buf = malloc(len ? len : 1);
        off = malloc(ndata ? ndata * sizeof *off : 1); /* where the placement goes */
        if (!buf || !off)
            local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
        else
            mpickpt__fragment__pack(&list, buf);
    }
    ckpt__fragment_free_built(&list);
    if (local == CKPT_OK && s->node_rank != 0) /* tests: a rank failing before its leader hears */
        local = ckpt__fault(s->rank, "node");
    /* 1. every rank's header at the leader (64-bit lengths) */
    int64_t hdr[HD_N] = {local, local == CKPT_OK ? (int64_t)len : 0,
                         local == CKPT_OK ? (int64_t)ndata : 0};
    if (MPI_Gather(hdr, HD_N, MPI_INT64_T, s->node_hdrs, HD_N, MPI_INT64_T, 0, nc) != MPI_SUCCESS &&
        local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Gather of the node's lists failed", s->rank);
    /* 2-3. the lists, the file, the placements, the bytes */
    if (s->node_rank == 0) {
        ckpt__nodefile nf;
        ckpt__nodefile_init(&nf);
        local = lead(s, c, nc, buf, local, &nf);
        /* no file (and CKPT_OK) when a peer failed: that peer reports it */
        if (local == CKPT_OK && nf.fd >= 0)
            local = ckpt__nodefile_write(&c->rec, &in, &s->bufs, nf.off, nf.first[1], nf.size,
                                         nf.fd, c->n.my_file);
        if (local == CKPT_OK && nf.fd >= 0) /* the file is listed once, by its leader */
            local = ckpt__record_add_file(&c->rec, c->n.data_name, nf.size);
        ckpt__nodefile_free(&nf);
    } else {
        local = member(s, c, nc, &in, buf, len, off, ndata, local);
    }
    free(buf);
    free(off);
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "write");
    return local;
}
