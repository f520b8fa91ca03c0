/* A rank's share of an index: the entries it reads. See share.h. */
#include "share.h"

#include "fragment.h"
#include "index.h"

#include <stdlib.h>
#include <string.h>

/* A tensor of more pieces than this gets its pieces sorted along one axis for selection. */
#define SHARE_SORT_MIN 16

/* The pieces of one tensor ordered by their start along `axis`, built on first use. */
typedef struct sorted_pieces {
    int built;
    int axis;
    int64_t max_count; /* the largest extent of a piece along `axis` */
    uint32_t *order;   /* piece indices by start[axis] */
} sorted_pieces;

struct ckpt__share {
    const Mpickpt__Index *idx;
    uint32_t *files_by_name; /* file slots sorted by name */
    unsigned char *used;     /* per file slot, during one ckpt__share_pack */
    sorted_pieces *sorted;   /* per tensor */
    /* per pack, grown as needed */
    const Mpickpt__Piece **pieces;
    size_t pieces_cap;
    /* per pack: the filter (ckpt__share_pack_filtered) and the tensor being selected */
    ckpt__share_filter keep;
    void *keep_arg;
    size_t keep_ti;
    int keep_eligible;
    const ckpt_slice *keep_want;
};

/* qsort and bsearch take no payload: the index their comparators look into, per thread */
static __thread const Mpickpt__Index *sort_idx;

static int cmp_file_slot(const void *a, const void *b)
{
    return strcmp(sort_idx->files[*(const uint32_t *)a]->name,
                  sort_idx->files[*(const uint32_t *)b]->name);
}

int ckpt__share_new(ckpt__share **out, const Mpickpt__Index *idx)
{
    *out = NULL;
    if (idx->n_files > UINT32_MAX)
        return ckpt__error(CKPT_EINVAL, "index has too many data files");
    ckpt__share *sh = calloc(1, sizeof *sh);
    if (!sh)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    sh->idx = idx;
    size_t nf = idx->n_files ? idx->n_files : 1;
    sh->files_by_name = malloc(nf * sizeof *sh->files_by_name);
    sh->used = calloc(nf, 1);
    sh->sorted = calloc(idx->n_tensors ? idx->n_tensors : 1, sizeof *sh->sorted);
    if (!sh->files_by_name || !sh->used || !sh->sorted) {
        ckpt__share_free(sh);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < idx->n_files; i++)
        sh->files_by_name[i] = (uint32_t)i;
    sort_idx = idx;
    qsort(sh->files_by_name, idx->n_files, sizeof *sh->files_by_name, cmp_file_slot);
    sort_idx = NULL;
    *out = sh;
    return CKPT_OK;
}

void ckpt__share_free(ckpt__share *sh)
{
    if (!sh)
        return;
    for (size_t i = 0; sh->sorted && i < sh->idx->n_tensors; i++)
        free(sh->sorted[i].order);
    free(sh->sorted);
    free(sh->files_by_name);
    free(sh->used);
    free(sh->pieces);
    free(sh);
}

int ckpt__share_want(Mpickpt__Fragment *wants, size_t *cap, const char *name,
                     const ckpt_slice *box)
{
    Mpickpt__Tensor *t;
    ckpt_shape none;
    memset(&none, 0, sizeof none);
    int rc = ckpt__fragment_tensor(&t, wants, cap, name, CKPT_UINT8, &none, CKPT_KIND_FULL,
                                   box ? 1 : 0);
    if (rc == CKPT_OK && box)
        rc = ckpt__fragment_piece(t, 0, 0, box, "", "", box, 0, 0);
    return rc;
}

/* Sorting a tensor's pieces: the comparator reads the tensor and the axis from here. */
static __thread const Mpickpt__Tensor *cmp_tensor;
static __thread int cmp_axis;

static int cmp_piece_start(const void *a, const void *b)
{
    int64_t x = cmp_tensor->pieces[*(const uint32_t *)a]->start[cmp_axis];
    int64_t y = cmp_tensor->pieces[*(const uint32_t *)b]->start[cmp_axis];
    return x < y ? -1 : x > y;
}

/* Orders tensor ti's pieces along the axis they are split on most finely (the one where the
 * pieces' extents are the smallest fraction of the tensor's). */
static int build_sorted(ckpt__share *sh, size_t ti)
{
    const Mpickpt__Tensor *t = sh->idx->tensors[ti];
    sorted_pieces *sp = &sh->sorted[ti];
    int nd = (int)t->n_shape;
    double best = 2.0;
    sp->axis = 0;
    for (int d = 0; d < nd; d++) {
        if (t->shape[d] <= 0)
            continue;
        double sum = 0;
        for (size_t j = 0; j < t->n_pieces; j++)
            sum += (double)t->pieces[j]->count[d] / (double)t->shape[d];
        double frac = sum / (double)t->n_pieces;
        if (frac < best) {
            best = frac;
            sp->axis = d;
        }
    }
    sp->order = malloc(t->n_pieces * sizeof *sp->order);
    if (!sp->order)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    sp->max_count = 0;
    for (size_t j = 0; j < t->n_pieces; j++) {
        sp->order[j] = (uint32_t)j;
        if (t->pieces[j]->count[sp->axis] > sp->max_count)
            sp->max_count = t->pieces[j]->count[sp->axis];
    }
    cmp_tensor = t;
    cmp_axis = sp->axis;
    qsort(sp->order, t->n_pieces, sizeof *sp->order, cmp_piece_start);
    sp->built = 1;
    return CKPT_OK;
}

static int reserve_pieces(ckpt__share *sh, size_t n)
{
    if (n <= sh->pieces_cap)
        return CKPT_OK;
    size_t cap = sh->pieces_cap ? sh->pieces_cap : 64;
    while (cap < n)
        cap *= 2;
    const Mpickpt__Piece **np = realloc(sh->pieces, cap * sizeof *np);
    if (!np)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    sh->pieces = np;
    sh->pieces_cap = cap;
    return CKPT_OK;
}

/* Appends piece j of tensor ti unless the pack's filter leaves it out. */
static void add_piece(ckpt__share *sh, size_t ti, size_t j, size_t *n)
{
    if (sh->keep && !sh->keep(sh->keep_arg, ti, j, sh->keep_eligible, sh->keep_want))
        return;
    sh->pieces[(*n)++] = sh->idx->tensors[ti]->pieces[j];
}

/* Appends the pieces of tensor ti that intersect `want` (NULL: all) to sh->pieces from *n on. */
static int select_pieces(ckpt__share *sh, size_t ti, const ckpt_slice *want, size_t *n)
{
    const Mpickpt__Tensor *t = sh->idx->tensors[ti];
    int nd = (int)t->n_shape;
    int rc = reserve_pieces(sh, *n + t->n_pieces);
    if (rc != CKPT_OK)
        return rc;
    if (!want) {
        for (size_t j = 0; j < t->n_pieces; j++)
            add_piece(sh, ti, j, n);
        return CKPT_OK;
    }
    ckpt_slice ps, region;
    if (t->n_pieces <= SHARE_SORT_MIN || nd == 0) {
        for (size_t j = 0; j < t->n_pieces; j++) {
            ckpt__piece_slice(&ps, t->pieces[j], nd);
            if (ckpt_slice_intersect(&region, &ps, want) == 1)
                add_piece(sh, ti, j, n);
        }
        return CKPT_OK;
    }
    sorted_pieces *sp = &sh->sorted[ti];
    if (!sp->built && (rc = build_sorted(sh, ti)) != CKPT_OK)
        return rc;
    /* pieces starting in [lo, hi) along the axis can intersect the wanted range */
    int a = sp->axis;
    int64_t lo = want->start[a] - sp->max_count + 1, hi = want->start[a] + want->count[a];
    size_t l = 0, r = t->n_pieces;
    while (l < r) {
        size_t m = l + (r - l) / 2;
        if (t->pieces[sp->order[m]]->start[a] < lo)
            l = m + 1;
        else
            r = m;
    }
    /* (pieces of a valid index do not overlap: the order they are read in does not matter) */
    for (size_t k = l; k < t->n_pieces && t->pieces[sp->order[k]]->start[a] < hi; k++) {
        const Mpickpt__Piece *p = t->pieces[sp->order[k]];
        ckpt__piece_slice(&ps, p, nd);
        if (ckpt_slice_intersect(&region, &ps, want) == 1)
            add_piece(sh, ti, sp->order[k], n);
    }
    return CKPT_OK;
}

static int cmp_name_tensor(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(const Mpickpt__Tensor *const *)elem)->name);
}

static int cmp_file_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, sort_idx->files[*(const uint32_t *)elem]->name);
}

/* A wanted tensor found in the index: its slot, and the want (one of possibly several). */
typedef struct hit {
    size_t ti;
    size_t wi;
} hit;

static int cmp_hit(const void *a, const void *b)
{
    const hit *x = a, *y = b;
    return x->ti < y->ti ? -1 : x->ti > y->ti ? 1 : (x->wi > y->wi) - (x->wi < y->wi);
}

int ckpt__share_pack(ckpt__share *sh, const Mpickpt__Fragment *wants, uint8_t **out,
                     size_t *len)
{
    return ckpt__share_pack_filtered(sh, wants, NULL, NULL, 0, out, len);
}

/* The data files of the first `np` selected pieces (sh->pieces), in the index's order, into
 * files[0..*nf). CKPT_ECORRUPT when a piece names a file the index does not list. */
static int used_files(ckpt__share *sh, size_t np, Mpickpt__DataFile **files, size_t *nf)
{
    const Mpickpt__Index *idx = sh->idx;
    int rc = CKPT_OK;
    sort_idx = idx;
    for (size_t k = 0; k < np; k++) {
        const uint32_t *slot = bsearch(sh->pieces[k]->file, sh->files_by_name, idx->n_files,
                                       sizeof *sh->files_by_name, cmp_file_name);
        if (!slot) {
            rc = ckpt__error(CKPT_ECORRUPT, "piece names data file '%s' that the index does not "
                                            "list", sh->pieces[k]->file);
            break;
        }
        sh->used[*slot] = 1;
    }
    sort_idx = NULL;
    *nf = 0;
    for (size_t i = 0; i < idx->n_files; i++)
        if (sh->used[i]) {
            files[(*nf)++] = idx->files[i];
            sh->used[i] = 0;
        }
    return rc;
}

int ckpt__share_pack_filtered(ckpt__share *sh, const Mpickpt__Fragment *wants,
                              ckpt__share_filter keep, void *keep_arg, int drop_empty,
                              uint8_t **out, size_t *len)
{
    if (out)
        *out = NULL;
    *len = 0;
    sh->keep = keep;
    sh->keep_arg = keep_arg;
    const Mpickpt__Index *idx = sh->idx;
    size_t nw = wants->n_tensors, nh = 0, ns = 0, np = 0;
    hit *hits = malloc((nw ? nw : 1) * sizeof *hits);
    Mpickpt__Tensor *sub = malloc((nw ? nw : 1) * sizeof *sub);
    Mpickpt__Tensor **subp = malloc((nw ? nw : 1) * sizeof *subp);
    size_t *first = malloc((nw ? nw : 1) * sizeof *first);
    Mpickpt__DataFile **files = malloc((idx->n_files ? idx->n_files : 1) * sizeof *files);
    uint8_t *buf = NULL;
    int rc = CKPT_OK;
    if (!hits || !sub || !subp || !first || !files) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t w = 0; w < nw; w++) {
        const Mpickpt__Tensor **found =
            bsearch(wants->tensors[w]->name, idx->tensors, idx->n_tensors, sizeof *idx->tensors,
                    cmp_name_tensor);
        if (found)
            hits[nh++] = (hit){ (size_t)(found - (const Mpickpt__Tensor **)idx->tensors), w };
    }
    qsort(hits, nh, sizeof *hits, cmp_hit);
    /* one entry per tensor; a tensor wanted twice is wanted whole */
    for (size_t h = 0; h < nh && rc == CKPT_OK; h++) {
        size_t ti = hits[h].ti;
        int twice = (h + 1 < nh && hits[h + 1].ti == ti) || (h > 0 && hits[h - 1].ti == ti);
        if (h > 0 && hits[h - 1].ti == ti)
            continue;
        const Mpickpt__Tensor *t = idx->tensors[ti];
        const Mpickpt__Tensor *w = wants->tensors[hits[h].wi];
        ckpt_slice box;
        const ckpt_slice *want = NULL;
        if (!twice && w->n_pieces == 1 && w->pieces[0]->n_start == t->n_shape &&
            w->pieces[0]->n_count == t->n_shape) {
            ckpt__piece_slice(&box, w->pieces[0], (int)t->n_shape);
            want = &box;
        }
        /* the filter's "eligible": every want of it is a plain one (KIND_FULL) of an array */
        sh->keep_ti = ti;
        sh->keep_eligible = t->n_shape > 0;
        for (size_t g = h; g < nh && hits[g].ti == ti; g++)
            if (wants->tensors[hits[g].wi]->kind != MPICKPT__KIND__KIND_FULL)
                sh->keep_eligible = 0;
        sh->keep_want = want;
        first[ns] = np;
        rc = select_pieces(sh, ti, want, &np);
        if (drop_empty && rc == CKPT_OK && np == first[ns])
            continue;
        sub[ns] = *t;
        subp[ns] = &sub[ns];
        ns++;
    }
    if (rc != CKPT_OK || !out) /* no out: the filter saw the selection, nothing is packed */
        goto done;
    /* the pieces arrays, now that sh->pieces no longer moves */
    for (size_t k = 0; k < ns; k++) {
        size_t end = k + 1 < ns ? first[k + 1] : np;
        sub[k].pieces = (Mpickpt__Piece **)(sh->pieces + first[k]);
        sub[k].n_pieces = end - first[k];
    }
    size_t nf = 0;
    if ((rc = used_files(sh, np, files, &nf)) != CKPT_OK)
        goto done;
    Mpickpt__Index share = MPICKPT__INDEX__INIT;
    share.header = idx->header;
    share.n_tensors = ns;
    share.tensors = subp;
    share.n_files = nf;
    share.files = files;
    size_t n = mpickpt__index__get_packed_size(&share);
    if (!(buf = malloc(n ? n : 1))) {
        rc = ckpt__error(CKPT_ENOMEM, "cannot allocate %zu bytes for an index share", n);
        goto done;
    }
    mpickpt__index__pack(&share, buf);
    *out = buf;
    *len = n;
done:
    sh->keep = NULL;
    sh->keep_arg = NULL;
    free(hits);
    free(sub);
    free(subp);
    free(first);
    free(files);
    return rc;
}
