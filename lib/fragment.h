/* Internal: a writer's index fragment, built in memory (lib/fragment.c). */
#ifndef MPICKPT_FRAGMENT_H
#define MPICKPT_FRAGMENT_H

#include "mpickpt.pb-c.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/dtype.h"
#include "mpickpt/slice.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Fragments built in memory by a writer (one rank's view): ckpt__fragment_add() appends a tensor
 * entry holding one piece (copies every string and array); `cap` is the caller's capacity counter
 * (start at 0). Free with ckpt__fragment_free_built(), never with protobuf-c's free_unpacked.
 */
int ckpt__fragment_add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dtype,
                       const ckpt_shape *shape, ckpt_kind kind, const ckpt_slice *slice,
                       const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                       uint64_t bytes, uint32_t crc);
/* A tensor entry with room for n pieces (appended; *out points at it), and piece i of it filled
 * (arrays and strings copied). After an error of either, ckpt__fragment_free_built() still frees
 * everything. */
int ckpt__fragment_tensor(Mpickpt__Tensor **out, Mpickpt__Fragment *f, size_t *cap,
                          const char *name, ckpt_dtype dtype, const ckpt_shape *shape,
                          ckpt_kind kind, size_t npieces);
int ckpt__fragment_piece(Mpickpt__Tensor *t, size_t i, int rank, const ckpt_slice *slice,
                         const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                         uint64_t bytes, uint32_t crc);

int ckpt__fragment_add_file(Mpickpt__Fragment *f, const char *name, uint64_t bytes);
void ckpt__fragment_free_built(Mpickpt__Fragment *f);

#endif
