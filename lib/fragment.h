/* Internal: a writer's index fragment, built in memory (lib/fragment.c). */
#ifndef MPICKPT_FRAGMENT_H
#define MPICKPT_FRAGMENT_H

#include "mpickpt.pb-c.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/dtype.h"
#include "mpickpt/slice.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(default)

/*
 * Fragments built in memory by a writer (one rank's view): ckpt__fragment_add() appends a tensor
 * entry holding one piece (copies every string and array); `cap` is the caller's capacity counter
 * (start at 0). Free with ckpt__fragment_free_built(), never with protobuf-c's free_unpacked.
 */
int ckpt__fragment_add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dtype,
                       const ckpt_shape *shape, ckpt_kind kind, const ckpt_slice *slice,
                       const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                       uint64_t bytes, uint32_t crc);
/* ckpt__fragment_add() for a piece whose bytes are `data` (len bytes): records their CRC-32C and,
 * when they span more than one CKPT__CRC_BLOCK, the CRC-32C of every block (format 2). */
int ckpt__fragment_add_data(Mpickpt__Fragment *f, size_t *cap, const char *name,
                            ckpt_dtype dtype, const ckpt_shape *shape, ckpt_kind kind,
                            const ckpt_slice *slice, const char *file, const char *dataset,
                            const ckpt_slice *dataset_slice, const void *data, size_t len);

int ckpt__fragment_add_file(Mpickpt__Fragment *f, const char *name, uint64_t bytes);
void ckpt__fragment_free_built(Mpickpt__Fragment *f);

#pragma GCC visibility pop

#endif
