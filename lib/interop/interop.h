/* Internal seams of import and export (include/mpickpt/interop.h, docs/interop.md).
 *
 * lib/interop/export.c: ckpt_export() opens the reader and calls the format's writer below;
 * lib/interop/export_tf.c, lib/export_hdf5.c, lib/interop/export_safetensors.c: one format each;
 * lib/interop/import_tf.c: ckpt_import_tf(); lib/interop/tfbundle.c + lib/interop/sstable.c:
 * TensorFlow's bundle and its SSTable index. */
#ifndef MPICKPT_INTEROP_INTERNAL_H
#define MPICKPT_INTEROP_INTERNAL_H

#include "internal.h"
#include "json.h"

#include "mpickpt/checkpoint.h"
#include "mpickpt/interop.h"

#include <stdint.h>

/* An output file written whole or not at all: a temp file (ckpt__temp_name, O_EXCL, no link
 * followed) next to the target, fsynced, renamed over it, the directory fsynced. */
typedef struct ckpt__outfile {
    int dirfd;
    int fd;
    int renamed;     /* 1 after commit: the target is ours now */
    char dir[4096];  /* the target's directory */
    char base[256];  /* the target's name */
    char tmp[300];   /* the temp file's name */
    char shown[4096 + 256];
} ckpt__outfile;

/* Starts writing `path`. CKPT_EEXISTS when it exists and !overwrite; an existing entry that is not
 * a regular file is refused (CKPT_ECORRUPT) even with overwrite. */
int ckpt__outfile_open(ckpt__outfile *o, const char *path, int overwrite);
/* fsync, close, rename into place, fsync the directory. */
int ckpt__outfile_commit(ckpt__outfile *o);
/* Removes the temp file (or, after commit, the target we wrote) and closes; safe on a zeroed or
 * failed outfile, and twice. */
void ckpt__outfile_discard(ckpt__outfile *o);
/* Closes what is open, keeping a committed file. */
void ckpt__outfile_close(ckpt__outfile *o);

/* What ckpt_export() writes: the selected tensors (opts->only; all without it) in the reader's
 * order (by name; stripping a prefix common to all keeps that order), their written names, and the
 * aliases among them (lib/interop/export.c). */
typedef struct ckpt__export_sel {
    size_t n;
    size_t *index;      /* the reader's index of each written tensor */
    char **name;        /* its written name (opts->strip_prefix removed) */
    char *aliases_json; /* {"alias":"target",...} of written names, or NULL when none */
    size_t num_aliases;
} ckpt__export_sel;

/* Every selected tensor of `r` is read whole with ckpt_reader_read() (each piece's checksum
 * checked), so a format's memory peak is its largest tensor. Each writer reports every tensor
 * through opts->progress and fills totals (never NULL here). */
int ckpt__export_tf(ckpt_reader *r, const ckpt__export_sel *sel, const char *out,
                    const ckpt_export_options *opts, ckpt_interop_totals *totals);
/* `prefix` (the source, as the caller named it) goes into the HDF5 file's `source` attribute. */
int ckpt__export_hdf5(ckpt_reader *r, const ckpt__export_sel *sel, const char *prefix,
                      const char *out, const ckpt_export_options *opts,
                      ckpt_interop_totals *totals);
int ckpt__export_safetensors(ckpt_reader *r, const ckpt__export_sel *sel, const char *out,
                             const ckpt_export_options *opts, ckpt_interop_totals *totals);

/* Describes selected tensor k: *info as ckpt_reader_tensor() gives it, its name the written one. */
int ckpt__export_tensor(ckpt_reader *r, const ckpt__export_sel *sel, size_t k,
                        ckpt_tensor_info *info);
/* Reads selected tensor k whole into a malloc'd buffer (*data, *bytes; a 0-byte tensor gives a
 * non-NULL 1-byte buffer) and describes it in *info (the written name). */
int ckpt__export_read(ckpt_reader *r, const ckpt__export_sel *sel, size_t k,
                      ckpt_tensor_info *info, void **data, size_t *bytes);
/* Reports one written tensor through opts->progress and adds it to totals. */
void ckpt__export_report(const ckpt_export_options *opts, ckpt_interop_totals *totals,
                         const ckpt_tensor_info *info, uint64_t bytes);

/* The Python package's record of plain values (lib/interop/export_record.c): one JSON document per
 * rank in the blob tensor `__mpickpt__/json/rank_<r>`, versions 1 and 2 (/docs/python.md). */
typedef struct ckpt__record {
    int rank;
    int version;              /* "mpickpt_json" */
    char name[64];            /* the tensor */
    ckpt__json_doc *doc;
    const ckpt__jv *replicated; /* objects NAME -> value, or NULL when absent */
    const ckpt__jv *per_rank;
    const ckpt__jv *aliases;  /* version 2: NAME -> {"of": TARGET, ...} (each "of" a string) */
} ckpt__record;

typedef struct ckpt__records {
    size_t n;
    ckpt__record *r; /* by rank */
} ckpt__records;

/* Reads and parses every record of r (none: n = 0). A record that is not a 1-d uint8 tensor, not
 * JSON (lib/json.h's reader: depth, UTF-8, trailing bytes), not an object with an integer
 * "mpickpt_json", or whose "replicated", "per_rank" or "aliases" is not an object, is
 * CKPT_ECORRUPT naming the checkpoint (`shown`) and the record; a version above 2 CKPT_EVERSION. */
int ckpt__records_load(ckpt__records *out, ckpt_reader *r, const char *shown);
void ckpt__records_free(ckpt__records *recs);
/* 1 for the names mpickpt keeps for itself ("__mpickpt__/..."): the records and other blobs. */
int ckpt__is_internal_name(const char *name);
/* The bundle prefix ckpt_import_tf() reads for the operand `tf_prefix`: a directory's TensorFlow
 * `checkpoint` file resolved (its model_checkpoint_path, last component, in that directory),
 * anything else as given. `mpickpt import-tf` reports it as "bundle". */
int ckpt__tf_resolve_prefix(char *out, size_t size, const char *tf_prefix);

#endif
