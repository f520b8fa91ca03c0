/*
 * The collective restore (docs/design.md §5): the chief reads the index and checks it, every
 * rank receives it and reads the pieces that overlap what it owns now, so a checkpoint written by
 * N ranks restores on M. Per-rank values are staged and applied only once every rank succeeded.
 */
#include "saver_internal.h"

#include "env.h"
#include "index.h"
#include "restore_coop.h"
#include "restore_names.h"
#include "share.h"
#include "mpickpt/collective.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the chief's sends of index shares */
#define TAG_SHARE 0x6d71

/* What this rank reads: every registration's stored name and the box it owns (a blob whole).
 * `optional_per_rank` (skip_missing_per_rank): per-rank entries (components, blobs) are marked
 * KIND_COMPONENT, which the chief's comparison of names (strict restores) reads as "not missing
 * when absent"; other per-rank entries KIND_BLOB; every other want is KIND_FULL (only those are
 * forwarded by the cooperative restore, restore_coop.c). */
static int build_wants(const ckpt_saver *s, Mpickpt__Fragment *w, int optional_per_rank)
{
    size_t cap = 0;
    int rc = CKPT_OK;
    for (size_t k = 0; k < s->regs.n && rc == CKPT_OK; k++) {
        const ckpt__reg *g = &s->regs.v[k];
        rc = ckpt__share_want(w, &cap, g->stored, g->kind == CKPT_KIND_BLOB ? NULL : &g->slice);
        /* per-rank wants are never forwarded by the cooperative restore (not KIND_FULL) */
        if (rc == CKPT_OK && (g->kind == CKPT_KIND_COMPONENT || g->kind == CKPT_KIND_BLOB))
            w->tensors[w->n_tensors - 1]->kind = optional_per_rank
                                                     ? MPICKPT__KIND__KIND_COMPONENT
                                                     : MPICKPT__KIND__KIND_BLOB;
    }
    return rc;
}

/* The cooperative restore's state in one restore (restore_coop.c). */
typedef struct coop_ctx {
    int planned;  /* the chief: plan it (MPICKPT_RESTORE_COOPERATIVE, several ranks, no cache) */
    int optional; /* build_wants' optional_per_rank */
    const int *node_of; /* the chief: every rank's node (the saver's) */
    int active;   /* some rank forwards a piece: every rank runs ckpt__coop_run */
    uint8_t *own; /* the chief: its own share */
    size_t own_len;
    uint8_t *list; /* this rank's list of forwarded pieces, or NULL */
    size_t list_len;
    int held;       /* whether it can take part: its list held, the chief's sends done */
    ckpt__coop *co; /* its list, held (ckpt__coop_new), until the transfers */
} coop_ctx;

/* The chief's side with the cooperative restore (restore_coop.c): every rank's wants first (its
 * own too), then the plan, then every rank's share and list of forwarded pieces, sent as {status,
 * share length, list length, active} then the bytes. A failed plan is sent to every rank (nobody
 * then forwards anything); a failed send is not (every rank is sent what the plan says, and the
 * settle, ckpt__coop_settle, stops the transfers: MPICKPT_FAULT "<rank>:share-send" fails the
 * send of that rank's share after it went). The chief's own share and list are kept in `cc`. */
static int send_coop_shares(ckpt_saver *s, const ckpt_reader *r, const uint8_t *all,
                            const uint64_t *offs, ckpt__names *nc, coop_ctx *cc)
{
    int size = s->size, local = CKPT_OK;
    ckpt__arena **arenas = calloc((size_t)size, sizeof *arenas);
    Mpickpt__Fragment **w = calloc((size_t)size, sizeof *w);
    Mpickpt__Fragment own = MPICKPT__FRAGMENT__INIT;
    ckpt__coop_shares plan = { 0 };
    if (!arenas || !w)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK && (local = build_wants(s, &own, cc->optional)) == CKPT_OK)
        w[0] = &own;
    for (int dst = 1; dst < size && local == CKPT_OK; dst++) {
        if (!(arenas[dst] = ckpt__arena_new())) {
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
            break;
        }
        w[dst] = mpickpt__fragment__unpack(ckpt__arena_allocator(arenas[dst]),
                                           (size_t)(offs[dst + 1] - offs[dst]), all + offs[dst]);
        if (!w[dst])
            local = ckpt__error(CKPT_ECORRUPT, "rank %d's restore request does not parse", dst);
        else if (nc)
            ckpt__names_note(nc, w[dst]);
    }
    if (local == CKPT_OK)
        local = ckpt__coop_plan(ckpt__reader_index(r), size, w, cc->node_of, &plan);
    int planned = local;
    for (int dst = 1; dst < size; dst++) {
        int64_t head[4] = { planned, 0, 0, 0 };
        if (planned == CKPT_OK) {
            head[1] = (int64_t)plan.share_len[dst];
            head[2] = (int64_t)plan.coop_len[dst];
            head[3] = plan.active;
        }
        int rc[3] = { MPI_Send(head, 4, MPI_INT64_T, dst, TAG_SHARE, s->comm) == MPI_SUCCESS
                          ? ckpt__fault(dst, "share-send")
                          : ckpt__error(CKPT_EMPI, "MPI_Send to rank %d failed", dst),
                      CKPT_OK, CKPT_OK };
        /* after a failed send the rest goes all the same: the rank waits for it */
        if (planned == CKPT_OK)
            rc[1] = ckpt__send_bytes(s->comm, dst, TAG_SHARE, plan.share[dst],
                                     plan.share_len[dst], s->chunk);
        if (planned == CKPT_OK && plan.coop_len[dst])
            rc[2] = ckpt__send_bytes(s->comm, dst, TAG_SHARE, plan.coop[dst], plan.coop_len[dst],
                                     s->chunk);
        for (int k = 0; k < 3 && local == CKPT_OK; k++)
            local = rc[k];
    }
    if (local == CKPT_OK) { /* the chief's own, opened once the names are compared */
        cc->own = plan.share[0];
        cc->own_len = plan.share_len[0];
        plan.share[0] = NULL;
    }
    if (planned == CKPT_OK) { /* its list: it takes part like every rank sent `active` */
        cc->list = plan.coop[0];
        cc->list_len = plan.coop_len[0];
        cc->active = plan.active;
        plan.coop[0] = NULL;
        /* a failed send, or its list as if it could not be held ("0:coop-list"): the settle */
        cc->held = local != CKPT_OK ? local
                   : cc->list       ? ckpt__fault(0, "coop-list")
                                    : CKPT_OK;
    }
    ckpt__coop_shares_free(&plan);
    ckpt__fragment_free_built(&own);
    for (int dst = 1; arenas && dst < size; dst++)
        ckpt__arena_free(arenas[dst]);
    free(arenas);
    free(w);
    return local;
}

/* The chief's side of the share exchange: rank r's wants (unpacked from the gathered bytes) to its
 * share of the index, sent as {status, length} then the bytes. A rank it cannot serve is sent the
 * error code; the agreement after the reads then carries the chief's message. */
static int send_shares(ckpt_saver *s, const ckpt_reader *r, const uint8_t *all,
                       const uint64_t *offs, ckpt__names *nc, coop_ctx *cc)
{
    if (cc->planned)
        return send_coop_shares(s, r, all, offs, nc, cc);
    ckpt__share *sh = NULL;
    int local = ckpt__share_new(&sh, ckpt__reader_index(r));
    for (int dst = 1; dst < s->size; dst++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        int st = local;
        if (st == CKPT_OK) {
            /* unpacked into an arena (protobuf-c would make several allocations per entry) */
            ckpt__arena *a = ckpt__arena_new();
            Mpickpt__Fragment *w =
                a ? mpickpt__fragment__unpack(ckpt__arena_allocator(a),
                                              (size_t)(offs[dst + 1] - offs[dst]), all + offs[dst])
                  : NULL;
            if (!a)
                st = ckpt__error(CKPT_ENOMEM, "out of memory");
            else if (!w)
                st = ckpt__error(CKPT_ECORRUPT, "rank %d's restore request does not parse", dst);
            else
                st = ckpt__share_pack(sh, w, &bytes, &len);
            if (w && nc)
                ckpt__names_note(nc, w);
            ckpt__arena_free(a);
            if (st != CKPT_OK)
                local = st;
        }
        int64_t head[4] = { st, st == CKPT_OK ? (int64_t)len : 0, 0, 0 };
        int rc = MPI_Send(head, 4, MPI_INT64_T, dst, TAG_SHARE, s->comm) == MPI_SUCCESS
                     ? CKPT_OK
                     : ckpt__error(CKPT_EMPI, "MPI_Send to rank %d failed", dst);
        if (rc == CKPT_OK && st == CKPT_OK)
            rc = ckpt__send_bytes(s->comm, dst, TAG_SHARE, bytes, len, s->chunk);
        free(bytes);
        if (rc != CKPT_OK && local == CKPT_OK)
            local = rc;
    }
    ckpt__share_free(sh);
    return local;
}

/* Receives a share of `len` bytes into `bytes` (taken) and opens it as a reader. */
static int recv_open(ckpt_saver *s, const char *prefix, ckpt_reader **r, uint8_t *bytes,
                     uint64_t len)
{
    int rc = ckpt__recv_bytes(s->comm, 0, TAG_SHARE, bytes, len, s->chunk);
    if (rc == CKPT_OK)
        rc = ckpt__reader_open_payload(r, prefix, bytes, (size_t)len, 0);
    free(bytes);
    return rc;
}

/* `len` bytes from the chief, received one chunk at a time into a sink and dropped. */
static void recv_sink(ckpt_saver *s, uint64_t len)
{
    uint64_t sink_len = len < s->chunk ? len : s->chunk;
    uint8_t *sink = malloc(sink_len ? (size_t)sink_len : 1);
    for (uint64_t off = 0; sink && off < len; off += sink_len)
        (void)ckpt__recv_bytes(s->comm, 0, TAG_SHARE, sink,
                               len - off < sink_len ? len - off : sink_len, s->chunk);
    free(sink);
}

/* A non-chief rank's side: its share of the index, opened as a reader (the chief validated the
 * whole index and checked its data files), and its list of forwarded pieces: received whatever
 * became of the share (MPICKPT_FAULT "<rank>:share" fails as if the share could not be held),
 * for the rank takes part in the transfers all the same (restore_coop_run.c). */
static int recv_share(ckpt_saver *s, const char *prefix, ckpt_reader **r, coop_ctx *cc)
{
    int64_t head[4];
    if (MPI_Recv(head, 4, MPI_INT64_T, 0, TAG_SHARE, s->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv of its share of the index failed",
                           s->rank);
    if (head[0] != CKPT_OK) /* the agreement after the reads carries the chief's message */
        return ckpt__error((int)head[0], "rank %d: the chief could not send its share of the "
                                         "index", s->rank);
    uint64_t len = (uint64_t)head[1], clen = (uint64_t)head[2];
    cc->active = head[3] != 0;
    int rc = ckpt__fault(s->rank, "share");
    uint8_t *bytes = rc == CKPT_OK ? malloc(len ? (size_t)len : 1) : NULL;
    if (bytes) {
        rc = recv_open(s, prefix, r, bytes, len);
    } else {
        /* Received even when it cannot be held (one chunk at a time into a sink): the chief's
         * sends must complete for everybody to reach the vote that reports this. */
        recv_sink(s, len);
        if (rc == CKPT_OK)
            rc = ckpt__error(CKPT_ENOMEM, "rank %d: no memory for its share of the index (%llu "
                                          "bytes)", s->rank, (unsigned long long)len);
    }
    /* MPICKPT_FAULT "<rank>:coop-list": as if the list could not be held */
    int held = clen ? ckpt__fault(s->rank, "coop-list") : CKPT_OK;
    if (clen && held == CKPT_OK && (cc->list = malloc((size_t)clen))) {
        int rc2 = ckpt__recv_bytes(s->comm, 0, TAG_SHARE, cc->list, clen, s->chunk);
        cc->list_len = (size_t)clen;
        if (rc == CKPT_OK)
            rc = rc2;
    } else if (clen) { /* this rank cannot take part: the settle stops the transfers */
        recv_sink(s, clen);
        if (held == CKPT_OK)
            held = ckpt__error(CKPT_ENOMEM, "rank %d: no memory for its list of forwarded pieces "
                                            "(%llu bytes)", s->rank, (unsigned long long)clen);
        if (rc == CKPT_OK)
            rc = held;
    }
    cc->held = held;
    return rc;
}

/* The chief's own share (the node cache's fetch, restore_cache.c: its reads, like every rank's,
 * decide what it fetches from other nodes), replacing its reader of the whole index. */
int ckpt__restore_own_share(ckpt_saver *s, const char *prefix, ckpt_reader **r)
{
    Mpickpt__Fragment w = MPICKPT__FRAGMENT__INIT;
    ckpt__share *sh = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    ckpt_reader *mine = NULL;
    int rc = build_wants(s, &w, 0);
    if (rc == CKPT_OK)
        rc = ckpt__share_new(&sh, ckpt__reader_index(*r));
    if (rc == CKPT_OK)
        rc = ckpt__share_pack(sh, &w, &bytes, &len);
    if (rc == CKPT_OK)
        rc = ckpt__reader_open_payload(&mine, prefix, bytes, len, 0);
    free(bytes);
    ckpt__share_free(sh);
    ckpt__fragment_free_built(&w);
    if (rc == CKPT_OK) {
        ckpt_reader_free(*r);
        *r = mine;
    }
    return rc;
}


/* ---- one restore, phase by phase (restore_impl) ------------------------------------------- */

/* A per-rank value read, applied only once every rank succeeded. */
typedef struct staged {
    size_t reg;
    uint8_t *bytes;
    size_t len;
} staged;

/* One restore's state, from phase to phase. */
typedef struct restore_run {
    ckpt_saver *s;
    const ckpt__target_ops *target; /* where the checkpoint is (target.h): the chief's level */
    unsigned level;                 /* this rank's level (options version 3; 0 before) */
    int level_differs;              /* it is not the chief's: CKPT_EINVAL, agreed with the wants */
    int compare;            /* names compared before any data is read (options version 2) */
    ckpt_restore_options o; /* the caller's, as of their version */
    char prefix[4096];      /* the chief's (the node cache: in this rank's node's cache) */
    char name[4096];        /* what messages call it (the node cache: the checkpoint's name) */
    double t0, t1;          /* the summary line's phases (save_summary.c) */
    uint64_t ckpt_bytes;    /* the chief: the checkpoint's size */
    ckpt_reader *r;
    coop_ctx cc;
    ckpt__names nc; /* the chief's comparison of names */
    ckpt_name_list *lmiss, *lunexp;
    int mismatch;
    int fetched; /* what the target's fetch holds, for its fetch_done */
    staged *st;
    size_t nst;
    double own[2], phase[2]; /* this rank's phases; the slowest rank's of each */
    int slowest[2];
} restore_run;

/* The prefix and the level, the chief's on every rank (a level that is not one: the same
 * CKPT_EINVAL everywhere; a rank whose own differs fails with the wants' gather, agreed), then the
 * prefix as the level's target names it (its open_restore: the node cache's, restore_cache.c, puts
 * it in this rank's node's cache directory and rebuilds what a lost or wiped node lacks).
 * Collective. */
static int restore_name(restore_run *x, const char *prefix_arg)
{
    ckpt_saver *s = x->s;
    int64_t level = x->level; /* the chief's, after the broadcast */
    int rc = ckpt__save_bcast_prefix(s, prefix_arg, x->prefix, sizeof x->prefix, NULL, &level);
    if (rc != CKPT_OK)
        return rc;
    if (level != 0 && level != CKPT_LEVEL_PERSISTENT && level != CKPT_LEVEL_CACHE)
        return ckpt__error(CKPT_EINVAL, "ckpt_restore_options.level %lld is not a level",
                           (long long)level);
    int cache = level == CKPT_LEVEL_CACHE;
    x->target = cache ? &ckpt__target_cache : &ckpt__target_persistent;
    x->level_differs = cache != (x->level == CKPT_LEVEL_CACHE);
    return x->target->open_restore(s, x->prefix, sizeof x->prefix, x->name, sizeof x->name);
}

/* The caller's options as of their version; the lists it asks for NULL until handed out. */
static void restore_options(restore_run *x, const ckpt_restore_options *opts)
{
    /* NULL options and version 1: the behaviour before strict restores */
    ckpt_restore_options o = { 1, 0, 0, NULL, NULL, 0u, NULL };
    if (opts && opts->version >= 3 && opts->version <= CKPT_RESTORE_OPTIONS_VERSION)
        o = *opts;
    else if (opts && opts->version == 2) /* a version 2 struct ends before the level */
        memcpy(&o, opts, offsetof(ckpt_restore_options, level));
    else if (opts)
        o.skip_missing_per_rank = opts->skip_missing_per_rank;
    if (opts && opts->version >= 2) {
        if (opts->missing)
            *opts->missing = NULL;
        if (opts->unexpected)
            *opts->unexpected = NULL;
    }
    x->o = o;
    /* version 3's CKPT_RESTORE_NO_COMPARE: version 1's behaviour at any level */
    x->compare = o.version >= 2 && !(o.version >= 3 && o.strict == CKPT_RESTORE_NO_COMPARE);
    if (!x->compare)
        x->o.strict = 0;
}

/* The chief reads, validates and checks the checkpoint; its verdict travels with the gather of
 * every rank's wants. The chief's status (CKPT_OK on the others). */
static int open_index(restore_run *x)
{
    if (x->s->rank != 0)
        return CKPT_OK;
    char ipath[4200];
    uint8_t *file = NULL;
    const uint8_t *payload = NULL;
    size_t plen = 0;
    int local;
    if ((local = ckpt__path(ipath, sizeof ipath, "%s.index", x->prefix)) == CKPT_OK &&
        (local = ckpt__index_read(&file, &payload, &plen, ipath)) == CKPT_ENOTFOUND)
        ckpt__error_set_reason(ckpt__error(local, "no checkpoint at %s (%s does not exist)",
                                           x->prefix, ipath),
                               CKPT_REASON_NO_CHECKPOINT);
    /* a node-local target's data files are on their nodes (its open_restore checked them) */
    if (local == CKPT_OK)
        local = ckpt__reader_open_payload(&x->r, x->prefix, payload, plen,
                                          x->target->node_local ? CKPT__READER_CHECK_INDEX
                                                                : CKPT__READER_CHECK_ALL);
    if (local == CKPT_OK)
        x->ckpt_bytes = ckpt__index_bytes(ckpt__reader_index(x->r));
    free(file);
    return local;
}

/* A non-chief rank's wants, packed for the gather (the chief's are built where it uses them). */
static int pack_wants(const restore_run *x, uint8_t **wbuf, size_t *wlen)
{
    ckpt_saver *s = x->s;
    Mpickpt__Fragment wants = MPICKPT__FRAGMENT__INIT;
    int mine = s->rank == 0 ? CKPT_OK : build_wants(s, &wants, x->o.skip_missing_per_rank);
    if (mine == CKPT_OK && s->rank != 0) {
        *wlen = mpickpt__fragment__get_packed_size(&wants);
        if ((*wbuf = malloc(*wlen ? *wlen : 1)))
            mpickpt__fragment__pack(&wants, *wbuf);
        else
            mine = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    }
    ckpt__fragment_free_built(&wants);
    return mine;
}

/* The cooperative restore (restore_coop.c): the chief decides, from every rank's node; *zeros
 * holds the nodes it made (one node for all), for the caller to free. */
static int coop_decide(restore_run *x, int local, int **zeros)
{
    ckpt_saver *s = x->s;
    if (s->rank != 0 || x->target->node_local || s->size <= 1 || local != CKPT_OK)
        return local;
    int on = 1;
    local = ckpt__env_bool(&on, "MPICKPT_RESTORE_COOPERATIVE", 1);
    x->cc.planned = local == CKPT_OK && on;
    x->cc.optional = x->o.skip_missing_per_rank;
    /* every rank's node, known since the saver's create where it splits nodes (per-node
     * layout, cache levels); elsewhere one node for all */
    x->cc.node_of = s->node_of;
    if (!x->cc.node_of && !(x->cc.node_of = *zeros = calloc((size_t)s->size, sizeof **zeros)))
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    return local;
}

/* The chief compares the names while it serves the shares: its own wants first. */
static void names_begin(restore_run *x, int local)
{
    ckpt__names *nc = &x->nc;
    nc->rc = CKPT_OK;
    if (!x->compare || x->s->rank != 0 || local != CKPT_OK)
        return;
    nc->idx = ckpt__reader_index(x->r);
    if (!(nc->used = calloc(nc->idx->n_tensors ? nc->idx->n_tensors : 1, 1)))
        nc->rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    Mpickpt__Fragment own = MPICKPT__FRAGMENT__INIT;
    if (nc->rc == CKPT_OK &&
        (nc->rc = build_wants(x->s, &own, x->o.skip_missing_per_rank)) == CKPT_OK)
        ckpt__names_note(nc, &own);
    ckpt__fragment_free_built(&own);
}

/* Whether every rank can take part in the cooperative restore's transfers: its list and buffers
 * held (ckpt__coop_new), the chief's sends done. A rank that cannot, or a failed send, stops the
 * transfers on every rank with its failure (point-to-point through the chief, before any
 * transfer: the restore's count of collectives is unchanged). */
static void coop_settle(restore_run *x, int *local)
{
    coop_ctx *cc = &x->cc;
    if (!cc->active)
        return;
    int held = cc->held;
    if (held == CKPT_OK && cc->list)
        held = ckpt__coop_new(&cc->co, cc->list, cc->list_len, x->s->rank);
    int v = ckpt__coop_settle(x->s, held);
    if (v == CKPT_OK)
        return;
    cc->active = 0;
    if (*local == CKPT_OK || *local == v) /* the same text on every rank (the vote's) */
        *local = v;
}

/* Every rank's wants gathered at the chief with its verdict, then each rank's share of the index
 * sent to it (the chief compares the names meanwhile; with the cooperative restore its own share
 * and list are kept in x->cc). Returns the gather's failure (agreed: the restore ends there),
 * else CKPT_OK with this rank's status in *local. Collective. */
static int exchange_shares(restore_run *x, int *local)
{
    ckpt_saver *s = x->s;
    uint8_t *wbuf = NULL, *all = NULL;
    uint64_t *offs = NULL;
    size_t wlen = 0;
    int mine = pack_wants(x, &wbuf, &wlen);
    if (*local == CKPT_OK)
        *local = mine;
    if (*local == CKPT_OK && x->level_differs)
        *local = ckpt__error(CKPT_EINVAL,
                             "rank %d: ckpt_restore_options.level %u is not the chief's (it must "
                             "be the same on every rank)",
                             s->rank, x->level);
    int *zeros = NULL;
    *local = coop_decide(x, *local, &zeros);
    int rc = ckpt__gather_bytes(s->comm, 0, *local, wbuf, wlen, s->chunk, s->gather_scratch, &all,
                                &offs);
    free(wbuf);
    if (rc != CKPT_OK) {
        free(zeros);
        return rc;
    }
    names_begin(x, *local);
    *local = s->rank == 0
                 ? send_shares(s, x->r, all, offs, x->compare && x->nc.idx ? &x->nc : NULL, &x->cc)
                 : recv_share(s, x->prefix, &x->r, &x->cc);
    x->cc.node_of = NULL;
    free(zeros);
    coop_settle(x, local);
    free(all);
    free(offs);
    return CKPT_OK;
}

/* The cooperative restore: the chief's reads go by its own share (without what it is
 * forwarded); the pieces several ranks read are read once and forwarded. Every rank with a list
 * takes part whatever its status: one that failed before (or at MPICKPT_FAULT "<rank>:coop", as
 * if the index of its list could not be opened) reads and copies nothing — as a plain restore's
 * reads, which a failed rank skips — and sends its failure where it is a piece's reader. No
 * agreement before the transfers: the vote after the reads carries every failure.
 * Point-to-point only. */
static int coop_phase(restore_run *x, int local)
{
    ckpt_saver *s = x->s;
    coop_ctx *cc = &x->cc;
    if (s->rank == 0 && cc->own) {
        ckpt_reader *own_r = NULL;
        int st = ckpt__reader_open_payload(&own_r, x->prefix, cc->own, cc->own_len, 0);
        if (st == CKPT_OK) {
            ckpt_reader_free(x->r);
            x->r = own_r;
        } else if (local == CKPT_OK) {
            local = st;
        }
    }
    free(cc->own);
    cc->own = NULL;
    if (cc->active && cc->co) {
        /* a rank that failed opens no index: it reads and copies nothing, and passes on */
        int st = ckpt__coop_index(cc->co, x->prefix, cc->list,
                                  local != CKPT_OK ? local : ckpt__fault(s->rank, "coop"));
        if (st != CKPT_OK && local == CKPT_OK)
            local = st;
        if ((st = ckpt__coop_run(s, cc->co)) != CKPT_OK && local == CKPT_OK)
            local = st;
    }
    ckpt__coop_free(cc->co);
    cc->co = NULL;
    free(cc->list);
    cc->list = NULL;
    return local;
}

/* Registration `g` against the checkpoint's tensor `t`: the same dtype and shape (a blob: one
 * dimension of bytes), else the mismatch. */
static int check_tensor(const restore_run *x, const ckpt__reg *g, const ckpt_tensor_info *t)
{
    if (!(g->kind == CKPT_KIND_BLOB
              ? (t->dtype != CKPT_UINT8 || t->shape.ndims != 1)
              : (t->dtype != g->dtype || !ckpt_shape_equal(&t->shape, &g->shape))))
        return CKPT_OK;
    char a[64] = "", b[64] = "";
    for (int d = 0; d < t->shape.ndims; d++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
                 (long long)t->shape.dims[d]);
    for (int d = 0; d < g->shape.ndims; d++)
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
                 (long long)g->shape.dims[d]);
    if (g->kind == CKPT_KIND_BLOB)
        return ckpt__error(CKPT_EMISMATCH, "rank %d: '%s' is not a blob", x->s->rank, g->stored);
    return ckpt__error(CKPT_EMISMATCH,
                       "rank %d: tensor '%s' is %s [%s] in %s, registered as %s [%s]", x->s->rank,
                       g->stored, ckpt_dtype_name(t->dtype), a, x->prefix,
                       ckpt_dtype_name(g->dtype), b);
}

/* Registration k, read: straight into its buffer, or (per-rank values) staged in x->st. What the
 * checkpoint lacks is left untouched when the options allow it. Local. */
static int read_reg(restore_run *x, size_t k)
{
    ckpt_saver *s = x->s;
    const ckpt__reg *g = &s->regs.v[k];
    int per_rank = g->kind == CKPT_KIND_COMPONENT || g->kind == CKPT_KIND_BLOB;
    size_t ti;
    int found = ckpt_reader_find(&ti, x->r, g->stored);
    if (found != CKPT_OK) {
        /* not strict: what the checkpoint lacks is left untouched (and listed) */
        if ((per_rank && x->o.skip_missing_per_rank) ||
            (x->compare && (!x->o.strict || strncmp(g->stored, CKPT__NAMES_RESERVED,
                                                    sizeof CKPT__NAMES_RESERVED - 1) == 0))) {
            ckpt_error_clear(); /* kept: the lookup's own "no tensor" (local is CKPT_OK) */
            return CKPT_OK;
        }
        int local = ckpt__error(CKPT_ENOTFOUND,
                                "rank %d: '%s' is not in checkpoint %s (written by %d ranks)%s",
                                s->rank, g->stored, x->prefix,
                                ckpt_reader_header(x->r)->world_size,
                                per_rank ? "; per-rank data of a rank the writer did not have (set "
                                           "skip_missing_per_rank to leave it untouched)"
                                         : "");
        ckpt__error_set_reason(local, CKPT_REASON_NO_TENSOR);
        return local;
    }
    ckpt_tensor_info t;
    ckpt_reader_tensor(&t, x->r, ti);
    ckpt_dtype dtype = g->kind == CKPT_KIND_BLOB ? CKPT_UINT8 : g->dtype;
    int local = check_tensor(x, g, &t);
    if (local != CKPT_OK)
        return local;
    const ckpt_slice *want = g->kind == CKPT_KIND_BLOB ? NULL : &g->slice;
    int64_t n;
    if (want)
        ckpt_slice_num_elements(&n, want);
    else
        n = t.shape.dims[0];
    size_t nbytes = (size_t)n * ckpt_dtype_size(dtype);
    void *dst = g->data;
    if (per_rank) {
        staged *st = &x->st[x->nst];
        if (!(st->bytes = malloc(nbytes ? nbytes : 1)))
            return ckpt__error(CKPT_ENOMEM, "rank %d: cannot allocate %zu bytes for '%s'",
                               s->rank, nbytes, g->stored);
        st->reg = k;
        st->len = nbytes;
        dst = st->bytes;
        x->nst++;
    }
    local = ckpt_reader_read(x->r, g->stored, dtype, want, dst, nbytes);
    if (local != CKPT_OK)
        local = ckpt__error_wrap(local, "rank %d", s->rank);
    return local;
}

/*
 * Tensors every checkpoint holds (full, partitioned, replicated) are read straight into the
 * registered buffers: a restore that succeeds, from this checkpoint or from an older one that
 * the manager falls back to, overwrites every element of them. Per-rank values (replica
 * components, registered savers' blobs) are staged instead and applied only once every rank
 * has read and checked everything (apply_staged): an older checkpoint written by fewer ranks
 * may lack this rank's, and then nothing of a rejected checkpoint may be left in them.
 * Registered restores run last, after every tensor is in (TensorFlow runs registered restores
 * after the default ones). Local.
 */
static int read_all(restore_run *x, int local)
{
    ckpt_saver *s = x->s;
    x->st = calloc(s->regs.n ? s->regs.n : 1, sizeof *x->st);
    if (!x->st && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    for (size_t k = 0; k < s->regs.n && local == CKPT_OK; k++)
        local = read_reg(x, k);
    return local;
}

/* Every rank has read and checked everything it needs: only now are per-rank values applied
 * (the agreement is a vote that also carries the slowest rank of each phase), then the
 * restore's agreement. Collective. */
static int apply_staged(restore_run *x, int local)
{
    ckpt_saver *s = x->s;
    x->own[0] = x->t1 - x->t0;
    x->own[1] = ckpt__mono_seconds() - x->t1;
    x->slowest[0] = x->slowest[1] = -1;
    ckpt__summary_encode(x->phase, x->own, 2, s->rank);
    local = ckpt__mpi_vote(s->comm, local, x->phase, 2);
    if (local == CKPT_OK)
        ckpt__summary_decode(x->phase, x->slowest, x->phase, 2);
    for (size_t i = 0; i < x->nst && local == CKPT_OK; i++) /* replica components */
        if (s->regs.v[x->st[i].reg].kind == CKPT_KIND_COMPONENT && x->st[i].len)
            memcpy(s->regs.v[x->st[i].reg].data, x->st[i].bytes, x->st[i].len);
    for (size_t i = 0; i < x->nst && local == CKPT_OK; i++) { /* then registered savers */
        const ckpt__reg *g = &s->regs.v[x->st[i].reg];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        int cb = g->cb.restore(x->st[i].bytes, x->st[i].len, g->payload);
        if (cb != CKPT_OK)
            local = ckpt__error(cb, "rank %d: registered saver '%s' failed to restore (%d)",
                                s->rank, g->name, cb);
    }
    for (size_t i = 0; i < x->nst; i++)
        free(x->st[i].bytes);
    free(x->st);
    x->st = NULL;
    x->nst = 0;
    return ckpt_mpi_agree(s->comm, local);
}

/* A restore that succeeded: the saver's counter, the caller's info, the summary line. */
static void restored(restore_run *x, ckpt_restore_info *info)
{
    const ckpt_header *h = ckpt_reader_header(x->r);
    x->s->counter = h->save_counter;
    if (info) {
        info->save_counter = h->save_counter;
        info->epoch = h->epoch;
        info->step = h->step;
        info->end_of_epoch = h->end_of_epoch;
        info->world_size = h->world_size;
        info->layout = h->layout;
    }
    ckpt__restore_log_summary(x->s, x->prefix, x->ckpt_bytes, h->world_size,
                              ckpt__mono_seconds() - x->t0, x->phase, x->slowest, x->own[0],
                              x->own[1]);
}

/* What the restore holds, released; the lists of names handed to the caller when `hand` and it
 * asked for them (strict restores' options), else freed. */
static void restore_done(restore_run *x, int hand)
{
    ckpt_reader_free(x->r);
    ckpt__coop_free(x->cc.co);
    free(x->cc.list);
    x->target->fetch_done(x->s, x->fetched);
    if (hand && x->compare && x->o.missing && x->lmiss)
        *x->o.missing = x->lmiss;
    else
        ckpt_name_list_free(x->lmiss);
    if (hand && x->compare && x->o.unexpected && x->lunexp)
        *x->o.unexpected = x->lunexp;
    else
        ckpt_name_list_free(x->lunexp);
}

static int restore_impl(ckpt_saver *s, const char *prefix_arg, unsigned level,
                        const ckpt_restore_options *opts, ckpt_restore_info *info,
                        int *unavailable);

/* Options version 3: the level, and *unavailable of the cache level (restore_impl's). */
int ckpt_saver_restore(ckpt_saver *s, const char *prefix_arg, const ckpt_restore_options *opts,
                       ckpt_restore_info *info)
{
    int v3 = opts && opts->version >= 3 && opts->version <= CKPT_RESTORE_OPTIONS_VERSION;
    int unavailable = 0;
    int rc = restore_impl(s, prefix_arg, v3 ? opts->level : 0, opts, info, &unavailable);
    if (v3 && opts->unavailable)
        *opts->unavailable = rc != CKPT_OK && unavailable;
    return rc;
}

int ckpt__saver_restore_cache(ckpt_saver *s, const char *name, const ckpt_restore_options *opts,
                              ckpt_restore_info *info, int *unavailable)
{
    int dummy;
    return restore_impl(s, name, CKPT_LEVEL_CACHE, opts, info,
                        unavailable ? unavailable : &dummy);
}

/*
 * The chief opens the checkpoint (index checks plus data-file sizes); every rank sends it what it
 * reads and receives its share of the index (lib/share.h), then reads the pieces overlapping what
 * it owns. Collective: the prefix's broadcast, the gather of the wants (a gather, the verdict's
 * broadcast, a gatherv), the chief's sends, and two agreements; with options version 2 also
 * the broadcast of the names' comparison (strict restores: its header, then the names).
 * `level` (CKPT_LEVEL_*, 0: persistent; the chief's is every rank's) chooses the target that
 * names, rebuilds and fetches (target.h; the node cache's add their collectives).
 * `unavailable` (may be NULL): set to 1 when a restore from the node cache failed before reading
 * what was registered (the copy could not be made whole, read or fetched), 0 otherwise — a
 * registration that does not match the checkpoint is then told apart from a cache that lost it.
 */
static int restore_impl(ckpt_saver *s, const char *prefix_arg, unsigned level,
                        const ckpt_restore_options *opts, ckpt_restore_info *info,
                        int *unavailable)
{
    if (unavailable)
        *unavailable = 0;
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    /* Restore waits for a save in flight; a failure of that save is kept for the next save, sync
     * or close to report (restoring an older checkpoint is fine). */
    ckpt_saver_wait(s);
    restore_run x;
    memset(&x, 0, sizeof x);
    x.s = s;
    x.level = level;
    x.fetched = -1;
    x.t0 = ckpt__mono_seconds();
    int rc = restore_name(&x, prefix_arg);
    if (unavailable) /* until the node cache's copy is whole (its fetch) */
        *unavailable = x.target == &ckpt__target_cache;
    if (rc != CKPT_OK)
        return rc;
    restore_options(&x, opts);
    int local = open_index(&x);
    if ((rc = exchange_shares(&x, &local)) != CKPT_OK) {
        ckpt_reader_free(x.r);
        return rc;
    }
    if (x.compare) /* the lists to every rank */
        local = ckpt__names_share(s, local, &x.nc, x.o.strict, &x.lmiss, &x.lunexp,
                                  &x.mismatch);
    if ((rc = x.target->fetch(s, &x.r, x.prefix, x.name, &local, &x.fetched)) != CKPT_OK) {
        restore_done(&x, 0);
        return rc;
    }
    if (unavailable) /* from here on, the copy is whole: failures are the registration's */
        *unavailable = 0;
    if (x.mismatch && local == CKPT_OK) /* before any data is read; every rank has the lists */
        local = ckpt__names_mismatch_error(x.name, x.lmiss, x.lunexp);
    x.t1 = ckpt__mono_seconds();
    local = coop_phase(&x, local);
    local = read_all(&x, local);
    rc = apply_staged(&x, local);
    if (rc == CKPT_OK)
        restored(&x, info);
    restore_done(&x, 1);
    return rc;
}
