/* A node's data file (per-node layout): its datasets made by the leader, every rank's bytes
 * written with pwrite. See nodefile.h. */
#include "nodefile.h"

#include "fragment.h"
#include "fsutil.h"
#include "h5io.h"
#include "index.h"
#include "mpickpt/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- this rank's list ------------------------------------------------------------------------ */

static uint64_t pack_total(const ckpt__shard_input *in)
{
    uint64_t total = 0;
    for (size_t j = 0; j < in->pieces->n; j++) {
        size_t len = ckpt__piece_len(in->regs, &in->pieces->v[j]);
        if (ckpt__shard_packs(in, len))
            total += len;
    }
    return total;
}

static void pack_path(char *out, size_t size, int rank)
{
    snprintf(out, size, "/packs/rank-%d", rank);
}

/* A piece's dataset path: the one lib/shard.c gives it. */
static int piece_path(char *out, size_t size, const ckpt__reg *g, const ckpt__piece *p)
{
    int whole = ckpt_slice_is_full(&p->slice, &g->shape);
    return ckpt__h5_dataset_path(out, size, g->stored, whole ? NULL : &p->slice);
}

int ckpt__nodefile_list(Mpickpt__Fragment *f, const ckpt__shard_input *in)
{
    size_t cap = 0;
    char path[16384];
    int rc = CKPT_OK;
    f->rank = in->rank;
    uint64_t total = pack_total(in);
    if (total > 0) {
        ckpt_shape sh;
        ckpt_slice full;
        ckpt__blob_box((size_t)total, &sh, &full);
        pack_path(path, sizeof path, in->rank);
        rc = ckpt__fragment_add(f, &cap, "(packed pieces)", CKPT_UINT8, &sh, CKPT_KIND_BLOB, &full,
                                "", path, &full, total, 0);
    }
    for (size_t j = 0; j < in->pieces->n && rc == CKPT_OK; j++) {
        const ckpt__piece *p = &in->pieces->v[j];
        const ckpt__reg *g = &in->regs->v[p->reg];
        size_t len = ckpt__piece_len(in->regs, p);
        if (total > 0 && ckpt__shard_packs(in, len))
            continue;
        if ((rc = piece_path(path, sizeof path, g, p)) == CKPT_OK)
            rc = ckpt__fragment_add(f, &cap, g->stored, g->dtype, &g->shape, g->kind, &p->slice, "",
                                    path, &p->slice, (uint64_t)len, 0);
    }
    for (size_t i = 0; i < in->regs->n && rc == CKPT_OK; i++) {
        const ckpt__reg *g = &in->regs->v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt_shape sh;
        ckpt_slice full;
        ckpt__blob_box(in->blob_len[i], &sh, &full);
        if ((rc = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) == CKPT_OK)
            rc = ckpt__fragment_add(f, &cap, g->stored, CKPT_UINT8, &sh, CKPT_KIND_BLOB, &full, "",
                                    path, &full, (uint64_t)in->blob_len[i], 0);
    }
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "rank %d: node file datasets", in->rank);
    return CKPT_OK;
}

/* ---- the leader: the file and its datasets --------------------------------------------------- */

void ckpt__nodefile_init(ckpt__nodefile *nf)
{
    memset(nf, 0, sizeof *nf);
    nf->fd = -1;
}

void ckpt__nodefile_free(ckpt__nodefile *nf)
{
    ckpt__close(nf->fd);
    free(nf->off);
    free(nf->first);
    ckpt__nodefile_init(nf);
}

/* One component below /tensors/ or /packs/, as the index's validation requires. */
static int dataset_path_ok(const char *ds)
{
    const char *c = NULL;
    if (!ds)
        return 0;
    if (strncmp(ds, "/tensors/", 9) == 0)
        c = ds + 9;
    else if (strncmp(ds, "/packs/", 7) == 0)
        c = ds + 7;
    return c && c[0] != '\0' && !strchr(c, '/') && strcmp(c, ".") != 0 && strcmp(c, "..") != 0;
}

/* A dataset of a list from the wire: its box inside its shape and its byte count exact. */
static int check_entry(const Mpickpt__Tensor *t, int rank, size_t j, ckpt_shape *sh,
                       ckpt_slice *held)
{
    const char *what = "bad dataset";
    int64_t n;
    uint64_t bytes;
    if (!t->name || strlen(t->name) > 4096 || !ckpt_dtype_valid((ckpt_dtype)t->dtype) ||
        t->n_shape > CKPT_MAX_DIMS || t->n_pieces != 1)
        goto bad;
    const Mpickpt__Piece *p = t->pieces[0];
    if (!dataset_path_ok(p->dataset)) {
        what = "bad dataset path";
        goto bad;
    }
    if (ckpt_shape_init(sh, (int)t->n_shape, t->shape) != CKPT_OK ||
        ckpt__piece_slice(held, p, (int)t->n_shape) != CKPT_OK ||
        ckpt_slice_validate(held, sh) != CKPT_OK || ckpt_slice_num_elements(&n, held) != CKPT_OK ||
        __builtin_mul_overflow((uint64_t)n, (uint64_t)ckpt_dtype_size((ckpt_dtype)t->dtype),
                               &bytes) ||
        bytes != p->bytes) {
        ckpt_error_clear(); /* kept: this function's own checks' error, replaced at `bad` */
        what = "box or byte count does not fit its shape";
        goto bad;
    }
    return CKPT_OK;
bad:
    return ckpt__error(CKPT_ECORRUPT, "node file: rank %d's dataset %zu: %s", rank, j, what);
}

/* Room for the metadata HDF5 writes at the close (ckpt__pad_create): as ckpt__shard_metadata_room,
 * for every dataset of the node. */
static uint64_t metadata_room(Mpickpt__Fragment *const *lists, size_t nlists)
{
    uint64_t room = (uint64_t)256 << 10;
    for (size_t i = 0; i < nlists; i++)
        for (size_t j = 0; j < lists[i]->n_tensors; j++)
            room += 4096 + 3 * (uint64_t)strlen(lists[i]->tensors[j]->name);
    return room;
}

/* Every dataset of every list, created in `file`; offsets into out->off. */
static int create_datasets(ckpt__nodefile *out, Mpickpt__Fragment *const *lists, const int *ranks,
                           size_t nlists, hid_t file, uint64_t *end)
{
    size_t k = 0;
    *end = 0;
    for (size_t i = 0; i < nlists; i++) {
        out->first[i] = k;
        for (size_t j = 0; j < lists[i]->n_tensors; j++, k++) {
            const Mpickpt__Tensor *t = lists[i]->tensors[j];
            ckpt_shape sh;
            ckpt_slice held;
            hid_t dset;
            int rc = check_entry(t, ranks[i], j, &sh, &held);
            if (rc == CKPT_OK)
                rc = ckpt__h5_create_dataset_early(&dset, file, t->pieces[0]->dataset, t->name,
                                                   (ckpt_dtype)t->dtype, &sh, &held);
            if (rc != CKPT_OK)
                return ckpt__error_wrap(rc, "rank %d's dataset", ranks[i]);
            uint64_t bytes = t->pieces[0]->bytes;
            haddr_t a = H5Dget_offset(dset);
            hsize_t stored = H5Dget_storage_size(dset);
            H5Dclose(dset);
            H5Eclear2(H5E_DEFAULT);
            if (bytes == 0) {
                out->off[k] = CKPT__NODEFILE_NO_EXTENT;
                continue;
            }
            if (a == HADDR_UNDEF || (uint64_t)stored != bytes || (uint64_t)a > UINT64_MAX - bytes)
                return ckpt__error(CKPT_EIO,
                                   "dataset %s of rank %d: no extent of %llu bytes at creation",
                                   t->pieces[0]->dataset, ranks[i], (unsigned long long)bytes);
            out->off[k] = (uint64_t)a;
            if ((uint64_t)a + bytes > *end)
                *end = (uint64_t)a + bytes;
        }
    }
    out->first[nlists] = k;
    return CKPT_OK;
}

int ckpt__nodefile_create(ckpt__nodefile *out, Mpickpt__Fragment *const *lists, const int *ranks,
                          size_t nlists, const ckpt__save_names *n, int tempfd)
{
    ckpt__nodefile_init(out);
    int me = nlists ? ranks[0] : 0;
    size_t total = 0;
    for (size_t i = 0; i < nlists; i++)
        total += lists[i]->n_tensors;
    out->off = malloc((total ? total : 1) * sizeof *out->off);
    out->first = malloc((nlists + 1) * sizeof *out->first);
    out->nlists = nlists;
    if (!out->off || !out->first) {
        ckpt__nodefile_free(out);
        return ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the node file", me);
    }
    int rc, fd = -1, pad = -1;
    char h5path[4800];
    if ((rc = ckpt__rmtree_at(tempfd, n->data_name, n->node_temp)) ||
        (rc = ckpt__file_create(&fd, tempfd, n->data_name, O_RDWR, n->node_temp))) {
        ckpt__nodefile_free(out);
        return ckpt__error_wrap(rc, "rank %d", me);
    }
    if ((rc = ckpt__fd_path(h5path, sizeof h5path, fd, n->my_file)) != CKPT_OK ||
        (rc = ckpt__pad_create(&pad, tempfd, n->pad_name, metadata_room(lists, nlists),
                               n->node_temp))) {
        close(fd);
        ckpt__nodefile_free(out);
        return ckpt__error_wrap(rc, "rank %d", me);
    }
    ckpt__h5_init();
    errno = 0;
    hid_t file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        rc = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: create %s", me,
                            n->my_file);
        ckpt__pad_release(tempfd, n->pad_name, pad);
        close(fd);
        ckpt__nodefile_free(out);
        return rc;
    }
    uint64_t end = 0;
    rc = create_datasets(out, lists, ranks, nlists, file, &end);
    /* The metadata flush at close gets the pad's room back; after a failure HDF5's descriptor is
     * moved off the disk first (as in ckpt__shard_write). */
    ckpt__pad_release(tempfd, n->pad_name, pad);
    rc = ckpt__h5_close_written(rc, file, me, n->my_file);
    struct stat st;
    if (rc == CKPT_OK && fstat(fd, &st) != 0)
        rc = ckpt__errno(errno, "stat", n->my_file);
    /* HDF5 sizes the file to its end of allocation at the close; a file that ends before an
     * extent would grow while the ranks write, after its size was recorded. */
    if (rc == CKPT_OK && (uint64_t)st.st_size < end)
        rc = ckpt__error(CKPT_EIO, "rank %d: %s ends at %llu bytes, before its last extent (%llu)",
                         me, n->my_file, (unsigned long long)st.st_size, (unsigned long long)end);
    if (rc != CKPT_OK) {
        close(fd);
        ckpt__nodefile_free(out);
        return ckpt__error_wrap(rc, "rank %d: node file %s", me, n->my_file);
    }
    out->fd = fd;
    out->size = (uint64_t)st.st_size;
    out->dev = (uint64_t)st.st_dev;
    out->ino = (uint64_t)st.st_ino;
    return CKPT_OK;
}

/* ---- every rank: its bytes ------------------------------------------------------------------- */

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *shown)
{
    const uint8_t *p = buf;
    while (len > 0) {
        size_t chunk = len < ((size_t)1 << 30) ? len : (size_t)1 << 30;
        ssize_t w = pwrite(fd, p, chunk, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ckpt__errno(errno, "write", shown);
        }
        if (w == 0)
            return ckpt__errno(EIO, "write", shown);
        p += w;
        off += (uint64_t)w;
        len -= (size_t)w;
    }
    return CKPT_OK;
}

/* The pack (lib/shard.h): written with pwrite at its place in the node's file. */
typedef struct pack_place {
    int fd;
    const char *shown;
    uint64_t at; /* the pack dataset's file offset */
} pack_place;

static int pack_write_fd(void *arg, uint64_t off, const void *buf, size_t len)
{
    const pack_place *pp = arg;
    return pwrite_all(pp->fd, buf, len, pp->at + off, pp->shown);
}

/* The next dataset's offset, checked against its length and the file's size. */
static int next_off(uint64_t *at, const uint64_t *off, size_t n_off, size_t *k, uint64_t len,
                    uint64_t size, const char *shown)
{
    if (*k >= n_off)
        return ckpt__error(CKPT_ECORRUPT, "%s: more datasets than the leader placed (%zu)", shown,
                           n_off);
    *at = off[(*k)++];
    if (len == 0)
        return CKPT_OK;
    if (*at == CKPT__NODEFILE_NO_EXTENT || *at > size || len > size - *at)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: dataset %zu placed at %llu, %llu bytes: outside the file (%llu)",
                           shown, *k - 1, (unsigned long long)*at, (unsigned long long)len,
                           (unsigned long long)size);
    return CKPT_OK;
}

static int write_all(ckpt__record *rec, const ckpt__shard_input *in, ckpt__shard_bufs *bufs,
                     const uint64_t *off, size_t n_off, uint64_t size, int fd, const char *shown)
{
    char path[16384];
    size_t k = 0;
    int rc = CKPT_OK;
    char pack_name[64];
    pack_path(pack_name, sizeof pack_name, in->rank);
    pack_place pp = {.fd = fd, .shown = shown};
    ckpt__pack pw = {.write = pack_write_fd, .arg = &pp, .path = pack_name};
    uint64_t total = pack_total(in);
    if (total > 0) {
        if (!bufs->pack_buf && !(bufs->pack_buf = malloc(CKPT__PACK_STAGE)))
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        pw.buf = bufs->pack_buf;
        if ((rc = next_off(&pp.at, off, n_off, &k, total, size, shown)) != CKPT_OK)
            return rc;
        pw.file_offset = pp.at;
    }
    for (size_t j = 0; j < in->pieces->n && rc == CKPT_OK; j++) {
        const ckpt__piece *p = &in->pieces->v[j];
        const ckpt__reg *g = &in->regs->v[p->reg];
        const void *bytes;
        size_t len;
        uint64_t at = 0; /* set by next_off(); GCC 12 -O3 cannot see it (maybe-uninitialized) */
        if ((rc = ckpt__piece_bytes(g, in->src[p->reg], p, &bufs->scratch, &bytes, &len)))
            break;
        if (total > 0 && ckpt__shard_packs(in, len)) {
            rc = ckpt__pack_add(rec, &pw, g, p, bytes, len);
            continue;
        }
        ckpt__written w = {.name = g->stored,
                           .dtype = g->dtype,
                           .kind = g->kind,
                           .shape = g->shape,
                           .slice = p->slice,
                           .dataset = path,
                           .dataset_slice = p->slice};
        for (int d = 0; d < w.dataset_slice.ndims; d++)
            w.dataset_slice.start[d] = 0;
        if ((rc = piece_path(path, sizeof path, g, p)) ||
            (rc = next_off(&at, off, n_off, &k, len, size, shown)) ||
            (len && (rc = pwrite_all(fd, bytes, len, at, shown))))
            break;
        w.file_offset = len ? at : 0;
        rc = ckpt__record_add_data(rec, &w, bytes, len);
    }
    if (rc == CKPT_OK)
        rc = ckpt__pack_flush(&pw);
    if (rc == CKPT_OK && pw.flushed != total)
        rc = ckpt__error(CKPT_ERROR, "internal: %llu packed bytes written, %llu expected",
                         (unsigned long long)pw.flushed, (unsigned long long)total);
    for (size_t i = 0; i < in->regs->n && rc == CKPT_OK; i++) {
        const ckpt__reg *g = &in->regs->v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        uint64_t at = 0; /* as above */
        ckpt__written w = {.name = g->stored,
                           .dtype = CKPT_UINT8,
                           .kind = CKPT_KIND_BLOB,
                           .dataset = path,
                           .bytes = in->blob_len[i],
                           .crc = ckpt_crc32c(in->blob_data[i], in->blob_len[i])};
        ckpt__blob_box(in->blob_len[i], &w.shape, &w.slice);
        w.dataset_slice = w.slice;
        if ((rc = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) ||
            (rc = next_off(&at, off, n_off, &k, in->blob_len[i], size, shown)) ||
            (in->blob_len[i] &&
             (rc = pwrite_all(fd, in->blob_data[i], in->blob_len[i], at, shown))))
            break;
        w.file_offset = in->blob_len[i] ? at : 0;
        rc = ckpt__record_add(rec, &w);
    }
    if (rc == CKPT_OK && k != n_off)
        rc = ckpt__error(CKPT_ECORRUPT, "%s: the leader placed %zu datasets, this rank has %zu",
                         shown, n_off, k);
    return rc;
}

int ckpt__nodefile_write(ckpt__record *rec, const ckpt__shard_input *in, ckpt__shard_bufs *bufs,
                         const uint64_t *off, size_t n_off, uint64_t size, int fd,
                         const char *shown)
{
    int rc = write_all(rec, in, bufs, off, n_off, size, fd, shown);
    if (rc == CKPT_OK)
        rc = ckpt__fsync_fd(fd, shown);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "rank %d", in->rank);
    return CKPT_OK;
}
