/* TensorFlow's table format (LevelDB's SSTable, tensorflow/core/lib/io/table_*), which holds a
 * tensor bundle's `.index`: what import-tf reads and export --format tf writes
 * (docs/interop.md describes the bytes).
 *
 * A table is data blocks, an (empty) metaindex block, an index block and a 48-byte footer. Each
 * block is a run of prefix-compressed entries (varint32 shared, non_shared and value lengths, the
 * key's unshared bytes, the value), a fixed32 array of restart offsets and its count; on disk it
 * is followed by a type byte (0 stored, 1 Snappy) and the masked CRC-32C of the stored bytes and
 * the type byte. The index block maps a separator key (>= the last key of a block, < the first
 * of the next) to the block's handle (varint64 offset, varint64 size). The footer holds the
 * metaindex and index handles padded to 40 bytes and the magic 0xdb4775248b80fb57. */
#ifndef MPICKPT_SSTABLE_H
#define MPICKPT_SSTABLE_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#define CKPT__SST_MAGIC 0xdb4775248b80fb57ull
#define CKPT__SST_FOOTER_SIZE 48
#define CKPT__SST_BLOCK_SIZE 262144 /* TensorFlow's table::Options::block_size */
#define CKPT__SST_RESTART_INTERVAL 16

/* Called for each entry of the table, in order. A non-OK return stops the scan with that code. */
typedef int (*ckpt__sst_fn)(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                            void *payload);

/*
 * Reads the table held whole in `file` (`len` bytes; `shown` names it in messages): checks the
 * footer's magic, every block's handle, checksum and (Snappy) contents, every entry's encoding,
 * the restart arrays, that keys strictly increase across the whole table and that the index
 * block's keys separate the blocks; calls fn for every data entry in key order.
 * CKPT_ECORRUPT names the block (by offset) and what is wrong.
 */
int ckpt__sst_scan(const uint8_t *file, size_t len, const char *shown, ckpt__sst_fn fn,
                   void *payload);

/* A table being built in memory, block by block as TensorFlow's TableBuilder builds it (so the
 * same entries give the same bytes). */
typedef struct ckpt__sst_writer ckpt__sst_writer;

/* block_size 0: CKPT__SST_BLOCK_SIZE; restart_interval 0: CKPT__SST_RESTART_INTERVAL; snappy 1:
 * compress a block when that saves at least an eighth, as TensorFlow does (it writes bundles
 * uncompressed). */
int ckpt__sst_writer_new(ckpt__sst_writer **out, size_t block_size, int restart_interval,
                         int snappy);
/* Keys must strictly increase (CKPT_EINVAL otherwise). */
int ckpt__sst_add(ckpt__sst_writer *w, const uint8_t *key, size_t klen, const uint8_t *value,
                  size_t vlen);
/* Finishes the table; *out (malloc'd, the caller frees it) holds the whole file. */
int ckpt__sst_finish(ckpt__sst_writer *w, uint8_t **out, size_t *len);
void ckpt__sst_writer_free(ckpt__sst_writer *w);

/* varints as the format writes them; get returns the bytes used, 0 when malformed/truncated. */
size_t ckpt__varint_put(uint8_t *out, uint64_t v); /* out: 10 bytes */
size_t ckpt__varint_get(const uint8_t *p, size_t avail, uint64_t *v, int max_bytes);

#endif
