/* Internal CRC-32C entry points, exposed so that the unit tests can compare the implementations.
 * Not installed. */
#ifndef MPICKPT_CRC32C_INTERNAL_H
#define MPICKPT_CRC32C_INTERNAL_H

#include "mpickpt/common.h"

/* Same contract as ckpt_crc32c_extend(), always with the portable slicing-by-8 tables. */
uint32_t ckpt__crc32c_portable(uint32_t crc, const void *data, size_t len);

/* CRC-32C of A|B from crc1 = crc(A), crc2 = crc(B) and len2 = len(B) (zlib's crc32_combine). */
uint32_t ckpt__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* CRC-32C of each `block`-byte block of data (the last one shorter) into out[ceil(len/block)];
 * returns the CRC-32C of all of it, combined from the blocks' (one pass over the data). */
uint32_t ckpt__crc32c_blocks(const void *data, size_t len, size_t block, uint32_t *out);

#if defined(__x86_64__) && defined(__GNUC__)
#define CKPT__CRC32C_HAVE_HW 1
/* Same contract as ckpt_crc32c_extend(), with the SSE4.2 crc32 instruction (three interleaved
 * streams over large blocks). Only call it when ckpt_crc32c_hw() returns 1. */
uint32_t ckpt__crc32c_hw_extend(uint32_t crc, const void *data, size_t len);
/* The plain one-instruction-at-a-time SSE4.2 loop, kept as a reference for the tests. */
uint32_t ckpt__crc32c_hw_single(uint32_t crc, const void *data, size_t len);
/* 1 when the CPU (and OS) support AVX-512F and VPCLMULQDQ, so ckpt__crc32c_fold_extend() may run. */
int ckpt__crc32c_have_fold(void);
/* Same contract as ckpt_crc32c_extend(), by carry-less multiplication: 256 bytes per step in four
 * 512-bit registers (about twice the crc32 instruction's speed). ckpt_crc32c_extend() uses it when
 * ckpt__crc32c_have_fold() is 1. */
uint32_t ckpt__crc32c_fold_extend(uint32_t crc, const void *data, size_t len);
#else
#define CKPT__CRC32C_HAVE_HW 0
#endif

#endif
