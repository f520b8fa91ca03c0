/* The reader's state (struct ckpt_reader, opaque in mpickpt/checkpoint.h), shared by its two
 * files: lib/reader.c opens a checkpoint's index (or an index payload), answers what it holds
 * (header, tensors, pieces) and frees the reader; lib/reader_read.c reads and checks the pieces'
 * bytes (ckpt_reader_read, _verify, _check, ckpt__reader_piece_stream). Internal: hidden symbols,
 * nothing here is installed. */
#ifndef MPICKPT_READER_INTERNAL_H
#define MPICKPT_READER_INTERNAL_H

#include "mpickpt/checkpoint.h"

#include "arena.h"
#include "h5io.h"
#include "index.h"

#include <stddef.h>
#include <stdint.h>

struct ckpt_reader {
    char dir[4096];
    int dirfd; /* the checkpoint's directory: data files are opened below it by descriptor */
    char index_path[4200];
    Mpickpt__Index *idx; /* unpacked into `arena` (freed with it) */
    ckpt__arena *arena;
    ckpt_header hdr;
    hid_t *files; /* opened lazily, parallel to idx->files */
    int by_offset; /* reads go by the pieces' recorded file offsets (the collective restore) */
    int *fds;     /* plain descriptors of the same files, for pieces with a recorded offset */
    int fetched_dirfd; /* the cache level's restore: where the byte ranges fetched from other
                        * nodes are, for data files this node does not hold (-1: none; owned) */
    uint64_t *fd_size;
    void *tmp;    /* piece buffer for sub-slice reads, kept across reads: a fresh buffer would
                   * fault in every page again on every read (it dominated resharded restores) */
    size_t tmp_size;
    /* The dataset read last, kept open: the packed pieces of a rank share one dataset, so a
     * restore of thousands of small tensors opens it once. */
    hid_t ds;
    size_t ds_slot;
    char *ds_name;
    int ds_nd;
    hsize_t ds_dims[CKPT_MAX_DIMS];
    int ds_checked; /* the ckpt_dtype its HDF5 type was checked against, or -1 */
    int ds_raw; /* its bytes are one extent of the file: read with pread (ckpt__h5_raw_address) */
    int ds_fd;
    uint64_t ds_addr, ds_size;
};

/* Closes the dataset kept open (r->ds), if any (reader_read.c). */
void ckpt__reader_close_ds(ckpt_reader *r);

#endif
