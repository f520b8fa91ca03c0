/*
 * The reader's reads (lib/reader.c opens it and answers what its index holds; the contract of
 * both is there, lib/reader_internal.h the state they share): a piece located (its data file
 * opened below the checkpoint's directory by descriptor, or its recorded file offset with the
 * collective restore's reader; its dataset opened only when stored the way the format writes it,
 * its type checked once per dtype, its box against the extent every time), then read whole
 * (read_piece: pread when it is one run of bytes of the file, else H5Dread) or only the rows
 * wanted (read_rows: the format-2 block checksums), every byte checked against its CRC-32C before
 * CKPT_OK. ckpt_reader_read, ckpt_reader_verify (every piece through HDF5, and the block
 * checksums against the bytes), ckpt_reader_check (every piece located, nothing read) and the
 * cooperative restore's chunked ckpt__reader_piece_stream. Every entry point holds the library's
 * HDF5 lock (h5io.h), the stream not while its callback runs.
 */
#include "reader_internal.h"

#include "fsutil.h"
#include "mpickpt/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ckpt__reader_close_ds(ckpt_reader *r)
{
    if (r->ds >= 0)
        H5Dclose(r->ds);
    r->ds = H5I_INVALID_HID;
    free(r->ds_name);
    r->ds_name = NULL;
}

/* Opens dataset `name` of file slot `slot` unless it is the one open already. Only a dataset
 * stored the way the format writes it opens (ckpt__h5_open_dataset: hard links, contiguous, in
 * the data file itself), so every read of it, pread or H5Dread, reads that file and no other. */
static int open_ds(ckpt_reader *r, size_t slot, const char *name)
{
    if (r->ds >= 0 && r->ds_slot == slot && strcmp(r->ds_name, name) == 0)
        return CKPT_OK;
    ckpt__reader_close_ds(r);
    hid_t d;
    int rc = ckpt__h5_open_dataset(&d, r->files[slot], name, r->idx->files[slot]->name);
    if (rc != CKPT_OK)
        return rc;
    hid_t space = H5Dget_space(d);
    int nd = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (nd < 0 || nd > CKPT_MAX_DIMS || H5Sget_simple_extent_dims(space, r->ds_dims, NULL) != nd) {
        if (space >= 0)
            H5Sclose(space);
        H5Dclose(d);
        return ckpt__h5_error(CKPT_ECORRUPT, "dataspace of dataset %s", name);
    }
    H5Sclose(space);
    r->ds_name = strdup(name);
    if (!r->ds_name) {
        H5Dclose(d);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    r->ds = d;
    r->ds_slot = slot;
    r->ds_nd = nd;
    r->ds_checked = -1;
    r->ds_raw = ckpt__h5_raw_address(r->files[slot], d, &r->ds_fd, &r->ds_addr, &r->ds_size);
    return CKPT_OK;
}

/* When box `sel` of a row-major array of extent `d` is one run of bytes (whole rows after its
 * first partial axis, single indices before it), sets *off to its first byte and returns 1. */
static int box_run(const hsize_t *d, const ckpt_slice *sel, size_t esize, uint64_t *off)
{
    int nd = sel->ndims, j = nd - 1;
    while (j > 0 && (hsize_t)sel->count[j] == d[j])
        j--;
    for (int i = 0; i < j; i++)
        if (sel->count[i] != 1)
            return 0;
    /* the extent comes from the data file: a product that overflows is no run of this file */
    uint64_t o = 0;
    for (int i = 0; i < nd; i++)
        if (__builtin_mul_overflow(o, (uint64_t)d[i], &o) ||
            __builtin_add_overflow(o, (uint64_t)sel->start[i], &o))
            return 0;
    return !__builtin_mul_overflow(o, (uint64_t)esize, off);
}

static size_t file_slot(const ckpt_reader *r, const char *name)
{
    for (size_t i = 0; i < r->idx->n_files; i++)
        if (strcmp(r->idx->files[i]->name, name) == 0)
            return i;
    return (size_t)-1; /* cannot happen: validated at open */
}

/* Where and how piece p of tensor t is read: its file and dataset open (r->ds) and checked. */
typedef struct piece_loc {
    char path[8400];  /* data file, for messages */
    char spec[256];   /* the piece's slice spec, for messages */
    ckpt_dtype dt;    /* what the dataset holds: the tensor's dtype, or uint8 for a pack */
    ckpt_slice sel;   /* the piece's box in the dataset (a byte range of a pack) */
    uint64_t off;     /* when raw: file offset of the piece's first byte */
    int raw;          /* the piece is one run of bytes at `off` that pread can reach */
    int fd;           /* ... in this descriptor */
} piece_loc;

/* The plain descriptor of file slot `slot` (opened below the checkpoint's directory, no links,
 * FIFOs or devices), for pieces whose offset the index records. */
static int slot_fd(ckpt_reader *r, size_t slot, const Mpickpt__Tensor *t, const char *path)
{
    if (r->fds[slot] >= 0)
        return CKPT_OK;
    int fd;
    const char *name = r->idx->files[slot]->name;
    int from = r->fetched_dirfd >= 0 && !ckpt__exists_at(r->dirfd, name) ? r->fetched_dirfd
                                                                         : r->dirfd;
    int rc = ckpt__file_open(&fd, NULL, from, name, O_RDONLY, r->dir);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s'", t->name);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = ckpt__errno(errno, "fstat", path);
        close(fd);
        return rc;
    }
    r->fds[slot] = fd;
    r->fd_size[slot] = (uint64_t)st.st_size;
    return CKPT_OK;
}

/* Where piece p of tensor t is: with `by_offset` and an offset recorded in the index, in its file at
 * that offset (no HDF5: the CRC-32C checks the bytes); otherwise through its HDF5 dataset, opened
 * and checked. */
static int locate_piece(ckpt_reader *r, const Mpickpt__Tensor *t, const Mpickpt__Piece *p,
                        piece_loc *loc, int by_offset)
{
    size_t slot = file_slot(r, p->file);
    ckpt_slice s;
    ckpt_shape shape;
    snprintf(loc->spec, sizeof loc->spec, "(whole)");
    int rc = ckpt__path(loc->path, sizeof loc->path, "%s/%s", r->dir, p->file);
    if (rc != CKPT_OK)
        return rc;
    ckpt_shape_init(&shape, (int)t->n_shape, t->shape);
    ckpt__piece_slice(&s, p, shape.ndims);
    ckpt__piece_dataset_slice(&loc->sel, p, shape.ndims);
    if (!ckpt_slice_is_full(&s, &shape))
        ckpt_slice_spec_format(loc->spec, sizeof loc->spec, &shape, &s);
    loc->dt = p->packed ? CKPT_UINT8 : (ckpt_dtype)t->dtype;
    if (by_offset && p->file_offset) {
        if ((rc = slot_fd(r, slot, t, loc->path)) != CKPT_OK)
            return rc;
        if (p->file_offset > r->fd_size[slot] || p->bytes > r->fd_size[slot] - p->file_offset)
            return ckpt__error(CKPT_ECORRUPT,
                               "tensor '%s' piece %s in %s: bytes %llu..%llu lie past the file's "
                               "end (%llu bytes)",
                               t->name, loc->spec, loc->path,
                               (unsigned long long)p->file_offset,
                               (unsigned long long)(p->file_offset + p->bytes),
                               (unsigned long long)r->fd_size[slot]);
        loc->raw = 1;
        loc->off = p->file_offset;
        loc->fd = r->fds[slot];
        return CKPT_OK;
    }
    if (r->files[slot] < 0) {
        /* By descriptor, not by name: a link, FIFO or device in place of the data file is refused
         * before HDF5 sees it, and HDF5 opens exactly the file checked (/proc/self/fd). */
        int fd;
        char h5path[64 + sizeof loc->path];
        if ((rc = ckpt__file_open(&fd, NULL, r->dirfd, p->file, O_RDONLY, r->dir)) != CKPT_OK)
            return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s'", t->name);
        if ((rc = ckpt__fd_path(h5path, sizeof h5path, fd, loc->path)) != CKPT_OK) {
            close(fd);
            return rc;
        }
        ckpt__h5_init();
        r->files[slot] = H5Fopen(h5path, H5F_ACC_RDONLY, H5P_DEFAULT);
        close(fd); /* HDF5 holds its own descriptor of the same file */
        if (r->files[slot] < 0)
            return ckpt__h5_error(CKPT_ECORRUPT, "tensor '%s': cannot open data file %s", t->name,
                                  loc->path);
    }
    if ((rc = open_ds(r, slot, p->dataset)) != CKPT_OK)
        return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s' piece %s in %s", t->name, loc->spec,
                                loc->path);
    /* A packed piece is a byte range of a one-dimensional uint8 dataset. */
    if (p->packed) {
        loc->sel.ndims = 1;
        loc->sel.start[0] = (int64_t)p->pack_offset;
        loc->sel.count[0] = (int64_t)p->bytes;
    }
    /* The open dataset's type is checked once per dtype (thousands of packed pieces share one
     * dataset); the box is checked against its extent every time. */
    if (r->ds_checked != (int)loc->dt) {
        rc = ckpt__h5_check(r->ds, loc->dt, &loc->sel);
        r->ds_checked = rc == CKPT_OK ? (int)loc->dt : -1;
    } else {
        rc = ckpt__h5_check_box(r->ds_nd, r->ds_dims, &loc->sel);
    }
    if (rc != CKPT_OK)
        return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s' piece %s in %s", t->name, loc->spec,
                                loc->path);
    uint64_t off;
    loc->raw = r->ds_raw && box_run(r->ds_dims, &loc->sel, ckpt_dtype_size(loc->dt), &off) &&
               off <= r->ds_size && p->bytes <= r->ds_size - off;
    loc->off = loc->raw ? r->ds_addr + off : 0;
    loc->fd = r->ds_fd;
    return CKPT_OK;
}

static int crc_mismatch(const Mpickpt__Tensor *t, const Mpickpt__Piece *p, const piece_loc *loc,
                        const char *what, uint32_t want, uint32_t got)
{
    return ckpt__error(CKPT_ECORRUPT,
                       "tensor '%s' piece %s (rank %d) in %s: checksum mismatch%s (stored %08x, "
                       "computed %08x)",
                       t->name, loc->spec, p->rank, loc->path, what, want, got);
}

/* Reads piece `p` of tensor `t` whole into `buf` (p->bytes long) and checks its CRC-32C. A piece
 * that is one run of bytes in its file (always, for the saver's files) is read with pread and
 * checksummed chunk by chunk while the chunk is in cache; anything else goes through H5Dread. */
static int read_piece(ckpt_reader *r, const Mpickpt__Tensor *t, const Mpickpt__Piece *p, void *buf,
                      int by_offset)
{
    piece_loc loc;
    int rc = locate_piece(r, t, p, &loc, by_offset);
    if (rc != CKPT_OK)
        return rc;
    uint32_t crc = 0;
    if (p->bytes > 0) {
        if (loc.raw) {
            rc = ckpt__pread_crc(loc.fd, loc.off, buf, (size_t)p->bytes, &crc);
        } else {
            rc = ckpt__h5_read(r->ds, loc.dt, &loc.sel, buf, H5P_DEFAULT);
            crc = rc == CKPT_OK ? ckpt_crc32c(buf, (size_t)p->bytes) : 0;
        }
    }
    if (rc != CKPT_OK)
        return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s' piece %s in %s", t->name, loc.spec,
                                loc.path);
    if (crc != p->crc32c)
        return crc_mismatch(t, p, &loc, "", p->crc32c, crc);
    return CKPT_OK;
}

static int grow_tmp(ckpt_reader *r, uint64_t n, const char *name)
{
    if (n <= r->tmp_size)
        return CKPT_OK;
    void *nt = realloc(r->tmp, (size_t)n);
    if (!nt)
        return ckpt__error(CKPT_ENOMEM, "tensor '%s': cannot allocate %llu bytes", name,
                           (unsigned long long)n);
    r->tmp = nt;
    r->tmp_size = (size_t)n;
    return CKPT_OK;
}

int ckpt__reader_piece_stream(ckpt_reader *r, size_t ti, size_t j, void *bufs[2], uint64_t chunk,
                              void (*cb)(void *arg, const void *bytes, uint64_t off, uint64_t len),
                              void *arg, uint64_t *delivered)
{
    *delivered = 0;
    if (ti >= r->idx->n_tensors || j >= r->idx->tensors[ti]->n_pieces || chunk == 0)
        return ckpt__error(CKPT_EINVAL, "ckpt__reader_piece_stream: no piece %zu of tensor %zu",
                           j, ti);
    const Mpickpt__Tensor *t = r->idx->tensors[ti];
    const Mpickpt__Piece *p = t->pieces[j];
    piece_loc loc;
    ckpt__h5_lock(); /* not held while the callback runs (it sends over MPI) */
    int rc = locate_piece(r, t, p, &loc, r->by_offset);
    ckpt__h5_unlock();
    if (rc != CKPT_OK)
        return rc;
    uint32_t crc = 0;
    if (loc.raw) { /* pread chunk by chunk, each handed out while the next is read */
        for (uint64_t off = 0; off < p->bytes; off += chunk) {
            uint64_t n = p->bytes - off < chunk ? p->bytes - off : chunk;
            void *buf = bufs[*delivered % 2];
            if ((rc = ckpt__pread_crc(loc.fd, loc.off + off, buf, (size_t)n, &crc)) != CKPT_OK)
                return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s' piece %s in %s", t->name,
                                        loc.spec, loc.path);
            cb(arg, buf, off, n);
            (*delivered)++;
        }
        if (crc != p->crc32c)
            return crc_mismatch(t, p, &loc, "", p->crc32c, crc);
        return CKPT_OK;
    }
    /* through HDF5: the piece whole, checked, then handed out in chunks */
    ckpt__h5_lock();
    if ((rc = grow_tmp(r, p->bytes, t->name)) == CKPT_OK)
        rc = read_piece(r, t, p, r->tmp, r->by_offset);
    ckpt__h5_unlock();
    if (rc != CKPT_OK)
        return rc;
    for (uint64_t off = 0; off < p->bytes; off += chunk) {
        uint64_t n = p->bytes - off < chunk ? p->bytes - off : chunk;
        cb(arg, (const uint8_t *)r->tmp + off, off, n);
        (*delivered)++;
    }
    return CKPT_OK;
}

/*
 * Copies `region` (inside piece p's box `ps` and the caller's box `want`) into `out`, reading only
 * the rows of the piece that hold it: the checksum blocks covering them are read and each is
 * checked against its block CRC-32C. When the region is one run of bytes in both the piece and
 * `out` (whole rows of both), those bytes are read straight into `out` and only the parts of the
 * first and last blocks outside it go through the scratch buffer; otherwise the blocks are read
 * into scratch and the region copied out. Returns 1, having done nothing, when this is not
 * possible (no block checksums, not one run of bytes in a raw file) or would read the whole piece.
 */
static int read_rows(ckpt_reader *r, const Mpickpt__Tensor *t, const Mpickpt__Piece *p,
                     const ckpt_slice *ps, const ckpt_slice *region, const ckpt_slice *want,
                     void *out, size_t esize)
{
    uint64_t bsize = p->block_bytes;
    if (p->n_block_crc32c == 0 || bsize == 0 || ps->ndims == 0 || ps->count[0] <= 0)
        return 1;
    uint64_t row = p->bytes / (uint64_t)ps->count[0];
    uint64_t lo = (uint64_t)(region->start[0] - ps->start[0]) * row;
    uint64_t hi = lo + (uint64_t)region->count[0] * row;
    uint64_t blo = lo / bsize * bsize;
    uint64_t bhi = (hi + bsize - 1) / bsize * bsize;
    if (bhi > p->bytes)
        bhi = p->bytes;
    if (blo == 0 && bhi == p->bytes)
        return 1;
    piece_loc loc;
    int rc = locate_piece(r, t, p, &loc, r->by_offset);
    if (rc != CKPT_OK)
        return rc;
    if (!loc.raw)
        return 1;
    /* Straight into `out` when the region is whole rows of the piece and one run in `out`. */
    uint8_t *direct = NULL;
    int whole_rows = 1;
    for (int d = 1; d < ps->ndims; d++)
        whole_rows &= region->count[d] == ps->count[d];
    ckpt_slice rel = *region;
    hsize_t wdims[CKPT_MAX_DIMS];
    for (int d = 0; d < want->ndims; d++) {
        rel.start[d] -= want->start[d];
        wdims[d] = (hsize_t)want->count[d];
    }
    uint64_t out_off;
    if (whole_rows && box_run(wdims, &rel, esize, &out_off))
        direct = (uint8_t *)out + out_off;
    /* scratch: every block (copy path) or, one at a time, the parts of the end blocks outside
     * [lo, hi), needed only for their checksums */
    if ((rc = grow_tmp(r, direct ? bsize : bhi - blo, t->name)) != CKPT_OK)
        return rc;
    uint8_t *scratch = r->tmp;
    for (uint64_t b = blo; b < bhi; b += bsize) {
        uint64_t e = bhi - b < bsize ? bhi : b + bsize;
        uint32_t crc = 0;
        if (direct) { /* [b, lo) to scratch, [max(b,lo), min(e,hi)) to out, [hi, e) to scratch */
            uint64_t a = b > lo ? b : lo, z = e < hi ? e : hi;
            if (b < a)
                rc = ckpt__pread_crc(loc.fd, loc.off + b, scratch, (size_t)(a - b), &crc);
            if (rc == CKPT_OK)
                rc = ckpt__pread_crc(loc.fd, loc.off + a, direct + (a - lo), (size_t)(z - a),
                                     &crc);
            if (rc == CKPT_OK && z < e)
                rc = ckpt__pread_crc(loc.fd, loc.off + z, scratch, (size_t)(e - z), &crc);
        } else {
            rc = ckpt__pread_crc(loc.fd, loc.off + b, scratch + (b - blo), (size_t)(e - b),
                                 &crc);
        }
        if (rc != CKPT_OK)
            return ckpt__error_wrap(CKPT_ECORRUPT, "tensor '%s' piece %s in %s", t->name, loc.spec,
                                    loc.path);
        uint32_t want_crc = p->block_crc32c[b / bsize];
        if (crc != want_crc) {
            char what[64];
            snprintf(what, sizeof what, " in block %llu", (unsigned long long)(b / bsize));
            return crc_mismatch(t, p, &loc, what, want_crc, crc);
        }
    }
    if (direct)
        return CKPT_OK;
    ckpt_slice rows = *ps; /* the piece's rows that scratch holds, from byte lo - blo on */
    rows.start[0] = region->start[0];
    rows.count[0] = region->count[0];
    return ckpt_slice_copy(out, want, scratch + (lo - blo), &rows, region, esize);
}

static int reader_read_impl(ckpt_reader *r, const char *name, ckpt_dtype dtype,
                            const ckpt_slice *slice, void *out, size_t out_size)
{
    size_t i;
    int rc = ckpt_reader_find(&i, r, name);
    if (rc != CKPT_OK)
        return rc;
    const Mpickpt__Tensor *t = r->idx->tensors[i];
    if ((ckpt_dtype)t->dtype != dtype)
        return ckpt__error(CKPT_EMISMATCH, "tensor '%s' is %s in %s, the caller asked for %s", name,
                           ckpt_dtype_name((ckpt_dtype)t->dtype), r->index_path,
                           ckpt_dtype_name(dtype));
    ckpt_shape shape;
    ckpt_slice want;
    ckpt_shape_init(&shape, (int)t->n_shape, t->shape);
    if (slice) {
        if ((rc = ckpt_slice_validate(slice, &shape)) != CKPT_OK)
            return ckpt__error_wrap(CKPT_EINVAL, "tensor '%s'", name);
        want = *slice;
    } else {
        ckpt_slice_full(&want, &shape);
    }
    int64_t n;
    size_t esize = ckpt_dtype_size(dtype);
    uint64_t want_bytes;
    if (ckpt_slice_num_elements(&n, &want) != CKPT_OK ||
        __builtin_mul_overflow((uint64_t)n, (uint64_t)esize, &want_bytes))
        return ckpt__error(CKPT_EINVAL, "tensor '%s': the slice's size in bytes overflows", name);
    if (want_bytes != out_size)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': the slice holds %llu bytes, buffer has %zu",
                           name, (unsigned long long)want_bytes, out_size);

    for (size_t j = 0; j < t->n_pieces && rc == CKPT_OK; j++) {
        const Mpickpt__Piece *p = t->pieces[j];
        ckpt_slice ps, region;
        ckpt__piece_slice(&ps, p, shape.ndims);
        if (ckpt_slice_intersect(&region, &ps, &want) != 1)
            continue;
        if (ckpt_slice_equal(&ps, &want)) { /* the piece is exactly what was asked: no copy */
            rc = read_piece(r, t, p, out, r->by_offset);
            continue;
        }
        if ((rc = read_rows(r, t, p, &ps, &region, &want, out, esize)) != 1)
            continue; /* read only the rows wanted, or failed */
        if ((rc = grow_tmp(r, p->bytes, name)) != CKPT_OK)
            break;
        if ((rc = read_piece(r, t, p, r->tmp, r->by_offset)) == CKPT_OK)
            rc = ckpt_slice_copy(out, &want, r->tmp, &ps, &region, esize);
    }
    return rc;
}

static int reader_verify_impl(ckpt_reader *r, ckpt_verify_cb cb, void *payload,
                              ckpt__verify_progress_cb progress, void *progress_payload)
{
    int bad = 0;
    void *buf = NULL;
    size_t cap = 0;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; progress && i < r->idx->n_tensors; i++)
        for (size_t j = 0; j < r->idx->tensors[i]->n_pieces; j++)
            total += r->idx->tensors[i]->pieces[j]->bytes;
    for (size_t i = 0; i < r->idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = r->idx->tensors[i];
        for (size_t j = 0; j < t->n_pieces; j++) {
            const Mpickpt__Piece *p = t->pieces[j];
            int rc = CKPT_OK;
            if (p->bytes > cap) {
                void *nb = realloc(buf, (size_t)p->bytes);
                if (!nb) {
                    free(buf);
                    return ckpt__error(CKPT_ENOMEM, "cannot allocate %llu bytes",
                                       (unsigned long long)p->bytes);
                }
                buf = nb;
                cap = (size_t)p->bytes;
            }
            rc = read_piece(r, t, p, buf, 0); /* through HDF5: what any HDF5 reader sees */
            /* The block checksums that partial reads rely on must describe the same bytes. */
            for (size_t b = 0; rc == CKPT_OK && b < p->n_block_crc32c; b++) {
                uint64_t off = (uint64_t)b * p->block_bytes;
                size_t n = (size_t)(p->bytes - off < p->block_bytes ? p->bytes - off
                                                                    : p->block_bytes);
                uint32_t crc = ckpt_crc32c((uint8_t *)buf + off, n);
                if (crc != p->block_crc32c[b])
                    rc = ckpt__error(CKPT_ECORRUPT,
                                     "tensor '%s' piece %zu (rank %d) in %s: block %zu checksum "
                                     "mismatch (stored %08x, computed %08x)",
                                     t->name, j, p->rank, p->file, b, p->block_crc32c[b], crc);
            }
            if (rc != CKPT_OK) {
                bad++;
                const ckpt_error *e = ckpt_error_last();
                if (cb && cb(t->name, j, p->file, rc, e ? e->message : "", payload) != 0)
                    goto out;
            }
            done += p->bytes;
            if (progress)
                progress(done, total, progress_payload);
        }
    }
out:
    free(buf);
    if (bad)
        return ckpt__error(CKPT_ECORRUPT, "%s: %d bad piece(s)", r->index_path, bad);
    return CKPT_OK;
}

/* Every piece located without reading its bytes: its data file opened, its dataset opened and
 * checked (how it is stored, its type, its extent), as a read would before reading. */
static int reader_check_impl(ckpt_reader *r, ckpt_verify_cb cb, void *payload)
{
    int bad = 0;
    for (size_t i = 0; i < r->idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = r->idx->tensors[i];
        for (size_t j = 0; j < t->n_pieces; j++) {
            piece_loc loc;
            int rc = locate_piece(r, t, t->pieces[j], &loc, 0); /* through HDF5: all checks */
            if (rc != CKPT_OK) {
                bad++;
                const ckpt_error *e = ckpt_error_last();
                if (cb && cb(t->name, j, t->pieces[j]->file, rc, e ? e->message : "", payload))
                    goto out;
            }
        }
    }
out:
    if (bad)
        return ckpt__error(CKPT_ECORRUPT, "%s: %d bad piece(s)", r->index_path, bad);
    return CKPT_OK;
}

/* ==== public entry points: every HDF5 call of the library runs under one lock (h5io.h) ===== */

int ckpt_reader_read(ckpt_reader *r, const char *name, ckpt_dtype dtype, const ckpt_slice *slice,
                     void *out, size_t out_size)
{
    ckpt__h5_lock();
    int rc = reader_read_impl(r, name, dtype, slice, out, out_size);
    ckpt__h5_unlock();
    return rc;
}

int ckpt_reader_verify(ckpt_reader *r, ckpt_verify_cb cb, void *payload)
{
    ckpt__h5_lock();
    int rc = reader_verify_impl(r, cb, payload, NULL, NULL);
    ckpt__h5_unlock();
    return rc;
}

int ckpt__reader_verify_progress(ckpt_reader *r, ckpt_verify_cb cb, void *payload,
                                 ckpt__verify_progress_cb progress, void *progress_payload)
{
    ckpt__h5_lock();
    int rc = reader_verify_impl(r, cb, payload, progress, progress_payload);
    ckpt__h5_unlock();
    return rc;
}

int ckpt_reader_check(ckpt_reader *r, ckpt_verify_cb cb, void *payload)
{
    ckpt__h5_lock();
    int rc = reader_check_impl(r, cb, payload);
    ckpt__h5_unlock();
    return rc;
}
