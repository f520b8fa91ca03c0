/* Internal: the chief's merge of per-rank index fragments (lib/merge.c). */
#ifndef MPICKPT_MERGE_H
#define MPICKPT_MERGE_H

#include "mpickpt.pb-c.h"

#include <stddef.h>

#pragma GCC visibility push(default)

/*
 * Merges per-rank fragments into `out` (whose header the caller sets): tensors of the same name are
 * combined (dtype, shape and kind must agree: CKPT_EMISMATCH naming both ranks), sorted by name,
 * and files concatenated; then the result is validated with CKPT_EMISMATCH. `out` borrows the
 * fragments' names, pieces and files: free it with ckpt__index_merged_free() before the fragments.
 */
int ckpt__index_merge(Mpickpt__Index *out, Mpickpt__Fragment *const *frags, size_t n);
void ckpt__index_merged_free(Mpickpt__Index *idx);

#pragma GCC visibility pop

#endif
