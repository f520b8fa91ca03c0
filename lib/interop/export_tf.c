/* ckpt__export_tf(): a checkpoint out as a TensorFlow tensor bundle (docs/interop.md).
 *
 * As TensorFlow's BundleWriter does: the tensors' bytes go back to back (alignment 1) into one
 * data file `<out>.data-00000-of-00001`, in the order they are added (here: by name), each with
 * an entry {dtype, shape, shard 0, offset, size, masked CRC-32C}; then the index, an SSTable of
 * the header (num_shards 1, little-endian, version {producer 1}) under the empty key followed by
 * the entries in key order, built block by block as TensorFlow's TableBuilder builds it
 * (lib/interop/sstable.c), uncompressed. Partitioned tensors are written whole (assembled), so the
 * bundle has no sliced entries. The data file is committed first, the index last. */
#include "interop.h"

#include "fsutil.h"
#include "sstable.h"
#include "tfbundle.h"
#include "tf_bundle.pb-c.h"

#include "mpickpt/crc32c.h"
#include "mpickpt/dtype.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The serialized bytes of message `m` (malloc'd). */
static int packed(uint8_t **out, size_t *len, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "out of memory for the export");
    protobuf_c_message_pack(m, buf);
    *out = buf;
    *len = n;
    return CKPT_OK;
}

/* The serialized BundleEntryProto of one tensor. */
static int entry_bytes(uint8_t **out, size_t *len, const ckpt_tensor_info *t, uint64_t offset,
                       uint64_t size, uint32_t crc)
{
    Tfbundle__TensorShapeProto shape = TFBUNDLE__TENSOR_SHAPE_PROTO__INIT;
    Tfbundle__TensorShapeProto__Dim dims[CKPT_MAX_DIMS];
    Tfbundle__TensorShapeProto__Dim *dimp[CKPT_MAX_DIMS];
    for (int d = 0; d < t->shape.ndims; d++) {
        tfbundle__tensor_shape_proto__dim__init(&dims[d]);
        dims[d].size = t->shape.dims[d];
        dimp[d] = &dims[d];
    }
    shape.n_dim = (size_t)t->shape.ndims;
    shape.dim = t->shape.ndims ? dimp : NULL;
    Tfbundle__BundleEntryProto e = TFBUNDLE__BUNDLE_ENTRY_PROTO__INIT;
    e.dtype = ckpt__tf_dtype_from_ckpt(t->dtype);
    e.shape = &shape; /* present even for a scalar (TensorFlow always sets it) */
    e.shard_id = 0;
    e.offset = (int64_t)offset;
    e.size = (int64_t)size;
    e.crc32c = ckpt_crc32c_mask(crc);
    return packed(out, len, &e.base);
}

static int header_bytes(uint8_t **out, size_t *len)
{
    Tfbundle__VersionDef v = TFBUNDLE__VERSION_DEF__INIT;
    v.producer = CKPT__TF_BUNDLE_VERSION;
    v.min_consumer = 0;
    Tfbundle__BundleHeaderProto h = TFBUNDLE__BUNDLE_HEADER_PROTO__INIT;
    h.num_shards = 1;
    h.endianness = 0; /* LITTLE */
    h.version = &v;
    return packed(out, len, &h.base);
}

int ckpt__export_tf(ckpt_reader *r, const ckpt__export_sel *sel, const char *out,
                    const ckpt_export_options *opts, ckpt_interop_totals *totals)
{
    if (!ckpt_reader_header(r)->little_endian)
        return ckpt__error(CKPT_EINVAL,
                           "export to a TensorFlow bundle: the checkpoint holds big-endian data");
    char data_path[4400], index_path[4400];
    int rc = ckpt__tf_data_name(data_path, sizeof data_path, out, 0, 1);
    if (rc == CKPT_OK)
        rc = ckpt__tf_index_name(index_path, sizeof index_path, out);
    if (rc != CKPT_OK)
        return rc;
    ckpt__outfile data, index;
    memset(&index, 0, sizeof index);
    index.dirfd = index.fd = -1;
    /* Both names are checked before anything is written: the index's too, so that a refused
     * export leaves no data file behind either. */
    if ((rc = ckpt__outfile_open(&data, data_path, opts->overwrite)) != CKPT_OK)
        return rc;
    if ((rc = ckpt__outfile_open(&index, index_path, opts->overwrite)) != CKPT_OK) {
        ckpt__outfile_discard(&data);
        return rc;
    }
    ckpt__sst_writer *sst = NULL;
    uint8_t *value = NULL, *table = NULL;
    size_t vlen = 0, tlen = 0;
    void *buf = NULL;
    uint64_t offset = 0;
    rc = ckpt__sst_writer_new(&sst, 0, 0, 0);
    if (rc == CKPT_OK)
        rc = header_bytes(&value, &vlen);
    if (rc == CKPT_OK)
        rc = ckpt__sst_add(sst, (const uint8_t *)"", 0, value, vlen);
    free(value);
    value = NULL;
    /* The reader lists tensors sorted by name (strcmp: bytewise), the table's order; the
     * selection keeps it (a stripped prefix is common to every written name). */
    for (size_t k = 0; rc == CKPT_OK && k < sel->n; k++) {
        ckpt_tensor_info t;
        size_t bytes = 0;
        if ((rc = ckpt__export_read(r, sel, k, &t, &buf, &bytes)) != CKPT_OK)
            break;
        uint32_t crc = ckpt_crc32c(buf, bytes);
        rc = ckpt__pwrite_full(data.fd, buf, bytes, offset, "write", data.shown);
        if (rc == CKPT_OK)
            rc = entry_bytes(&value, &vlen, &t, offset, bytes, crc);
        if (rc == CKPT_OK)
            rc = ckpt__sst_add(sst, (const uint8_t *)t.name, strlen(t.name), value, vlen);
        free(value);
        value = NULL;
        free(buf);
        buf = NULL;
        offset += bytes;
        if (rc == CKPT_OK)
            ckpt__export_report(opts, totals, &t, bytes);
    }
    if (rc == CKPT_OK)
        rc = ckpt__sst_finish(sst, &table, &tlen);
    /* The index's temp file is written and synced before anything is replaced: a full disk or a
     * file size limit met by the index must leave an old bundle whole, not removed. */
    if (rc == CKPT_OK)
        rc = ckpt__pwrite_full(index.fd, table, tlen, 0, "write", index.shown);
    if (rc == CKPT_OK && fsync(index.fd) != 0)
        rc = ckpt__errno(errno, "fsync", index.shown);
    /* Replacing a bundle: its old index goes first, so that no index ever describes the new
     * data file it was not written for. */
    if (rc == CKPT_OK && opts->overwrite && unlinkat(index.dirfd, index.base, 0) != 0 &&
        errno != ENOENT)
        rc = ckpt__errno(errno, "remove", index.shown);
    if (rc == CKPT_OK)
        rc = ckpt__outfile_commit(&data);
    if (rc == CKPT_OK)
        rc = ckpt__outfile_commit(&index);
    if (rc == CKPT_OK) {
        totals->files = 2;
        ckpt__outfile_close(&data);
        ckpt__outfile_close(&index);
    } else {
        ckpt__outfile_discard(&index);
        ckpt__outfile_discard(&data);
    }
    free(table);
    ckpt__sst_writer_free(sst);
    return rc;
}
