/* ckpt_import_tf(): a TensorFlow tensor bundle in, an mpickpt checkpoint out (docs/interop.md).
 *
 * The index (an SSTable, lib/interop/sstable.c) is read whole and checked block by block; its
 * entries are kept in key order. The first is the header under the empty key; every other key that
 * does not start with a 0 byte is a tensor: either stored whole (shard, offset, size, masked
 * CRC-32C) or partitioned, its slices stored under keys of their own (lib/interop/tfbundle.c). Each
 * tensor (or slice) is read from its shard, checked against its CRC and given to the single-process
 * writer (include/mpickpt/checkpoint.h), which commits only when everything was added. */
#include "interop.h"

#include "fsutil.h"
#include "sstable.h"
#include "tfbundle.h"
#include "tf_bundle.pb-c.h"

#include "mpickpt/crc32c.h"
#include "mpickpt/dtype.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_INDEX_BYTES ((size_t)1 << 31) /* a bundle index we read whole */
#define MAX_SHARDS (1 << 20)
#define MAX_NAME 4096
/* Shard files held open at once: a bundle may have more shards than the process may have
 * descriptors (1024 is a common limit); the oldest opened is closed to make room. */
#define MAX_OPEN_SHARDS 64

typedef struct tf_entry {
    uint8_t *key;
    size_t klen;
    uint8_t *value;
    size_t vlen;
} tf_entry;

typedef struct shard {
    int fd; /* -1 until first used */
    uint64_t size;
} shard;

typedef struct import_run {
    const ckpt_import_options *opts;
    ckpt_interop_totals *totals;
    int dirfd;
    char dir[4096];
    char base[256];
    char index_shown[4400];
    tf_entry *entries;
    size_t n, cap;
    int num_shards;
    shard *shards;
    int open_ids[MAX_OPEN_SHARDS]; /* the shards holding a descriptor, oldest at open_next */
    int nopen, open_next;
    ckpt_writer *writer;
} import_run;

/* A key for messages: printable ASCII and UTF-8 as is, other bytes as \xNN. */
static const char *shown_key(char *out, size_t size, const uint8_t *key, size_t klen)
{
    size_t o = 0;
    for (size_t i = 0; i < klen && o + 5 < size; i++) {
        if (key[i] < 0x20 || key[i] == 0x7f || key[i] == '\\')
            o += (size_t)snprintf(out + o, size - o, "\\x%02x", key[i]);
        else
            out[o++] = (char)key[i];
    }
    if (o + 5 >= size && size > 4)
        memcpy(out + size - 4, "...", 4);
    else
        out[o] = '\0';
    return out;
}

static int collect(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                   void *payload)
{
    import_run *run = payload;
    if (run->n == run->cap) {
        size_t cap = run->cap ? 2 * run->cap : 256;
        tf_entry *e = realloc(run->entries, cap * sizeof *e);
        if (!e)
            return ckpt__error(CKPT_ENOMEM, "%s: out of memory", run->index_shown);
        run->entries = e;
        run->cap = cap;
    }
    tf_entry *e = &run->entries[run->n];
    e->key = malloc(klen + 1); /* NUL-terminated: tensor names are C strings */
    e->value = malloc(vlen ? vlen : 1);
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        return ckpt__error(CKPT_ENOMEM, "%s: out of memory", run->index_shown);
    }
    if (klen)
        memcpy(e->key, key, klen);
    e->key[klen] = '\0';
    if (vlen)
        memcpy(e->value, value, vlen);
    e->klen = klen;
    e->vlen = vlen;
    run->n++;
    return CKPT_OK;
}

static int check_header(import_run *run)
{
    if (run->n == 0 || run->entries[0].klen != 0)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: no header entry (the empty key): not a TensorFlow bundle index",
                           run->index_shown);
    Tfbundle__BundleHeaderProto *h = tfbundle__bundle_header_proto__unpack(
        NULL, run->entries[0].vlen, run->entries[0].value);
    if (!h)
        return ckpt__error(CKPT_ECORRUPT, "%s: the header entry does not parse",
                           run->index_shown);
    int rc = CKPT_OK;
    int producer = h->version ? h->version->producer : 0;
    int min_consumer = h->version ? h->version->min_consumer : 0;
    if (h->endianness != 0)
        rc = ckpt__error(CKPT_EINVAL,
                         "%s: a big-endian bundle (endianness %d); only little-endian bundles "
                         "are imported",
                         run->index_shown, h->endianness);
    else if (producer < 0)
        rc = ckpt__error(CKPT_ECORRUPT, "%s: bundle producer version %d is below 0",
                         run->index_shown, producer);
    else if (min_consumer > CKPT__TF_BUNDLE_VERSION)
        rc = ckpt__error(CKPT_EVERSION,
                         "%s: the bundle needs a reader of format version %d or newer; this one "
                         "reads version %d",
                         run->index_shown, min_consumer, CKPT__TF_BUNDLE_VERSION);
    for (size_t i = 0; rc == CKPT_OK && h->version && i < h->version->n_bad_consumers; i++)
        if (h->version->bad_consumers[i] == CKPT__TF_BUNDLE_VERSION)
            rc = ckpt__error(CKPT_EVERSION,
                             "%s: the bundle disallows readers of format version %d",
                             run->index_shown, CKPT__TF_BUNDLE_VERSION);
    if (rc == CKPT_OK && (h->num_shards < 0 || h->num_shards > MAX_SHARDS))
        rc = ckpt__error(CKPT_ECORRUPT, "%s: the header gives %d shards", run->index_shown,
                         h->num_shards);
    if (rc == CKPT_OK) {
        run->num_shards = h->num_shards;
        run->shards = calloc((size_t)(h->num_shards ? h->num_shards : 1), sizeof *run->shards);
        if (!run->shards)
            rc = ckpt__error(CKPT_ENOMEM, "%s: out of memory", run->index_shown);
        for (int i = 0; rc == CKPT_OK && i < h->num_shards; i++)
            run->shards[i].fd = -1;
    }
    tfbundle__bundle_header_proto__free_unpacked(h, NULL);
    return rc;
}

/* The file of shard `id` (opened on first use: never a link, never a FIFO, a regular file). */
static int get_shard(import_run *run, int id, const char *key, shard **out, char *name,
                     size_t nsize)
{
    if (id < 0 || id >= run->num_shards)
        return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s' is in shard %d; the bundle has %d",
                           run->index_shown, key, id, run->num_shards);
    int rc = ckpt__tf_data_name(name, nsize, run->base, id, run->num_shards);
    if (rc != CKPT_OK)
        return rc;
    shard *s = &run->shards[id];
    if (s->fd < 0) {
        if (run->nopen == MAX_OPEN_SHARDS) {
            shard *old = &run->shards[run->open_ids[run->open_next]];
            ckpt__close(old->fd);
            old->fd = -1;
            run->nopen--;
        }
        rc = ckpt__file_open(&s->fd, &s->size, run->dirfd, name, O_RDONLY, run->dir);
        if (rc == CKPT_ENOTFOUND)
            return ckpt__error_set_reason(
                ckpt__error(CKPT_ENOTFOUND,
                            "%s/%s: missing (tensor '%s' is in shard %d of the %d the header "
                            "gives)",
                            run->dir, name, key, id, run->num_shards),
                CKPT_REASON_NO_CHECKPOINT);
        if (rc != CKPT_OK)
            return ckpt__error_wrap(rc, "%s/%s (shard %d, tensor '%s'): ", run->dir, name, id,
                                    key);
        run->open_ids[run->open_next] = id;
        run->open_next = (run->open_next + 1) % MAX_OPEN_SHARDS;
        run->nopen++;
    }
    *out = s;
    return CKPT_OK;
}

/* Reads the bytes an entry points at and checks their size and CRC. */
static int read_entry(import_run *run, const Tfbundle__BundleEntryProto *e, const char *key,
                      uint64_t want_bytes, void **out)
{
    *out = NULL;
    char name[400];
    shard *s = NULL;
    int rc = get_shard(run, e->shard_id, key, &s, name, sizeof name);
    if (rc != CKPT_OK)
        return rc;
    if (e->size < 0 || (uint64_t)e->size != want_bytes)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s: tensor '%s': the entry gives %lld bytes; its dtype and shape "
                           "make %llu",
                           run->index_shown, key, (long long)e->size,
                           (unsigned long long)want_bytes);
    if (e->offset < 0 || (uint64_t)e->offset > s->size ||
        want_bytes > s->size - (uint64_t)e->offset)
        return ckpt__error(CKPT_ECORRUPT,
                           "%s/%s: tensor '%s' at offset %lld (%llu bytes) lies beyond the end "
                           "of the file (%llu bytes): truncated",
                           run->dir, name, key, (long long)e->offset,
                           (unsigned long long)want_bytes, (unsigned long long)s->size);
    if (want_bytes > SIZE_MAX - 1)
        return ckpt__error(CKPT_ENOMEM, "tensor '%s' does not fit in memory", key);
    void *buf = malloc(want_bytes ? (size_t)want_bytes : 1);
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "tensor '%s': cannot allocate %llu bytes", key,
                           (unsigned long long)want_bytes);
    char shown[4700];
    snprintf(shown, sizeof shown, "%s/%s", run->dir, name);
    rc = ckpt__pread_full(s->fd, buf, (size_t)want_bytes, (uint64_t)e->offset, "read", shown);
    if (rc == CKPT_OK) {
        uint32_t crc = ckpt_crc32c(buf, (size_t)want_bytes);
        if (crc != ckpt_crc32c_unmask(e->crc32c))
            rc = ckpt__error(CKPT_ECORRUPT,
                             "%s: tensor '%s' (%llu bytes at offset %lld): checksum mismatch "
                             "(stored %08x, computed %08x)",
                             shown, key, (unsigned long long)want_bytes, (long long)e->offset,
                             ckpt_crc32c_unmask(e->crc32c), crc);
    }
    if (rc != CKPT_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    return CKPT_OK;
}

/* The shape of an entry, checked. */
static int entry_shape(import_run *run, const Tfbundle__TensorShapeProto *sp, const char *key,
                       ckpt_shape *shape)
{
    memset(shape, 0, sizeof *shape);
    if (!sp)
        return CKPT_OK; /* absent: a scalar, as TensorFlow reads it */
    if (sp->unknown_rank)
        return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s' has an unknown rank",
                           run->index_shown, key);
    if (sp->n_dim > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_EINVAL,
                           "%s: tensor '%s' has %zu dimensions; mpickpt holds at most %d",
                           run->index_shown, key, sp->n_dim, CKPT_MAX_DIMS);
    int64_t n = 1;
    for (size_t d = 0; d < sp->n_dim; d++) {
        int64_t v = sp->dim[d]->size;
        if (v < 0)
            return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': dimension %zu is %lld",
                               run->index_shown, key, d, (long long)v);
        if (v > 0 && n > INT64_MAX / v)
            return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': too many elements",
                               run->index_shown, key);
        n *= v;
        shape->dims[d] = v;
    }
    shape->ndims = (int)sp->n_dim;
    return CKPT_OK;
}

static int shape_bytes(import_run *run, const char *key, const ckpt_shape *shape,
                       ckpt_dtype dtype, uint64_t *bytes)
{
    int64_t n = 0;
    int rc = ckpt_shape_num_elements(&n, shape);
    size_t es = ckpt_dtype_size(dtype);
    if (rc != CKPT_OK || n < 0 || (uint64_t)n > UINT64_MAX / es)
        return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': too many elements",
                           run->index_shown, key);
    *bytes = (uint64_t)n * es;
    return CKPT_OK;
}

static int key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    return c ? c : (alen < blen ? -1 : alen > blen);
}

static const tf_entry *find_entry(const import_run *run, const uint8_t *key, size_t klen)
{
    size_t lo = 0, hi = run->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = key_cmp(run->entries[mid].key, run->entries[mid].klen, key, klen);
        if (c == 0)
            return &run->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* One slice of a partitioned tensor: its extents checked against the full shape, its own entry
 * found by its key, read and added as a piece. */
static int import_slice(import_run *run, const char *key, ckpt_dtype dtype, int tf_dtype,
                        const ckpt_shape *full, const Tfbundle__TensorSliceProto *sp,
                        uint64_t *bytes)
{
    if ((int)sp->n_extent != full->ndims)
        return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': a slice has %zu extents for %d "
                           "dimensions",
                           run->index_shown, key, sp->n_extent, full->ndims);
    ckpt_slice slice;
    int64_t start[CKPT_MAX_DIMS], length[CKPT_MAX_DIMS];
    memset(&slice, 0, sizeof slice);
    slice.ndims = full->ndims;
    for (int d = 0; d < full->ndims; d++) {
        const Tfbundle__TensorSliceProto__Extent *x = sp->extent[d];
        int has_len = x->has_length_case == TFBUNDLE__TENSOR_SLICE_PROTO__EXTENT__HAS_LENGTH_LENGTH;
        start[d] = x->start;
        length[d] = has_len ? x->length : -1;
        if (!has_len && x->start == 0) {
            slice.start[d] = 0;
            slice.count[d] = full->dims[d];
        } else if (has_len && x->start >= 0 && x->length > 0 && x->start <= full->dims[d] &&
                   x->length <= full->dims[d] - x->start) {
            slice.start[d] = x->start;
            slice.count[d] = x->length;
        } else {
            return ckpt__error(CKPT_ECORRUPT,
                               "%s: tensor '%s': slice extent %d (start %lld, length %lld) is "
                               "outside the shape",
                               run->index_shown, key, d, (long long)x->start,
                               (long long)length[d]);
        }
    }
    uint8_t *skey = NULL;
    size_t sklen = 0;
    int rc = ckpt__tf_slice_key(&skey, &sklen, key, full->ndims, start, length);
    if (rc != CKPT_OK)
        return rc;
    char spec[512];
    if (ckpt_slice_spec_format(spec, sizeof spec, full, &slice) != CKPT_OK)
        snprintf(spec, sizeof spec, "?");
    const tf_entry *se = find_entry(run, skey, sklen);
    free(skey);
    if (!se)
        return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': the entry of its slice %s is missing",
                           run->index_shown, key, spec);
    Tfbundle__BundleEntryProto *e = tfbundle__bundle_entry_proto__unpack(NULL, se->vlen, se->value);
    if (!e)
        return ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': the entry of slice %s does not parse",
                           run->index_shown, key, spec);
    ckpt_shape sshape;
    void *data = NULL;
    uint64_t want = 0;
    rc = entry_shape(run, e->shape, key, &sshape);
    if (rc == CKPT_OK && (e->dtype != tf_dtype || e->n_slices != 0))
        rc = ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': the entry of slice %s disagrees with the "
                         "tensor's (dtype %d, not %d)",
                         run->index_shown, key, spec, e->dtype, tf_dtype);
    if (rc == CKPT_OK) {
        int same = sshape.ndims == slice.ndims;
        for (int d = 0; same && d < slice.ndims; d++)
            same = sshape.dims[d] == slice.count[d];
        if (!same)
            rc = ckpt__error(CKPT_ECORRUPT, "%s: tensor '%s': the entry of slice %s has another "
                             "shape",
                             run->index_shown, key, spec);
    }
    if (rc == CKPT_OK)
        rc = shape_bytes(run, key, &sshape, dtype, &want);
    if (rc == CKPT_OK)
        rc = read_entry(run, e, key, want, &data);
    if (rc == CKPT_OK && (rc = ckpt_writer_add(run->writer, key, dtype, full, &slice, data)) !=
                             CKPT_OK)
        ckpt__error_wrap(rc, "import of %s: ", run->index_shown); /* e.g. a slice given twice */
    free(data);
    tfbundle__bundle_entry_proto__free_unpacked(e, NULL);
    if (rc == CKPT_OK)
        *bytes += want;
    return rc;
}

static void report(import_run *run, const char *key, const char *dtype, const ckpt_shape *shape,
                   uint64_t bytes, const char *reason)
{
    if (reason)
        run->totals->skipped++;
    else {
        run->totals->tensors++;
        run->totals->bytes += bytes;
    }
    if (!run->opts->progress)
        return;
    ckpt_interop_item item;
    memset(&item, 0, sizeof item);
    item.name = key;
    item.dtype = dtype;
    item.shape = *shape;
    item.bytes = bytes;
    item.skipped = reason != NULL;
    item.reason = reason;
    run->opts->progress(&item, run->opts->payload);
}

static int import_entry(import_run *run, const tf_entry *te)
{
    char shown[600];
    const char *key = (const char *)te->key;
    if (te->klen > MAX_NAME || !ckpt__utf8_valid(key, te->klen) || strlen(key) != te->klen)
        return ckpt__error(CKPT_EINVAL,
                           "%s: key '%s' is not a name mpickpt can hold (UTF-8, at most %d "
                           "bytes, no NUL)",
                           run->index_shown, shown_key(shown, sizeof shown, te->key, te->klen),
                           MAX_NAME);
    Tfbundle__BundleEntryProto *e = tfbundle__bundle_entry_proto__unpack(NULL, te->vlen, te->value);
    if (!e)
        return ckpt__error(CKPT_ECORRUPT, "%s: the entry of tensor '%s' does not parse",
                           run->index_shown, key);
    ckpt_shape shape;
    char tfname[32];
    uint64_t bytes = 0;
    void *data = NULL;
    int rc = entry_shape(run, e->shape, key, &shape);
    ckpt_dtype dtype = ckpt__tf_dtype_to_ckpt(e->dtype);
    if (rc == CKPT_OK && dtype == CKPT_DTYPE_INVALID) {
        ckpt__tf_dtype_name(e->dtype, tfname, sizeof tfname);
        char reason[96];
        snprintf(reason, sizeof reason, "dtype %s is not supported", tfname);
        if (run->opts->skip_unsupported)
            report(run, key, tfname, &shape,
                   e->n_slices ? 0 : (uint64_t)(e->size > 0 ? e->size : 0),
                   reason);
        else
            rc = ckpt__error(CKPT_EINVAL,
                             "%s: tensor '%s': dtype %s is not supported (leave such tensors "
                             "out with --skip-unsupported, in Python skip_unsupported=True)",
                             run->index_shown, key, tfname);
        tfbundle__bundle_entry_proto__free_unpacked(e, NULL);
        return rc;
    }
    if (rc == CKPT_OK && e->n_slices == 0) {
        rc = shape_bytes(run, key, &shape, dtype, &bytes);
        if (rc == CKPT_OK)
            rc = read_entry(run, e, key, bytes, &data);
        if (rc == CKPT_OK)
            rc = ckpt_writer_add(run->writer, key, dtype, &shape, NULL, data);
        free(data);
    }
    for (size_t i = 0; rc == CKPT_OK && i < e->n_slices; i++)
        rc = import_slice(run, key, dtype, e->dtype, &shape, e->slices[i], &bytes);
    if (rc == CKPT_OK)
        report(run, key, ckpt_dtype_name(dtype), &shape, bytes, NULL);
    tfbundle__bundle_entry_proto__free_unpacked(e, NULL);
    return rc;
}

/* TF_PREFIX is a directory: the checkpoint its `checkpoint` file (TensorFlow's CheckpointState,
 * text format) names as `model_checkpoint_path`, looked up in that directory itself whatever
 * directory the path names (TensorFlow 1 wrote absolute paths): only the last component is used,
 * so nothing outside the directory is read. */
static int resolve_dir(char *out, size_t size, const char *dir)
{
    int dirfd = -1;
    uint8_t *text = NULL;
    size_t len = 0;
    int rc = ckpt__dir_open(&dirfd, dir);
    if (rc == CKPT_OK)
        rc = ckpt__read_file_at(&text, &len, dirfd, "checkpoint", 1 << 20, dir);
    ckpt__close(dirfd);
    if (rc == CKPT_ENOTFOUND)
        return ckpt__error_set_reason(
            ckpt__error(CKPT_ENOTFOUND,
                        "%s is a directory without a TensorFlow `checkpoint` file: give the "
                        "checkpoint's prefix (dir/ckpt-N)",
                        dir),
            CKPT_REASON_NO_CHECKPOINT);
    if (rc != CKPT_OK)
        return rc;
    /* the line `model_checkpoint_path: "..."` (C-style escapes of text format) */
    char name[256];
    size_t n = 0;
    int found = 0;
    const char *key = "model_checkpoint_path:";
    for (size_t i = 0; i < len && !found; i++) {
        if ((i > 0 && text[i - 1] != '\n') || len - i < strlen(key) ||
            memcmp(text + i, key, strlen(key)) != 0)
            continue;
        size_t j = i + strlen(key);
        while (j < len && (text[j] == ' ' || text[j] == '\t'))
            j++;
        if (j >= len || text[j] != '"')
            break;
        for (j++; j < len && text[j] != '"' && text[j] != '\n'; j++) {
            uint8_t c = text[j];
            if (c == '\\' && j + 1 < len)
                c = text[++j] == 'n' ? '\n' : text[j] == 't' ? '\t' : text[j];
            if (c == '/') { /* keep the last component only */
                n = 0;
                continue;
            }
            if (n + 1 >= sizeof name) {
                free(text);
                return ckpt__error(CKPT_ECORRUPT, "%s/checkpoint: the checkpoint name is too long",
                                   dir);
            }
            name[n++] = (char)c;
        }
        found = j < len && text[j] == '"';
    }
    free(text);
    name[n] = '\0';
    if (!found || n == 0 || !ckpt__safe_filename(name))
        return ckpt__error(CKPT_ECORRUPT,
                           "%s/checkpoint names no checkpoint (no model_checkpoint_path line)",
                           dir);
    return ckpt__path(out, size, "%s/%s", dir, name);
}

int ckpt__tf_resolve_prefix(char *out, size_t size, const char *tf_prefix)
{
    struct stat st;
    if (stat(tf_prefix, &st) == 0 && S_ISDIR(st.st_mode))
        return resolve_dir(out, size, tf_prefix);
    return ckpt__path(out, size, "%s", tf_prefix);
}

int ckpt_import_tf(const char *tf_prefix, const char *out_prefix, const ckpt_import_options *opts,
                   ckpt_interop_totals *totals)
{
    ckpt_interop_totals local;
    if (!totals)
        totals = &local;
    memset(totals, 0, sizeof *totals);
    if (!tf_prefix || !out_prefix || !opts)
        return ckpt__error(CKPT_EINVAL, "ckpt_import_tf: NULL argument");
    if (opts->version != CKPT_IMPORT_OPTIONS_VERSION)
        return ckpt__error(CKPT_EINVAL, "ckpt_import_tf: options version %u, expected %u",
                           opts->version, CKPT_IMPORT_OPTIONS_VERSION);
    if (opts->save_counter < 0 || opts->epoch < 0 || opts->step < 0)
        return ckpt__error(CKPT_EINVAL,
                           "ckpt_import_tf: save_counter, epoch and step must not be negative "
                           "(%lld, %lld, %lld)",
                           (long long)opts->save_counter, (long long)opts->epoch,
                           (long long)opts->step);
    import_run run;
    memset(&run, 0, sizeof run);
    run.opts = opts;
    run.totals = totals;
    run.dirfd = -1;
    char index_name[300], resolved[4400];
    uint8_t *index = NULL;
    size_t index_len = 0;
    int rc = ckpt__tf_resolve_prefix(resolved, sizeof resolved, tf_prefix);
    if (rc != CKPT_OK)
        return rc;
    tf_prefix = resolved;
    rc = ckpt__split_path(run.dir, sizeof run.dir, run.base, sizeof run.base, tf_prefix);
    if (rc == CKPT_OK && (!run.base[0] || !ckpt__safe_filename(run.base)))
        rc = ckpt__error(CKPT_EINVAL, "'%s' is not a TensorFlow bundle prefix (dir/name)",
                         tf_prefix);
    if (rc == CKPT_OK)
        rc = ckpt__tf_index_name(index_name, sizeof index_name, run.base);
    if (rc == CKPT_OK) {
        snprintf(run.index_shown, sizeof run.index_shown, "%s/%s", run.dir, index_name);
        rc = ckpt__dir_open(&run.dirfd, run.dir);
    }
    if (rc == CKPT_OK)
        rc = ckpt__read_file_at(&index, &index_len, run.dirfd, index_name, MAX_INDEX_BYTES,
                                run.dir);
    if (rc == CKPT_OK)
        rc = ckpt__sst_scan(index, index_len, run.index_shown, collect, &run);
    free(index);
    if (rc == CKPT_OK)
        rc = check_header(&run);
    if (rc == CKPT_OK) {
        ckpt_writer_options wo = CKPT_WRITER_OPTIONS_INIT;
        wo.save_counter = opts->save_counter;
        wo.epoch = opts->epoch;
        wo.step = opts->step;
        wo.overwrite = opts->overwrite;
        rc = ckpt_writer_open(&run.writer, out_prefix, &wo);
    }
    for (size_t i = 1; rc == CKPT_OK && i < run.n; i++)
        if (run.entries[i].klen > 0 && run.entries[i].key[0] != 0) /* 0 byte first: a slice */
            rc = import_entry(&run, &run.entries[i]);
    if (rc == CKPT_OK) {
        rc = ckpt_writer_commit(run.writer);
        if (rc == CKPT_OK)
            totals->files = 2;
        else /* e.g. the slices of a partitioned tensor overlap or leave a gap */
            ckpt__error_wrap(rc, "import of %s: ", run.index_shown);
    }
    ckpt_writer_free(run.writer);
    for (int i = 0; run.shards && i < run.num_shards; i++)
        ckpt__close(run.shards[i].fd);
    free(run.shards);
    for (size_t i = 0; i < run.n; i++) {
        free(run.entries[i].key);
        free(run.entries[i].value);
    }
    free(run.entries);
    ckpt__close(run.dirfd);
    return rc;
}
