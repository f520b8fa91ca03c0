/* Internal: the chief's merge of per-rank index fragments (lib/merge.c), in one step or in two
 * (node leaders merge their node's fragments, the chief merges their results). */
#ifndef MPICKPT_MERGE_H
#define MPICKPT_MERGE_H

#include "mpickpt.pb-c.h"

#include <stddef.h>

/*
 * Merges fragments into `out` (whose header the caller sets): tensors of the same name are
 * combined (dtype, shape and kind must agree: CKPT_EMISMATCH naming both ranks; an empty name is
 * CKPT_EINVAL), their pieces in the fragments' order, sorted by name, and files concatenated; then
 * the result is validated with CKPT_EMISMATCH. The fragments are the ranks' or results of
 * ckpt__fragment_merge() (see there). `out` borrows the fragments' names, arrays and pieces: free
 * it with ckpt__index_merged_free() (also after an error) before the fragments.
 */
int ckpt__index_merge(Mpickpt__Index *out, Mpickpt__Fragment *const *frags, size_t n);
void ckpt__index_merged_free(Mpickpt__Index *idx);

/*
 * The first step of a hierarchical merge: a node leader merges its node's fragments (or earlier
 * results of this function) into the fragment `out`, which it sends to the chief like any rank's
 * fragment (mpickpt__fragment__pack works on it). The merge is ckpt__index_merge()'s, without the
 * validation of the whole: same-name tensors combined with the same checks (CKPT_EMISMATCH naming
 * both ranks, CKPT_EINVAL for an empty name, CKPT_ENOMEM), pieces in the fragments' order, sorted
 * by name, files concatenated; out->rank is frags[0]'s (put the leader's own first). Ranks in
 * messages are those of the pieces, so an error found by the chief names ranks, not leaders.
 *
 * Contract for the chief: if the fragments 0..R-1 are split into consecutive runs and each run is
 * merged by this function, in order, then ckpt__index_merge() of the results (in run order) gives
 * the same index, byte for byte, as ckpt__index_merge() of the R fragments; and one of the two
 * steps fails exactly when that merge fails (with several faults, maybe naming another one).
 * Nodes of consecutive ranks (MPI_Comm_split_type with ranks
 * placed by slot, or MPICKPT_RANKS_PER_NODE) satisfy it; with any other grouping the index has the
 * same tensors and pieces and is just as valid, each tensor's pieces listed node by node.
 *
 * `out` borrows what the inputs hold (keep them until `out` is packed); free it with
 * ckpt__fragment_merged_free() (also after an error), never with protobuf-c's free_unpacked.
 * O(n log n) in the node's distinct names; no validation of pieces (the chief validates all).
 */
int ckpt__fragment_merge(Mpickpt__Fragment *out, Mpickpt__Fragment *const *frags, size_t n);
void ckpt__fragment_merged_free(Mpickpt__Fragment *f);

#endif
