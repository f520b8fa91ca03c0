/* Internal file-system helpers: durable writes (temp, fsync, rename, fsync dir) and clean-up.
 * errno is mapped to CKPT_ codes in one place (ckpt__errno). */
#ifndef MPICKPT_FSUTIL_H
#define MPICKPT_FSUTIL_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(default)

/* Maps errno to a status (ENOSPC/EDQUOT -> CKPT_ENOSPC, ENOENT -> CKPT_ENOTFOUND, ENOMEM ->
 * CKPT_ENOMEM, EEXIST -> CKPT_EEXISTS, else CKPT_EIO) and records "<what> <path>: strerror". */
int ckpt__errno(int err, const char *what, const char *path);

/* fsync of a file or directory by path. */
int ckpt__fsync_path(const char *path);

/* fsync of the directory that contains `path`. */
int ckpt__fsync_parent(const char *path);

/* Writes `len` bytes to `path` durably: "<path>.tmp-<pid>" is written, fsynced and renamed over
 * `path`, then the directory is fsynced. Readers see the old file or the new one, never a mix. */
int ckpt__write_file_atomic(const char *path, const void *data, size_t len);

/* Reads a whole file of at most `max` bytes into a malloc'd buffer (freed by the caller).
 * CKPT_ENOTFOUND when it does not exist, CKPT_ECORRUPT when larger than `max`. */
int ckpt__read_file(uint8_t **out, size_t *len, const char *path, size_t max);

/* Reads `len` bytes at `off` of `fd` into `buf` and extends the CRC-32C in *crc over them (start
 * it at 0), checksumming each chunk right after reading it (one pass over memory).
 * CKPT_ECORRUPT when the file ends first. */
int ckpt__pread_crc(int fd, uint64_t off, void *buf, size_t len, uint32_t *crc);

/* mkdir -p. */
int ckpt__mkdir_p(const char *path, unsigned mode);

/* rm -rf that does not follow symbolic links; a missing path is fine. */
int ckpt__rmtree(const char *path);

/* Size of a regular file; CKPT_ENOTFOUND when missing. */
int ckpt__file_size(uint64_t *out, const char *path);

/* Splits `path` into its directory ("." when none) and its last component, in caller buffers. */
int ckpt__split_path(char *dir, size_t dsize, char *base, size_t bsize, const char *path);

/* snprintf that fails with CKPT_EINVAL instead of truncating a path. */
int ckpt__path(char *out, size_t size, const char *fmt, ...) CKPT_PRINTF(3, 4);

#pragma GCC visibility pop

#endif
