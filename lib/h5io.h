/* Internal HDF5 helpers shared by the single-process writer/reader and the MPI saver.
 * Every HDF5 call of the library goes through these or follows the same rules: HDF5's automatic
 * error printing is off, failures are turned into CKPT_ status codes with HDF5's innermost message
 * appended, and every hid_t is closed on one cleanup path. */
#ifndef MPICKPT_H5IO_H
#define MPICKPT_H5IO_H

#include "internal.h"
#include "mpickpt/checkpoint.h"

#include <hdf5.h>

/* Group under which every dataset lives. */
#define CKPT__H5_GROUP "/tensors"

/* This HDF5 build is not thread-safe: every sequence of HDF5 calls runs under this one recursive
 * lock, so an async writer thread and the application's thread never call HDF5 at once. */
void ckpt__h5_lock(void);
void ckpt__h5_unlock(void);

/* Turns off HDF5's error printing for this process (idempotent, thread-safe enough: HDF5 calls are
 * serialized by the caller). Called by every entry point before its first HDF5 call. */
void ckpt__h5_init(void);

/* Records `code` with the formatted context plus HDF5's innermost error message; returns code. */
int ckpt__h5_error(int code, const char *fmt, ...) CKPT_PRINTF(2, 3);

/* A scalar UTF-8 variable-length string attribute `key` = `value` on obj (a dataset or group). */
int ckpt__h5_write_str_attr(hid_t obj, const char *key, const char *value);

/*
 * Maps a tensor name (any non-empty UTF-8 string) to a dataset path "/tensors/<escaped>[#<start>]":
 * bytes outside [A-Za-z0-9_.-] are written %XX (so '/' cannot create groups or escape the group),
 * and a leading '.' is escaped. A non-NULL `part` appends "#s0_s1_..." (its start coordinates), so
 * several pieces of one tensor can share a file. CKPT_EINVAL when the name is empty, longer than
 * 4096 bytes, or the path does not fit.
 */
int ckpt__h5_dataset_path(char *out, size_t size, const char *name, const ckpt_slice *part);

/* File and memory HDF5 types of a dtype (little-endian file types; the caller closes neither:
 * they are library-owned, created once). Returns H5I_INVALID_HID for an invalid dtype. */
hid_t ckpt__h5_file_type(ckpt_dtype dtype);
hid_t ckpt__h5_mem_type(ckpt_dtype dtype);

/* Creates a contiguous dataset of `dims` (a scalar when ndims == 0) at `path` in `file`, with string
 * attributes mpickpt.name, mpickpt.dtype and mpickpt.slice (the TF slice spec of what the dataset
 * holds in the global tensor). Collective when `file` was opened with the MPI-IO driver. */
int ckpt__h5_create_dataset(hid_t *out, hid_t file, const char *path, const char *name,
                            ckpt_dtype dtype, const ckpt_shape *global, const ckpt_slice *held);

/* The same, with the extent allocated in the file at creation (H5D_ALLOC_TIME_EARLY) and never
 * filled (H5D_FILL_TIME_NEVER): H5Dget_offset() then gives where its bytes go, and whoever writes
 * them there (pwrite, lib/nodefile.c) is the only writer. A dataset of no element has no extent. */
int ckpt__h5_create_dataset_early(hid_t *out, hid_t file, const char *path, const char *name,
                                  ckpt_dtype dtype, const ckpt_shape *global,
                                  const ckpt_slice *held);

/* Writes `buf` (dense, row-major) into the box `sel` of dataset `dset` (whose extent is `dims`).
 * `sel` may hold zero elements (an empty selection, for ranks that join a collective with nothing
 * to write); `dxpl` may be H5P_DEFAULT. */
int ckpt__h5_write(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel, const void *buf, hid_t dxpl);

/*
 * Opens dataset `path` (absolute, e.g. "/tensors/w" or "/packs/rank-3") of `file`, a data file
 * named `fname` in messages, accepting only what the format writes: every link on the path (the
 * group's and the dataset's) a hard link, the object a dataset, and its creation properties a
 * contiguous layout with no external storage and no filter. Anything else (soft, external or
 * user-defined links, a group, virtual, chunked or compact datasets, external storage, filters)
 * is CKPT_ECORRUPT naming the file, the path and what was found, before HDF5 is asked anything
 * that could open another file (links are looked at with H5Lget_info, which does not follow the
 * last one; the layout is checked before any H5Dget_space). A dataset that passes keeps its raw
 * data in `file` itself: H5Dread and pread at H5Dget_offset can read nothing else.
 * On success *out is the open dataset (the caller closes it).
 */
int ckpt__h5_open_dataset(hid_t *out, hid_t file, const char *path, const char *fname);

/* Reads the box `sel` of `dset` into `buf`. Checks first that the dataset's rank and HDF5 type are
 * what the index says and that the box lies inside its extent (CKPT_ECORRUPT otherwise). */
int ckpt__h5_read(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel, void *buf, hid_t dxpl);

/* Checks that `dset` has the rank and HDF5 type of `dtype` and that the box `sel` lies inside
 * its extent (CKPT_ECORRUPT otherwise), as ckpt__h5_read() does before reading. */
int ckpt__h5_check(hid_t dset, ckpt_dtype dtype, const ckpt_slice *sel);

/* Checks that the box `sel` fits a dataset of rank `nd` and extent `dims` (CKPT_ECORRUPT, naming
 * the dimension, otherwise). Part of ckpt__h5_check(). */
int ckpt__h5_check_box(int nd, const hsize_t *dims, const ckpt_slice *sel);

/* When the raw data of `dset` is one contiguous extent of `file` that pread(2) can reach (contiguous
 * layout, storage allocated, no external storage, the sec2 driver, no user block), sets *fd (owned
 * by HDF5: valid while `file` is open), *addr (its first byte's file offset) and *size (bytes
 * allocated) and returns 1; else returns 0 and the caller goes through H5Dread. */
/* Where a contiguous dataset's bytes start in a file written with the default (sec2, no user
 * block) driver: the writers record it per piece (Piece.file_offset). 0 when not known (not
 * contiguous, external storage, not allocated). */
uint64_t ckpt__h5_offset(hid_t dset);
int ckpt__h5_raw_address(hid_t file, hid_t dset, int *fd, uint64_t *addr, uint64_t *size);

/* For a file opened with the sec2 driver that is being abandoned (a write failed): points HDF5's
 * descriptor at an anonymous memory file, so that H5Fclose() flushes there and cannot fail on a
 * full disk (after a failed metadata flush HDF5 1.10 can neither close the file nor exit cleanly).
 * The file on disk keeps whatever was written before. Returns 1 when done, 0 when not possible. */
int ckpt__h5_detach_file(hid_t file);

/* After an H5Fclose() of a sec2 file that failed (a metadata flush on a full disk with no pad,
 * MPICKPT_RESERVE=0): HDF5 1.10 keeps such a file open and crashes closing it at exit (in
 * H5F__close_cb at MPI_Finalize). Its descriptor is moved off the disk (ckpt__h5_detach_file) and
 * the close made again; HDF5's error stack is cleared. Call it after the error was reported. */
void ckpt__h5_abandon(hid_t file);

/* The close of a sec2 file this rank wrote, whose save is `rc` so far: after a failure HDF5's
 * descriptor is moved off the disk first (ckpt__h5_detach_file), so that the close can neither
 * fail nor leave HDF5 unable to exit; a close that fails after a success is CKPT_ENOSPC (full
 * disk) or CKPT_EIO naming rank `rank` and `name`, and the file is abandoned (ckpt__h5_abandon).
 * Returns the save's status. */
int ckpt__h5_close_written(int rc, hid_t file, int rank, const char *name);

#endif
