/* Single-process writer of complete checkpoints (ckpt_writer_*). The MPI saver writes the same
 * format with several ranks; lib/reader.c reads what either wrote. */
#include "mpickpt/checkpoint.h"

#include "fsutil.h"
#include "h5io.h"
#include "commit.h"
#include "index.h"
#include "paths.h"
#include "record.h"
#include "shard.h"
#include "mpickpt/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void writer_free_impl(ckpt_writer *w);

/* ==== writer ================================================================================= */

struct ckpt_writer {
    ckpt__save_names n; /* rank 0 of 1 (lib/paths.h): <base>_temp holds the data file in flight */
    int dirfd, tempfd, datafd;
    int padfd;         /* room for HDF5's metadata flush (ckpt__pad_create), released at commit */
    uint64_t pad_size;
    int failed;        /* a write into the file failed: it is abandoned, never flushed to disk */
    ckpt_writer_options opts;
    hid_t file;
    ckpt__record rec;  /* what was written (lib/record.h) */
    int committed;
};

static int writer_open_impl(ckpt_writer **out, const char *prefix, const ckpt_writer_options *opts)
{
    *out = NULL;
    if (!prefix || !*prefix)
        return ckpt__error(CKPT_EINVAL, "checkpoint prefix is empty");
    if (opts && opts->version != CKPT_WRITER_OPTIONS_VERSION)
        return ckpt__error(CKPT_EINVAL, "ckpt_writer_options version %u, expected %d",
                           opts->version, CKPT_WRITER_OPTIONS_VERSION);
    if (opts && (opts->save_counter < 0 || opts->save_counter > CKPT__COUNTER_MAX))
        return ckpt__error(CKPT_EINVAL, "ckpt_writer_options.save_counter %lld is outside 0..%lld",
                           (long long)opts->save_counter, (long long)CKPT__COUNTER_MAX);
    ckpt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    ckpt_writer_options defaults = CKPT_WRITER_OPTIONS_INIT;
    w->opts = opts ? *opts : defaults;
    w->file = H5I_INVALID_HID;
    w->dirfd = w->tempfd = w->datafd = w->padfd = -1;
    ckpt__record_init(&w->rec);
    char h5path[4800];
    int rc;
    /* The checkpoint's names, the in-flight directory's unique to this writer (a random save id:
     * another writer of the same prefix never shares it; anything under it is refused,
     * ckpt__temp_fresh). The data file is created by us (O_EXCL) and reached by HDF5 through its
     * descriptor. */
    if ((rc = ckpt__save_names_init(&w->n, prefix, 0, 1, 0, ckpt__random_u64())) ||
        (rc = ckpt__ckptdir_open(&w->dirfd, NULL, w->n.dir, 1)) ||
        (rc = ckpt__temp_fresh(&w->n, w->dirfd, &w->tempfd, w->opts.overwrite)) ||
        (rc = ckpt__file_create(&w->datafd, w->tempfd, w->n.data_name, O_RDWR,
                                w->n.chief_temp)) ||
        (rc = ckpt__pad_create(&w->padfd, w->tempfd, w->n.pad_name,
                               w->pad_size = (uint64_t)256 << 10, w->n.chief_temp)) ||
        (rc = ckpt__fd_path(h5path, sizeof h5path, w->datafd, w->n.my_file)))
        goto fail;
    ckpt__h5_init();
    w->file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "create data file %s", w->n.my_file);
        goto fail;
    }
    *out = w;
    return CKPT_OK;
fail:
    writer_free_impl(w);
    return rc;
}

static int writer_add_impl(ckpt_writer *w, const char *name, ckpt_dtype dtype,
                           const ckpt_shape *shape, const ckpt_slice *slice, const void *data)
{
    if (!w || w->file < 0 || w->committed)
        return ckpt__error(CKPT_EINVAL, "writer is closed");
    if (!name || !*name || !ckpt__utf8_valid(name, strlen(name))) {
        char esc[256];
        return ckpt__error(CKPT_EINVAL, "tensor name '%s' is empty or not valid UTF-8",
                           name ? ckpt__escape_bytes(esc, sizeof esc, name, strlen(name)) : "");
    }
    if (!ckpt_dtype_valid(dtype))
        return ckpt__error(CKPT_EINVAL, "tensor '%s': invalid dtype %d", name, (int)dtype);
    ckpt_slice full, zero;
    int64_t n, total;
    int rc;
    if ((rc = ckpt_shape_num_elements(&total, shape)) != CKPT_OK)
        return ckpt__error_wrap(rc, "tensor '%s'", name ? name : "");
    ckpt_slice_full(&full, shape);
    if (!slice)
        slice = &full;
    if ((rc = ckpt_slice_validate(slice, shape)) != CKPT_OK)
        return ckpt__error_wrap(rc, "tensor '%s'", name ? name : "");
    ckpt_slice_num_elements(&n, slice);
    size_t bytes;
    if (ckpt__mul_size(&bytes, (size_t)n, ckpt_dtype_size(dtype)) != 0)
        return ckpt__error(CKPT_EINVAL, "tensor '%s' is too large", name);
    if (n > 0 && !data)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': data is NULL", name);

    int is_full = ckpt_slice_is_full(slice, shape);
    char path[16384];
    /* room for this dataset's share of the metadata flush at commit, taken before HDF5 writes */
    if ((rc = ckpt__pad_grow(w->padfd, w->pad_size + 4096 + 3 * (uint64_t)strlen(name),
                             w->n.chief_temp)) != CKPT_OK)
        return rc;
    w->pad_size += 4096 + 3 * (uint64_t)strlen(name);
    if ((rc = ckpt__h5_dataset_path(path, sizeof path, name, is_full ? NULL : slice)) != CKPT_OK)
        return rc;
    if (H5Lexists(w->file, path, H5P_DEFAULT) > 0) {
        char spec[256] = "(whole)";
        if (!is_full)
            ckpt_slice_spec_format(spec, sizeof spec, shape, slice);
        return ckpt__error(CKPT_EINVAL, "tensor '%s' slice %s added twice", name, spec);
    }
    hid_t dset;
    if ((rc = ckpt__h5_create_dataset(&dset, w->file, path, name, dtype, shape, slice)) != CKPT_OK)
        return rc;
    zero = *slice;
    for (int d = 0; d < zero.ndims; d++)
        zero.start[d] = 0;
    errno = 0;
    rc = ckpt__h5_write(dset, dtype, &zero, data, H5P_DEFAULT);
    uint64_t file_offset = bytes ? ckpt__h5_offset(dset) : 0;
    H5Dclose(dset);
    if (rc != CKPT_OK) {
        w->failed = 1; /* the file is abandoned: commit refuses it, free discards it */
        return ckpt__error_wrap(rc, "tensor '%s' in %s", name, w->n.my_file);
    }
    ckpt__written rec = { .name = name, .dtype = dtype,
                          .kind = is_full ? CKPT_KIND_FULL : CKPT_KIND_PARTITIONED,
                          .shape = *shape, .slice = *slice, .dataset = path, .dataset_slice = zero,
                          .bytes = (uint64_t)bytes, .crc = ckpt_crc32c(data, bytes),
                          .file_offset = file_offset };
    return ckpt__record_add(&w->rec, &rec);
}

static int writer_commit_impl(ckpt_writer *w)
{
    if (!w || w->file < 0 || w->committed)
        return ckpt__error(CKPT_EINVAL, "writer is closed");
    if (w->failed)
        return ckpt__error(CKPT_EIO, "writer of %s: an earlier write failed; nothing can be "
                                     "committed (free the writer)",
                           w->n.prefix);
    int rc = CKPT_OK;
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    Mpickpt__Fragment frag = MPICKPT__FRAGMENT__INIT;
    char producer[64], index_path[4200];

    ckpt__pad_release(w->tempfd, w->n.pad_name, w->padfd); /* the metadata flush gets its room */
    w->padfd = -1;
    errno = 0;
    herr_t hr = H5Fclose(w->file);
    w->file = H5I_INVALID_HID;
    if (hr < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "close data file %s", w->n.my_file);
        goto out;
    }
    uint64_t size;
    if ((rc = ckpt__fsync_fd(w->datafd, w->n.my_file)) ||
        (rc = ckpt__fd_size(&size, w->datafd, w->n.my_file)) ||
        (rc = ckpt__record_add_file(&w->rec, w->n.data_name, size)) ||
        (rc = ckpt__record_fragment(&frag, &w->rec, 0, w->n.data_name)))
        goto out;

    snprintf(producer, sizeof producer, "mpickpt %s", ckpt_version());
    hdr.format_version = CKPT_FORMAT_VERSION;
    hdr.endianness = MPICKPT__ENDIANNESS__LITTLE;
    hdr.world_size = 1;
    hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    hdr.save_counter = w->opts.save_counter;
    hdr.epoch = w->opts.epoch;
    hdr.step = w->opts.step;
    hdr.timestamp = ckpt__now_seconds();
    hdr.producer = producer;
    idx.header = &hdr;
    Mpickpt__Fragment *frags[1] = { &frag };
    snprintf(index_path, sizeof index_path, "%s.index", w->n.prefix);
    if ((rc = ckpt__index_merge(&idx, frags, 1)) != CKPT_OK)
        goto out;
    hdr.format_version = ckpt__index_format_version(&idx);
    if ((rc = ckpt__index_validate(&idx, CKPT_EMISMATCH, index_path)) != CKPT_OK)
        goto out;
    /* the commit (lib/commit.c): an old index of that name goes first when overwriting, then the
     * data file into place, then the index; without overwrite, a final name that is taken is
     * CKPT_EEXISTS and stays as it is */
    ckpt__commit_file file = { .from_fd = w->tempfd, .from_name = w->n.data_name,
                               .name = w->n.data_name };
    ckpt__commit_req q = { .dirfd = w->dirfd, .dir = w->n.dir, .index_name = w->n.index_name,
                           .index_shown = index_path, .idx = &idx, .files = &file, .nfiles = 1,
                           .replace = w->opts.overwrite };
    if ((rc = ckpt__commit(&q)) == CKPT_OK)
        w->committed = 1;
out:
    ckpt__index_merged_free(&idx);
    ckpt__fragment_free_built(&frag);
    ckpt__rmtree_at(w->dirfd, w->n.temp_name, w->n.dir);
    return rc;
}

static void writer_free_impl(ckpt_writer *w)
{
    if (!w)
        return;
    ckpt__pad_release(w->tempfd, w->n.pad_name, w->padfd);
    if (w->file >= 0) {
        /* never committed: its metadata goes nowhere, so closing cannot fail on a full disk */
        ckpt__h5_detach_file(w->file);
        H5Fclose(w->file);
    }
    if (!w->committed && w->tempfd >= 0) /* only the temp dir this writer made */
        ckpt__rmtree_at(w->dirfd, w->n.temp_name, w->n.dir);
    ckpt__close(w->datafd);
    ckpt__close(w->tempfd);
    ckpt__close(w->dirfd);
    ckpt__record_free(&w->rec);
    free(w);
}

/* ==== public entry points: every HDF5 call of the library runs under one lock (h5io.h) ===== */

int ckpt_writer_open(ckpt_writer **out, const char *prefix, const ckpt_writer_options *opts)
{
    ckpt__h5_lock();
    int rc = writer_open_impl(out, prefix, opts);
    ckpt__h5_unlock();
    return rc;
}

int ckpt_writer_add(ckpt_writer *w, const char *name, ckpt_dtype dtype, const ckpt_shape *shape,
                    const ckpt_slice *slice, const void *data)
{
    ckpt__h5_lock();
    int rc = writer_add_impl(w, name, dtype, shape, slice, data);
    ckpt__h5_unlock();
    return rc;
}

int ckpt_writer_commit(ckpt_writer *w)
{
    ckpt__h5_lock();
    int rc = writer_commit_impl(w);
    ckpt__h5_unlock();
    return rc;
}

void ckpt_writer_free(ckpt_writer *w)
{
    ckpt__h5_lock();
    writer_free_impl(w);
    ckpt__h5_unlock();
}
