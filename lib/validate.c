/*
 * Validation of an index: what a reader accepts and what a merge must produce (docs/format.md,
 * "What a reader accepts").
 *
 * Takes an unpacked index, from disk (untrusted: every count, length and offset in it may lie) or
 * from the chief's merge of what the ranks registered. Guarantees, when it returns CKPT_OK: the
 * header is one this version reads; data file names are safe and unique; tensor names are
 * non-empty UTF-8, sorted and unique; every dtype, shape, kind, rank, file reference, dataset path
 * ("/tensors/<c>" or "/packs/<c>"), pack offset, block checksum count and byte count is in range
 * and consistent (no size product overflows); and each tensor's pieces tile it exactly
 * (lib/tiling.c). Otherwise an error of the caller's code (`bad`) naming the tensor, the slices
 * and the ranks involved, never a crash. Reads the index only; the scratch it needs is freed
 * before it returns. O(d n log n) for n pieces of d dimensions.
 *
 * Called by ckpt__index_parse() (lib/index.c) for every index read from disk, by
 * ckpt__index_merge() (lib/merge.c), by the writers before their commit and by the tests.
 */
#include "validate.h"

#include "fsutil.h"
#include "index.h"
#include "internal.h"
#include "mpickpt/dtype.h"
#include "mpickpt/slice.h"
#include "strhash.h"
#include "tiling.h"

#include <stdlib.h>
#include <string.h>

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The dataset paths mpickpt writes (ckpt__h5_dataset_path, the saver's pack datasets; format 1
 * and 2 alike): "/tensors/<c>", or "/packs/<c>" for a packed piece, where <c> is one non-empty
 * component ("%XX"-escaped name, "#s0_s1..." suffix), neither "." nor "..". */
static int dataset_path_ok(const char *ds, int packed)
{
    const char *prefix = packed ? "/packs/" : "/tensors/";
    size_t n = strlen(prefix);
    if (!ds || strncmp(ds, prefix, n) != 0)
        return 0;
    const char *c = ds + n;
    return c[0] != '\0' && !strchr(c, '/') && strcmp(c, ".") != 0 && strcmp(c, "..") != 0;
}


/* The data files of an index, for the pieces' lookups: a hash set over the sorted, unique names
 * (a binary search made a dozen strcmp of names sharing their first 12 bytes per piece). */
struct fileset {
    const char *const *names; /* sorted */
    size_t n;
    uint32_t *slots;          /* name index + 1; 0 is empty */
    size_t mask;
};

static int fileset_init(struct fileset *fs, const char *const *names, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    fs->names = names;
    fs->n = n;
    fs->mask = cap - 1;
    if (n >= UINT32_MAX || !(fs->slots = calloc(cap, sizeof *fs->slots)))
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t k = (size_t)ckpt__strhash(names[i], strlen(names[i])) & fs->mask;
        while (fs->slots[k])
            k = (k + 1) & fs->mask;
        fs->slots[k] = (uint32_t)i + 1;
    }
    return 0;
}

/* Whether `name` is one of the files. The hash is not keyed, so an index from disk could list
 * names made to collide: past a few probes the lookup is a binary search, O(log n) at worst. */
static int fileset_has(const struct fileset *fs, const char *name)
{
    size_t k = (size_t)ckpt__strhash(name, strlen(name)) & fs->mask;
    for (int probes = 0; fs->slots[k]; k = (k + 1) & fs->mask) {
        if (strcmp(fs->names[fs->slots[k] - 1], name) == 0)
            return 1;
        if (++probes == 16)
            return bsearch(&name, fs->names, fs->n, sizeof *fs->names, cmp_str_ptr) != NULL;
    }
    return 0;
}

/* The error of a piece whose coordinates piece_box() refused, as the checks below word it. */
static int piece_box_error(const Mpickpt__Piece *p, size_t j, const ckpt_shape *shape, int bad,
                           const char *what, const char *name)
{
    ckpt_slice s, ds;
    int nd = shape->ndims;
    if (ckpt__piece_slice(&s, p, nd) != CKPT_OK ||
        ckpt__piece_dataset_slice(&ds, p, nd) != CKPT_OK)
        return ckpt__error_wrap(bad, "%s: tensor '%s' piece %zu", what, name, j);
    if (ckpt_slice_validate(&s, shape) != CKPT_OK)
        return ckpt__error_wrap(bad, "%s: tensor '%s' piece %zu (rank %d) lies outside the shape",
                                what, name, j, p->rank);
    return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad dataset offset", what, name, j);
}

/* A piece's box into x (start[0..nd) then count[0..nd)) and its element count into *n, when its
 * coordinates are as many as the shape's dimensions, its slice lies inside the shape and its
 * dataset offsets are in range; else 0 (piece_box_error() says why). */
static int piece_box(int64_t *x, int64_t *n, const Mpickpt__Piece *p, const ckpt_shape *shape)
{
    int nd = shape->ndims;
    if (p->n_start != (size_t)nd || p->n_count != (size_t)nd || p->n_dataset_start != (size_t)nd)
        return 0;
    int64_t elems = 1;
    int zero = 0;
    for (int d = 0; d < nd; d++) {
        int64_t st = p->start[d], ct = p->count[d], ds = p->dataset_start[d];
        if (st < 0 || ct < 0 || st > shape->dims[d] - ct || ds < 0 || ds > INT64_MAX - ct)
            return 0;
        x[d] = st;
        x[nd + d] = ct;
        zero |= ct == 0;
        /* inside the shape: without a zero count the product is at most the shape's, which
         * fits; with one, it is 0 (the product of the others may wrap, and is not used) */
        elems = (int64_t)((uint64_t)elems * (uint64_t)ct);
    }
    *n = zero ? 0 : elems;
    return 1;
}

/* Validates one tensor; `scratch` has room for t->n_pieces rows of its rank (vrow_size) and as
 * many pointers. */
static int validate_tensor(const Mpickpt__Tensor *t, int32_t world, uint32_t version,
                           const struct fileset *files, char *scratch, int bad, const char *what)
{
    const char *name = t->name ? t->name : "";
    size_t nlen = strnlen(name, 4097);
    if (nlen == 0 || nlen > 4096)
        return ckpt__error(bad, "%s: tensor with an empty or over-long name", what);
    if (!ckpt__utf8_valid(name, nlen)) {
        char esc[1024];
        return ckpt__error(bad, "%s: tensor name '%s' is not valid UTF-8", what,
                           ckpt__escape_bytes(esc, sizeof esc, name, nlen));
    }
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

    int nd = shape.ndims;
    size_t stride = vrow_size(nd);
    int64_t covered = 0;
    for (size_t j = 0; j < t->n_pieces; j++) {
        const Mpickpt__Piece *p = t->pieces[j];
        struct vrow *v = (struct vrow *)(void *)(scratch + j * stride);
        int64_t n;
        char sl[256];
        if (j + 4 < t->n_pieces)
            __builtin_prefetch(t->pieces[j + 4]);
        if (!piece_box(v->x, &n, p, &shape))
            return piece_box_error(p, j, &shape, bad, what, name);
        if (p->rank < 0 || p->rank >= world)
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: rank %d outside world size %d",
                               what, name, j, p->rank, world);
        if (!p->file || !fileset_has(files, p->file))
            return ckpt__error(bad, "%s: tensor '%s' piece %zu names data file '%s' not listed in "
                                    "the index",
                               what, name, j, p->file ? p->file : "");
        if (!dataset_path_ok(p->dataset, p->packed))
            return ckpt__error(bad, "%s: tensor '%s' piece %zu: bad dataset path", what, name, j);
        if (p->packed) {
            int zero = 1;
            for (int d = 0; d < nd; d++)
                zero &= p->dataset_start[d] == 0;
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
            ckpt_slice s;
            ckpt__piece_slice(&s, p, nd);
            fmt_slice(sl, sizeof sl, &shape, &s);
            return ckpt__error(bad, "%s: tensor '%s' piece %s: %llu bytes recorded, %llu expected",
                               what, name, sl, (unsigned long long)p->bytes,
                               (unsigned long long)((uint64_t)n * esize));
        }
        if (__builtin_add_overflow(covered, n, &covered))
            return ckpt__error(bad, "%s: tensor '%s': element count overflows", what, name);
        v->p = p;
    }

    return ckpt__tiling_check(scratch, t->n_pieces, &shape, total, covered, bad, what, name);
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
    if (h->layout != MPICKPT__LAYOUT__LAYOUT_SHARED && h->layout != MPICKPT__LAYOUT__LAYOUT_PER_RANK &&
        h->layout != MPICKPT__LAYOUT__LAYOUT_PER_NODE)
        return ckpt__error(bad, "%s: unknown layout %d", what, (int)h->layout);
    if (h->save_counter < 0 || h->save_counter > CKPT__COUNTER_MAX)
        return ckpt__error(bad, "%s: save counter %lld outside [0, %lld]", what,
                           (long long)h->save_counter, (long long)CKPT__COUNTER_MAX);

    int rc = CKPT_OK;
    struct fileset fs = { NULL, 0, NULL, 0 };
    const char **files = malloc((idx->n_files + 1) * sizeof *files);
    size_t need = vrow_size(0), bytes; /* the largest tensor's rows and pointers to them */
    for (size_t i = 0; i < idx->n_tensors; i++) {
        size_t nd = idx->tensors[i]->n_shape;
        if (ckpt__mul_size(&bytes, idx->tensors[i]->n_pieces,
                           vrow_size(nd > CKPT_MAX_DIMS ? CKPT_MAX_DIMS : (int)nd) +
                               sizeof(struct vrow *)) != 0)
            bytes = SIZE_MAX;
        if (bytes > need)
            need = bytes;
    }
    char *scratch = need < SIZE_MAX ? malloc(need) : NULL;
    ckpt__tiling_seed();
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
    if (fileset_init(&fs, files, idx->n_files) != 0) {
        rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory validating the index", what);
        goto done;
    }
    for (size_t i = 0; i < idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = idx->tensors[i];
        /* first: the name is then known to be non-empty UTF-8, fit to compare and print */
        rc = validate_tensor(t, h->world_size, h->format_version, &fs, scratch, bad, what);
        if (rc != CKPT_OK)
            goto done;
        if (i > 0 && strcmp(idx->tensors[i - 1]->name, t->name) >= 0) {
            rc = ckpt__error(bad, "%s: tensors not sorted or '%s' listed twice", what, t->name);
            goto done;
        }
    }
done:
    free(fs.slots);
    free(files);
    free(scratch);
    return rc;
}
