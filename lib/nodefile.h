/*
 * Node files: the data file of one node in the per-node layout (docs/design.md §4.2), with no MPI.
 * The collective part (who sends what to whom) is mpi/save_node.c. Not installed.
 *
 * A node file holds exactly what the per-rank files of the node's ranks would hold (lib/shard.c),
 * under the same dataset names: every dataset path of a save is unique world-wide (a piece's
 * path carries its start coordinates, a component's or blob's stored name its rank, a pack is
 * /packs/rank-<r>), so the ranks' datasets cannot collide in one file and the index describes
 * them exactly as in the per-rank layout.
 *
 * Contract:
 *  ckpt__nodefile_list(): the datasets one rank writes, in the order ckpt__nodefile_write()
 *    writes them — its pack /packs/rank-<r> first when some pieces are packed (pack_max), then
 *    each unpacked piece, then the registered savers' blobs — as a fragment (one tensor entry per
 *    dataset; its one piece is the box the dataset holds) to travel to the node's leader.
 *  ckpt__nodefile_create(): the leader's. Every rank's list comes from the wire and is checked
 *    (dtype, shape, box, bytes, a dataset path of one component below /tensors/ or /packs/)
 *    before use. Creates <temp>/<data_name> (O_EXCL, after removing a leftover of a crashed
 *    save) and every dataset in it contiguous, allocated at creation and never filled, so only
 *    HDF5's metadata is written, by this one process; the room for that metadata is held by a pad
 *    file (ckpt__pad_create) until HDF5 closes the file, so a full disk fails a creation, never
 *    the close. Returns the file open for writing (HDF5 is done with it), its size (HDF5 sizes it
 *    to the end of the last extent, a hole until written), its identity and each dataset's file
 *    offset. On failure nothing is returned open and the file is left for ckpt__temp_cleanup().
 *  ckpt__nodefile_write(): one rank's bytes with pwrite at the offsets the leader returned for its
 *    list (checked: one per dataset, each extent inside the file), every piece recorded in `rec`
 *    (CRC-32C, block CRCs, pack offset) as ckpt__shard_write() records it, then fsync. The file
 *    itself is recorded by the leader only (ckpt__record_add_file), once.
 */
#ifndef MPICKPT_NODEFILE_H
#define MPICKPT_NODEFILE_H

#include "internal.h"
#include "mpickpt.pb-c.h"
#include "paths.h"
#include "record.h"
#include "shard.h"

#include <stddef.h>
#include <stdint.h>

/* A dataset without an extent (no element): nothing is written for it. */
#define CKPT__NODEFILE_NO_EXTENT UINT64_MAX

int ckpt__nodefile_list(Mpickpt__Fragment *f, const ckpt__shard_input *in);

/* The node file the leader made. */
typedef struct ckpt__nodefile {
    int fd;            /* open for writing; -1 once closed */
    uint64_t size;     /* bytes, every extent included */
    uint64_t dev, ino; /* identity: every rank checks it opened this very file */
    uint64_t *off;     /* every list's datasets' offsets, list after list */
    size_t *first;     /* list i's are off[first[i]] .. off[first[i + 1] - 1] */
    size_t nlists;
} ckpt__nodefile;

void ckpt__nodefile_init(ckpt__nodefile *nf);
void ckpt__nodefile_free(ckpt__nodefile *nf); /* closes fd */

/* lists[i] is the list of rank ranks[i] (for messages). */
int ckpt__nodefile_create(ckpt__nodefile *out, Mpickpt__Fragment *const *lists, const int *ranks,
                          size_t nlists, const ckpt__save_names *n, int tempfd);

/* `off[n_off]`: this rank's offsets; `size`: the file's. fd is open for writing. */
int ckpt__nodefile_write(ckpt__record *rec, const ckpt__shard_input *in, ckpt__shard_bufs *bufs,
                         const uint64_t *off, size_t n_off, uint64_t size, int fd,
                         const char *shown);

#endif
