/* CRC-32C (Castagnoli): portable slicing-by-8, and on x86-64 an SSE4.2 path and an AVX-512
 * VPCLMULQDQ folding path, chosen at run time. */
#include "mpickpt/crc32c.h"

#include "crc32c_internal.h"

#if CKPT__CRC32C_HAVE_HW
#include <immintrin.h>
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define CRC32C_MASK_DELTA 0xa282ead8u

/* crc_table[0] is the byte-at-a-time table; crc_table[k][b] advances b by k more zero bytes. */
static uint32_t crc_table[8][256];

#if CKPT__CRC32C_HAVE_HW
/* Block sizes of the three-stream loop. LONG streams keep the combine cost negligible for big
 * buffers, SHORT ones still pay off for mid-sized ones (>= 768 bytes). */
#define CRC_LONG 8192
#define CRC_SHORT 256
/* shift_x[k][b]: the raw CRC register (b << 8k) advanced over CRC_x zero bytes, i.e. multiplied
 * by x^(8 * CRC_x) mod P, split per byte so that a 32-bit shift is 4 lookups. */
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];
/* Folding constants: fold_k[i] = {K(d + 32), K(d - 32)} for the distances d of fold_dist[], where
 * K(n) = x^n mod P, bit-reflected and shifted left by one (see ckpt__crc32c_fold_extend). */
static const unsigned fold_dist[5] = { 2048, 512, 384, 256, 128 };
static uint64_t fold_k[5][2];
#endif

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

#if CKPT__CRC32C_HAVE_HW
/* Fills `table` with the operator "advance the raw CRC register over n zero bytes". The operator
 * is linear over GF(2), so it is built from its images of the 32 basis vectors. */
static void init_shift_table(uint32_t table[4][256], size_t n)
{
    uint32_t basis[32];
    for (int i = 0; i < 32; i++) {
        uint32_t c = (uint32_t)1 << i;
        for (size_t j = 0; j < n; j++)
            c = crc_table[0][c & 0xff] ^ (c >> 8);
        basis[i] = c;
    }
    for (int k = 0; k < 4; k++) {
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b & (1 << i))
                    v ^= basis[8 * k + i];
            table[k][b] = v;
        }
    }
}
#endif

#if CKPT__CRC32C_HAVE_HW
/* x^n mod P for the Castagnoli polynomial P (0x1EDC6F41 plus x^32), bit-reflected into 32 bits and
 * shifted left by one, the form a carry-less multiply of reflected data needs. */
static uint64_t fold_constant(unsigned n)
{
    uint64_t v = 1;
    for (unsigned i = 0; i < n; i++) {
        v <<= 1;
        if (v & ((uint64_t)1 << 32))
            v ^= 0x11EDC6F41ull;
    }
    uint32_t r = 0;
    for (int i = 0; i < 32; i++)
        if (v & ((uint64_t)1 << i))
            r |= (uint32_t)1 << (31 - i);
    return (uint64_t)r << 1;
}
#endif

static void init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xff];
#if CKPT__CRC32C_HAVE_HW
    init_shift_table(shift_long, CRC_LONG);
    init_shift_table(shift_short, CRC_SHORT);
    for (int i = 0; i < 5; i++) {
        fold_k[i][0] = fold_constant(fold_dist[i] + 32);
        fold_k[i][1] = fold_constant(fold_dist[i] - 32);
    }
#endif
}

/* Little-endian 32-bit load from any address; one mov on x86, correct on big-endian hosts. */
static inline uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t ckpt__crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&tables_once, init_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo = c ^ load_le32(p), hi = load_le32(p + 4);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    return ~c;
}

#if CKPT__CRC32C_HAVE_HW

/* Raw CRC register advanced over the zero bytes that `table` stands for. */
static inline uint32_t crc_shift(const uint32_t table[4][256], uint32_t c)
{
    return table[0][c & 0xff] ^ table[1][(c >> 8) & 0xff] ^ table[2][(c >> 16) & 0xff] ^
           table[3][c >> 24];
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v); /* x86 is little-endian and allows unaligned loads */
    return v;
}

__attribute__((target("sse4.2"))) uint32_t ckpt__crc32c_hw_single(uint32_t crc, const void *data,
                                                                  size_t len)
{
    const unsigned char *p = data;
    uint64_t c = ~crc;
    for (; len >= 8; p += 8, len -= 8)
        c = __builtin_ia32_crc32di(c, load64(p));
    uint32_t c32 = (uint32_t)c;
    for (; len > 0; len--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}

/*
 * The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one
 * dependent chain runs at a third of the possible speed. A block of 3*B bytes is therefore split
 * into three streams computed in parallel, the 2nd and 3rd from a zero register; since the raw
 * CRC is linear, crc(A|B) = shift_B(crc(A)) ^ crc0(B), which folds them back together.
 */
__attribute__((target("sse4.2"))) uint32_t ckpt__crc32c_hw_extend(uint32_t crc, const void *data,
                                                                  size_t len)
{
    pthread_once(&tables_once, init_tables);
    const unsigned char *p = data;
    uint32_t c32 = ~crc;
    /* Align to 8 so that the 8-byte loads do not straddle cache lines needlessly. */
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
        len--;
    }
    uint64_t c0 = c32;
    while (len >= 3 * (size_t)CRC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + CRC_LONG;
        do {
            c0 = __builtin_ia32_crc32di(c0, load64(p));
            c1 = __builtin_ia32_crc32di(c1, load64(p + CRC_LONG));
            c2 = __builtin_ia32_crc32di(c2, load64(p + 2 * CRC_LONG));
            p += 8;
        } while (p < end);
        c0 = crc_shift(shift_long, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(shift_long, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_LONG;
        len -= 3 * (size_t)CRC_LONG;
    }
    while (len >= 3 * (size_t)CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + CRC_SHORT;
        do {
            c0 = __builtin_ia32_crc32di(c0, load64(p));
            c1 = __builtin_ia32_crc32di(c1, load64(p + CRC_SHORT));
            c2 = __builtin_ia32_crc32di(c2, load64(p + 2 * CRC_SHORT));
            p += 8;
        } while (p < end);
        c0 = crc_shift(shift_short, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(shift_short, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_SHORT;
        len -= 3 * (size_t)CRC_SHORT;
    }
    for (; len >= 8; p += 8, len -= 8)
        c0 = __builtin_ia32_crc32di(c0, load64(p));
    c32 = (uint32_t)c0;
    for (; len > 0; len--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}

#define FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

/* x advanced over d bits (its constants k) and XORed into `data`: the 128-bit lanes of x hold
 * message bits whose polynomial, times x^d, is congruent mod P to lo*K(d+32) + hi*K(d-32) read
 * as a 128-bit chunk (the reflected multiply supplies the remaining shift). */
FOLD_TARGET static inline __m512i fold512(__m512i x, __m512i k, __m512i data)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), data, 0x96);
}

FOLD_TARGET static inline __m128i fold128(__m128i x, __m128i k, __m128i data)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                       _mm_clmulepi64_si128(x, k, 0x11)),
                         data);
}

FOLD_TARGET static inline __m128i fold_const128(int i)
{
    return _mm_set_epi64x((long long)fold_k[i][1], (long long)fold_k[i][0]);
}

/*
 * Folding (Intel's "Fast CRC Computation Using PCLMULQDQ", widened to 512 bits): four registers
 * of 64 bytes each absorb 256 bytes per step, each folded forward over 2048 bits; the four are
 * then folded into one, its four 128-bit lanes into one, and the last 16 bytes of state are
 * reduced to 32 bits by the crc32 instruction (their CRC is the CRC of everything folded into
 * them). The initial register is XORed into the first 4 bytes; lengths under 256 take the crc32
 * instruction directly.
 */
FOLD_TARGET uint32_t ckpt__crc32c_fold_extend(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&tables_once, init_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    if (len >= 256) {
        __m512i k2048 = _mm512_broadcast_i32x4(fold_const128(0));
        __m512i k512 = _mm512_broadcast_i32x4(fold_const128(1));
        __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64),
                x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
        x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
        p += 256;
        len -= 256;
        for (; len >= 256; p += 256, len -= 256) {
            x0 = fold512(x0, k2048, _mm512_loadu_si512(p));
            x1 = fold512(x1, k2048, _mm512_loadu_si512(p + 64));
            x2 = fold512(x2, k2048, _mm512_loadu_si512(p + 128));
            x3 = fold512(x3, k2048, _mm512_loadu_si512(p + 192));
        }
        x1 = fold512(x0, k512, x1);
        x2 = fold512(x1, k512, x2);
        x3 = fold512(x2, k512, x3);
        for (; len >= 64; p += 64, len -= 64)
            x3 = fold512(x3, k512, _mm512_loadu_si512(p));
        __m128i a = _mm512_extracti32x4_epi32(x3, 3);
        a = fold128(_mm512_extracti32x4_epi32(x3, 0), fold_const128(2), a);
        a = fold128(_mm512_extracti32x4_epi32(x3, 1), fold_const128(3), a);
        a = fold128(_mm512_extracti32x4_epi32(x3, 2), fold_const128(4), a);
        for (; len >= 16; p += 16, len -= 16)
            a = fold128(a, fold_const128(4), _mm_loadu_si128((const __m128i *)(const void *)p));
        uint64_t r = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(a));
        c = (uint32_t)_mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(a, 1));
    }
    uint64_t c64 = c;
    for (; len >= 8; p += 8, len -= 8)
        c64 = _mm_crc32_u64(c64, load64(p));
    c = (uint32_t)c64;
    for (; len > 0; len--)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}

/* 0 = not probed yet, 1 = SSE4.2, 2 = portable, 3 = folding (AVX-512 VPCLMULQDQ, and SSE4.2).
 * Racing probes store the same value. */
static atomic_int crc_impl;

static int probe_impl(void)
{
    int impl = atomic_load_explicit(&crc_impl, memory_order_relaxed);
    if (impl == 0) {
        __builtin_cpu_init();
        impl = !__builtin_cpu_supports("sse4.2") ? 2
               : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
                       __builtin_cpu_supports("pclmul")
                   ? 3
                   : 1;
        atomic_store_explicit(&crc_impl, impl, memory_order_relaxed);
    }
    return impl;
}

int ckpt_crc32c_hw(void)
{
    return probe_impl() != 2;
}

int ckpt__crc32c_have_fold(void)
{
    return probe_impl() == 3;
}

uint32_t ckpt_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
    switch (probe_impl()) {
    case 3: return ckpt__crc32c_fold_extend(crc, data, len);
    case 1: return ckpt__crc32c_hw_extend(crc, data, len);
    default: return ckpt__crc32c_portable(crc, data, len);
    }
}

#else /* !CKPT__CRC32C_HAVE_HW */

int ckpt_crc32c_hw(void)
{
    return 0;
}

uint32_t ckpt_crc32c_extend(uint32_t crc, const void *data, size_t len)
{
    return ckpt__crc32c_portable(crc, data, len);
}

#endif

/* a * b mod P, both reflected (bit 31 is x^0), as in zlib's crc32_combine. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

uint32_t ckpt__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    /* crc(A|B) = crc(A) * x^(8 len(B)) + crc(B) mod P (the pre- and post-inversions cancel).
     * x^(8n) is built from x^(2^k) by squaring: p starts at x^8 and squares per bit of n. */
    uint32_t x = (uint32_t)1 << 31, p = (uint32_t)1 << 23; /* x^0, x^8 */
    for (; len2; len2 >>= 1) {
        if (len2 & 1)
            x = multmodp(p, x);
        p = multmodp(p, p);
    }
    return multmodp(x, crc1) ^ crc2;
}

uint32_t ckpt__crc32c_blocks(const void *data, size_t len, size_t block, uint32_t *out)
{
    const unsigned char *p = data;
    uint32_t whole = 0;
    for (size_t i = 0, off = 0; off < len; i++, off += block) {
        size_t n = len - off < block ? len - off : block;
        out[i] = ckpt_crc32c(p + off, n);
        whole = off == 0 ? out[i] : ckpt__crc32c_combine(whole, out[i], n);
    }
    return whole;
}

uint32_t ckpt_crc32c(const void *data, size_t len)
{
    return ckpt_crc32c_extend(0, data, len);
}

uint32_t ckpt_crc32c_mask(uint32_t crc)
{
    /* Rotate right by 15 bits and add a constant (TensorFlow's crc32c::Mask). */
    return ((crc >> 15) | (crc << 17)) + CRC32C_MASK_DELTA;
}

uint32_t ckpt_crc32c_unmask(uint32_t masked)
{
    uint32_t rot = masked - CRC32C_MASK_DELTA;
    return (rot >> 17) | (rot << 15);
}
