/* One rank's data file of a save (per-rank layout) and its space reservation: see shard.h. */
#include "shard.h"

#include "fsutil.h"
#include "h5io.h"
#include "mpickpt/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

void ckpt__shard_bufs_free(ckpt__shard_bufs *b)
{
    free(b->scratch.buf);
    free(b->pack_buf);
    memset(b, 0, sizeof *b);
}

int ckpt__shard_packs(const ckpt__shard_input *in, size_t len)
{
    return in->pack_max > 0 && (uint64_t)len <= (uint64_t)in->pack_max;
}

void ckpt__blob_box(size_t len, ckpt_shape *sh, ckpt_slice *full)
{
    int64_t n = (int64_t)len;
    ckpt_shape_init(sh, 1, &n);
    ckpt_slice_full(full, sh);
}

int ckpt__fd_size(uint64_t *size, int fd, const char *shown)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ckpt__errno(errno, "stat", shown);
    *size = (uint64_t)st.st_size;
    return CKPT_OK;
}

int ckpt__disk_full(int dirfd)
{
    struct statvfs v;
    if (fstatvfs(dirfd, &v) != 0)
        return 0;
    return (uint64_t)v.f_bavail * v.f_frsize < ((uint64_t)1 << 20);
}

uint64_t ckpt__shard_metadata_room(const ckpt__shard_input *in, const Mpickpt__Index *plan,
                                   int size)
{
    uint64_t room = (uint64_t)256 << 10;
    const ckpt__regs *regs = in->regs;
    if (plan) {
        for (size_t i = 0; i < plan->n_tensors; i++)
            room += 4096 + 3 * (uint64_t)strlen(plan->tensors[i]->name);
        room += (uint64_t)size * 4096; /* a blob per rank, at most a few */
    } else {
        for (size_t j = 0; j < in->pieces->n; j++)
            if (!ckpt__shard_packs(in, ckpt__piece_len(regs, &in->pieces->v[j])))
                room += 4096 + 3 * (uint64_t)strlen(regs->v[in->pieces->v[j].reg].stored);
    }
    for (size_t i = 0; i < regs->n; i++)
        if (regs->v[i].kind == CKPT_KIND_BLOB)
            room += 4096 + 3 * (uint64_t)strlen(regs->v[i].stored);
    return room;
}

/* ---- the pack: small pieces in one uint8 dataset, filled through a staging buffer -------------- */

int ckpt__pack_flush(ckpt__pack *pk)
{
    if (pk->fill == 0)
        return CKPT_OK;
    errno = 0;
    int rc = pk->write(pk->arg, pk->flushed, pk->buf, pk->fill);
    pk->flushed += pk->fill;
    pk->fill = 0;
    return rc;
}

int ckpt__pack_add(ckpt__record *rec, ckpt__pack *pk, const ckpt__reg *g, const ckpt__piece *p,
                   const void *bytes, size_t len)
{
    uint64_t off = pk->flushed + pk->fill;
    uint32_t crc = 0;
    int rc = CKPT_OK;
    if (len > CKPT__PACK_STAGE - pk->fill && (rc = ckpt__pack_flush(pk)) != CKPT_OK)
        return rc;
    off = pk->flushed + pk->fill;
    if (len <= CKPT__PACK_STAGE) {
        memcpy(pk->buf + pk->fill, bytes, len);
        crc = ckpt_crc32c(pk->buf + pk->fill, len); /* of the copy, while it is in cache */
        pk->fill += len;
    } else { /* a pack limit above the staging size: written straight from the source */
        if ((rc = pk->write(pk->arg, off, bytes, len)) != CKPT_OK)
            return rc;
        pk->flushed += len;
        crc = ckpt_crc32c(bytes, len);
    }
    ckpt__written w = { .name = g->stored, .dtype = g->dtype, .kind = g->kind, .shape = g->shape,
                        .slice = p->slice, .dataset = pk->path, .dataset_slice = p->slice,
                        .bytes = (uint64_t)len, .crc = crc, .packed = 1, .pack_offset = off,
                        .file_offset = pk->file_offset ? pk->file_offset + off : 0 };
    for (int d = 0; d < w.dataset_slice.ndims; d++)
        w.dataset_slice.start[d] = 0;
    return ckpt__record_add(rec, &w);
}

/* The per-rank pack: an HDF5 dataset of this rank's file. */
typedef struct pack_writer {
    ckpt__pack pk;
    hid_t dset;
    char path[64];
    uint64_t total; /* dataset size: every packed piece's bytes */
} pack_writer;

static int pack_write_h5(void *arg, uint64_t off, const void *buf, size_t len)
{
    pack_writer *pw = arg;
    ckpt_slice sel = { 1, { (int64_t)off }, { (int64_t)len } };
    return ckpt__h5_write(pw->dset, CKPT_UINT8, &sel, buf, H5P_DEFAULT);
}

/* Creates this save's pack dataset when some pieces are small enough to be packed. */
static int pack_open(const ckpt__shard_input *in, ckpt__shard_bufs *bufs, pack_writer *pw,
                     hid_t file)
{
    memset(pw, 0, sizeof *pw);
    pw->dset = H5I_INVALID_HID;
    snprintf(pw->path, sizeof pw->path, "/packs/rank-%d", in->rank);
    pw->pk.write = pack_write_h5;
    pw->pk.arg = pw;
    pw->pk.path = pw->path;
    for (size_t j = 0; j < in->pieces->n; j++) {
        size_t len = ckpt__piece_len(in->regs, &in->pieces->v[j]);
        if (ckpt__shard_packs(in, len))
            pw->total += len;
    }
    if (pw->total == 0)
        return CKPT_OK;
    if (!bufs->pack_buf && !(bufs->pack_buf = malloc(CKPT__PACK_STAGE)))
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    pw->pk.buf = bufs->pack_buf;
    int64_t total = (int64_t)pw->total;
    ckpt_shape sh;
    ckpt_slice full;
    ckpt_shape_init(&sh, 1, &total);
    ckpt_slice_full(&full, &sh);
    return ckpt__h5_create_dataset(&pw->dset, file, pw->path, "(packed pieces)", CKPT_UINT8, &sh,
                                   &full);
}

/* ---- the data file ------------------------------------------------------------------------------ */

/* Every piece and blob into `file`, recorded in rec. */
static int write_datasets(ckpt__record *rec, const ckpt__shard_input *in, ckpt__shard_bufs *bufs,
                          hid_t file)
{
    char path[16384];
    pack_writer pw;
    size_t first = rec->n; /* this file's records */
    int rc = pack_open(in, bufs, &pw, file);
    for (size_t j = 0; j < in->pieces->n && rc == CKPT_OK; j++) {
        const ckpt__piece *p = &in->pieces->v[j];
        const ckpt__reg *g = &in->regs->v[p->reg];
        int whole = ckpt_slice_is_full(&p->slice, &g->shape);
        const void *bytes;
        size_t len;
        hid_t dset;
        if ((rc = ckpt__piece_bytes(g, in->src[p->reg], p, &bufs->scratch, &bytes, &len)))
            break;
        if (pw.dset >= 0 && ckpt__shard_packs(in, len)) {
            rc = ckpt__pack_add(rec, &pw.pk, g, p, bytes, len);
            continue;
        }
        ckpt__written w = { .name = g->stored, .dtype = g->dtype, .kind = g->kind,
                            .shape = g->shape, .slice = p->slice, .dataset = path,
                            .dataset_slice = p->slice };
        for (int d = 0; d < w.dataset_slice.ndims; d++)
            w.dataset_slice.start[d] = 0;
        if ((rc = ckpt__h5_dataset_path(path, sizeof path, g->stored, whole ? NULL : &p->slice)) ||
            (rc = ckpt__h5_create_dataset(&dset, file, path, g->stored, g->dtype, &g->shape,
                                          &p->slice)))
            break;
        errno = 0;
        rc = ckpt__h5_write(dset, g->dtype, &w.dataset_slice, bytes, H5P_DEFAULT);
        w.file_offset = len ? ckpt__h5_offset(dset) : 0;
        H5Dclose(dset);
        if (rc == CKPT_OK)
            rc = ckpt__record_add_data(rec, &w, bytes, len);
    }
    if (pw.dset >= 0) {
        if (rc == CKPT_OK)
            rc = ckpt__pack_flush(&pw.pk);
        /* the packed pieces' offsets in the file, now that the pack is allocated */
        uint64_t base = rc == CKPT_OK ? ckpt__h5_offset(pw.dset) : 0;
        for (size_t k = first; base && k < rec->n; k++)
            if (rec->v[k].packed)
                rec->v[k].file_offset = base + rec->v[k].pack_offset;
        H5Dclose(pw.dset);
    }
    /* registered savers' bytes */
    for (size_t i = 0; i < in->regs->n && rc == CKPT_OK; i++) {
        const ckpt__reg *g = &in->regs->v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt__written w = { .name = g->stored, .dtype = CKPT_UINT8, .kind = CKPT_KIND_BLOB,
                            .dataset = path, .bytes = in->blob_len[i],
                            .crc = ckpt_crc32c(in->blob_data[i], in->blob_len[i]) };
        ckpt__blob_box(in->blob_len[i], &w.shape, &w.slice);
        w.dataset_slice = w.slice;
        hid_t dset;
        if ((rc = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) ||
            (rc = ckpt__h5_create_dataset(&dset, file, path, g->stored, CKPT_UINT8, &w.shape,
                                          &w.slice)))
            break;
        rc = ckpt__h5_write(dset, CKPT_UINT8, &w.slice, in->blob_data[i], H5P_DEFAULT);
        w.file_offset = in->blob_len[i] ? ckpt__h5_offset(dset) : 0;
        H5Dclose(dset);
        if (rc == CKPT_OK)
            rc = ckpt__record_add(rec, &w);
    }
    return rc;
}

int ckpt__shard_write(ckpt__record *rec, const ckpt__shard_input *in, ckpt__shard_bufs *bufs,
                      const ckpt__save_names *n, int tempfd, ckpt__fault_fn fault)
{
    int rc, fd;
    char h5path[4800];
    /* A file left by a crashed save goes first; the new one is ours alone (O_EXCL), and HDF5
     * reaches it through the descriptor. */
    if ((rc = ckpt__rmtree_at(tempfd, n->data_name, n->my_temp)) ||
        (rc = ckpt__file_create(&fd, tempfd, n->data_name, O_RDWR, n->my_temp)))
        return ckpt__error_wrap(rc, "rank %d", in->rank);
    int pad = -1;
    if ((rc = ckpt__fd_path(h5path, sizeof h5path, fd, n->my_file)) != CKPT_OK ||
        (rc = ckpt__pad_create(&pad, tempfd, n->pad_name, ckpt__shard_metadata_room(in, NULL, 0),
                               n->my_temp))) {
        close(fd);
        return ckpt__error_wrap(rc, "rank %d", in->rank);
    }
    ckpt__h5_init();
    errno = 0;
    hid_t file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        rc = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: create %s",
                            in->rank, n->my_file);
        ckpt__pad_release(tempfd, n->pad_name, pad);
        close(fd);
        return rc;
    }
    rc = write_datasets(rec, in, bufs, file);
    if (rc == CKPT_OK && fault)
        rc = fault(in->rank, "write");
    /* The flush at close gets the pad's room back; after a failure HDF5's descriptor is moved off
     * the disk first, so that the close can neither fail nor leave HDF5 unable to exit. */
    ckpt__pad_release(tempfd, n->pad_name, pad);
    rc = ckpt__h5_close_written(rc, file, in->rank, n->my_file);
    uint64_t size = 0;
    if (rc == CKPT_OK && !(rc = ckpt__fsync_fd(fd, n->my_file)) &&
        !(rc = ckpt__fd_size(&size, fd, n->my_file)))
        rc = ckpt__record_add_file(rec, n->data_name, size);
    close(fd);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "rank %d: write %s", in->rank, n->my_file);
    return CKPT_OK;
}

/* ---- space reservation -------------------------------------------------------------------------- */

int ckpt__shard_reserve(int *fd, const ckpt__shard_input *in, const ckpt__save_names *n,
                        int tempfd)
{
    *fd = -1;
    uint64_t need = 0;
    for (size_t j = 0; j < in->pieces->n; j++)
        need += ckpt__piece_len(in->regs, &in->pieces->v[j]);
    for (size_t i = 0; i < in->regs->n; i++)
        if (in->regs->v[i].kind == CKPT_KIND_BLOB)
            need += in->blob_len[i];
    need += (1u << 20) + need / 64;
    const char *dir = n->shared ? n->chief_temp : n->my_temp;
    int rc = ckpt__rmtree_at(tempfd, n->reserve_name, dir);
    if (rc == CKPT_OK)
        rc = ckpt__file_create(fd, tempfd, n->reserve_name, O_WRONLY, dir);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "rank %d: space reservation", in->rank);
    if (fallocate(*fd, 0, 0, (off_t)need) != 0) {
        int err = errno;
        if (err == EOPNOTSUPP || err == ENOSYS)
            return CKPT_OK; /* cannot tell in advance here */
        if (err == ENOSPC || err == EDQUOT)
            return ckpt__error(CKPT_ENOSPC,
                               "rank %d: no space left on device for this checkpoint: %llu bytes "
                               "needed in %s",
                               in->rank, (unsigned long long)need, dir);
        return ckpt__errno(err, "fallocate", dir);
    }
    return CKPT_OK;
}

void ckpt__shard_release(const ckpt__save_names *n, int tempfd, int fd)
{
    if (fd >= 0) {
        close(fd);
        unlinkat(tempfd, n->reserve_name, 0);
    }
}
