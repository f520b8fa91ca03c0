/*
 * The collective restore (DESIGN §4, "Restore"): the chief reads the index and checks it, every
 * rank receives it and reads the pieces that overlap what it owns now, so a checkpoint written by
 * N ranks restores on M. Per-rank values are staged and applied only once every rank succeeded.
 */
#include "saver_internal.h"

#include "index.h"
#include "mpickpt/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The chief opens the checkpoint (index checks plus data-file sizes) and broadcasts the index;
 * every rank then reads the pieces overlapping what it owns. Collective.
 */
int ckpt_saver_restore(ckpt_saver *s, const char *prefix_arg, const ckpt_restore_options *opts,
                       ckpt_restore_info *info)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    /* Restore waits for a save in flight; a failure of that save is kept for the next save, sync
     * or close to report (restoring an older checkpoint is fine). */
    ckpt__saver_wait_keep(s);
    char prefix[4096];
    int rc0 = ckpt__save_bcast_prefix(s, prefix_arg, prefix, sizeof prefix);
    if (rc0 != CKPT_OK)
        return rc0;
    ckpt_restore_options defaults = CKPT_RESTORE_OPTIONS_INIT;
    if (!opts)
        opts = &defaults;
    /* The chief reads the index file and checks its container; its payload is broadcast as is
     * and every rank unpacks it; the chief also validates it and checks the data files, and that
     * verdict is agreed before any rank reads data. */
    int local = CKPT_OK;
    uint8_t *file = NULL, *bytes = NULL;
    const uint8_t *payload = NULL;
    size_t plen = 0;
    uint64_t len = 0;
    if (s->rank == 0) {
        char ipath[4200];
        if ((local = ckpt__path(ipath, sizeof ipath, "%s.index", prefix)) == CKPT_OK &&
            (local = ckpt__index_read(&file, &payload, &plen, ipath)) == CKPT_ENOTFOUND)
            ckpt__error(local, "no checkpoint at %s (%s does not exist)", prefix, ipath);
        len = plen;
    }
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK) {
        free(file);
        return rc;
    }
    if (MPI_Bcast(&len, 1, MPI_UINT64_T, 0, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index size failed");
    if (s->rank == 0)
        bytes = (uint8_t *)payload;
    else if (local == CKPT_OK && !(bytes = malloc(len ? len : 1)))
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the index", s->rank);
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK) {
        if (s->rank != 0)
            free(bytes);
        free(file);
        return rc;
    }
    /* An index larger than INT_MAX bytes is broadcast in chunks. */
    for (uint64_t off = 0; off < len && local == CKPT_OK; off += (1u << 30)) {
        int n = (int)(len - off < (1u << 30) ? len - off : (1u << 30));
        if (MPI_Bcast(bytes + off, n, MPI_BYTE, 0, s->comm) != MPI_SUCCESS)
            local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index failed");
    }
    ckpt_reader *r = NULL;
    if (local == CKPT_OK)
        local = ckpt__reader_open_payload(&r, prefix, bytes, (size_t)len, s->rank == 0);
    if (s->rank != 0)
        free(bytes);
    free(file);
    /* the chief's validation: a bad index is the same error on every rank */
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK) {
        ckpt_reader_free(r);
        return rc;
    }

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
            if (per_rank && opts->skip_missing_per_rank) {
                ckpt_error_clear();
                continue;
            }
            local = ckpt__error(CKPT_ENOTFOUND,
                                "rank %d: '%s' is not in checkpoint %s (written by %d ranks)%s",
                                s->rank, g->stored, prefix, ckpt_reader_header(r)->world_size,
                                per_rank ? "; per-rank data of a rank the writer did not have (set "
                                           "skip_missing_per_rank to leave it untouched)"
                                         : "");
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
    /* every rank has read and checked everything it needs: only now are per-rank values applied */
    local = ckpt_mpi_agree(s->comm, local);
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
    }
    ckpt_reader_free(r);
    return rc;
}

