/* ckpt_export() to one safetensors file (docs/interop.md, "Export to safetensors"):
 *
 *   8 bytes   N, the header's length (u64, little-endian); N is a multiple of 8
 *   N bytes   the header: a JSON object in UTF-8, padded with trailing spaces
 *   the rest  every tensor's values, little-endian and row-major, back to back: 8-byte dtypes
 *             first, then 4-, 2- and 1-byte ones, by name within each (as safetensors' own writer
 *             orders them), so that every tensor starts at a multiple of its element size
 *
 * The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * from the first byte after the header) and "__metadata__" to a string -> string map. Offsets come
 * from the index alone, so the header is written first and the values streamed after it, one
 * tensor in memory at a time. Written through ckpt__outfile: the file appears whole or not at
 * all. */
#include "interop.h"

#include "fsutil.h"
#include "json.h"

#include "mpickpt/dtype.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_METADATA "__metadata__"
/* safetensors' MAX_HEADER_SIZE (safetensors/src/tensor.rs): its readers refuse longer headers */
#define ST_MAX_HEADER 100000000

/* safetensors' dtype codes. */
static const char *st_dtype(ckpt_dtype dtype)
{
    switch (dtype) {
    case CKPT_BOOL: return "BOOL";
    case CKPT_UINT8: return "U8";
    case CKPT_INT8: return "I8";
    case CKPT_INT16: return "I16";
    case CKPT_UINT16: return "U16";
    case CKPT_FLOAT16: return "F16";
    case CKPT_BFLOAT16: return "BF16";
    case CKPT_INT32: return "I32";
    case CKPT_UINT32: return "U32";
    case CKPT_FLOAT32: return "F32";
    case CKPT_FLOAT64: return "F64";
    case CKPT_INT64: return "I64";
    case CKPT_UINT64: return "U64";
    default: return NULL;
    }
}

/* A JSON string of the header must be written byte for byte: the JSON writer would replace bytes
 * that are not UTF-8 with U+FFFD, giving a different name. The index validator already refuses
 * such names; this keeps a bad one from becoming another name all the same. */
static int check_utf8(const char *s, const char *what)
{
    if (ckpt__utf8_valid(s, strlen(s)))
        return CKPT_OK;
    char esc[256];
    return ckpt__error(CKPT_EINVAL, "export to safetensors: %s '%s' is not valid UTF-8", what,
                       ckpt__escape_bytes(esc, sizeof esc, s, strlen(s)));
}

/* The order of the values: larger elements first, by name (the reader's order) within a size. */
static int *write_order(ckpt_reader *r, const ckpt__export_sel *sel)
{
    size_t n = sel->n;
    int *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return NULL;
    size_t k = 0;
    for (size_t esize = 8; esize >= 1; esize /= 2)
        for (size_t i = 0; i < n; i++) {
            ckpt_tensor_info t;
            if (ckpt__export_tensor(r, sel, i, &t) != CKPT_OK)
                t.dtype = CKPT_UINT8; /* cannot happen for i < n; keeps every index listed */
            size_t es = ckpt_dtype_size(t.dtype);
            if (es == esize || (esize == 1 && (es == 0 || es > 8 || (es & (es - 1)))))
                order[k++] = (int)i;
        }
    return order;
}

static void meta_int(ckpt__json_writer *w, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    ckpt__json_key(w, key);
    ckpt__json_string(w, buf);
}

/*
 * Builds the file's first bytes: the length, the JSON header and its padding, in a malloc'd
 * buffer (*head, *head_len, a multiple of 8), and each tensor's byte count (*sizes, n entries).
 * Every check on names happens here, before any file is created.
 */
static int build_header(ckpt_reader *r, const ckpt__export_sel *sel, const int *order,
                        uint8_t **head, size_t *head_len, uint64_t **sizes)
{
    *head = NULL;
    *head_len = 0;
    size_t n = sel->n;
    uint64_t *sz = calloc(n ? n : 1, sizeof *sz);
    char *json = NULL;
    size_t json_len = 0;
    FILE *mem = sz ? open_memstream(&json, &json_len) : NULL;
    if (!mem) {
        free(sz);
        return ckpt__error(CKPT_ENOMEM, "export to safetensors: out of memory for the header");
    }
    const ckpt_header *h = ckpt_reader_header(r);
    const char *producer = h->producer ? h->producer : "";
    int rc = check_utf8(producer, "the producer");
    ckpt__json_writer w;
    ckpt__json_init(&w, mem);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, ST_METADATA);
    ckpt__json_object_begin(&w);
    /* "pt": what safetensors' PyTorch writer says, and what Hugging Face transformers requires
     * (it accepts pt, tf, flax and mlx): the values are plain row-major arrays either way */
    ckpt__json_key(&w, "format");
    ckpt__json_string(&w, "pt");
    ckpt__json_key(&w, "exporter");
    ckpt__json_string(&w, "mpickpt export");
    ckpt__json_key(&w, "producer");
    ckpt__json_string(&w, producer);
    meta_int(&w, "epoch", h->epoch);
    meta_int(&w, "step", h->step);
    meta_int(&w, "save_counter", h->save_counter);
    meta_int(&w, "end_of_epoch", h->end_of_epoch ? 1 : 0);
    if (sel->aliases_json) { /* {"alias": "target"}: tensors stored once (tied weights) */
        ckpt__json_key(&w, "mpickpt_aliases");
        ckpt__json_string(&w, sel->aliases_json);
    }
    ckpt__json_object_end(&w);

    uint64_t offset = 0;
    for (size_t k = 0; k < n && rc == CKPT_OK; k++) {
        size_t i = (size_t)order[k];
        ckpt_tensor_info t;
        int64_t elems = 0;
        if ((rc = ckpt__export_tensor(r, sel, i, &t)) != CKPT_OK ||
            (rc = ckpt_shape_num_elements(&elems, &t.shape)) != CKPT_OK)
            break;
        const char *code = st_dtype(t.dtype);
        if (!code) {
            rc = ckpt__error(CKPT_ECORRUPT, "tensor '%s': invalid dtype %d", t.name,
                             (int)t.dtype);
            break;
        }
        if (strcmp(t.name, ST_METADATA) == 0) {
            rc = ckpt__error(CKPT_EINVAL,
                             "export to safetensors: tensor '%s': safetensors keeps that key for "
                             "the file's metadata, so no tensor can have this name (export to "
                             "HDF5, --format hdf5, keeps it)",
                             t.name);
            break;
        }
        if ((rc = check_utf8(t.name, "tensor name")) != CKPT_OK)
            break;
        uint64_t bytes, end;
        if (__builtin_mul_overflow((uint64_t)elems, (uint64_t)ckpt_dtype_size(t.dtype), &bytes) ||
            __builtin_add_overflow(offset, bytes, &end)) {
            rc = ckpt__error(CKPT_ECORRUPT, "tensor '%s': its size overflows", t.name);
            break;
        }
        sz[i] = bytes;
        ckpt__json_key(&w, t.name);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "dtype");
        ckpt__json_string(&w, code);
        ckpt__json_key(&w, "shape");
        ckpt__json_array_begin(&w);
        for (int d = 0; d < t.shape.ndims; d++)
            ckpt__json_int(&w, t.shape.dims[d]);
        ckpt__json_array_end(&w);
        ckpt__json_key(&w, "data_offsets");
        ckpt__json_array_begin(&w);
        ckpt__json_uint(&w, offset);
        ckpt__json_uint(&w, end);
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
        offset = end;
    }
    ckpt__json_object_end(&w);
    int bad_stream = ferror(mem);
    if (fclose(mem) != 0 || bad_stream) {
        if (rc == CKPT_OK)
            rc = ckpt__error(CKPT_ENOMEM, "export to safetensors: out of memory for the header");
    }
    /* the values start at a multiple of 8 (8 + N with N a multiple of 8), as safetensors' own
     * writer pads: readers may map the file and view the values in place */
    size_t padded = (json_len + 7) / 8 * 8;
    uint8_t *buf = NULL;
    if (rc == CKPT_OK && padded > ST_MAX_HEADER)
        rc = ckpt__error(CKPT_EINVAL,
                         "export to safetensors: the header of %zu tensors would be %zu bytes; "
                         "safetensors readers refuse headers over %d bytes (export to HDF5, "
                         "--format hdf5, or TensorFlow, --format tf, instead)",
                         n, padded, ST_MAX_HEADER);
    if (rc == CKPT_OK && (padded < json_len || !(buf = malloc(8 + padded))))
        rc = ckpt__error(CKPT_ENOMEM, "export to safetensors: out of memory for the header");
    if (rc == CKPT_OK) {
        uint64_t len = padded;
        for (int b = 0; b < 8; b++)
            buf[b] = (uint8_t)(len >> (8 * b));
        memcpy(buf + 8, json, json_len);
        memset(buf + 8 + json_len, ' ', padded - json_len);
        *head = buf;
        *head_len = 8 + padded;
        *sizes = sz;
    } else {
        free(sz);
    }
    free(json);
    return rc;
}

int ckpt__export_safetensors(ckpt_reader *r, const ckpt__export_sel *sel, const char *out,
                             const ckpt_export_options *opts, ckpt_interop_totals *totals)
{
    if (!ckpt_reader_header(r)->little_endian)
        return ckpt__error(CKPT_EINVAL, "export to safetensors: the checkpoint's data is "
                                        "big-endian; only little-endian checkpoints can be "
                                        "exported");
    uint8_t *head = NULL;
    size_t head_len = 0;
    uint64_t *sizes = NULL;
    size_t n = sel->n;
    int *order = write_order(r, sel);
    if (!order)
        return ckpt__error(CKPT_ENOMEM, "export to safetensors: out of memory");
    int rc = build_header(r, sel, order, &head, &head_len, &sizes);
    if (rc != CKPT_OK) {
        free(order);
        return rc;
    }
    ckpt__outfile o;
    if ((rc = ckpt__outfile_open(&o, out, opts->overwrite)) != CKPT_OK) {
        free(head);
        free(sizes);
        free(order);
        return rc;
    }
    rc = ckpt__pwrite_full(o.fd, head, head_len, 0, "write", o.shown);
    uint64_t at = head_len;
    for (size_t k = 0; k < n && rc == CKPT_OK; k++) {
        size_t i = (size_t)order[k];
        ckpt_tensor_info info;
        void *data = NULL;
        size_t bytes = 0;
        if ((rc = ckpt__export_read(r, sel, i, &info, &data, &bytes)) != CKPT_OK)
            break;
        if (bytes != sizes[i])
            rc = ckpt__error(CKPT_ECORRUPT, "tensor '%s': read %zu bytes, its shape says %llu",
                             info.name, bytes, (unsigned long long)sizes[i]);
        else if (bytes > 0)
            rc = ckpt__pwrite_full(o.fd, data, bytes, at, "write", o.shown);
        free(data);
        if (rc != CKPT_OK)
            break;
        at += bytes;
        ckpt__export_report(opts, totals, &info, bytes);
    }
    free(head);
    free(sizes);
    free(order);
    if (rc == CKPT_OK)
        rc = ckpt__outfile_commit(&o);
    if (rc != CKPT_OK) {
        ckpt__outfile_discard(&o);
        return rc;
    }
    ckpt__outfile_close(&o);
    totals->files = 1;
    return CKPT_OK;
}
