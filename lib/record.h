/*
 * Record: what a rank wrote at a save — its pieces as the index will describe them — kept as plain
 * C structs while the data is written, and turned into an index fragment (protobuf) only for the
 * gather at the chief. Not installed. No MPI.
 *
 * Contract: ckpt__record_add() copies the name and the dataset path and takes ownership of
 * block_crc; ckpt__record_add_data() computes the piece's CRC-32C and, for pieces larger than one
 * CKPT__CRC_BLOCK, the CRC of every block (format 2). ckpt__record_fragment() builds the fragment the merge expects: one
 * tensor entry per piece, the data files listed.
 */
#ifndef MPICKPT_RECORD_H
#define MPICKPT_RECORD_H

#include "internal.h"
#include "mpickpt.pb-c.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/slice.h"

#include <stddef.h>
#include <stdint.h>

/* One piece as written. */
typedef struct ckpt__written {
    const char *name;         /* owned in a record (copied by ckpt__record_add) */
    ckpt_dtype dtype;
    ckpt_kind kind;
    ckpt_shape shape;
    ckpt_slice slice;         /* the box of the tensor */
    const char *dataset;      /* the HDF5 dataset holding it (copied likewise) */
    ckpt_slice dataset_slice; /* where in that dataset (its start; the count is slice's) */
    uint64_t bytes;
    uint32_t crc;
    int packed;               /* in a pack dataset at pack_offset (format 2) */
    uint64_t pack_offset;
    uint64_t file_offset;     /* the piece's first byte in its file, when one run there; 0: unknown */
    uint32_t *block_crc;      /* owned: CRC-32C of every CKPT__CRC_BLOCK, or NULL */
    size_t n_block;
} ckpt__written;

/* A data file of the save and its size. */
typedef struct ckpt__written_file {
    char name[320];
    uint64_t bytes;
} ckpt__written_file;

typedef struct ckpt__record {
    ckpt__written *v;
    size_t n, cap;
    ckpt__written_file files[2];
    size_t nfiles;
} ckpt__record;

void ckpt__record_init(ckpt__record *r);
void ckpt__record_free(ckpt__record *r);
int ckpt__record_add(ckpt__record *r, const ckpt__written *w);
/* ckpt__record_add() of a piece whose `len` bytes are `data`: bytes, crc and block CRCs filled. */
int ckpt__record_add_data(ckpt__record *r, const ckpt__written *w, const void *data, size_t len);
int ckpt__record_add_file(ckpt__record *r, const char *name, uint64_t bytes);
/* Sum of the pieces' bytes. */
uint64_t ckpt__record_bytes(const ckpt__record *r);
/* The record as rank `rank`'s fragment, every piece in data file `file`. Free with
 * ckpt__fragment_free_built(). */
int ckpt__record_fragment(Mpickpt__Fragment *f, const ckpt__record *r, int rank,
                          const char *file);

#endif
