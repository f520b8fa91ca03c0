#include "index.h"

#include "crc32c_internal.h"

#include "fsutil.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/crc32c.h"
#include "mpickpt/dtype.h"

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
    uint8_t *buf = malloc(total);
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

/* ---- validation ---------------------------------------------------------------------------- */

struct vpiece {
    const Mpickpt__Piece *p;
    ckpt_slice s;
};

static int cmp_vpiece(const void *a, const void *b)
{
    const struct vpiece *x = a, *y = b;
    for (int i = 0; i < x->s.ndims; i++) {
        if (x->s.start[i] != y->s.start[i])
            return x->s.start[i] < y->s.start[i] ? -1 : 1;
    }
    for (int i = 0; i < x->s.ndims; i++) {
        if (x->s.count[i] != y->s.count[i])
            return x->s.count[i] < y->s.count[i] ? -1 : 1;
    }
    return (x->p->rank > y->p->rank) - (x->p->rank < y->p->rank);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void fmt_slice(char *buf, size_t n, const ckpt_shape *sh, const ckpt_slice *s)
{
    if (sh->ndims == 0 || ckpt_slice_spec_format(buf, n, sh, s) != CKPT_OK)
        snprintf(buf, n, "%s", sh->ndims == 0 ? "(scalar)" : "(slice)");
}

/* Validates one tensor; `pieces` is scratch space for at least t->n_pieces entries. */
static int validate_tensor(const Mpickpt__Tensor *t, int32_t world, uint32_t version,
                           const char *const *files, size_t nfiles, struct vpiece *pieces, int bad,
                           const char *what)
{
    const char *name = t->name ? t->name : "";
    size_t nlen = strnlen(name, 4097);
    if (nlen == 0 || nlen > 4096)
        return ckpt__error(bad, "%s: tensor with an empty or over-long name", what);
    if (!ckpt_dtype_valid(t->dtype))
        return ckpt__error(bad, "%s: tensor '%s' has invalid dtype %d", what, name, (int)t->dtype);
    if ((int)t->kind < (int)CKPT_KIND_FULL || (int)t->kind > (int)CKPT_KIND_BLOB)
        return ckpt__error(bad, "%s: tensor '%s' has invalid kind %d", what, name, (int)t->kind);
    ckpt_shape shape;
    int64_t total;
    if (t->n_shape > CKPT_MAX_DIMS || ckpt_shape_init(&shape, (int)t->n_shape, t->shape) != CKPT_OK ||
        ckpt_shape_num_elements(&total, &shape) != CKPT_OK)
        return ckpt__error(bad, "%s: tensor '%s' has an invalid shape (%zu dims)", what, name,
                           t->n_shape);
    size_t esize = ckpt_dtype_size((ckpt_dtype)t->dtype);
    /* Every piece's byte count is at most the tensor's: checking this one product for overflow
     * keeps every per-piece product below exact (a wrapped count would size buffers wrongly). */
    uint64_t total_bytes;
    if (__builtin_mul_overflow((uint64_t)total, (uint64_t)esize, &total_bytes) ||
        total_bytes > (uint64_t)INT64_MAX)
        return ckpt__error(bad, "%s: tensor '%s' is too large (%lld elements of %zu bytes)", what,
                           name, (long long)total, esize);
    if (t->n_pieces == 0)
        return ckpt__error(bad, "%s: tensor '%s' has no stored piece", what, name);

    int64_t covered = 0;
    for (size_t j = 0; j < t->n_pieces; j++) {
        const Mpickpt__Piece *p = t->pieces[j];
        struct vpiece *v = &pieces[j];
        ckpt_slice ds;
        int64_t n;
        char sl[256];
        v->p = p;
        if (ckpt__piece_slice(&v->s, p, shape.ndims) != CKPT_OK ||
            ckpt__piece_dataset_slice(&ds, p, shape.ndims) != CKPT_OK)
            return ckpt__error_wrap(bad, "%s: tensor '%s' piece %zu", what, name, j);
        if (ckpt_slice_validate(&v->s, &shape) != CKPT_OK)
            return ckpt__error_wrap(bad, "%s: tensor '%s' piece %zu (rank %d) lies outside the shape",
                                    what, name, j, p->rank);
        for (int d = 0; d < ds.ndims; d++)
            if (ds.start[d] < 0 || ds.start[d] > INT64_MAX - ds.count[d])
                return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad dataset offset", what, name,
                                   j);
        if (p->rank < 0 || p->rank >= world)
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: rank %d outside world size %d",
                               what, name, j, p->rank, world);
        if (!p->file || !bsearch(&p->file, files, nfiles, sizeof *files, cmp_str_ptr))
            return ckpt__error(bad, "%s: tensor '%s' piece %zu names data file '%s' not listed in "
                                    "the index",
                               what, name, j, p->file ? p->file : "");
        if (!p->dataset || strncmp(p->dataset, p->packed ? "/packs/" : "/tensors/",
                                   p->packed ? 7 : 9) != 0 || strstr(p->dataset, "/.."))
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad dataset path", what, name, j);
        ckpt_slice_num_elements(&n, &v->s);
        if (p->packed) {
            int zero = 1;
            for (int d = 0; d < ds.ndims; d++)
                zero &= ds.start[d] == 0;
            if (version < 2 || !zero || p->pack_offset > (uint64_t)INT64_MAX - (uint64_t)n * esize)
                return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad packed piece (format %u, "
                                        "offset %llu)",
                                   what, name, j, version, (unsigned long long)p->pack_offset);
        } else if (p->pack_offset != 0) {
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: pack offset on an unpacked piece",
                               what, name, j);
        }
        if (p->n_block_crc32c > 0 || p->block_bytes != 0) {
            uint64_t bb = p->block_bytes;
            uint64_t nb = bb ? p->bytes / bb + (p->bytes % bb != 0) : 0;
            if (version < 2 || p->block_bytes == 0 || nb != p->n_block_crc32c)
                return ckpt__error(bad, "%s: tensor '%s' piece %zu: %zu block checksums for %llu "
                                        "bytes in blocks of %u (format %u)",
                                   what, name, j, p->n_block_crc32c, (unsigned long long)p->bytes,
                                   p->block_bytes, version);
        }
        if (p->bytes != (uint64_t)n * esize) {
            fmt_slice(sl, sizeof sl, &shape, &v->s);
            return ckpt__error(bad, "%s: tensor '%s' piece %s: %llu bytes recorded, %llu expected",
                               what, name, sl, (unsigned long long)p->bytes,
                               (unsigned long long)((uint64_t)n * esize));
        }
        if (__builtin_add_overflow(covered, n, &covered))
            return ckpt__error(bad, "%s: tensor '%s': element count overflows", what, name);
    }

    /* Sorted by start, duplicates are neighbours; an overlap can only involve pieces whose ranges
     * along dim 0 intersect, so the inner scan stops at the first piece starting past our end. */
    qsort(pieces, t->n_pieces, sizeof *pieces, cmp_vpiece);
    for (size_t a = 0; a < t->n_pieces; a++) {
        int64_t end0 = shape.ndims ? pieces[a].s.start[0] + pieces[a].s.count[0] : 1;
        for (size_t b = a + 1; b < t->n_pieces; b++) {
            ckpt_slice x;
            int same = ckpt_slice_equal(&pieces[a].s, &pieces[b].s); /* neighbours when equal */
            if (!same && shape.ndims && pieces[b].s.start[0] >= end0)
                break;
            if (same || ckpt_slice_intersect(&x, &pieces[a].s, &pieces[b].s) == 1) {
                char sa[256], sb[256];
                fmt_slice(sa, sizeof sa, &shape, &pieces[a].s);
                fmt_slice(sb, sizeof sb, &shape, &pieces[b].s);
                if (same)
                    return ckpt__error(bad, "%s: tensor '%s': duplicate slice %s saved by rank %d "
                                            "and rank %d",
                                       what, name, sa, pieces[a].p->rank, pieces[b].p->rank);
                return ckpt__error(bad, "%s: tensor '%s': slice %s (rank %d) overlaps slice %s "
                                        "(rank %d)",
                                   what, name, sa, pieces[a].p->rank, sb, pieces[b].p->rank);
            }
        }
    }
    if (covered != total)
        return ckpt__error(bad, "%s: tensor '%s': stored pieces cover %lld of %lld elements (gap)",
                           what, name, (long long)covered, (long long)total);
    return CKPT_OK;
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

int ckpt__index_validate(const Mpickpt__Index *idx, int bad, const char *what)
{
    const Mpickpt__Header *h = idx->header;
    if (!h)
        return ckpt__error(bad, "%s: index has no header", what);
    if (h->format_version > CKPT_FORMAT_VERSION)
        return ckpt__error(CKPT_EVERSION, "%s: index of format version %u; this mpickpt reads up to %d",
                           what, h->format_version, CKPT_FORMAT_VERSION);
    if (h->format_version == 0)
        return ckpt__error(bad, "%s: index has format version 0", what);
    if (h->endianness != MPICKPT__ENDIANNESS__LITTLE)
        return ckpt__error(bad, "%s: big-endian checkpoints are not supported", what);
    if (h->world_size < 1)
        return ckpt__error(bad, "%s: world size %d", what, h->world_size);
    if (h->layout != MPICKPT__LAYOUT__LAYOUT_SHARED && h->layout != MPICKPT__LAYOUT__LAYOUT_PER_RANK)
        return ckpt__error(bad, "%s: unknown layout %d", what, (int)h->layout);

    int rc = CKPT_OK;
    const char **files = malloc((idx->n_files + 1) * sizeof *files);
    size_t maxp = 1;
    for (size_t i = 0; i < idx->n_tensors; i++)
        if (idx->tensors[i]->n_pieces > maxp)
            maxp = idx->tensors[i]->n_pieces;
    struct vpiece *scratch = malloc(maxp * sizeof *scratch);
    if (!files || !scratch) {
        rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory validating the index", what);
        goto done;
    }
    for (size_t i = 0; i < idx->n_files; i++) {
        files[i] = idx->files[i]->name;
        if (!ckpt__safe_filename(files[i])) {
            rc = ckpt__error(bad, "%s: unsafe data file name '%.300s'", what,
                             files[i] ? files[i] : "");
            goto done;
        }
    }
    qsort(files, idx->n_files, sizeof *files, cmp_str_ptr);
    for (size_t i = 1; i < idx->n_files; i++)
        if (strcmp(files[i - 1], files[i]) == 0) {
            rc = ckpt__error(bad, "%s: data file '%s' listed twice", what, files[i]);
            goto done;
        }
    for (size_t i = 0; i < idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = idx->tensors[i];
        if (i > 0 && strcmp(idx->tensors[i - 1]->name, t->name) >= 0) {
            rc = ckpt__error(bad, "%s: tensors not sorted or '%s' listed twice", what, t->name);
            goto done;
        }
        rc = validate_tensor(t, h->world_size, h->format_version, files, idx->n_files, scratch, bad, what);
        if (rc != CKPT_OK)
            goto done;
    }
done:
    free(files);
    free(scratch);
    return rc;
}

/* ---- load / store ---------------------------------------------------------------------------- */

int ckpt__index_read_at(uint8_t **buf, const uint8_t **payload, size_t *plen, int dirfd,
                        const char *name, const char *dir)
{
    size_t len = 0;
    char path[4400];
    *buf = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = ckpt__read_file_at(buf, &len, dirfd, name, CKPT__MAX_INDEX_BYTES, dir);
    if (rc == CKPT_OK)
        rc = ckpt__container_open(payload, plen, *buf, len, CKPT__MAGIC_INDEX, path);
    if (rc != CKPT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

int ckpt__index_read(uint8_t **buf, const uint8_t **payload, size_t *plen, const char *path)
{
    size_t len = 0;
    *buf = NULL;
    int rc = ckpt__read_file(buf, &len, path, CKPT__MAX_INDEX_BYTES);
    if (rc == CKPT_OK)
        rc = ckpt__container_open(payload, plen, *buf, len, CKPT__MAGIC_INDEX, path);
    if (rc != CKPT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
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
                                const char *shown)
{
    uint8_t *buf;
    size_t len;
    int rc = ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &idx->base);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__write_file_atomic_at(dirfd, name, buf, len, shown);
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

/* ---- merge ------------------------------------------------------------------------------------ */

struct mentry {
    const Mpickpt__Tensor *t;
    int32_t rank;
    size_t group; /* index of its name in the groups */
};

/* One distinct tensor name. */
struct mgroup {
    const char *name;
    uint64_t hash;
    size_t count; /* entries of this name */
    size_t pos;   /* where its next entry goes in the name-sorted order */
};

struct mname {
    const char *name;
    size_t group;
};

static int cmp_mname(const void *a, const void *b)
{
    return strcmp(((const struct mname *)a)->name, ((const struct mname *)b)->name);
}

/* Tensor names share long prefixes ("model/transformer/block_0012/..."), so the hash reads them
 * 8 bytes at a time; murmur3's finalizer spreads the bits for the table index. */
static uint64_t hash_name(const char *s)
{
    size_t n = strlen(s);
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

/*
 * Puts the entries in the order of a stable sort by name (strcmp), without sorting them: a hash
 * table gives each entry its name's group, only the distinct names are sorted, and the entries are
 * then placed group by group in their original order (a counting sort). Sorting all entries with
 * qsort cost most of the merge: partitioned tensors give one entry per rank, so there are about
 * twice as many entries as names, and every comparison was a strcmp over long shared prefixes.
 * On success *sorted is a new array of the nt entries, each with its group set.
 */
static int sort_entries(struct mentry **sorted, struct mentry *all, size_t nt)
{
    size_t cap = 16, ng = 0; /* a power of two, at least twice nt: linear probes stay short */
    while (cap < 2 * nt)
        cap *= 2;
    size_t *slots = calloc(cap, sizeof *slots); /* group index + 1; 0 is empty */
    struct mgroup *groups = malloc((nt ? nt : 1) * sizeof *groups);
    struct mname *names = NULL;
    struct mentry *out = NULL;
    *sorted = NULL;
    if (!slots || !groups)
        goto nomem;
    for (size_t k = 0; k < nt; k++) {
        const char *name = all[k].t->name;
        uint64_t h = hash_name(name);
        size_t i = (size_t)h & (cap - 1);
        for (;; i = (i + 1) & (cap - 1)) {
            size_t g = slots[i];
            if (g == 0) {
                groups[ng] = (struct mgroup){ name, h, 0, 0 };
                slots[i] = ++ng;
                g = ng;
            } else if (groups[g - 1].hash != h || strcmp(groups[g - 1].name, name) != 0) {
                continue;
            }
            all[k].group = g - 1;
            groups[g - 1].count++;
            break;
        }
    }
    /* free what is done with before the next allocation: this runs at 1M entries */
    free(slots);
    slots = NULL;
    if (!(names = malloc((ng ? ng : 1) * sizeof *names)))
        goto nomem;
    for (size_t g = 0; g < ng; g++)
        names[g] = (struct mname){ groups[g].name, g };
    qsort(names, ng, sizeof *names, cmp_mname); /* names are distinct: no ties */
    size_t pos = 0;
    for (size_t i = 0; i < ng; i++) {
        struct mgroup *g = &groups[names[i].group];
        g->pos = pos;
        pos += g->count;
    }
    free(names);
    if (!(out = malloc((nt ? nt : 1) * sizeof *out)))
        goto nomem;
    for (size_t k = 0; k < nt; k++)
        out[groups[all[k].group].pos++] = all[k];
    free(groups);
    *sorted = out;
    return CKPT_OK;
nomem:
    free(slots);
    free(groups);
    return ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
}

void ckpt__index_merged_free(Mpickpt__Index *idx)
{
    if (!idx)
        return;
    for (size_t i = 0; i < idx->n_tensors; i++) {
        if (idx->tensors[i]) {
            free(idx->tensors[i]->pieces);
            free(idx->tensors[i]);
        }
    }
    free(idx->tensors);
    free(idx->files);
    idx->tensors = NULL;
    idx->files = NULL;
    idx->n_tensors = idx->n_files = 0;
}

int ckpt__index_merge(Mpickpt__Index *out, Mpickpt__Fragment *const *frags, size_t n)
{
    size_t nt = 0, nf = 0;
    int rc = CKPT_OK;
    for (size_t f = 0; f < n; f++) {
        nt += frags[f]->n_tensors;
        nf += frags[f]->n_files;
    }
    struct mentry *all = malloc((nt ? nt : 1) * sizeof *all), *sorted;
    out->files = malloc((nf ? nf : 1) * sizeof *out->files);
    out->tensors = calloc(nt ? nt : 1, sizeof *out->tensors);
    out->n_tensors = out->n_files = 0;
    if (!all || !out->files || !out->tensors) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory merging %zu tensors", nt);
        goto done;
    }
    size_t k = 0;
    for (size_t f = 0; f < n; f++) {
        for (size_t i = 0; i < frags[f]->n_tensors; i++) {
            const Mpickpt__Tensor *t = frags[f]->tensors[i];
            if (!t->name || !t->name[0]) {
                rc = ckpt__error(CKPT_EINVAL, "rank %d registered a tensor with an empty name",
                                 frags[f]->rank);
                goto done;
            }
            all[k].t = t;
            all[k].rank = frags[f]->rank;
            k++;
        }
        for (size_t i = 0; i < frags[f]->n_files; i++)
            out->files[out->n_files++] = frags[f]->files[i];
    }
    if ((rc = sort_entries(&sorted, all, nt)) != CKPT_OK)
        goto done;
    free(all);
    all = sorted;

    for (size_t a = 0; a < nt;) {
        size_t b = a, np = 0;
        const Mpickpt__Tensor *t0 = all[a].t;
        for (; b < nt && all[b].group == all[a].group; b++) {
            const Mpickpt__Tensor *t = all[b].t;
            int same_shape = t->n_shape == t0->n_shape &&
                             (t->n_shape == 0 ||
                              memcmp(t->shape, t0->shape, t->n_shape * sizeof *t->shape) == 0);
            if (t->dtype != t0->dtype || !same_shape || t->kind != t0->kind) {
                rc = ckpt__error(CKPT_EMISMATCH,
                                 "tensor '%s': rank %d registered %s/%zu-d/%s but rank %d "
                                 "registered %s/%zu-d/%s",
                                 t0->name, all[a].rank, ckpt_dtype_name((ckpt_dtype)t0->dtype),
                                 t0->n_shape, ckpt_kind_name((ckpt_kind)t0->kind), all[b].rank,
                                 ckpt_dtype_name((ckpt_dtype)t->dtype), t->n_shape,
                                 ckpt_kind_name((ckpt_kind)t->kind));
                goto done;
            }
            np += t->n_pieces;
        }
        Mpickpt__Tensor *m = malloc(sizeof *m);
        Mpickpt__Piece **pieces = malloc((np ? np : 1) * sizeof *pieces);
        if (!m || !pieces) {
            free(m);
            free(pieces);
            rc = ckpt__error(CKPT_ENOMEM, "out of memory merging tensor '%s'", t0->name);
            goto done;
        }
        *m = *t0; /* borrows name and shape */
        m->pieces = pieces;
        m->n_pieces = 0;
        for (size_t c = a; c < b; c++)
            for (size_t j = 0; j < all[c].t->n_pieces; j++)
                m->pieces[m->n_pieces++] = all[c].t->pieces[j];
        out->tensors[out->n_tensors++] = m;
        a = b;
    }
    rc = ckpt__index_validate(out, CKPT_EMISMATCH, "merge");
done:
    free(all);
    return rc;
}

/* ---- fragments built by a writer ------------------------------------------------------------- */

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int64_t *dup64(const int64_t *v, int n)
{
    int64_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (d && n)
        memcpy(d, v, (size_t)n * sizeof *d);
    return d;
}

static void free_built_piece(Mpickpt__Piece *p)
{
    if (!p)
        return;
    free(p->start);
    free(p->count);
    free(p->dataset_start);
    free(p->file);
    free(p->dataset);
    free(p->block_crc32c);
    free(p);
}

static void free_built_tensor(Mpickpt__Tensor *t)
{
    if (!t)
        return;
    for (size_t j = 0; j < t->n_pieces; j++)
        free_built_piece(t->pieces[j]);
    free(t->pieces);
    free(t->name);
    free(t->shape);
    free(t);
}

int ckpt__fragment_add(Mpickpt__Fragment *f, size_t *cap, const char *name, ckpt_dtype dtype,
                       const ckpt_shape *shape, ckpt_kind kind, const ckpt_slice *slice,
                       const char *file, const char *dataset, const ckpt_slice *dataset_slice,
                       uint64_t bytes, uint32_t crc)
{
    if (f->n_tensors == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        Mpickpt__Tensor **nt = realloc(f->tensors, ncap * sizeof *nt);
        if (!nt)
            return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
        f->tensors = nt;
        *cap = ncap;
    }
    Mpickpt__Tensor *t = calloc(1, sizeof *t);
    Mpickpt__Piece *p = calloc(1, sizeof *p);
    Mpickpt__Piece **pp = malloc(sizeof *pp);
    if (!t || !p || !pp)
        goto nomem;
    mpickpt__tensor__init(t);
    mpickpt__piece__init(p);
    t->pieces = pp;
    t->pieces[0] = p;
    t->n_pieces = 1;
    t->name = dupstr(name);
    t->dtype = (Mpickpt__DType)dtype;
    t->kind = (Mpickpt__Kind)kind;
    t->n_shape = (size_t)shape->ndims;
    t->shape = dup64(shape->dims, shape->ndims);
    p->n_start = p->n_count = p->n_dataset_start = (size_t)slice->ndims;
    p->start = dup64(slice->start, slice->ndims);
    p->count = dup64(slice->count, slice->ndims);
    p->dataset_start = dup64(dataset_slice->start, slice->ndims);
    p->file = dupstr(file);
    p->dataset = dupstr(dataset);
    p->bytes = bytes;
    p->crc32c = crc;
    p->rank = f->rank;
    if (!t->name || !t->shape || !p->start || !p->count || !p->dataset_start || !p->file ||
        !p->dataset) {
        free_built_tensor(t);
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    }
    f->tensors[f->n_tensors++] = t;
    return CKPT_OK;
nomem:
    free(t);
    free(p);
    free(pp);
    return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
}

int ckpt__fragment_add_data(Mpickpt__Fragment *f, size_t *cap, const char *name,
                            ckpt_dtype dtype, const ckpt_shape *shape, ckpt_kind kind,
                            const ckpt_slice *slice, const char *file, const char *dataset,
                            const ckpt_slice *dataset_slice, const void *data, size_t len)
{
    size_t nb = len > CKPT__CRC_BLOCK ? (len + CKPT__CRC_BLOCK - 1) / CKPT__CRC_BLOCK : 0;
    uint32_t *blocks = nb ? malloc(nb * sizeof *blocks) : NULL;
    if (nb && !blocks)
        return ckpt__error(CKPT_ENOMEM, "out of memory registering tensor '%s'", name);
    uint32_t crc = nb ? ckpt__crc32c_blocks(data, len, CKPT__CRC_BLOCK, blocks)
                      : ckpt_crc32c(data, len);
    int rc = ckpt__fragment_add(f, cap, name, dtype, shape, kind, slice, file, dataset,
                                dataset_slice, (uint64_t)len, crc);
    if (rc != CKPT_OK) {
        free(blocks);
        return rc;
    }
    Mpickpt__Piece *p = f->tensors[f->n_tensors - 1]->pieces[0];
    p->block_bytes = nb ? (uint32_t)CKPT__CRC_BLOCK : 0;
    p->n_block_crc32c = nb;
    p->block_crc32c = blocks;
    return CKPT_OK;
}

int ckpt__fragment_add_file(Mpickpt__Fragment *f, const char *name, uint64_t bytes)
{
    Mpickpt__DataFile **nf = realloc(f->files, (f->n_files + 1) * sizeof *nf);
    if (!nf)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    f->files = nf;
    Mpickpt__DataFile *d = malloc(sizeof *d);
    char *n = dupstr(name);
    if (!d || !n) {
        free(d);
        free(n);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    mpickpt__data_file__init(d);
    d->name = n;
    d->bytes = bytes;
    f->files[f->n_files++] = d;
    return CKPT_OK;
}

void ckpt__fragment_free_built(Mpickpt__Fragment *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free_built_tensor(f->tensors[i]);
    for (size_t i = 0; i < f->n_files; i++) {
        free(f->files[i]->name);
        free(f->files[i]);
    }
    free(f->tensors);
    free(f->files);
    mpickpt__fragment__init(f);
}
