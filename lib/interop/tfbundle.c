/* TensorFlow's tensor bundle: names, dtypes, slice keys (lib/interop/tfbundle.h). */
#include "tfbundle.h"

#include "fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    int tf;
    ckpt_dtype ours;
    const char *name;
} dtypes[] = {
    {CKPT__TF_DT_FLOAT, CKPT_FLOAT32, "DT_FLOAT"},
    {CKPT__TF_DT_DOUBLE, CKPT_FLOAT64, "DT_DOUBLE"},
    {CKPT__TF_DT_INT32, CKPT_INT32, "DT_INT32"},
    {CKPT__TF_DT_UINT8, CKPT_UINT8, "DT_UINT8"},
    {CKPT__TF_DT_INT16, CKPT_INT16, "DT_INT16"},
    {CKPT__TF_DT_INT8, CKPT_INT8, "DT_INT8"},
    {CKPT__TF_DT_STRING, CKPT_DTYPE_INVALID, "DT_STRING"},
    {8, CKPT_DTYPE_INVALID, "DT_COMPLEX64"},
    {CKPT__TF_DT_INT64, CKPT_INT64, "DT_INT64"},
    {CKPT__TF_DT_BOOL, CKPT_BOOL, "DT_BOOL"},
    {11, CKPT_DTYPE_INVALID, "DT_QINT8"},
    {12, CKPT_DTYPE_INVALID, "DT_QUINT8"},
    {13, CKPT_DTYPE_INVALID, "DT_QINT32"},
    {CKPT__TF_DT_BFLOAT16, CKPT_BFLOAT16, "DT_BFLOAT16"},
    {15, CKPT_DTYPE_INVALID, "DT_QINT16"},
    {16, CKPT_DTYPE_INVALID, "DT_QUINT16"},
    {CKPT__TF_DT_UINT16, CKPT_UINT16, "DT_UINT16"},
    {18, CKPT_DTYPE_INVALID, "DT_COMPLEX128"},
    {CKPT__TF_DT_HALF, CKPT_FLOAT16, "DT_HALF"},
    {20, CKPT_DTYPE_INVALID, "DT_RESOURCE"},
    {21, CKPT_DTYPE_INVALID, "DT_VARIANT"},
    {CKPT__TF_DT_UINT32, CKPT_UINT32, "DT_UINT32"},
    {CKPT__TF_DT_UINT64, CKPT_UINT64, "DT_UINT64"},
    {24, CKPT_DTYPE_INVALID, "DT_FLOAT8_E5M2"},
    {25, CKPT_DTYPE_INVALID, "DT_FLOAT8_E4M3FN"},
    {29, CKPT_DTYPE_INVALID, "DT_INT4"},
    {30, CKPT_DTYPE_INVALID, "DT_UINT4"},
};

#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

ckpt_dtype ckpt__tf_dtype_to_ckpt(int tf_dtype)
{
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (dtypes[i].tf == tf_dtype)
            return dtypes[i].ours;
    return CKPT_DTYPE_INVALID;
}

int ckpt__tf_dtype_from_ckpt(ckpt_dtype dtype)
{
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (dtypes[i].ours == dtype && dtype != CKPT_DTYPE_INVALID)
            return dtypes[i].tf;
    return 0;
}

const char *ckpt__tf_dtype_name(int tf_dtype, char *buf, size_t size)
{
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (dtypes[i].tf == tf_dtype) {
            snprintf(buf, size, "%s", dtypes[i].name);
            return buf;
        }
    snprintf(buf, size, "unknown dtype %d", tf_dtype);
    return buf;
}

int ckpt__tf_data_name(char *out, size_t size, const char *base, int shard, int num_shards)
{
    return ckpt__path(out, size, "%s.data-%05d-of-%05d", base, shard, num_shards);
}

int ckpt__tf_index_name(char *out, size_t size, const char *base)
{
    return ckpt__path(out, size, "%s.index", base);
}

/* ---- OrderedCode, the parts EncodeTensorNameSlice uses ---- */

typedef struct okey {
    uint8_t *p;
    size_t len, cap;
} okey;

static int okey_add(okey *k, const void *data, size_t n)
{
    if (n > k->cap - k->len) {
        size_t cap = (k->cap ? k->cap : 64);
        while (cap - k->len < n)
            cap *= 2;
        uint8_t *p = realloc(k->p, cap);
        if (!p)
            return ckpt__error(CKPT_ENOMEM, "slice key: out of memory");
        k->p = p;
        k->cap = cap;
    }
    memcpy(k->p + k->len, data, n);
    k->len += n;
    return CKPT_OK;
}

/* A length byte, then the value big-endian without leading zero bytes (0: just the 0 byte). */
static int num_increasing(okey *k, uint64_t v)
{
    uint8_t b[9];
    int n = 0;
    for (uint64_t x = v; x; x >>= 8)
        n++;
    b[0] = (uint8_t)n;
    for (int i = 0; i < n; i++)
        b[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
    return okey_add(k, b, (size_t)n + 1);
}

/* The bytes with 0x00 written 00 ff and 0xff written ff 00, then the separator 00 01. */
static int string_increasing(okey *k, const char *s)
{
    int rc = CKPT_OK;
    for (const unsigned char *p = (const unsigned char *)s; *p && rc == CKPT_OK; p++) {
        if (*p == 0xff)
            rc = okey_add(k, "\xff\x00", 2);
        else
            rc = okey_add(k, p, 1);
    }
    return rc == CKPT_OK ? okey_add(k, "\x00\x01", 2) : rc;
}

/* A signed number in 1 to 10 bytes that sort as the numbers do: the first bit is the sign (1 for
 * >= 0), followed by as many copies of it as bytes follow the first, a bit of the opposite value,
 * then the value (two's complement) in the remaining bits, big-endian. One byte holds [-64, 64);
 * n bytes hold [-2^(7n-1), 2^(7n-1)). */
static int signed_increasing(okey *k, int64_t v)
{
    uint64_t x = v < 0 ? ~(uint64_t)v : (uint64_t)v; /* magnitude bits */
    int bits = 0;
    while (bits < 64 && (x >> bits))
        bits++;
    /* n bytes give 7n - 1 value bits (10 bytes: 64, all of them) */
    int n = 1;
    while (n < 10 && 7 * n - 1 < bits)
        n++;
    uint8_t b[10];
    for (int i = 0; i < 10; i++)
        b[i] = v < 0 ? 0xff : 0x00;
    for (int i = 0; i < 8; i++)
        b[2 + i] = (uint8_t)((uint64_t)v >> (56 - 8 * i));
    uint8_t *begin = b + 10 - n;
    /* header: n one-bits (for n <= 8 in the first byte; 9 and 10 spill into the second) */
    static const uint8_t hdr[11][2] = {{0, 0},       {0x80, 0},    {0xc0, 0},    {0xe0, 0},
                                       {0xf0, 0},    {0xf8, 0},    {0xfc, 0},    {0xfe, 0},
                                       {0xff, 0},    {0xff, 0x80}, {0xff, 0xc0}};
    begin[0] ^= hdr[n][0];
    if (n > 1)
        begin[1] ^= hdr[n][1];
    return okey_add(k, begin, (size_t)n);
}

int ckpt__tf_slice_key(uint8_t **out, size_t *len, const char *name, int ndims,
                       const int64_t *start, const int64_t *length)
{
    okey k = {NULL, 0, 0};
    int rc = num_increasing(&k, 0);
    if (rc == CKPT_OK)
        rc = string_increasing(&k, name);
    if (rc == CKPT_OK)
        rc = num_increasing(&k, (uint64_t)ndims);
    for (int d = 0; d < ndims && rc == CKPT_OK; d++) {
        rc = signed_increasing(&k, start[d]);
        if (rc == CKPT_OK)
            rc = signed_increasing(&k, length[d]);
    }
    if (rc != CKPT_OK) {
        free(k.p);
        return rc;
    }
    *out = k.p;
    *len = k.len;
    return CKPT_OK;
}
