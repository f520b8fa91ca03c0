/* ckpt_export(): the formats' names, the dispatch to each format's writer (lib/interop.h), and
 * what the writers share: output files written whole or not at all, reading a tensor whole,
 * reporting it. docs/interop.md describes the formats. */
#include "interop.h"

#include "fsutil.h"

#include "mpickpt/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const format_names[] = {"invalid", "tf", "hdf5", "safetensors"};

const char *ckpt_export_format_name(ckpt_export_format format)
{
    if ((int)format <= 0 || (size_t)format >= sizeof format_names / sizeof format_names[0])
        return format_names[0];
    return format_names[format];
}

int ckpt_export_format_from_name(ckpt_export_format *out, const char *name)
{
    *out = CKPT_EXPORT_INVALID;
    for (size_t i = 1; name && i < sizeof format_names / sizeof format_names[0]; i++)
        if (strcmp(name, format_names[i]) == 0) {
            *out = (ckpt_export_format)i;
            return CKPT_OK;
        }
    return ckpt__error(CKPT_EINVAL, "unknown export format '%s' (tf, hdf5 or safetensors)",
                       name ? name : "(null)");
}

/* ---- output files ---- */

int ckpt__outfile_open(ckpt__outfile *o, const char *path, int overwrite)
{
    memset(o, 0, sizeof *o);
    o->dirfd = -1;
    o->fd = -1;
    if (!path || !*path)
        return ckpt__error(CKPT_EINVAL, "export: an empty output path");
    int rc = ckpt__split_path(o->dir, sizeof o->dir, o->base, sizeof o->base, path);
    if (rc != CKPT_OK)
        return rc;
    if (!ckpt__safe_filename(o->base))
        return ckpt__error(CKPT_EINVAL, "export: '%s' does not name a file", path);
    snprintf(o->shown, sizeof o->shown, "%s", path);
    if ((rc = ckpt__dir_open(&o->dirfd, o->dir)) != CKPT_OK)
        return rc;
    struct stat st;
    if (fstatat(o->dirfd, o->base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!overwrite)
            rc = ckpt__error(CKPT_EEXISTS,
                             "%s exists (replace it with --force, in Python overwrite=True)",
                             path);
        else if (!S_ISREG(st.st_mode))
            rc = ckpt__error(CKPT_ECORRUPT, "refusing to replace %s: it is %s", path,
                             ckpt__file_kind(st.st_mode));
        if (rc != CKPT_OK)
            goto fail;
    } else if (errno != ENOENT) {
        rc = ckpt__errno(errno, "stat", path);
        goto fail;
    }
    if ((rc = ckpt__temp_name(o->tmp, sizeof o->tmp, o->base)) != CKPT_OK)
        goto fail;
    if ((rc = ckpt__file_create(&o->fd, o->dirfd, o->tmp, O_RDWR, o->dir)) != CKPT_OK)
        goto fail;
    return CKPT_OK;
fail:
    ckpt__close(o->dirfd);
    o->dirfd = -1;
    o->tmp[0] = '\0';
    return rc;
}

int ckpt__outfile_commit(ckpt__outfile *o)
{
    if (fsync(o->fd) != 0)
        return ckpt__errno(errno, "fsync", o->shown);
    int fd = o->fd;
    o->fd = -1;
    if (close(fd) != 0)
        return ckpt__errno(errno, "close", o->shown);
    /* renameat replaces the entry (a link planted meanwhile included) without following it */
    if (renameat(o->dirfd, o->tmp, o->dirfd, o->base) != 0)
        return ckpt__errno(errno, "rename to", o->shown);
    o->renamed = 1;
    return ckpt__fsync_fd(o->dirfd, o->dir);
}

void ckpt__outfile_discard(ckpt__outfile *o)
{
    if (o->dirfd >= 0 && o->tmp[0])
        unlinkat(o->dirfd, o->renamed ? o->base : o->tmp, 0);
    o->tmp[0] = '\0';
    ckpt__outfile_close(o);
}

void ckpt__outfile_close(ckpt__outfile *o)
{
    ckpt__close(o->fd);
    o->fd = -1;
    ckpt__close(o->dirfd);
    o->dirfd = -1;
}

/* ---- what the writers share ---- */

int ckpt__export_read(ckpt_reader *r, size_t i, ckpt_tensor_info *info, void **data,
                      size_t *bytes)
{
    *data = NULL;
    *bytes = 0;
    int rc = ckpt_reader_tensor(info, r, i);
    if (rc != CKPT_OK)
        return rc;
    int64_t n = 0;
    if ((rc = ckpt_shape_num_elements(&n, &info->shape)) != CKPT_OK)
        return rc;
    size_t esize = ckpt_dtype_size(info->dtype);
    if (n < 0 || esize == 0 || (uint64_t)n > SIZE_MAX / esize)
        return ckpt__error(CKPT_ECORRUPT, "tensor '%s': %lld elements do not fit in memory",
                           info->name, (long long)n);
    size_t size = (size_t)n * esize;
    void *buf = malloc(size ? size : 1);
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "tensor '%s': cannot allocate %zu bytes", info->name,
                           size);
    if ((rc = ckpt_reader_read(r, info->name, info->dtype, NULL, buf, size)) != CKPT_OK) {
        free(buf);
        return rc;
    }
    *data = buf;
    *bytes = size;
    return CKPT_OK;
}

void ckpt__export_report(const ckpt_export_options *opts, ckpt_interop_totals *totals,
                         const ckpt_tensor_info *info, uint64_t bytes)
{
    totals->tensors++;
    totals->bytes += bytes;
    if (!opts->progress)
        return;
    ckpt_interop_item item;
    memset(&item, 0, sizeof item);
    item.name = info->name;
    item.dtype = ckpt_dtype_name(info->dtype);
    item.shape = info->shape;
    item.bytes = bytes;
    opts->progress(&item, opts->payload);
}

int ckpt_export(const char *prefix, const char *out, const ckpt_export_options *opts,
                ckpt_interop_totals *totals)
{
    ckpt_interop_totals local;
    if (!totals)
        totals = &local;
    memset(totals, 0, sizeof *totals);
    if (!prefix || !out || !opts)
        return ckpt__error(CKPT_EINVAL, "ckpt_export: NULL argument");
    if (opts->version != CKPT_EXPORT_OPTIONS_VERSION)
        return ckpt__error(CKPT_EINVAL, "ckpt_export: options version %u, expected %u",
                           opts->version, CKPT_EXPORT_OPTIONS_VERSION);
    ckpt_reader *r = NULL;
    int rc = ckpt_reader_open(&r, prefix);
    if (rc != CKPT_OK)
        return rc;
    switch (opts->format) {
    case CKPT_EXPORT_TF:
        rc = ckpt__export_tf(r, out, opts, totals);
        break;
    case CKPT_EXPORT_HDF5:
        rc = ckpt__export_hdf5(r, prefix, out, opts, totals);
        break;
    case CKPT_EXPORT_SAFETENSORS:
        rc = ckpt__export_safetensors(r, out, opts, totals);
        break;
    default:
        rc = ckpt__error(CKPT_EINVAL, "ckpt_export: unknown format %d", (int)opts->format);
        break;
    }
    ckpt_reader_free(r);
    return rc;
}
