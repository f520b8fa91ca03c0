/*
 * A writer's index fragment, built in memory: the tensors and data files one rank (or the
 * single-process writer) wrote, in the message the chief merges (ckpt__index_merge()).
 *
 * Takes a tensor's description, the piece written (slice, data file, dataset path, dataset
 * offset) and their CRC-32C. Guarantees: every string and array is copied (the caller's may go
 * away); on an error of ckpt__fragment_add() the fragment is unchanged (lib/record.c, which
 * records block checksums, builds its fragments with ckpt__fragment_tensor/_piece).
 * Nothing is validated here: the merge validates the whole. Free with ckpt__fragment_free_built(),
 * never with protobuf-c's free_unpacked.
 *
 * Called by lib/record.c (what the saver and the single-process writer wrote), lib/plan.c (the
 * plan's fragment), the shared writer's blob list (mpi/save_shared.c), mpickpt-merge-bench and
 * the tests.
 */
#include "fragment.h"

#include "index.h"
#include "internal.h"
#include "mpickpt/crc32c.h"

#include <stdlib.h>
#include <string.h>

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

int ckpt__fragment_tensor(Mpickpt__Tensor **out, Mpickpt__Fragment *f, size_t *cap,
                          const char *name, ckpt_dtype dtype, const ckpt_shape *shape,
                          ckpt_kind kind, size_t npieces)
{
    *out = NULL;
    if (f->n_tensors == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        Mpickpt__Tensor **nt = realloc(f->tensors, ncap * sizeof *nt);
        if (!nt)
            return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
        f->tensors = nt;
        *cap = ncap;
    }
    Mpickpt__Tensor *t = calloc(1, sizeof *t);
    if (!t)
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    mpickpt__tensor__init(t);
    t->name = strdup(name);
    t->dtype = (Mpickpt__DType)dtype;
    t->kind = (Mpickpt__Kind)kind;
    t->n_shape = (size_t)shape->ndims;
    t->shape = dup64(shape->dims, shape->ndims);
    t->pieces = calloc(npieces ? npieces : 1, sizeof *t->pieces);
    int ok = t->name && t->shape && t->pieces;
    for (size_t i = 0; ok && i < npieces; i++) {
        if (!(t->pieces[i] = malloc(sizeof **t->pieces))) {
            ok = 0;
            break;
        }
        mpickpt__piece__init(t->pieces[i]);
        t->n_pieces = i + 1;
    }
    if (!ok) {
        free_built_tensor(t);
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    }
    f->tensors[f->n_tensors++] = t;
    *out = t;
    return CKPT_OK;
}

int ckpt__fragment_piece(Mpickpt__Tensor *t, size_t i, int rank, const ckpt_slice *slice,
                         const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                         uint64_t bytes, uint32_t crc)
{
    Mpickpt__Piece *p = t->pieces[i];
    p->n_start = p->n_count = p->n_dataset_start = (size_t)slice->ndims;
    p->start = dup64(slice->start, slice->ndims);
    p->count = dup64(slice->count, slice->ndims);
    p->dataset_start = dup64(dataset_slice->start, slice->ndims);
    p->file = strdup(file);
    p->dataset = strdup(dataset);
    p->bytes = bytes;
    p->crc32c = crc;
    p->rank = rank;
    if (!p->start || !p->count || !p->dataset_start || !p->file || !p->dataset)
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", t->name);
    return CKPT_OK;
}

int ckpt__fragment_add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dtype,
                       const ckpt_shape *shape, ckpt_kind kind, const ckpt_slice *slice,
                       const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                       uint64_t bytes, uint32_t crc)
{
    Mpickpt__Tensor *t;
    int rc = ckpt__fragment_tensor(&t, f, cap, name, dtype, shape, kind, 1);
    if (rc == CKPT_OK &&
        (rc = ckpt__fragment_piece(t, 0, f->rank, slice, file, dataset, dataset_slice, bytes,
                                   crc)) != CKPT_OK)
        free_built_tensor(f->tensors[--f->n_tensors]); /* the fragment stays as it was */
    return rc;
}

int ckpt__fragment_add_file(Mpickpt__Fragment *f, const char *name, uint64_t bytes)
{
    Mpickpt__DataFile **nf = realloc(f->files, (f->n_files + 1) * sizeof *nf);
    if (!nf)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    f->files = nf;
    Mpickpt__DataFile *d = malloc(sizeof *d);
    char *n = strdup(name);
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
