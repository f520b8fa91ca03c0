/* Internal: a string hash for the hash tables of the merge (lib/merge.c) and of the validation's
 * file lookup (lib/validate.c). Not keyed: names can be made to collide. The tables that use it
 * compare every candidate in full (a collision costs a probe, never a wrong answer), and the one
 * that reads untrusted input (an index from disk) bounds its probes. */
#ifndef MPICKPT_STRHASH_H
#define MPICKPT_STRHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Tensor names share long prefixes ("model/transformer/block_0012/..."), so the hash reads them
 * 8 bytes at a time; murmur3's finalizer spreads the bits for the table index. */
static inline uint64_t ckpt__strhash(const char *s, size_t n)
{
    uint64_t h = n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = ((h << 5 | h >> 59) ^ w) * 0x517cc1b727220a95u;
    }
    w = 0;
    memcpy(&w, s, n);
    h = ((h << 5 | h >> 59) ^ w) * 0x517cc1b727220a95u;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
    h *= 0xc4ceb34cd9ed1a53u;
    return h ^ h >> 33;
}

#endif
