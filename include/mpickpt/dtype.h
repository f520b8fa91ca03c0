/**
 * @file mpickpt/dtype.h
 * @brief Element types of stored tensors.
 */
#ifndef MPICKPT_DTYPE_H
#define MPICKPT_DTYPE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Element type. The values are those of the on-disk format (proto DType) and never change. */
typedef enum ckpt_dtype {
    CKPT_DTYPE_INVALID = 0,
    CKPT_FLOAT16 = 1,  /**< IEEE 754 half */
    CKPT_BFLOAT16 = 2, /**< bfloat16 (upper half of a float32) */
    CKPT_FLOAT32 = 3,
    CKPT_FLOAT64 = 4,
    CKPT_INT8 = 5,
    CKPT_INT16 = 6,
    CKPT_INT32 = 7,
    CKPT_INT64 = 8,
    CKPT_UINT8 = 9,
    CKPT_UINT16 = 10,
    CKPT_UINT32 = 11,
    CKPT_UINT64 = 12,
    CKPT_BOOL = 13, /**< one byte, 0 or 1 */
    CKPT_DTYPE_COUNT
} ckpt_dtype;

/** Size in bytes of one element, or 0 for an invalid dtype. */
CKPT_EXTERN size_t ckpt_dtype_size(ckpt_dtype dtype);

/** numpy name of the dtype ("float32", "bfloat16", "bool", ...), or "invalid". Never NULL. */
CKPT_EXTERN const char *ckpt_dtype_name(ckpt_dtype dtype);

/**
 * Parses a numpy dtype name ("float32", "int64", "bool", ...).
 * @return CKPT_OK, or CKPT_EINVAL when the name is unknown (out is then CKPT_DTYPE_INVALID).
 */
CKPT_EXTERN int ckpt_dtype_from_name(ckpt_dtype *out, const char *name);

/** 1 when @p dtype is a valid element type, else 0. */
CKPT_EXTERN int ckpt_dtype_valid(int dtype);

#ifdef __cplusplus
}
#endif
#endif
