/* Hostile rewrites of a checkpoint's HDF5 data file (issue 12, "files that lie"), shared by
 * tests/unit/test_hostile_h5.c and tests/mpi/test_hostile.c.
 *
 * hostile_apply() replaces one dataset of a data file by something mpickpt never writes, under
 * the same name and with the same HDF5 type and extent: external storage (in /etc/passwd, or in
 * a FIFO), a soft or external link, a virtual dataset, a chunked, deflated or compact dataset, a
 * group; or it replaces the dataset's group (/tensors, /packs) by a soft or external link.
 * hostile_fix_index() then records in the index the data file's new size and, for every piece
 * stored in that dataset, the CRC-32C of the bytes HDF5 would now return for it, so that sizes
 * and checksums agree and only a check of how the dataset is stored can catch the lie.
 *
 * Nothing here ever writes a dataset with external storage or a virtual one: their bytes live in
 * other files (/etc/passwd among them; the tests may run as root). */
#ifndef MPICKPT_TESTS_HOSTILE_H5_H
#define MPICKPT_TESTS_HOSTILE_H5_H

#include "index.h"
#include "mpickpt/crc32c.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HOSTILE_SECRET "/etc/passwd"

typedef enum hostile_kind {
    H_EXT_PASSWD,  /* external storage: the first N bytes of /etc/passwd */
    H_EXT_FIFO,    /* external storage in a FIFO */
    H_SOFT,        /* a soft link to another dataset of the file (other values, matching CRC) */
    H_ELINK_FIFO,  /* an external link into a FIFO */
    H_ELINK_H5,    /* an external link to a dataset of another HDF5 file (matching CRC) */
    H_VDS_FIFO,    /* a virtual dataset whose source file is a FIFO */
    H_VDS_H5,      /* a virtual dataset whose source is another HDF5 file (matching CRC) */
    H_CHUNKED,     /* the same values, chunked */
    H_DEFLATE,     /* the same values, chunked and deflated */
    H_COMPACT,     /* the same values, compact layout */
    H_GROUP,       /* a group where the dataset was */
    H_GROUP_SOFT,  /* the dataset's group (/tensors) replaced by a soft link to its real self */
    H_GROUP_ELINK, /* the dataset's group replaced by an external link into a copy of the file */
    H_COUNT
} hostile_kind;

static const char *const hostile_names[H_COUNT] = {
    "ext-passwd", "ext-fifo", "soft",    "elink-fifo", "elink-h5",   "vds-fifo",    "vds-h5",
    "chunked",    "deflate",  "compact", "group",      "group-soft", "group-elink",
};

/* What the reader's message must say it found. */
static const char *const hostile_found[H_COUNT] = {
    "has external storage", "has external storage", "is a soft link",
    "is an external link",  "is an external link",  "is a virtual dataset",
    "is a virtual dataset", "chunked layout",       "filter",
    "compact layout",       "is a group",           "is a soft link",
    "is an external link",
};

/* Whether the replacement's group itself is the lie (the message then names the group). */
static inline int hostile_is_group_kind(hostile_kind k)
{
    return k == H_GROUP_SOFT || k == H_GROUP_ELINK;
}

static inline int hostile_kind_from_name(hostile_kind *out, const char *name)
{
    for (int k = 0; k < H_COUNT; k++)
        if (strcmp(hostile_names[k], name) == 0) {
            *out = (hostile_kind)k;
            return 0;
        }
    return -1;
}

/* Reads a whole (small) file; NULL on error. */
static inline uint8_t *hostile_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    *len = n;
    return buf;
}

static inline int hostile_copy_file(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = hostile_slurp(from, &n);
    FILE *f = b ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    free(b);
    return ok ? 0 : -1;
}

/* Bytes no checkpoint of the tests holds: what decoys are filled with. */
static inline void hostile_decoy_bytes(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 7 + 3);
}

/* Creates `path` (a new HDF5 file) with one dataset /x of `type` and `space` holding `bytes`. */
static inline int hostile_make_other(const char *path, hid_t type, hid_t space, const void *bytes)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dcreate2(f, "/x", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                     : H5I_INVALID_HID;
    int ok = d >= 0 && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes) >= 0;
    if (d >= 0)
        H5Dclose(d);
    if (f >= 0 && H5Fclose(f) < 0)
        ok = 0;
    return ok ? 0 : -1;
}

/*
 * Replaces dataset `dset` of the data file `data` (absolute path) as `kind` says. `fifo` is an
 * absolute path of a FIFO (the FIFO kinds). On success *bytes (malloc'd, *n bytes; NULL when
 * nothing can be read any more or the values did not change) holds what H5Dread of the
 * replacement would return. Returns 0, or -1 after printing why.
 */
static inline int hostile_apply(const char *data, const char *dset, hostile_kind kind,
                                const char *fifo, uint8_t **bytes, size_t *n)
{
    int ok = 0;
    char other[4300], group[1024];
    hid_t file = H5I_INVALID_HID, d = H5I_INVALID_HID, type = H5I_INVALID_HID;
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, nd = H5I_INVALID_HID;
    uint8_t *orig = NULL, *repl = NULL;
    size_t len = 0;
    *bytes = NULL;
    *n = 0;
    snprintf(other, sizeof other, "%s.other.h5", data);
    snprintf(group, sizeof group, "%s", dset);
    char *slash = strrchr(group, '/');
    if (!slash || slash == group) {
        fprintf(stderr, "hostile_apply: %s is not in a group\n", dset);
        return -1;
    }
    *slash = '\0';

    if (kind == H_GROUP_ELINK) { /* the link's target: the file as it is now */
        snprintf(other, sizeof other, "%s.orig.h5", data);
        if (hostile_copy_file(data, other) != 0) {
            fprintf(stderr, "hostile_apply: copy %s\n", data);
            return -1;
        }
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if ((file = H5Fopen(data, H5F_ACC_RDWR, H5P_DEFAULT)) < 0)
        goto out;

    /* The original, read from a file the test just wrote (trusted). */
    if ((d = H5Dopen2(file, dset, H5P_DEFAULT)) < 0 || (type = H5Dget_type(d)) < 0 ||
        (space = H5Dget_space(d)) < 0)
        goto out;
    hssize_t np = H5Sget_simple_extent_npoints(space);
    len = (size_t)np * H5Tget_size(type);
    orig = malloc(len ? len : 1);
    repl = malloc(len ? len : 1);
    if (np < 0 || !orig || !repl ||
        (len && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, orig) < 0))
        goto out;
    H5Dclose(d);
    d = H5I_INVALID_HID;
    hostile_decoy_bytes(repl, len);

    if (kind == H_GROUP_SOFT) {
        ok = H5Lmove(file, group, file, "/hostile-real", H5P_DEFAULT, H5P_DEFAULT) >= 0 &&
             H5Lcreate_soft("/hostile-real", file, group, H5P_DEFAULT, H5P_DEFAULT) >= 0;
        goto out;
    }
    if (kind == H_GROUP_ELINK) {
        ok = H5Ldelete(file, group, H5P_DEFAULT) >= 0 &&
             H5Lcreate_external(other, group, file, group, H5P_DEFAULT, H5P_DEFAULT) >= 0;
        goto out;
    }
    if (H5Ldelete(file, dset, H5P_DEFAULT) < 0 || (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0)
        goto out;
    int ndims = H5Sget_simple_extent_ndims(space);
    hsize_t dims[32], chunk[32];
    if (ndims < 1 || ndims > 32 || H5Sget_simple_extent_dims(space, dims, NULL) != ndims)
        goto out; /* the layouts below need a simple, non-empty extent */
    for (int i = 0; i < ndims; i++)
        chunk[i] = dims[i] > 2 ? 2 : (dims[i] ? dims[i] : 1);

    switch (kind) {
    case H_EXT_PASSWD:
    case H_EXT_FIFO: {
        /* Never written: HDF5 neither allocates nor fills external storage on create. */
        const char *target = kind == H_EXT_PASSWD ? HOSTILE_SECRET : fifo;
        if (H5Pset_external(dcpl, target, 0, (hsize_t)len) < 0 ||
            H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0)
            goto out;
        nd = H5Dcreate2(file, dset, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (nd < 0)
            goto out;
        if (kind == H_EXT_PASSWD) {
            size_t slen;
            uint8_t *secret = hostile_slurp(HOSTILE_SECRET, &slen);
            if (!secret || slen < len) {
                fprintf(stderr, "hostile_apply: %s has fewer than %zu bytes\n", HOSTILE_SECRET,
                        len);
                free(secret);
                goto out;
            }
            memcpy(repl, secret, len);
            free(secret);
            *bytes = repl;
            repl = NULL;
        }
        ok = 1;
        break;
    }
    case H_SOFT:
        nd = H5Dcreate2(file, "/hostile-decoy", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ok = nd >= 0 && H5Dwrite(nd, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, repl) >= 0 &&
             H5Lcreate_soft("/hostile-decoy", file, dset, H5P_DEFAULT, H5P_DEFAULT) >= 0;
        if (ok) {
            *bytes = repl;
            repl = NULL;
        }
        break;
    case H_ELINK_FIFO:
        ok = H5Lcreate_external(fifo, "/x", file, dset, H5P_DEFAULT, H5P_DEFAULT) >= 0;
        break;
    case H_ELINK_H5:
        ok = hostile_make_other(other, type, space, repl) == 0 &&
             H5Lcreate_external(other, "/x", file, dset, H5P_DEFAULT, H5P_DEFAULT) >= 0;
        if (ok) {
            *bytes = repl;
            repl = NULL;
        }
        break;
    case H_VDS_FIFO:
    case H_VDS_H5:
        if (kind == H_VDS_H5 && hostile_make_other(other, type, space, repl) != 0)
            goto out;
        if (H5Pset_virtual(dcpl, space, kind == H_VDS_H5 ? other : fifo, "/x", space) < 0)
            goto out;
        nd = H5Dcreate2(file, dset, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ok = nd >= 0;
        if (ok && kind == H_VDS_H5) {
            *bytes = repl;
            repl = NULL;
        }
        break;
    case H_CHUNKED:
    case H_DEFLATE:
    case H_COMPACT:
        if (kind == H_COMPACT ? H5Pset_layout(dcpl, H5D_COMPACT) < 0
                              : H5Pset_chunk(dcpl, ndims, chunk) < 0)
            goto out;
        if (kind == H_DEFLATE && H5Pset_deflate(dcpl, 6) < 0)
            goto out;
        nd = H5Dcreate2(file, dset, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ok = nd >= 0 && H5Dwrite(nd, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, orig) >= 0;
        break;
    case H_GROUP:
        nd = H5Gcreate2(file, dset, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ok = nd >= 0;
        if (nd >= 0)
            H5Gclose(nd);
        nd = H5I_INVALID_HID;
        break;
    default:
        break;
    }
out:
    if (nd >= 0)
        H5Dclose(nd);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    if (d >= 0)
        H5Dclose(d);
    if (file >= 0 && H5Fclose(file) < 0)
        ok = 0;
    free(orig);
    free(repl);
    if (!ok) {
        fprintf(stderr, "hostile_apply: %s on %s of %s failed\n", hostile_names[kind], dset, data);
        free(*bytes);
        *bytes = NULL;
        return -1;
    }
    *n = *bytes ? len : 0;
    return 0;
}

/*
 * Rewrites the index at `index_path` so that it agrees with the rewritten data file `data`
 * (named `file_name` in the index): the file's size, and, when `bytes` is not NULL (the `n`
 * bytes HDF5 now returns for dataset `dset`), every piece stored in `dset` gets the CRC-32C (and
 * block CRC-32Cs) of its bytes. Pieces must be whole datasets or packed ranges of one.
 */
static inline int hostile_fix_index(const char *index_path, const char *file_name, const char *data,
                                    const char *dset, const uint8_t *bytes, size_t n)
{
    Mpickpt__Index *idx = NULL;
    struct stat st;
    int rc = ckpt__index_load(&idx, index_path);
    if (rc != CKPT_OK || stat(data, &st) != 0) {
        fprintf(stderr, "hostile_fix_index: load %s / stat %s failed\n", index_path, data);
        if (idx)
            mpickpt__index__free_unpacked(idx, NULL);
        return -1;
    }
    for (size_t i = 0; i < idx->n_files; i++)
        if (strcmp(idx->files[i]->name, file_name) == 0)
            idx->files[i]->bytes = (uint64_t)st.st_size;
    for (size_t i = 0; bytes && i < idx->n_tensors; i++) {
        Mpickpt__Tensor *t = idx->tensors[i];
        for (size_t j = 0; j < t->n_pieces; j++) {
            Mpickpt__Piece *p = t->pieces[j];
            if (strcmp(p->file, file_name) != 0 || strcmp(p->dataset, dset) != 0)
                continue;
            uint64_t off = p->packed ? p->pack_offset : 0;
            if ((!p->packed && p->bytes != n) || off > n || p->bytes > n - off) {
                fprintf(stderr, "hostile_fix_index: piece of '%s' is not all of %s\n", t->name,
                        dset);
                mpickpt__index__free_unpacked(idx, NULL);
                return -1;
            }
            p->crc32c = ckpt_crc32c(bytes + off, (size_t)p->bytes);
            for (size_t b = 0; b < p->n_block_crc32c; b++) {
                uint64_t bo = (uint64_t)b * p->block_bytes;
                uint64_t bl = p->bytes - bo < p->block_bytes ? p->bytes - bo : p->block_bytes;
                p->block_crc32c[b] = ckpt_crc32c(bytes + off + bo, (size_t)bl);
            }
        }
    }
    rc = ckpt__index_store(idx, index_path);
    mpickpt__index__free_unpacked(idx, NULL);
    if (rc != CKPT_OK)
        fprintf(stderr, "hostile_fix_index: store %s failed\n", index_path);
    return rc == CKPT_OK ? 0 : -1;
}

/* Whether any `win`-byte window of /etc/passwd's first `slen` bytes occurs in buf. */
static inline int hostile_holds_secret(const void *buf, size_t len, const uint8_t *secret,
                                       size_t slen, size_t win)
{
    const uint8_t *b = buf;
    for (size_t i = 0; i + win <= len; i++)
        for (size_t j = 0; j + win <= slen; j++)
            if (memcmp(b + i, secret + j, win) == 0)
                return 1;
    return 0;
}

#endif
