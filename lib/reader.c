/*
 * The reader every restore uses: ckpt_reader_* (mpickpt/checkpoint.h), the single-process reader
 * of the CLI and the tools, and ckpt__reader_open_payload() for the collective restore
 * (mpi/restore.c: the chief reads and validates the index, every rank reads its pieces).
 *
 * Takes a checkpoint prefix (<dir>/<name>: its index <prefix>.index and the data files the index
 * lists in <dir>), or an index payload the chief read and broadcast. Guarantees: the index is
 * untrusted input, validated before use (lib/validate.c) unless the chief's check was agreed;
 * every data file is opened below the checkpoint's directory by descriptor (no links, FIFOs or
 * devices), each dataset only when it is stored the way the format writes it
 * (ckpt__h5_open_dataset) and its type and extent fit the piece; every byte returned was checked
 * against its CRC-32C (the piece's, or for a partial read the blocks' of format 2) before the call
 * returns CKPT_OK; a lie in the files is CKPT_ECORRUPT naming the tensor, the piece and the file,
 * never a crash.
 * Reads go by pread at the dataset's offset when its bytes are one extent of the file (the
 * saver's always are), else through H5Dread; the collective restore's reader goes straight to a
 * piece's recorded file offset when the index has one (ckpt__reader_open_payload). The last
 * dataset stays open (packed pieces share one). Every entry point that calls HDF5 holds the
 * library's HDF5 lock (h5io.h).
 *
 * Two files (lib/reader_internal.h between them): this one opens the reader (the index read or
 * taken as a payload, validated, the data files' sizes checked), answers what the index holds
 * (header, tensors, lookup by name, pieces) and frees it; lib/reader_read.c reads the pieces
 * (ckpt_reader_read, _verify, _check, ckpt__reader_piece_stream).
 */
#include "reader_internal.h"

#include "fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reader_free_impl(ckpt_reader *r);

static void fill_header(ckpt_reader *r)
{
    const Mpickpt__Header *h = r->idx->header;
    r->hdr.format_version = h->format_version;
    r->hdr.world_size = h->world_size;
    r->hdr.layout = (ckpt_layout)h->layout;
    r->hdr.save_counter = h->save_counter;
    r->hdr.epoch = h->epoch;
    r->hdr.step = h->step;
    r->hdr.end_of_epoch = h->end_of_epoch;
    r->hdr.timestamp = h->timestamp;
    r->hdr.producer = h->producer ? h->producer : "";
    r->hdr.little_endian = h->endianness == MPICKPT__ENDIANNESS__LITTLE;
}

/* A reader over `payload` (an index message): unpacked into the reader's arena (protobuf-c would
 * make about ten allocations per piece, and as many frees), validated with `validate`, and with
 * `check_files` every data file checked to exist with its recorded size. */
static int reader_from_payload(ckpt_reader **out, const char *prefix, const uint8_t *payload,
                               size_t plen, int validate, int check_files)
{
    *out = NULL;
    ckpt_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    r->ds = H5I_INVALID_HID;
    r->dirfd = -1;
    r->fetched_dirfd = -1;
    char base[4096];
    int rc;
    if ((rc = ckpt__path(r->index_path, sizeof r->index_path, "%s.index", prefix)) ||
        (rc = ckpt__split_path(r->dir, sizeof r->dir, base, sizeof base, prefix)) ||
        (rc = ckpt__ckptdir_open(&r->dirfd, NULL, r->dir, 0)))
        goto fail;
    if (!(r->arena = ckpt__arena_new())) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = ckpt__index_parse(&r->idx, payload, plen, r->index_path,
                                ckpt__arena_allocator(r->arena), validate)) != CKPT_OK)
        goto fail;
    if (!r->idx->header) { /* unvalidated (a non-chief restore): fill_header() needs it */
        rc = ckpt__error(CKPT_ECORRUPT, "%s: index has no header", r->index_path);
        goto fail;
    }
    size_t nf = r->idx->n_files ? r->idx->n_files : 1;
    r->files = malloc(nf * sizeof *r->files);
    r->fds = malloc(nf * sizeof *r->fds);
    r->fd_size = calloc(nf, sizeof *r->fd_size);
    if (!r->files || !r->fds || !r->fd_size) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < r->idx->n_files; i++) {
        r->files[i] = H5I_INVALID_HID;
        r->fds[i] = -1;
    }
    for (size_t i = 0; check_files && i < r->idx->n_files; i++) {
        char path[8400];
        uint64_t size = 0;
        const Mpickpt__DataFile *f = r->idx->files[i];
        if ((rc = ckpt__path(path, sizeof path, "%s/%s", r->dir, f->name)))
            goto fail;
        if ((rc = ckpt__stat_regular(&size, r->dirfd, f->name, r->dir)) != CKPT_OK) {
            rc = ckpt__error_wrap(CKPT_ECORRUPT, "checkpoint %s: data file %s", prefix,
                                  rc == CKPT_ENOTFOUND ? "missing" : "unusable");
            goto fail;
        }
        if (size != f->bytes) {
            rc = ckpt__error(CKPT_ECORRUPT,
                             "checkpoint %s: data file %s has %llu bytes, the index "
                             "recorded %llu (truncated or replaced)",
                             prefix, path, (unsigned long long)size, (unsigned long long)f->bytes);
            goto fail;
        }
    }
    fill_header(r);
    *out = r;
    return CKPT_OK;
fail:
    reader_free_impl(r);
    return rc;
}

/* Opens the index; with check_files, also checks that every data file exists with its size. */
static int reader_open(ckpt_reader **out, const char *prefix, int check_files)
{
    *out = NULL;
    char index_path[4200];
    int rc = ckpt__path(index_path, sizeof index_path, "%s.index", prefix);
    if (rc != CKPT_OK)
        return rc;
    uint8_t *buf;
    const uint8_t *payload;
    size_t plen;
    if ((rc = ckpt__index_read(&buf, &payload, &plen, index_path)) != CKPT_OK) {
        if (rc == CKPT_ENOTFOUND)
            ckpt__error_set_reason(ckpt__error(rc, "no checkpoint at %s (%s does not exist)",
                                               prefix, index_path),
                                   CKPT_REASON_NO_CHECKPOINT);
        return rc;
    }
    rc = reader_from_payload(out, prefix, payload, plen, 1, check_files);
    free(buf);
    return rc;
}

int ckpt__reader_open_payload(ckpt_reader **out, const char *prefix, const uint8_t *payload,
                              size_t plen, int check)
{
    int rc = reader_from_payload(out, prefix, payload, plen, check != 0,
                                 check == CKPT__READER_CHECK_ALL);
    if (rc == CKPT_OK)
        (*out)->by_offset = 1;
    return rc;
}

int ckpt_reader_open(ckpt_reader **out, const char *prefix)
{
    return reader_open(out, prefix, 1);
}

void ckpt__reader_set_fetched(ckpt_reader *r, int dirfd)
{
    ckpt__close(r->fetched_dirfd);
    r->fetched_dirfd = dirfd;
}

const Mpickpt__Index *ckpt__reader_index(const ckpt_reader *r)
{
    return r->idx;
}

int ckpt_reader_open_index(ckpt_reader **out, const char *prefix)
{
    return reader_open(out, prefix, 0);
}

const ckpt_header *ckpt_reader_header(const ckpt_reader *r)
{
    return &r->hdr;
}

size_t ckpt_reader_num_tensors(const ckpt_reader *r)
{
    return r->idx->n_tensors;
}

int ckpt_reader_tensor(ckpt_tensor_info *out, const ckpt_reader *r, size_t i)
{
    if (i >= r->idx->n_tensors)
        return ckpt__error(CKPT_EINVAL, "tensor index %zu out of range (%zu tensors)", i,
                           r->idx->n_tensors);
    const Mpickpt__Tensor *t = r->idx->tensors[i];
    out->name = t->name;
    out->dtype = (ckpt_dtype)t->dtype;
    out->kind = (ckpt_kind)t->kind;
    out->num_pieces = t->n_pieces;
    return ckpt_shape_init(&out->shape, (int)t->n_shape, t->shape); /* validated at open */
}

static int cmp_name_tensor(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(const Mpickpt__Tensor *const *)elem)->name);
}

int ckpt_reader_find(size_t *index, const ckpt_reader *r, const char *name)
{
    Mpickpt__Tensor **hit =
        bsearch(name, r->idx->tensors, r->idx->n_tensors, sizeof *r->idx->tensors, cmp_name_tensor);
    if (!hit)
        return ckpt__error_set_reason(
            ckpt__error(CKPT_ENOTFOUND, "no tensor '%s' in %s", name, r->index_path),
            CKPT_REASON_NO_TENSOR);
    *index = (size_t)(hit - r->idx->tensors);
    return CKPT_OK;
}

int ckpt_reader_piece(ckpt_piece_info *out, const ckpt_reader *r, size_t i, size_t j)
{
    if (i >= r->idx->n_tensors || j >= r->idx->tensors[i]->n_pieces)
        return ckpt__error(CKPT_EINVAL, "piece %zu of tensor %zu out of range", j, i);
    const Mpickpt__Tensor *t = r->idx->tensors[i];
    const Mpickpt__Piece *p = t->pieces[j];
    ckpt__piece_slice(&out->slice, p, (int)t->n_shape);
    ckpt__piece_dataset_slice(&out->dataset_slice, p, (int)t->n_shape);
    out->rank = p->rank;
    out->file = p->file;
    out->dataset = p->dataset;
    out->bytes = p->bytes;
    out->crc32c = p->crc32c;
    return CKPT_OK;
}

int ckpt_reader_piece_packing(int *packed, uint64_t *pack_offset, const ckpt_reader *r, size_t i,
                              size_t j)
{
    if (i >= r->idx->n_tensors || j >= r->idx->tensors[i]->n_pieces)
        return ckpt__error(CKPT_EINVAL, "no piece %zu of tensor %zu", j, i);
    const Mpickpt__Piece *p = r->idx->tensors[i]->pieces[j];
    *packed = p->packed;
    *pack_offset = p->pack_offset;
    return CKPT_OK;
}

static void reader_free_impl(ckpt_reader *r)
{
    if (!r)
        return;
    /* the dataset before its file: HDF5 keeps a file open while a dataset of it is */
    ckpt__reader_close_ds(r);
    if (r->files && r->idx)
        for (size_t i = 0; i < r->idx->n_files; i++)
            if (r->files[i] >= 0)
                H5Fclose(r->files[i]);
    if (r->fds && r->idx)
        for (size_t i = 0; i < r->idx->n_files; i++)
            ckpt__close(r->fds[i]);
    free(r->files);
    free(r->fds);
    free(r->fd_size);
    free(r->tmp);
    ckpt__arena_free(r->arena); /* the index */
    ckpt__close(r->dirfd);
    ckpt__close(r->fetched_dirfd);
    free(r);
}

/* A public entry point: its HDF5 calls under the library's HDF5 lock (h5io.h), as all. */
void ckpt_reader_free(ckpt_reader *r)
{
    ckpt__h5_lock();
    reader_free_impl(r);
    ckpt__h5_unlock();
}
