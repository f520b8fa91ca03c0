/* A checkpoint directory's identity (identity.h). */
#include "identity.h"
#include "fsutil.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#define MAGIC "mpickpt-identity "

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int ckpt__is_cache_subdir(const char *name)
{
    size_t p = strlen(CKPT__CACHE_SUBDIR_PREFIX);
    return strncmp(name, CKPT__CACHE_SUBDIR_PREFIX, p) == 0 &&
           strlen(name) == p + CKPT__IDENTITY_HEX && is_hex(name + p, CKPT__IDENTITY_HEX);
}

/* Makes a new identity for the directory open as dirfd (inode `ino`) and writes it durably. */
static int make_identity(char out[CKPT__IDENTITY_HEX + 1], int dirfd, const char *shown,
                         unsigned long long ino)
{
    uint8_t r[CKPT__IDENTITY_HEX / 2];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = getrandom(r + got, sizeof r - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return ckpt__errno(errno, "getrandom for the identity of", shown);
        got += (size_t)k;
    }
    char text[128];
    int at = snprintf(text, sizeof text, "%s", MAGIC);
    for (size_t i = 0; i < sizeof r; i++)
        at += snprintf(text + at, sizeof text - (size_t)at, "%02x", r[i]);
    at += snprintf(text + at, sizeof text - (size_t)at, " dir %llu\n", ino);
    int rc = ckpt__write_file_atomic_at(dirfd, CKPT__IDENTITY_FILE, text, (size_t)at, shown, NULL);
    if (rc == CKPT_OK) {
        memcpy(out, text + strlen(MAGIC), CKPT__IDENTITY_HEX);
        out[CKPT__IDENTITY_HEX] = '\0';
    }
    return rc;
}

int ckpt__identity_get(char out[CKPT__IDENTITY_HEX + 1], int dirfd, const char *shown,
                       int create)
{
    out[0] = '\0';
    struct stat dst;
    if (fstat(dirfd, &dst) != 0)
        return ckpt__errno(errno, "stat", shown);
    uint8_t *buf = NULL;
    size_t len = 0;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    int rc = ckpt__read_file_at(&buf, &len, dirfd, CKPT__IDENTITY_FILE, 256, shown);
    if (rc == CKPT_OK) {
        /* "mpickpt-identity <hex>" then " dir <inode>" (made by mpickpt) or nothing (by hand) */
        char t[257];
        memcpy(t, buf, len);
        t[len] = '\0';
        free(buf);
        size_t m = strlen(MAGIC), h = m + CKPT__IDENTITY_HEX;
        unsigned long long ino = 0;
        char tail[8] = "";
        int ok = len == strlen(t) && len > h && t[len - 1] == '\n' &&
                 memcmp(t, MAGIC, m) == 0 && is_hex(t + m, CKPT__IDENTITY_HEX);
        int has_ino = ok && t[h] == ' ';
        if (ok && has_ino)
            ok = sscanf(t + h, " dir %llu%7s", &ino, tail) == 1 &&
                 strspn(t + h + 5, "0123456789") == len - h - 6;
        else if (ok)
            ok = t[h] == '\n' && len == h + 1;
        if (!ok)
            return ckpt__error(CKPT_ECORRUPT,
                               "%s/%s is not an mpickpt identity file; remove it to give the "
                               "directory a new identity (cache copies made under the old one "
                               "are then not adopted)",
                               shown, CKPT__IDENTITY_FILE);
        if (!has_ino || ino == (unsigned long long)dst.st_ino) {
            memcpy(out, t + m, CKPT__IDENTITY_HEX);
            out[CKPT__IDENTITY_HEX] = '\0';
            return CKPT_OK;
        }
        /* made for another directory: this is a copy (or a restore from a backup), whose
         * checkpoints must not adopt the original's cache copies */
        if (!create)
            return ckpt__error(CKPT_ENOTFOUND, "%s/%s was made for another directory (inode %llu)",
                               shown, CKPT__IDENTITY_FILE, ino);
        ckpt__log(CKPT_LOG_WARN,
                  "%s/%s was made for another directory (inode %llu, this one is %llu: a copy?); "
                  "the directory gets an identity of its own, so no node cache copy made under "
                  "the old one is adopted",
                  shown, CKPT__IDENTITY_FILE, ino, (unsigned long long)dst.st_ino);
        return make_identity(out, dirfd, shown, (unsigned long long)dst.st_ino);
    }
    if (rc != CKPT_ENOTFOUND || !create)
        return rc;
    ckpt__error_restore(&keep); /* the missing file reported above: the caller's error back */
    return make_identity(out, dirfd, shown, (unsigned long long)dst.st_ino);
}
