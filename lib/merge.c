/*
 * The chief's merge: per-rank index fragments into one index.
 *
 * Takes the fragments the ranks sent (unpacked by the chief, or built in memory by a writer) and
 * an index whose header the caller sets. Guarantees: tensors of the same name are combined into
 * one entry (dtype, shape and kind must agree, else CKPT_EMISMATCH naming both ranks; an empty
 * name is CKPT_EINVAL), their pieces in the fragments' order, the entries sorted by name as a
 * stable sort would leave them (a hash grouping, then a sort of the distinct names only); data
 * files are concatenated; the result has passed ckpt__index_validate() with CKPT_EMISMATCH. The
 * output borrows the fragments' strings, arrays and pieces: ckpt__index_merged_free() frees only
 * what the merge allocated. O(n) for n entries, plus the sort of the distinct names.
 *
 * Called by the saver's merge step on the chief (mpi/save_protocol.c), the single-process writer's commit
 * (lib/checkpoint.c) and mpickpt-merge-bench.
 */
#include "merge.h"

#include "internal.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/dtype.h"
#include "validate.h"

#include <stdlib.h>
#include <string.h>

struct mentry {
    const Mpickpt__Tensor *t;
    int32_t rank;
    size_t group; /* index of its name in the groups */
};

/* One distinct tensor name. */
struct mgroup {
    const char *name;
    uint64_t hash;
    size_t count; /* entries of this name */
    size_t pos;   /* where its next entry goes in the name-sorted order */
};

struct mname {
    const char *name;
    size_t group;
};

static int cmp_mname(const void *a, const void *b)
{
    return strcmp(((const struct mname *)a)->name, ((const struct mname *)b)->name);
}

/* Tensor names share long prefixes ("model/transformer/block_0012/..."), so the hash reads them
 * 8 bytes at a time; murmur3's finalizer spreads the bits for the table index. */
static uint64_t hash_name(const char *s)
{
    size_t n = strlen(s);
    uint64_t h = n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = ((h << 5 | h >> 59) ^ w) * 0x517cc1b727220a95u;
    }
    w = 0;
    memcpy(&w, s, n);
    h = ((h << 5 | h >> 59) ^ w) * 0x517cc1b727220a95u;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
    h *= 0xc4ceb34cd9ed1a53u;
    return h ^ h >> 33;
}

/*
 * Puts the entries in the order of a stable sort by name (strcmp), without sorting them: a hash
 * table gives each entry its name's group, only the distinct names are sorted, and the entries are
 * then placed group by group in their original order (a counting sort). Sorting all entries with
 * qsort cost most of the merge: partitioned tensors give one entry per rank, so there are about
 * twice as many entries as names, and every comparison was a strcmp over long shared prefixes.
 * On success *sorted is a new array of the nt entries, each with its group set.
 */
static int sort_entries(struct mentry **sorted, struct mentry *all, size_t nt)
{
    size_t cap = 16, ng = 0; /* a power of two, at least twice nt: linear probes stay short */
    while (cap < 2 * nt)
        cap *= 2;
    size_t *slots = calloc(cap, sizeof *slots); /* group index + 1; 0 is empty */
    struct mgroup *groups = malloc((nt ? nt : 1) * sizeof *groups);
    struct mname *names = NULL;
    struct mentry *out = NULL;
    *sorted = NULL;
    if (!slots || !groups)
        goto nomem;
    for (size_t k = 0; k < nt; k++) {
        const char *name = all[k].t->name;
        uint64_t h = hash_name(name);
        size_t i = (size_t)h & (cap - 1);
        for (;; i = (i + 1) & (cap - 1)) {
            size_t g = slots[i];
            if (g == 0) {
                groups[ng] = (struct mgroup){ name, h, 0, 0 };
                slots[i] = ++ng;
                g = ng;
            } else if (groups[g - 1].hash != h || strcmp(groups[g - 1].name, name) != 0) {
                continue;
            }
            all[k].group = g - 1;
            groups[g - 1].count++;
            break;
        }
    }
    /* free what is done with before the next allocation: this runs at 1M entries */
    free(slots);
    slots = NULL;
    if (!(names = malloc((ng ? ng : 1) * sizeof *names)))
        goto nomem;
    for (size_t g = 0; g < ng; g++)
        names[g] = (struct mname){ groups[g].name, g };
    qsort(names, ng, sizeof *names, cmp_mname); /* names are distinct: no ties */
    size_t pos = 0;
    for (size_t i = 0; i < ng; i++) {
        struct mgroup *g = &groups[names[i].group];
        g->pos = pos;
        pos += g->count;
    }
    free(names);
    if (!(out = malloc((nt ? nt : 1) * sizeof *out)))
        goto nomem;
    for (size_t k = 0; k < nt; k++)
        out[groups[all[k].group].pos++] = all[k];
    free(groups);
    *sorted = out;
    return CKPT_OK;
nomem:
    free(slots);
    free(groups);
    return ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
}

void ckpt__index_merged_free(Mpickpt__Index *idx)
{
    if (!idx)
        return;
    for (size_t i = 0; i < idx->n_tensors; i++) {
        if (idx->tensors[i]) {
            free(idx->tensors[i]->pieces);
            free(idx->tensors[i]);
        }
    }
    free(idx->tensors);
    free(idx->files);
    idx->tensors = NULL;
    idx->files = NULL;
    idx->n_tensors = idx->n_files = 0;
}

int ckpt__index_merge(Mpickpt__Index *out, Mpickpt__Fragment *const *frags, size_t n)
{
    size_t nt = 0, nf = 0;
    int rc = CKPT_OK;
    for (size_t f = 0; f < n; f++) {
        nt += frags[f]->n_tensors;
        nf += frags[f]->n_files;
    }
    struct mentry *all = malloc((nt ? nt : 1) * sizeof *all), *sorted;
    out->files = malloc((nf ? nf : 1) * sizeof *out->files);
    out->tensors = calloc(nt ? nt : 1, sizeof *out->tensors);
    out->n_tensors = out->n_files = 0;
    if (!all || !out->files || !out->tensors) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
        goto done;
    }
    size_t k = 0;
    for (size_t f = 0; f < n; f++) {
        for (size_t i = 0; i < frags[f]->n_tensors; i++) {
            const Mpickpt__Tensor *t = frags[f]->tensors[i];
            if (!t->name || !t->name[0]) {
                rc = ckpt__error(CKPT_EINVAL, "rank %d registered a tensor with an empty name",
                                 frags[f]->rank);
                goto done;
            }
            all[k].t = t;
            all[k].rank = frags[f]->rank;
            k++;
        }
        for (size_t i = 0; i < frags[f]->n_files; i++)
            out->files[out->n_files++] = frags[f]->files[i];
    }
    if ((rc = sort_entries(&sorted, all, nt)) != CKPT_OK)
        goto done;
    free(all);
    all = sorted;

    for (size_t a = 0; a < nt;) {
        size_t b = a, np = 0;
        const Mpickpt__Tensor *t0 = all[a].t;
        for (; b < nt && all[b].group == all[a].group; b++) {
            const Mpickpt__Tensor *t = all[b].t;
            int same_shape = t->n_shape == t0->n_shape &&
                             (t->n_shape == 0 ||
                              memcmp(t->shape, t0->shape, t->n_shape * sizeof *t->shape) == 0);
            if (t->dtype != t0->dtype || !same_shape || t->kind != t0->kind) {
                rc = ckpt__error(CKPT_EMISMATCH,
                                 "tensor '%s': rank %d registered %s/%zu-d/%s but rank %d "
                                 "registered %s/%zu-d/%s",
                                 t0->name, all[a].rank, ckpt_dtype_name((ckpt_dtype)t0->dtype),
                                 t0->n_shape, ckpt_kind_name((ckpt_kind)t0->kind), all[b].rank,
                                 ckpt_dtype_name((ckpt_dtype)t->dtype), t->n_shape,
                                 ckpt_kind_name((ckpt_kind)t->kind));
                goto done;
            }
            np += t->n_pieces;
        }
        Mpickpt__Tensor *m = malloc(sizeof *m);
        Mpickpt__Piece **pieces = malloc((np ? np : 1) * sizeof *pieces);
        if (!m || !pieces) {
            free(m);
            free(pieces);
            rc = ckpt__error(CKPT_ENOMEM, "out of memory merging tensor '%s'", t0->name);
            goto done;
        }
        *m = *t0; /* borrows name and shape */
        m->pieces = pieces;
        m->n_pieces = 0;
        for (size_t c = a; c < b; c++)
            for (size_t j = 0; j < all[c].t->n_pieces; j++)
                m->pieces[m->n_pieces++] = all[c].t->pieces[j];
        out->tensors[out->n_tensors++] = m;
        a = b;
    }
    rc = ckpt__index_validate(out, CKPT_EMISMATCH, "merge");
done:
    free(all);
    return rc;
}
