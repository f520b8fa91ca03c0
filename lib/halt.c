/*
 * The halt request file (lib/halt.h): parsing, formatting, and its reads and writes inside a
 * checkpoint directory, every one through lib/fsutil.h (by descriptor, no link followed, regular
 * files only, opened without blocking, bounded size; written temp + fsync + rename + fsync).
 */
#include "halt.h"

#include "fsutil.h"
#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HALT_MAX_VALUE INT64_C(1000000000000) /* 10^12 s: year 33658, and no overflow */

/* A decimal integer in 0..HALT_MAX_VALUE spelled by bytes [s, s + n): 0 ok, -1 not. */
static int parse_value(int64_t *out, const char *s, size_t n)
{
    if (n == 0 || n > 13)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > HALT_MAX_VALUE)
        return -1;
    *out = v;
    return 0;
}

int ckpt__halt_parse(ckpt__halt *out, const uint8_t *buf, size_t len, const char *shown)
{
    out->after = -1;
    out->requested = -1;
    if (len > CKPT__HALT_MAX_BYTES)
        return ckpt__error(CKPT_ECORRUPT, "halt request %s: %zu bytes, more than %d", shown, len,
                           CKPT__HALT_MAX_BYTES);
    if (memchr(buf, '\0', len))
        return ckpt__error(CKPT_ECORRUPT, "halt request %s: holds a NUL byte", shown);
    const char *p = (const char *)buf, *end = p + len;
    int line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        size_t n = (size_t)(eol - p);
        line++;
        if (line == 1) {
            if (n != strlen(CKPT__HALT_MAGIC) || memcmp(p, CKPT__HALT_MAGIC, n) != 0)
                return ckpt__error(CKPT_ECORRUPT,
                                   "halt request %s: not a halt request (its first line is not "
                                   "'" CKPT__HALT_MAGIC "')",
                                   shown);
        } else if (n > 0) {
            const char *eq = memchr(p, '=', n);
            int64_t *slot = NULL;
            if (eq && eq - p == 5 && memcmp(p, "after", 5) == 0)
                slot = &out->after;
            else if (eq && eq - p == 9 && memcmp(p, "requested", 9) == 0)
                slot = &out->requested;
            if (!slot)
                return ckpt__error(CKPT_ECORRUPT, "halt request %s: line %d is not after=N or "
                                                  "requested=N",
                                   shown, line);
            if (*slot != -1)
                return ckpt__error(CKPT_ECORRUPT, "halt request %s: line %d repeats '%.*s'", shown,
                                   line, (int)(eq - p), p);
            if (parse_value(slot, eq + 1, (size_t)(eol - eq - 1)) != 0)
                return ckpt__error(CKPT_ECORRUPT,
                                   "halt request %s: line %d: '%.*s' is not a time in seconds "
                                   "since the epoch (0..10^12)",
                                   shown, line, (int)(eol - eq - 1 > 40 ? 40 : eol - eq - 1),
                                   eq + 1);
        }
        p = nl ? nl + 1 : end;
    }
    if (line == 0)
        return ckpt__error(CKPT_ECORRUPT, "halt request %s: empty", shown);
    if (out->after < 0)
        return ckpt__error(CKPT_ECORRUPT, "halt request %s: no after=N line", shown);
    return CKPT_OK;
}

int ckpt__halt_format(char *out, size_t size, size_t *len, const ckpt__halt *h)
{
    if (h->after < 0 || h->after > HALT_MAX_VALUE || h->requested > HALT_MAX_VALUE)
        return ckpt__error(CKPT_EINVAL, "halt request: time %lld out of range",
                           (long long)h->after);
    int n = h->requested >= 0
                ? snprintf(out, size, CKPT__HALT_MAGIC "\nafter=%lld\nrequested=%lld\n",
                           (long long)h->after, (long long)h->requested)
                : snprintf(out, size, CKPT__HALT_MAGIC "\nafter=%lld\n", (long long)h->after);
    if (n < 0 || (size_t)n >= size)
        return ckpt__error(CKPT_EINVAL, "halt request: buffer of %zu bytes too small", size);
    *len = (size_t)n;
    return CKPT_OK;
}

int ckpt__halt_due(const ckpt__halt *h, double now)
{
    return h->after >= 0 && now >= (double)h->after;
}

int ckpt__halt_read_at(ckpt__halt *out, int dirfd, const char *shown)
{
    out->after = out->requested = -1;
    uint8_t *buf = NULL;
    size_t len = 0;
    /* regular files only, O_NOFOLLOW | O_NONBLOCK, at most the limit (ckpt__read_file_at) */
    int rc = ckpt__read_file_at(&buf, &len, dirfd, CKPT__HALT_FILE, CKPT__HALT_MAX_BYTES, shown);
    if (rc == CKPT_OK) {
        char what[4200];
        snprintf(what, sizeof what, "%s/%s", shown, CKPT__HALT_FILE);
        rc = ckpt__halt_parse(out, buf, len, what);
    }
    free(buf);
    return rc;
}

int ckpt__halt_dir(char *out, size_t size, const char *dir, int *exists)
{
    if (exists)
        *exists = 0;
    int fd;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    int rc = ckpt__dir_open(&fd, dir);
    if (rc == CKPT_ENOTFOUND) { /* no directory is an answer, not an error */
        ckpt__error_restore(&keep);
        return ckpt__path(out, size, "%s", dir);
    }
    if (rc != CKPT_OK)
        return rc;
    struct stat st;
    int chief = 0;
    if (fstatat(fd, CKPT__CHIEF_DIR, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            close(fd);
            return ckpt__error(CKPT_ECORRUPT, "refusing to use %s/" CKPT__CHIEF_DIR ": it is %s",
                               dir, ckpt__file_kind(st.st_mode));
        }
        chief = 1;
    }
    close(fd);
    if (exists)
        *exists = 1;
    return chief ? ckpt__path(out, size, "%s/" CKPT__CHIEF_DIR, dir)
                 : ckpt__path(out, size, "%s", dir);
}

int ckpt__halt_read(ckpt__halt *out, const char *dir)
{
    out->after = out->requested = -1;
    int fd, rc = ckpt__ckptdir_open(&fd, NULL, dir, 0);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__halt_read_at(out, fd, dir);
    close(fd);
    return rc;
}

int ckpt__halt_write(const char *dir, const ckpt__halt *h)
{
    char text[256];
    size_t len = 0;
    int rc = ckpt__halt_format(text, sizeof text, &len, h);
    if (rc != CKPT_OK)
        return rc;
    int fd;
    if ((rc = ckpt__ckptdir_open(&fd, NULL, dir, 0)) != CKPT_OK)
        return rc;
    rc = ckpt__write_file_atomic_at(fd, CKPT__HALT_FILE, text, len, dir, NULL);
    close(fd);
    return rc;
}

int ckpt__halt_clear(const char *dir, int *removed)
{
    *removed = 0;
    int fd, rc = ckpt__ckptdir_open(&fd, NULL, dir, 0);
    if (rc != CKPT_OK)
        return rc;
    struct stat st;
    if (fstatat(fd, CKPT__HALT_FILE, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = errno == ENOENT ? CKPT_OK : ckpt__errno(errno, "stat", CKPT__HALT_FILE);
    } else if (S_ISDIR(st.st_mode)) {
        rc = ckpt__error(CKPT_ECORRUPT, "%s/" CKPT__HALT_FILE " is a directory, not a halt request: "
                                        "left alone",
                         dir);
    } else if (unlinkat(fd, CKPT__HALT_FILE, 0) != 0) {
        rc = errno == ENOENT ? CKPT_OK : ckpt__errno(errno, "unlink", CKPT__HALT_FILE);
    } else {
        *removed = 1;
        rc = ckpt__fsync_fd(fd, dir);
    }
    close(fd);
    return rc;
}

int ckpt__halt_find(ckpt__halt *out, char *where, size_t size, const char *dir)
{
    char sd[4200];
    int exists = 0;
    out->after = out->requested = -1;
    int rc = ckpt__halt_dir(sd, sizeof sd, dir, &exists);
    if (rc != CKPT_OK)
        return rc;
    if (!exists)
        return ckpt__error(CKPT_ENOTFOUND, "%s: no such directory", dir);
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    rc = ckpt__halt_read(out, sd);
    if (rc == CKPT_ENOTFOUND && strcmp(sd, dir) != 0) { /* DIR/chief had none: DIR itself */
        ckpt__error_restore(&keep);
        rc = ckpt__halt_read(out, dir);
        if (rc != CKPT_ENOTFOUND && where)
            snprintf(where, size, "%s", dir);
    } else if (where) {
        snprintf(where, size, "%s", sd);
    }
    return rc;
}
