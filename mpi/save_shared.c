/*
 * The shared layout's write (docs/design.md §4.2): every rank's pieces in one HDF5 file through the
 * MPI-IO driver, a partitioned tensor as one global dataset that any HDF5 reader reassembles.
 * Collective over the save's communicator; a rank that fails keeps joining the collective calls.
 * Each piece is recorded (lib/record.c) with its checksums at its own coordinates.
 */
#include "saver_internal.h"

#include "fsutil.h"
#include "h5io.h"
#include "index.h"
#include "mpickpt/collective.h"
#include "mpickpt/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

static int cmp_tensor_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(Mpickpt__Tensor *const *)elem)->name);
}

/* A dataset of the shared file: name, dtype, global shape, and (for a blob) its owner. */
typedef struct shared_ds {
    const char *name;
    ckpt_dtype dtype;
    ckpt_shape shape;
    int blob_owner; /* -1 unless a blob */
    hid_t id;
} shared_ds;

static int cmp_shared_ds(const void *a, const void *b)
{
    return strcmp(((const shared_ds *)a)->name, ((const shared_ds *)b)->name);
}

/* Every rank's blob names and sizes for this save (the shared file's datasets must be created by
 * all ranks alike). Collective. Returns a fragment per rank with one tensor per blob, in *arena
 * (free with ckpt__free_frags). */
static int gather_blobs(ckpt_saver *s, save_ctx *c, int local, Mpickpt__Fragment ***out,
                        ckpt__arena **arena)
{
    Mpickpt__Fragment f = MPICKPT__FRAGMENT__INIT;
    size_t cap = 0;
    f.rank = s->rank;
    char file[32];
    snprintf(file, sizeof file, "blobs-%d", s->rank);
    for (size_t i = 0; i < s->regs.n && local == CKPT_OK; i++) {
        const ckpt__reg *g = &s->regs.v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt_shape sh;
        ckpt_slice full;
        ckpt__blob_box(c->blob_len[i], &sh, &full);
        local = ckpt__fragment_add(&f, &cap, g->stored, CKPT_UINT8, &sh, CKPT_KIND_BLOB, &full,
                                   file, "/tensors/blob", &full, (uint64_t)c->blob_len[i], 0);
    }
    int rc = ckpt__allgather_fragments(s, c->comm, &f, local, out, arena);
    ckpt__fragment_free_built(&f);
    return rc;
}

/* The shared file's datasets, sorted by name: the plan's tensors, then every rank's blobs (the
 * identical list on every rank; an allocation failure is agreed before HDF5). Collective. */
static int shared_datasets(shared_ds **out, size_t *out_n, ckpt_saver *s, save_ctx *c,
                           Mpickpt__Fragment **blobs)
{
    int rc = CKPT_OK;
    size_t nblobs = 0;
    for (int r = 0; r < s->size; r++)
        nblobs += blobs[r]->n_tensors;
    size_t nds = s->plan.n_tensors + nblobs;
    shared_ds *ds = calloc(nds ? nds : 1, sizeof *ds);
    if (!ds)
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; ds && i < s->plan.n_tensors; i++, k++) {
        const Mpickpt__Tensor *t = s->plan.tensors[i];
        ds[k].name = t->name;
        ds[k].dtype = (ckpt_dtype)t->dtype;
        ckpt_shape_init(&ds[k].shape, (int)t->n_shape, t->shape);
        ds[k].blob_owner = -1;
        ds[k].id = H5I_INVALID_HID;
    }
    for (int r = 0; ds && r < s->size; r++)
        for (size_t i = 0; i < blobs[r]->n_tensors; i++, k++) {
            const Mpickpt__Tensor *t = blobs[r]->tensors[i];
            ds[k].name = t->name;
            ds[k].dtype = CKPT_UINT8;
            ckpt_shape_init(&ds[k].shape, (int)t->n_shape, t->shape);
            ds[k].blob_owner = r;
            ds[k].id = H5I_INVALID_HID;
        }
    if (ds)
        qsort(ds, nds, sizeof *ds, cmp_shared_ds);
    if ((rc = ckpt_mpi_agree(c->comm, rc)) != CKPT_OK) {
        free(ds);
        return rc;
    }
    *out = ds;
    *out_n = nds;
    return CKPT_OK;
}

/* The chief creates the file (O_EXCL, in its own temp dir) and the pad that keeps room for the
 * metadata flush; then every rank opens that file by descriptor and hands MPI-IO its
 * /proc/self/fd name, so no rank can be sent elsewhere; then HDF5 creates it on every rank. On
 * failure (agreed) nothing is left open. Collective. */
static int open_shared_file(hid_t *file_out, int *fd_out, int *pad_out, ckpt_saver *s,
                            save_ctx *c, const ckpt__shard_input *in)
{
    int rc;
    int fd = -1, pad = -1, local = CKPT_OK;
    char h5path[4800];
    if (s->rank == 0 && (local = ckpt__rmtree_at(c->tempfd, c->n.data_name, c->n.chief_temp)) == CKPT_OK)
        local = ckpt__file_create(&fd, c->tempfd, c->n.data_name, O_RDWR, c->n.chief_temp);
    if (s->rank == 0 && local == CKPT_OK) /* room for the metadata flush (ckpt__pad_create) */
        local = ckpt__pad_create(&pad, c->tempfd, c->n.pad_name, ckpt__shard_metadata_room(in, &s->plan, s->size), c->n.chief_temp);
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK) {
        ckpt__pad_release(c->tempfd, c->n.pad_name, pad);
        ckpt__close(fd);
        return rc;
    }
    if (s->rank != 0)
        local = ckpt__file_open(&fd, NULL, c->tempfd, c->n.data_name, O_RDWR, c->n.chief_temp);
    if (local == CKPT_OK)
        local = ckpt__fd_path(h5path, sizeof h5path, fd, c->n.my_file);
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK) {
        ckpt__pad_release(c->tempfd, c->n.pad_name, pad);
        ckpt__close(fd);
        return rc;
    }
    ckpt__h5_init();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, c->comm, s->opts.info);
    H5Pset_all_coll_metadata_ops(fapl, 1);
    H5Pset_coll_metadata_write(fapl, 1);
    errno = 0;
    hid_t file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    local = file < 0 ? ckpt__h5_error(CKPT_EIO, "rank %d: create shared file %s", s->rank,
                                      c->n.my_file)
                     : CKPT_OK;
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK) {
        if (file >= 0)
            H5Fclose(file);
        ckpt__pad_release(c->tempfd, c->n.pad_name, pad);
        ckpt__close(fd);
        return rc;
    }
    *file_out = file;
    *fd_out = fd;
    *pad_out = pad;
    return CKPT_OK;
}

/* Collective I/O: every rank calls H5Dwrite the same number of times per dataset: the most pieces
 * any rank stores in it (from the plan), with empty selections for the calls it does not need.
 * Returns `local` or this rank's first error (it keeps joining the calls). */
static int write_collective(ckpt_saver *s, save_ctx *c, shared_ds *ds, size_t nds, hid_t dxpl,
                            int local)
{
    for (size_t i = 0; i < nds; i++) {
        size_t calls = 0, mine = 0;
        if (ds[i].blob_owner >= 0) {
            calls = 1;
        } else {
            Mpickpt__Tensor **hit = bsearch(ds[i].name, s->plan.tensors, s->plan.n_tensors,
                                            sizeof *s->plan.tensors, cmp_tensor_name);
            size_t *per = calloc((size_t)s->size, sizeof *per);
            for (size_t j = 0; hit && per && j < (*hit)->n_pieces; j++)
                per[(*hit)->pieces[j]->rank]++;
            for (int r = 0; per && r < s->size; r++)
                calls = per[r] > calls ? per[r] : calls;
            free(per);
        }
        for (size_t call = 0; call < calls; call++) {
            const void *bytes = "";
            ckpt_slice sel;
            ckpt_slice_full(&sel, &ds[i].shape);
            for (int d = 0; d < sel.ndims; d++)
                sel.count[d] = 0;
            int have = 0;
            if (ds[i].blob_owner == s->rank) {
                for (size_t g = 0; g < s->regs.n; g++)
                    if (s->regs.v[g].kind == CKPT_KIND_BLOB &&
                        strcmp(s->regs.v[g].stored, ds[i].name) == 0) {
                        ckpt_slice_full(&sel, &ds[i].shape);
                        bytes = c->blob_data[g];
                        have = 1;
                    }
            } else if (ds[i].blob_owner < 0) {
                for (size_t j = 0; j < s->pieces.n; j++) {
                    const ckpt__piece *p = &s->pieces.v[j];
                    const ckpt__reg *g = &s->regs.v[p->reg];
                    if (strcmp(g->stored, ds[i].name) != 0 || mine++ != call)
                        continue;
                    size_t len;
                    if (local == CKPT_OK)
                        local = ckpt__piece_bytes(g, c->src[p->reg], p, &s->bufs.scratch,
                                                  &bytes, &len);
                    sel = p->slice;
                    have = 1;
                    break;
                }
                mine = 0;
            }
            if (!have || local != CKPT_OK) {
                for (int d = 0; d < sel.ndims; d++)
                    sel.count[d] = 0;
                if (sel.ndims == 0) { /* a scalar: select none through a 1-d empty box */
                    hid_t fs = H5Dget_space(ds[i].id), ms;
                    hsize_t one = 1;
                    ms = H5Screate_simple(1, &one, NULL);
                    H5Sselect_none(fs);
                    H5Sselect_none(ms);
                    if (H5Dwrite(ds[i].id, ckpt__h5_mem_type(ds[i].dtype), ms, fs, dxpl, "") <
                            0 &&
                        local == CKPT_OK)
                        local = ckpt__h5_error(CKPT_EIO, "rank %d: empty write", s->rank);
                    H5Sclose(ms);
                    H5Sclose(fs);
                    continue;
                }
            }
            int r = ckpt__h5_write(ds[i].id, ds[i].dtype, &sel, bytes, dxpl);
            if (r != CKPT_OK && local == CKPT_OK)
                local = r;
        }
    }
    return local;
}

/* Independent I/O: this rank's pieces, then its blobs. */
static int write_independent(ckpt_saver *s, save_ctx *c, shared_ds *ds, size_t nds, hid_t dxpl,
                             int local)
{
    for (size_t j = 0; j < s->pieces.n && local == CKPT_OK; j++) {
        const ckpt__piece *p = &s->pieces.v[j];
        const ckpt__reg *g = &s->regs.v[p->reg];
        shared_ds key = { g->stored, CKPT_DTYPE_INVALID, { 0, { 0 } }, 0, 0 };
        shared_ds *hit = bsearch(&key, ds, nds, sizeof *ds, cmp_shared_ds);
        const void *bytes;
        size_t len;
        if (!hit)
            local = ckpt__error(CKPT_ERROR, "tensor '%s' missing from the plan", g->stored);
        else if ((local = ckpt__piece_bytes(g, c->src[p->reg], p, &s->bufs.scratch, &bytes,
                                            &len)) == CKPT_OK)
            local = ckpt__h5_write(hit->id, g->dtype, &p->slice, bytes, dxpl);
    }
    for (size_t i = 0; i < s->regs.n && local == CKPT_OK; i++) {
        const ckpt__reg *g = &s->regs.v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        shared_ds key = { g->stored, CKPT_DTYPE_INVALID, { 0, { 0 } }, 0, 0 };
        shared_ds *hit = bsearch(&key, ds, nds, sizeof *ds, cmp_shared_ds);
        ckpt_slice full;
        ckpt_slice_full(&full, &hit->shape);
        local = ckpt__h5_write(hit->id, CKPT_UINT8, &full, c->blob_data[i], dxpl);
    }
    return local;
}

/* This rank's fragment: its pieces sit in the one global dataset at their own coordinates. */
static int record_shared(ckpt_saver *s, save_ctx *c, int local)
{
    char path[16384];
    for (size_t j = 0; j < s->pieces.n && local == CKPT_OK; j++) {
        const ckpt__piece *p = &s->pieces.v[j];
        const ckpt__reg *g = &s->regs.v[p->reg];
        const void *bytes;
        size_t len;
        if ((local = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) ||
            (local = ckpt__piece_bytes(g, c->src[p->reg], p, &s->bufs.scratch, &bytes, &len)))
            break;
        ckpt__written w = { .name = g->stored, .dtype = g->dtype, .kind = g->kind,
                            .shape = g->shape, .slice = p->slice, .dataset = path,
                            .dataset_slice = p->slice };
        local = ckpt__record_add_data(&c->rec, &w, bytes, len);
    }
    for (size_t i = 0; i < s->regs.n && local == CKPT_OK; i++) {
        const ckpt__reg *g = &s->regs.v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt__written w = { .name = g->stored, .dtype = CKPT_UINT8, .kind = CKPT_KIND_BLOB,
                            .dataset = path, .bytes = c->blob_len[i],
                            .crc = ckpt_crc32c(c->blob_data[i], c->blob_len[i]) };
        ckpt__blob_box(c->blob_len[i], &w.shape, &w.slice);
        w.dataset_slice = w.slice;
        if ((local = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) == CKPT_OK)
            local = ckpt__record_add(&c->rec, &w);
    }
    return local;
}

/* The end of a shared save on every rank: the full-disk cause named, the pad released once every
 * rank is done writing, the collective flush and close, the chief's fsync of the file and its
 * record. Returns `local` or the first error. Collective. */
static int close_shared(ckpt_saver *s, save_ctx *c, hid_t file, int fd, int pad, int local)
{
    /* MPI-IO reports a full disk as a plain I/O error: say what it was when the disk is full. */
    if (local == CKPT_ENOSPC || (local == CKPT_EIO && ckpt__disk_full(c->tempfd)))
        local = ckpt__error_set_errno(ckpt__error_wrap(CKPT_ENOSPC, "rank %d: no space left on "
                                                       "device in %s", s->rank, c->n.chief_temp),
                                      ENOSPC);
    /* The metadata flush below gets the pad's room back (ckpt__pad_create), but only once every
     * rank is done writing data: with independent I/O a rank still writing on a full disk takes
     * every block the pad frees, the chief's metadata write then fails, its H5Fflush returns
     * before the collective MPI_File_sync the other ranks wait in, and the job hangs. */
    if (MPI_Barrier(c->comm) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Barrier before the metadata flush failed",
                            s->rank);
    ckpt__pad_release(c->tempfd, c->n.pad_name, pad);
    /* H5Fflush on an MPI-IO file is MPI_File_sync on every rank: the data is durable after it. */
    errno = 0;
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0 && local == CKPT_OK)
        local = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: flush %s",
                               s->rank, c->n.my_file);
    if (H5Fclose(file) < 0 && local == CKPT_OK)
        local = ckpt__h5_error(CKPT_EIO, "rank %d: close %s", s->rank, c->n.my_file);
    if (s->rank == 0 && local == CKPT_OK) {
        /* H5Fclose writes the superblock again after the flush's MPI_File_sync: the file is
         * durable only after one more fsync, before it can be committed. */
        uint64_t size = 0;
        if (!(local = ckpt__fsync_fd(fd, c->n.my_file)) && !(local = ckpt__fd_size(&size, fd, c->n.my_file)))
            local = ckpt__record_add_file(&c->rec, c->n.data_name, size);
    }
    return local;
}

/*
 * Shared layout: all ranks create one file with the MPI-IO driver and every dataset collectively
 * (same order on every rank: the plan is sorted by name), then write their hyperslabs. A rank that
 * fails keeps joining the collective calls (skipping its own writes), so nobody hangs; its status
 * is agreed afterwards.
 */
static int write_shared(ckpt_saver *s, save_ctx *c, Mpickpt__Fragment **blobs)
{
    ckpt__shard_input in;
    ckpt__save_shard_input(s, c, &in);
    shared_ds *ds = NULL;
    size_t nds = 0;
    int rc = shared_datasets(&ds, &nds, s, c, blobs);
    if (rc != CKPT_OK)
        return rc;
    hid_t file;
    int fd = -1, pad = -1, local = CKPT_OK;
    if ((rc = open_shared_file(&file, &fd, &pad, s, c, &in)) != CKPT_OK) {
        free(ds);
        return rc;
    }
    char path[16384];
    for (size_t i = 0; i < nds; i++) {
        ckpt_slice full;
        ckpt_slice_full(&full, &ds[i].shape);
        int r = ckpt__h5_dataset_path(path, sizeof path, ds[i].name, NULL);
        if (r == CKPT_OK)
            r = ckpt__h5_create_dataset(&ds[i].id, file, path, ds[i].name, ds[i].dtype,
                                        &ds[i].shape, &full);
        if (r != CKPT_OK && local == CKPT_OK)
            local = r;
    }
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, s->opts.collective_io ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    local = s->opts.collective_io ? write_collective(s, c, ds, nds, dxpl, local)
                                  : write_independent(s, c, ds, nds, dxpl, local);
    H5Pclose(dxpl);
    local = record_shared(s, c, local);
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "write");
    for (size_t i = 0; i < nds; i++)
        if (ds[i].id >= 0)
            H5Dclose(ds[i].id);
    free(ds);
    local = close_shared(s, c, file, fd, pad, local);
    ckpt__close(fd);
    return local;
}


int ckpt__save_write_shared(ckpt_saver *s, save_ctx *c)
{
    Mpickpt__Fragment **blobs = NULL;
    ckpt__arena *blob_arena = NULL;
    int rc = gather_blobs(s, c, CKPT_OK, &blobs, &blob_arena);
    if (rc != CKPT_OK)
        return rc;
    ckpt__h5_lock();
    rc = write_shared(s, c, blobs);
    ckpt__h5_unlock();
    ckpt__free_frags(blobs, blob_arena);
    return rc;
}
