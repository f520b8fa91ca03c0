/*
 * The replica check: a replicated tensor (CKPT_REPLICA_PRIMARY) is written once, by the rank
 * ckpt__replica_writers() names, so copies that differ across ranks (BatchNorm buffers, a value that
 * should have been per-rank) would silently come back from whichever rank wrote each tensor. At
 * the first save of a plan (or at every save: ckpt_saver_options.check_replicas) every rank takes
 * a CRC-32C of its copy of each replicated tensor and the ranks compare them in the save's second
 * vote, which is widened for it (one MPI_Allreduce of MAX over {-status, crc, -crc per tensor}:
 * the maximum and the minimum of every tensor's CRC at once). Only when some tensor differs do
 * the ranks exchange their CRCs of the differing tensors (an allreduce and an allgather), to name
 * the ranks. A difference is CKPT_EMISMATCH on every rank, or a warning (replica_mismatch).
 */
#include "saver_internal.h"

#include "mpickpt/collective.h"
#include "mpickpt/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* at most this many differing tensors are named (with their ranks) */
#define LISTED 8

static __thread const ckpt__reg *cmp_regs; /* qsort's comparator reads the saver's here */

static int cmp_stored(const void *a, const void *b)
{
    return strcmp(cmp_regs[*(const size_t *)a].stored, cmp_regs[*(const size_t *)b].stored);
}

void ckpt__replica_check_free(ckpt__replica_check *c)
{
    free(c->reg);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

int ckpt__replica_check_init(const ckpt_saver *s, ckpt__replica_check *c)
{
    memset(c, 0, sizeof *c);
    if (s->size < 2 || s->opts.check_replicas == CKPT_CHECK_REPLICAS_OFF)
        return CKPT_OK;
    size_t n = 0;
    for (size_t k = 0; k < s->regs.n; k++)
        n += s->regs.v[k].kind == CKPT_KIND_REPLICATED;
    c->reg = malloc((n ? n : 1) * sizeof *c->reg);
    c->buf = malloc(2 * (1 + 2 * n) * sizeof *c->buf);
    if (!c->reg || !c->buf) {
        ckpt__replica_check_free(c);
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    }
    for (size_t k = 0; k < s->regs.n; k++)
        if (s->regs.v[k].kind == CKPT_KIND_REPLICATED)
            c->reg[c->n++] = k;
    c->on = 1;
    return CKPT_OK;
}

/* The CRC of each replicated tensor, in the order of stored names (the same set on every rank
 * once the plan is made: ckpt__plan_check_replicated). Local. */
void ckpt__replica_check_crcs(const ckpt_saver *s, ckpt__replica_check *c)
{
    cmp_regs = s->regs.v;
    if (c->n > 1) /* qsort of no array (NULL) is undefined */
        qsort(c->reg, c->n, sizeof *c->reg, cmp_stored);
    for (size_t i = 0; i < c->n; i++) {
        const ckpt__reg *g = &s->regs.v[c->reg[i]];
        int64_t ne = 0;
        ckpt_slice_num_elements(&ne, &g->slice);
        uint32_t crc = ckpt_crc32c(g->data, (size_t)ne * ckpt_dtype_size(g->dtype));
        c->buf[1 + 2 * i] = (double)crc;
        c->buf[2 + 2 * i] = -(double)crc;
    }
    c->due = 1;
}

/* "0-3, 5, 7" of the sorted ranks r[0..n), at most `cap` bytes */
static void fmt_ranks(char *out, size_t cap, const int *r, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && len + 24 < cap;) {
        size_t j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? ", " : "", r[i]);
        if (j > i)
            len += (size_t)snprintf(out + len, cap - len, "%s%d", j > i + 1 ? "-" : ", ", r[j]);
        i = j + 1;
        if (i < n && len + 24 >= cap)
            snprintf(out + len, cap - len, ", ...");
    }
}

/* The message naming the differing tensors (diff[0..nd) of c's order, k of them listed) and, from
 * every rank's CRCs of the listed ones (all[rank * k + j]), the ranks whose copy differs from the
 * writer's. */
static void describe(const ckpt_saver *s, const ckpt__replica_check *c, const size_t *diff,
                     size_t nd, size_t k, const uint32_t *all, char *msg, size_t cap)
{
    size_t len = (size_t)snprintf(msg, cap,
                                  "%zu replicated tensor%s differ%s across ranks (the "
                                  "copies of a replicated tensor must be equal):",
                                  nd, nd == 1 ? "" : "s", nd == 1 ? "s" : "");
    int *odd = all ? malloc((size_t)s->size * sizeof *odd) : NULL;
    int *writer = NULL;
    (void)ckpt__replica_writers(&s->regs, s->size, &writer); /* out of memory: no writer named */
    for (size_t j = 0; j < k && len + 64 < cap; j++) {
        const char *name = s->regs.v[c->reg[diff[j]]].stored;
        int w = writer ? writer[c->reg[diff[j]]] : -1;
        len += (size_t)snprintf(msg + len, cap - len, "%s '%.200s'", j ? ";" : "", name);
        if (!odd || w < 0)
            continue;
        size_t no = 0;
        for (int r = 0; r < s->size; r++)
            if (all[(size_t)r * k + j] != all[(size_t)w * k + j])
                odd[no++] = r;
        char ranks[256];
        fmt_ranks(ranks, sizeof ranks, odd, no);
        if (len < cap)
            len += (size_t)snprintf(msg + len, cap - len,
                                    ": rank%s %s differ%s from rank %d's "
                                    "copy (the one written)",
                                    no == 1 ? "" : "s", ranks, no == 1 ? "s" : "", w);
    }
    free(odd);
    free(writer);
    if (nd > k && len < cap)
        len += (size_t)snprintf(msg + len, cap - len, "; and %zu more", nd - k);
    if (len < cap)
        snprintf(msg + len, cap - len,
                 ". A value that differs by rank must be per-rank "
                 "(CKPT_REPLICA_PER_COMPONENT; Python: mpickpt.PerRank), "
                 "or make the copies equal (e.g. broadcast them) before "
                 "saving; %s",
                 s->opts.replica_mismatch == CKPT_REPLICA_MISMATCH_WARN
                     ? "replica_mismatch=warn: saved anyway, the written copies"
                     : "MPICKPT_REPLICA_MISMATCH=warn saves anyway");
}

int ckpt__replica_vote(ckpt_saver *s, ckpt__replica_check *c, int local)
{
    size_t m = 1 + 2 * c->n;
    double *in = c->buf, *out = c->buf + m;
    in[0] = -(double)local;
    if (MPI_Allreduce(in, out, (int)m, MPI_DOUBLE, MPI_MAX, s->comm) != MPI_SUCCESS)
        return ckpt_mpi_agree(s->comm, ckpt__error(CKPT_EMPI, "MPI_Allreduce of the vote failed"));
    if (out[0] != 0.0) /* somebody failed: every rank takes this branch */
        return ckpt_mpi_agree(s->comm, local);
    /* the same maxima everywhere: every rank finds the same differing tensors */
    size_t nd = 0, diff[LISTED];
    for (size_t i = 0; i < c->n; i++)
        if (out[1 + 2 * i] != -out[2 + 2 * i]) {
            if (nd < LISTED)
                diff[nd] = i;
            nd++;
        }
    if (nd == 0)
        return CKPT_OK;
    /* the CRCs of the listed tensors from every rank, to name the ranks (failure path only) */
    size_t k = nd < LISTED ? nd : LISTED;
    uint32_t mine[LISTED];
    for (size_t j = 0; j < k; j++)
        mine[j] = (uint32_t)in[1 + 2 * diff[j]];
    uint32_t *all = malloc((size_t)s->size * k * sizeof *all);
    int have = all != NULL, every = 0;
    if (MPI_Allreduce(&have, &every, 1, MPI_INT, MPI_MIN, s->comm) != MPI_SUCCESS)
        every = 0;
    if (every && MPI_Allgather(mine, (int)k, MPI_UINT32_T, all, (int)k, MPI_UINT32_T, s->comm) !=
                     MPI_SUCCESS)
        every = 0; /* the message then names the tensors only */
    char msg[1200];
    describe(s, c, diff, nd, k, every ? all : NULL, msg, sizeof msg);
    free(all);
    if (s->opts.replica_mismatch == CKPT_REPLICA_MISMATCH_WARN) {
        if (s->rank == 0)
            ckpt__log(CKPT_LOG_WARN, "%s", msg);
        return CKPT_OK;
    }
    /* the same message on every rank (computed from the same data); the next save checks again,
     * whatever the mode (nothing was saved) */
    s->dirty = 1;
    return ckpt__error(CKPT_EMISMATCH, "%s", msg);
}
