/**
 * @file mpickpt/interop.h
 * @brief Moving checkpoints between tools: import a TensorFlow tensor bundle, export a checkpoint
 * as a TensorFlow bundle, as one plain HDF5 file, or as a safetensors file (docs/interop.md).
 *
 * These functions are single-process and make no MPI calls (the `mpickpt` tool runs them).
 * They hold one tensor in memory at a time: the memory peak is about the largest tensor.
 * Outputs appear whole or not at all: each file is written under a temporary name, fsynced and
 * renamed into place (a TensorFlow bundle's `.index`, written last, is its commit, as an
 * mpickpt checkpoint's is). Inputs are treated as written by someone else: links are not
 * followed, non-regular files are refused, every checksum is checked before any data is used.
 */
#ifndef MPICKPT_INTEROP_H
#define MPICKPT_INTEROP_H

#include "common.h"
#include "slice.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Export formats. */
typedef enum ckpt_export_format {
    CKPT_EXPORT_INVALID = 0,
    CKPT_EXPORT_TF = 1,         /**< TensorFlow tensor bundle: OUT.index, OUT.data-00000-of-00001 */
    CKPT_EXPORT_HDF5 = 2,       /**< one HDF5 file, one dataset per tensor, groups from '/' */
    CKPT_EXPORT_SAFETENSORS = 3 /**< one safetensors file */
} ckpt_export_format;

/** "tf", "hdf5", "safetensors", or "invalid". Never NULL. */
CKPT_EXTERN const char *ckpt_export_format_name(ckpt_export_format format);

/** Parses a format name (as ckpt_export_format_name() writes it). CKPT_EINVAL when unknown. */
CKPT_EXTERN int ckpt_export_format_from_name(ckpt_export_format *out, const char *name);

/** One tensor, as reported to a ckpt_interop_cb. Pointers live during the call only. */
typedef struct ckpt_interop_item {
    const char *name;   /**< the tensor's name (import: the TensorFlow key) */
    const char *dtype;  /**< our dtype name ("float32"), or TensorFlow's ("DT_STRING") if skipped */
    ckpt_shape shape;   /**< the global shape (import of a skipped tensor: as TensorFlow says) */
    uint64_t bytes;     /**< bytes of its values */
    int skipped;        /**< import: 1 when left out (see skip_unsupported); export: always 0 */
    const char *reason; /**< skipped: why, e.g. "dtype DT_STRING is not supported"; else NULL */
} ckpt_interop_item;

/** Called for every tensor after it was written (or skipped), in name order. */
typedef void (*ckpt_interop_cb)(const ckpt_interop_item *item, void *payload);

/** Totals of an import or export. */
typedef struct ckpt_interop_totals {
    size_t tensors;   /**< tensors written */
    uint64_t bytes;   /**< bytes of their values */
    size_t skipped;   /**< import: tensors left out */
    size_t files;     /**< files written */
} ckpt_interop_totals;

/* ------------------------------------------------------------------------------------------ */
/* Export                                                                                      */

/** Options of ckpt_export(). Initialize with CKPT_EXPORT_OPTIONS_INIT. */
typedef struct ckpt_export_options {
    unsigned int version;      /**< CKPT_EXPORT_OPTIONS_VERSION (1 still accepted: no filter) */
    ckpt_export_format format;
    int overwrite;             /**< 1: replace existing output files; 0: CKPT_EEXISTS */
    ckpt_interop_cb progress;  /**< may be NULL */
    void *payload;             /**< passed to progress */
    /* version 2 (issue 30) */
    const char *const *only;   /**< num_only name prefixes: only tensors whose names start with
                                    one of them are written, never mpickpt's own "__mpickpt__/"
                                    blobs; NULL/0: every tensor (blobs included, as version 1) */
    size_t num_only;
    const char *strip_prefix;  /**< removed from the start of every written name (each written
                                    name must start with it and be longer); NULL: none */
} ckpt_export_options;

#define CKPT_EXPORT_OPTIONS_VERSION 2
#define CKPT_EXPORT_OPTIONS_INIT                                                                 \
    { CKPT_EXPORT_OPTIONS_VERSION, CKPT_EXPORT_HDF5, 0, NULL, NULL, NULL, 0, NULL }

/**
 * Exports the checkpoint at @p prefix (every tensor, assembled from its pieces, each piece's
 * checksum checked) in @p opts->format:
 * - CKPT_EXPORT_TF: @p out is a prefix; writes `<out>.data-00000-of-00001` then `<out>.index`.
 * - CKPT_EXPORT_HDF5: @p out is the file; a dataset per tensor at its name (groups from '/'),
 *   bfloat16 stored as uint16 with attribute `dtype` = "bfloat16", bool as h5py's enum; epoch,
 *   step, save_counter and the source header as attributes of the root group.
 * - CKPT_EXPORT_SAFETENSORS: @p out is the file.
 * opts->only and opts->strip_prefix (version 2) select tensors and rename them. Aliases of the
 * Python package's record (version 2: leaves stored once, as another leaf's tensor, e.g. tied
 * weights) whose name and target are both written go into the file's metadata as a JSON object
 * {"alias": "target"} (written names): safetensors `__metadata__` key "mpickpt_aliases", HDF5
 * root attribute "mpickpt_aliases" (a TensorFlow bundle has no place for them: none written).
 * @p totals may be NULL. Errors: those of ckpt_reader_open() and ckpt_reader_read(),
 * CKPT_EEXISTS (an output exists and opts->overwrite is 0), CKPT_EINVAL (a name the format cannot
 * hold, naming it; an empty --only prefix; a selected name without strip_prefix), CKPT_ENOTFOUND
 * (no tensor selected by opts->only), CKPT_ECORRUPT / CKPT_EVERSION (a record of plain values
 * that cannot be read), CKPT_EIO / CKPT_ENOSPC. On failure no output file is left behind.
 */
CKPT_EXTERN int ckpt_export(const char *prefix, const char *out, const ckpt_export_options *opts,
                            ckpt_interop_totals *totals);

/* ------------------------------------------------------------------------------------------ */
/* Import                                                                                      */

/** Options of ckpt_import_tf(). Initialize with CKPT_IMPORT_OPTIONS_INIT. */
typedef struct ckpt_import_options {
    unsigned int version;  /**< CKPT_IMPORT_OPTIONS_VERSION */
    int skip_unsupported;  /**< 1: leave out tensors of dtypes we lack (DT_STRING, complex, ...)
                                and report them; 0: they are an error naming the key */
    int overwrite;         /**< 1: replace an existing checkpoint at the output prefix */
    int64_t save_counter;  /**< written to the header (TensorFlow bundles have none) */
    int64_t epoch;
    int64_t step;
    ckpt_interop_cb progress; /**< may be NULL */
    void *payload;
} ckpt_import_options;

#define CKPT_IMPORT_OPTIONS_VERSION 1
#define CKPT_IMPORT_OPTIONS_INIT { CKPT_IMPORT_OPTIONS_VERSION, 0, 0, 0, 0, 0, NULL, NULL }

/**
 * Reads the TensorFlow tensor bundle at @p tf_prefix (`<tf_prefix>.index` and its
 * `<tf_prefix>.data-NNNNN-of-NNNNN` shards; a directory: the checkpoint its TensorFlow
 * `checkpoint` file names as model_checkpoint_path, looked up in that directory whatever
 * directory the path names) and writes an mpickpt checkpoint at @p out_prefix
 * (ckpt_writer_open()). Checks the index's footer magic and every block's masked CRC-32C
 * (blocks uncompressed or Snappy-compressed), the header entry (version, endianness, shard
 * count), and every tensor's masked CRC-32C; sliced (partitioned) entries become partitioned
 * tensors. Keys are kept as names. @p totals may be NULL.
 * Errors: CKPT_ENOTFOUND (no index or a missing shard), CKPT_ECORRUPT (a malformed, truncated or
 * checksum-failing index or shard; names the key or block), CKPT_EINVAL (a negative
 * save_counter, epoch or step, a dtype we lack without skip_unsupported, a key that is not
 * UTF-8 or too long, more than CKPT_MAX_DIMS dimensions),
 * CKPT_EVERSION (a bundle needing a newer reader), and those of the writer. On failure nothing is
 * committed.
 */
CKPT_EXTERN int ckpt_import_tf(const char *tf_prefix, const char *out_prefix,
                               const ckpt_import_options *opts, ckpt_interop_totals *totals);

#ifdef __cplusplus
}
#endif
#endif
