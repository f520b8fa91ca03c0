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
 * Every rank (ckpt__coop_run) handles its pieces in increasing id, the same order everywhere, so
 * the piece with the smallest id not yet done always has all its ranks at it: no deadlock. The
 * reader reads a piece once, chunk by chunk (whole rows, about COOP_CHUNK bytes, into two buffers
 * in turn), with the CRC-32C of lib/reader.c running over it, copies each chunk into its own
 * registrations and sends it (MPI_Isend, tag TAG_COOP on the saver's communicator) to the ranks
 * whose rows it holds — or, for a group of COOP_TREE_MIN ranks or more, every chunk down a
 * binomial tree whose ranks pass it on while the next arrives; then a status (down the same
 * paths): the CRC's verdict or the read's error, with its message. A reader that fails still
 * sends every chunk (what its buffer holds) and the status, so a receiver never waits forever;
 * the receiver takes the reader's error as its own (the restore's agreement then fails on every
 * rank with it). A receiver copies each chunk into its registrations as it would have copied its
 * own read.
 */
#include "saver_internal.h"

#include "index.h"
#include "share.h"
#include "restore_coop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_COOP 0x6d73
/* a piece wanted by this many ranks or more goes down a binomial tree (pipelined by chunk), every
 * chunk to every rank of the group; below, from its reader to each rank, the chunks it needs */
#define COOP_TREE_MIN 8
#define COOP_CHUNK ((uint64_t)8 << 20)
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
    if (c->rc == CKPT_OK && items_push(c, (int64_t)pid) == CKPT_OK &&
        items_push(c, g->reader) == CKPT_OK && items_push(c, (int64_t)g->n) == CKPT_OK)
        for (size_t k = 0; k < g->n && c->rc == CKPT_OK; k++)
            if (items_push(c, c->pairs[g->first + k].rank) == CKPT_OK &&
                items_push(c, c->pairs[g->first + k].lo) == CKPT_OK)
                items_push(c, c->pairs[g->first + k].hi);
    return 1;
}

static int cmp_group_bytes(const void *a, const void *b)
{
    const group *x = *(const group *const *)a, *y = *(const group *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

int ckpt__coop_plan(const Mpickpt__Index *idx, int size, Mpickpt__Fragment *const *wants,
                    const int *node_of, ckpt__coop_shares *out)
{
    memset(out, 0, sizeof *out);
    plan_ctx c = {0};
    c.idx = idx;
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
    if (rc != CKPT_OK)
        goto done;
    if (c.npairs > 1)
        qsort(c.pairs, c.npairs, sizeof *c.pairs, cmp_pair);
    c.group_of = malloc((npieces ? npieces : 1) * sizeof *c.group_of);
    c.groups = malloc((c.npairs / 2 + 1) * sizeof *c.groups);
    if (!c.group_of || !c.groups) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < npieces; i++)
        c.group_of[i] = -1;
    size_t ngroups = 0;
    for (size_t k = 0; k < c.npairs;) {
        size_t e = k + 1;
        while (e < c.npairs && c.pairs[e].pid == c.pairs[k].pid)
            e++;
        /* a rank selecting a piece twice counts once (the rows of both) */
        size_t w = k + 1;
        uint64_t own = c.pairs[k].own;
        for (size_t q = k + 1; q < e; q++) {
            pair *last = &c.pairs[w - 1];
            if (c.pairs[q].rank != last->rank) {
                c.pairs[w++] = c.pairs[q];
                own += c.pairs[q].own;
                continue;
            }
            last->lo = c.pairs[q].lo < last->lo ? c.pairs[q].lo : last->lo;
            last->hi = c.pairs[q].hi > last->hi ? c.pairs[q].hi : last->hi;
        }
        for (size_t q = w; q < e; q++)
            c.pairs[q].rank = -1; /* after the group's range: never looked at */
        /* forwarded when the ranks reading it by themselves would read more than 1.125x it
         * (a replicated tensor: n times; an N->M reshard's ranks reading disjoint rows of a
         * piece with block checksums: about once, and then each reads its own) */
        if (w - k >= 2 && own > c.pairs[k].bytes + c.pairs[k].bytes / 8) {
            group *g = &c.groups[ngroups];
            g->first = k;
            g->n = w - k;
            g->reader = -1;
            g->bytes = c.pairs[k].bytes;
            c.group_of[c.pairs[k].pid] = (int32_t)ngroups++;
        }
        k = e;
    }
    /* readers: the largest pieces first, each to the least loaded node, then rank; the chief
     * (which read the index and planned all this) last among equals */
    if (size > 1)
        rank_load[0] = 1;
    if (!(order = malloc((ngroups ? ngroups : 1) * sizeof *order))) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t gi = 0; gi < ngroups; gi++)
        order[gi] = &c.groups[gi];
    if (ngroups > 1)
        qsort(order, ngroups, sizeof *order, cmp_group_bytes);
    for (size_t k = 0; k < ngroups; k++) {
        group *g = order[k];
        int best = -1;
        for (size_t q = g->first; q < g->first + g->n; q++) {
            int r = c.pairs[q].rank;
            if (best < 0 || node_load[node_of[r]] < node_load[node_of[best]] ||
                (node_load[node_of[r]] == node_load[node_of[best]] &&
                 rank_load[r] < rank_load[best]))
                best = r;
        }
        g->reader = best;
        node_load[node_of[best]] += g->bytes;
        rank_load[best] += g->bytes;
    }
    out->active = ngroups > 0;
    /* every rank's share without the pieces it gets from a reader, and the list of those */
    for (int r = 0; r < size && rc == CKPT_OK; r++) {
        c.rank = r;
        rc = ckpt__share_pack_filtered(sh, wants[r], solo_cb, &c, 0, &out->share[r],
                                       &out->share_len[r]);
        if (rc != CKPT_OK || !ngroups)
            continue;
        uint8_t *cidx = NULL;
        size_t clen = 0;
        c.nitems = 0;
        rc = ckpt__share_pack_filtered(sh, wants[r], coop_cb, &c, 1, &cidx, &clen);
        if (rc == CKPT_OK)
            rc = c.rc;
        if (rc == CKPT_OK && c.nitems) {
            /* [u64 index length][the index][int64 items] */
            size_t n = 8 + clen + c.nitems * 8;
            uint8_t *b = malloc(n);
            if (!b) {
                rc = ckpt__error(CKPT_ENOMEM, "out of memory");
            } else {
                uint64_t l = clen;
                memcpy(b, &l, 8);
                memcpy(b + 8, cidx, clen);
                memcpy(b + 8 + clen, c.items, c.nitems * 8);
                out->coop[r] = b;
                out->coop_len[r] = n;
            }
        }
        free(cidx);
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

/* ---- every rank's part --------------------------------------------------------------------- */

typedef struct coop_item {
    int64_t pid;
    size_t ti, j; /* in the coop reader's index */
    int reader;
    int n;
    const int64_t *members; /* n x {rank, first row, end row} (of the piece's rows) */
} coop_item;

struct ckpt__coop {
    ckpt_reader *r;
    coop_item *items;
    size_t n;
    int64_t *raw; /* the items' bytes (members point into it) */
    uint8_t *buf[2];
    uint64_t buf_size;
};

static int cmp_item(const void *a, const void *b)
{
    const coop_item *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The chunk of piece p: whole rows, about COOP_CHUNK bytes. */
static uint64_t chunk_of(const Mpickpt__Piece *p)
{
    uint64_t row = p->bytes / (uint64_t)p->count[0];
    if (row == 0)
        return COOP_CHUNK;
    uint64_t rows = COOP_CHUNK / row;
    return (rows ? rows : 1) * row;
}

int ckpt__coop_open(ckpt__coop **out, const char *prefix, const uint8_t *bytes, size_t len)
{
    *out = NULL;
    ckpt__coop *c = calloc(1, sizeof *c);
    if (!c)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    uint64_t clen = 0;
    int rc = CKPT_OK;
    if (len < 8 || (memcpy(&clen, bytes, 8), clen > len - 8) || (len - 8 - clen) % 8) {
        rc = ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list is cut short");
        goto fail;
    }
    if ((rc = ckpt__reader_open_payload(&c->r, prefix, bytes + 8, (size_t)clen, 0)) != CKPT_OK)
        goto fail;
    size_t nraw = (len - 8 - (size_t)clen) / 8;
    c->raw = malloc(nraw ? nraw * 8 : 1);
    const Mpickpt__Index *idx = ckpt__reader_index(c->r);
    size_t npieces = 0;
    for (size_t i = 0; i < idx->n_tensors; i++)
        npieces += idx->tensors[i]->n_pieces;
    c->items = calloc(npieces ? npieces : 1, sizeof *c->items);
    if (!c->raw || !c->items) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(c->raw, bytes + 8 + clen, nraw * 8);
    size_t k = 0;
    for (size_t i = 0; i < idx->n_tensors; i++)
        for (size_t j = 0; j < idx->tensors[i]->n_pieces; j++) {
            if (k + 3 > nraw || c->raw[k + 2] < 1 || (uint64_t)c->raw[k + 2] > (nraw - k - 3) / 3) {
                rc = ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list is cut short");
                goto fail;
            }
            coop_item *it = &c->items[c->n++];
            it->pid = c->raw[k];
            it->ti = i;
            it->j = j;
            it->reader = (int)c->raw[k + 1];
            it->n = (int)c->raw[k + 2];
            it->members = &c->raw[k + 3];
            k += 3 + 3 * (size_t)it->n;
            uint64_t ch = chunk_of(idx->tensors[i]->pieces[j]);
            if (ch > c->buf_size)
                c->buf_size = ch;
        }
    if (c->n > 1)
        qsort(c->items, c->n, sizeof *c->items, cmp_item);
    c->buf[0] = malloc(c->buf_size ? (size_t)c->buf_size : 1);
    c->buf[1] = malloc(c->buf_size ? (size_t)c->buf_size : 1);
    if (!c->buf[0] || !c->buf[1]) {
        rc = ckpt__error(CKPT_ENOMEM, "cannot allocate %llu bytes for the cooperative restore",
                         (unsigned long long)c->buf_size);
        goto fail;
    }
    *out = c;
    return CKPT_OK;
fail:
    ckpt__coop_free(c);
    return rc;
}

void ckpt__coop_free(ckpt__coop *c)
{
    if (!c)
        return;
    ckpt_reader_free(c->r);
    free(c->items);
    free(c->raw);
    free(c->buf[0]);
    free(c->buf[1]);
    free(c);
}

/* One piece's chunk, copied where this rank's registrations of its tensor want it. */
typedef struct apply_ctx {
    ckpt_saver *s;
    const Mpickpt__Tensor *t;
    const Mpickpt__Piece *p;
    const coop_item *it;
    int nd;
    ckpt_slice ps;
    uint64_t row;
    uint64_t chunk; /* bytes, whole rows */
    /* the reader's sends: two halves of `size` requests, one per buffer */
    MPI_Request *reqs;
    int nreq[2];
    uint64_t chunks;
    int rc;
} apply_ctx;

static void wait_sends(apply_ctx *a, int half)
{
    if (a->nreq[half] &&
        MPI_Waitall(a->nreq[half], a->reqs + half * a->s->size, MPI_STATUSES_IGNORE) !=
            MPI_SUCCESS &&
        a->rc == CKPT_OK)
        a->rc = ckpt__error(CKPT_EMPI, "rank %d: MPI_Waitall failed", a->s->rank);
    a->nreq[half] = 0;
}

static void apply(apply_ctx *a, const void *bytes, uint64_t off, uint64_t len)
{
    ckpt_slice box = a->ps, region;
    box.start[0] += (int64_t)(off / a->row);
    box.count[0] = (int64_t)(len / a->row);
    size_t esize = ckpt_dtype_size((ckpt_dtype)a->t->dtype);
    ckpt_shape shape;
    ckpt_shape_init(&shape, a->nd, a->t->shape);
    for (size_t k = 0; k < a->s->regs.n; k++) {
        const ckpt__reg *g = &a->s->regs.v[k];
        /* a registration the restore refuses (its own message, in the reads' loop) is skipped */
        if (g->kind == CKPT_KIND_COMPONENT || g->kind == CKPT_KIND_BLOB ||
            strcmp(g->stored, a->t->name) != 0 || g->dtype != (ckpt_dtype)a->t->dtype ||
            !ckpt_shape_equal(&g->shape, &shape))
            continue;
        if (ckpt_slice_intersect(&region, &box, &g->slice) == 1)
            (void)ckpt_slice_copy(g->data, &g->slice, bytes, &box, &region, esize);
    }
}

/* Whether member m of the item needs chunk q of `chunk` bytes (rows of `row` bytes). */
static int needs(const coop_item *it, int m, uint64_t chunk, uint64_t row, uint64_t q)
{
    uint64_t cr = chunk / row;
    int64_t lo = it->members[3 * m + 1], hi = it->members[3 * m + 2];
    return lo < hi && (int64_t)(q * cr) < hi && (int64_t)((q + 1) * cr) > lo;
}

/* The tree of a group of n ranks: position 0 its reader, then the other members in their order;
 * position i's children are i + 2^k for 2^k > i, its parent i - (its highest bit). */
static int tree_pos(const coop_item *it, int rank)
{
    if (rank == it->reader)
        return 0;
    for (int m = 0, pos = 1; m < it->n; m++) {
        int r = (int)it->members[3 * m];
        if (r == it->reader)
            continue;
        if (r == rank)
            return pos;
        pos++;
    }
    return -1;
}

static int tree_rank(const coop_item *it, int pos)
{
    if (pos == 0)
        return it->reader;
    for (int m = 0, p = 1; m < it->n; m++) {
        int r = (int)it->members[3 * m];
        if (r == it->reader)
            continue;
        if (p++ == pos)
            return r;
    }
    return -1;
}

static int tree_parent(int pos)
{
    int b = 1;
    while (b * 2 <= pos)
        b *= 2;
    return pos - b;
}

/* Sends `len` bytes to the tree children of position `pos` (requests into rq); their count. */
static int tree_isend(apply_ctx *a, int pos, const void *bytes, uint64_t len, MPI_Request *rq)
{
    int nr = 0;
    for (int b = 1; b < a->it->n; b *= 2) {
        if (b <= pos || pos + b >= a->it->n)
            continue;
        int dst = tree_rank(a->it, pos + b);
        if (MPI_Isend(bytes, (int)len, MPI_BYTE, dst, TAG_COOP, a->s->comm, &rq[nr]) !=
            MPI_SUCCESS) {
            if (a->rc == CKPT_OK)
                a->rc =
                    ckpt__error(CKPT_EMPI, "rank %d: MPI_Isend to rank %d failed", a->s->rank, dst);
            continue;
        }
        nr++;
    }
    return nr;
}

/* The reader's chunk k: copied into its own registrations, sent to the others; then the sends
 * of chunk k - 1 (from the other buffer, which the next read overwrites) are waited for. */
static void send_chunk(void *arg, const void *bytes, uint64_t off, uint64_t len)
{
    apply_ctx *a = arg;
    apply(a, bytes, off, len);
    int half = a->s->size, cur = a->chunks % 2;
    MPI_Request *rq = a->reqs + cur * half;
    int nr = 0;
    if (a->it->n >= COOP_TREE_MIN) {
        a->nreq[cur] = tree_isend(a, 0, bytes, len, rq);
        a->chunks++;
        wait_sends(a, 1 - cur);
        return;
    }
    for (int m = 0; m < a->it->n; m++) {
        int dst = (int)a->it->members[3 * m];
        if (dst == a->s->rank || !needs(a->it, m, a->chunk, a->row, off / a->chunk))
            continue;
        if (MPI_Isend(bytes, (int)len, MPI_BYTE, dst, TAG_COOP, a->s->comm, &rq[nr]) !=
            MPI_SUCCESS) {
            a->rc = ckpt__error(CKPT_EMPI, "rank %d: MPI_Isend to rank %d failed", a->s->rank, dst);
            continue;
        }
        nr++;
    }
    a->nreq[cur] = nr;
    a->chunks++;
    wait_sends(a, 1 - cur);
}

/* {code, message}: a piece's verdict from its reader */
typedef struct coop_status {
    int64_t code;
    char msg[1016];
} coop_status;

int ckpt__coop_run(ckpt_saver *s, ckpt__coop *c)
{
    int local = CKPT_OK;
    const Mpickpt__Index *idx = ckpt__reader_index(c->r);
    MPI_Request *reqs = malloc(2 * (size_t)(s->size > 0 ? s->size : 1) * sizeof *reqs);
    for (size_t k = 0; k < c->n; k++) {
        const coop_item *it = &c->items[k];
        apply_ctx a = {0};
        a.s = s;
        a.t = idx->tensors[it->ti];
        a.p = a.t->pieces[it->j];
        a.it = it;
        a.nd = (int)a.t->n_shape;
        a.row = a.p->bytes / (uint64_t)a.p->count[0];
        a.reqs = reqs;
        a.rc = CKPT_OK;
        ckpt__piece_slice(&a.ps, a.p, a.nd);
        uint64_t chunk = chunk_of(a.p);
        uint64_t nchunks = (a.p->bytes + chunk - 1) / chunk;
        a.chunk = chunk;
        int tree = it->n >= COOP_TREE_MIN;
        coop_status st;
        memset(&st, 0, sizeof st);
        if (it->reader == s->rank) {
            uint64_t delivered = 0;
            void *bufs[2] = {c->buf[0], c->buf[1]};
            int rc = reqs ? ckpt__reader_piece_stream(c->r, it->ti, it->j, bufs, chunk, send_chunk,
                                                      &a, &delivered)
                          : ckpt__error(CKPT_ENOMEM, "out of memory");
            wait_sends(&a, 0);
            wait_sends(&a, 1);
            if (rc != CKPT_OK) {
                const ckpt_error *e = ckpt_error_last();
                st.code = rc;
                snprintf(st.msg, sizeof st.msg, "%s", e && e->message ? e->message : "");
                if (local == CKPT_OK)
                    local = ckpt__error_wrap(rc, "rank %d", s->rank);
                /* the rest of the chunks, whatever the buffer holds: the receivers expect them */
                for (uint64_t q = delivered; q < nchunks; q++) {
                    uint64_t off = q * chunk,
                             n = a.p->bytes - off < chunk ? a.p->bytes - off : chunk;
                    if (tree) {
                        int nr = tree_isend(&a, 0, c->buf[0], n, reqs);
                        MPI_Waitall(nr, reqs, MPI_STATUSES_IGNORE);
                        continue;
                    }
                    for (int m = 0; m < it->n; m++)
                        if ((int)it->members[3 * m] != s->rank && needs(it, m, chunk, a.row, q))
                            MPI_Send(c->buf[0], (int)n, MPI_BYTE, (int)it->members[3 * m], TAG_COOP,
                                     s->comm);
                }
            } else if (a.rc != CKPT_OK) {
                st.code = a.rc;
                snprintf(st.msg, sizeof st.msg, "rank %d could not send a piece of '%s'", s->rank,
                         a.t->name);
                if (local == CKPT_OK)
                    local = a.rc;
            }
            if (tree) {
                int nr = tree_isend(&a, 0, &st, sizeof st, reqs);
                MPI_Waitall(nr, reqs, MPI_STATUSES_IGNORE);
            } else {
                for (int m = 0; m < it->n; m++)
                    if ((int)it->members[3 * m] != s->rank)
                        MPI_Send(&st, (int)sizeof st, MPI_BYTE, (int)it->members[3 * m], TAG_COOP,
                                 s->comm);
            }
        } else if (tree) {
            /* from its parent, each chunk passed on to its children while the next arrives */
            int pos = tree_pos(it, s->rank), from = tree_rank(it, tree_parent(pos));
            for (uint64_t q = 0; q < nchunks; q++) {
                uint64_t off = q * chunk, n = a.p->bytes - off < chunk ? a.p->bytes - off : chunk;
                wait_sends(&a, (int)(q % 2)); /* its buffer's sends of chunk q - 2 */
                if (MPI_Recv(c->buf[q % 2], (int)n, MPI_BYTE, from, TAG_COOP, s->comm,
                             MPI_STATUS_IGNORE) != MPI_SUCCESS &&
                    local == CKPT_OK)
                    local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv from rank %d failed", s->rank,
                                        from);
                a.nreq[q % 2] =
                    tree_isend(&a, pos, c->buf[q % 2], n, reqs + (q % 2) * (uint64_t)s->size);
                apply(&a, c->buf[q % 2], off, n);
            }
            wait_sends(&a, 0);
            wait_sends(&a, 1);
            if (MPI_Recv(&st, (int)sizeof st, MPI_BYTE, from, TAG_COOP, s->comm,
                         MPI_STATUS_IGNORE) != MPI_SUCCESS)
                st.code =
                    ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv from rank %d failed", s->rank, from);
            int nr = tree_isend(&a, pos, &st, sizeof st, reqs);
            MPI_Waitall(nr, reqs, MPI_STATUSES_IGNORE);
            if (st.code != CKPT_OK && local == CKPT_OK)
                local = ckpt__error((int)st.code, "rank %d: %.1000s (read for it by rank %d)",
                                    s->rank, st.msg, it->reader);
            if (a.rc != CKPT_OK && local == CKPT_OK)
                local = a.rc;
        } else {
            /* the chunks holding its rows [qlo, qhi); chunk q + 1 is received into the other
             * buffer while chunk q is copied */
            uint64_t qlo = 0, qhi = 0;
            for (int m = 0; m < it->n; m++)
                if ((int)it->members[3 * m] == s->rank)
                    for (uint64_t q = 0; q < nchunks; q++)
                        if (needs(it, m, chunk, a.row, q)) {
                            if (qhi == 0)
                                qlo = q;
                            qhi = q + 1;
                        }
            MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
            for (uint64_t q = qlo; q < qhi + 1 && qhi > 0; q++) {
                if (q < qhi) {
                    uint64_t off = q * chunk,
                             n = a.p->bytes - off < chunk ? a.p->bytes - off : chunk;
                    if (MPI_Irecv(c->buf[q % 2], (int)n, MPI_BYTE, it->reader, TAG_COOP, s->comm,
                                  &rq[q % 2]) != MPI_SUCCESS &&
                        local == CKPT_OK)
                        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Irecv from rank %d failed",
                                            s->rank, it->reader);
                }
                if (q == qlo)
                    continue;
                uint64_t p = q - 1, off = p * chunk,
                         n = a.p->bytes - off < chunk ? a.p->bytes - off : chunk;
                if (MPI_Wait(&rq[p % 2], MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                    if (local == CKPT_OK)
                        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv from rank %d failed",
                                            s->rank, it->reader);
                    continue;
                }
                apply(&a, c->buf[p % 2], off, n);
            }
            if (MPI_Recv(&st, (int)sizeof st, MPI_BYTE, it->reader, TAG_COOP, s->comm,
                         MPI_STATUS_IGNORE) != MPI_SUCCESS)
                st.code = ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv from rank %d failed", s->rank,
                                      it->reader);
            else if (st.code != CKPT_OK && local == CKPT_OK)
                local = ckpt__error((int)st.code, "rank %d: %.1000s (read for it by rank %d)",
                                    s->rank, st.msg, it->reader);
        }
    }
    free(reqs);
    return local;
}
