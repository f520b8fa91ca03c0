/*
 * Shard writing: one rank's data file of a save (docs/design.md §4.2, per-rank layout), no MPI.
 * Not installed.
 *
 * Contract of ckpt__shard_write(): creates <temp>/<data_name> (O_EXCL, after removing a leftover
 * of a crashed save) and writes every piece of the plan into it through HDF5 — pieces of at most
 * pack_max bytes copied into one pack dataset /packs/rank-<r>, the others one dataset each, then
 * the registered savers' blobs — recording each piece (CRC-32C, block CRCs, pack offset) in `rec`;
 * the file is closed, fsynced and listed in `rec` with its size. Room for HDF5's metadata flush is
 * held by a pad file while the data is written, so a full disk fails a write, never the close.
 * On failure nothing is recorded as durable and the file is left for ckpt__temp_cleanup().
 *
 * ckpt__shard_reserve() takes this rank's bytes up front with fallocate (MPICKPT_RESERVE), so a
 * full disk is the same clean error on every rank before any HDF5 call.
 */
#ifndef MPICKPT_SHARD_H
#define MPICKPT_SHARD_H

#include "internal.h"
#include "mpickpt.pb-c.h"
#include "paths.h"
#include "plan.h"
#include "record.h"

#include <stddef.h>
#include <stdint.h>

/* What one rank writes at a save. */
typedef struct ckpt__shard_input {
    const ckpt__regs *regs;
    const ckpt__pieces *pieces;
    const void *const *src;       /* per registration: its bytes (the buffer, or a snapshot) */
    const void *const *blob_data; /* per registration (blobs): this save's bytes */
    const size_t *blob_len;
    int64_t pack_max;             /* pieces of at most this many bytes are packed; <= 0: none */
    int rank;
} ckpt__shard_input;

/* Buffers kept by the caller across saves. */
typedef struct ckpt__shard_bufs {
    ckpt__scratch scratch; /* copies of non-contiguous pieces */
    uint8_t *pack_buf;     /* staging of packed pieces (CKPT__PACK_STAGE bytes) */
} ckpt__shard_bufs;
void ckpt__shard_bufs_free(ckpt__shard_bufs *b);

/* Packed pieces are copied into a staging buffer of this size and written one buffer at a time. */
#define CKPT__PACK_STAGE ((size_t)4 << 20)

/* A fault-injection point (MPICKPT_FAULT in the MPI layer); NULL: none. */
typedef int (*ckpt__fault_fn)(int rank, const char *step);

int ckpt__shard_write(ckpt__record *rec, const ckpt__shard_input *in, ckpt__shard_bufs *bufs,
                      const ckpt__save_names *n, int tempfd, ckpt__fault_fn fault);

/*
 * The pack of a rank: its small pieces copied back to back into one uint8 dataset through a
 * staging buffer (CKPT__PACK_STAGE bytes, kept in ckpt__shard_bufs) and written one buffer at a
 * time by `write` — a range of an HDF5 dataset (per-rank, lib/shard.c) or a pwrite at the pack's
 * place in the node's file (per-node, lib/nodefile.c). ckpt__pack_add() records each piece (its
 * CRC-32C of the staged copy, its pack offset, and its file offset when `file_offset`, where the
 * pack starts in its file, is known); ckpt__pack_flush() writes what is staged.
 */
typedef struct ckpt__pack {
    int (*write)(void *arg, uint64_t off, const void *buf, size_t len); /* off: in the pack */
    void *arg;
    const char *path;     /* the pack dataset's name, /packs/rank-<r> */
    uint64_t file_offset; /* where the pack starts in its file; 0: not known (yet) */
    uint64_t flushed;     /* bytes of the pack written so far */
    size_t fill;          /* bytes staged after `flushed` */
    uint8_t *buf;         /* the staging buffer */
} ckpt__pack;
int ckpt__pack_flush(ckpt__pack *pk);
int ckpt__pack_add(ckpt__record *rec, ckpt__pack *pk, const ckpt__reg *g, const ckpt__piece *p,
                   const void *bytes, size_t len);

/* Whether a piece of `len` bytes is packed. */
int ckpt__shard_packs(const ckpt__shard_input *in, size_t len);

/* The shape (a uint8 vector of its length) and whole slice of a blob of len bytes. */
void ckpt__blob_box(size_t len, ckpt_shape *sh, ckpt_slice *full);

/* Room for the metadata HDF5 writes when it flushes a file of this save (ckpt__pad_create): per
 * dataset an object header, three attributes and its link. With `plan` (the shared file) every
 * dataset of the plan plus `size` ranks' blobs, else this rank's unpacked pieces and blobs. */
uint64_t ckpt__shard_metadata_room(const ckpt__shard_input *in, const Mpickpt__Index *plan,
                                   int size);

/* Reserves this rank's bytes plus a margin in its in-flight directory (tempfd); *fd >= 0 holds
 * the reservation until ckpt__shard_release(). File systems without fallocate skip the check. */
int ckpt__shard_reserve(int *fd, const ckpt__shard_input *in, const ckpt__save_names *n,
                        int tempfd);
void ckpt__shard_release(const ckpt__save_names *n, int tempfd, int fd);

/* 1 when the file system of dirfd has (almost) no room left: how a full disk is recognised behind
 * an MPI-IO error, which does not carry errno. */
int ckpt__disk_full(int dirfd);

/* The size of open file fd; `shown` names it in messages. */
int ckpt__fd_size(uint64_t *size, int fd, const char *shown);

#endif
