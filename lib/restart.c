/* The restart control of a checkpoint directory (restart.h): parse, format, read, write. */
#include "restart.h"

#include "fsutil.h"

#include "mpickpt/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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

/* Order of drop records: by counter, then by name. */
static int drop_cmp(int64_t counter, const char *name, const ckpt__restart_drop *d)
{
    if (counter != d->counter)
        return counter < d->counter ? -1 : 1;
    return strcmp(name, d->name);
}

static int drop_qsort_cmp(const void *a, const void *b)
{
    const ckpt__restart_drop *x = a;
    return drop_cmp(x->counter, x->name, b);
}

/* The position of (counter, name) among the sorted drops: *found says whether it is there;
 * otherwise the result is where it belongs. */
static size_t drop_find(const ckpt__restart *c, const char *name, int64_t counter, int *found)
{
    size_t lo = 0, hi = c->num_drops;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int k = drop_cmp(counter, name, &c->drops[mid]);
        if (k == 0) {
            *found = 1;
            return mid;
        }
        if (k < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = 0;
    return lo;
}

/* Room for one more drop; the capacity doubles, so n appends copy O(n) records in all. */
static int drop_reserve(ckpt__restart *c)
{
    if (c->num_drops < c->cap_drops)
        return CKPT_OK;
    size_t cap = c->cap_drops ? 2 * c->cap_drops : 16;
    if (cap > SIZE_MAX / sizeof *c->drops)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    ckpt__restart_drop *d = realloc(c->drops, cap * sizeof *d);
    if (!d)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    c->drops = d;
    c->cap_drops = cap;
    return CKPT_OK;
}

int ckpt__restart_add_drop(ckpt__restart *c, const char *name, int64_t counter)
{
    int found;
    size_t at = drop_find(c, name, counter, &found);
    if (found)
        return CKPT_OK;
    if (!good_name(name))
        return ckpt__error(CKPT_EINVAL, "'%s' is not a checkpoint name", name);
    int rc = drop_reserve(c);
    if (rc != CKPT_OK)
        return rc;
    memmove(&c->drops[at + 1], &c->drops[at], (c->num_drops - at) * sizeof *c->drops);
    snprintf(c->drops[at].name, sizeof c->drops->name, "%s", name);
    c->drops[at].counter = counter;
    c->num_drops++;
    return CKPT_OK;
}

int ckpt__restart_remove_drop(ckpt__restart *c, const char *name, int64_t counter)
{
    int found;
    size_t i = drop_find(c, name, counter, &found);
    if (!found)
        return 0;
    memmove(&c->drops[i], &c->drops[i + 1], (c->num_drops - i - 1) * sizeof *c->drops);
    c->num_drops--;
    return 1;
}

/* Sorts the drops appended by the parser and removes repeated records (a file may list one
 * twice: the same meaning as once). n log n, where inserting each in place would be quadratic. */
static void drop_sort_unique(ckpt__restart *c)
{
    if (c->num_drops < 2)
        return;
    qsort(c->drops, c->num_drops, sizeof *c->drops, drop_qsort_cmp);
    size_t k = 1;
    for (size_t i = 1; i < c->num_drops; i++)
        if (drop_qsort_cmp(&c->drops[i], &c->drops[k - 1]) != 0)
            c->drops[k++] = c->drops[i];
    c->num_drops = k;
}

/* The whitespace-separated fields of s[0..n) (at most `max`; one more is counted, not stored,
 * so a caller sees that there were too many). Returns the count. */
static int split_fields(const char *s, size_t n, const char **f, size_t *flen, int max)
{
    int k = 0;
    for (size_t i = 0; i < n && k <= max;) {
        while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
            i++;
        if (i == n)
            break;
        size_t start = i;
        while (i < n && !(s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
            i++;
        if (k < max) {
            f[k] = s + start;
            flen[k] = i - start;
        }
        k++;
    }
    return k;
}

/* Field i as a NUL-terminated string in out[size]; 0 when it does not fit. */
static int field(char *out, size_t size, const char *const *f, const size_t *flen, int i)
{
    if (flen[i] >= size)
        return 0;
    memcpy(out, f[i], flen[i]);
    out[flen[i]] = '\0';
    return 1;
}

int ckpt__restart_parse(ckpt__restart *c, const char *buf, size_t len, const char *shown)
{
    ckpt__restart_clear(c);
    size_t lineno = 0;
    /* One pass, each line split by hand (no copy of the line, no sscanf): linear in len. */
    for (size_t pos = 0; pos < len;) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        lineno++;
        int rc = CKPT_OK;
        const char *f[4];
        size_t flen[4];
        /* a comment or an empty line: no fields; a line of blanks only is not a record */
        int nul = memchr(line, '\0', n) != NULL;
        int blank = !nul && (n == 0 || line[0] == '#');
        int k = blank ? 0 : split_fields(line, n, f, flen, 4);
        char kind[16], name[256], a[17], b[17];
        int64_t x = 0, y = 0;
        int ok = !nul && k >= 3 && k <= 4 && field(kind, sizeof kind, f, flen, 0) &&
                 field(name, sizeof name, f, flen, 1) &&
                 field(a, sizeof a, f, flen, 2) && (k == 3 || field(b, sizeof b, f, flen, 3));
        if (blank) {
            /* nothing to do */
        } else if (ok && k == 4 && strcmp(kind, "pin") == 0 && good_name(name) &&
                   parse_counter(a, &x) && parse_counter(b, &y) && y >= x && !c->pinned) {
            c->pinned = 1;
            snprintf(c->pin, sizeof c->pin, "%s", name);
            c->pin_counter = x;
            c->pin_through = y;
        } else if (ok && k == 3 && strcmp(kind, "drop") == 0 && good_name(name) &&
                   parse_counter(a, &x)) {
            /* appended here, sorted once at the end (drop_sort_unique) */
            rc = drop_reserve(c);
            if (rc == CKPT_OK) {
                memcpy(c->drops[c->num_drops].name, name, flen[1] + 1);
                c->drops[c->num_drops++].counter = x;
            }
        } else {
            rc = ckpt__error(CKPT_ECORRUPT,
                             "%s: line %zu is not a restart record (\"pin NAME COUNTER "
                             "THROUGH\" once, or \"drop NAME COUNTER\"): change it with "
                             "mpickpt pin/drop, or remove the file",
                             shown, lineno);
        }
        if (rc != CKPT_OK) {
            ckpt__restart_clear(c);
            return rc;
        }
        pos += n + (nl ? 1 : 0);
    }
    drop_sort_unique(c);
    return CKPT_OK;
}

int ckpt__restart_read(ckpt__restart *c, const char *dir)
{
    memset(c, 0, sizeof *c);
    int dfd = -1;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    int rc = ckpt__ckptdir_open(&dfd, NULL, dir, 0);
    if (rc == CKPT_ENOTFOUND) { /* no directory: no control */
        ckpt__error_restore(&keep);
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
    if (rc == CKPT_ENOTFOUND) { /* no file: no control */
        ckpt__error_restore(&keep);
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
            ckpt_error_clear(); /* kept: ckpt__restart_write is a top-level write (the CLI's);
                                 * no file to remove is success */
            rc = CKPT_OK;
        }
        ckpt__close(dfd);
        return rc;
    }
    char *text = NULL;
    size_t len = 0;
    rc = ckpt__restart_format(&text, &len, c);
    /* never write what the next reader must refuse (ckpt__restart_read) */
    if (rc == CKPT_OK && len > CKPT__RESTART_MAX_BYTES)
        rc = ckpt__error(CKPT_EINVAL,
                         "%s would be %zu bytes, more than the %u mpickpt reads: remove the "
                         "records of checkpoints that are gone (they match nothing), or the file",
                         shown, len, CKPT__RESTART_MAX_BYTES);
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
    int found;
    drop_find(c, name, counter, &found);
    if (found)
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

int ckpt__restart_candidate(const ckpt__restart *c, const ckpt_state_entry *e, unsigned readable,
                            unsigned *levels)
{
    int s = ckpt__restart_status(c, e->prefix, e->save_counter);
    *levels = (e->levels ? e->levels : CKPT_LEVEL_PERSISTENT) & readable;
    if (s == CKPT__RS_DROPPED)
        return CKPT__CAND_DROPPED;
    if (s == CKPT__RS_ASIDE)
        return CKPT__CAND_ASIDE;
    if (!*levels)
        return CKPT__CAND_LEVEL;
    if (s == CKPT__RS_PINNED)
        return CKPT__CAND_PINNED;
    return c->pinned && e->save_counter < c->pin_counter ? CKPT__CAND_BEHIND_PIN
                                                         : CKPT__CAND_NORMAL;
}

int ckpt__restart_pin_error(const ckpt__restart *c, const char *dir, int pin_listed)
{
    return ckpt__error_set_reason(
        ckpt__error(CKPT_ENOTFOUND,
                    "%s is pinned (%s/%s) but %s: clear the pin (mpickpt pin %s --clear) or pin "
                    "another checkpoint",
                    c->pin, dir, CKPT__RESTART_FILE,
                    pin_listed ? "cannot be restored" : "is not a listed checkpoint", dir),
        CKPT_REASON_PINNED);
}

/* The first candidate of st (newest first) whose index and data open (mpickpt/state.h). */
static int newest_of(char *out, size_t size, const char *dir, const ckpt_state *st,
                     const ckpt__restart *ctl)
{
    int pin_listed = 0, skipped = 0;
    char first[512] = "";
    for (size_t k = 0; k < st->num_entries; k++)
        pin_listed |= ckpt__restart_status(ctl, st->entries[k].prefix,
                                           st->entries[k].save_counter) == CKPT__RS_PINNED;
    for (size_t k = st->num_entries; k-- > 0;) {
        unsigned lv;
        int c = ckpt__restart_candidate(ctl, &st->entries[k], CKPT_LEVEL_PERSISTENT, &lv);
        if (c == CKPT__CAND_DROPPED || c == CKPT__CAND_ASIDE || c == CKPT__CAND_LEVEL)
            continue;
        if (c == CKPT__CAND_BEHIND_PIN)
            return ckpt__restart_pin_error(ctl, dir, pin_listed);
        int rc = ckpt__path(out, size, "%s/%s", dir, st->entries[k].prefix);
        if (rc != CKPT_OK)
            return rc;
        ckpt_reader *r = NULL;
        if ((rc = ckpt_reader_open(&r, out)) == CKPT_OK) {
            ckpt_reader_free(r);
            return CKPT_OK;
        }
        if (!skipped++)
            snprintf(first, sizeof first, "%s: %s", st->entries[k].prefix,
                     ckpt_error_last()->message);
    }
    out[0] = '\0';
    if (ctl->pinned)
        return ckpt__restart_pin_error(ctl, dir, pin_listed);
    if (skipped)
        return ckpt__error_set_reason(
            ckpt__error(CKPT_ENOTFOUND, "no restorable checkpoint in %s (%d unreadable: %s)", dir,
                        skipped, first),
            CKPT_REASON_NO_CHECKPOINT);
    return ckpt__error_set_reason(
        ckpt__error(CKPT_ENOTFOUND, "no restorable checkpoint in %s", dir),
        CKPT_REASON_NO_CHECKPOINT);
}

int ckpt_newest_restorable(char *out, size_t size, const char *dir)
{
    if (!out || !dir)
        return ckpt__error(CKPT_EINVAL, "ckpt_newest_restorable: out and dir must not be NULL");
    if (size)
        out[0] = '\0';
    ckpt_state *st = NULL;
    int rc = ckpt_state_read(&st, dir);
    if (rc != CKPT_OK) { /* missing or damaged: what the indexes say, as `mpickpt list` */
        ckpt_state_free(st);
        st = NULL;
        rc = ckpt_state_scan(&st, dir);
    }
    ckpt__restart ctl;
    memset(&ctl, 0, sizeof ctl);
    if (rc == CKPT_OK)
        rc = ckpt__restart_read(&ctl, dir);
    if (rc == CKPT_OK)
        rc = newest_of(out, size, dir, st, &ctl);
    ckpt__restart_clear(&ctl);
    ckpt_state_free(st);
    return rc;
}
