/* TensorFlow's tensor bundle (docs/interop.md): the names of its files, its dtypes, and the keys
 * of a partitioned tensor's slices. The table that holds the index is lib/interop/sstable.h; the
 * metadata messages are proto/tf_bundle.proto. */
#ifndef MPICKPT_TFBUNDLE_H
#define MPICKPT_TFBUNDLE_H

#include "internal.h"

#include "mpickpt/dtype.h"

#include <stddef.h>
#include <stdint.h>

/* The bundle format version TensorFlow writes and reads (kTensorBundleVersion). */
#define CKPT__TF_BUNDLE_VERSION 1

/* TensorFlow DataType numbers (tensorflow/core/framework/types.proto) that we name. */
enum {
    CKPT__TF_DT_FLOAT = 1,
    CKPT__TF_DT_DOUBLE = 2,
    CKPT__TF_DT_INT32 = 3,
    CKPT__TF_DT_UINT8 = 4,
    CKPT__TF_DT_INT16 = 5,
    CKPT__TF_DT_INT8 = 6,
    CKPT__TF_DT_STRING = 7,
    CKPT__TF_DT_INT64 = 9,
    CKPT__TF_DT_BOOL = 10,
    CKPT__TF_DT_BFLOAT16 = 14,
    CKPT__TF_DT_UINT16 = 17,
    CKPT__TF_DT_HALF = 19,
    CKPT__TF_DT_UINT32 = 22,
    CKPT__TF_DT_UINT64 = 23
};

/* Our dtype of a TensorFlow one; CKPT_DTYPE_INVALID when we have none (strings, complex,
 * quantized, resource, variant, float8, int4, unknown numbers). */
ckpt_dtype ckpt__tf_dtype_to_ckpt(int tf_dtype);
/* TensorFlow's number of one of our dtypes (every one has one). */
int ckpt__tf_dtype_from_ckpt(ckpt_dtype dtype);
/* "DT_FLOAT", "DT_STRING", ... or "unknown dtype <number>"; in buf. */
const char *ckpt__tf_dtype_name(int tf_dtype, char *buf, size_t size);

/* "<base>.data-%05d-of-%05d" and "<base>.index". */
int ckpt__tf_data_name(char *out, size_t size, const char *base, int shard, int num_shards);
int ckpt__tf_index_name(char *out, size_t size, const char *base);

/* The key of one stored slice of partitioned tensor `name` (TensorFlow's EncodeTensorNameSlice:
 * OrderedCode of 0, the name, the rank, then each dimension's start and length, a full dimension
 * being start 0 length -1). *out is malloc'd. Keys of slices start with a 0 byte, so they sort
 * before, and never equal, a tensor's name. */
int ckpt__tf_slice_key(uint8_t **out, size_t *len, const char *name, int ndims,
                       const int64_t *start, const int64_t *length);

#endif
