/**
 * @file mpickpt/checkpoint.h
 * @brief Single-process writer and reader of complete checkpoints (format v1).
 *
 * A checkpoint `<dir>/<name>` consists of HDF5 data files `<name>.data-%05d-of-%05d` and the index
 * `<name>.index`, written last: its presence is the commit. See docs/format.md.
 * The MPI layer (saver) builds on the same format; these functions make no MPI calls.
 */
#ifndef MPICKPT_CHECKPOINT_H
#define MPICKPT_CHECKPOINT_H

#include "common.h"
#include "dtype.h"
#include "slice.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Newest on-disk format version this library reads and writes. It writes 2 only when a
 *  checkpoint holds packed pieces (small pieces stored back to back, see docs/format.md), else 1. */
#define CKPT_FORMAT_VERSION 2

/** How a tensor is stored. Values are those of the on-disk format. */
typedef enum ckpt_kind {
    CKPT_KIND_UNKNOWN = 0,
    CKPT_KIND_FULL = 1,        /**< owned whole by one rank */
    CKPT_KIND_PARTITIONED = 2, /**< slices owned by several ranks */
    CKPT_KIND_REPLICATED = 3,  /**< identical on every rank; the primary is stored once */
    CKPT_KIND_COMPONENT = 4,   /**< one replica component, per rank */
    CKPT_KIND_BLOB = 5         /**< opaque bytes of a registered saver, per rank */
} ckpt_kind;

/** Name of a kind ("full", "partitioned", "replicated", "component", "blob"), or "unknown". */
CKPT_EXTERN const char *ckpt_kind_name(ckpt_kind kind);

/** Data-file layout. Values are those of the on-disk format. */
typedef enum ckpt_layout {
    CKPT_LAYOUT_UNKNOWN = 0,
    CKPT_LAYOUT_SHARED = 1,   /**< one HDF5 file written by all ranks */
    CKPT_LAYOUT_PER_RANK = 2, /**< one HDF5 file per rank */
    CKPT_LAYOUT_PER_NODE = 3  /**< one HDF5 file per node, written by the ranks of that node */
} ckpt_layout;

/** "shared", "per-rank", "per-node" or "unknown". */
CKPT_EXTERN const char *ckpt_layout_name(ckpt_layout layout);

/** Header of a checkpoint's index. */
typedef struct ckpt_header {
    uint32_t format_version;
    int32_t world_size;   /**< ranks that wrote it */
    ckpt_layout layout;
    int64_t save_counter; /**< N of ckpt-N; 0 for write() without a counter */
    int64_t epoch;
    int64_t step;
    int end_of_epoch;     /**< 1: saved after `epoch` finished; 0: mid-epoch at `step` */
    double timestamp;     /**< seconds since the Unix epoch, at commit */
    const char *producer; /**< "mpickpt 0.1.0" */
    int little_endian;    /**< 1: data files hold little-endian values */
} ckpt_header;

/** A stored tensor as the index describes it. Pointers live as long as the reader. */
typedef struct ckpt_tensor_info {
    const char *name;
    ckpt_dtype dtype;
    ckpt_shape shape; /**< global shape */
    ckpt_kind kind;
    size_t num_pieces;
} ckpt_tensor_info;

/** One stored piece of a tensor. Pointers live as long as the reader. */
typedef struct ckpt_piece_info {
    ckpt_slice slice;          /**< where the piece sits in the global tensor */
    int32_t rank;              /**< rank that wrote it */
    const char *file;          /**< data file, relative to the checkpoint's directory */
    const char *dataset;       /**< HDF5 dataset path inside the file */
    ckpt_slice dataset_slice;  /**< where the piece sits inside its dataset */
    uint64_t bytes;
    uint32_t crc32c;           /**< CRC-32C (unmasked) of the piece's little-endian row-major bytes */
} ckpt_piece_info;

/* ------------------------------------------------------------------------------------------ */
/* Writer                                                                                      */

typedef struct ckpt_writer ckpt_writer;

/** Options of ckpt_writer_open(). Initialize with CKPT_WRITER_OPTIONS_INIT. */
typedef struct ckpt_writer_options {
    unsigned int version; /**< CKPT_WRITER_OPTIONS_VERSION */
    int64_t save_counter;
    int64_t epoch;
    int64_t step;
    int overwrite;        /**< 1: replace an existing committed checkpoint with the same prefix */
} ckpt_writer_options;

#define CKPT_WRITER_OPTIONS_VERSION 1
#define CKPT_WRITER_OPTIONS_INIT { CKPT_WRITER_OPTIONS_VERSION, 0, 0, 0, 0 }

/**
 * Starts a checkpoint at @p prefix (e.g. "/ckpt/chief/ckpt-3"). Data goes to a temp directory
 * `<prefix>_temp/` until ckpt_writer_commit(). The parent directory must exist.
 * CKPT_EEXISTS if `<prefix>.index` exists and options->overwrite is 0.
 */
CKPT_EXTERN int ckpt_writer_open(ckpt_writer **out, const char *prefix,
                                 const ckpt_writer_options *opts);

/**
 * Writes one piece of a tensor: @p data holds the elements of @p slice (NULL: the whole tensor),
 * dense and row-major, in host byte order. The CRC-32C is computed from @p data while writing.
 * A tensor may be added as several pieces (kind CKPT_KIND_PARTITIONED); their slices must tile
 * the global shape exactly, which ckpt_writer_commit() checks.
 * @p name is any non-empty UTF-8 string of at most 4096 bytes; it never becomes a file path.
 */
CKPT_EXTERN int ckpt_writer_add(ckpt_writer *w, const char *name, ckpt_dtype dtype,
                                const ckpt_shape *shape, const ckpt_slice *slice,
                                const void *data);

/**
 * Validates the pieces (duplicates, overlaps, gaps, dtype/shape disagreement), closes and fsyncs
 * the data file, renames it to `<prefix>.data-00000-of-00001`, then writes `<prefix>.index` under
 * a temp name, fsyncs it, renames it into place and fsyncs the directory. On failure nothing is
 * committed and the temp directory is removed. The writer must still be freed.
 */
CKPT_EXTERN int ckpt_writer_commit(ckpt_writer *w);

/** Frees the writer; an uncommitted checkpoint's temp files are removed. NULL is a no-op. */
CKPT_EXTERN void ckpt_writer_free(ckpt_writer *w);

/* ------------------------------------------------------------------------------------------ */
/* Reader                                                                                      */

typedef struct ckpt_reader ckpt_reader;

/**
 * Opens the checkpoint at @p prefix: reads `<prefix>.index`, checks its container (magic,
 * version, length, CRC-32C), parses and validates it, and checks that every data file exists
 * with its recorded size. Errors: CKPT_ENOTFOUND (no index), CKPT_ECORRUPT (malformed,
 * truncated, inconsistent, or a data file missing/short), CKPT_EVERSION (future format).
 */
CKPT_EXTERN int ckpt_reader_open(ckpt_reader **out, const char *prefix);

/**
 * Like ckpt_reader_open() but checks only the index (container, parse, validation), not the data
 * files: for looking at a damaged checkpoint (`mpickpt inspect`). Reads still check every piece.
 */
CKPT_EXTERN int ckpt_reader_open_index(ckpt_reader **out, const char *prefix);

/** The index header. Valid while the reader lives. */
CKPT_EXTERN const ckpt_header *ckpt_reader_header(const ckpt_reader *r);

/** Number of tensors (sorted by name). */
CKPT_EXTERN size_t ckpt_reader_num_tensors(const ckpt_reader *r);

/** Tensor @p i (0-based, sorted by name). CKPT_EINVAL when out of range. */
CKPT_EXTERN int ckpt_reader_tensor(ckpt_tensor_info *out, const ckpt_reader *r, size_t i);

/** Looks up a tensor by name; CKPT_ENOTFOUND when absent. */
CKPT_EXTERN int ckpt_reader_find(size_t *index, const ckpt_reader *r, const char *name);

/** Piece @p j of tensor @p i, in the order the writer(s) added them (not sorted by start); the
 * dataset_slice has the same counts as the slice. CKPT_EINVAL when out of range. */
CKPT_EXTERN int ckpt_reader_piece(ckpt_piece_info *out, const ckpt_reader *r, size_t i, size_t j);

/**
 * Whether piece @p j of tensor @p i is packed (format 2): its bytes are then bytes
 * [*pack_offset, *pack_offset + bytes) of its dataset, a one-dimensional uint8 dataset shared by
 * many small pieces (kept out of ckpt_piece_info so that its layout stays that of format 1).
 */
CKPT_EXTERN int ckpt_reader_piece_packing(int *packed, uint64_t *pack_offset,
                                          const ckpt_reader *r, size_t i, size_t j);

/**
 * Reads @p slice (NULL: all) of tensor @p name into @p out (dense, row-major, @p out_size bytes),
 * assembled from every stored piece that overlaps it. Each overlapping piece is read whole and
 * checked against its CRC-32C before any of its bytes are used.
 * Errors: CKPT_ENOTFOUND (no such tensor), CKPT_EMISMATCH (dtype differs), CKPT_EINVAL (slice
 * outside the shape or out_size wrong), CKPT_ECORRUPT (checksum or HDF5 failure, or a dataset
 * not stored the way the format writes it, e.g. external storage or a link to another file, which
 * is refused before any of its bytes are read; names the tensor, piece and file).
 */
CKPT_EXTERN int ckpt_reader_read(ckpt_reader *r, const char *name, ckpt_dtype dtype,
                                 const ckpt_slice *slice, void *out, size_t out_size);

/** Called by ckpt_reader_verify() for each bad piece; return non-zero to stop. */
typedef int (*ckpt_verify_cb)(const char *tensor, size_t piece, const char *file, int code,
                              const char *message, void *payload);

/**
 * Re-reads every piece of every tensor and checks its size and CRC-32C. Returns CKPT_OK when all
 * are good, else CKPT_ECORRUPT (after reporting each bad piece through @p cb, which may be NULL).
 */
CKPT_EXTERN int ckpt_reader_verify(ckpt_reader *r, ckpt_verify_cb cb, void *payload);

/**
 * Checks every piece of every tensor without reading its values: its data file opens, and its
 * dataset is stored the way the format writes it (see docs/format.md: contiguous, unfiltered,
 * in the data file itself, reached through hard links only) with the dtype and an extent that
 * holds the piece. Reads HDF5 metadata only, so it costs about one dataset open per piece, not a
 * pass over the data; ckpt_reader_read() and ckpt_reader_verify() make the same checks before
 * reading. Returns CKPT_OK when all are good, else CKPT_ECORRUPT (after reporting each bad piece
 * through @p cb, which may be NULL; return non-zero from it to stop).
 */
CKPT_EXTERN int ckpt_reader_check(ckpt_reader *r, ckpt_verify_cb cb, void *payload);

/** Closes the reader. NULL is a no-op. */
CKPT_EXTERN void ckpt_reader_free(ckpt_reader *r);

#ifdef __cplusplus
}
#endif
#endif
