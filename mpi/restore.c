/*
 * The collective restore (docs/design.md §5): the chief reads the index and checks it, every
 * rank receives it and reads the pieces that overlap what it owns now, so a checkpoint written by
 * N ranks restores on M. Per-rank values are staged and applied only once every rank succeeded.
 */
#include "saver_internal.h"

#include "env.h"
#include "index.h"
#include "restore_coop.h"
#include "share.h"
#include "mpickpt/collective.h"

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

/* ---- strict restores: the registered names against the checkpoint's ------------------------ */

/* The Python package's names (its record of plain values): neither missing nor unexpected when
 * names are compared; the package compares what they hold itself. */
#define RESERVED "__mpickpt__/"

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

/* The chief's comparison: which index entries some rank wants (used), and the wanted names the
 * index lacks (missing, strdup'd, unsorted with duplicates until names_finish). */
typedef struct names_ctx {
    const Mpickpt__Index *idx;
    uint8_t *used;
    char **miss;
    size_t nmiss, capmiss;
    int rc;
} names_ctx;

static int cmp_tensor_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(Mpickpt__Tensor *const *)elem)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_note(names_ctx *nc, const Mpickpt__Fragment *w)
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
static int names_finish(const ckpt_saver *s, names_ctx *nc, uint8_t **bytes, uint64_t *len,
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

static void names_free(names_ctx *nc)
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
static int mismatch_error(const char *prefix, const ckpt_name_list *miss,
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
} coop_ctx;

/* The chief's side with the cooperative restore (restore_coop.c): every rank's wants first (its
 * own too), then the plan, then every rank's share and list of forwarded pieces, sent as {status,
 * share length, list length, active} then the bytes. Any failure is sent to every rank (nobody
 * then forwards anything). The chief's own share and list are kept in `cc`. */
static int send_coop_shares(ckpt_saver *s, const ckpt_reader *r, const uint8_t *all,
                            const uint64_t *offs, names_ctx *nc, coop_ctx *cc)
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
            names_note(nc, w[dst]);
    }
    if (local == CKPT_OK)
        local = ckpt__coop_plan(ckpt__reader_index(r), size, w, cc->node_of, &plan);
    for (int dst = 1; dst < size; dst++) {
        int64_t head[4] = { local, 0, 0, 0 };
        if (local == CKPT_OK) {
            head[1] = (int64_t)plan.share_len[dst];
            head[2] = (int64_t)plan.coop_len[dst];
            head[3] = plan.active;
        }
        int rc = MPI_Send(head, 4, MPI_INT64_T, dst, TAG_SHARE, s->comm) == MPI_SUCCESS
                     ? CKPT_OK
                     : ckpt__error(CKPT_EMPI, "MPI_Send to rank %d failed", dst);
        if (rc == CKPT_OK && local == CKPT_OK)
            rc = ckpt__send_bytes(s->comm, dst, TAG_SHARE, plan.share[dst], plan.share_len[dst],
                                  s->chunk);
        if (rc == CKPT_OK && local == CKPT_OK && plan.coop_len[dst])
            rc = ckpt__send_bytes(s->comm, dst, TAG_SHARE, plan.coop[dst], plan.coop_len[dst],
                                  s->chunk);
        if (rc != CKPT_OK && local == CKPT_OK)
            local = rc;
    }
    if (local == CKPT_OK) { /* the chief's own, opened once the names are compared */
        cc->own = plan.share[0];
        cc->own_len = plan.share_len[0];
        cc->list = plan.coop[0];
        cc->list_len = plan.coop_len[0];
        cc->active = plan.active;
        plan.share[0] = NULL;
        plan.coop[0] = NULL;
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
                       const uint64_t *offs, names_ctx *nc, coop_ctx *cc)
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
                names_note(nc, w);
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
 * whole index and checked its data files). */
static int recv_share(ckpt_saver *s, const char *prefix, ckpt_reader **r, coop_ctx *cc)
{
    int64_t head[4];
    if (MPI_Recv(head, 4, MPI_INT64_T, 0, TAG_SHARE, s->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "rank %d: MPI_Recv of its share of the index failed",
                           s->rank);
    if (head[0] != CKPT_OK) /* the agreement after the reads carries the chief's message */
        return ckpt__error((int)head[0], "rank %d: the chief could not send its share of the "
                                         "index", s->rank);
    uint64_t len = (uint64_t)head[1];
    uint8_t *bytes = malloc(len ? (size_t)len : 1);
    cc->active = head[3] != 0;
    if (bytes) {
        int rc = recv_open(s, prefix, r, bytes, len);
        /* the list of forwarded pieces: received even after a failure (the chief sends it) */
        uint64_t clen = (uint64_t)head[2];
        if (clen && !(cc->list = malloc((size_t)clen)))
            rc = rc != CKPT_OK ? rc : ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
        if (clen && cc->list) {
            int rc2 = ckpt__recv_bytes(s->comm, 0, TAG_SHARE, cc->list, clen, s->chunk);
            cc->list_len = (size_t)clen;
            if (rc == CKPT_OK)
                rc = rc2;
        } else if (clen) {
            recv_sink(s, clen);
        }
        return rc;
    }
    /* Received even when it cannot be held (one chunk at a time into a sink): the chief's sends
     * must complete for everybody to reach the agreement that reports this. */
    recv_sink(s, len);
    if (head[2])
        recv_sink(s, (uint64_t)head[2]);
    return ckpt__error(CKPT_ENOMEM, "rank %d: no memory for its share of the index (%llu bytes)",
                       s->rank, (unsigned long long)len);
}

/*
 * The chief opens the checkpoint (index checks plus data-file sizes); every rank sends it what it
 * reads and receives its share of the index (lib/share.h), then reads the pieces overlapping what
 * it owns. Collective: the prefix's broadcast, the gather of the wants (a gather, the verdict's
 * broadcast, a gatherv), the chief's sends, and two agreements; with options version 2 also
 * the broadcast of the names' comparison (strict restores: its header, then the names).
 */
/* The chief's own share (the cache level: its reads, like every rank's, decide what it fetches
 * from other nodes), replacing its reader of the whole index. */
static int own_share(ckpt_saver *s, const char *prefix, ckpt_reader **r)
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

static int restore_impl(ckpt_saver *s, const char *prefix_arg, int cache,
                        const ckpt_restore_options *opts, ckpt_restore_info *info,
                        int *unavailable);

int ckpt_saver_restore(ckpt_saver *s, const char *prefix_arg, const ckpt_restore_options *opts,
                       ckpt_restore_info *info)
{
    return restore_impl(s, prefix_arg, 0, opts, info, NULL);
}

int ckpt__saver_restore_cache(ckpt_saver *s, const char *name, const ckpt_restore_options *opts,
                              ckpt_restore_info *info, int *unavailable)
{
    int dummy;
    return restore_impl(s, name, 1, opts, info, unavailable ? unavailable : &dummy);
}

/* `unavailable` (the cache level): set to 1 when the restore failed before reading what was
 * registered (the copy could not be made whole, read or fetched), 0 otherwise — a registration
 * that does not match the checkpoint is then told apart from a cache that lost it. */
static int restore_impl(ckpt_saver *s, const char *prefix_arg, int cache,
                        const ckpt_restore_options *opts, ckpt_restore_info *info,
                        int *unavailable)
{
    if (unavailable)
        *unavailable = 1;
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    /* Restore waits for a save in flight; a failure of that save is kept for the next save, sync
     * or close to report (restoring an older checkpoint is fine). */
    ckpt_saver_wait(s);
    double t0 = ckpt__mono_seconds(); /* the summary line's phases (save_summary.c) */
    uint64_t ckpt_bytes = 0;
    char prefix[4096], base[4096] = "";
    int rc0 = ckpt__save_bcast_prefix(s, prefix_arg, prefix, sizeof prefix, NULL, NULL);
    if (rc0 != CKPT_OK)
        return rc0;
    if (cache) { /* the name, in this rank's node's cache directory */
        int st = CKPT_OK;
        if (!s->cache.on)
            st = ckpt__error(CKPT_EINVAL, "a restore from the cache level without a cache");
        else if (!ckpt__safe_filename(prefix))
            st = ckpt__error(CKPT_EINVAL, "checkpoint name '%s' is not a plain file name", prefix);
        else if ((st = ckpt__path(base, sizeof base, "%s", prefix)) == CKPT_OK &&
                 (st = ckpt__cache_reopen(s)) == CKPT_OK) /* a wiped node's, made again */
            st = ckpt__path(prefix, sizeof prefix, "%s/%s", s->cache.at, base);
        if ((rc0 = ckpt_mpi_agree(s->comm, st)) != CKPT_OK)
            return rc0;
        /* what a lost or wiped node lacks, copied back from the nodes that hold it */
        if ((rc0 = ckpt__cache_rebuild(s, base)) != CKPT_OK)
            return rc0;
    }
    /* NULL options and version 1: the behaviour before strict restores */
    ckpt_restore_options o = { 1, 0, 0, NULL, NULL };
    if (opts && opts->version >= 2 && opts->version <= CKPT_RESTORE_OPTIONS_VERSION)
        o = *opts;
    else if (opts)
        o.skip_missing_per_rank = opts->skip_missing_per_rank;
    if (opts && opts->version >= 2) {
        if (opts->missing)
            *opts->missing = NULL;
        if (opts->unexpected)
            *opts->unexpected = NULL;
    }
    int compare = o.version >= 2; /* names compared before any data is read */
    opts = &o;
    /* The chief reads, validates and checks the checkpoint; its verdict travels with the gather of
     * every rank's wants. */
    int local = CKPT_OK;
    ckpt_reader *r = NULL;
    if (s->rank == 0) {
        char ipath[4200];
        uint8_t *file = NULL;
        const uint8_t *payload = NULL;
        size_t plen = 0;
        if ((local = ckpt__path(ipath, sizeof ipath, "%s.index", prefix)) == CKPT_OK &&
            (local = ckpt__index_read(&file, &payload, &plen, ipath)) == CKPT_ENOTFOUND)
            ckpt__error_set_reason(ckpt__error(local, "no checkpoint at %s (%s does not exist)",
                                               prefix, ipath),
                                   CKPT_REASON_NO_CHECKPOINT);
        if (local == CKPT_OK)
            local = ckpt__reader_open_payload(&r, prefix, payload, plen,
                                              cache ? CKPT__READER_CHECK_INDEX
                                                    : CKPT__READER_CHECK_ALL);
        if (local == CKPT_OK)
            ckpt_bytes = ckpt__index_bytes(ckpt__reader_index(r));
        free(file);
    }
    Mpickpt__Fragment wants = MPICKPT__FRAGMENT__INIT;
    uint8_t *wbuf = NULL, *all = NULL;
    uint64_t *offs = NULL;
    size_t wlen = 0;
    int mine = s->rank == 0 ? CKPT_OK : build_wants(s, &wants, opts->skip_missing_per_rank);
    if (mine == CKPT_OK && s->rank != 0) {
        wlen = mpickpt__fragment__get_packed_size(&wants);
        if ((wbuf = malloc(wlen ? wlen : 1)))
            mpickpt__fragment__pack(&wants, wbuf);
        else
            mine = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    }
    ckpt__fragment_free_built(&wants);
    if (local == CKPT_OK)
        local = mine;
    /* The cooperative restore (restore_coop.c): the chief decides, from every rank's node */
    coop_ctx cc = { 0 };
    int *zeros = NULL;
    if (s->rank == 0 && !cache && s->size > 1 && local == CKPT_OK) {
        int on = 1;
        local = ckpt__env_bool(&on, "MPICKPT_RESTORE_COOPERATIVE", 1);
        cc.planned = local == CKPT_OK && on;
        cc.optional = opts->skip_missing_per_rank;
        /* every rank's node, known since the saver's create where it splits nodes (per-node
         * layout, cache levels); elsewhere one node for all */
        cc.node_of = s->node_of;
        if (!cc.node_of && !(cc.node_of = zeros = calloc((size_t)s->size, sizeof *zeros)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    int rc = ckpt__gather_bytes(s->comm, 0, local, wbuf, wlen, s->chunk, s->gather_scratch, &all,
                                &offs);
    free(wbuf);
    if (rc != CKPT_OK) {
        ckpt_reader_free(r);
        free(zeros);
        return rc;
    }
    /* the chief compares the names while it serves the shares (its own wants first) */
    names_ctx nc = { 0 };
    nc.rc = CKPT_OK;
    if (compare && s->rank == 0 && local == CKPT_OK) {
        nc.idx = ckpt__reader_index(r);
        if (!(nc.used = calloc(nc.idx->n_tensors ? nc.idx->n_tensors : 1, 1)))
            nc.rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        Mpickpt__Fragment own = MPICKPT__FRAGMENT__INIT;
        if (nc.rc == CKPT_OK && (nc.rc = build_wants(s, &own, opts->skip_missing_per_rank)) ==
                                    CKPT_OK)
            names_note(&nc, &own);
        ckpt__fragment_free_built(&own);
    }
    local = s->rank == 0 ? send_shares(s, r, all, offs, compare && nc.idx ? &nc : NULL, &cc)
                         : recv_share(s, prefix, &r, &cc);
    cc.node_of = NULL;
    free(zeros);
    free(all);
    free(offs);
    /* the lists to every rank: {status, bytes, missing, unexpected}, then the names */
    ckpt_name_list *lmiss = NULL, *lunexp = NULL;
    int mismatch = 0;
    if (compare) {
        int64_t head[4] = { 0, 0, 0, 0 };
        uint8_t *nb = NULL;
        uint64_t nlen = 0;
        if (s->rank == 0) {
            int st = local != CKPT_OK ? local : names_finish(s, &nc, &nb, &nlen, &head[2],
                                                             &head[3]);
            head[0] = st;
            head[1] = st == CKPT_OK ? (int64_t)nlen : 0;
            if (st != CKPT_OK && local == CKPT_OK)
                local = st;
        }
        names_free(&nc);
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
                st = list_from(&lmiss, &p, end, head[2]);
            if (st == CKPT_OK)
                st = list_from(&lunexp, &p, end, head[3]);
            mismatch = st == CKPT_OK && opts->strict && (lmiss->n || lunexp->n);
        } else if (st == CKPT_OK) {
            st = (int)head[0]; /* the chief's failure: its agreement carries the message */
        }
        free(nb);
        if (st != CKPT_OK && local == CKPT_OK)
            local = st;
    }
    int fetched = -1; /* the cache level: pieces other nodes hold, fetched (restore_cache.c) */
    if (cache) {
        if (s->rank == 0 && local == CKPT_OK)
            local = own_share(s, prefix, &r);
        local = ckpt__cache_fetch(s, r, base, local, &fetched);
        local = ckpt_mpi_agree(s->comm, local); /* a holder's failure, in its own words */
        if (local != CKPT_OK) {
            ckpt_reader_free(r);
            ckpt__cache_fetch_done(s, fetched);
            ckpt_name_list_free(lmiss);
            ckpt_name_list_free(lunexp);
            return local;
        }
        *unavailable = 0; /* from here on, the copy is whole: failures are the registration's */
    }
    if (mismatch && local == CKPT_OK) /* before any data is read; every rank has the lists */
        local = mismatch_error(cache ? base : prefix, lmiss, lunexp);
    double t1 = ckpt__mono_seconds();
    /* The cooperative restore: the chief's reads go by its own share (without what it is
     * forwarded); the pieces several ranks read are read once and forwarded, after an agreement
     * that every rank has its list (a rank without it could not take part). */
    if (s->rank == 0 && cc.own) {
        ckpt_reader *own_r = NULL;
        int st = ckpt__reader_open_payload(&own_r, prefix, cc.own, cc.own_len, 0);
        if (st == CKPT_OK) {
            ckpt_reader_free(r);
            r = own_r;
        } else if (local == CKPT_OK) {
            local = st;
        }
    }
    free(cc.own);
    if (cc.active) {
        ckpt__coop *co = NULL;
        if (local == CKPT_OK && cc.list)
            local = ckpt__coop_open(&co, prefix, cc.list, cc.list_len);
        local = ckpt_mpi_agree(s->comm, local);
        if (local == CKPT_OK && co)
            local = ckpt__coop_run(s, co);
        ckpt__coop_free(co);
    }
    free(cc.list);

    /*
     * Tensors every checkpoint holds (full, partitioned, replicated) are read straight into the
     * registered buffers: a restore that succeeds, from this checkpoint or from an older one that
     * the manager falls back to, overwrites every element of them. Per-rank values (replica
     * components, registered savers' blobs) are staged instead and applied only once every rank
     * has read and checked everything: an older checkpoint written by fewer ranks may lack this
     * rank's, and then nothing of a rejected checkpoint may be left in them. Registered restores
     * run last, after every tensor is in (TensorFlow runs registered restores after the default
     * ones).
     */
    size_t nst = 0;
    struct staged {
        size_t reg;
        uint8_t *bytes;
        size_t len;
    } *st = calloc(s->regs.n ? s->regs.n : 1, sizeof *st);
    if (!st && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    for (size_t k = 0; k < s->regs.n && local == CKPT_OK; k++) {
        const ckpt__reg *g = &s->regs.v[k];
        int per_rank = g->kind == CKPT_KIND_COMPONENT || g->kind == CKPT_KIND_BLOB;
        size_t ti;
        int found = ckpt_reader_find(&ti, r, g->stored);
        if (found != CKPT_OK) {
            /* not strict: what the checkpoint lacks is left untouched (and listed) */
            if ((per_rank && opts->skip_missing_per_rank) ||
                (compare && (!opts->strict ||
                             strncmp(g->stored, RESERVED, sizeof RESERVED - 1) == 0))) {
                ckpt_error_clear(); /* kept: the lookup's own "no tensor" (local is CKPT_OK) */
                continue;
            }
            local = ckpt__error(CKPT_ENOTFOUND,
                                "rank %d: '%s' is not in checkpoint %s (written by %d ranks)%s",
                                s->rank, g->stored, prefix, ckpt_reader_header(r)->world_size,
                                per_rank ? "; per-rank data of a rank the writer did not have (set "
                                           "skip_missing_per_rank to leave it untouched)"
                                         : "");
            ckpt__error_set_reason(local, CKPT_REASON_NO_TENSOR);
            break;
        }
        ckpt_tensor_info t;
        ckpt_reader_tensor(&t, r, ti);
        ckpt_dtype dtype = g->kind == CKPT_KIND_BLOB ? CKPT_UINT8 : g->dtype;
        if (g->kind == CKPT_KIND_BLOB ? (t.dtype != CKPT_UINT8 || t.shape.ndims != 1)
                                      : (t.dtype != g->dtype || !ckpt_shape_equal(&t.shape, &g->shape))) {
            char a[64] = "", b[64] = "";
            for (int d = 0; d < t.shape.ndims; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
                         (long long)t.shape.dims[d]);
            for (int d = 0; d < g->shape.ndims; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
                         (long long)g->shape.dims[d]);
            if (g->kind == CKPT_KIND_BLOB)
                local = ckpt__error(CKPT_EMISMATCH, "rank %d: '%s' is not a blob", s->rank,
                                    g->stored);
            else
                local = ckpt__error(CKPT_EMISMATCH,
                                    "rank %d: tensor '%s' is %s [%s] in %s, registered as %s [%s]",
                                    s->rank, g->stored, ckpt_dtype_name(t.dtype), a, prefix,
                                    ckpt_dtype_name(g->dtype), b);
            break;
        }
        const ckpt_slice *want = g->kind == CKPT_KIND_BLOB ? NULL : &g->slice;
        int64_t n;
        if (want)
            ckpt_slice_num_elements(&n, want);
        else
            n = t.shape.dims[0];
        size_t nbytes = (size_t)n * ckpt_dtype_size(dtype);
        void *dst = g->data;
        if (per_rank) {
            if (!(st[nst].bytes = malloc(nbytes ? nbytes : 1))) {
                local = ckpt__error(CKPT_ENOMEM, "rank %d: cannot allocate %zu bytes for '%s'",
                                    s->rank, nbytes, g->stored);
                break;
            }
            st[nst].reg = k;
            st[nst].len = nbytes;
            dst = st[nst++].bytes;
        }
        local = ckpt_reader_read(r, g->stored, dtype, want, dst, nbytes);
        if (local != CKPT_OK)
            local = ckpt__error_wrap(local, "rank %d", s->rank);
    }
    /* every rank has read and checked everything it needs: only now are per-rank values applied
     * (the agreement is a vote that also carries the slowest rank of each phase) */
    double own[2] = { t1 - t0, ckpt__mono_seconds() - t1 }, phase[2];
    int slowest[2] = { -1, -1 };
    ckpt__summary_encode(phase, own, 2, s->rank);
    local = ckpt__mpi_vote(s->comm, local, phase, 2);
    if (local == CKPT_OK)
        ckpt__summary_decode(phase, slowest, phase, 2);
    for (size_t i = 0; i < nst && local == CKPT_OK; i++) /* replica components */
        if (s->regs.v[st[i].reg].kind == CKPT_KIND_COMPONENT && st[i].len)
            memcpy(s->regs.v[st[i].reg].data, st[i].bytes, st[i].len);
    for (size_t i = 0; i < nst && local == CKPT_OK; i++) { /* then registered savers */
        const ckpt__reg *g = &s->regs.v[st[i].reg];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        int cb = g->cb.restore(st[i].bytes, st[i].len, g->payload);
        if (cb != CKPT_OK)
            local = ckpt__error(cb, "rank %d: registered saver '%s' failed to restore (%d)",
                                s->rank, g->name, cb);
    }
    for (size_t i = 0; i < nst; i++)
        free(st[i].bytes);
    free(st);
    rc = ckpt_mpi_agree(s->comm, local);
    if (rc == CKPT_OK) {
        const ckpt_header *h = ckpt_reader_header(r);
        s->counter = h->save_counter;
        if (info) {
            info->save_counter = h->save_counter;
            info->epoch = h->epoch;
            info->step = h->step;
            info->end_of_epoch = h->end_of_epoch;
            info->world_size = h->world_size;
            info->layout = h->layout;
        }
        ckpt__restore_log_summary(s, prefix, ckpt_bytes, h->world_size,
                                  ckpt__mono_seconds() - t0, phase, slowest, own[0], own[1]);
    }
    ckpt_reader_free(r);
    ckpt__cache_fetch_done(s, fetched);
    if (compare && o.missing && lmiss)
        *o.missing = lmiss;
    else
        ckpt_name_list_free(lmiss);
    if (compare && o.unexpected && lunexp)
        *o.unexpected = lunexp;
    else
        ckpt_name_list_free(lunexp);
    return rc;
}

