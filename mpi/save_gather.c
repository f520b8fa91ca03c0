/*
 * The save protocol's gathers of index fragments (save_protocol.c; mpi/transfer.c moves the
 * bytes), each collective over the communicator it is given:
 *   ckpt__allgather_fragments  every rank's fragment on every rank (the shared layout's plan)
 *   ckpt__gather_packed        every rank's fragment at the chief, agreed (the plan; the one-step
 *                              gather of a save's records)
 *   ckpt__gather_fragments     a save's records at the chief: one step, or through the node leaders
 *                              (gather_hier: the hierarchical merge), whose gathers do not agree
 */
#include "saver_internal.h"

#include "fragment.h"
#include "merge.h"
#include "mpickpt/collective.h"

#include <stdlib.h>
#include <string.h>

/* Frees fragments unpacked by ckpt__allgather_fragments() or ckpt__gather_fragments(): the
 * array, and the arena that holds the messages (protobuf-c's unpack otherwise makes ~10 mallocs
 * per piece). */
void ckpt__free_frags(Mpickpt__Fragment **f, ckpt__arena *arena)
{
    free(f);
    ckpt__arena_free(arena);
}

/* Packs `f` into a new buffer (*buf, *len) when *local is CKPT_OK; out of memory is *local's. */
static void pack_fragment(const Mpickpt__Fragment *f, int *local, uint8_t **buf, size_t *len)
{
    *len = *local == CKPT_OK ? mpickpt__fragment__get_packed_size(f) : 0;
    *buf = malloc(*len ? *len : 1);
    if (!*buf && *local == CKPT_OK)
        *local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (*local == CKPT_OK)
        mpickpt__fragment__pack(f, *buf);
    else
        *len = 0;
}

/* Packs `f` (when local is CKPT_OK) and gathers every rank's bytes at rank 0: *all and *offs
 * there (ckpt__gather_bytes). Collective; the result is agreed. */
static int pack_gather(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
                       uint8_t **all, uint64_t **offs)
{
    uint8_t *buf;
    size_t len;
    pack_fragment(f, &local, &buf, &len);
    int rc = ckpt__gather_bytes(comm, 0, local, buf, len, s->chunk, s->gather_scratch, all, offs);
    free(buf);
    return rc;
}

/* The n fragments laid end to end in `all` (the i-th at offs[i]) unpacked into *out, allocated
 * from *arena (free with ckpt__free_frags; nothing to free after an error). The i-th fragment's
 * rank is ranks[i] (its position when ranks is NULL), not what its bytes say. `what` names them
 * in messages. */
static int unpack_frags(const uint8_t *all, const uint64_t *offs, int n, const int *ranks,
                        const char *what, Mpickpt__Fragment ***out, ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    int rc = CKPT_OK;
    Mpickpt__Fragment **frags = calloc((size_t)n, sizeof *frags);
    ckpt__arena *a = ckpt__arena_new();
    if (!frags || !a)
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    for (int i = 0; i < n && rc == CKPT_OK; i++) {
        frags[i] = mpickpt__fragment__unpack(ckpt__arena_allocator(a),
                                             (size_t)(offs[i + 1] - offs[i]), all + offs[i]);
        int r = ranks ? ranks[i] : i;
        if (!frags[i])
            rc = ckpt__error(CKPT_ECORRUPT, "rank %d's %s does not parse", r, what);
        else
            frags[i]->rank = r; /* trust the position, not the bytes */
    }
    if (rc != CKPT_OK) {
        ckpt__free_frags(frags, a);
        return rc;
    }
    *out = frags;
    *arena = a;
    return CKPT_OK;
}

/* Packs `f`, gathers every rank's bytes at rank 0 and broadcasts them (mpi/transfer.c: any size,
 * in chunks past s->chunk), unpacks them into `*out` (n = size), allocated from `*arena`: free
 * with ckpt__free_frags(*out, *arena). Collective. `local` is this rank's status so far: a failed
 * rank still joins with an empty contribution. */
int ckpt__allgather_fragments(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
                              Mpickpt__Fragment ***out, ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    uint8_t *all = NULL;
    uint64_t *offs = NULL;
    int rc = pack_gather(s, comm, f, local, &all, &offs);
    if (rc != CKPT_OK)
        return rc;
    /* the offsets, then (everybody holding room for them, agreed) the bytes */
    int local2 = CKPT_OK;
    if (s->rank != 0 && !(offs = malloc(((size_t)s->size + 1) * sizeof *offs)))
        local2 = ckpt__error(CKPT_ENOMEM, "out of memory");
    uint64_t head[1] = { s->rank == 0 ? offs[s->size] : 0 };
    if (MPI_Bcast(head, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS && local2 == CKPT_OK)
        local2 = ckpt__error(CKPT_EMPI, "MPI_Bcast of the plan's size failed");
    if (s->rank != 0 && local2 == CKPT_OK && !(all = malloc(head[0] ? (size_t)head[0] : 1)))
        local2 = ckpt__error(CKPT_ENOMEM, "rank %d: cannot hold the plan (%llu bytes)", s->rank,
                             (unsigned long long)head[0]);
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *a = NULL;
    if ((rc = ckpt_mpi_agree(comm, local2)) != CKPT_OK)
        goto done;
    if ((rc = ckpt__bcast_bytes(comm, 0, offs, ((uint64_t)s->size + 1) * sizeof *offs,
                                s->chunk)) != CKPT_OK ||
        (rc = ckpt__bcast_bytes(comm, 0, all, head[0], s->chunk)) != CKPT_OK)
        local2 = rc;
    if (local2 == CKPT_OK)
        local2 = unpack_frags(all, offs, s->size, NULL, "plan", &frags, &a);
    /* The same bytes on every rank, but a failure to allocate or unpack them is one rank's own:
     * agreed, so that no rank goes on alone into the next collective. */
    if ((rc = ckpt_mpi_agree(comm, local2)) == CKPT_OK) {
        *out = frags;
        *arena = a;
        frags = NULL;
        a = NULL;
    }
done:
    ckpt__free_frags(frags, a);
    free(all);
    free(offs);
    return rc;
}

/* Packs `f` and gathers every rank's at the chief, unpacked into *out and *arena (free with
 * ckpt__free_frags). Collective (mpi/transfer.c: a gather, the verdict's broadcast, the bytes);
 * `local` is this rank's status so far, and the result is agreed: every rank's status and the
 * chief's room for the bytes. A fragment the chief cannot unpack is its own failure (*chief), for
 * the next vote to carry. */
int ckpt__gather_packed(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
                        int *chief, Mpickpt__Fragment ***out, ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    *chief = CKPT_OK;
    uint8_t *all = NULL;
    uint64_t *offs = NULL;
    int rc = pack_gather(s, comm, f, local, &all, &offs);
    if (rc != CKPT_OK || s->rank != 0)
        return rc;
    *chief = unpack_frags(all, offs, s->size, NULL, "index fragment", out, arena);
    free(all);
    free(offs);
    return CKPT_OK;
}

/*
 * The hierarchical gather (several nodes, some of several ranks): every rank's fragment at its
 * node's leader, which merges them (ckpt__fragment_merge: the same index, byte for byte, when
 * nodes hold consecutive ranks) and sends the result to the chief, which gets one fragment per
 * node (ranks: the leaders'). The two gathers do not agree (ckpt__gather_bytes_quiet): a rank
 * that fails keeps its error in *local, the others their CKPT_OK, and the save's pre-commit vote
 * (every rank meets there) carries the failing rank's message; the chief, told that some node or
 * leader failed, sets *skip and does not merge. Returns CKPT_OK: every outcome is in *local.
 */
static int gather_hier(ckpt_saver *s, save_ctx *c, const Mpickpt__Fragment *frag, int *local,
                       int *skip, Mpickpt__Fragment ***out, size_t *nout, ckpt__arena **arena)
{
    int async = c->comm == s->async_comm;
    MPI_Comm nc = async && s->node_async_comm != MPI_COMM_NULL ? s->node_async_comm : s->node_comm;
    MPI_Comm lc = async && s->leader_async_comm != MPI_COMM_NULL ? s->leader_async_comm
                                                                 : s->leader_comm;
    uint8_t *buf, *all = NULL;
    uint64_t *offs = NULL;
    size_t len;
    int peer = 0;

    /* 1. the node's fragments at its leader (node_hdrs: HD_N >= 2 int64 per member) */
    pack_fragment(frag, local, &buf, &len);
    int r = ckpt__gather_bytes_quiet(nc, 0, *local, buf, len, s->chunk, s->node_hdrs, &all, &offs,
                                     &peer);
    free(buf);
    if (r != CKPT_OK && *local == CKPT_OK)
        *local = r;
    if (s->node_rank != 0)
        return CKPT_OK; /* a member's part ends here: the vote tells it the outcome */

    /* 2. the leader's merge of its node; a failed member is reported by that member (EPEER tells
     * the chief only that this node has nothing to send) */
    Mpickpt__Fragment **frags = NULL, part = MPICKPT__FRAGMENT__INIT;
    ckpt__arena *a = NULL;
    int st = *local != CKPT_OK ? *local : peer ? CKPT_EPEER : CKPT_OK;
    if (st == CKPT_OK)
        st = unpack_frags(all, offs, s->node_size, s->node_ranks, "index fragment", &frags, &a);
    free(all);
    free(offs);
    all = NULL;
    offs = NULL;
    if (st == CKPT_OK) /* tests: a leader failing after its node's fragments arrived */
        st = ckpt__fault(s->rank, "node-merge");
    if (st == CKPT_OK)
        st = ckpt__fragment_merge(&part, frags, (size_t)s->node_size);
    if (st == CKPT_OK) /* the members' write times (metrics: none when out of memory) */
        (void)ckpt__fragment_times_concat(&part, frags, (size_t)s->node_size);
    if (st != CKPT_OK && st != CKPT_EPEER)
        *local = st;
    pack_fragment(&part, &st, &buf, &len);
    if (st != CKPT_OK && st != CKPT_EPEER && *local == CKPT_OK)
        *local = st;
    ckpt__fragment_times_free(&part);
    ckpt__fragment_merged_free(&part);
    ckpt__free_frags(frags, a);

    /* 3. the nodes' fragments at the chief */
    r = ckpt__gather_bytes_quiet(lc, 0, st, buf, len, s->chunk, s->gather_scratch, &all, &offs,
                                 &peer);
    free(buf);
    if (r != CKPT_OK && *local == CKPT_OK)
        *local = r;
    if (s->rank == 0 && *local == CKPT_OK && !peer) {
        *local = unpack_frags(all, offs, s->nnodes, s->node_leaders, "node's index fragment", out,
                              arena);
        *nout = (size_t)s->nnodes;
    }
    *skip = peer;
    free(all);
    free(offs);
    return CKPT_OK;
}

/* Every rank's record, as its index fragment (protobuf here, for the wire), at the chief: *nout
 * fragments there, or *skip set when the chief must not merge (a failure that the next vote
 * reports). *local is this rank's status, in and out. */
int ckpt__gather_fragments(ckpt_saver *s, save_ctx *c, double write_s, int *local, int *skip,
                           Mpickpt__Fragment ***out, size_t *nout, ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    *nout = 0;
    *skip = 0;
    Mpickpt__Fragment frag = MPICKPT__FRAGMENT__INIT;
    if (*local == CKPT_OK)
        *local = ckpt__record_fragment(&frag, &c->rec, s->rank, c->n.data_name);
    int32_t me = s->rank; /* this rank's write time rides along (save_summary.c) */
    frag.n_write_s = frag.n_write_ranks = 1;
    frag.write_s = &write_s;
    frag.write_ranks = &me;
    int rc;
    if (s->hier_merge) {
        rc = gather_hier(s, c, &frag, local, skip, out, nout, arena);
    } else {
        rc = ckpt__gather_packed(s, c->comm, &frag, *local, local, out, arena);
        *nout = (size_t)s->size;
    }
    frag.n_write_s = frag.n_write_ranks = 0; /* borrowed */
    frag.write_s = NULL;
    frag.write_ranks = NULL;
    ckpt__fragment_free_built(&frag);
    return rc;
}
