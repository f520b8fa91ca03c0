/* Single-process writer of complete checkpoints (ckpt_writer_*). The MPI saver writes the same
 * format with several ranks; lib/reader.c reads what either wrote. */
#include "mpickpt/checkpoint.h"

#include "fsutil.h"
#include "h5io.h"
#include "index.h"
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
    char prefix[4096];
    char index_path[4200];
    char temp_dir[4200];
    char temp_data[4400];
    char final_data[4400];
    char data_name[300]; /* final data file name, relative to the checkpoint's directory */
    char dir[4096];
    char index_name[300];
    char temp_name[300]; /* <base>_temp in dirfd, holding part-00000-of-00001 */
    int dirfd, tempfd, datafd;
    int padfd;         /* room for HDF5's metadata flush (ckpt__pad_create), released at commit */
    uint64_t pad_size;
    int failed;        /* a write into the file failed: it is abandoned, never flushed to disk */
    ckpt_writer_options opts;
    hid_t file;
    Mpickpt__Fragment frag;
    size_t cap;
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
    mpickpt__fragment__init(&w->frag);
    char *dir = w->dir, base[4096];
    int rc;
    if ((rc = ckpt__path(w->prefix, sizeof w->prefix, "%s", prefix)) ||
        (rc = ckpt__split_path(dir, sizeof w->dir, base, sizeof base, prefix)) ||
        (rc = ckpt__path(w->index_path, sizeof w->index_path, "%s.index", prefix)) ||
        (rc = ckpt__path(w->temp_dir, sizeof w->temp_dir, "%s_temp", prefix)) ||
        (rc = ckpt__path(w->temp_data, sizeof w->temp_data, "%s/part-00000-of-00001",
                         w->temp_dir)) ||
        (rc = ckpt__path(w->data_name, sizeof w->data_name, "%s.data-00000-of-00001", base)) ||
        (rc = ckpt__path(w->final_data, sizeof w->final_data, "%s/%s", dir, w->data_name)))
        goto fail;
    if (!ckpt__safe_filename(base) || strlen(base) > 200) {
        rc = ckpt__error(CKPT_EINVAL, "checkpoint prefix '%s' needs a file name part of 1..200 "
                                      "bytes",
                         prefix);
        goto fail;
    }
    snprintf(w->index_name, sizeof w->index_name, "%s.index", base);
    snprintf(w->temp_name, sizeof w->temp_name, "%s_temp", base);
    if ((rc = ckpt__ckptdir_open(&w->dirfd, NULL, dir, 1)) != CKPT_OK)
        goto fail;
    if (!w->opts.overwrite && ckpt__exists_at(w->dirfd, w->index_name)) {
        rc = ckpt__error(CKPT_EEXISTS, "checkpoint %s already exists", w->index_path);
        goto fail;
    }
    /* A temp dir left by a crashed writer of the same prefix is garbage; anything else under that
     * name (a planted link) is refused. The data file is created by us (O_EXCL) and reached by
     * HDF5 through its descriptor. */
    struct stat st;
    char h5path[4600];
    if (fstatat(w->dirfd, w->temp_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
        rc = ckpt__error(CKPT_ECORRUPT,
                         "refusing to use %s: it is %s, not a directory (mpickpt never follows "
                         "links inside a checkpoint directory; remove it)",
                         w->temp_dir, ckpt__file_kind(st.st_mode));
        goto fail;
    }
    if ((rc = ckpt__rmtree_at(w->dirfd, w->temp_name, dir)) ||
        (rc = ckpt__subdir_open(&w->tempfd, w->dirfd, w->temp_name, 1, dir)) ||
        (rc = ckpt__file_create(&w->datafd, w->tempfd, "part-00000-of-00001", O_RDWR,
                                w->temp_dir)) ||
        (rc = ckpt__pad_create(&w->padfd, w->tempfd, ".pad-0", w->pad_size = (uint64_t)256 << 10,
                               w->temp_dir)) ||
        (rc = ckpt__fd_path(h5path, sizeof h5path, w->datafd, w->temp_data)))
        goto fail;
    ckpt__h5_init();
    w->file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "create data file %s", w->temp_data);
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
                             w->temp_dir)) != CKPT_OK)
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
    H5Dclose(dset);
    if (rc != CKPT_OK) {
        w->failed = 1; /* the file is abandoned: commit refuses it, free discards it */
        return ckpt__error_wrap(rc, "tensor '%s' in %s", name, w->temp_data);
    }
    uint32_t crc = ckpt_crc32c(data, bytes);
    return ckpt__fragment_add(&w->frag, &w->cap, name, dtype, shape,
                              is_full ? CKPT_KIND_FULL : CKPT_KIND_PARTITIONED, slice, w->data_name,
                              path, &zero, (uint64_t)bytes, crc);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int writer_commit_impl(ckpt_writer *w)
{
    if (!w || w->file < 0 || w->committed)
        return ckpt__error(CKPT_EINVAL, "writer is closed");
    if (w->failed)
        return ckpt__error(CKPT_EIO, "writer of %s: an earlier write failed; nothing can be "
                                     "committed (free the writer)",
                           w->prefix);
    int rc = CKPT_OK, renamed = 0;
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    char producer[64];

    ckpt__pad_release(w->tempfd, ".pad-0", w->padfd); /* the metadata flush gets its room */
    w->padfd = -1;
    errno = 0;
    herr_t hr = H5Fclose(w->file);
    w->file = H5I_INVALID_HID;
    if (hr < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "close data file %s", w->temp_data);
        goto fail;
    }
    uint64_t size;
    struct stat st;
    if ((rc = ckpt__fsync_fd(w->datafd, w->temp_data)))
        goto fail;
    if (fstat(w->datafd, &st) != 0) {
        rc = ckpt__errno(errno, "stat", w->temp_data);
        goto fail;
    }
    size = (uint64_t)st.st_size;
    if ((rc = ckpt__fragment_add_file(&w->frag, w->data_name, size)))
        goto fail;

    snprintf(producer, sizeof producer, "mpickpt %s", ckpt_version());
    hdr.format_version = CKPT_FORMAT_VERSION;
    hdr.endianness = MPICKPT__ENDIANNESS__LITTLE;
    hdr.world_size = 1;
    hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    hdr.save_counter = w->opts.save_counter;
    hdr.epoch = w->opts.epoch;
    hdr.step = w->opts.step;
    hdr.timestamp = now_seconds();
    hdr.producer = producer;
    idx.header = &hdr;
    Mpickpt__Fragment *frags[1] = {&w->frag};
    if ((rc = ckpt__index_merge(&idx, frags, 1)) != CKPT_OK)
        goto fail;
    hdr.format_version = ckpt__index_format_version(&idx);

    /* Replacing a checkpoint: un-commit the old one first (its index goes), so no reader ever sees
     * the old index with the new data. */
    if (w->opts.overwrite && ckpt__exists_at(w->dirfd, w->index_name)) {
        if (unlinkat(w->dirfd, w->index_name, 0) != 0) {
            rc = ckpt__errno(errno, "unlink", w->index_path);
            goto fail;
        }
        if ((rc = ckpt__fsync_fd(w->dirfd, w->dir)))
            goto fail;
    }
    if (renameat(w->tempfd, "part-00000-of-00001", w->dirfd, w->data_name) != 0) {
        rc = ckpt__errno(errno, "rename to", w->final_data);
        goto fail;
    }
    renamed = 1;
    if ((rc = ckpt__fsync_fd(w->dirfd, w->dir)))
        goto fail;
    /* the commit point */
    if ((rc = ckpt__index_validate(&idx, CKPT_EMISMATCH, w->index_path)) ||
        (rc = ckpt__index_store_merged_at(&idx, w->dirfd, w->index_name, w->dir)))
        goto fail;
    w->committed = 1;
    ckpt__index_merged_free(&idx);
    ckpt__rmtree_at(w->dirfd, w->temp_name, w->dir);
    return CKPT_OK;
fail:
    ckpt__index_merged_free(&idx);
    if (renamed)
        unlinkat(w->dirfd, w->data_name, 0);
    ckpt__rmtree_at(w->dirfd, w->temp_name, w->dir);
    return rc;
}

static void writer_free_impl(ckpt_writer *w)
{
    if (!w)
        return;
    ckpt__pad_release(w->tempfd, ".pad-0", w->padfd);
    if (w->file >= 0) {
        /* never committed: its metadata goes nowhere, so closing cannot fail on a full disk */
        ckpt__h5_detach_file(w->file);
        H5Fclose(w->file);
    }
    if (!w->committed && w->tempfd >= 0) /* only the temp dir this writer made */
        ckpt__rmtree_at(w->dirfd, w->temp_name, w->dir);
    ckpt__close(w->datafd);
    ckpt__close(w->tempfd);
    ckpt__close(w->dirfd);
    ckpt__fragment_free_built(&w->frag);
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
