/* TensorFlow's table format: reader and writer (lib/interop/sstable.h). */
#include "sstable.h"

#include "mpickpt/crc32c.h"

#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>

#define TRAILER 5                         /* type byte + fixed32 masked CRC-32C */
#define MAX_BLOCK ((size_t)1 << 30)       /* a block's uncompressed size we accept */

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

size_t ckpt__varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t ckpt__varint_get(const uint8_t *p, size_t avail, uint64_t *v, int max_bytes)
{
    uint64_t r = 0;
    for (int i = 0; i < max_bytes && (size_t)i < avail; i++) {
        uint64_t b = p[i] & 0x7f;
        if (i == 9 && b > 1)
            return 0; /* more than 64 bits */
        r |= b << (7 * i);
        if (!(p[i] & 0x80)) {
            if (max_bytes == 5 && r > UINT32_MAX)
                return 0;
            *v = r;
            return (size_t)i + 1;
        }
    }
    return 0;
}

/* ---- reading ---- */

typedef struct handle {
    uint64_t offset, size;
} handle;

static int get_handle(handle *h, const uint8_t **p, const uint8_t *end)
{
    size_t n = ckpt__varint_get(*p, (size_t)(end - *p), &h->offset, 10);
    if (!n)
        return 0;
    *p += n;
    n = ckpt__varint_get(*p, (size_t)(end - *p), &h->size, 10);
    if (!n)
        return 0;
    *p += n;
    return 1;
}

/* A block's contents, checked and uncompressed. `owned` is malloc'd (Snappy) or NULL. */
typedef struct block {
    const uint8_t *data;
    size_t size;
    uint8_t *owned;
} block;

static int read_block(block *b, const uint8_t *file, size_t len, const handle *h,
                      const char *what, const char *shown)
{
    memset(b, 0, sizeof *b);
    if (h->offset > len || h->size > len - h->offset || len - h->offset - h->size < TRAILER)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: %s block at offset %llu (%llu bytes) lies outside the file "
                           "(%zu bytes): truncated or corrupt",
                           shown, what, (unsigned long long)h->offset,
                           (unsigned long long)h->size, len);
    const uint8_t *p = file + h->offset;
    size_t n = (size_t)h->size;
    uint32_t want = ckpt_crc32c_unmask(get32(p + n + 1));
    uint32_t got = ckpt_crc32c(p, n + 1);
    if (want != got)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: %s block at offset %llu: checksum mismatch (stored %08x, "
                           "computed %08x)",
                           shown, what, (unsigned long long)h->offset, want, got);
    if (p[n] == 0) {
        b->data = p;
        b->size = n;
        return CKPT_OK;
    }
    if (p[n] != 1)
        return ckpt__error(CKPT_ECORRUPT, "%s: %s block at offset %llu: unknown block type %u",
                           shown, what, (unsigned long long)h->offset, p[n]);
    size_t ulen = 0;
    /* Snappy expands at most ~21x (a 3-byte copy of 64 bytes): a larger claim is a lie, refused
     * before anything is allocated for it */
    if (snappy_uncompressed_length((const char *)p, n, &ulen) != SNAPPY_OK || ulen > MAX_BLOCK ||
        ulen / 32 > n + 64)
        return ckpt__error(CKPT_ECORRUPT, "%s: %s block at offset %llu: bad Snappy contents",
                           shown, what, (unsigned long long)h->offset);
    uint8_t *u = malloc(ulen ? ulen : 1);
    if (!u)
        return ckpt__error(CKPT_ENOMEM, "%s: cannot allocate %zu bytes", shown, ulen);
    size_t got_len = ulen;
    if (snappy_uncompress((const char *)p, n, (char *)u, &got_len) != SNAPPY_OK ||
        got_len != ulen) {
        free(u);
        return ckpt__error(CKPT_ECORRUPT, "%s: %s block at offset %llu: bad Snappy contents",
                           shown, what, (unsigned long long)h->offset);
    }
    b->data = u;
    b->size = ulen;
    b->owned = u;
    return CKPT_OK;
}

/* Iterates the entries of a block, rebuilding each key. */
typedef struct block_iter {
    const uint8_t *data;
    size_t limit;    /* offset of the restart array */
    size_t pos;      /* next entry */
    uint32_t nrestarts;
    uint32_t next_restart; /* index of the next restart point to meet */
    uint8_t *key;
    size_t klen, kcap;
    const uint8_t *value;
    size_t vlen;
} block_iter;

static int iter_init(block_iter *it, const block *b, const char *what, uint64_t off,
                     const char *shown)
{
    memset(it, 0, sizeof *it);
    it->data = b->data;
    if (b->size < 4)
        goto bad;
    it->nrestarts = get32(b->data + b->size - 4);
    if (it->nrestarts > (b->size - 4) / 4)
        goto bad;
    it->limit = b->size - 4 - 4 * (size_t)it->nrestarts;
    if (it->nrestarts == 0 && it->limit > 0)
        goto bad; /* entries but no restart point to find them by */
    uint32_t prev = 0;
    for (uint32_t i = 0; i < it->nrestarts; i++) {
        uint32_t r = get32(b->data + it->limit + 4 * (size_t)i);
        if ((i == 0 && r != 0) || (i > 0 && r <= prev) || (r >= it->limit && it->limit > 0) ||
            (it->limit == 0 && r != 0))
            goto bad;
        prev = r;
    }
    return CKPT_OK;
bad:
    return ckpt__error(CKPT_ECORRUPT, "%s: %s block at offset %llu: bad restart array", shown,
                       what, (unsigned long long)off);
}

/* 1: an entry; 0: the end; <0: an error. */
static int iter_next(block_iter *it, const char *what, uint64_t off, const char *shown)
{
    if (it->pos >= it->limit) {
        if (it->limit > 0 && it->next_restart < it->nrestarts)
            goto bad; /* a restart point past the last entry */
        return 0;
    }
    const uint8_t *p = it->data + it->pos, *end = it->data + it->limit;
    uint64_t shared, non_shared, vlen;
    size_t n;
    if (!(n = ckpt__varint_get(p, (size_t)(end - p), &shared, 5)))
        goto bad;
    p += n;
    if (!(n = ckpt__varint_get(p, (size_t)(end - p), &non_shared, 5)))
        goto bad;
    p += n;
    if (!(n = ckpt__varint_get(p, (size_t)(end - p), &vlen, 5)))
        goto bad;
    p += n;
    if (shared > it->klen || non_shared > (uint64_t)(end - p) ||
        vlen > (uint64_t)(end - p) - non_shared)
        goto bad;
    int at_restart = it->next_restart < it->nrestarts &&
                     get32(it->data + it->limit + 4 * (size_t)it->next_restart) == it->pos;
    if (at_restart) {
        if (shared != 0)
            goto bad;
        it->next_restart++;
    } else if (it->next_restart < it->nrestarts &&
               get32(it->data + it->limit + 4 * (size_t)it->next_restart) < it->pos) {
        goto bad; /* a restart point inside an entry */
    }
    size_t need = (size_t)shared + (size_t)non_shared;
    if (need > it->kcap) {
        size_t cap = need * 2 + 16;
        uint8_t *k = realloc(it->key, cap);
        if (!k)
            return ckpt__error(CKPT_ENOMEM, "%s: out of memory", shown);
        it->key = k;
        it->kcap = cap;
    }
    if (non_shared)
        memcpy(it->key + shared, p, (size_t)non_shared);
    it->klen = need;
    it->value = p + non_shared;
    it->vlen = (size_t)vlen;
    it->pos = (size_t)(it->value + it->vlen - it->data);
    return 1;
bad:
    return ckpt__error(CKPT_ECORRUPT, "%s: %s block at offset %llu: malformed entry at %zu",
                       shown, what, (unsigned long long)off, it->pos);
}

static int key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

int ckpt__sst_scan(const uint8_t *file, size_t len, const char *shown, ckpt__sst_fn fn,
                   void *payload)
{
    if (len < CKPT__SST_FOOTER_SIZE)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: %zu bytes, too short for a table footer (%d): not a TensorFlow "
                           "index, or truncated",
                           shown, len, CKPT__SST_FOOTER_SIZE);
    const uint8_t *foot = file + len - CKPT__SST_FOOTER_SIZE;
    uint64_t magic = (uint64_t)get32(foot + 40) | (uint64_t)get32(foot + 44) << 32;
    if (magic != CKPT__SST_MAGIC)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: bad table magic %016llx (expected %016llx): not a TensorFlow "
                           "index, or truncated",
                           shown, (unsigned long long)magic, CKPT__SST_MAGIC);
    handle meta, index;
    const uint8_t *p = foot;
    if (!get_handle(&meta, &p, foot + 40) || !get_handle(&index, &p, foot + 40))
        return ckpt__error(CKPT_ECORRUPT, "%s: malformed table footer", shown);
    size_t body = len - CKPT__SST_FOOTER_SIZE;
    block ib;
    int rc = read_block(&ib, file, body, &index, "index", shown);
    if (rc != CKPT_OK)
        return rc;
    block_iter ii, di;
    memset(&di, 0, sizeof di);
    uint8_t *last = NULL; /* the previous data key, and whether there was one */
    size_t last_len = 0, last_cap = 0;
    int have_last = 0;
    uint8_t *prev_sep = NULL;
    size_t prev_sep_len = 0;
    int have_sep = 0;
    block db;
    memset(&db, 0, sizeof db);
    if ((rc = iter_init(&ii, &ib, "index", index.offset, shown)) != CKPT_OK)
        goto done;
    uint64_t next_off = 0; /* data blocks follow each other from offset 0 */
    for (;;) {
        int more = iter_next(&ii, "index", index.offset, shown);
        if (more < 0) {
            rc = more;
            goto done;
        }
        if (!more)
            break;
        handle h;
        const uint8_t *hp = ii.value;
        if (!get_handle(&h, &hp, ii.value + ii.vlen) || hp != ii.value + ii.vlen) {
            rc = ckpt__error(CKPT_ECORRUPT, "%s: index block: malformed block handle", shown);
            goto done;
        }
        if (h.offset != next_off) {
            rc = ckpt__error(CKPT_ECORRUPT,
                             "%s: index block: data block at offset %llu, expected %llu", shown,
                             (unsigned long long)h.offset, (unsigned long long)next_off);
            goto done;
        }
        if (have_sep && key_cmp(ii.key, ii.klen, prev_sep, prev_sep_len) <= 0) {
            rc = ckpt__error(CKPT_ECORRUPT, "%s: index block: keys out of order", shown);
            goto done;
        }
        if ((rc = read_block(&db, file, body, &h, "data", shown)) != CKPT_OK)
            goto done;
        next_off = h.offset + h.size + TRAILER;
        free(di.key);
        if ((rc = iter_init(&di, &db, "data", h.offset, shown)) != CKPT_OK)
            goto done;
        int n = 0;
        for (;; n++) {
            int e = iter_next(&di, "data", h.offset, shown);
            if (e < 0) {
                rc = e;
                goto done;
            }
            if (!e)
                break;
            if (have_last && key_cmp(di.key, di.klen, last, last_len) <= 0) {
                char k1[160], k2[160];
                rc = ckpt__error(CKPT_ECORRUPT,
                                 "%s: data block at offset %llu: keys not in strictly "
                                 "increasing order: '%s' %s '%s'",
                                 shown, (unsigned long long)h.offset,
                                 ckpt__escape_bytes(k1, sizeof k1, (const char *)di.key, di.klen),
                                 key_cmp(di.key, di.klen, last, last_len) == 0 ? "repeats"
                                                                               : "follows",
                                 ckpt__escape_bytes(k2, sizeof k2, (const char *)last, last_len));
                goto done;
            }
            if (key_cmp(di.key, di.klen, ii.key, ii.klen) > 0 ||
                (have_sep && key_cmp(di.key, di.klen, prev_sep, prev_sep_len) <= 0)) {
                char k1[160];
                rc = ckpt__error(CKPT_ECORRUPT,
                                 "%s: data block at offset %llu holds a key outside its index "
                                 "entry's range: '%s'",
                                 shown, (unsigned long long)h.offset,
                                 ckpt__escape_bytes(k1, sizeof k1, (const char *)di.key, di.klen));
                goto done;
            }
            if (di.klen > last_cap) {
                uint8_t *k = realloc(last, di.klen * 2);
                if (!k) {
                    rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory", shown);
                    goto done;
                }
                last = k;
                last_cap = di.klen * 2;
            }
            if (di.klen)
                memcpy(last, di.key, di.klen);
            last_len = di.klen;
            have_last = 1;
            if ((rc = fn(di.key, di.klen, di.value, di.vlen, payload)) != CKPT_OK)
                goto done;
        }
        if (n == 0) {
            rc = ckpt__error(CKPT_ECORRUPT, "%s: data block at offset %llu is empty", shown,
                             (unsigned long long)h.offset);
            goto done;
        }
        free(db.owned);
        memset(&db, 0, sizeof db);
        free(prev_sep);
        prev_sep = malloc(ii.klen ? ii.klen : 1);
        if (!prev_sep) {
            rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory", shown);
            goto done;
        }
        if (ii.klen)
            memcpy(prev_sep, ii.key, ii.klen);
        prev_sep_len = ii.klen;
        have_sep = 1;
    }
    /* the metaindex block follows the data blocks; it is read for its checksum only */
    if (meta.offset != next_off) {
        rc = ckpt__error(CKPT_ECORRUPT, "%s: metaindex block at offset %llu, expected %llu",
                         shown, (unsigned long long)meta.offset, (unsigned long long)next_off);
        goto done;
    }
    if ((rc = read_block(&db, file, body, &meta, "metaindex", shown)) != CKPT_OK)
        goto done;
    if (index.offset != meta.offset + meta.size + TRAILER ||
        index.offset + index.size + TRAILER != body)
        rc = ckpt__error(CKPT_ECORRUPT, "%s: the index block is not where the footer's layout "
                         "puts it (offset %llu): truncated or corrupt",
                         shown, (unsigned long long)index.offset);
done:
    free(db.owned);
    free(ib.owned);
    free(ii.key);
    free(di.key);
    free(last);
    free(prev_sep);
    return rc;
}

/* ---- writing ---- */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

static int buf_reserve(buf *b, size_t more)
{
    if (more <= b->cap - b->len)
        return CKPT_OK;
    if (more > SIZE_MAX / 2 - b->len)
        return ckpt__error(CKPT_ENOMEM, "table: too large");
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < more)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return ckpt__error(CKPT_ENOMEM, "table: cannot allocate %zu bytes", cap);
    b->p = p;
    b->cap = cap;
    return CKPT_OK;
}

static int buf_add(buf *b, const void *data, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc == CKPT_OK && n) {
        memcpy(b->p + b->len, data, n);
        b->len += n;
    }
    return rc;
}

static int buf_varint(buf *b, uint64_t v)
{
    uint8_t tmp[10];
    return buf_add(b, tmp, ckpt__varint_put(tmp, v));
}

static int buf_fixed32(buf *b, uint32_t v)
{
    uint8_t tmp[4];
    put32(tmp, v);
    return buf_add(b, tmp, 4);
}

typedef struct block_builder {
    buf data;
    uint32_t *restarts;
    size_t nrestarts, rcap;
    int counter;
    int interval;
    buf last;
} block_builder;

static void bb_reset(block_builder *b)
{
    b->data.len = 0;
    b->nrestarts = 1;
    b->restarts[0] = 0;
    b->counter = 0;
    b->last.len = 0;
}

static int bb_init(block_builder *b, int interval)
{
    memset(b, 0, sizeof *b);
    b->interval = interval;
    b->rcap = 16;
    b->restarts = malloc(b->rcap * sizeof *b->restarts);
    if (!b->restarts)
        return ckpt__error(CKPT_ENOMEM, "table: out of memory");
    bb_reset(b);
    return CKPT_OK;
}

static void bb_free(block_builder *b)
{
    free(b->data.p);
    free(b->restarts);
    free(b->last.p);
}

static size_t bb_estimate(const block_builder *b)
{
    return b->data.len + b->nrestarts * 4 + 4;
}

static int bb_empty(const block_builder *b)
{
    return b->data.len == 0;
}

static int bb_add(block_builder *b, const uint8_t *key, size_t klen, const uint8_t *value,
                  size_t vlen)
{
    size_t shared = 0;
    if (b->counter < b->interval) {
        size_t n = b->last.len < klen ? b->last.len : klen;
        while (shared < n && b->last.p[shared] == key[shared])
            shared++;
    } else {
        if (b->nrestarts == b->rcap) {
            uint32_t *r = realloc(b->restarts, 2 * b->rcap * sizeof *r);
            if (!r)
                return ckpt__error(CKPT_ENOMEM, "table: out of memory");
            b->restarts = r;
            b->rcap *= 2;
        }
        b->restarts[b->nrestarts++] = (uint32_t)b->data.len;
        b->counter = 0;
    }
    int rc;
    if ((rc = buf_varint(&b->data, shared)) != CKPT_OK ||
        (rc = buf_varint(&b->data, klen - shared)) != CKPT_OK ||
        (rc = buf_varint(&b->data, vlen)) != CKPT_OK ||
        (rc = buf_add(&b->data, key + shared, klen - shared)) != CKPT_OK ||
        (rc = buf_add(&b->data, value, vlen)) != CKPT_OK)
        return rc;
    b->last.len = 0;
    if ((rc = buf_add(&b->last, key, klen)) != CKPT_OK)
        return rc;
    b->counter++;
    return CKPT_OK;
}

static int bb_finish(block_builder *b)
{
    int rc = CKPT_OK;
    for (size_t i = 0; i < b->nrestarts && rc == CKPT_OK; i++)
        rc = buf_fixed32(&b->data, b->restarts[i]);
    if (rc == CKPT_OK)
        rc = buf_fixed32(&b->data, (uint32_t)b->nrestarts);
    return rc;
}

struct ckpt__sst_writer {
    size_t block_size;
    int snappy;
    buf file;
    block_builder data, index;
    buf last_key;
    size_t num_entries;
    int pending_index;
    handle pending;
    int failed;
};

int ckpt__sst_writer_new(ckpt__sst_writer **out, size_t block_size, int restart_interval,
                         int snappy)
{
    *out = NULL;
    ckpt__sst_writer *w = calloc(1, sizeof *w);
    if (!w)
        return ckpt__error(CKPT_ENOMEM, "table: out of memory");
    w->block_size = block_size ? block_size : CKPT__SST_BLOCK_SIZE;
    w->snappy = snappy;
    int rc = bb_init(&w->data, restart_interval > 0 ? restart_interval
                                                    : CKPT__SST_RESTART_INTERVAL);
    if (rc == CKPT_OK)
        rc = bb_init(&w->index, 1); /* TensorFlow's index block: a restart at every entry */
    if (rc != CKPT_OK) {
        ckpt__sst_writer_free(w);
        return rc;
    }
    *out = w;
    return CKPT_OK;
}

void ckpt__sst_writer_free(ckpt__sst_writer *w)
{
    if (!w)
        return;
    bb_free(&w->data);
    bb_free(&w->index);
    free(w->file.p);
    free(w->last_key.p);
    free(w);
}

/* Writes a finished block (compressed when that pays and snappy is on) and its trailer. */
static int write_block(ckpt__sst_writer *w, block_builder *b, handle *h)
{
    int rc = bb_finish(b);
    if (rc != CKPT_OK)
        return rc;
    const uint8_t *contents = b->data.p;
    size_t n = b->data.len;
    uint8_t type = 0;
    char *compressed = NULL;
    if (w->snappy) {
        size_t clen = snappy_max_compressed_length(n);
        compressed = malloc(clen ? clen : 1);
        if (!compressed)
            return ckpt__error(CKPT_ENOMEM, "table: out of memory");
        if (snappy_compress((const char *)contents, n, compressed, &clen) == SNAPPY_OK &&
            clen < n - n / 8) {
            contents = (const uint8_t *)compressed;
            n = clen;
            type = 1;
        }
    }
    h->offset = w->file.len;
    h->size = n;
    uint8_t trailer[TRAILER];
    trailer[0] = type;
    uint32_t crc = ckpt_crc32c_extend(ckpt_crc32c(contents, n), trailer, 1);
    put32(trailer + 1, ckpt_crc32c_mask(crc));
    if ((rc = buf_add(&w->file, contents, n)) == CKPT_OK)
        rc = buf_add(&w->file, trailer, TRAILER);
    free(compressed);
    bb_reset(b);
    return rc;
}

static int flush(ckpt__sst_writer *w)
{
    if (bb_empty(&w->data))
        return CKPT_OK;
    int rc = write_block(w, &w->data, &w->pending);
    if (rc == CKPT_OK)
        w->pending_index = 1;
    return rc;
}

/* The index entry of the block just written: TensorFlow's shortest separator between its last
 * key and the next block's first key (`limit`), or, at the end (limit NULL), the short
 * successor of its last key. */
static int add_index_entry(ckpt__sst_writer *w, const uint8_t *limit, size_t llen)
{
    buf *k = &w->last_key;
    if (limit) {
        size_t n = k->len < llen ? k->len : llen, d = 0;
        while (d < n && k->p[d] == limit[d])
            d++;
        if (d < n && k->p[d] < 0xff && k->p[d] + 1 < limit[d]) {
            k->p[d]++;
            k->len = d + 1;
        }
    } else {
        for (size_t i = 0; i < k->len; i++)
            if (k->p[i] != 0xff) {
                k->p[i]++;
                k->len = i + 1;
                break;
            }
    }
    uint8_t enc[20];
    size_t elen = ckpt__varint_put(enc, w->pending.offset);
    elen += ckpt__varint_put(enc + elen, w->pending.size);
    w->pending_index = 0;
    return bb_add(&w->index, k->p ? k->p : (const uint8_t *)"", k->len, enc, elen);
}

int ckpt__sst_add(ckpt__sst_writer *w, const uint8_t *key, size_t klen, const uint8_t *value,
                  size_t vlen)
{
    if (w->failed)
        return ckpt__error(CKPT_EINVAL, "table: add after a failure");
    int rc = CKPT_OK;
    if (w->num_entries > 0) {
        if (key_cmp(key, klen, w->last_key.p, w->last_key.len) <= 0)
            return ckpt__error(CKPT_EINVAL, "table: keys must strictly increase");
        if (klen + vlen >= 2 * w->block_size)
            rc = flush(w);
    }
    if (rc == CKPT_OK && w->pending_index)
        rc = add_index_entry(w, key, klen);
    if (rc == CKPT_OK) {
        w->last_key.len = 0;
        rc = buf_add(&w->last_key, key, klen);
    }
    if (rc == CKPT_OK) {
        w->num_entries++;
        rc = bb_add(&w->data, key, klen, value, vlen);
    }
    if (rc == CKPT_OK && bb_estimate(&w->data) >= w->block_size)
        rc = flush(w);
    if (rc != CKPT_OK)
        w->failed = 1;
    return rc;
}

int ckpt__sst_finish(ckpt__sst_writer *w, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (w->failed)
        return ckpt__error(CKPT_EINVAL, "table: finish after a failure");
    handle meta, index;
    block_builder mb;
    int rc = flush(w);
    if (rc == CKPT_OK)
        rc = bb_init(&mb, 1);
    if (rc != CKPT_OK)
        return rc;
    rc = write_block(w, &mb, &meta);
    bb_free(&mb);
    if (rc == CKPT_OK && w->pending_index)
        rc = add_index_entry(w, NULL, 0);
    if (rc == CKPT_OK)
        rc = write_block(w, &w->index, &index);
    if (rc == CKPT_OK) {
        uint8_t foot[CKPT__SST_FOOTER_SIZE];
        memset(foot, 0, sizeof foot);
        size_t n = ckpt__varint_put(foot, meta.offset);
        n += ckpt__varint_put(foot + n, meta.size);
        n += ckpt__varint_put(foot + n, index.offset);
        ckpt__varint_put(foot + n, index.size);
        put32(foot + 40, (uint32_t)(CKPT__SST_MAGIC & 0xffffffffu));
        put32(foot + 44, (uint32_t)(CKPT__SST_MAGIC >> 32));
        rc = buf_add(&w->file, foot, sizeof foot);
    }
    if (rc != CKPT_OK) {
        w->failed = 1;
        return rc;
    }
    *out = w->file.p;
    *len = w->file.len;
    w->file.p = NULL;
    w->file.len = w->file.cap = 0;
    w->failed = 1; /* finished: no more adds */
    return CKPT_OK;
}
