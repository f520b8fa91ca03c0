/* Unit test of dtype sizes and numpy names. */
#include "check.h"
#include "internal.h"
#include "mpickpt/dtype.h"

#include <string.h>

int main(void)
{
    static const struct {
        ckpt_dtype dtype;
        const char *name;
        size_t size;
    } expect[] = {
        {CKPT_FLOAT16, "float16", 2}, {CKPT_BFLOAT16, "bfloat16", 2}, {CKPT_FLOAT32, "float32", 4},
        {CKPT_FLOAT64, "float64", 8}, {CKPT_INT8, "int8", 1},         {CKPT_INT16, "int16", 2},
        {CKPT_INT32, "int32", 4},     {CKPT_INT64, "int64", 8},       {CKPT_UINT8, "uint8", 1},
        {CKPT_UINT16, "uint16", 2},   {CKPT_UINT32, "uint32", 4},     {CKPT_UINT64, "uint64", 8},
        {CKPT_BOOL, "bool", 1},
    };
    CHECK_EQ_INT(CKPT__ARRAY_LEN(expect), CKPT_DTYPE_COUNT - 1);

    for (size_t i = 0; i < CKPT__ARRAY_LEN(expect); i++) {
        ckpt_dtype t = expect[i].dtype;
        CHECK_EQ_INT(ckpt_dtype_size(t), expect[i].size);
        CHECK_MSG(strcmp(ckpt_dtype_name(t), expect[i].name) == 0, "name of %d is %s", (int)t,
                  ckpt_dtype_name(t));
        CHECK_EQ_INT(ckpt_dtype_valid((int)t), 1);
        /* Round trip name -> dtype -> name. */
        ckpt_dtype back = CKPT_DTYPE_INVALID;
        CHECK_OK(ckpt_dtype_from_name(&back, expect[i].name));
        CHECK_EQ_INT(back, t);
        CHECK(strcmp(ckpt_dtype_name(back), expect[i].name) == 0);
    }

    /* Invalid values. */
    const int bad[] = {CKPT_DTYPE_INVALID, CKPT_DTYPE_COUNT, -1, 100, 1 << 30};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        CHECK_EQ_INT(ckpt_dtype_valid(bad[i]), 0);
        CHECK_EQ_INT(ckpt_dtype_size((ckpt_dtype)bad[i]), 0);
        CHECK(strcmp(ckpt_dtype_name((ckpt_dtype)bad[i]), "invalid") == 0);
    }

    /* Unknown names leave out invalid and set a message naming the input. */
    const char *unknown[] = {"",       "invalid",   "float",  "Float32", "float32 ", " float32",
                             "int128", "complex64", "string", "boolean", "f4",       "float3"};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(unknown); i++) {
        ckpt_dtype t = CKPT_FLOAT32;
        ckpt_error_clear();
        CHECK_RC(ckpt_dtype_from_name(&t, unknown[i]), CKPT_EINVAL);
        CHECK_EQ_INT(t, CKPT_DTYPE_INVALID);
        const ckpt_error *e = ckpt_error_last();
        CHECK(e != NULL && e->code == CKPT_EINVAL && strstr(e->message, unknown[i]) != NULL);
    }
    ckpt_dtype t;
    CHECK_RC(ckpt_dtype_from_name(&t, NULL), CKPT_EINVAL);
    CHECK_RC(ckpt_dtype_from_name(NULL, "float32"), CKPT_EINVAL);
    return CHECK_DONE();
}
