/*
 * The cooperative restore (docs/design.md §5, docs/scaling.md): a stored piece that several ranks
 * read (a replicated tensor saved once, a piece straddling the boxes of an N->M reshard) is read
 * from storage by one of them and forwarded over MPI to the others.
 *
 * The chief (ckpt__coop_plan): from every rank's wants, the pieces that more than one rank selects
 * for a plain (KIND_FULL) want; each gets one reader among the ranks that want it, the largest
 * pieces first, to the least loaded node and then the least loaded rank (by bytes). Each rank's
 * share of the index then leaves those pieces out, and a second message lists them: an index of
 * only those pieces (the same wire format as a share) and per piece {id, reader, members...}.
 * MPICKPT_RESTORE_COOPERATIVE=0 turns it off (every rank reads all it needs, as before).
 *
 * The list's items: per piece COOP_ITEM_HEAD values {id, reader, members, bytes, rows} then per
 * member COOP_MEMBER {rank, first row, end row, node} (restore_coop.h): a rank takes part in the
 * transfers (restore_coop_run.c) from these alone, without the index that comes with them.
 */
#include "saver_internal.h"

#include "index.h"
#include "share.h"
#include "restore_coop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a piece whose rows are longer than this is read by every rank that wants it */
#define COOP_MAX_ROW ((uint64_t)256 << 20)

/* ---- the chief's plan -------------------------------------------------------------------- */

typedef struct pair {
    uint64_t pid;
    uint64_t bytes; /* the piece's */
    uint64_t own;   /* what the rank would read of it by itself (lib/reader.c's read_rows) */
    int64_t lo, hi; /* the rows of the piece it needs */
    int rank;
} pair;

typedef struct group {
    size_t first, n; /* its pairs */
    uint64_t bytes;
    int reader;
} group;

typedef struct plan_ctx {
    const Mpickpt__Index *idx;
    const uint64_t *base; /* [n_tensors] the id of each tensor's first piece */
    pair *pairs;
    size_t npairs, cap;
    int32_t *group_of; /* [pieces] */
    group *groups;
    const int *node_of;
    int rank;       /* the rank being listed or packed */
    int64_t *items; /* the items of the rank being packed */
    size_t nitems, icap;
    int rc;
} plan_ctx;

static int list_cb(void *arg, size_t ti, size_t j, int eligible, const ckpt_slice *want)
{
    plan_ctx *c = arg;
    const Mpickpt__Tensor *t = c->idx->tensors[ti];
    const Mpickpt__Piece *p = t->pieces[j];
    int nd = (int)t->n_shape;
    if (!eligible || c->rc != CKPT_OK || p->n_count < 1 || p->count[0] <= 0 || p->bytes == 0 ||
        p->bytes / (uint64_t)p->count[0] > COOP_MAX_ROW)
        return 0;
    /* the rows it needs, and what reading them itself would cost: whole rows of a piece with
     * block checksums are read block by block, anything else whole */
    ckpt_slice ps, reg;
    ckpt__piece_slice(&ps, p, nd);
    int64_t lo = 0, hi = ps.count[0];
    int whole_rows = 1;
    if (want && ckpt_slice_intersect(&reg, &ps, want) == 1) {
        lo = reg.start[0] - ps.start[0];
        hi = lo + reg.count[0];
        for (int d = 1; d < nd; d++)
            whole_rows &= reg.count[d] == ps.count[d];
    }
    uint64_t row = p->bytes / (uint64_t)p->count[0], own = p->bytes, bs = p->block_bytes;
    if (whole_rows && p->n_block_crc32c && bs && (lo > 0 || hi < ps.count[0])) {
        uint64_t blo = (uint64_t)lo * row / bs * bs;
        uint64_t bhi = ((uint64_t)hi * row + bs - 1) / bs * bs;
        own = (bhi < p->bytes ? bhi : p->bytes) - blo;
    }
    if (c->npairs == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        pair *np = realloc(c->pairs, cap * sizeof *np);
        if (!np) {
            c->rc = ckpt__error(CKPT_ENOMEM, "out of memory");
            return 0;
        }
        c->pairs = np;
        c->cap = cap;
    }
    c->pairs[c->npairs++] = (pair){c->base[ti] + j, p->bytes, own, lo, hi, c->rank};
    return 0;
}

static int cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Whether rank `rank` is among group g's ranks (sorted). */
static int member(const plan_ctx *c, const group *g, int rank)
{
    size_t l = g->first, r = g->first + g->n;
    while (l < r) {
        size_t m = l + (r - l) / 2;
        if (c->pairs[m].rank < rank)
            l = m + 1;
        else
            r = m;
    }
    return l < g->first + g->n && c->pairs[l].rank == rank;
}

static int solo_cb(void *arg, size_t ti, size_t j, int eligible, const ckpt_slice *want)
{
    (void)eligible;
    (void)want;
    plan_ctx *c = arg;
    int32_t g = c->group_of[c->base[ti] + j];
    return g < 0 || !member(c, &c->groups[g], c->rank);
}

static int items_push(plan_ctx *c, int64_t v)
{
    if (c->nitems == c->icap) {
        size_t cap = c->icap ? 2 * c->icap : 64;
        int64_t *ni = realloc(c->items, cap * sizeof *ni);
        if (!ni)
            return c->rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        c->items = ni;
        c->icap = cap;
    }
    c->items[c->nitems++] = v;
    return CKPT_OK;
}

static int coop_cb(void *arg, size_t ti, size_t j, int eligible, const ckpt_slice *want)
{
    (void)eligible;
    (void)want;
    plan_ctx *c = arg;
    uint64_t pid = c->base[ti] + j;
    int32_t gi = c->group_of[pid];
    if (gi < 0 || !member(c, &c->groups[gi], c->rank))
        return 0;
    const group *g = &c->groups[gi];
    const Mpickpt__Piece *p = c->idx->tensors[ti]->pieces[j];
    int64_t head[COOP_ITEM_HEAD] = {(int64_t)pid, g->reader, (int64_t)g->n, (int64_t)p->bytes,
                                    p->count[0]};
    for (int k = 0; k < COOP_ITEM_HEAD && c->rc == CKPT_OK; k++)
        items_push(c, head[k]);
    for (size_t k = 0; k < g->n && c->rc == CKPT_OK; k++) {
        const pair *m = &c->pairs[g->first + k];
        int64_t mem[COOP_MEMBER] = {m->rank, m->lo, m->hi, c->node_of[m->rank]};
        for (int q = 0; q < COOP_MEMBER && c->rc == CKPT_OK; q++)
            items_push(c, mem[q]);
    }
    return 1;
}

static int cmp_group_bytes(const void *a, const void *b)
{
    const group *x = *(const group *const *)a, *y = *(const group *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

/* The pieces worth forwarding, from every rank's selections (c->pairs): sorted by piece, a
 * rank's selections of one piece merged, a group of two or more ranks per piece whose separate
 * reads would exceed 1.125x it (c->groups, c->group_of; *ngroups of them). */
static int make_groups(plan_ctx *c, uint64_t npieces, size_t *ngroups)
{
    if (c->npairs > 1)
        qsort(c->pairs, c->npairs, sizeof *c->pairs, cmp_pair);
    c->group_of = malloc((npieces ? npieces : 1) * sizeof *c->group_of);
    c->groups = malloc((c->npairs / 2 + 1) * sizeof *c->groups);
    if (!c->group_of || !c->groups)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < npieces; i++)
        c->group_of[i] = -1;
    *ngroups = 0;
    for (size_t k = 0; k < c->npairs;) {
        size_t e = k + 1;
        while (e < c->npairs && c->pairs[e].pid == c->pairs[k].pid)
            e++;
        /* a rank selecting a piece twice counts once (the rows of both) */
        size_t w = k + 1;
        uint64_t own = c->pairs[k].own;
        for (size_t q = k + 1; q < e; q++) {
            pair *last = &c->pairs[w - 1];
            if (c->pairs[q].rank != last->rank) {
                c->pairs[w++] = c->pairs[q];
                own += c->pairs[q].own;
                continue;
            }
            last->lo = c->pairs[q].lo < last->lo ? c->pairs[q].lo : last->lo;
            last->hi = c->pairs[q].hi > last->hi ? c->pairs[q].hi : last->hi;
        }
        for (size_t q = w; q < e; q++)
            c->pairs[q].rank = -1; /* after the group's range: never looked at */
        /* forwarded when the ranks reading it by themselves would read more than 1.125x it
         * (a replicated tensor: n times; an N->M reshard's ranks reading disjoint rows of a
         * piece with block checksums: about once, and then each reads its own) */
        if (w - k >= 2 && own > c->pairs[k].bytes + c->pairs[k].bytes / 8) {
            group *g = &c->groups[*ngroups];
            g->first = k;
            g->n = w - k;
            g->reader = -1;
            g->bytes = c->pairs[k].bytes;
            c->group_of[c->pairs[k].pid] = (int32_t)(*ngroups)++;
        }
        k = e;
    }
    return CKPT_OK;
}

/* Each group's reader: the largest pieces first, each to its least loaded node, then rank
 * (`order`: room for every group; the loads start as the caller set them). */
static void choose_readers(plan_ctx *c, size_t ngroups, group **order, uint64_t *rank_load,
                           uint64_t *node_load)
{
    const int *node_of = c->node_of;
    for (size_t gi = 0; gi < ngroups; gi++)
        order[gi] = &c->groups[gi];
    if (ngroups > 1)
        qsort(order, ngroups, sizeof *order, cmp_group_bytes);
    for (size_t k = 0; k < ngroups; k++) {
        group *g = order[k];
        int best = -1;
        for (size_t q = g->first; q < g->first + g->n; q++) {
            int r = c->pairs[q].rank;
            if (best < 0 || node_load[node_of[r]] < node_load[node_of[best]] ||
                (node_load[node_of[r]] == node_load[node_of[best]] &&
                 rank_load[r] < rank_load[best]))
                best = r;
        }
        g->reader = best;
        node_load[node_of[best]] += g->bytes;
        rank_load[best] += g->bytes;
    }
}

/* Rank c->rank's list of the pieces it takes part in forwarding, into *out (NULL, 0: none):
 * [u64 index length][the index of those pieces][int64 items]. */
static int pack_list(plan_ctx *c, ckpt__share *sh, const Mpickpt__Fragment *want, uint8_t **out,
                     size_t *out_len)
{
    uint8_t *cidx = NULL;
    size_t clen = 0;
    c->nitems = 0;
    int rc = ckpt__share_pack_filtered(sh, want, coop_cb, c, 1, &cidx, &clen);
    if (rc == CKPT_OK)
        rc = c->rc;
    if (rc == CKPT_OK && c->nitems) {
        size_t n = 8 + clen + c->nitems * 8;
        uint8_t *b = malloc(n);
        if (!b) {
            rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        } else {
            uint64_t l = clen;
            memcpy(b, &l, 8);
            memcpy(b + 8, cidx, clen);
            memcpy(b + 8 + clen, c->items, c->nitems * 8);
            *out = b;
            *out_len = n;
        }
    }
    free(cidx);
    return rc;
}

int ckpt__coop_plan(const Mpickpt__Index *idx, int size, Mpickpt__Fragment *const *wants,
                    const int *node_of, ckpt__coop_shares *out)
{
    memset(out, 0, sizeof *out);
    plan_ctx c = {0};
    c.idx = idx;
    c.node_of = node_of;
    c.rc = CKPT_OK;
    ckpt__share *sh = NULL;
    uint64_t *base = calloc(idx->n_tensors ? idx->n_tensors : 1, sizeof *base);
    group **order = NULL;
    uint64_t *rank_load = calloc((size_t)size, sizeof *rank_load);
    int nnodes = 0;
    for (int r = 0; r < size; r++)
        if (node_of[r] + 1 > nnodes)
            nnodes = node_of[r] + 1;
    uint64_t *node_load = calloc((size_t)(nnodes ? nnodes : 1), sizeof *node_load);
    out->share = calloc((size_t)size, sizeof *out->share);
    out->share_len = calloc((size_t)size, sizeof *out->share_len);
    out->coop = calloc((size_t)size, sizeof *out->coop);
    out->coop_len = calloc((size_t)size, sizeof *out->coop_len);
    out->size = size;
    int rc = CKPT_OK;
    if (!base || !rank_load || !node_load || !out->share || !out->share_len || !out->coop ||
        !out->coop_len) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    uint64_t npieces = 0;
    for (size_t i = 0; i < idx->n_tensors; i++) {
        base[i] = npieces;
        npieces += idx->tensors[i]->n_pieces;
    }
    c.base = base;
    if ((rc = ckpt__share_new(&sh, idx)) != CKPT_OK)
        goto done;
    /* who selects what (eligible wants only) */
    for (int r = 0; r < size && rc == CKPT_OK; r++) {
        size_t len;
        c.rank = r;
        rc = ckpt__share_pack_filtered(sh, wants[r], list_cb, &c, 0, NULL, &len);
        if (rc == CKPT_OK)
            rc = c.rc;
    }
    size_t ngroups = 0;
    if (rc != CKPT_OK || (rc = make_groups(&c, npieces, &ngroups)) != CKPT_OK)
        goto done;
    /* readers: the largest pieces first, each to the least loaded node, then rank; the chief
     * (which read the index and planned all this) last among equals */
    if (size > 1)
        rank_load[0] = 1;
    if (!(order = malloc((ngroups ? ngroups : 1) * sizeof *order))) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    choose_readers(&c, ngroups, order, rank_load, node_load);
    out->active = ngroups > 0;
    /* every rank's share without the pieces it gets from a reader, and the list of those */
    for (int r = 0; r < size && rc == CKPT_OK; r++) {
        c.rank = r;
        rc = ckpt__share_pack_filtered(sh, wants[r], solo_cb, &c, 0, &out->share[r],
                                       &out->share_len[r]);
        if (rc == CKPT_OK && ngroups)
            rc = pack_list(&c, sh, wants[r], &out->coop[r], &out->coop_len[r]);
    }
done:
    if (rc == CKPT_OK)
        rc = c.rc;
    ckpt__share_free(sh);
    free(base);
    free(order);
    free(rank_load);
    free(node_load);
    free(c.pairs);
    free(c.group_of);
    free(c.groups);
    free(c.items);
    if (rc != CKPT_OK)
        ckpt__coop_shares_free(out);
    return rc;
}

void ckpt__coop_shares_free(ckpt__coop_shares *o)
{
    for (int r = 0; r < o->size; r++) {
        if (o->share)
            free(o->share[r]);
        if (o->coop)
            free(o->coop[r]);
    }
    free(o->share);
    free(o->share_len);
    free(o->coop);
    free(o->coop_len);
    memset(o, 0, sizeof *o);
}

