/*
 * File-system helpers, second half (lib/fsutil.h; the first half, lib/fsutil.c, opens directories
 * and files and names temp files): whole-file transfers by descriptor (pread/pwrite of all bytes,
 * durable writes: temp file, fsync, rename, fsync of the directory; bounded whole-file reads),
 * removal of trees walked by descriptor, the pad of room for HDF5's metadata, the same by path,
 * and reads checked with CRC-32C. The rules of lib/fsutil.c hold here too: nothing below the
 * directory the caller names is followed as a link, and files are checked to be regular.
 */
#include "fsutil.h"

#include "mpickpt/crc32c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How deep ckpt__rmtree_at() descends: mpickpt makes trees two levels deep; a deeper tree was made
 * by someone else and is left alone rather than exhausting descriptors. */
#define RMTREE_MAX_DEPTH 16

/* ---- whole transfers and durable writes ------------------------------------------------------ */

/* ckpt__pread_full and ckpt__pwrite_full: `wbuf` set writes it, else reads into `rbuf`. */
static int transfer_full(int fd, void *rbuf, const void *wbuf, size_t len, uint64_t off,
                         const char *what, const char *shown)
{
    for (size_t done = 0; done < len;) {
        off_t at = (off_t)(off + done);
        ssize_t n = wbuf ? pwrite(fd, (const uint8_t *)wbuf + done, len - done, at)
                         : pread(fd, (uint8_t *)rbuf + done, len - done, at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ckpt__errno(n < 0 ? errno : wbuf ? ENOSPC : EIO, what, shown);
        done += (size_t)n;
    }
    return CKPT_OK;
}

int ckpt__pread_full(int fd, void *buf, size_t len, uint64_t off, const char *what,
                     const char *shown)
{
    return transfer_full(fd, buf, NULL, len, off, what, shown);
}

int ckpt__pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *what,
                      const char *shown)
{
    return transfer_full(fd, NULL, buf, len, off, what, shown);
}

static int write_all(int fd, const void *data, size_t len, const char *shown)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ckpt__errno(n < 0 ? errno : EIO, "write", shown);
        p += n;
        len -= (size_t)n;
    }
    return CKPT_OK;
}

/* ckpt__write_file_atomic_at and ckpt__write_file_new_at: the final rename replaces, or not. */
static int write_file_at(int dirfd, const char *name, const void *data, size_t len,
                         const char *shown, int *renamed, int replace)
{
    char tmp[512], where[4400];
    if (renamed)
        *renamed = 0;
    int rc = ckpt__temp_name(tmp, sizeof tmp, name);
    if (rc != CKPT_OK)
        return rc;
    snprintf(where, sizeof where, "%s/%s", shown, tmp);
    int fd;
    if ((rc = ckpt__file_create(&fd, dirfd, tmp, O_WRONLY, shown)) != CKPT_OK)
        return rc;
    if ((rc = write_all(fd, data, len, where)) != CKPT_OK)
        goto fail;
    if (fsync(fd) != 0) {
        rc = ckpt__errno(errno, "fsync", where);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = ckpt__errno(errno, "close", where);
        goto fail;
    }
    fd = -1;
    /* renameat replaces whatever entry `name` is (a planted link included) without following
     * it; without `replace`, a name taken by anything is CKPT_EEXISTS and stays as it is */
    if (replace ? renameat(dirfd, tmp, dirfd, name) != 0
                : ckpt__rename_noreplace(dirfd, tmp, dirfd, name) != 0) {
        int err = errno; /* before snprintf, which may change it */
        snprintf(where, sizeof where, "%s/%s", shown, name);
        rc = err == EEXIST ? ckpt__name_taken(dirfd, name, where)
                           : ckpt__errno(err, "rename to", where);
        goto fail;
    }
    if (renamed)
        *renamed = 1;
    return ckpt__fsync_fd(dirfd, shown);
fail:
    ckpt__close(fd);
    unlinkat(dirfd, tmp, 0);
    return rc;
}

int ckpt__write_file_atomic_at(int dirfd, const char *name, const void *data, size_t len,
                               const char *shown, int *renamed)
{
    return write_file_at(dirfd, name, data, len, shown, renamed, 1);
}

int ckpt__write_file_new_at(int dirfd, const char *name, const void *data, size_t len,
                            const char *shown, int *renamed)
{
    return write_file_at(dirfd, name, data, len, shown, renamed, 0);
}

int ckpt__name_taken(int dirfd, const char *name, const char *shown)
{
    struct stat st;
    const char *kind = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0
                           ? ckpt__file_kind(st.st_mode)
                           : "something";
    return ckpt__error(CKPT_EEXISTS,
                       "%s already exists (%s this save did not create: another job saving the "
                       "same checkpoint?); it was left as it is",
                       shown, kind);
}

int ckpt__read_file_at(uint8_t **out, size_t *len, int dirfd, const char *name, size_t max,
                       const char *shown)
{
    *out = NULL;
    *len = 0;
    int fd;
    uint64_t fsize;
    int rc = ckpt__file_open(&fd, &fsize, dirfd, name, O_RDONLY, shown);
    if (rc != CKPT_OK)
        return rc;
    uint8_t *buf = NULL;
    if (fsize > (uint64_t)max) {
        rc = ckpt__error(CKPT_ECORRUPT, "%s/%s: %llu bytes, more than the %zu mpickpt accepts",
                         shown, name, (unsigned long long)fsize, max);
        goto done;
    }
    size_t size = (size_t)fsize;
    buf = malloc(size ? size : 1);
    if (!buf) {
        rc = ckpt__error(CKPT_ENOMEM, "%s/%s: cannot allocate %zu bytes", shown, name, size);
        goto done;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ckpt__errno(errno, "read", name);
            goto done;
        }
        if (n == 0)
            break; /* shrank while reading: the caller's length check catches it */
        got += (size_t)n;
    }
    *out = buf;
    *len = got;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return rc;
}

static int rmtree_at(int dfd, const char *name, const char *shown, int depth)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? CKPT_OK : ckpt__error(CKPT_EIO, "stat %s/%s: %s", shown, name,
                                                       strerror(errno));
    if (!S_ISDIR(st.st_mode)) { /* a file, or a link: the entry goes, never its target */
        if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
            return ckpt__error(CKPT_EIO, "unlink %s/%s: %s", shown, name, strerror(errno));
        return CKPT_OK;
    }
    if (depth >= RMTREE_MAX_DEPTH)
        return ckpt__error(CKPT_EIO, "%s/%s: more than %d levels deep; not made by mpickpt, left "
                                     "alone",
                           shown, name, RMTREE_MAX_DEPTH);
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return CKPT_OK;
        if (errno == ELOOP || errno == ENOTDIR) /* swapped for a link or a file meanwhile */
            return rmtree_at(dfd, name, shown, depth + 1);
        return ckpt__error(CKPT_EIO, "open %s/%s: %s", shown, name, strerror(errno));
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return ckpt__error(CKPT_EIO, "opendir %s/%s: %s", shown, name, strerror(errno));
    }
    char sub[4400];
    snprintf(sub, sizeof sub, "%s/%s", shown, name);
    int rc = CKPT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int r = rmtree_at(dirfd(d), e->d_name, sub, depth + 1);
        if (r != CKPT_OK && rc == CKPT_OK)
            rc = r;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EIO, "rmdir %s/%s: %s", shown, name, strerror(errno));
    return rc;
}

int ckpt__rmtree_at(int dirfd, const char *name, const char *shown)
{
    return rmtree_at(dirfd, name, shown, 0);
}

/* ---- room for HDF5's metadata ------------------------------------------------------------------ */

#define PAD_STEP ((uint64_t)64 << 10)

int ckpt__pad_grow(int fd, uint64_t bytes, const char *shown)
{
    /* Real blocks: fallocate where the file system has it, else zeros written out. Only the
     * part past the file's size: the pad grows a little per dataset, and allocating from 0 each
     * time walks every extent already there (a writer of 10000 tensors spent 0.9 s in it); in
     * steps of 64 KiB, not one call per dataset. */
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ckpt__error(CKPT_EIO, "room for HDF5's metadata in %s: %s", shown,
                           strerror(errno));
    if ((uint64_t)st.st_size >= bytes)
        return CKPT_OK;
    if (bytes < UINT64_MAX - PAD_STEP)
        bytes = (bytes + PAD_STEP - 1) / PAD_STEP * PAD_STEP; /* fewer, larger allocations */
    int err = fallocate(fd, 0, st.st_size, (off_t)(bytes - (uint64_t)st.st_size)) == 0 ? 0
                                                                                        : errno;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
        static const char zeros[65536];
        err = 0;
        for (uint64_t off = (uint64_t)st.st_size; off < bytes && !err;) {
            size_t n = bytes - off < sizeof zeros ? (size_t)(bytes - off) : sizeof zeros;
            ssize_t w = pwrite(fd, zeros, n, (off_t)off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                err = w < 0 ? errno : EIO;
            else
                off += (uint64_t)w;
        }
    }
    if (err == ENOSPC || err == EDQUOT) {
        ckpt__error(CKPT_ENOSPC, "no space left on device for this checkpoint in %s (%llu bytes "
                                 "of room for HDF5's metadata)",
                    shown, (unsigned long long)bytes);
        return ckpt__error_set_errno(CKPT_ENOSPC, err);
    }
    if (err) {
        ckpt__error(CKPT_EIO, "room for HDF5's metadata in %s: %s", shown, strerror(err));
        return ckpt__error_set_errno(CKPT_EIO, err);
    }
    return CKPT_OK;
}

int ckpt__pad_create(int *fd, int dirfd, const char *name, uint64_t bytes, const char *shown)
{
    *fd = -1;
    int rc = ckpt__rmtree_at(dirfd, name, shown);
    if (rc == CKPT_OK)
        rc = ckpt__file_create(fd, dirfd, name, O_WRONLY, shown);
    if (rc == CKPT_OK && (rc = ckpt__pad_grow(*fd, bytes, shown)) != CKPT_OK) {
        ckpt__pad_release(dirfd, name, *fd);
        *fd = -1;
    }
    return rc;
}

void ckpt__pad_release(int dirfd, const char *name, int fd)
{
    if (fd < 0)
        return;
    unlinkat(dirfd, name, 0);
    close(fd); /* the blocks go back once both are done */
}

/* ---- by path: the directory part resolved by ckpt__ckptdir_open(), the rest by descriptor ---- */

/* The directory of a path (checkpoint-directory rules) and its last component. */
struct parent {
    int fd;
    char dir[4096], base[4096];
};

static int parent_open(struct parent *p, const char *path)
{
    int rc = ckpt__split_path(p->dir, sizeof p->dir, p->base, sizeof p->base, path);
    if (rc != CKPT_OK)
        return rc;
    if (!ckpt__safe_filename(p->base))
        return ckpt__error(CKPT_EINVAL, "'%s' does not end in a file name", path);
    return ckpt__ckptdir_open(&p->fd, NULL, p->dir, 0);
}

int ckpt__fsync_parent(const char *path)
{
    struct parent p;
    int rc = parent_open(&p, path);
    if (rc == CKPT_OK) {
        rc = ckpt__fsync_fd(p.fd, p.dir);
        close(p.fd);
    }
    return rc;
}

int ckpt__write_file_atomic(const char *path, const void *data, size_t len)
{
    struct parent p;
    int rc = parent_open(&p, path);
    if (rc == CKPT_OK) {
        rc = ckpt__write_file_atomic_at(p.fd, p.base, data, len, p.dir, NULL);
        close(p.fd);
    }
    return rc;
}

int ckpt__read_file(uint8_t **out, size_t *len, const char *path, size_t max)
{
    struct parent p;
    *out = NULL;
    *len = 0;
    int rc = parent_open(&p, path);
    if (rc == CKPT_OK) {
        rc = ckpt__read_file_at(out, len, p.fd, p.base, max, p.dir);
        close(p.fd);
    }
    return rc;
}

int ckpt__rmtree(const char *path)
{
    struct parent p;
    ckpt__saved_error keep = ckpt__error_save(); /* undo paths call this with their error */
    int rc = parent_open(&p, path);
    if (rc == CKPT_ENOTFOUND) { /* no parent: nothing to remove */
        ckpt__error_restore(&keep);
        return CKPT_OK;
    }
    if (rc == CKPT_OK) {
        rc = ckpt__rmtree_at(p.fd, p.base, p.dir);
        close(p.fd);
    }
    return rc;
}

/* ---- reading with checksums ------------------------------------------------------------------ */

int ckpt__pread_crc(int fd, uint64_t off, void *buf, size_t len, uint32_t *crc)
{
    /* 256 KiB: the chunk just read is still in the 2 MiB L2 cache when it is checksummed, so the
     * check runs at in-cache speed instead of making a second pass over memory. */
    const size_t chunk = (size_t)256 << 10;
    uint32_t c = *crc;
    size_t done = 0;
    while (done < len) {
        size_t want = len - done < chunk ? len - done : chunk;
        ssize_t n = pread(fd, (uint8_t *)buf + done, want, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ckpt__error(CKPT_EIO, "read of %zu bytes at offset %llu: %s", want,
                               (unsigned long long)(off + done), strerror(errno));
        if (n == 0)
            return ckpt__error(CKPT_ECORRUPT, "data file ends at offset %llu, %zu bytes short",
                               (unsigned long long)(off + done), len - done);
        c = ckpt_crc32c_extend(c, (uint8_t *)buf + done, (size_t)n);
        done += (size_t)n;
    }
    *crc = c;
    return CKPT_OK;
}
