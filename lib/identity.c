/* A checkpoint directory's identity (identity.h). */
#include "identity.h"
#include "fsutil.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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

int ckpt__identity_get(char out[CKPT__IDENTITY_HEX + 1], int dirfd, const char *shown, int create)
{
    out[0] = '\0';
    uint8_t *buf = NULL;
    size_t len = 0;
    const size_t want = strlen(MAGIC) + CKPT__IDENTITY_HEX + 1;
    int rc = ckpt__read_file_at(&buf, &len, dirfd, CKPT__IDENTITY_FILE, 256, shown);
    if (rc == CKPT_OK) {
        const char *t = (const char *)buf;
        if (len != want || memcmp(t, MAGIC, strlen(MAGIC)) != 0 ||
            !is_hex(t + strlen(MAGIC), CKPT__IDENTITY_HEX) || t[want - 1] != '\n')
            rc = ckpt__error(CKPT_ECORRUPT,
                             "%s/%s is not an mpickpt identity file; remove it to give the "
                             "directory a new identity (cache copies made under the old one are "
                             "then not adopted)",
                             shown, CKPT__IDENTITY_FILE);
        else
            memcpy(out, t + strlen(MAGIC), CKPT__IDENTITY_HEX);
        out[rc == CKPT_OK ? CKPT__IDENTITY_HEX : 0] = '\0';
        free(buf);
        return rc;
    }
    if (rc != CKPT_ENOTFOUND || !create)
        return rc;
    ckpt_error_clear(); /* the missing file this function reported above */
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
    char text[64];
    int at = snprintf(text, sizeof text, "%s", MAGIC);
    for (size_t i = 0; i < sizeof r; i++)
        at += snprintf(text + at, sizeof text - (size_t)at, "%02x", r[i]);
    text[at++] = '\n';
    rc = ckpt__write_file_atomic_at(dirfd, CKPT__IDENTITY_FILE, text, (size_t)at, shown, NULL);
    if (rc == CKPT_OK) {
        memcpy(out, text + strlen(MAGIC), CKPT__IDENTITY_HEX);
        out[CKPT__IDENTITY_HEX] = '\0';
    }
    return rc;
}
