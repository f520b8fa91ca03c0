/* ckpt_export() to one plain HDF5 file (docs/interop.md, "Export to HDF5"): every tensor a
 * contiguous dataset at its name, '/' in names making groups, the checkpoint's header as
 * attributes of the root group. Written through ckpt__outfile: the file appears whole or not at
 * all. */
#include "interop.h"

#include "fsutil.h"
#include "h5io.h"

#include "mpickpt/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- names ---- */

/* Why `name` cannot be an HDF5 path of datasets and groups, or NULL when it can. HDF5 splits
 * paths at '/', merges repeated '/', reads a leading '/' as the root and skips "." components:
 * such names would land on another name's place (or on none). */
static const char *name_problem(const char *name)
{
    const char *c = name;
    for (;;) {
        const char *end = strchr(c, '/');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == 0)
            return "it has an empty path component (a leading or trailing '/', or '//')";
        if (len == 1 && c[0] == '.')
            return "it has a path component \".\"";
        if (!end)
            return NULL;
        c = end + 1;
    }
}

/*
 * Checks that every tensor name of r maps to a dataset of its own: no empty or "." component, and
 * no name that is also the group of another ("a" and "a/b"). CKPT_EINVAL naming the first
 * offending tensor(s) and how many there are. Reads the index only, before anything is written.
 */
static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int check_names(const ckpt__export_sel *sel)
{
    size_t n = sel->n, bad = 0;
    char first[4096 + 256] = "";
    char prefix[4097];
    char **sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted)
        return ckpt__error(CKPT_ENOMEM, "export to HDF5: out of memory");
    memcpy(sorted, sel->name, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_name);
    for (size_t i = 0; i < n; i++) {
        const char *name = sel->name[i];
        const char *why = name_problem(name);
        if (why) {
            if (bad++ == 0)
                snprintf(first, sizeof first, "tensor '%s': %s", name, why);
            continue;
        }
        /* every group on the path ("a" and "a/b" of "a/b/c") must not be a tensor itself */
        for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
            size_t len = (size_t)(s - name);
            if (len >= sizeof prefix)
                break;
            memcpy(prefix, name, len);
            prefix[len] = '\0';
            char *key = prefix;
            if (bsearch(&key, sorted, n, sizeof *sorted, by_name)) {
                if (bad++ == 0)
                    snprintf(first, sizeof first,
                             "tensors '%s' and '%s': '%s' would have to be both a dataset and the "
                             "group that holds '%s'",
                             prefix, name, prefix, name);
                break;
            }
        }
    }
    free(sorted);
    if (bad == 0)
        return CKPT_OK;
    char more[64] = "";
    if (bad > 1)
        snprintf(more, sizeof more, " (and %zu more name(s))", bad - 1);
    return ckpt__error(CKPT_EINVAL,
                       "export to HDF5: %s%s. HDF5 names are paths of groups; export to "
                       "safetensors (--format safetensors) keeps any name",
                       first, more);
}

/* ---- attributes ---- */

static int attr_int64(hid_t obj, const char *key, int64_t value)
{
    int rc = CKPT_OK;
    hid_t space = H5Screate(H5S_SCALAR), attr = H5I_INVALID_HID;
    if (space < 0 ||
        (attr = H5Acreate2(obj, key, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        H5Awrite(attr, H5T_NATIVE_INT64, &value) < 0)
        rc = ckpt__h5_error(CKPT_EIO, "write attribute %s", key);
    if (attr >= 0)
        H5Aclose(attr);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

/* The source's header on the root group. */
static int write_header(hid_t file, const ckpt_header *h, const char *prefix,
                        const ckpt__export_sel *sel)
{
    int rc;
    if (sel->aliases_json &&
        (rc = ckpt__h5_write_str_attr(file, "mpickpt_aliases", sel->aliases_json)) != CKPT_OK)
        return rc;
    if ((rc = attr_int64(file, "epoch", h->epoch)) != CKPT_OK ||
        (rc = attr_int64(file, "step", h->step)) != CKPT_OK ||
        (rc = attr_int64(file, "save_counter", h->save_counter)) != CKPT_OK ||
        (rc = attr_int64(file, "end_of_epoch", h->end_of_epoch ? 1 : 0)) != CKPT_OK ||
        (rc = ckpt__h5_write_str_attr(file, "format", "mpickpt-export")) != CKPT_OK ||
        (rc = ckpt__h5_write_str_attr(file, "producer", h->producer ? h->producer : "")) !=
            CKPT_OK ||
        (rc = ckpt__h5_write_str_attr(file, "source", prefix)) != CKPT_OK)
        return rc;
    return CKPT_OK;
}

/* ---- datasets ---- */

/* The file type of a dtype here: the data files' types (IEEE half, h5py's bool enum, the
 * little-endian standard types) except bfloat16, which HDF5 readers know nothing of: its bits as
 * uint16, named by the dataset's `dtype` attribute. Library-owned (never closed). */
static hid_t export_type(ckpt_dtype dtype)
{
    return dtype == CKPT_BFLOAT16 ? H5T_STD_U16LE : ckpt__h5_file_type(dtype);
}

/* Creates dataset `info->name` (intermediate groups made on the way) and writes `data` into it
 * whole. Values are little-endian bytes already; memory and file types are the same, so HDF5
 * copies them without converting. */
static int write_dataset(hid_t file, const ckpt_tensor_info *info, const void *data, size_t bytes,
                         const char *shown)
{
    int rc = CKPT_OK;
    hid_t type = export_type(info->dtype);
    hid_t space = H5I_INVALID_HID, lcpl = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    if (type < 0)
        return ckpt__error(CKPT_ECORRUPT, "tensor '%s': invalid dtype %d", info->name,
                           (int)info->dtype);
    if (info->shape.ndims == 0) {
        space = H5Screate(H5S_SCALAR);
    } else {
        hsize_t dims[CKPT_MAX_DIMS];
        for (int d = 0; d < info->shape.ndims; d++)
            dims[d] = (hsize_t)info->shape.dims[d];
        space = H5Screate_simple(info->shape.ndims, dims, NULL);
    }
    lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (space < 0 || lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0 ||
        H5Pset_char_encoding(lcpl, H5T_CSET_UTF8) < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "%s: dataspace of tensor '%s'", shown, info->name);
        goto cleanup;
    }
    /* the default creation properties: contiguous, no filter, no fill value written */
    dset = H5Dcreate2(file, info->name, type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (dset < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "%s: create dataset for tensor '%s'", shown, info->name);
        goto cleanup;
    }
    errno = 0;
    if (bytes > 0 && H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "%s: write tensor '%s'", shown, info->name);
        goto cleanup;
    }
    rc = ckpt__h5_write_str_attr(dset, "dtype", ckpt_dtype_name(info->dtype));
    if (rc != CKPT_OK)
        ckpt__error_wrap(rc, "%s: tensor '%s'", shown, info->name);
cleanup:
    if (dset >= 0)
        H5Dclose(dset);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

/*
 * Room for everything the file will hold, taken before HDF5 writes into it: a disk that fills up
 * must fail a write of values, which HDF5 reports and survives, and never HDF5's metadata flush at
 * close, which HDF5 1.10 cannot recover from (it crashes in H5Fclose or at exit, h5io.h).
 * Where the file system has fallocate, the output file's blocks are allocated up front with
 * FALLOC_FL_KEEP_SIZE (its size stays what HDF5 writes; the blocks past the end are given back
 * when the file is truncated to its size after closing). Elsewhere a pad file next to the output
 * (a temp name, as the output's own) holds the metadata's room, released just before HDF5
 * closes the file (*padfd >= 0 then). The estimate: the values, plus per dataset its object
 * header, attribute and link (a few KiB, and the name in the group's heap and B-tree).
 */
static int reserve(ckpt__outfile *o, ckpt_reader *r, const ckpt__export_sel *sel, int *padfd,
                   char *padname, size_t padsize)
{
    uint64_t values = 0, meta = (uint64_t)256 << 10;
    size_t n = sel->n;
    *padfd = -1;
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        int64_t elems = 0;
        if (ckpt__export_tensor(r, sel, i, &t) != CKPT_OK ||
            ckpt_shape_num_elements(&elems, &t.shape) != CKPT_OK)
            continue;
        uint64_t esize = ckpt_dtype_size(t.dtype), room = (uint64_t)INT64_MAX - values - meta;
        if (elems < 0 || (esize && (uint64_t)elems > room / esize) ||
            (room -= (uint64_t)elems * esize) < 4096 + 4 * (uint64_t)strlen(t.name))
            return ckpt__error(CKPT_ECORRUPT,
                               "export of '%s' to %s: the tensors add up to more bytes than a "
                               "file can hold",
                               t.name, o->shown);
        values += (uint64_t)elems * esize;
        meta += 4096 + 4 * (uint64_t)strlen(t.name);
    }
    if (fallocate(o->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)(values + meta)) == 0)
        return CKPT_OK;
    if (errno == ENOSPC || errno == EDQUOT)
        return ckpt__error(CKPT_ENOSPC, "no space left on device for %s (%llu bytes)", o->shown,
                           (unsigned long long)(values + meta));
    int rc = ckpt__temp_name(padname, padsize, o->base);
    if (rc == CKPT_OK)
        rc = ckpt__pad_create(padfd, o->dirfd, padname, meta, o->dir);
    if (rc != CKPT_OK)
        ckpt__error_wrap(rc, "%s", o->shown);
    return rc;
}

int ckpt__export_hdf5(ckpt_reader *r, const ckpt__export_sel *sel, const char *prefix,
                      const char *out, const ckpt_export_options *opts,
                      ckpt_interop_totals *totals)
{
    const ckpt_header *h = ckpt_reader_header(r);
    if (!h->little_endian)
        return ckpt__error(CKPT_EINVAL,
                           "export of %s: its data is big-endian; only "
                           "little-endian checkpoints can be exported",
                           prefix);
    int rc = check_names(sel);
    if (rc != CKPT_OK)
        return rc;
    ckpt__outfile o;
    if ((rc = ckpt__outfile_open(&o, out, opts->overwrite)) != CKPT_OK)
        return rc;
    hid_t file = H5I_INVALID_HID;
    int padfd = -1;
    char h5path[4096 + 600], tmp_shown[4096 + 320], padname[300];
    snprintf(tmp_shown, sizeof tmp_shown, "%s/%s", o.dir, o.tmp);
    if ((rc = ckpt__fd_path(h5path, sizeof h5path, o.fd, tmp_shown)) != CKPT_OK)
        goto fail;

    ckpt__h5_lock();
    ckpt__h5_init();
    /* serial access, the default (sec2) driver; HDF5 reaches our temp file through its fd */
    errno = 0;
    file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0)
        rc = ckpt__h5_error(CKPT_EIO, "create %s", o.shown);
    if (rc == CKPT_OK)
        rc = reserve(&o, r, sel, &padfd, padname, sizeof padname);
    if (rc == CKPT_OK && (rc = write_header(file, h, prefix, sel)) != CKPT_OK)
        ckpt__error_wrap(rc, "%s", o.shown);
    ckpt__h5_unlock();
    if (rc != CKPT_OK)
        goto fail;

    for (size_t i = 0; i < sel->n; i++) {
        ckpt_tensor_info info;
        void *data = NULL;
        size_t bytes = 0;
        if ((rc = ckpt__export_read(r, sel, i, &info, &data, &bytes)) != CKPT_OK)
            goto fail;
        ckpt__h5_lock();
        rc = write_dataset(file, &info, data, bytes, o.shown);
        ckpt__h5_unlock();
        free(data);
        if (rc != CKPT_OK)
            goto fail;
        ckpt__export_report(opts, totals, &info, bytes);
    }

    ckpt__pad_release(o.dirfd, padname, padfd); /* the metadata flush gets its room */
    padfd = -1;
    ckpt__h5_lock();
    errno = 0;
    herr_t closed = H5Fclose(file);
    file = H5I_INVALID_HID;
    if (closed < 0)
        rc = ckpt__h5_error(CKPT_EIO, "close %s", o.shown);
    ckpt__h5_unlock();
    if (rc != CKPT_OK)
        goto fail;
    /* give back the reserved blocks past the end */
    off_t size = lseek(o.fd, 0, SEEK_END);
    if (size < 0 || ftruncate(o.fd, size) != 0) {
        rc = ckpt__errno(errno, "truncate", o.shown);
        goto fail;
    }
    if ((rc = ckpt__outfile_commit(&o)) != CKPT_OK)
        goto fail;
    ckpt__outfile_close(&o);
    totals->files = 1;
    return CKPT_OK;
fail:
    if (file >= 0) {
        /* abandoned: its metadata goes to memory, so closing cannot fail on a full disk */
        ckpt__h5_lock();
        ckpt__h5_detach_file(file);
        H5Fclose(file);
        H5Eclear2(H5E_DEFAULT);
        ckpt__h5_unlock();
    }
    ckpt__pad_release(o.dirfd, padname, padfd);
    ckpt__outfile_discard(&o);
    return rc;
}
