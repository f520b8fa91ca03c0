/* Internal: validation of an index (lib/validate.c). */
#ifndef MPICKPT_VALIDATE_H
#define MPICKPT_VALIDATE_H

#include "mpickpt.pb-c.h"

#include <stdint.h>

/*
 * Validates an index: header (version, world size, layout, save counter in [0,
 * CKPT__COUNTER_MAX]), files (safe names, unique), tensors (UTF-8 names, sorted and unique,
 * dtype, shape, kind) and pieces (slice inside the shape, owning rank, file listed, dataset path
 * "/tensors/<one component>" or "/packs/<one component>", byte count; no duplicate or overlapping
 * slices; pieces cover the whole tensor). Problems are reported with `bad` (CKPT_ECORRUPT for a
 * file read from disk, CKPT_EMISMATCH for a merge of what ranks registered), naming the tensor and
 * the ranks involved. O(d n log n) for n pieces of d dimensions.
 */
int ckpt__index_validate(const Mpickpt__Index *idx, int bad, const char *what);

/* Caps the work ckpt__index_validate() spends naming an overlapping pair when a tensor's pieces do
 * not tile it (in piece-dimension visits; 0: the default, about 64 million); past the cap the
 * message only says that the pieces overlap or leave a gap. For tests; not thread-safe. */
void ckpt__index_set_search_budget(uint64_t visits);

#endif
