/* Writes a small checkpoint that exercises every dtype and the corner cases of the format, for the
 * CLI and foreign-reader tests (tests/scripts/test_cli.sh recomputes every value in Python, so
 * keep the formulas there in sync with these).
 *
 *   make_ckpt PREFIX [--counter N] [--epoch E] [--step S] [--name NAME]...
 *
 * Tensors (i is the row-major flat index):
 *   dtype/float16 [3,5]       (i - 7) * 0.5
 *   dtype/bfloat16 [3,5]      (i - 7) * 0.25
 *   dtype/float32 [4,6]       (float)(i - 10) / 3, except i=3 NaN, i=4 +Inf, i=5 -Inf
 *   dtype/float64 [2,3,4]     (i - 10) / 3.0, except i=23 the smallest subnormal 5e-324
 *   dtype/int8 [16]           -128 + 17 i            (covers INT8_MIN..INT8_MAX)
 *   dtype/int16 [4,4]         -32768 + 4369 i
 *   dtype/int32 [2,8]         -2^31 + 286331153 i
 *   dtype/int64 [2,2,4]       -2^63 + 0x1111111111111111 i
 *   dtype/uint8 [16]          17 i                   (covers 0..UINT8_MAX)
 *   dtype/uint16 [4,4]        4369 i
 *   dtype/uint32 [2,8]        286331153 i
 *   dtype/uint64 [16]         0x1111111111111111 i
 *   dtype/bool [7]            i % 3 == 0
 *   bits/float16 [256,256]    every binary16 bit pattern i (subnormals, infinities, NaNs)
 *   bits/bfloat16 [256,256]   every bfloat16 bit pattern i
 *   scalar/pi []              float64 3.141592653589793
 *   empty/float32 [3,0,2]     no elements
 *   model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE [6,4] float32 i + 0.5, as 3 pieces of 2 rows
 *   partitioned/cols [3,8]    int16 i - 12, as 2 pieces: columns 0-2 and 3-7
 *   weird "name" \ 100% /é [3] int32 -1000 i
 *   "ctrl/tab\there\nnewline\x01\x1f\x7f" [2] int8 {1, -1}  (control characters in a name)
 *   NAME [2] int32 {k, -k}    for the k-th --name option (k = 1, 2, ...): any bytes the caller
 *                             wants in a name, valid UTF-8 or not (test_cli_hostile.py)
 */
#include "mpickpt/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEIRD_NAME "weird \"name\" \\ 100% /\xc3\xa9"
#define CTRL_NAME "ctrl/tab\there\nnewline\x01\x1f\x7f"

/* The one writer, global so that must() can free it before exiting on an error. */
static ckpt_writer *writer;

/* Reports a failed library call and exits: this is a fixture generator, not a test. */
static void must(int rc, const char *what)
{
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        fprintf(stderr, "make_ckpt: %s: %s\n", what, e ? e->message : ckpt_strerror(rc));
        ckpt_writer_free(writer);
        exit(1);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "make_ckpt: out of memory\n");
        exit(1);
    }
    return p;
}

static ckpt_shape make_shape(int ndims, const int64_t *dims)
{
    ckpt_shape s;
    must(ckpt_shape_init(&s, ndims, dims), "shape");
    return s;
}

/* Adds a whole tensor. */
static void add_full(const char *name, ckpt_dtype dtype, const ckpt_shape *shape, const void *data)
{
    must(ckpt_writer_add(writer, name, dtype, shape, NULL, data), name);
}

/* float -> binary16 bits for values that binary16 holds exactly as normal numbers or zero (the
 * fixture only uses those); aborts otherwise so a formula change cannot silently round. */
static uint16_t float_to_half_exact(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000u;
    if ((b & 0x7fffffffu) == 0)
        return (uint16_t)sign;
    int exp = (int)((b >> 23) & 0xff) - 127 + 15;
    if (exp <= 0 || exp >= 31 || (b & 0x1fffu) != 0)
        abort();
    return (uint16_t)(sign | ((uint32_t)exp << 10) | ((b >> 13) & 0x3ffu));
}

static uint16_t float_to_bfloat16_exact(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    if (b & 0xffffu)
        abort();
    return (uint16_t)(b >> 16);
}

static void add_floats(void)
{
    int64_t d35[] = {3, 5}, d46[] = {4, 6}, d234[] = {2, 3, 4};
    ckpt_shape s35 = make_shape(2, d35), s46 = make_shape(2, d46), s234 = make_shape(3, d234);

    uint16_t h[15], bf[15];
    for (int i = 0; i < 15; i++) {
        h[i] = float_to_half_exact((float)(i - 7) * 0.5f);
        bf[i] = float_to_bfloat16_exact((float)(i - 7) * 0.25f);
    }
    add_full("dtype/float16", CKPT_FLOAT16, &s35, h);
    add_full("dtype/bfloat16", CKPT_BFLOAT16, &s35, bf);

    float f[24];
    for (int i = 0; i < 24; i++)
        f[i] = (float)(i - 10) / 3.0f;
    f[3] = NAN;
    f[4] = INFINITY;
    f[5] = -INFINITY;
    add_full("dtype/float32", CKPT_FLOAT32, &s46, f);

    double d[24];
    for (int i = 0; i < 24; i++)
        d[i] = (double)(i - 10) / 3.0;
    d[23] = 5e-324;
    add_full("dtype/float64", CKPT_FLOAT64, &s234, d);

    /* Every bit pattern: the CLI's half/bfloat16 conversions are checked exhaustively. */
    int64_t d256[] = {256, 256};
    ckpt_shape s256 = make_shape(2, d256);
    uint16_t *bits = xmalloc(65536 * sizeof *bits);
    for (uint32_t i = 0; i < 65536; i++)
        bits[i] = (uint16_t)i;
    add_full("bits/float16", CKPT_FLOAT16, &s256, bits);
    add_full("bits/bfloat16", CKPT_BFLOAT16, &s256, bits);
    free(bits);
}

static void add_integers(void)
{
    int64_t d16[] = {16}, d44[] = {4, 4}, d28[] = {2, 8}, d224[] = {2, 2, 4}, d7[] = {7};
    ckpt_shape s16 = make_shape(1, d16), s44 = make_shape(2, d44), s28 = make_shape(2, d28);
    ckpt_shape s224 = make_shape(3, d224), s7 = make_shape(1, d7);
    int8_t i8[16];
    int16_t i16[16];
    int32_t i32[16];
    int64_t i64[16];
    uint8_t u8[16];
    uint16_t u16[16];
    uint32_t u32[16];
    uint64_t u64[16];
    for (int i = 0; i < 16; i++) {
        i8[i] = (int8_t)(-128 + 17 * i);
        i16[i] = (int16_t)(-32768 + 4369 * i);
        i32[i] = (int32_t)(INT32_MIN + (int64_t)286331153 * i);
        /* -2^63 + k*i without signed overflow: build it unsigned, then reinterpret. */
        uint64_t u = UINT64_C(0x8000000000000000) + UINT64_C(0x1111111111111111) * (uint64_t)i;
        memcpy(&i64[i], &u, 8);
        u8[i] = (uint8_t)(17 * i);
        u16[i] = (uint16_t)(4369 * i);
        u32[i] = (uint32_t)(UINT32_C(286331153) * (uint32_t)i);
        u64[i] = UINT64_C(0x1111111111111111) * (uint64_t)i;
    }
    add_full("dtype/int8", CKPT_INT8, &s16, i8);
    add_full("dtype/int16", CKPT_INT16, &s44, i16);
    add_full("dtype/int32", CKPT_INT32, &s28, i32);
    add_full("dtype/int64", CKPT_INT64, &s224, i64);
    add_full("dtype/uint8", CKPT_UINT8, &s16, u8);
    add_full("dtype/uint16", CKPT_UINT16, &s44, u16);
    add_full("dtype/uint32", CKPT_UINT32, &s28, u32);
    add_full("dtype/uint64", CKPT_UINT64, &s16, u64);

    uint8_t b[7];
    for (int i = 0; i < 7; i++)
        b[i] = i % 3 == 0;
    add_full("dtype/bool", CKPT_BOOL, &s7, b);
}

/* Adds the piece `slice` of a row-major tensor whose full contents are `all`. */
static void add_piece(const char *name, ckpt_dtype dtype, const ckpt_shape *shape,
                      const ckpt_slice *slice, const void *all)
{
    ckpt_slice full;
    ckpt_slice_full(&full, shape);
    int64_t n;
    must(ckpt_slice_num_elements(&n, slice), "slice elements");
    size_t esize = ckpt_dtype_size(dtype);
    void *buf = xmalloc((size_t)n * esize);
    must(ckpt_slice_copy(buf, slice, all, &full, slice, esize), "slice copy");
    must(ckpt_writer_add(writer, name, dtype, shape, slice, buf), name);
    free(buf);
}

static void add_special(void)
{
    ckpt_shape scalar = make_shape(0, NULL);
    double pi = 3.141592653589793;
    add_full("scalar/pi", CKPT_FLOAT64, &scalar, &pi);

    int64_t dempty[] = {3, 0, 2};
    ckpt_shape sempty = make_shape(3, dempty);
    float nothing = 0;
    add_full("empty/float32", CKPT_FLOAT32, &sempty, &nothing);

    /* A Keras-style variable written as three row pieces. */
    const char *kname = "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE";
    int64_t d64[] = {6, 4};
    ckpt_shape s64 = make_shape(2, d64);
    float k[24];
    for (int i = 0; i < 24; i++)
        k[i] = (float)i + 0.5f;
    for (int64_t row = 0; row < 6; row += 2) {
        int64_t start[] = {row, 0}, count[] = {2, 4};
        ckpt_slice piece;
        must(ckpt_slice_init(&piece, 2, start, count), "slice");
        add_piece(kname, CKPT_FLOAT32, &s64, &piece, k);
    }

    /* Column pieces: neither is contiguous in the global row-major layout. */
    int64_t d38[] = {3, 8};
    ckpt_shape s38 = make_shape(2, d38);
    int16_t c[24];
    for (int i = 0; i < 24; i++)
        c[i] = (int16_t)(i - 12);
    int64_t st0[] = {0, 0}, ct0[] = {3, 3}, st1[] = {0, 3}, ct1[] = {3, 5};
    ckpt_slice p0, p1;
    must(ckpt_slice_init(&p0, 2, st0, ct0), "slice");
    must(ckpt_slice_init(&p1, 2, st1, ct1), "slice");
    add_piece("partitioned/cols", CKPT_INT16, &s38, &p1, c); /* out of order on purpose */
    add_piece("partitioned/cols", CKPT_INT16, &s38, &p0, c);

    int64_t d3[] = {3};
    ckpt_shape s3 = make_shape(1, d3);
    int32_t w[3] = {0, -1000, -2000};
    add_full(WEIRD_NAME, CKPT_INT32, &s3, w);

    int64_t d2[] = {2};
    ckpt_shape s2 = make_shape(1, d2);
    int8_t ctrl[2] = {1, -1};
    add_full(CTRL_NAME, CKPT_INT8, &s2, ctrl);
}

/* Adds the tensors of the --name options, in their order. */
static void add_named(int argc, char **argv)
{
    int32_t k = 0;
    int64_t d2[] = {2};
    ckpt_shape s2 = make_shape(1, d2);
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--name") != 0)
            continue;
        k++;
        int32_t v[2] = {k, -k};
        add_full(argv[i + 1], CKPT_INT32, &s2, v);
    }
}

/* Parses "--option VALUE" pairs into opts (--name is added by add_named()); returns 0 or -1 on
 * bad usage. */
static int parse_options(int argc, char **argv, ckpt_writer_options *opts)
{
    for (int i = 2; i < argc; i += 2) {
        char *end;
        if (i + 1 >= argc)
            return -1;
        if (strcmp(argv[i], "--name") == 0)
            continue;
        long long v = strtoll(argv[i + 1], &end, 10);
        if (*argv[i + 1] == '\0' || *end != '\0')
            return -1;
        if (strcmp(argv[i], "--counter") == 0)
            opts->save_counter = v;
        else if (strcmp(argv[i], "--epoch") == 0)
            opts->epoch = v;
        else if (strcmp(argv[i], "--step") == 0)
            opts->step = v;
        else
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    ckpt_writer_options opts = CKPT_WRITER_OPTIONS_INIT;
    if (argc < 2 || parse_options(argc, argv, &opts) != 0) {
        fprintf(stderr, "usage: make_ckpt PREFIX [--counter N] [--epoch E] [--step S] "
                        "[--name NAME]...\n");
        return 2;
    }
    must(ckpt_writer_open(&writer, argv[1], &opts), argv[1]);
    add_floats();
    add_integers();
    add_special();
    add_named(argc, argv);
    must(ckpt_writer_commit(writer), "commit");
    ckpt_writer_free(writer);
    return 0;
}
