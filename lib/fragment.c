/*
 * A writer's index fragment, built in memory: the tensors and data files one rank (or the
 * single-process writer) wrote, in the message the chief merges (ckpt__index_merge()).
 *
 * Takes a tensor's description, the piece written (slice, data file, dataset path, dataset
 * offset) and its bytes or their CRC-32C. Guarantees: every string and array is copied (the
 * caller's may go away); a piece larger than CKPT__CRC_BLOCK carries the CRC-32C of every block
 * (format 2) when added with ckpt__fragment_add_data(); on an error the fragment is unchanged.
 * Nothing is validated here: the merge validates the whole. Free with ckpt__fragment_free_built(),
 * never with protobuf-c's free_unpacked.
 *
 * Called by the saver (mpi/saver.c), the single-process writer (lib/checkpoint.c),
 * mpickpt-merge-bench and the tests.
 */
#include "fragment.h"

#include "crc32c_internal.h"
#include "index.h"
#include "internal.h"
#include "mpickpt/crc32c.h"

#include <stdlib.h>
#include <string.h>

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int64_t *dup64(const int64_t *v, int n)
{
    int64_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (d && n)
        memcpy(d, v, (size_t)n * sizeof *d);
    return d;
}

static void free_built_piece(Mpickpt__Piece *p)
{
    if (!p)
        return;
    free(p->start);
    free(p->count);
    free(p->dataset_start);
    free(p->file);
    free(p->dataset);
    free(p->block_crc32c);
    free(p);
}

static void free_built_tensor(Mpickpt__Tensor *t)
{
    if (!t)
        return;
    for (size_t j = 0; j < t->n_pieces; j++)
        free_built_piece(t->pieces[j]);
    free(t->pieces);
    free(t->name);
    free(t->shape);
    free(t);
}

int ckpt__fragment_add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dtype,
                       const ckpt_shape *shape, ckpt_kind kind, const ckpt_slice *slice,
                       const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                       uint64_t bytes, uint32_t crc)
{
    if (f->n_tensors == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        Mpickpt__Tensor **nt = realloc(f->tensors, ncap * sizeof *nt);
        if (!nt)
            return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
        f->tensors = nt;
        *cap = ncap;
    }
    Mpickpt__Tensor *t = calloc(1, sizeof *t);
    Mpickpt__Piece *p = calloc(1, sizeof *p);
    Mpickpt__Piece **pp = malloc(sizeof *pp);
    if (!t || !p || !pp)
        goto nomem;
    mpickpt__tensor__init(t);
    mpickpt__piece__init(p);
    t->pieces = pp;
    t->pieces[0] = p;
    t->n_pieces = 1;
    t->name = dupstr(name);
    t->dtype = (Mpickpt__DType)dtype;
    t->kind = (Mpickpt__Kind)kind;
    t->n_shape = (size_t)shape->ndims;
    t->shape = dup64(shape->dims, shape->ndims);
    p->n_start = p->n_count = p->n_dataset_start = (size_t)slice->ndims;
    p->start = dup64(slice->start, slice->ndims);
    p->count = dup64(slice->count, slice->ndims);
    p->dataset_start = dup64(dataset_slice->start, slice->ndims);
    p->file = dupstr(file);
    p->dataset = dupstr(dataset);
    p->bytes = bytes;
    p->crc32c = crc;
    p->rank = f->rank;
    if (!t->name || !t->shape || !p->start || !p->count || !p->dataset_start || !p->file ||
        !p->dataset) {
        free_built_tensor(t);
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    }
    f->tensors[f->n_tensors++] = t;
    return CKPT_OK;
nomem:
    free(t);
    free(p);
    free(pp);
    return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
}

int ckpt__fragment_add_data(Mpickpt__Fragment *f, size_t *cap, const char *name,
                            ckpt_dtype dtype, const ckpt_shape *shape, ckpt_kind kind,
                            const ckpt_slice *slice, const char *file, const char *dataset,
                            const ckpt_slice *dataset_slice, const void *data, size_t len)
{
    size_t nb = len > CKPT__CRC_BLOCK ? (len + CKPT__CRC_BLOCK - 1) / CKPT__CRC_BLOCK : 0;
    uint32_t *blocks = nb ? malloc(nb * sizeof *blocks) : NULL;
    if (nb && !blocks)
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    uint32_t crc = nb ? ckpt__crc32c_blocks(data, len, CKPT__CRC_BLOCK, blocks)
                      : ckpt_crc32c(data, len);
    int rc = ckpt__fragment_add(f, cap, name, dtype, shape, kind, slice, file, dataset,
                                dataset_slice, (uint64_t)len, crc);
    if (rc != CKPT_OK) {
        free(blocks);
        return rc;
    }
    Mpickpt__Piece *p = f->tensors[f->n_tensors - 1]->pieces[0];
    p->block_bytes = nb ? (uint32_t)CKPT__CRC_BLOCK : 0;
    p->n_block_crc32c = nb;
    p->block_crc32c = blocks;
    return CKPT_OK;
}

int ckpt__fragment_add_file(Mpickpt__Fragment *f, const char *name, uint64_t bytes)
{
    Mpickpt__DataFile **nf = realloc(f->files, (f->n_files + 1) * sizeof *nf);
    if (!nf)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    f->files = nf;
    Mpickpt__DataFile *d = malloc(sizeof *d);
    char *n = dupstr(name);
    if (!d || !n) {
        free(d);
        free(n);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    mpickpt__data_file__init(d);
    d->name = n;
    d->bytes = bytes;
    f->files[f->n_files++] = d;
    return CKPT_OK;
}

void ckpt__fragment_free_built(Mpickpt__Fragment *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free_built_tensor(f->tensors[i]);
    for (size_t i = 0; i < f->n_files; i++) {
        free(f->files[i]->name);
        free(f->files[i]);
    }
    free(f->tensors);
    free(f->files);
    mpickpt__fragment__init(f);
}
