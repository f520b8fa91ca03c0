#include "h5io.h"

#include "mpickpt/slice.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t h5_once = PTHREAD_ONCE_INIT;
static pthread_once_t h5_lock_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t h5_mutex;

static void h5_lock_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h5_mutex, &a);
    pthread_mutexattr_destroy(&a);
}

void ckpt__h5_lock(void)
{
    pthread_once(&h5_lock_once, h5_lock_init);
    pthread_mutex_lock(&h5_mutex);
}

void ckpt__h5_unlock(void)
{
    pthread_mutex_unlock(&h5_mutex);
}
static hid_t h5_f16 = H5I_INVALID_HID, h5_bf16 = H5I_INVALID_HID, h5_bool = H5I_INVALID_HID;

/* Builds the library-owned types that HDF5 has no predefined constant for. h5py recognises the
 * IEEE half layout as numpy float16 and an int8 enum {FALSE, TRUE} as numpy bool. */
static void h5_init_once(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    h5_f16 = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(h5_f16, 15, 10, 5, 0, 10);
    H5Tset_size(h5_f16, 2);
    H5Tset_ebias(h5_f16, 15);
    H5Tlock(h5_f16);

    h5_bf16 = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(h5_bf16, 15, 7, 8, 0, 7);
    H5Tset_size(h5_bf16, 2);
    H5Tset_ebias(h5_bf16, 127);
    H5Tlock(h5_bf16);

    h5_bool = H5Tenum_create(H5T_NATIVE_INT8);
    int8_t f = 0, t = 1;
    H5Tenum_insert(h5_bool, "FALSE", &f);
    H5Tenum_insert(h5_bool, "TRUE", &t);
    H5Tlock(h5_bool);
}

void ckpt__h5_init(void)
{
    pthread_once(&h5_once, h5_init_once);
    /* Threads other than the first get HDF5's default per-thread stack settings only in thread-safe
     * builds; this build is not thread-safe, so one global switch-off suffices. */
}

struct h5_walk {
    char text[512];
    int found;
};

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    struct h5_walk *w = data;
    (void)n;
    if (!w->found && err && err->desc) {
        snprintf(w->text, sizeof w->text, "%s (in %s)", err->desc,
                 err->func_name ? err->func_name : "?");
        for (char *p = w->text; *p; p++) /* one line: HDF5 descriptions may hold newlines */
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        w->found = 1;
    }
    return 0;
}

int ckpt__h5_error(int code, const char *fmt, ...)
{
    /* HDF5's file drivers leave errno from the failing system call: a full disk must read as one. */
    int err = errno;
    char ctx[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    if (code == CKPT_EIO && (err == ENOSPC || err == EDQUOT))
        code = CKPT_ENOSPC;
    struct h5_walk w = { "", 0 };
    /* Upward from the innermost frame: the first description is where the failure happened. */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_cb, &w);
    H5Eclear2(H5E_DEFAULT);
    if (w.found)
        return ckpt__error(code, "%s: HDF5: %s", ctx, w.text);
    return ckpt__error(code, "%s", ctx);
}

static int is_plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

int ckpt__h5_dataset_path(char *out, size_t size, const char *name, const ckpt_slice *part)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t len = name ? strnlen(name, 4097) : 0;
    if (len == 0)
        return ckpt__error(CKPT_EINVAL, "tensor name is empty");
    if (len > 4096)
        return ckpt__error(CKPT_EINVAL, "tensor name is longer than 4096 bytes");
    size_t pos = (size_t)snprintf(out, size, "%s/", CKPT__H5_GROUP);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (pos + 4 > size)
            goto too_long;
        if (is_plain(c) && !(i == 0 && c == '.')) {
            out[pos++] = (char)c;
        } else {
            out[pos++] = '%';
            out[pos++] = hex[c >> 4];
            out[pos++] = hex[c & 15];
        }
    }
    out[pos] = '\0';
    for (int d = 0; part && d < part->ndims; d++) {
        int n = snprintf(out + pos, size - pos, "%c%lld", d == 0 ? '#' : '_',
                         (long long)part->start[d]);
        if (n < 0 || (size_t)n >= size - pos)
            goto too_long;
        pos += (size_t)n;
    }
    return CKPT_OK;
too_long:
    return ckpt__error(CKPT_EINVAL, "dataset path for tensor '%.200s' does not fit %zu bytes", name,
                       size);
}

hid_t ckpt__h5_file_type(ckpt_dtype dtype)
{
    ckpt__h5_init();
    switch (dtype) {
    case CKPT_FLOAT16: return h5_f16;
    case CKPT_BFLOAT16: return h5_bf16;
    case CKPT_FLOAT32: return H5T_IEEE_F32LE;
    case CKPT_FLOAT64: return H5T_IEEE_F64LE;
    case CKPT_INT8: return H5T_STD_I8LE;
    case CKPT_INT16: return H5T_STD_I16LE;
    case CKPT_INT32: return H5T_STD_I32LE;
    case CKPT_INT64: return H5T_STD_I64LE;
    case CKPT_UINT8: return H5T_STD_U8LE;
    case CKPT_UINT16: return H5T_STD_U16LE;
    case CKPT_UINT32: return H5T_STD_U32LE;
    case CKPT_UINT64: return H5T_STD_U64LE;
    case CKPT_BOOL: return h5_bool;
    default: return H5I_INVALID_HID;
    }
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mpickpt stores little-endian data and currently supports little-endian hosts only"
#endif

hid_t ckpt__h5_mem_type(ckpt_dtype dtype)
{
    /* Little-endian hosts only (checked above): memory and file types coincide, so HDF5 copies
     * bytes without converting them and the CRC-32C of the buffer is the CRC of the stored bytes. */
    return ckpt__h5_file_type(dtype);
}

/* A dataspace of `n` dims (scalar when n == 0). */
static hid_t make_space(int n, const int64_t *dims)
{
    if (n == 0)
        return H5Screate(H5S_SCALAR);
    hsize_t d[CKPT_MAX_DIMS];
    for (int i = 0; i < n; i++)
        d[i] = (hsize_t)dims[i];
    return H5Screate_simple(n, d, NULL);
}

int ckpt__h5_write_str_attr(hid_t obj, const char *key, const char *value)
{
    int rc = CKPT_OK;
    hid_t type = H5Tcopy(H5T_C_S1), space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    if (type < 0 || H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "string type for attribute %s", key);
        goto cleanup;
    }
    space = H5Screate(H5S_SCALAR);
    attr = H5Acreate2(obj, key, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0 || H5Awrite(attr, type, &value) < 0)
        rc = ckpt__h5_error(CKPT_EIO, "write attribute %s", key);
cleanup:
    if (attr >= 0)
        H5Aclose(attr);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    return rc;
}

static int create_dataset(hid_t *out, hid_t file, const char *path, const char *name,
                          ckpt_dtype dtype, const ckpt_shape *global, const ckpt_slice *held,
                          int early)
{
    int rc = CKPT_OK;
    hid_t space = H5I_INVALID_HID, dset = H5I_INVALID_HID, lcpl = H5I_INVALID_HID;
    hid_t dcpl = H5P_DEFAULT;
    char spec[1024];
    *out = H5I_INVALID_HID;
    ckpt__h5_init();

    hid_t ftype = ckpt__h5_file_type(dtype);
    if (ftype < 0)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': invalid dtype %d", name, (int)dtype);
    if ((rc = ckpt_slice_spec_format(spec, sizeof spec, global, held)) != CKPT_OK) {
        if (global->ndims != 0)
            return rc;
        spec[0] = '\0'; /* scalars have no TensorFlow slice spec */
    }

    space = make_space(held->ndims, held->count);
    lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (space < 0 || lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "dataspace for tensor '%s'", name);
        goto cleanup;
    }
    /* Early allocation without fill: the extent's file address is known at creation and nothing
     * is written into it (ckpt__h5_create_dataset_early). */
    if (early && ((dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 ||
                  H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0 ||
                  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0 ||
                  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0)) {
        rc = ckpt__h5_error(CKPT_EIO, "creation properties for tensor '%s'", name);
        goto cleanup;
    }
    /* Contiguous storage: one extent per dataset is what makes large writes stream at disk speed. */
    dset = H5Dcreate2(file, path, ftype, space, lcpl, dcpl, H5P_DEFAULT);
    if (dset < 0) {
        rc = ckpt__h5_error(CKPT_EIO, "create dataset %s for tensor '%s'", path, name);
        goto cleanup;
    }
    if ((rc = ckpt__h5_write_str_attr(dset, "mpickpt.name", name)) != CKPT_OK ||
        (rc = ckpt__h5_write_str_attr(dset, "mpickpt.dtype", ckpt_dtype_name(dtype))) != CKPT_OK ||
        (rc = ckpt__h5_write_str_attr(dset, "mpickpt.slice", spec)) != CKPT_OK)
        goto cleanup;
    *out = dset;
    dset = H5I_INVALID_HID;
cleanup:
    if (dset >= 0)
        H5Dclose(dset);
    if (dcpl != H5P_DEFAULT && dcpl >= 0)
        H5Pclose(dcpl);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

int ckpt__h5_create_dataset(hid_t *out, hid_t file, const char *path, const char *name,
                            ckpt_dtype dtype, const ckpt_shape *global, const ckpt_slice *held)
{
    return create_dataset(out, file, path, name, dtype, global, held, 0);
}

int ckpt__h5_create_dataset_early(hid_t *out, hid_t file, const char *path, const char *name,
                                  ckpt_dtype dtype, const ckpt_shape *global,
                                  const ckpt_slice *held)
{
    return create_dataset(out, file, path, name, dtype, global, held, 1);
}

/* Selects `sel` in the dataset's file space and builds the matching memory space. An empty
 * selection selects none in both (a valid participant in a collective transfer). */
static int select_box(hid_t *fspace, hid_t *mspace, hid_t dset, const ckpt_slice *sel)
{
    int64_t n = 0;
    *fspace = H5Dget_space(dset);
    *mspace = H5I_INVALID_HID;
    if (*fspace < 0)
        return ckpt__h5_error(CKPT_EIO, "dataspace of dataset");
    if (ckpt_slice_num_elements(&n, sel) != CKPT_OK)
        return CKPT_EINVAL;
    if (n == 0) {
        hsize_t one = 1;
        *mspace = H5Screate_simple(1, &one, NULL);
        if (*mspace < 0 || H5Sselect_none(*mspace) < 0 || H5Sselect_none(*fspace) < 0)
            return ckpt__h5_error(CKPT_EIO, "empty selection");
        return CKPT_OK;
    }
    if (sel->ndims == 0) {
        *mspace = H5Screate(H5S_SCALAR);
        return *mspace < 0 ? ckpt__h5_error(CKPT_EIO, "scalar dataspace") : CKPT_OK;
    }
    hsize_t start[CKPT_MAX_DIMS], count[CKPT_MAX_DIMS];
    for (int i = 0; i < sel->ndims; i++) {
        start[i] = (hsize_t)sel->start[i];
        count[i] = (hsize_t)sel->count[i];
    }
    if (H5Sselect_hyperslab(*fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
        return ckpt__h5_error(CKPT_EIO, "hyperslab selection");
    *mspace = H5Screate_simple(sel->ndims, count, NULL);
    return *mspace < 0 ? ckpt__h5_error(CKPT_EIO, "memory dataspace") : CKPT_OK;
}

int ckpt__h5_write(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel, const void *buf, hid_t dxpl)
{
    hid_t fspace, mspace;
    int rc = select_box(&fspace, &mspace, dset, sel);
    /* A dataset with no elements has no storage: there is nothing to write, and a collective
     * write to it fails inside HDF5. Every rank sees the same extent, so all of them skip. */
    if (rc == CKPT_OK && H5Sget_simple_extent_npoints(fspace) == 0) {
        H5Sclose(mspace);
        H5Sclose(fspace);
        return CKPT_OK;
    }
    if (rc == CKPT_OK && H5Dwrite(dset, ckpt__h5_mem_type(dtype), mspace, fspace, dxpl, buf) < 0)
        rc = ckpt__h5_error(CKPT_EIO, "H5Dwrite");
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    return rc;
}

int ckpt__h5_check_box(int nd, const hsize_t *dims, const ckpt_slice *sel)
{
    if (nd != sel->ndims)
        return ckpt__error(CKPT_ECORRUPT, "dataset has rank %d, index says %d", nd, sel->ndims);
    for (int i = 0; i < nd; i++)
        if ((hsize_t)sel->start[i] > dims[i] ||
            (hsize_t)sel->count[i] > dims[i] - (hsize_t)sel->start[i])
            return ckpt__error(CKPT_ECORRUPT,
                               "dataset dim %d has extent %llu; the index puts the piece at "
                               "%lld+%lld",
                               i, (unsigned long long)dims[i], (long long)sel->start[i],
                               (long long)sel->count[i]);
    return CKPT_OK;
}

/* Checks that a dataset is what the index says it is before reading the box `sel` from it. */
static int check_dataset(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel)
{
    int rc = CKPT_OK;
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    if (space < 0 || type < 0) {
        rc = ckpt__h5_error(CKPT_ECORRUPT, "cannot query dataset");
        goto cleanup;
    }
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t d[CKPT_MAX_DIMS];
    if (nd < 0 || nd > CKPT_MAX_DIMS || H5Sget_simple_extent_dims(space, d, NULL) != nd) {
        rc = ckpt__error(CKPT_ECORRUPT, "dataset has rank %d, index says %d", nd, sel->ndims);
        goto cleanup;
    }
    if ((rc = ckpt__h5_check_box(nd, d, sel)) != CKPT_OK)
        goto cleanup;
    if (H5Tequal(type, ckpt__h5_file_type(dtype)) <= 0)
        rc = ckpt__error(CKPT_ECORRUPT, "dataset's HDF5 type is not the %s the index says",
                         ckpt_dtype_name(dtype));
cleanup:
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

int ckpt__h5_check(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel)
{
    return check_dataset(dset, dtype, sel);
}

static const char *link_kind(H5L_type_t t)
{
    switch (t) {
    case H5L_TYPE_SOFT: return "a soft link";
    case H5L_TYPE_EXTERNAL: return "an external link";
    default: return "a user-defined link";
    }
}

/* Checks that every link of `path` is a hard link, from the root down, so that no lookup ever
 * follows anything else: H5Lget_info() traverses the links before the last one of the name it
 * is given (each already checked here) and reports the last one without following it. */
static int check_links(hid_t file, const char *path, const char *fname)
{
    size_t len = strlen(path);
    char *prefix = malloc(len + 1);
    if (!prefix)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    memcpy(prefix, path, len + 1);
    int rc = CKPT_OK;
    for (size_t i = 1, start = 1; i <= len && rc == CKPT_OK; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        size_t n = i - start;
        const char *comp = path + start;
        start = i + 1;
        if (n == 0)
            continue; /* "//" is one separator for HDF5 */
        if ((n == 1 && comp[0] == '.') || (n == 2 && comp[0] == '.' && comp[1] == '.')) {
            rc = ckpt__error(CKPT_ECORRUPT, "dataset path %s in %s has a '%.*s' component", path,
                             fname, (int)n, comp);
            break;
        }
        prefix[i] = '\0';
        H5L_info_t li;
        if (H5Lget_info(file, prefix, &li, H5P_DEFAULT) < 0)
            rc = ckpt__h5_error(CKPT_ECORRUPT, "no dataset %s in %s", path, fname);
        else if (li.type != H5L_TYPE_HARD && i == len)
            rc = ckpt__error(CKPT_ECORRUPT,
                             "dataset %s in %s is %s; mpickpt follows only hard links", path, fname,
                             link_kind(li.type));
        else if (li.type != H5L_TYPE_HARD)
            rc = ckpt__error(CKPT_ECORRUPT,
                             "dataset %s in %s: its group %s is %s; mpickpt follows only hard "
                             "links",
                             path, fname, prefix, link_kind(li.type));
        prefix[i] = path[i];
    }
    free(prefix);
    return rc;
}

/* Checks, from the dataset's creation properties only, that its raw data is one contiguous
 * extent of its own file, unfiltered. */
static int check_storage(hid_t dset, const char *path, const char *fname)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return ckpt__h5_error(CKPT_ECORRUPT, "creation properties of dataset %s in %s", path,
                              fname);
    int rc = CKPT_OK;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int nfilters = H5Pget_nfilters(dcpl);
    int nexternal = H5Pget_external_count(dcpl);
    if (layout < 0 || nfilters < 0 || nexternal < 0)
        rc = ckpt__h5_error(CKPT_ECORRUPT, "creation properties of dataset %s in %s", path, fname);
    else if (layout == H5D_VIRTUAL)
        rc = ckpt__error(CKPT_ECORRUPT,
                         "dataset %s in %s is a virtual dataset (its data is in other files); "
                         "mpickpt reads only data stored in the file itself",
                         path, fname);
    else if (layout == H5D_CHUNKED || layout == H5D_COMPACT)
        rc = ckpt__error(CKPT_ECORRUPT,
                         "dataset %s in %s has a %s layout%s; mpickpt reads only contiguous "
                         "datasets",
                         path, fname, layout == H5D_CHUNKED ? "chunked" : "compact",
                         nfilters > 0 ? " with filters" : "");
    else if (layout != H5D_CONTIGUOUS)
        rc = ckpt__error(CKPT_ECORRUPT, "dataset %s in %s has an unknown layout (%d)", path, fname,
                         (int)layout);
    else if (nexternal != 0)
        rc = ckpt__error(CKPT_ECORRUPT,
                         "dataset %s in %s has external storage; mpickpt reads only data stored "
                         "in the file itself",
                         path, fname);
    else if (nfilters != 0)
        rc = ckpt__error(CKPT_ECORRUPT,
                         "dataset %s in %s has filters; mpickpt reads only unfiltered datasets",
                         path, fname);
    H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

int ckpt__h5_open_dataset(hid_t *out, hid_t file, const char *path, const char *fname)
{
    *out = H5I_INVALID_HID;
    if (path[0] != '/')
        return ckpt__error(CKPT_ECORRUPT, "dataset path %s in %s is not absolute", path, fname);
    int rc = check_links(file, path, fname);
    if (rc != CKPT_OK)
        return rc;
    /* Every link is hard: this looks at an object header of `file` itself. */
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t oi;
    herr_t hr = H5Oget_info_by_name3(file, path, &oi, H5O_INFO_BASIC, H5P_DEFAULT);
#else
    H5O_info_t oi;
    herr_t hr = H5Oget_info_by_name2(file, path, &oi, H5O_INFO_BASIC, H5P_DEFAULT);
#endif
    if (hr < 0)
        return ckpt__h5_error(CKPT_ECORRUPT, "no dataset %s in %s", path, fname);
    if (oi.type != H5O_TYPE_DATASET)
        return ckpt__error(CKPT_ECORRUPT, "dataset %s in %s is %s, not a dataset", path, fname,
                           oi.type == H5O_TYPE_GROUP            ? "a group"
                           : oi.type == H5O_TYPE_NAMED_DATATYPE ? "a named datatype"
                                                                : "an unknown object");
    /* Opening reads the dataset's own header: no external file, FIFO or source dataset of a
     * virtual one is opened until its data or (for a virtual one) its extent is asked for. */
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    if (d < 0)
        return ckpt__h5_error(CKPT_ECORRUPT, "no dataset %s in %s", path, fname);
    if ((rc = check_storage(d, path, fname)) != CKPT_OK) {
        H5Dclose(d);
        return rc;
    }
    *out = d;
    return CKPT_OK;
}

uint64_t ckpt__h5_offset(hid_t dset)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    uint64_t off = 0;
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_external_count(dcpl) == 0) {
        haddr_t a = H5Dget_offset(dset);
        off = a == HADDR_UNDEF ? 0 : (uint64_t)a;
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    return off;
}

int ckpt__h5_raw_address(hid_t file, hid_t dset, int *fd, uint64_t *addr, uint64_t *size)
{
    int ok = 0;
    hid_t dcpl = H5Dget_create_plist(dset), fapl = H5Fget_access_plist(file);
    hid_t fcpl = H5Fget_create_plist(file);
    hsize_t ublock = 1;
    void *handle = NULL;
    if (dcpl < 0 || fapl < 0 || fcpl < 0 || H5Pget_layout(dcpl) != H5D_CONTIGUOUS ||
        H5Pget_external_count(dcpl) != 0 || H5Pget_driver(fapl) != H5FD_SEC2 ||
        H5Pget_userblock(fcpl, &ublock) < 0 || ublock != 0)
        goto done;
    haddr_t a = H5Dget_offset(dset);
    if (a == HADDR_UNDEF || H5Fget_vfd_handle(file, fapl, &handle) < 0 || !handle)
        goto done;
    *fd = *(int *)handle;
    *addr = (uint64_t)a;
    *size = (uint64_t)H5Dget_storage_size(dset);
    ok = 1;
done:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

int ckpt__h5_read(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel, void *buf, hid_t dxpl)
{
    int rc = check_dataset(dset, dtype, sel);
    if (rc != CKPT_OK)
        return rc;
    hid_t fspace, mspace;
    rc = select_box(&fspace, &mspace, dset, sel);
    if (rc == CKPT_OK && H5Dread(dset, ckpt__h5_mem_type(dtype), mspace, fspace, dxpl, buf) < 0)
        rc = ckpt__h5_error(CKPT_ECORRUPT, "H5Dread");
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    return rc;
}

int ckpt__h5_detach_file(hid_t file)
{
    void *handle = NULL;
    hid_t fapl = H5Fget_access_plist(file);
    int ok = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2 &&
             H5Fget_vfd_handle(file, fapl, &handle) >= 0 && handle;
    if (fapl >= 0)
        H5Pclose(fapl);
    H5Eclear2(H5E_DEFAULT);
    if (!ok)
        return 0;
    int mfd = memfd_create("mpickpt-discard", MFD_CLOEXEC);
    if (mfd < 0)
        return 0;
    int r = dup2(mfd, *(int *)handle);
    close(mfd);
    return r >= 0;
}

void ckpt__h5_abandon(hid_t file)
{
    if (ckpt__h5_detach_file(file))
        H5Fclose(file);
    H5Eclear2(H5E_DEFAULT);
}

int ckpt__h5_close_written(int rc, hid_t file, int rank, const char *name)
{
    if (rc != CKPT_OK)
        ckpt__h5_detach_file(file);
    errno = 0;
    if (H5Fclose(file) < 0) {
        if (rc == CKPT_OK)
            rc = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: close %s",
                                rank, name);
        ckpt__h5_abandon(file); /* else HDF5 keeps it and fails at exit */
    }
    return rc;
}
