/*
 * Strict restores (docs/api.md "Strict restores"): the names every rank registered against the
 * checkpoint's. The chief notes each rank's wants while it serves the shares (restore.c), then
 * sorts the names the index lacks (missing) and those no rank wanted (unexpected) and broadcasts
 * both lists; every rank then holds the same lists, and so the same strict failure's message.
 * Also the public ckpt_name_list.
 */
#include "restore_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESERVED CKPT__NAMES_RESERVED

struct ckpt_name_list {
    char **v;
    size_t n;
};

size_t ckpt_name_list_size(const ckpt_name_list *l)
{
    return l ? l->n : 0;
}

const char *ckpt_name_list_get(const ckpt_name_list *l, size_t i)
{
    return l && i < l->n ? l->v[i] : NULL;
}

void ckpt_name_list_free(ckpt_name_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    free(l);
}

static int cmp_tensor_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(Mpickpt__Tensor *const *)elem)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void ckpt__names_note(ckpt__names *nc, const Mpickpt__Fragment *w)
{
    for (size_t i = 0; i < w->n_tensors && nc->rc == CKPT_OK; i++) {
        const Mpickpt__Tensor *t = w->tensors[i];
        Mpickpt__Tensor **hit = bsearch(t->name, nc->idx->tensors, nc->idx->n_tensors,
                                        sizeof *nc->idx->tensors, cmp_tensor_name);
        if (hit) {
            nc->used[hit - nc->idx->tensors] = 1;
            continue;
        }
        if (t->kind == MPICKPT__KIND__KIND_COMPONENT) /* per-rank, skip_missing_per_rank */
            continue;
        if (strncmp(t->name, RESERVED, sizeof RESERVED - 1) == 0) /* the Python package checks */
            continue;
        if (nc->nmiss == nc->capmiss) {
            size_t cap = nc->capmiss ? 2 * nc->capmiss : 16;
            char **nv = realloc(nc->miss, cap * sizeof *nv);
            if (!nv) {
                nc->rc = ckpt__error(CKPT_ENOMEM, "out of memory");
                return;
            }
            nc->miss = nv;
            nc->capmiss = cap;
        }
        if (!(nc->miss[nc->nmiss] = strdup(t->name)))
            nc->rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        else
            nc->nmiss++;
    }
}

/* The rank of a per-rank entry's name (".../rank_<r>", ".../parallel_component_<r>"), or -1. */
static long per_rank_of(const char *name)
{
    const char *u = strrchr(name, '_');
    if (!u || !u[1])
        return -1;
    char *end = NULL;
    long r = strtol(u + 1, &end, 10);
    return *end == '\0' && r >= 0 ? r : -1;
}

/* Sorted and without duplicates, then packed as the broadcast's bytes: the missing names, then
 * the unexpected ones (every NUL-terminated); *nm and *nu their counts. The chief only. */
static int names_finish(const ckpt_saver *s, ckpt__names *nc, uint8_t **bytes, uint64_t *len,
                        int64_t *nm, int64_t *nu)
{
    *bytes = NULL;
    *len = 0;
    *nm = *nu = 0;
    if (nc->rc != CKPT_OK)
        return nc->rc;
    if (nc->nmiss > 1) /* qsort of no array (NULL) is undefined */
        qsort(nc->miss, nc->nmiss, sizeof *nc->miss, cmp_str);
    size_t total = 0, k = 0;
    for (size_t i = 0; i < nc->nmiss; i++) {
        if (k && strcmp(nc->miss[k - 1], nc->miss[i]) == 0) {
            free(nc->miss[i]);
            continue;
        }
        nc->miss[k++] = nc->miss[i];
        total += strlen(nc->miss[i]) + 1;
    }
    nc->nmiss = k;
    const Mpickpt__Index *idx = nc->idx;
    for (size_t i = 0; i < idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = idx->tensors[i];
        if (nc->used[i] || strncmp(t->name, RESERVED, sizeof RESERVED - 1) == 0)
            continue;
        /* per-rank data of a rank this job does not have: not unexpected */
        if ((t->kind == MPICKPT__KIND__KIND_COMPONENT || t->kind == MPICKPT__KIND__KIND_BLOB) &&
            per_rank_of(t->name) >= s->size)
            continue;
        nc->used[i] = 2;
        total += strlen(t->name) + 1;
        (*nu)++;
    }
    uint8_t *b = malloc(total ? total : 1);
    if (!b)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    size_t off = 0;
    for (size_t i = 0; i < nc->nmiss; i++) {
        size_t l = strlen(nc->miss[i]) + 1;
        memcpy(b + off, nc->miss[i], l);
        off += l;
    }
    for (size_t i = 0; i < idx->n_tensors; i++)
        if (nc->used[i] == 2) { /* the index is sorted by name */
            size_t l = strlen(idx->tensors[i]->name) + 1;
            memcpy(b + off, idx->tensors[i]->name, l);
            off += l;
        }
    *nm = (int64_t)nc->nmiss;
    *bytes = b;
    *len = total;
    return CKPT_OK;
}

static void names_free(ckpt__names *nc)
{
    for (size_t i = 0; i < nc->nmiss; i++)
        free(nc->miss[i]);
    free(nc->miss);
    free(nc->used);
}

/* A list of n names taken from the packed bytes at *p (advanced). */
static int list_from(ckpt_name_list **out, const uint8_t **p, const uint8_t *end, int64_t n)
{
    ckpt_name_list *l = calloc(1, sizeof *l);
    if (!l || !(l->v = calloc(n ? (size_t)n : 1, sizeof *l->v))) {
        free(l);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *z = *p < end ? memchr(*p, 0, (size_t)(end - *p)) : NULL;
        if (!z || !(l->v[l->n] = strdup((const char *)*p))) {
            ckpt_name_list_free(l);
            return ckpt__error(z ? CKPT_ENOMEM : CKPT_ECORRUPT, "the list of names is cut short");
        }
        l->n++;
        *p = z + 1;
    }
    *out = l;
    return CKPT_OK;
}

/* The names' comparison to every rank: {status, bytes, missing, unexpected}, then the names. */
int ckpt__names_share(ckpt_saver *s, int local, ckpt__names *nc, int strict,
                      ckpt_name_list **miss, ckpt_name_list **unexp, int *mismatch)
{
    int64_t head[4] = { 0, 0, 0, 0 };
    uint8_t *nb = NULL;
    uint64_t nlen = 0;
    if (s->rank == 0) {
        int st = local != CKPT_OK ? local : names_finish(s, nc, &nb, &nlen, &head[2], &head[3]);
        head[0] = st;
        head[1] = st == CKPT_OK ? (int64_t)nlen : 0;
        if (st != CKPT_OK && local == CKPT_OK)
            local = st;
    }
    names_free(nc);
    int st = MPI_Bcast(head, 4, MPI_INT64_T, 0, s->comm) == MPI_SUCCESS
                 ? CKPT_OK
                 : ckpt__error(CKPT_EMPI, "MPI_Bcast of the names' comparison failed");
    if (st == CKPT_OK && head[0] == CKPT_OK) {
        nlen = (uint64_t)head[1];
        if (s->rank != 0 && !(nb = malloc(nlen ? (size_t)nlen : 1)))
            st = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
        /* every rank takes part in every chunk (of the same size everywhere); a rank
         * without memory receives into a sink */
        uint8_t sink[1 << 16];
        for (uint64_t off = 0; off < nlen;) {
            uint64_t n = nlen - off < sizeof sink ? nlen - off : sizeof sink;
            if (MPI_Bcast(nb ? nb + off : sink, (int)n, MPI_BYTE, 0, s->comm) != MPI_SUCCESS &&
                st == CKPT_OK)
                st = ckpt__error(CKPT_EMPI, "MPI_Bcast of the names' comparison failed");
            off += n;
        }
        const uint8_t *p = nb, *end = nb ? nb + nlen : NULL;
        if (st == CKPT_OK)
            st = list_from(miss, &p, end, head[2]);
        if (st == CKPT_OK)
            st = list_from(unexp, &p, end, head[3]);
        *mismatch = st == CKPT_OK && strict && ((*miss)->n || (*unexp)->n);
    } else if (st == CKPT_OK) {
        st = (int)head[0]; /* the chief's failure: its agreement carries the message */
    }
    free(nb);
    if (st != CKPT_OK && local == CKPT_OK)
        local = st;
    return local;
}

/* Up to `cap` bytes of `l`'s names: all of them quoted when they fit, else grouped by prefix
 * (a prefix and a star, "(3 names)"), stripping more trailing components until they fit, else
 * cut ("..., and 12 more"). */
static void fmt_names(char *out, size_t cap, const ckpt_name_list *l)
{
    out[0] = '\0';
    for (int strip = 0; strip <= 16; strip++) {
        size_t len = 0, items = 0;
        int fits = 1;
        for (size_t i = 0; i < l->n;) {
            const char *name = l->v[i];
            /* the key: name without its last `strip` components (at least one kept) */
            size_t klen = strlen(name);
            for (int d = 0; d < strip; d++) {
                const char *sl = memrchr(name, '/', klen);
                if (!sl)
                    break;
                klen = (size_t)(sl - name);
            }
            size_t j = i + 1;
            while (j < l->n && strncmp(l->v[j], name, klen) == 0 &&
                   (l->v[j][klen] == '/' || l->v[j][klen] == '\0'))
                j++;
            char item[600];
            if (j - i == 1)
                snprintf(item, sizeof item, "'%.500s'", name);
            else
                snprintf(item, sizeof item, "'%.*s/*' (%zu names)", (int)(klen > 500 ? 500 : klen),
                         name, j - i);
            size_t il = strlen(item);
            if (len + il + 2 + 40 >= cap) { /* room kept for "..., and N more" */
                fits = 0;
                if (strip == 16) /* grouped as far as it goes: cut here */
                    snprintf(out + len, cap - len, "%s..., and %zu more", items ? ", " : "",
                             l->n - i);
                break;
            }
            len += (size_t)snprintf(out + len, cap - len, "%s%s", items ? ", " : "", item);
            items++;
            i = j;
        }
        if (fits || strip == 16)
            return;
        out[0] = '\0';
    }
}

/* The strict failure's message (the same on every rank: the lists are). */
int ckpt__names_mismatch_error(const char *prefix, const ckpt_name_list *miss,
                               const ckpt_name_list *unexp)
{
    char a[560] = "", b[560] = "";
    if (miss->n)
        fmt_names(a, sizeof a, miss);
    if (unexp->n)
        fmt_names(b, sizeof b, unexp);
    return ckpt__error(CKPT_EMISMATCH,
                       "checkpoint %.300s does not match what is registered: %zu missing "
                       "(registered, not in the checkpoint)%s%s; %zu unexpected (in the "
                       "checkpoint, registered by no rank)%s%s. A strict restore restores "
                       "nothing then; restore with strict off (Python: strict=False) to restore "
                       "what matches",
                       prefix, miss->n, miss->n ? ": " : "", a, unexp->n, unexp->n ? ": " : "",
                       b);
}
