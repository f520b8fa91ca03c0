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

int ckpt__errno(int err, const char *what, const char *path)
{
    int code;
    switch (err) {
    case ENOSPC:
    case EDQUOT: code = CKPT_ENOSPC; break;
    case ENOENT: code = CKPT_ENOTFOUND; break;
    case ENOMEM: code = CKPT_ENOMEM; break;
    case EEXIST: code = CKPT_EEXISTS; break;
    default: code = CKPT_EIO; break;
    }
    return ckpt__error(code, "%s %s: %s", what, path, strerror(err));
}

int ckpt__path(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size)
        return ckpt__error(CKPT_EINVAL, "path too long (%d bytes, limit %zu)", n, size - 1);
    return CKPT_OK;
}

int ckpt__fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt__errno(errno, "open for fsync", path);
    int rc = CKPT_OK;
    if (fsync(fd) != 0 && errno != EINVAL) /* EINVAL: the file system has no fsync for dirs */
        rc = ckpt__errno(errno, "fsync", path);
    close(fd);
    return rc;
}

int ckpt__split_path(char *dir, size_t dsize, char *base, size_t bsize, const char *path)
{
    const char *slash = strrchr(path, '/');
    int rc;
    if (!slash) {
        if ((rc = ckpt__path(dir, dsize, ".")) != CKPT_OK)
            return rc;
        return ckpt__path(base, bsize, "%s", path);
    }
    size_t n = (size_t)(slash - path);
    if ((rc = ckpt__path(dir, dsize, "%.*s", (int)(n ? n : 1), n ? path : "/")) != CKPT_OK)
        return rc;
    return ckpt__path(base, bsize, "%s", slash + 1);
}

int ckpt__fsync_parent(const char *path)
{
    char dir[4096], base[4096];
    int rc = ckpt__split_path(dir, sizeof dir, base, sizeof base, path);
    return rc ? rc : ckpt__fsync_path(dir);
}

int ckpt__write_file_atomic(const char *path, const void *data, size_t len)
{
    char tmp[4200];
    int rc = ckpt__path(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    if (rc != CKPT_OK)
        return rc;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ckpt__errno(errno, "create", tmp);
    const uint8_t *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = ckpt__errno(n < 0 ? errno : EIO, "write", tmp);
            goto fail;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0) {
        rc = ckpt__errno(errno, "fsync", tmp);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = ckpt__errno(errno, "close", tmp);
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = ckpt__errno(errno, "rename to", path);
        goto fail;
    }
    return ckpt__fsync_parent(path);
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return rc;
}

int ckpt__read_file(uint8_t **out, size_t *len, const char *path, size_t max)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ckpt__errno(errno, "open", path);
    struct stat st;
    int rc = CKPT_OK;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = ckpt__errno(errno, "stat", path);
        goto done;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > (uint64_t)max) {
        rc = ckpt__error(CKPT_ECORRUPT, "%s: not a regular file of at most %zu bytes", path, max);
        goto done;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size ? size : 1);
    if (!buf) {
        rc = ckpt__error(CKPT_ENOMEM, "%s: cannot allocate %zu bytes", path, size);
        goto done;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ckpt__errno(errno, "read", path);
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

int ckpt__mkdir_p(const char *path, unsigned mode)
{
    char buf[4096];
    int rc = ckpt__path(buf, sizeof buf, "%s", path);
    if (rc != CKPT_OK)
        return rc;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return ckpt__errno(errno, "mkdir", buf);
        *p = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST)
        return ckpt__errno(errno, "mkdir", buf);
    return CKPT_OK;
}

int ckpt__rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? CKPT_OK : ckpt__errno(errno, "stat", path);
    if (!S_ISDIR(st.st_mode))
        return (unlink(path) == 0 || errno == ENOENT) ? CKPT_OK : ckpt__errno(errno, "unlink", path);
    DIR *d = opendir(path);
    if (!d) /* removed by someone else meanwhile is as good as removed */
        return errno == ENOENT ? CKPT_OK : ckpt__errno(errno, "opendir", path);
    int rc = CKPT_OK;
    struct dirent *e;
    char child[4096];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int r = ckpt__path(child, sizeof child, "%s/%s", path, e->d_name);
        if (r == CKPT_OK)
            r = ckpt__rmtree(child);
        if (r != CKPT_OK && rc == CKPT_OK)
            rc = r;
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT && rc == CKPT_OK)
        rc = ckpt__errno(errno, "rmdir", path);
    return rc;
}

int ckpt__file_size(uint64_t *out, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ckpt__errno(errno, "stat", path);
    *out = (uint64_t)st.st_size;
    return CKPT_OK;
}

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
