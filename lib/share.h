/*
 * A rank's share of an index (docs/design.md §5): the collective restore's chief, holding the
 * whole index (read and validated), sends each rank only the entries it reads, so a rank's restore
 * costs O(its tensors + the pieces overlapping what it owns) in memory and work, whatever the total
 * piece count; the chief's cost is O(total). Not installed. No MPI.
 *
 * Contract:
 *   wants   what a rank reads, as a fragment: one tensor entry per name it restores; an entry with
 *           one piece reads the box (start, count) of that piece, an entry with none reads all of it.
 *           Built with ckpt__share_want(); only names and boxes are looked at.
 *   share   ckpt__share_pack(): an index message (the same wire format as an index's payload,
 *           readable by ckpt__reader_open_payload() without validation) with the whole index's
 *           header, the wanted tensors that exist (sorted by name, as in the index), of each the
 *           pieces whose box intersects the wanted box — exactly the pieces ckpt_reader_read()
 *           would read for that box — and the data files those pieces name. A wanted name that the
 *           index lacks is left out: the reader reports it (CKPT_ENOTFOUND) as it would with the
 *           whole index. Entries are shared with the index, not copied, until they are packed.
 * The index must have been validated (ckpt__index_validate): pieces inside their tensors, files
 * listed. Selecting a box costs O(log pieces + pieces selected) for a tensor of many pieces (its
 * pieces sorted once along the axis they are split on), O(pieces) for a tensor of a few.
 */
#ifndef MPICKPT_SHARE_H
#define MPICKPT_SHARE_H

#include "internal.h"
#include "mpickpt.pb-c.h"
#include "mpickpt/slice.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt__share ckpt__share;

/* Selection state over `idx` (which must outlive it). */
int ckpt__share_new(ckpt__share **out, const Mpickpt__Index *idx);
void ckpt__share_free(ckpt__share *sh);

/* Appends to `wants` the wish to read tensor `name`: its box `box`, or all of it (box NULL).
 * `cap` is the caller's capacity counter (start at 0); free with ckpt__fragment_free_built(). */
int ckpt__share_want(Mpickpt__Fragment *wants, size_t *cap, const char *name,
                     const ckpt_slice *box);

/* The share of `wants`, packed into *out (malloc'd, *len bytes). */
int ckpt__share_pack(ckpt__share *sh, const Mpickpt__Fragment *wants, uint8_t **out,
                     size_t *len);

/* The cooperative restore (mpi/restore_coop.c): the same selection with a filter. keep(arg, ti, j,
 * eligible, want) is called for each selected piece j of index tensor ti, in the order the share
 * lists them; a piece it returns 0 for is left out. `eligible`: every want of that tensor is
 * KIND_FULL (not per-rank) and the tensor has at least one dimension; `want`: the box the rank
 * reads of the tensor (NULL: all of it). With `drop_empty`, a tensor left
 * without pieces is left out too (else it stays, without pieces: the reader then writes nothing
 * of it). With out NULL nothing is packed: the filter only sees the selection. */
typedef int (*ckpt__share_filter)(void *arg, size_t ti, size_t j, int eligible,
                                  const ckpt_slice *want);
int ckpt__share_pack_filtered(ckpt__share *sh, const Mpickpt__Fragment *wants,
                              ckpt__share_filter keep, void *keep_arg, int drop_empty,
                              uint8_t **out, size_t *len);

#endif
