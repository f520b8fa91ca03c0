/* What a rank wrote at a save, and its conversion to an index fragment: see record.h. */
#include "record.h"

#include "crc32c_internal.h"
#include "index.h"
#include "mpickpt/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ckpt__record_init(ckpt__record *r)
{
    memset(r, 0, sizeof *r);
}

void ckpt__record_free(ckpt__record *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free((char *)r->v[i].name);
        free((char *)r->v[i].dataset);
        free(r->v[i].block_crc);
    }
    free(r->v);
    ckpt__record_init(r);
}

int ckpt__record_add(ckpt__record *r, const ckpt__written *w)
{
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 16;
        ckpt__written *nv = realloc(r->v, ncap * sizeof *nv);
        if (!nv) {
            free(w->block_crc);
            return ckpt__error(CKPT_ENOMEM, "out of memory recording tensor '%s'", w->name);
        }
        r->v = nv;
        r->cap = ncap;
    }
    ckpt__written *d = &r->v[r->n];
    *d = *w;
    d->name = strdup(w->name);
    d->dataset = strdup(w->dataset);
    if (!d->name || !d->dataset) {
        free((char *)d->name);
        free((char *)d->dataset);
        free(w->block_crc);
        return ckpt__error(CKPT_ENOMEM, "out of memory recording tensor '%s'", w->name);
    }
    r->n++;
    return CKPT_OK;
}

int ckpt__record_add_data(ckpt__record *r, const ckpt__written *w, const void *data, size_t len)
{
    ckpt__written x = *w;
    x.n_block = len > CKPT__CRC_BLOCK ? (len + CKPT__CRC_BLOCK - 1) / CKPT__CRC_BLOCK : 0;
    x.block_crc = x.n_block ? malloc(x.n_block * sizeof *x.block_crc) : NULL;
    if (x.n_block && !x.block_crc)
        return ckpt__error(CKPT_ENOMEM, "out of memory recording tensor '%s'", w->name);
    x.crc = x.n_block ? ckpt__crc32c_blocks(data, len, CKPT__CRC_BLOCK, x.block_crc)
                      : ckpt_crc32c(data, len);
    x.bytes = (uint64_t)len;
    return ckpt__record_add(r, &x);
}

int ckpt__record_add_file(ckpt__record *r, const char *name, uint64_t bytes)
{
    if (r->nfiles == sizeof r->files / sizeof r->files[0])
        return ckpt__error(CKPT_ERROR, "internal: too many data files in one record");
    snprintf(r->files[r->nfiles].name, sizeof r->files[0].name, "%s", name);
    r->files[r->nfiles++].bytes = bytes;
    return CKPT_OK;
}

uint64_t ckpt__record_bytes(const ckpt__record *r)
{
    uint64_t b = 0;
    for (size_t i = 0; i < r->n; i++)
        b += r->v[i].bytes;
    return b;
}

int ckpt__record_fragment(Mpickpt__Fragment *f, const ckpt__record *r, int rank,
                          const char *file)
{
    size_t cap = 0;
    int rc = CKPT_OK;
    f->rank = rank;
    for (size_t i = 0; i < r->n && rc == CKPT_OK; i++) {
        const ckpt__written *w = &r->v[i];
        Mpickpt__Tensor *t;
        if ((rc = ckpt__fragment_tensor(&t, f, &cap, w->name, w->dtype, &w->shape, w->kind, 1)) ||
            (rc = ckpt__fragment_piece(t, 0, rank, &w->slice, file, w->dataset,
                                       &w->dataset_slice, w->bytes, w->crc)))
            break;
        Mpickpt__Piece *p = t->pieces[0];
        p->packed = w->packed != 0;
        p->pack_offset = w->pack_offset;
        p->file_offset = w->file_offset;
        if (w->n_block) {
            if (!(p->block_crc32c = malloc(w->n_block * sizeof *p->block_crc32c))) {
                rc = ckpt__error(CKPT_ENOMEM, "out of memory recording tensor '%s'", w->name);
                break;
            }
            memcpy(p->block_crc32c, w->block_crc, w->n_block * sizeof *p->block_crc32c);
            p->n_block_crc32c = w->n_block;
            p->block_bytes = (uint32_t)CKPT__CRC_BLOCK;
        }
    }
    for (size_t i = 0; i < r->nfiles && rc == CKPT_OK; i++)
        rc = ckpt__fragment_add_file(f, r->files[i].name, r->files[i].bytes);
    return rc;
}
