/**
 * @file mpickpt/crc32c.h
 * @brief CRC-32C (Castagnoli), as used for every stored piece.
 */
#ifndef MPICKPT_CRC32C_H
#define MPICKPT_CRC32C_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Extends @p crc (0 to start) with @p len bytes. ckpt_crc32c_extend(ckpt_crc32c_extend(0, a), b)
 * equals the CRC of a followed by b. Uses the CPU's crc32 instruction when present.
 * The CRC of "123456789" is 0xE3069283.
 */
CKPT_EXTERN uint32_t ckpt_crc32c_extend(uint32_t crc, const void *data, size_t len);

/** CRC-32C of @p len bytes. */
CKPT_EXTERN uint32_t ckpt_crc32c(const void *data, size_t len);

/** TensorFlow's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
CKPT_EXTERN uint32_t ckpt_crc32c_mask(uint32_t crc);

/** Inverse of ckpt_crc32c_mask(). */
CKPT_EXTERN uint32_t ckpt_crc32c_unmask(uint32_t masked);

/** 1 when the hardware (SSE4.2) path is in use, 0 for the portable table-driven path. */
CKPT_EXTERN int ckpt_crc32c_hw(void);

#ifdef __cplusplus
}
#endif
#endif
