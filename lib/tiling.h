/* Internal: whether the stored pieces of one tensor tile it exactly (lib/tiling.c), for the
 * validation of an index (lib/validate.c). */
#ifndef MPICKPT_TILING_H
#define MPICKPT_TILING_H

#include "mpickpt.pb-c.h"
#include "mpickpt/slice.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * A piece being validated, in the scratch space: its message, then its box, start[0..nd) followed
 * by count[0..nd): 8 + 16 nd bytes (a ckpt_slice is 264 bytes, so that 10^6 pieces took 272 MB).
 */
struct vrow {
    const Mpickpt__Piece *p;
    int64_t x[];
};

static inline size_t vrow_size(int nd)
{
    return sizeof(struct vrow) + 2 * (size_t)nd * sizeof(int64_t);
}

/* A slice spec for a message ("(scalar)" or "(slice)" when it has none). */
static inline void fmt_slice(char *buf, size_t n, const ckpt_shape *sh, const ckpt_slice *s)
{
    if (sh->ndims == 0 || ckpt_slice_spec_format(buf, n, sh, s) != CKPT_OK)
        snprintf(buf, n, "%s", sh->ndims == 0 ? "(scalar)" : "(slice)");
}

/* Seeds the fingerprint's weights (once per process; thread-safe). Call before
 * ckpt__tiling_check(). */
void ckpt__tiling_seed(void);

/*
 * The n pieces of tensor `name` (shape `shape`, `total` elements) in `scratch`: n rows of
 * vrow_size(shape->ndims) bytes, each box inside the shape, `covered` elements in all, followed by
 * room for n pointers. Sorts the rows (pointers into that room), then returns CKPT_OK when no two
 * boxes are equal and they cover every element exactly once, else `bad` naming the duplicate,
 * an overlapping pair or the gap (messages start with `what`). O(d n log n).
 */
int ckpt__tiling_check(char *scratch, size_t n, const ckpt_shape *shape, int64_t total,
                       int64_t covered, int bad, const char *what, const char *name);

#endif
