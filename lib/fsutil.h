/* Internal file-system helpers (docs/design.md §10, docs/security.md).
 *
 * A checkpoint directory is shared with others: every entry below the directory the caller named
 * is reached relative to an open directory descriptor without following symbolic links, files are
 * checked to be regular files (opened with O_NONBLOCK, so a FIFO never blocks), new files are
 * created with O_EXCL (temp files under unpredictable names), and trees are removed by descriptor.
 * Durable writes: temp file, fsync, rename, fsync of the directory. errno is mapped to CKPT_ codes
 * in one place (ckpt__errno). Functions taking a `shown` path use it in messages only. */
#ifndef MPICKPT_FSUTIL_H
#define MPICKPT_FSUTIL_H

#include "internal.h"

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>

/* Maps errno to a status (ENOSPC/EDQUOT -> CKPT_ENOSPC, ENOENT -> CKPT_ENOTFOUND, ENOMEM ->
 * CKPT_ENOMEM, EEXIST -> CKPT_EEXISTS, ELOOP (a symbolic link met with O_NOFOLLOW) ->
 * CKPT_ECORRUPT, else CKPT_EIO) and records "<what> <path>: <cause>". */
int ckpt__errno(int err, const char *what, const char *path);

/* All `len` bytes at offset `off` of fd, retried on EINTR and short transfers; an error names
 * `what` and `shown` (ckpt__errno). A file that ends early is CKPT_EIO (read); a write that
 * makes no progress is CKPT_ENOSPC. */
int ckpt__pread_full(int fd, void *buf, size_t len, uint64_t off, const char *what,
                     const char *shown);
int ckpt__pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *what,
                      const char *shown);

/* snprintf that fails with CKPT_EINVAL instead of truncating a path. */
int ckpt__path(char *out, size_t size, const char *fmt, ...) CKPT_PRINTF(3, 4);

/* Splits `path` into its directory ("." when none) and its last component, in caller buffers. */
int ckpt__split_path(char *dir, size_t dsize, char *base, size_t bsize, const char *path);

/* 1 when `name` is a plain file name (no '/', not "." or "..", 1..255 bytes). */
int ckpt__safe_filename(const char *name);

/* "a symbolic link", "a FIFO", ... for an st_mode, in messages. */
const char *ckpt__file_kind(unsigned mode);

/* close(2) unless fd < 0. */
void ckpt__close(int fd);

/* ---- directories ---- */

/* Opens a directory the caller named (its path is trusted: symlinks in it are the caller's). */
int ckpt__dir_open(int *fd, const char *path);

/* Opens entry `name` of dirfd as a directory without following a link (mkdirat first when
 * `create`). Anything but a real directory is CKPT_ECORRUPT ("refusing to use <shown>/<name>: it
 * is a symbolic link ..."); with `create`, so is a directory owned by another user. */
int ckpt__subdir_open(int *fd, int dirfd, const char *name, int create, const char *shown);

/*
 * Opens checkpoint directory `path`. When its last component is "chief" (the training-state
 * layout, `<work>/chief` next to `<work>/workertemp_<r>`), <work> is the trusted path and chief/ is
 * opened below it with ckpt__subdir_open() (so a planted chief symlink is refused); otherwise
 * `path` itself is the trusted path and its own work directory. *workfd (may be NULL) receives the
 * work directory. `create` makes missing directories. Close both with ckpt__close().
 */
int ckpt__ckptdir_open(int *dirfd, int *workfd, const char *path, int create);

/* Makes entry `name` of dirfd as a new directory (mkdirat must create it: any existing entry is
 * CKPT_EEXISTS, ckpt__name_taken) and opens it without following a link; `shown` is its path, for
 * messages. For names unique to one save: what stands under such a name is not ours. */
int ckpt__subdir_create(int *fd, int dirfd, const char *name, const char *shown);

/* mkdir -p of a path the caller named (trusted). */
int ckpt__mkdir_p(const char *path, unsigned mode);

/* rm -rf of entry `name` of dirfd, walked by descriptor: links and files are unlinked (never
 * followed), directories emptied then removed, at most 16 levels deep. A missing entry is fine. */
int ckpt__rmtree_at(int dirfd, const char *name, const char *shown);

/* ---- files ---- */

/* CKPT_OK with *size (may be NULL) when entry `name` of dirfd is a regular file; CKPT_ENOTFOUND
 * when missing; CKPT_ECORRUPT naming its kind otherwise. Follows nothing, opens nothing. */
int ckpt__stat_regular(uint64_t *size, int dirfd, const char *name, const char *shown);

/* 1 when dirfd has an entry `name` of any kind (not followed). */
int ckpt__exists_at(int dirfd, const char *name);

/* Opens an existing regular file with `flags` (O_RDONLY or O_RDWR) | O_NOFOLLOW | O_NONBLOCK and
 * checks it with fstat (O_NONBLOCK is cleared afterwards). *size may be NULL. Errors as
 * ckpt__stat_regular(). */
int ckpt__file_open(int *fd, uint64_t *size, int dirfd, const char *name, int flags,
                    const char *shown);

/* Opens regular file `name` for appending, creating it when missing (O_NOFOLLOW, O_NONBLOCK,
 * checked with fstat). */
int ckpt__file_open_append(int *fd, int dirfd, const char *name, const char *shown);

/* Creates a new file: `flags` (O_WRONLY or O_RDWR) | O_CREAT | O_EXCL | O_NOFOLLOW, mode 0644.
 * An existing entry of any kind is CKPT_EEXISTS. */
int ckpt__file_create(int *fd, int dirfd, const char *name, int flags, const char *shown);

/* fsync of an open file or directory (EINVAL, "no fsync for directories here", is success). */
int ckpt__fsync_fd(int fd, const char *shown);

/* A path by which a library that opens files by name (HDF5, MPI-IO) reaches exactly the open file
 * `fd`: "/proc/self/fd/<fd>" where /proc shows it, else `fallback` (then only the checks made
 * before hold). */
int ckpt__fd_path(char *out, size_t size, int fd, const char *fallback);

/* "<name>.tmp-<16 hex digits>", the digits random. */
int ckpt__temp_name(char *out, size_t size, const char *name);

/* 1 when `name` is a temp name of ckpt__temp_name() (or of older mpickpt versions: ".tmp-<pid>")
 * whose stem ends with `stem_suffix` (".index") or, for a suffix without a leading '.', equals it
 * ("checkpoint"). */
int ckpt__is_temp_name(const char *name, const char *stem_suffix);

/* Writes `len` bytes to entry `name` of dirfd durably: a new temp file (ckpt__temp_name, O_EXCL)
 * is written, fsynced and renamed over `name`, then the directory is fsynced. Readers see the old
 * file or the new one, never a mix; a link planted under either name is replaced, not followed.
 * *renamed (when not NULL) says whether the rename happened: an error after it (the directory's
 * fsync) leaves the new file in place. */
int ckpt__write_file_atomic_at(int dirfd, const char *name, const void *data, size_t len,
                               const char *shown, int *renamed);

/* The same, except that the rename never replaces anything: when `name` exists (of any kind),
 * CKPT_EEXISTS naming it (ckpt__name_taken), the entry untouched and the temp file removed. A
 * commit point that must not take a name it did not create (lib/commit.c). */
int ckpt__write_file_new_at(int dirfd, const char *name, const void *data, size_t len,
                            const char *shown, int *renamed);

/* renameat that never replaces: renameat2(RENAME_NOREPLACE), or, where the file system refuses
 * the flag (EINVAL, ENOSYS, EOPNOTSUPP: NFS), linkat then unlinkat of the old name. 0, or -1 with
 * errno (EEXIST: `to` is taken by an entry of any kind, which is neither followed nor touched).
 * ckpt__noreplace_force_link(1) takes the fallback always (tests). */
int ckpt__rename_noreplace(int fromfd, const char *from, int tofd, const char *to);
void ckpt__noreplace_force_link(int on);

/* CKPT_EEXISTS: entry `name` of dirfd (`shown` its path) stands where a save wanted to put its
 * own, with what it is; the message says it was left alone. */
int ckpt__name_taken(int dirfd, const char *name, const char *shown);

/* 64 random bits (getrandom, else a mix of clock, pid and a counter). */
uint64_t ckpt__random_u64(void);

/* Reads a whole regular file of at most `max` bytes into a malloc'd buffer (freed by the caller).
 * CKPT_ENOTFOUND when missing, CKPT_ECORRUPT when larger than `max` or not a regular file. */
int ckpt__read_file_at(uint8_t **out, size_t *len, int dirfd, const char *name, size_t max,
                       const char *shown);

/*
 * Room for HDF5's metadata. HDF5 1.10 cannot recover from a failed metadata flush: the file can
 * then neither be closed nor left open (it crashes in H5Fclose or at exit, and with MPI-IO ranks
 * can be left waiting). A pad of real blocks (fallocate, else zeros written) is made in the temp
 * directory before HDF5 writes into a file, and released just before that file is flushed and
 * closed, so that the flush has the pad's room even when the disk filled up meanwhile.
 * CKPT_ENOSPC when the pad itself does not fit (nothing was written to HDF5 yet).
 */
int ckpt__pad_create(int *fd, int dirfd, const char *name, uint64_t bytes, const char *shown);
void ckpt__pad_release(int dirfd, const char *name, int fd); /* fd < 0: no-op */
/* Grows a pad to at least `bytes`, in steps of 64 KiB (a writer that learns its metadata as it
 * goes); a pad already that large is left as it is. */
int ckpt__pad_grow(int fd, uint64_t bytes, const char *shown);

/* ---- the same by path: the directory part is opened with ckpt__ckptdir_open() rules, the last
 * component is handled by descriptor as above ---- */
int ckpt__write_file_atomic(const char *path, const void *data, size_t len);
int ckpt__read_file(uint8_t **out, size_t *len, const char *path, size_t max);
int ckpt__rmtree(const char *path); /* a missing path or parent is fine */
int ckpt__fsync_parent(const char *path);

/* Reads `len` bytes at `off` of `fd` into `buf` and extends the CRC-32C in *crc over them (start
 * it at 0), checksumming each chunk right after reading it (one pass over memory).
 * CKPT_ECORRUPT when the file ends first. */
int ckpt__pread_crc(int fd, uint64_t off, void *buf, size_t len, uint32_t *crc);

/* Listings and file kinds, for scans of a checkpoint directory (lib/state.c, lib/gc.c):
 * ckpt__listing() lists directory fd from its first entry (a duplicate descriptor: fd stays open;
 * NULL with errno set on failure); ckpt__listing_or_close() the same, or an error naming `dir`
 * with fd closed; ckpt__has_magic() is 1 when regular file `name` of dirfd starts with `magic`;
 * ckpt__is_data_file() is 1 for an HDF5 file or an empty one (a writer died before HDF5 wrote its
 * superblock). */
DIR *ckpt__listing(int fd);
int ckpt__listing_or_close(DIR **d, int fd, const char *dir);
int ckpt__has_magic(int dirfd, const char *name, const char *magic, size_t len);
int ckpt__is_data_file(int dirfd, const char *name);

#endif
