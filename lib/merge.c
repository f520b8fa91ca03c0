/*
 * The chief's merge: per-rank index fragments into one index.
 *
 * Takes the fragments the ranks sent (unpacked by the chief, or built in memory by a writer), or
 * fragments that are themselves merges of several ranks' (ckpt__fragment_merge(), a node
 * leader's), and an index whose header the caller sets. Guarantees: tensors of the same name are
 * combined into one entry (dtype, shape and kind must agree, else CKPT_EMISMATCH naming both
 * ranks; an empty name is CKPT_EINVAL), their pieces in the fragments' order, the entries sorted
 * by name as a stable sort would leave them; data files are concatenated; the result has passed
 * ckpt__index_validate() with CKPT_EMISMATCH. Merging is associative over consecutive fragments:
 * merging the partial merges of consecutive runs of the fragments, in order, gives the same index
 * as merging all of them at once (tests/unit/test_merge.c). The output's tensors are copies of
 * the entries in one allocation; it borrows the fragments' strings, arrays and pieces (and the
 * piece array of a name only one entry holds): ckpt__index_merged_free() frees only what the merge
 * allocated. O(n) for n entries plus the sort of the distinct names (compact copies, qsort).
 * ckpt__fragment_merge() is the same merge without the validation, into a fragment.
 *
 * Called by the saver's merge step on the chief (mpi/save_protocol.c), the single-process writer's
 * commit (lib/checkpoint.c) and mpickpt-merge-bench.
 */
#include "merge.h"

#include "internal.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/dtype.h"
#include "strhash.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One tensor entry of one fragment. */
struct mentry {
    const Mpickpt__Tensor *t;
    uint32_t group; /* its name's group */
    uint32_t frag;  /* which fragment (for messages) */
};

/* One distinct tensor name. */
struct mgroup {
    size_t noff;                  /* its name in the grouping's buffer */
    const Mpickpt__Tensor *first; /* its first entry, which the others must agree with */
    size_t npieces;               /* of all its entries; then (count > 1) where its next goes */
    uint32_t count;               /* entries */
    uint32_t ord;                 /* its place in the name order */
    uint32_t ffrag;               /* the fragment of its first entry */
};

/* A slot of the hash table from names to groups: the name's place inline saves a miss per probe. */
struct mslot {
    size_t noff;  /* the name in the grouping's buffer */
    uint32_t tag; /* high half of the name's hash */
    uint32_t g1;  /* group index + 1; 0: empty */
};

/* The rank a fragment's entry came from, for messages: its first piece's (a node leader's merge
 * holds several ranks' pieces), else the fragment's. */
static int32_t entry_rank(const Mpickpt__Tensor *t, const Mpickpt__Fragment *f)
{
    return t->n_pieces > 0 && t->pieces[0] ? t->pieces[0]->rank : f->rank;
}

/* ---- grouping -------------------------------------------------------------------------------- */

/* A distinct name in the grouping's buffer is its group's index (4 bytes, unaligned) followed by
 * the name and its NUL: names copied next to each other are compared much faster than where they
 * lie, spread over the fragments' memory (sorting 524,288 names: 0.05 s against 0.11 s). */
static uint32_t name_group(const char *copy)
{
    uint32_t g;
    memcpy(&g, copy - 4, 4);
    return g;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Groups the nt entries by name (a hash table: each entry's group, each group's entry and piece
 * counts and first entry), then sorts the groups by name (ord) and places the pieces of the names
 * that several entries share, in name order (npieces becomes the first one's place; *npm in all).
 * The table is probed a few entries behind the hashing, with the slot prefetched: at 10^6
 * entries a probe is a cache miss. On success *groups (free it) holds *ng groups.
 */
static int group_entries(struct mgroup **groups, size_t *ng, size_t *npm, struct mentry *all,
                         size_t nt, Mpickpt__Fragment *const *frags)
{
    size_t cap = 16, n = 0; /* a power of two, load at most 2/3 */
    while (cap < nt + nt / 2)
        cap *= 2;
    struct mslot *slots = calloc(cap, sizeof *slots);
    struct mgroup *g = malloc((nt ? nt : 1) * sizeof *g); /* pages past the last group: untouched */
    size_t bcap = 1 << 16, used = 0;
    int rc;
    char *buf = malloc(bcap), **sorted = NULL;
    *groups = NULL;
    *ng = 0;
    if (!slots || !g || !buf)
        goto nomem;
    enum { AHEAD = 8, RING = 16 }; /* entry k is hashed AHEAD entries before it is placed */
    uint64_t hq[RING];
    size_t lq[RING];
    for (size_t k = 0; k < nt + AHEAD; k++) {
        /* entry k + 3 AHEAD's tensor and k + 2 AHEAD's name are fetched, k + AHEAD's slot */
        if (k + 3 * AHEAD < nt)
            __builtin_prefetch(all[k + 3 * AHEAD].t);
        if (k + 2 * AHEAD < nt)
            __builtin_prefetch(all[k + 2 * AHEAD].t->name);
        if (k < nt) {
            const char *name = all[k].t->name;
            size_t len = name ? strlen(name) : 0;
            if (len == 0) {
                rc = ckpt__error(CKPT_EINVAL, "rank %d registered a tensor with an empty name",
                                 entry_rank(all[k].t, frags[all[k].frag]));
                goto fail;
            }
            uint64_t h = ckpt__strhash(name, len);
            hq[k % RING] = h;
            lq[k % RING] = len;
            __builtin_prefetch(&slots[h & (cap - 1)]);
        }
        if (k < AHEAD)
            continue;
        size_t j = k - AHEAD, len = lq[j % RING];
        const Mpickpt__Tensor *t = all[j].t;
        uint64_t h = hq[j % RING];
        uint32_t tag = (uint32_t)(h >> 32);
        for (size_t i = (size_t)h & (cap - 1);; i = (i + 1) & (cap - 1)) {
            struct mslot *s = &slots[i];
            if (s->g1 == 0) {
                if (bcap - used < len + 5) {
                    while (bcap - used < len + 5)
                        bcap *= 2;
                    char *grown = realloc(buf, bcap);
                    if (!grown)
                        goto nomem;
                    buf = grown;
                }
                uint32_t gi = (uint32_t)n++;
                memcpy(buf + used, &gi, 4);
                memcpy(buf + used + 4, t->name, len + 1);
                g[gi] = (struct mgroup){ .noff = used + 4, .first = t, .npieces = t->n_pieces,
                                         .count = 1, .ffrag = all[j].frag };
                used += len + 5;
                *s = (struct mslot){ g[gi].noff, tag, gi + 1 };
                all[j].group = gi;
                break;
            }
            if (s->tag == tag && strcmp(buf + s->noff, t->name) == 0) {
                struct mgroup *x = &g[s->g1 - 1];
                x->count++;
                x->npieces += t->n_pieces;
                all[j].group = s->g1 - 1;
                break;
            }
        }
    }
    /* free what is done with before the next allocation: this runs at 10^6 entries and more */
    free(slots);
    slots = NULL;
    if (!(sorted = malloc((n ? n : 1) * sizeof *sorted)))
        goto nomem;
    for (size_t i = 0; i < n; i++)
        sorted[i] = buf + g[i].noff;
    qsort(sorted, n, sizeof *sorted, cmp_names); /* names are distinct: no ties */
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        struct mgroup *x = &g[name_group(sorted[i])];
        x->ord = (uint32_t)i;
        if (x->count > 1) { /* its pieces' place among those of the shared names */
            size_t np = x->npieces;
            x->npieces = pos;
            pos += np;
        }
    }
    *npm = pos;
    free(sorted);
    free(buf);
    *groups = g;
    *ng = n;
    return CKPT_OK;
nomem:
    rc = ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
fail:
    free(slots);
    free(g);
    free(buf);
    return rc;
}

/*
 * The merge without validation: *tensors (one allocation, see ckpt__index_merged_free) holds the
 * *ntensors merged entries sorted by name, *files the fragments' files in order. On error, what
 * is set is still freed by freeing both arrays.
 */
/* "float64 [3,4] replicated": a registration as a person compares two of them (every dimension,
 * not only how many there are). */
static void describe_reg(char *out, size_t size, const Mpickpt__Tensor *t)
{
    size_t n = (size_t)snprintf(out, size, "%s [", ckpt_dtype_name((ckpt_dtype)t->dtype));
    for (size_t d = 0; d < t->n_shape && n < size; d++)
        n += (size_t)snprintf(out + n, size - n, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (n < size)
        snprintf(out + n, size - n, "] %s", ckpt_kind_name((ckpt_kind)t->kind));
}

static int merge_core(Mpickpt__Tensor ***tensors, size_t *ntensors, Mpickpt__DataFile ***files,
                      size_t *nfiles, Mpickpt__Fragment *const *frags, size_t n)
{
    size_t nt = 0, nf = 0, ng = 0;
    int rc = CKPT_OK;
    struct mgroup *g = NULL;
    *tensors = NULL;
    *files = NULL;
    *ntensors = *nfiles = 0;
    for (size_t f = 0; f < n; f++) {
        nt += frags[f]->n_tensors;
        nf += frags[f]->n_files;
    }
    if (nt >= UINT32_MAX || n >= UINT32_MAX)
        return ckpt__error(CKPT_EINVAL, "cannot merge %zu tensors of %zu fragments", nt, n);
    struct mentry *all = malloc((nt ? nt : 1) * sizeof *all);
    *files = malloc((nf ? nf : 1) * sizeof **files);
    if (!all || !*files) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
        goto done;
    }
    size_t k = 0;
    for (size_t f = 0; f < n; f++) {
        for (size_t i = 0; i < frags[f]->n_tensors; i++) {
            all[k++] = (struct mentry){ frags[f]->tensors[i], 0, (uint32_t)f };
        }
        for (size_t i = 0; i < frags[f]->n_files; i++)
            (*files)[(*nfiles)++] = frags[f]->files[i];
    }
    size_t npm = 0; /* set by group_entries (GCC may not see it through the error paths) */
    if ((rc = group_entries(&g, &ng, &npm, all, nt, frags)) != CKPT_OK)
        goto done;

    /* One block: the ng tensor pointers, the ng tensors in name order (copies of the entries,
     * which validation and packing then read in order instead of all over the fragments), and
     * the piece pointers of the names that several entries share (one entry's are borrowed). */
    size_t bytes = ng * (sizeof(Mpickpt__Tensor *) + sizeof(Mpickpt__Tensor)) +
                   npm * sizeof(Mpickpt__Piece *);
    char *block = malloc(bytes ? bytes : 1);
    if (!block) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
        goto done;
    }
    Mpickpt__Tensor **out = (Mpickpt__Tensor **)(void *)block;
    Mpickpt__Tensor *built = (Mpickpt__Tensor *)(void *)(out + ng);
    Mpickpt__Piece **pp = (Mpickpt__Piece **)(void *)(built + ng);
    memset(out, 0, ng * sizeof *out);
    *tensors = out;
    *ntensors = ng;
    for (size_t e = 0; e < nt; e++) {
        struct mgroup *x = &g[all[e].group];
        const Mpickpt__Tensor *t = all[e].t;
        Mpickpt__Tensor *m = &built[x->ord];
        if (!out[x->ord]) {
            *m = *t; /* borrows name, shape and (one entry) pieces */
            out[x->ord] = m;
            if (x->count == 1)
                continue;
            m->pieces = pp + x->npieces;
            m->n_pieces = 0;
        } else {
            const Mpickpt__Tensor *t0 = x->first;
            int same_shape = t->n_shape == t0->n_shape &&
                             (t->n_shape == 0 ||
                              memcmp(t->shape, t0->shape, t->n_shape * sizeof *t->shape) == 0);
            if (t->dtype != t0->dtype || !same_shape || t->kind != t0->kind) {
                char a[400], b[400], what[64] = "";
                describe_reg(a, sizeof a, t0);
                describe_reg(b, sizeof b, t);
                const char *parts[3] = { t->dtype != t0->dtype ? "dtypes" : NULL,
                                         !same_shape ? "shapes" : NULL,
                                         t->kind != t0->kind ? "kinds" : NULL };
                for (int j = 0; j < 3; j++)
                    if (parts[j])
                        snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s",
                                 what[0] ? " and " : "", parts[j]);
                rc = ckpt__error(CKPT_EMISMATCH,
                                 "tensor '%s': rank %d registered %s but rank %d registered %s "
                                 "(the %s differ)",
                                 t0->name, entry_rank(t0, frags[x->ffrag]), a,
                                 entry_rank(t, frags[all[e].frag]), b, what);
                goto done;
            }
        }
        if (t->n_pieces)
            memcpy(m->pieces + m->n_pieces, t->pieces, t->n_pieces * sizeof *t->pieces);
        m->n_pieces += t->n_pieces;
    }
done:
    free(all);
    free(g);
    return rc;
}

void ckpt__index_merged_free(Mpickpt__Index *idx)
{
    if (!idx)
        return;
    free(idx->tensors); /* the one block of merge_core */
    free(idx->files);
    idx->tensors = NULL;
    idx->files = NULL;
    idx->n_tensors = idx->n_files = 0;
}

int ckpt__index_merge(Mpickpt__Index *out, Mpickpt__Fragment *const *frags, size_t n)
{
    int rc = merge_core(&out->tensors, &out->n_tensors, &out->files, &out->n_files, frags, n);
    if (rc == CKPT_OK)
        rc = ckpt__index_validate(out, CKPT_EMISMATCH, "merge");
    return rc;
}

void ckpt__fragment_merged_free(Mpickpt__Fragment *f)
{
    if (!f)
        return;
    free(f->tensors); /* the one block of merge_core */
    free(f->files);
    f->tensors = NULL;
    f->files = NULL;
    f->n_tensors = f->n_files = 0;
}

int ckpt__fragment_merge(Mpickpt__Fragment *out, Mpickpt__Fragment *const *frags, size_t n)
{
    mpickpt__fragment__init(out);
    out->rank = n > 0 ? frags[0]->rank : 0;
    return merge_core(&out->tensors, &out->n_tensors, &out->files, &out->n_files, frags, n);
}
