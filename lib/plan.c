/* Registrations, the sharding policy and the plan's fragment: see plan.h for the contract. */
#include "plan.h"

#include "index.h"
#include "record.h"
#include "mpickpt/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- registrations -------------------------------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot of `stored` in the unique-name table: its entry, or the empty slot where it goes. */
static size_t name_slot(const ckpt__regs *regs, const char *stored)
{
    size_t mask = regs->names_cap - 1, i = (size_t)name_hash(stored) & mask;
    while (regs->names[i] && strcmp(regs->v[regs->names[i] - 1].stored, stored) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Room for one more unique name (the table at most half full). */
static int names_grow(ckpt__regs *regs)
{
    if (2 * (regs->names_n + 1) <= regs->names_cap)
        return CKPT_OK;
    size_t cap = regs->names_cap ? 2 * regs->names_cap : 64;
    size_t *old = regs->names, ocap = regs->names_cap;
    if (!(regs->names = calloc(cap, sizeof *regs->names))) {
        regs->names = old;
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    regs->names_cap = cap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i])
            regs->names[name_slot(regs, regs->v[old[i] - 1].stored)] = old[i];
    free(old);
    return CKPT_OK;
}

int ckpt__regs_add(ckpt__regs *regs, int rank, const char *name, const char *stored,
                   ckpt_dtype dtype, const ckpt_shape *shape, const ckpt_slice *slice,
                   ckpt_kind kind, void *data)
{
    if (!name || !*name || strlen(stored) > 4096)
        return ckpt__error(CKPT_EINVAL, "tensor name is empty or longer than 4096 bytes");
    if (!ckpt__utf8_valid(name, strlen(name))) {
        /* names end up in the index, HDF5 attributes and JSON: text every reader can decode */
        char esc[256];
        return ckpt__error(CKPT_EINVAL, "tensor name '%s' is not valid UTF-8",
                           ckpt__escape_bytes(esc, sizeof esc, name, strlen(name)));
    }
    if (!ckpt_dtype_valid(dtype))
        return ckpt__error(CKPT_EINVAL, "tensor '%s': invalid dtype %d", name, (int)dtype);
    int64_t n;
    int rc;
    if ((rc = ckpt_shape_num_elements(&n, shape)) != CKPT_OK ||
        (rc = ckpt_slice_validate(slice, shape)) != CKPT_OK)
        return ckpt__error_wrap(rc, "tensor '%s'", name);
    ckpt_slice_num_elements(&n, slice);
    if (n > 0 && !data && kind != CKPT_KIND_BLOB)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': data is NULL", name);
    /* Every stored name is in the table (a partitioned tensor's at its first slice): a tensor of
     * another kind may not take a name already registered; a partitioned slice may share its name
     * with other slices. */
    if ((rc = names_grow(regs)) != CKPT_OK)
        return rc;
    size_t slot = name_slot(regs, stored);
    if (kind != CKPT_KIND_PARTITIONED && regs->names[slot])
        return ckpt__error(CKPT_EINVAL, "tensor '%s' is already registered on rank %d", name,
                           rank);
    if (regs->n == regs->cap) {
        size_t ncap = regs->cap ? regs->cap * 2 : 16;
        ckpt__reg *nr = realloc(regs->v, ncap * sizeof *nr);
        if (!nr)
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        regs->v = nr;
        regs->cap = ncap;
    }
    ckpt__reg *r = &regs->v[regs->n];
    memset(r, 0, sizeof *r);
    r->name = strdup(name);
    r->stored = strdup(stored);
    if (!r->name || !r->stored) {
        free(r->name);
        free(r->stored);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    r->dtype = dtype;
    r->shape = *shape;
    r->slice = *slice;
    r->kind = kind;
    r->data = data;
    regs->n++;
    if (!regs->names[slot]) {
        regs->names[slot] = regs->n;
        regs->names_n++;
    }
    return CKPT_OK;
}

void ckpt__regs_clear(ckpt__regs *regs)
{
    for (size_t i = 0; i < regs->n; i++) {
        free(regs->v[i].name);
        free(regs->v[i].stored);
    }
    regs->n = 0;
    if (regs->names)
        memset(regs->names, 0, regs->names_cap * sizeof *regs->names);
    regs->names_n = 0;
}

void ckpt__regs_free(ckpt__regs *regs)
{
    ckpt__regs_clear(regs);
    free(regs->v);
    free(regs->names);
    regs->v = NULL;
    regs->names = NULL;
    regs->cap = regs->names_cap = 0;
}

/* ---- sharding policy -------------------------------------------------------------------------- */

/* The replicated registrations, largest first, then by stored name: an order that depends on what
 * is registered only, not on the order of the calls. */
static _Thread_local const ckpt__regs *sort_regs; /* qsort has no context argument (C11) */

static int by_size_then_name(const void *a, const void *b)
{
    const ckpt__reg *x = &sort_regs->v[*(const size_t *)a], *y = &sort_regs->v[*(const size_t *)b];
    int64_t nx, ny;
    ckpt_slice_num_elements(&nx, &x->slice);
    ckpt_slice_num_elements(&ny, &y->slice);
    uint64_t bx = (uint64_t)nx * ckpt_dtype_size(x->dtype);
    uint64_t by = (uint64_t)ny * ckpt_dtype_size(y->dtype);
    if (bx != by)
        return bx > by ? -1 : 1;
    return strcmp(x->stored, y->stored);
}

/* A min-heap of ranks by (bytes assigned, rank). */
static int heap_less(const uint64_t *load, const int *h, size_t i, size_t j)
{
    return load[h[i]] < load[h[j]] || (load[h[i]] == load[h[j]] && h[i] < h[j]);
}

static void heap_down(const uint64_t *load, int *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(load, h, l, m))
            m = l;
        if (r < n && heap_less(load, h, r, m))
            m = r;
        if (m == i)
            return;
        int t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

int ckpt__replica_writers(const ckpt__regs *regs, int size, int **out)
{
    *out = NULL;
    size_t nrep = 0;
    for (size_t i = 0; i < regs->n; i++)
        nrep += regs->v[i].kind == CKPT_KIND_REPLICATED;
    if (nrep == 0 || regs->n == 0)
        return CKPT_OK;
    int *w = malloc(regs->n * sizeof *w);
    size_t *order = malloc(nrep * sizeof *order);
    size_t nheap = size > 0 ? (size_t)size : 1;
    /* a rank is never given more than one tensor beyond the least loaded: no more ranks than
     * tensors are ever needed in the heap */
    if (nheap > nrep)
        nheap = nrep;
    uint64_t *load = calloc(nheap, sizeof *load);
    int *heap = malloc(nheap * sizeof *heap);
    if (!w || !order || !load || !heap) {
        free(w), free(order), free(load), free(heap);
        return ckpt__error(CKPT_ENOMEM, "out of memory planning %zu replicated tensors", nrep);
    }
    size_t k = 0;
    for (size_t i = 0; i < regs->n; i++) {
        w[i] = -1;
        if (regs->v[i].kind == CKPT_KIND_REPLICATED)
            order[k++] = i;
    }
    sort_regs = regs;
    qsort(order, nrep, sizeof *order, by_size_then_name);
    sort_regs = NULL;
    for (size_t r = 0; r < nheap; r++)
        heap[r] = (int)r; /* all loads 0: ordered by rank, a heap already */
    for (k = 0; k < nrep; k++) {
        const ckpt__reg *g = &regs->v[order[k]];
        int64_t n;
        ckpt_slice_num_elements(&n, &g->slice);
        int r = heap[0];
        w[order[k]] = r;
        load[r] += (uint64_t)n * ckpt_dtype_size(g->dtype) + 1; /* + 1: empty ones spread too */
        heap_down(load, heap, nheap, 0);
    }
    free(order);
    free(load);
    free(heap);
    *out = w;
    return CKPT_OK;
}

static int push_piece(ckpt__pieces *out, size_t r, const ckpt_slice *box)
{
    ckpt__piece *np = realloc(out->v, (out->n + 1) * sizeof *np);
    if (!np)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    out->v = np;
    out->v[out->n].reg = r;
    out->v[out->n].slice = *box;
    out->n++;
    return CKPT_OK;
}

/*
 * Splits `box` into pieces of at most `max` bytes (max <= 0: no split) and appends them.
 * Splits along the outermost axis whose one-index-thick slab fits, iterating the axes outside it
 * one index at a time; when even one innermost row is larger than the limit it moves inwards, down
 * to single elements, so it always terminates (and never produces an empty piece).
 */
static int shard_box(ckpt__pieces *out, size_t r, const ckpt_slice *box, size_t esize,
                     int64_t max)
{
    int64_t n;
    ckpt_slice_num_elements(&n, box);
    int nd = box->ndims;
    if (max <= 0 || n == 0 || (uint64_t)n * esize <= (uint64_t)max || nd == 0)
        return push_piece(out, r, box);
    /* inner[d] = bytes of a slab one index thick along d (all of the inner axes). */
    uint64_t slab = esize;
    int axis = nd - 1;
    uint64_t inner[CKPT_MAX_DIMS] = { 0 };
    for (int d = nd - 1; d >= 0; d--) {
        inner[d] = slab;
        slab *= (uint64_t)box->count[d];
    }
    for (int d = 0; d < nd; d++)
        if (inner[d] <= (uint64_t)max) {
            axis = d;
            break;
        }
    int64_t k = (int64_t)((uint64_t)max / inner[axis]);
    if (k < 1)
        k = 1; /* one element is larger than the limit: one element per piece */
    /* Iterate the outer axes index by index, the split axis in chunks of k. */
    int64_t idx[CKPT_MAX_DIMS] = { 0 };
    for (;;) {
        ckpt_slice p = *box;
        for (int d = 0; d < axis; d++) {
            p.start[d] = box->start[d] + idx[d];
            p.count[d] = 1;
        }
        for (int64_t off = 0; off < box->count[axis]; off += k) {
            p.start[axis] = box->start[axis] + off;
            p.count[axis] = box->count[axis] - off < k ? box->count[axis] - off : k;
            int rc = push_piece(out, r, &p);
            if (rc != CKPT_OK)
                return rc;
        }
        int d = axis - 1;
        while (d >= 0 && ++idx[d] == box->count[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    return CKPT_OK;
}

int ckpt__plan_pieces(ckpt__pieces *out, const ckpt__regs *regs, int rank, int size,
                      int64_t max_shard_bytes)
{
    ckpt__pieces_free(out);
    int *writer = NULL;
    int rc = ckpt__replica_writers(regs, size, &writer);
    for (size_t i = 0; rc == CKPT_OK && i < regs->n; i++) {
        const ckpt__reg *g = &regs->v[i];
        if (g->kind == CKPT_KIND_BLOB)
            continue;
        if (g->kind == CKPT_KIND_REPLICATED && writer[i] != rank)
            continue;
        rc = shard_box(out, i, &g->slice, ckpt_dtype_size(g->dtype), max_shard_bytes);
    }
    free(writer);
    return rc;
}

void ckpt__pieces_free(ckpt__pieces *p)
{
    free(p->v);
    p->v = NULL;
    p->n = 0;
}

size_t ckpt__piece_len(const ckpt__regs *regs, const ckpt__piece *p)
{
    int64_t n;
    ckpt_slice_num_elements(&n, &p->slice);
    return (size_t)n * ckpt_dtype_size(regs->v[p->reg].dtype);
}

/* ---- a piece's bytes ---------------------------------------------------------------------------- */

/* Pointer to the bytes of `box` inside registration g's buffer when they are contiguous there,
 * else NULL (the caller copies them out). */
static const void *contiguous_in(const ckpt__reg *g, const void *base, const ckpt_slice *box)
{
    int nd = g->slice.ndims, d = 0;
    while (d < nd && box->count[d] == 1) /* leading axes of extent 1 (in the box) */
        d++;
    /* axes after the first partial one must be whole */
    for (int e = d + 1; e < nd; e++)
        if (box->count[e] != g->slice.count[e])
            return NULL;
    size_t esize = ckpt_dtype_size(g->dtype);
    uint64_t off = 0;
    for (int e = 0; e < nd; e++)
        off = off * (uint64_t)g->slice.count[e] + (uint64_t)(box->start[e] - g->slice.start[e]);
    return (const uint8_t *)base + off * esize;
}

int ckpt__piece_bytes(const ckpt__reg *g, const void *data, const ckpt__piece *p,
                      ckpt__scratch *scratch, const void **out, size_t *len)
{
    int64_t n;
    ckpt_slice_num_elements(&n, &p->slice);
    size_t esize = ckpt_dtype_size(g->dtype);
    *len = (size_t)n * esize;
    if (n == 0) {
        *out = data ? data : (const void *)"";
        return CKPT_OK;
    }
    if (ckpt_slice_equal(&p->slice, &g->slice)) {
        *out = data;
        return CKPT_OK;
    }
    const void *direct = contiguous_in(g, data, &p->slice);
    if (direct) {
        *out = direct;
        return CKPT_OK;
    }
    if (*len > scratch->size) {
        void *ns = realloc(scratch->buf, *len);
        if (!ns)
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        scratch->buf = ns;
        scratch->size = *len;
    }
    int rc = ckpt_slice_copy(scratch->buf, &p->slice, data, &g->slice, &p->slice, esize);
    *out = scratch->buf;
    return rc;
}

/* ---- the plan's fragment ------------------------------------------------------------------------ */

static int cmp_tensor_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(Mpickpt__Tensor *const *)elem)->name);
}

int ckpt__plan_fragment(Mpickpt__Fragment *f, const ckpt__regs *regs, const ckpt__pieces *pieces,
                        int rank)
{
    char file[32];
    snprintf(file, sizeof file, "plan-%d", rank);
    f->rank = rank;
    size_t cap = 0;
    int rc = ckpt__fragment_add_file(f, file, 0);
    /* pieces are made registration by registration, in order: one pass over both */
    size_t j = 0;
    for (size_t i = 0; i < regs->n && rc == CKPT_OK; i++) {
        const ckpt__reg *g = &regs->v[i];
        if (g->kind == CKPT_KIND_BLOB)
            continue;
        size_t first = j;
        while (j < pieces->n && pieces->v[j].reg == i)
            j++;
        Mpickpt__Tensor *t;
        if ((rc = ckpt__fragment_tensor(&t, f, &cap, g->stored, g->dtype, &g->shape, g->kind,
                                        j - first)) != CKPT_OK)
            break;
        ckpt_slice zero = { 0, { 0 }, { 0 } };
        zero.ndims = g->shape.ndims;
        for (size_t k = first; k < j && rc == CKPT_OK; k++)
            rc = ckpt__fragment_piece(t, k - first, rank, &pieces->v[k].slice, file,
                                      "/tensors/plan", &zero, ckpt__piece_len(regs, &pieces->v[k]),
                                      0);
    }
    return rc;
}

int ckpt__plan_check_replicated(const Mpickpt__Index *plan, Mpickpt__Fragment *const *frags,
                                size_t nfrags, int size)
{
    size_t n = plan->n_tensors;
    int *count = calloc(n ? n : 1, sizeof *count);
    if (!count)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t f = 0; f < nfrags; f++)
        for (size_t i = 0; i < frags[f]->n_tensors; i++) {
            const Mpickpt__Tensor *t = frags[f]->tensors[i];
            if (t->kind != MPICKPT__KIND__KIND_REPLICATED)
                continue;
            Mpickpt__Tensor **hit = bsearch(t->name, plan->tensors, n, sizeof *plan->tensors,
                                            cmp_tensor_name);
            if (hit)
                count[hit - plan->tensors]++;
        }
    int rc = CKPT_OK;
    for (size_t i = 0; i < n; i++)
        if (plan->tensors[i]->kind == MPICKPT__KIND__KIND_REPLICATED && count[i] != size) {
            rc = ckpt__error(CKPT_EMISMATCH,
                             "replicated tensor '%s' is registered on %d of %d ranks (every rank "
                             "must register a replicated tensor)",
                             plan->tensors[i]->name, count[i], size);
            break;
        }
    free(count);
    return rc;
}
