/*
 * The summary lines of a save and of a restore (docs/operations.md, "Summary lines"), and the
 * per-rank times they report, gathered with data the protocol moves anyway: no collective call of
 * its own.
 *
 * - Each rank's write time travels in its index fragment (Fragment.write_s / write_ranks; a node
 *   leader's merged fragment carries its members'), so the chief has every rank's and takes their
 *   median (ckpt__save_write_median).
 * - The slowest rank of each phase travels in the commit vote (a save) or the read agreement (a
 *   restore): each maximum is encoded with its rank (ckpt__maxloc_encode, lib/log.c), so the vote's
 *   one MPI_Allreduce(MAX) gives the maximum and who had it.
 * - The chief logs one line at info level per committed save and per restore; every rank logs its
 *   own times at debug level. Nothing is formatted when the level is off.
 */
#include "saver_internal.h"

#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t ckpt__index_bytes(const Mpickpt__Index *idx)
{
    uint64_t total = 0;
    for (size_t i = 0; idx && i < idx->n_tensors; i++)
        for (size_t k = 0; k < idx->tensors[i]->n_pieces; k++)
            total += idx->tensors[i]->pieces[k]->bytes;
    return total;
}

int ckpt__fragment_times_concat(Mpickpt__Fragment *out, Mpickpt__Fragment *const *frags, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += frags[i]->n_write_s < frags[i]->n_write_ranks ? frags[i]->n_write_s
                                                                : frags[i]->n_write_ranks;
    out->write_s = malloc((total ? total : 1) * sizeof *out->write_s);
    out->write_ranks = malloc((total ? total : 1) * sizeof *out->write_ranks);
    if (!out->write_s || !out->write_ranks) {
        ckpt__fragment_times_free(out);
        return CKPT_ENOMEM; /* metrics only: the caller goes on without them */
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t e = 0; e < frags[i]->n_write_s && e < frags[i]->n_write_ranks; e++) {
            out->write_s[k] = frags[i]->write_s[e];
            out->write_ranks[k++] = frags[i]->write_ranks[e];
        }
    out->n_write_s = out->n_write_ranks = k;
    return CKPT_OK;
}

void ckpt__fragment_times_free(Mpickpt__Fragment *f)
{
    free(f->write_s);
    free(f->write_ranks);
    f->write_s = NULL;
    f->write_ranks = NULL;
    f->n_write_s = f->n_write_ranks = 0;
}

void ckpt__save_write_median(save_job *j, Mpickpt__Fragment *const *frags, size_t n)
{
    int size = j->s->size;
    j->have_median = 0;
    double *v = malloc((size_t)size * sizeof *v);
    unsigned char *seen = calloc((size_t)size, 1);
    size_t cnt = 0;
    int ok = v && seen;
    for (size_t i = 0; ok && i < n; i++) {
        const Mpickpt__Fragment *f = frags[i];
        ok = f->n_write_s == f->n_write_ranks;
        for (size_t e = 0; ok && e < f->n_write_s; e++) {
            int32_t r = f->write_ranks[e];
            double t = f->write_s[e];
            ok = r >= 0 && r < size && !seen[r] && isfinite(t) && t >= 0;
            if (ok) {
                seen[r] = 1;
                v[cnt++] = t;
            }
        }
    }
    /* every rank's time exactly once, else no median (metrics never fail a save) */
    if (ok && cnt == (size_t)size) {
        j->write_median = ckpt__metrics_median(v, cnt);
        j->have_median = 1;
    }
    free(v);
    free(seen);
}

void ckpt__summary_encode(double *vals, const double *times, int n, int rank)
{
    for (int i = 0; i < n; i++)
        vals[i] = ckpt__maxloc_encode(times[i], rank);
}

void ckpt__summary_decode(double *times, int *ranks, const double *vals, int n)
{
    for (int i = 0; i < n; i++)
        ckpt__maxloc_decode(vals[i], &times[i], &ranks[i]);
}

void ckpt__save_log_summary(const save_job *j, const ckpt__metrics_record *m)
{
    const ckpt_saver *s = j->s;
    if (ckpt__log_enabled(CKPT_LOG_DEBUG))
        ckpt__log(CKPT_LOG_DEBUG,
                  "save rank=%d bytes=%llu write_s=%.6f agree_s=%.6f merge_s=%.6f commit_s=%.6f "
                  "prefix=%s",
                  s->rank, (unsigned long long)j->bytes, j->t_write, j->t_agree, j->t_merge,
                  j->t_commit, j->c.n.prefix);
    if (s->rank != 0 || !ckpt__log_enabled(CKPT_LOG_INFO))
        return;
    /* the slowest rank: the write phase's, the one part of a save a rank does alone (the others
     * end in a collective, so every rank's time there includes waiting for the slowest) */
    char median[48] = "", ranks[160] = "";
    if (m->have_write_median)
        snprintf(median, sizeof median, " write_median_s=%.6f", m->write_median_s);
    for (int k = 0; m->have_slowest && k < CKPT__METRICS_PHASES; k++)
        snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), " %s_rank=%d",
                 ckpt__metrics_phase_names[k], m->slowest_rank[k]);
    ckpt__log(CKPT_LOG_INFO,
              "save bytes=%llu seconds=%.6f gbps=%.4f ranks=%llu mode=%s blocking_s=%.6f "
              "write_s=%.6f agree_s=%.6f merge_s=%.6f commit_s=%.6f slowest_rank=%d "
              "slowest_s=%.6f%s%s prefix=%s",
              (unsigned long long)m->bytes, ckpt__metrics_background_s(m), m->gbps,
              (unsigned long long)m->ranks, m->async ? "async" : "sync", m->blocking_s,
              m->write_s, m->agree_s, m->merge_s, m->commit_s,
              m->have_slowest ? m->slowest_rank[1] : -1, m->write_s, median, ranks,
              j->c.n.prefix);
}

void ckpt__restore_log_summary(const ckpt_saver *s, const char *prefix, uint64_t bytes,
                               int written_by, double seconds, const double *times,
                               const int *ranks, double mine_index, double mine_read)
{
    if (ckpt__log_enabled(CKPT_LOG_DEBUG))
        ckpt__log(CKPT_LOG_DEBUG, "restore rank=%d index_s=%.6f read_s=%.6f prefix=%s", s->rank,
                  mine_index, mine_read, prefix);
    if (s->rank != 0 || !ckpt__log_enabled(CKPT_LOG_INFO))
        return;
    ckpt__log(CKPT_LOG_INFO,
              "restore bytes=%llu seconds=%.6f gbps=%.4f ranks=%d written_by=%d index_s=%.6f "
              "read_s=%.6f slowest_rank=%d slowest_s=%.6f index_rank=%d read_rank=%d prefix=%s",
              (unsigned long long)bytes, seconds,
              seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0, s->size, written_by, times[0],
              times[1], ranks[1], times[1], ranks[0], ranks[1], prefix);
}
