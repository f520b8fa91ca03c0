/*
 * The cooperative restore's transfers (docs/scaling.md; the plan: restore_coop.c). Every rank
 * (ckpt__coop_run) handles its pieces in increasing id, the same order everywhere, so the piece
 * with the smallest id not yet done always has all its ranks at it: no deadlock.
 *
 * A piece goes from its reader down a tree of its ranks, node-aware: the reader sends to the
 * ranks of its own node and to one rank of each other node (that node's first in the piece's
 * list), which passes it on to the other ranks of its node — one copy crosses to each node. At
 * each of those levels a group of COOP_TREE_MIN ranks or more is a binomial tree, a smaller one
 * a star. A rank is sent the chunks (whole rows, about COOP_CHUNK bytes) that it or a rank below
 * it needs, and passes each on while the next arrives (two buffers in turn).
 *
 * The reader reads the piece once, chunk by chunk, with the CRC-32C of lib/reader.c running
 * over it, copies each chunk into its own registrations and sends it (MPI_Isend, tag TAG_COOP on
 * the saver's communicator); then a status (down the same tree): the CRC's verdict or the read's
 * error, with its message. A reader that fails — or that could not open the index of its list —
 * still sends every chunk (what its buffer holds) and the status, so a receiver never waits
 * forever; the receiver takes the reader's error as its own. A rank whose own restore failed
 * before (its share, its registrations) takes part all the same: no rank leaves the transfers
 * early, so the restore needs no agreement before them; the vote after the reads
 * (restore.c apply_staged) carries every failure. A receiver copies each chunk into its
 * registrations as it would have copied its own read.
 *
 * Only a rank that cannot take part at all (its items, trees or chunk buffers not allocated:
 * ckpt__coop_new; its list not held, or a failed send of the chief's shares: restore.c) would
 * leave its peers waiting: that is settled first (ckpt__coop_settle, point-to-point through the
 * chief, no collective), and then no rank runs its list.
 */
#include "saver_internal.h"

#include "index.h"
#include "restore_coop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_COOP 0x6d73
#define TAG_SETTLE 0x6d74
/* a level of a piece's tree with this many ranks or more is a binomial tree (pipelined by
 * chunk); below, a star from its root */
#define COOP_TREE_MIN 8
#define COOP_CHUNK ((uint64_t)8 << 20)

uint64_t ckpt__coop_cross_node_bytes;

typedef struct coop_item {
    int64_t pid;
    size_t ti, j; /* in the list's index (when it opened) */
    int reader, n;
    uint64_t bytes, chunk, nchunks;
    int64_t rows;
    const int64_t *members; /* n x COOP_MEMBER {rank, first row, end row, node} */
} coop_item;

/* {code, message}: a piece's verdict from its reader */
typedef struct coop_status {
    int64_t code;
    char msg[1016];
} coop_status;

struct ckpt__coop {
    ckpt_reader *r;     /* NULL: the index could not be opened (why: `fail`) */
    coop_status fail;
    coop_item *items;
    size_t n;
    int64_t *raw; /* the items' values (members point into it) */
    uint8_t *buf[2];
    uint64_t buf_size;
    /* one piece's tree, by position (0 the reader, then the other members in their order) */
    int maxn;
    int *rank_at, *node_at, *parent, *kids;
    uint64_t *qlo, *qhi; /* the chunks a position and the ranks below it need */
    int64_t *sorted;     /* positions by (node, position) */
    MPI_Request *reqs;   /* two halves of maxn sends, one per buffer */
};

static int cmp_item(const void *a, const void *b)
{
    const coop_item *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The chunk of a piece: whole rows, about COOP_CHUNK bytes. */
static uint64_t chunk_of(uint64_t bytes, int64_t rows)
{
    uint64_t row = bytes / (uint64_t)rows;
    if (row == 0)
        return COOP_CHUNK;
    uint64_t n = COOP_CHUNK / row;
    return (n ? n : 1) * row;
}

/* The items, from the list's values alone (no index needed). */
static int parse_items(ckpt__coop *c, size_t nraw)
{
    size_t nitems = 0;
    for (size_t k = 0; k < nraw; nitems++) {
        if (nraw - k < COOP_ITEM_HEAD || c->raw[k + 2] < 1 || c->raw[k + 3] <= 0 ||
            c->raw[k + 4] <= 0 ||
            (uint64_t)c->raw[k + 2] > (nraw - k - COOP_ITEM_HEAD) / COOP_MEMBER)
            return ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list is cut short");
        k += COOP_ITEM_HEAD + COOP_MEMBER * (size_t)c->raw[k + 2];
    }
    if (!(c->items = calloc(nitems ? nitems : 1, sizeof *c->items)))
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t k = 0; k < nraw;) {
        coop_item *it = &c->items[c->n++];
        it->pid = c->raw[k];
        it->reader = (int)c->raw[k + 1];
        it->n = (int)c->raw[k + 2];
        it->bytes = (uint64_t)c->raw[k + 3];
        it->rows = c->raw[k + 4];
        it->members = &c->raw[k + COOP_ITEM_HEAD];
        it->chunk = chunk_of(it->bytes, it->rows);
        it->nchunks = (it->bytes + it->chunk - 1) / it->chunk;
        it->ti = it->j = (size_t)-1;
        int has_reader = 0;
        for (int m = 0; m < it->n; m++)
            has_reader |= (int)it->members[COOP_MEMBER * m] == it->reader;
        if (!has_reader)
            return ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list names a reader "
                                              "outside its piece's ranks");
        if (it->chunk > c->buf_size)
            c->buf_size = it->chunk;
        if (it->n > c->maxn)
            c->maxn = it->n;
        k += COOP_ITEM_HEAD + COOP_MEMBER * (size_t)it->n;
    }
    return CKPT_OK;
}

/* The list's index: item k (in the list's order) is its k-th piece. */
static int open_index(ckpt__coop *c, const char *prefix, const uint8_t *bytes, size_t len)
{
    int rc = ckpt__reader_open_payload(&c->r, prefix, bytes, len, 0);
    if (rc != CKPT_OK)
        return rc;
    const Mpickpt__Index *idx = ckpt__reader_index(c->r);
    size_t k = 0;
    for (size_t i = 0; i < idx->n_tensors; i++)
        for (size_t j = 0; j < idx->tensors[i]->n_pieces; j++, k++) {
            const Mpickpt__Piece *p = idx->tensors[i]->pieces[j];
            if (k >= c->n || p->bytes != c->items[k].bytes || p->n_count < 1 ||
                p->count[0] != c->items[k].rows)
                return ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list does not "
                                                  "match its index");
            c->items[k].ti = i;
            c->items[k].j = j;
        }
    if (k != c->n)
        return ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list does not match its "
                                          "index");
    return CKPT_OK;
}

int ckpt__coop_new(ckpt__coop **out, const uint8_t *bytes, size_t len, int rank)
{
    *out = NULL;
    ckpt__coop *c = calloc(1, sizeof *c);
    if (!c)
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", rank);
    uint64_t clen = 0;
    int rc = CKPT_OK;
    if (len < 8 || (memcpy(&clen, bytes, 8), clen > len - 8) || (len - 8 - clen) % 8) {
        rc = ckpt__error(CKPT_ECORRUPT, "the cooperative restore's list is cut short");
        goto fail;
    }
    size_t nraw = (len - 8 - (size_t)clen) / 8;
    if (!(c->raw = malloc(nraw ? nraw * 8 : 1))) {
        rc = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", rank);
        goto fail;
    }
    memcpy(c->raw, bytes + 8 + clen, nraw * 8);
    if ((rc = parse_items(c, nraw)) != CKPT_OK)
        goto fail;
    size_t m = (size_t)(c->maxn ? c->maxn : 1);
    c->rank_at = malloc(m * sizeof *c->rank_at);
    c->node_at = malloc(m * sizeof *c->node_at);
    c->parent = malloc(m * sizeof *c->parent);
    c->kids = malloc(m * sizeof *c->kids);
    c->qlo = malloc(m * sizeof *c->qlo);
    c->qhi = malloc(m * sizeof *c->qhi);
    c->sorted = malloc(m * sizeof *c->sorted);
    c->reqs = malloc(2 * m * sizeof *c->reqs);
    /* zeroed: a reader that cannot read sends what they hold; MPICKPT_FAULT "<rank>:coop-buf":
     * as if they could not be had */
    if ((rc = ckpt__fault(rank, "coop-buf")) == CKPT_OK) {
        c->buf[0] = calloc(1, c->buf_size ? (size_t)c->buf_size : 1);
        c->buf[1] = calloc(1, c->buf_size ? (size_t)c->buf_size : 1);
    }
    if (rc == CKPT_OK && (!c->rank_at || !c->node_at || !c->parent || !c->kids || !c->qlo ||
                          !c->qhi || !c->sorted || !c->reqs || !c->buf[0] || !c->buf[1]))
        rc = ckpt__error(CKPT_ENOMEM,
                         "rank %d: cannot allocate %llu bytes for the cooperative restore", rank,
                         (unsigned long long)c->buf_size);
    if (rc != CKPT_OK)
        goto fail;
    *out = c;
    return CKPT_OK;
fail:
    ckpt__coop_free(c);
    return rc;
}

int ckpt__coop_index(ckpt__coop *c, const char *prefix, const uint8_t *bytes, int no_index)
{
    uint64_t clen = 0;
    memcpy(&clen, bytes, 8); /* checked by ckpt__coop_new */
    int rc = no_index != CKPT_OK ? no_index : open_index(c, prefix, bytes + 8, (size_t)clen);
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        c->fail.code = rc;
        snprintf(c->fail.msg, sizeof c->fail.msg, "%s",
                 e && e->code == rc && e->message ? e->message : ckpt_strerror(rc));
        ckpt_reader_free(c->r);
        c->r = NULL;
    }
    if (c->n > 1) /* after open_index, which pairs items and pieces in the list's order */
        qsort(c->items, c->n, sizeof *c->items, cmp_item);
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
    free(c->rank_at);
    free(c->node_at);
    free(c->parent);
    free(c->kids);
    free(c->qlo);
    free(c->qhi);
    free(c->sorted);
    free(c->reqs);
    free(c);
}

/* ---- one piece's tree ---------------------------------------------------------------------- */

static int tree_parent(int i)
{
    int b = 1;
    while (b * 2 <= i)
        b *= 2;
    return i - b;
}

/* The positions lst[0..cnt) as one level: a binomial tree rooted at lst[0] (COOP_TREE_MIN or
 * more), else a star. */
static void link_level(ckpt__coop *c, const int64_t *lst, int cnt)
{
    for (int i = 1; i < cnt; i++)
        c->parent[lst[i]] = (int)lst[cnt >= COOP_TREE_MIN ? tree_parent(i) : 0];
}

static int cmp_node_pos(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Item `it`'s tree (node-aware, see the top of this file) and the chunks each position and the
 * ranks below it need; this rank's position (-1: not a member). */
static int make_tree(ckpt__coop *c, const coop_item *it, int rank)
{
    int n = it->n, me = -1;
    uint64_t cr = it->chunk / (it->bytes / (uint64_t)it->rows); /* rows per chunk */
    c->rank_at[0] = it->reader;
    for (int m = 0, pos = 1; m < n; m++) {
        const int64_t *mb = &it->members[COOP_MEMBER * m];
        int p = (int)mb[0] == it->reader ? 0 : pos++;
        c->rank_at[p] = (int)mb[0];
        if ((int)mb[0] == rank)
            me = p;
        c->node_at[p] = (int)mb[3];
        c->parent[p] = -1;
        c->qlo[p] = UINT64_MAX;
        c->qhi[p] = 0;
        if (p > 0 && mb[1] < mb[2]) {
            c->qlo[p] = (uint64_t)mb[1] / cr;
            c->qhi[p] = ((uint64_t)mb[2] + cr - 1) / cr;
        }
    }
    /* positions by (node, position): the reader first in its node, each node's first its leader */
    for (int p = 0; p < n; p++)
        c->sorted[p] = (int64_t)c->node_at[p] * n + p;
    qsort(c->sorted, (size_t)n, sizeof *c->sorted, cmp_node_pos);
    int64_t *top = c->sorted; /* reused below: the leaders are gathered after the levels */
    int ntop = 0;
    for (int a = 0; a < n;) {
        int b = a + 1;
        while (b < n && c->sorted[b] / n == c->sorted[a] / n)
            b++;
        for (int i = a; i < b; i++)
            c->sorted[i] %= n;
        link_level(c, c->sorted + a, b - a); /* within the node, from its leader */
        c->sorted[ntop++] = c->sorted[a];    /* its leader (a >= ntop: not overwritten yet) */
        a = b;
    }
    /* the top level: the reader, then the other nodes' leaders (the reader leads its node) */
    for (int i = 0; i < ntop; i++)
        if (top[i] == 0) {
            memmove(top + 1, top, (size_t)i * sizeof *top);
            top[0] = 0;
            break;
        }
    link_level(c, top, ntop);
    /* what a position needs includes what every position below it needs */
    for (int p = 1; p < n; p++)
        for (int q = c->parent[p]; q >= 0 && c->qlo[p] < c->qhi[p]; q = c->parent[q]) {
            c->qlo[q] = c->qlo[p] < c->qlo[q] ? c->qlo[p] : c->qlo[q];
            c->qhi[q] = c->qhi[p] > c->qhi[q] ? c->qhi[p] : c->qhi[q];
        }
    return me;
}

/* ---- one piece's transfer ------------------------------------------------------------------ */

typedef struct xfer {
    ckpt_saver *s;
    ckpt__coop *c;
    const coop_item *it;
    const Mpickpt__Tensor *t; /* NULL: no index (nothing copied) */
    const Mpickpt__Piece *p;
    int nd;
    ckpt_slice ps;
    int me, nkids;
    int nreq[2];
    uint64_t chunks; /* the reader's, delivered */
    int rc;
    char why[512]; /* x->rc's message (a failed send) */
} xfer;

static void wait_sends(xfer *x, int half)
{
    if (x->nreq[half] &&
        MPI_Waitall(x->nreq[half], x->c->reqs + half * x->c->maxn, MPI_STATUSES_IGNORE) !=
            MPI_SUCCESS &&
        x->rc == CKPT_OK)
        x->rc = ckpt__error(CKPT_EMPI, "rank %d: MPI_Waitall failed", x->s->rank);
    x->nreq[half] = 0;
}

/* Chunk q (len bytes) sent to this position's children that need it, into half `half`. */
/* One send to `dst`: a failed one is tried once more, for the receiver waits for it (posted: 1),
 * and the failure kept in x->rc (its message too, for a reader's status). MPICKPT_FAULT
 * "<rank>:coop-send": the first try fails. */
static int isend(xfer *x, const void *bytes, int len, int dst, MPI_Request *rq)
{
    int f = ckpt__fault(x->s->rank, "coop-send");
    if (f == CKPT_OK && MPI_Isend(bytes, len, MPI_BYTE, dst, TAG_COOP, x->s->comm, rq) ==
                            MPI_SUCCESS)
        return 1;
    if (x->rc == CKPT_OK) {
        x->rc = f != CKPT_OK ? f
                             : ckpt__error(CKPT_EMPI, "rank %d: MPI_Isend to rank %d failed",
                                           x->s->rank, dst);
        const ckpt_error *e = ckpt_error_last();
        snprintf(x->why, sizeof x->why, "%s", e && e->message ? e->message : "");
    }
    return MPI_Isend(bytes, len, MPI_BYTE, dst, TAG_COOP, x->s->comm, rq) == MPI_SUCCESS;
}

static void send_kids(xfer *x, int half, uint64_t q, const void *bytes, uint64_t len)
{
    ckpt__coop *c = x->c;
    MPI_Request *rq = c->reqs + half * c->maxn;
    int nr = 0;
    for (int k = 0; k < x->nkids; k++) {
        int kp = c->kids[k], dst = c->rank_at[kp];
        if (q < c->qlo[kp] || q >= c->qhi[kp])
            continue;
        if (!isend(x, bytes, (int)len, dst, &rq[nr]))
            continue;
        if (c->node_at[kp] != c->node_at[x->me])
            ckpt__coop_cross_node_bytes += len;
        nr++;
    }
    x->nreq[half] = nr;
}

/* One chunk, copied where this rank's registrations of its tensor want it. */
static void apply(xfer *x, const void *bytes, uint64_t off, uint64_t len)
{
    if (!x->t)
        return;
    uint64_t row = x->it->bytes / (uint64_t)x->it->rows;
    ckpt_slice box = x->ps, region;
    box.start[0] += (int64_t)(off / row);
    box.count[0] = (int64_t)(len / row);
    size_t esize = ckpt_dtype_size((ckpt_dtype)x->t->dtype);
    ckpt_shape shape;
    ckpt_shape_init(&shape, x->nd, x->t->shape);
    for (size_t k = 0; k < x->s->regs.n; k++) {
        const ckpt__reg *g = &x->s->regs.v[k];
        /* a registration the restore refuses (its own message, in the reads' loop) is skipped */
        if (g->kind == CKPT_KIND_COMPONENT || g->kind == CKPT_KIND_BLOB ||
            strcmp(g->stored, x->t->name) != 0 || g->dtype != (ckpt_dtype)x->t->dtype ||
            !ckpt_shape_equal(&g->shape, &shape))
            continue;
        if (ckpt_slice_intersect(&region, &box, &g->slice) == 1)
            (void)ckpt_slice_copy(g->data, &g->slice, bytes, &box, &region, esize);
    }
}

static uint64_t chunk_len(const coop_item *it, uint64_t q)
{
    uint64_t off = q * it->chunk;
    return it->bytes - off < it->chunk ? it->bytes - off : it->chunk;
}

/* The reader's chunk: copied into its own registrations, sent on; then the sends of the chunk
 * before (from the other buffer, which the next read overwrites) are waited for. */
static void send_chunk(void *arg, const void *bytes, uint64_t off, uint64_t len)
{
    xfer *x = arg;
    apply(x, bytes, off, len);
    int cur = (int)(x->chunks % 2);
    send_kids(x, cur, off / x->it->chunk, bytes, len);
    x->chunks++;
    wait_sends(x, 1 - cur);
}

/* The status sent to this position's children (every one; their chunks' sends are done). */
static void send_status(xfer *x, const coop_status *st)
{
    MPI_Request *rq = x->c->reqs;
    int nr = 0;
    for (int k = 0; k < x->nkids; k++)
        nr += isend(x, st, (int)sizeof *st, x->c->rank_at[x->c->kids[k]], &rq[nr]);
    MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
}

/* The reader's side: the piece read once and sent on, then its verdict. */
static int run_reader(xfer *x)
{
    ckpt__coop *c = x->c;
    const coop_item *it = x->it;
    coop_status st;
    memset(&st, 0, sizeof st);
    uint64_t delivered = 0;
    void *bufs[2] = {c->buf[0], c->buf[1]};
    /* a rank that failed (c->fail) sends its failure, its message unchanged */
    int local = (int)c->fail.code;
    int rc = c->r ? ckpt__reader_piece_stream(c->r, it->ti, it->j, bufs, it->chunk, send_chunk, x,
                                              &delivered)
                  : local;
    wait_sends(x, 0);
    wait_sends(x, 1);
    if (!c->r) {
        st = c->fail;
        for (uint64_t q = 0; q < it->nchunks; q++) {
            send_kids(x, 0, q, c->buf[0], chunk_len(it, q));
            wait_sends(x, 0);
        }
    } else if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        st.code = rc;
        snprintf(st.msg, sizeof st.msg, "%s", e && e->message ? e->message : "");
        local = ckpt__error_wrap(rc, "rank %d", x->s->rank);
        /* the rest of the chunks, whatever the buffer holds: the receivers expect them */
        for (uint64_t q = delivered; q < it->nchunks; q++) {
            send_kids(x, 0, q, c->buf[0], chunk_len(it, q));
            wait_sends(x, 0);
        }
    } else if (x->rc != CKPT_OK) {
        st.code = x->rc;
        snprintf(st.msg, sizeof st.msg, "rank %d could not send a piece of '%s': %s", x->s->rank,
                 x->t ? x->t->name : "?", x->why);
        local = x->rc;
    }
    send_status(x, &st);
    if (x->rc != CKPT_OK && local == CKPT_OK) /* its status could not be sent */
        local = x->rc;
    return local;
}

/* A receiver's side: the chunks it and the ranks below it need, from its parent (chunk q + 1
 * received into the other buffer while chunk q is passed on and copied), then the status. */
static int run_receiver(xfer *x)
{
    ckpt__coop *c = x->c;
    const coop_item *it = x->it;
    /* a rank that failed (c->fail) raises no error of its own: its message stays the one the
     * vote reports */
    int from = c->rank_at[c->parent[x->me]], local = (int)c->fail.code, rank = x->s->rank;
    uint64_t lo = c->qlo[x->me], hi = c->qhi[x->me];
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (lo < hi && MPI_Irecv(c->buf[lo % 2], (int)chunk_len(it, lo), MPI_BYTE, from, TAG_COOP,
                             x->s->comm, &rq[lo % 2]) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Irecv from rank %d failed", rank, from);
    for (uint64_t q = lo; q < hi; q++) {
        int h = (int)(q % 2);
        if (MPI_Wait(&rq[h], MPI_STATUS_IGNORE) != MPI_SUCCESS && local == CKPT_OK)
            local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv from rank %d failed", rank, from);
        send_kids(x, h, q, c->buf[h], chunk_len(it, q));
        if (q + 1 < hi) {
            wait_sends(x, 1 - h); /* chunk q - 1's, from the buffer chunk q + 1 goes into */
            if (MPI_Irecv(c->buf[1 - h], (int)chunk_len(it, q + 1), MPI_BYTE, from, TAG_COOP,
                          x->s->comm, &rq[1 - h]) != MPI_SUCCESS &&
                local == CKPT_OK)
                local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Irecv from rank %d failed", rank,
                                    from);
        }
        apply(x, c->buf[h], q * it->chunk, chunk_len(it, q));
    }
    wait_sends(x, 0);
    wait_sends(x, 1);
    coop_status st;
    if (MPI_Recv(&st, (int)sizeof st, MPI_BYTE, from, TAG_COOP, x->s->comm, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS) {
        memset(&st, 0, sizeof st);
        st.code = ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv from rank %d failed", rank, from);
        snprintf(st.msg, sizeof st.msg, "rank %d: MPI_Recv from rank %d failed", rank, from);
    }
    st.msg[sizeof st.msg - 1] = '\0';
    send_status(x, &st);
    if (st.code != CKPT_OK && local == CKPT_OK)
        local = ckpt__error((int)st.code, "rank %d: %.1000s (read for it by rank %d)", rank,
                            st.msg, it->reader);
    if (x->rc != CKPT_OK && local == CKPT_OK)
        local = x->rc;
    return local;
}

int ckpt__coop_run(ckpt_saver *s, ckpt__coop *c)
{
    int local = CKPT_OK;
    const Mpickpt__Index *idx = c->r ? ckpt__reader_index(c->r) : NULL;
    for (size_t k = 0; k < c->n; k++) {
        const coop_item *it = &c->items[k];
        xfer x;
        memset(&x, 0, sizeof x);
        x.s = s;
        x.c = c;
        x.it = it;
        x.rc = CKPT_OK;
        if (idx) {
            x.t = idx->tensors[it->ti];
            x.p = x.t->pieces[it->j];
            x.nd = (int)x.t->n_shape;
            ckpt__piece_slice(&x.ps, x.p, x.nd);
        }
        x.me = make_tree(c, it, s->rank);
        if (x.me < 0)
            continue; /* not a member: the plan never lists such a piece */
        for (int p = 1; p < it->n; p++)
            if (c->parent[p] == x.me)
                c->kids[x.nkids++] = p;
        int rc = x.me == 0 ? run_reader(&x) : run_receiver(&x);
        if (rc != CKPT_OK && local == CKPT_OK)
            local = rc;
    }
    return local;
}

/* ---- whether every rank can take part ------------------------------------------------------ */

/* This rank's status as sent in the settle: a failure's message prefixed the way an agreed one
 * is ("rank R (host H): ", mpi/agree.c), so that it reads the same whichever rank's agreement
 * reports it. Returns the bytes to send: the code alone when it is CKPT_OK. */
static int settle_status(coop_status *st, int mine, int rank)
{
    memset(st, 0, sizeof *st);
    st->code = mine;
    if (mine == CKPT_OK)
        return (int)sizeof st->code;
    const ckpt_error *e = ckpt_error_last();
    const char *m = e && e->code == mine && e->message ? e->message : ckpt_strerror(mine);
    char own[32], host[64] = "?";
    int n = snprintf(own, sizeof own, "rank %d: ", rank);
    if (n > 0 && strncmp(m, own, (size_t)n) == 0)
        m += n; /* the rank is named once */
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(st->msg, sizeof st->msg, "rank %d (host %s): %.900s", rank, host, m);
    return (int)sizeof *st;
}

int ckpt__coop_settle(ckpt_saver *s, int mine)
{
    coop_status st, got;
    int n = settle_status(&st, mine, s->rank);
    memset(&got, 0, sizeof got);
    if (s->rank != 0) {
        /* a rank whose status cannot be sent still waits for the verdict: the chief's receive
         * failed too, and it sends that failure */
        (void)MPI_Send(&st, n, MPI_BYTE, 0, TAG_SETTLE, s->comm);
        if (MPI_Recv(&got, (int)sizeof got, MPI_BYTE, 0, TAG_SETTLE, s->comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv of the cooperative restore's "
                                          "verdict failed", s->rank);
    } else {
        got = st; /* the chief's own first, then the lowest rank that cannot take part */
        for (int r = 1; r < s->size; r++) {
            coop_status a;
            memset(&a, 0, sizeof a);
            if (MPI_Recv(&a, (int)sizeof a, MPI_BYTE, r, TAG_SETTLE, s->comm,
                         MPI_STATUS_IGNORE) != MPI_SUCCESS)
                settle_status(&a, ckpt__error(CKPT_EMPI, "MPI_Recv from rank %d failed", r), 0);
            if (got.code == CKPT_OK && a.code != CKPT_OK)
                got = a;
        }
        int len = got.code == CKPT_OK ? (int)sizeof got.code : (int)sizeof got;
        for (int r = 1; r < s->size; r++)
            (void)MPI_Send(&got, len, MPI_BYTE, r, TAG_SETTLE, s->comm);
    }
    if (got.code == CKPT_OK)
        return CKPT_OK;
    got.msg[sizeof got.msg - 1] = '\0';
    return ckpt__error((int)got.code, "%s", got.msg);
}
