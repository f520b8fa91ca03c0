/**
 * @file mpickpt/slice.h
 * @brief Shapes, slices of a tensor and TensorFlow slice-spec strings.
 *
 * A slice selects the box [start[d], start[d] + count[d]) in every dimension d of a tensor's global
 * shape. Scalars have ndims == 0 (one element); zero-size dimensions are allowed.
 */
#ifndef MPICKPT_SLICE_H
#define MPICKPT_SLICE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Maximum number of dimensions of a tensor. */
#define CKPT_MAX_DIMS 16

/** A global shape. */
typedef struct ckpt_shape {
    int ndims;                     /**< 0 for a scalar */
    int64_t dims[CKPT_MAX_DIMS];   /**< each >= 0 */
} ckpt_shape;

/** A box inside a shape. */
typedef struct ckpt_slice {
    int ndims;
    int64_t start[CKPT_MAX_DIMS];
    int64_t count[CKPT_MAX_DIMS];
} ckpt_slice;

/** Fills @p out; CKPT_EINVAL if ndims is outside [0, CKPT_MAX_DIMS] or a dim is negative. */
CKPT_EXTERN int ckpt_shape_init(ckpt_shape *out, int ndims, const int64_t *dims);

/** Number of elements (1 for a scalar); CKPT_EINVAL when it overflows int64 or a size_t byte count. */
CKPT_EXTERN int ckpt_shape_num_elements(int64_t *out, const ckpt_shape *shape);

/** 1 when both shapes have the same rank and dims, else 0. */
CKPT_EXTERN int ckpt_shape_equal(const ckpt_shape *a, const ckpt_shape *b);

/** Fills @p out; CKPT_EINVAL if ndims is out of range or a start/count is negative. */
CKPT_EXTERN int ckpt_slice_init(ckpt_slice *out, int ndims, const int64_t *start,
                                const int64_t *count);

/** The slice covering all of @p shape. */
CKPT_EXTERN void ckpt_slice_full(ckpt_slice *out, const ckpt_shape *shape);

/**
 * Checks that @p slice lies inside @p shape (same rank, start >= 0, count >= 0,
 * start + count <= dim without overflow). CKPT_EINVAL with a message naming the dimension.
 */
CKPT_EXTERN int ckpt_slice_validate(const ckpt_slice *slice, const ckpt_shape *shape);

/** Number of elements of the slice (1 for a rank-0 slice); CKPT_EINVAL on overflow. */
CKPT_EXTERN int ckpt_slice_num_elements(int64_t *out, const ckpt_slice *slice);

/** 1 when @p slice covers all of @p shape, else 0. */
CKPT_EXTERN int ckpt_slice_is_full(const ckpt_slice *slice, const ckpt_shape *shape);

/** 1 when both slices have the same rank, starts and counts, else 0. */
CKPT_EXTERN int ckpt_slice_equal(const ckpt_slice *a, const ckpt_slice *b);

/**
 * Intersection of two slices of the same rank. Returns 1 and fills @p out when it holds at least
 * one element, 0 when it is empty (out is then a slice with some count 0), -1 when the ranks differ.
 * Two rank-0 slices intersect in the scalar.
 */
CKPT_EXTERN int ckpt_slice_intersect(ckpt_slice *out, const ckpt_slice *a, const ckpt_slice *b);

/**
 * Parses TensorFlow's slice-spec string: the full shape's dims separated by spaces, then one token
 * of per-dimension extents separated by ':', each "start,length" or "-" (the whole dimension).
 * Example: "4 10 0,2:-" is rows 0..1, all columns, of a 4x10 tensor. The slice is validated
 * against the shape. CKPT_EINVAL with a message on malformed input (never reads past the string).
 */
CKPT_EXTERN int ckpt_slice_spec_parse(ckpt_shape *shape, ckpt_slice *slice, const char *spec);

/**
 * Parses only the extents part ("0,2:-") against a known @p shape. The empty string selects a
 * scalar (ndims 0) or, when shape has dims, is CKPT_EINVAL. The result is validated.
 */
CKPT_EXTERN int ckpt_slice_parse_extent(ckpt_slice *slice, const ckpt_shape *shape,
                                        const char *extent);

/**
 * Formats TensorFlow's slice-spec string ("4 10 0,2:-"; "-" for a dimension covered whole).
 * Writes at most @p size bytes including the NUL. Returns CKPT_OK, or CKPT_EINVAL when the buffer
 * is too small or the slice does not fit the shape.
 */
CKPT_EXTERN int ckpt_slice_spec_format(char *buf, size_t size, const ckpt_shape *shape,
                                       const ckpt_slice *slice);

/**
 * Copies the elements of @p region (global coordinates) from @p src, a dense row-major buffer
 * holding @p src_slice, into @p dst, a dense row-major buffer holding @p dst_slice. @p region must
 * lie inside both (CKPT_EINVAL otherwise). Copies whole contiguous runs at once. This is the
 * primitive behind reading any sub-slice of a tensor from the pieces that were stored.
 */
CKPT_EXTERN int ckpt_slice_copy(void *dst, const ckpt_slice *dst_slice, const void *src,
                                const ckpt_slice *src_slice, const ckpt_slice *region,
                                size_t elem_size);

#ifdef __cplusplus
}
#endif
#endif
