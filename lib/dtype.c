/* Element types: sizes and numpy names. */
#include "mpickpt/dtype.h"

#include "internal.h"

#include <string.h>

/* Indexed by ckpt_dtype; the values are fixed by the on-disk format. */
static const struct {
    const char *name;
    size_t size;
} dtype_info[CKPT_DTYPE_COUNT] = {
    [CKPT_DTYPE_INVALID] = {"invalid", 0}, [CKPT_FLOAT16] = {"float16", 2},
    [CKPT_BFLOAT16] = {"bfloat16", 2},     [CKPT_FLOAT32] = {"float32", 4},
    [CKPT_FLOAT64] = {"float64", 8},       [CKPT_INT8] = {"int8", 1},
    [CKPT_INT16] = {"int16", 2},           [CKPT_INT32] = {"int32", 4},
    [CKPT_INT64] = {"int64", 8},           [CKPT_UINT8] = {"uint8", 1},
    [CKPT_UINT16] = {"uint16", 2},         [CKPT_UINT32] = {"uint32", 4},
    [CKPT_UINT64] = {"uint64", 8},         [CKPT_BOOL] = {"bool", 1},
};

int ckpt_dtype_valid(int dtype)
{
    return dtype > CKPT_DTYPE_INVALID && dtype < CKPT_DTYPE_COUNT;
}

size_t ckpt_dtype_size(ckpt_dtype dtype)
{
    return ckpt_dtype_valid((int)dtype) ? dtype_info[dtype].size : 0;
}

const char *ckpt_dtype_name(ckpt_dtype dtype)
{
    return ckpt_dtype_valid((int)dtype) ? dtype_info[dtype].name : "invalid";
}

int ckpt_dtype_from_name(ckpt_dtype *out, const char *name)
{
    if (out)
        *out = CKPT_DTYPE_INVALID;
    if (!out || !name)
        return ckpt__error(CKPT_EINVAL, "ckpt_dtype_from_name: NULL argument");
    for (int d = CKPT_DTYPE_INVALID + 1; d < CKPT_DTYPE_COUNT; d++) {
        if (strcmp(name, dtype_info[d].name) == 0) {
            *out = (ckpt_dtype)d;
            return CKPT_OK;
        }
    }
    return ckpt__error(CKPT_EINVAL, "unknown dtype name \"%.64s\"", name);
}
