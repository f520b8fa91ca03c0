/* The restart control of a checkpoint directory (restart.h): parse, format, read, write. */
#include "restart.h"

#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ckpt__restart_clear(ckpt__restart *c)
{
    free(c->drops);
    memset(c, 0, sizeof *c);
}

/* A decimal counter in 0..CKPT__COUNTER_MAX spelled exactly (no sign, no spaces). */
static int parse_counter(const char *s, int64_t *out)
{
    if (!*s || strlen(s) > 16)
        return 0;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    if (v > CKPT__COUNTER_MAX)
        return 0;
    *out = v;
    return 1;
}

/* A checkpoint name the manager could have made: a safe file name without '.' or spaces. */
static int good_name(const char *s)
{
    if (!ckpt__safe_filename(s) || strlen(s) > 255)
        return 0;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '.' || (unsigned char)*p == 0x7f)
            return 0;
    return 1;
}

int ckpt__restart_add_drop(ckpt__restart *c, const char *name, int64_t counter)
{
    for (size_t i = 0; i < c->num_drops; i++)
        if (c->drops[i].counter == counter && strcmp(c->drops[i].name, name) == 0)
            return CKPT_OK;
    if (!good_name(name))
        return ckpt__error(CKPT_EINVAL, "'%s' is not a checkpoint name", name);
    ckpt__restart_drop *d = realloc(c->drops, (c->num_drops + 1) * sizeof *d);
    if (!d)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    c->drops = d;
    snprintf(d[c->num_drops].name, sizeof d->name, "%s", name);
    d[c->num_drops].counter = counter;
    c->num_drops++;
    return CKPT_OK;
}

int ckpt__restart_remove_drop(ckpt__restart *c, const char *name, int64_t counter)
{
    for (size_t i = 0; i < c->num_drops; i++)
        if (c->drops[i].counter == counter && strcmp(c->drops[i].name, name) == 0) {
            memmove(&c->drops[i], &c->drops[i + 1], (c->num_drops - i - 1) * sizeof *c->drops);
            c->num_drops--;
            return 1;
        }
    return 0;
}

int ckpt__restart_parse(ckpt__restart *c, const char *buf, size_t len, const char *shown)
{
    ckpt__restart_clear(c);
    size_t lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        char line[600];
        lineno++;
        int rc = CKPT_OK;
        if (n >= sizeof line || memchr(buf + pos, '\0', n)) {
            rc = ckpt__error(CKPT_ECORRUPT, "%s: line %zu is not a restart record", shown, lineno);
        } else {
            memcpy(line, buf + pos, n);
            line[n] = '\0';
            char kind[16], name[300], a[32], b[32], extra[2];
            int k = line[0] == '#' || n == 0
                        ? 0
                        : sscanf(line, "%15s %299s %31s %31s %1s", kind, name, a, b, extra);
            int64_t x = 0, y = 0;
            if (k == 0) {
                /* a comment or an empty line */
            } else if (k == 4 && strcmp(kind, "pin") == 0 && good_name(name) &&
                       parse_counter(a, &x) && parse_counter(b, &y) && y >= x && !c->pinned) {
                c->pinned = 1;
                snprintf(c->pin, sizeof c->pin, "%s", name);
                c->pin_counter = x;
                c->pin_through = y;
            } else if (k == 3 && strcmp(kind, "drop") == 0 && good_name(name) &&
                       parse_counter(a, &x)) {
                rc = ckpt__restart_add_drop(c, name, x);
            } else {
                rc = ckpt__error(CKPT_ECORRUPT,
                                 "%s: line %zu is not a restart record (\"pin NAME COUNTER "
                                 "THROUGH\" once, or \"drop NAME COUNTER\"): change it with "
                                 "mpickpt pin/drop, or remove the file",
                                 shown, lineno);
            }
        }
        if (rc != CKPT_OK) {
            ckpt__restart_clear(c);
            return rc;
        }
        pos += n + (nl ? 1 : 0);
    }
    return CKPT_OK;
}

int ckpt__restart_read(ckpt__restart *c, const char *dir)
{
    memset(c, 0, sizeof *c);
    int dfd = -1;
    int rc = ckpt__ckptdir_open(&dfd, NULL, dir, 0);
    if (rc == CKPT_ENOTFOUND) {
        ckpt_error_clear();
        return CKPT_OK;
    }
    if (rc != CKPT_OK)
        return rc;
    char shown[4200];
    snprintf(shown, sizeof shown, "%s/%s", dir, CKPT__RESTART_FILE);
    uint8_t *buf = NULL;
    size_t len = 0;
    rc = ckpt__read_file_at(&buf, &len, dfd, CKPT__RESTART_FILE, CKPT__RESTART_MAX_BYTES, shown);
    ckpt__close(dfd);
    if (rc == CKPT_ENOTFOUND) {
        ckpt_error_clear();
        return CKPT_OK;
    }
    if (rc == CKPT_OK)
        rc = ckpt__restart_parse(c, (const char *)buf, len, shown);
    free(buf);
    return rc;
}

int ckpt__restart_format(char **out, size_t *len, const ckpt__restart *c)
{
    size_t cap = 200 + (c->pinned ? 320 : 0) + c->num_drops * 300;
    char *s = malloc(cap);
    if (!s)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    size_t n = (size_t)snprintf(s, cap, "# mpickpt restart control, written by `mpickpt pin` and "
                                        "`mpickpt drop` (docs/operations.md)\n");
    if (c->pinned)
        n += (size_t)snprintf(s + n, cap - n, "pin %s %lld %lld\n", c->pin,
                              (long long)c->pin_counter, (long long)c->pin_through);
    for (size_t i = 0; i < c->num_drops; i++)
        n += (size_t)snprintf(s + n, cap - n, "drop %s %lld\n", c->drops[i].name,
                              (long long)c->drops[i].counter);
    *out = s;
    *len = n;
    return CKPT_OK;
}

int ckpt__restart_write(const ckpt__restart *c, const char *dir)
{
    int dfd = -1;
    int rc = ckpt__ckptdir_open(&dfd, NULL, dir, 0);
    if (rc != CKPT_OK)
        return rc;
    char shown[4200];
    snprintf(shown, sizeof shown, "%s/%s", dir, CKPT__RESTART_FILE);
    if (!c->pinned && c->num_drops == 0) {
        /* nothing left to say: the file goes (a directory or anything else there is refused) */
        uint64_t size = 0;
        rc = ckpt__stat_regular(&size, dfd, CKPT__RESTART_FILE, shown);
        if (rc == CKPT_OK) {
            if (unlinkat(dfd, CKPT__RESTART_FILE, 0) != 0)
                rc = ckpt__errno(errno, "cannot remove", shown);
            else
                rc = ckpt__fsync_fd(dfd, dir);
        } else if (rc == CKPT_ENOTFOUND) {
            ckpt_error_clear();
            rc = CKPT_OK;
        }
        ckpt__close(dfd);
        return rc;
    }
    char *text = NULL;
    size_t len = 0;
    rc = ckpt__restart_format(&text, &len, c);
    if (rc == CKPT_OK)
        rc = ckpt__write_file_atomic_at(dfd, CKPT__RESTART_FILE, text, len, shown, NULL);
    free(text);
    ckpt__close(dfd);
    return rc;
}

int ckpt__restart_status(const ckpt__restart *c, const char *name, int64_t counter)
{
    if (c->pinned && counter == c->pin_counter && strcmp(name, c->pin) == 0)
        return CKPT__RS_PINNED;
    for (size_t i = 0; i < c->num_drops; i++)
        if (c->drops[i].counter == counter && strcmp(c->drops[i].name, name) == 0)
            return CKPT__RS_DROPPED;
    if (c->pinned && counter > c->pin_counter && counter <= c->pin_through)
        return CKPT__RS_ASIDE;
    return CKPT__RS_NORMAL;
}

long ckpt__restart_point(const ckpt__restart *c, const ckpt_state *st)
{
    for (size_t i = st->num_entries; i-- > 0;) {
        int s = ckpt__restart_status(c, st->entries[i].prefix, st->entries[i].save_counter);
        if (s == CKPT__RS_NORMAL || s == CKPT__RS_PINNED)
            return (long)i;
    }
    return -1;
}
