/*
 * The index file: its container, and reading and writing it.
 *
 * Container: magic[8] | u32 LE container version | u32 LE flags | u64 LE payload length | payload
 * (protobuf) | u32 LE CRC-32C of everything before it (index.h, docs/format.md); the state file
 * uses the same container with its own magic. ckpt__container_open() takes untrusted bytes and
 * accepts them only when the magic, version, length and CRC all check out, pointing into the
 * buffer it was given (nothing outside it is read). Loading an index is reading the file (bounded
 * by CKPT__MAX_INDEX_BYTES, through lib/fsutil.h), opening the container, unpacking and validating
 * (lib/validate.c): a bad file is CKPT_ECORRUPT naming its path, a newer one CKPT_EVERSION.
 * Storing is validating (unless the merge just did), packing and a durable write (temp name,
 * fsync, rename, fsync of the directory): the index's presence is a checkpoint's commit.
 *
 * Also the small pieces every user of the index shares: the names of kinds and layouts, a piece's
 * slices (ckpt__piece_slice) and the format version an index needs.
 *
 * Called by the reader (lib/reader.c), the commit (lib/commit.c), the
 * state file (lib/state.c, the container only), the CLI and the tests.
 */
#include "index.h"

#include "arena.h"
#include "fsutil.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ckpt_kind_name(ckpt_kind kind)
{
    switch (kind) {
    case CKPT_KIND_FULL: return "full";
    case CKPT_KIND_PARTITIONED: return "partitioned";
    case CKPT_KIND_REPLICATED: return "replicated";
    case CKPT_KIND_COMPONENT: return "component";
    case CKPT_KIND_BLOB: return "blob";
    default: return "unknown";
    }
}

const char *ckpt_layout_name(ckpt_layout layout)
{
    switch (layout) {
    case CKPT_LAYOUT_SHARED: return "shared";
    case CKPT_LAYOUT_PER_RANK: return "per-rank";
    case CKPT_LAYOUT_PER_NODE: return "per-node";
    default: return "unknown";
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

int ckpt__container_pack(uint8_t **out, size_t *len, const char magic[8],
                         const ProtobufCMessage *msg)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    size_t total = CKPT__CONTAINER_HEAD + plen + CKPT__CONTAINER_TAIL;
    uint8_t *buf = ckpt__malloc_huge(total); /* large: written in order, then CRC and write */
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "cannot allocate %zu bytes for an index", total);
    memcpy(buf, magic, 8);
    put32(buf + 8, CKPT__CONTAINER_VERSION);
    put32(buf + 12, 0);
    put64(buf + 16, plen);
    protobuf_c_message_pack(msg, buf + CKPT__CONTAINER_HEAD);
    put32(buf + CKPT__CONTAINER_HEAD + plen, ckpt_crc32c(buf, CKPT__CONTAINER_HEAD + plen));
    *out = buf;
    *len = total;
    return CKPT_OK;
}

int ckpt__container_open(const uint8_t **payload, size_t *plen, const uint8_t *buf, size_t len,
                         const char magic[8], const char *path)
{
    if (len < CKPT__CONTAINER_HEAD + CKPT__CONTAINER_TAIL || memcmp(buf, magic, 8) != 0)
        return ckpt__error(CKPT_ECORRUPT, "%s: not an mpickpt %s file (bad magic or %zu bytes)",
                           path, memcmp(magic, CKPT__MAGIC_INDEX, 8) == 0 ? "index" : "state", len);
    uint32_t version = get32(buf + 8);
    if (version > CKPT__CONTAINER_VERSION)
        return ckpt__error(CKPT_EVERSION,
                           "%s: container version %u; this mpickpt (%s) reads up to %u", path,
                           version, ckpt_version(), CKPT__CONTAINER_VERSION);
    if (version == 0)
        return ckpt__error(CKPT_ECORRUPT, "%s: format version 0 is invalid", path);
    uint64_t n = get64(buf + 16);
    if (n != len - CKPT__CONTAINER_HEAD - CKPT__CONTAINER_TAIL)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: truncated or padded: header says %llu payload bytes, file has %zu",
                           path, (unsigned long long)n,
                           len - CKPT__CONTAINER_HEAD - CKPT__CONTAINER_TAIL);
    uint32_t want = get32(buf + len - CKPT__CONTAINER_TAIL);
    uint32_t got = ckpt_crc32c(buf, len - CKPT__CONTAINER_TAIL);
    if (want != got)
        return ckpt__error(CKPT_ECORRUPT, "%s: checksum mismatch (stored %08x, computed %08x)", path,
                           want, got);
    *payload = buf + CKPT__CONTAINER_HEAD;
    *plen = (size_t)n;
    return CKPT_OK;
}

static int fill_slice(ckpt_slice *out, size_t n1, const int64_t *a, size_t n2, const int64_t *b,
                      int nd)
{
    if ((int)n1 != nd || (int)n2 != nd || nd > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_ECORRUPT, "piece has %zu/%zu coordinates for a rank-%d tensor", n1,
                           n2, nd);
    out->ndims = nd;
    for (int i = 0; i < nd; i++) {
        out->start[i] = a[i];
        out->count[i] = b[i];
    }
    return CKPT_OK;
}

int ckpt__piece_slice(ckpt_slice *out, const Mpickpt__Piece *p, int nd)
{
    return fill_slice(out, p->n_start, p->start, p->n_count, p->count, nd);
}

int ckpt__piece_dataset_slice(ckpt_slice *out, const Mpickpt__Piece *p, int nd)
{
    return fill_slice(out, p->n_dataset_start, p->dataset_start, p->n_count, p->count, nd);
}

uint32_t ckpt__index_format_version(const Mpickpt__Index *idx)
{
    for (size_t i = 0; i < idx->n_tensors; i++)
        for (size_t j = 0; j < idx->tensors[i]->n_pieces; j++)
            if (idx->tensors[i]->pieces[j]->packed ||
                idx->tensors[i]->pieces[j]->n_block_crc32c > 0)
                return 2;
    return 1;
}

/* ---- load / store ---------------------------------------------------------------------------- */

/* The index container in the `len` bytes just read into *buf (rc: the read's status); on failure
 * *buf is freed and NULL. */
static int index_open_read(int rc, uint8_t **buf, size_t len, const uint8_t **payload,
                           size_t *plen, const char *path)
{
    if (rc == CKPT_OK)
        rc = ckpt__container_open(payload, plen, *buf, len, CKPT__MAGIC_INDEX, path);
    if (rc != CKPT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

int ckpt__index_read_at(uint8_t **buf, const uint8_t **payload, size_t *plen, int dirfd,
                        const char *name, const char *dir)
{
    size_t len = 0;
    char path[4400];
    *buf = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = ckpt__read_file_at(buf, &len, dirfd, name, CKPT__MAX_INDEX_BYTES, dir);
    return index_open_read(rc, buf, len, payload, plen, path);
}

int ckpt__index_read(uint8_t **buf, const uint8_t **payload, size_t *plen, const char *path)
{
    size_t len = 0;
    *buf = NULL;
    int rc = ckpt__read_file(buf, &len, path, CKPT__MAX_INDEX_BYTES);
    return index_open_read(rc, buf, len, payload, plen, path);
}

int ckpt__index_parse(Mpickpt__Index **out, const uint8_t *payload, size_t plen, const char *path,
                      ProtobufCAllocator *alloc, int validate)
{
    *out = NULL;
    Mpickpt__Index *idx = mpickpt__index__unpack(alloc, plen, payload);
    if (!idx)
        return ckpt__error(CKPT_ECORRUPT, "%s: the index does not parse", path);
    int rc = validate ? ckpt__index_validate(idx, CKPT_ECORRUPT, path) : CKPT_OK;
    if (rc != CKPT_OK) {
        mpickpt__index__free_unpacked(idx, alloc);
        return rc;
    }
    *out = idx;
    return CKPT_OK;
}

int ckpt__index_load(Mpickpt__Index **out, const char *path)
{
    uint8_t *buf;
    const uint8_t *payload;
    size_t plen;
    *out = NULL;
    int rc = ckpt__index_read(&buf, &payload, &plen, path);
    if (rc == CKPT_OK)
        rc = ckpt__index_parse(out, payload, plen, path, NULL, 1);
    free(buf);
    return rc;
}

int ckpt__index_store(const Mpickpt__Index *idx, const char *path)
{
    int rc = ckpt__index_validate(idx, CKPT_EMISMATCH, path);
    if (rc != CKPT_OK)
        return rc;
    return ckpt__index_store_merged(idx, path);
}

int ckpt__index_store_merged_at(const Mpickpt__Index *idx, int dirfd, const char *name,
                                const char *shown, int *renamed, int replace)
{
    if (renamed)
        *renamed = 0;
    uint8_t *buf;
    size_t len;
    int rc = ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &idx->base);
    if (rc != CKPT_OK)
        return rc;
    rc = replace ? ckpt__write_file_atomic_at(dirfd, name, buf, len, shown, renamed)
                 : ckpt__write_file_new_at(dirfd, name, buf, len, shown, renamed);
    free(buf);
    return rc;
}

int ckpt__index_store_merged(const Mpickpt__Index *idx, const char *path)
{
    int rc;
    uint8_t *buf;
    size_t len;
    if ((rc = ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &idx->base)) != CKPT_OK)
        return rc;
    rc = ckpt__write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}
