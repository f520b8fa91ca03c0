/* The checkpoint state file, directory scans and garbage collection. */
#include "mpickpt/state.h"

#include "fsutil.h"
#include "index.h"
#include "paths.h"
#include "reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ckpt_state_new(ckpt_state **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
}

void ckpt_state_free(ckpt_state *st)
{
    if (!st)
        return;
    free(st->entries);
    free(st);
}

int ckpt_state_append(ckpt_state *st, const ckpt_state_entry *e)
{
    ckpt_state_entry *n = realloc(st->entries, (st->num_entries + 1) * sizeof *n);
    if (!n)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    st->entries = n;
    st->entries[st->num_entries++] = *e;
    snprintf(st->latest, sizeof st->latest, "%s", e->prefix);
    if (e->save_counter > st->save_counter)
        st->save_counter = e->save_counter;
    return CKPT_OK;
}

void ckpt_state_remove(ckpt_state *st, size_t i)
{
    if (i >= st->num_entries)
        return;
    memmove(&st->entries[i], &st->entries[i + 1], (st->num_entries - i - 1) * sizeof *st->entries);
    st->num_entries--;
}

/* ---- (de)serialization ------------------------------------------------------------------------ */

int ckpt__state_pack(uint8_t **out, size_t *len, const ckpt_state *st, int container)
{
    Mpickpt__State msg = MPICKPT__STATE__INIT;
    Mpickpt__StateEntry *ents = calloc(st->num_entries ? st->num_entries : 1, sizeof *ents);
    Mpickpt__StateEntry **ptrs = calloc(st->num_entries ? st->num_entries : 1, sizeof *ptrs);
    int rc = CKPT_OK;
    if (!ents || !ptrs) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < st->num_entries; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        mpickpt__state_entry__init(&ents[i]);
        ents[i].prefix = (char *)e->prefix;
        ents[i].save_counter = e->save_counter;
        ents[i].epoch = e->epoch;
        ents[i].step = e->step;
        ents[i].timestamp = e->timestamp;
        ents[i].bytes = e->bytes;
        ents[i].end_of_epoch = e->end_of_epoch != 0;
        ents[i].preserved = e->preserved != 0;
        ents[i].levels = e->levels;
        ptrs[i] = &ents[i];
    }
    msg.model_checkpoint_path = (char *)st->latest;
    msg.checkpoints = ptrs;
    msg.n_checkpoints = st->num_entries;
    msg.last_preserved_timestamp = st->last_preserved_timestamp;
    msg.save_counter = st->save_counter;
    if (container) {
        rc = ckpt__container_pack(out, len, CKPT__MAGIC_STATE, &msg.base);
    } else {
        *len = mpickpt__state__get_packed_size(&msg);
        *out = malloc(*len ? *len : 1);
        if (!*out)
            rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        else
            mpickpt__state__pack(&msg, *out);
    }
done:
    free(ents);
    free(ptrs);
    return rc;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * A state read from disk (or received from the chief) is untrusted: retention deletes what it does
 * not list, so a state that lists a checkpoint twice, out of order, or with counters that cannot
 * be incremented must be refused, never acted on. The manager then rebuilds its list from the
 * indexes themselves. Checks: names are plain file names, listed once; counters in
 * [0, CKPT__COUNTER_MAX] and non-decreasing; times finite; the latest is the newest entry.
 */
static int state_check(const ckpt_state *st, const char *what)
{
    if (st->save_counter < 0 || st->save_counter > CKPT__COUNTER_MAX)
        return ckpt__error(CKPT_ECORRUPT, "%s: save counter %lld is outside 0..%lld", what,
                           (long long)st->save_counter, (long long)CKPT__COUNTER_MAX);
    if (!isfinite(st->last_preserved_timestamp))
        return ckpt__error(CKPT_ECORRUPT, "%s: last preserved time is not a number", what);
    const char **names = malloc((st->num_entries ? st->num_entries : 1) * sizeof *names);
    if (!names)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    int rc = CKPT_OK;
    for (size_t i = 0; i < st->num_entries && rc == CKPT_OK; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        names[i] = e->prefix;
        if (e->save_counter < 0 || e->save_counter > CKPT__COUNTER_MAX)
            rc = ckpt__error(CKPT_ECORRUPT, "%s: checkpoint %s has save counter %lld, outside "
                                            "0..%lld",
                             what, e->prefix, (long long)e->save_counter,
                             (long long)CKPT__COUNTER_MAX);
        else if (i > 0 && e->save_counter < st->entries[i - 1].save_counter)
            rc = ckpt__error(CKPT_ECORRUPT, "%s: checkpoints are not listed oldest first (%s, "
                                            "counter %lld, after %s, counter %lld)",
                             what, e->prefix, (long long)e->save_counter,
                             st->entries[i - 1].prefix,
                             (long long)st->entries[i - 1].save_counter);
        else if (!isfinite(e->timestamp))
            rc = ckpt__error(CKPT_ECORRUPT, "%s: checkpoint %s has no valid time", what, e->prefix);
    }
    if (rc == CKPT_OK && st->num_entries > 1) {
        qsort(names, st->num_entries, sizeof *names, cmp_cstr);
        for (size_t i = 1; i < st->num_entries && rc == CKPT_OK; i++)
            if (strcmp(names[i - 1], names[i]) == 0)
                rc = ckpt__error(CKPT_ECORRUPT, "%s: checkpoint %s is listed twice", what,
                                 names[i]);
    }
    free(names);
    if (rc == CKPT_OK && st->num_entries > 0 &&
        strcmp(st->latest, st->entries[st->num_entries - 1].prefix) != 0)
        rc = ckpt__error(CKPT_ECORRUPT, "%s: the latest checkpoint is '%s', but the newest listed "
                                        "is %s",
                         what, st->latest, st->entries[st->num_entries - 1].prefix);
    if (rc == CKPT_OK && st->num_entries == 0 && st->latest[0])
        rc = ckpt__error(CKPT_ECORRUPT, "%s: the latest checkpoint %s is not listed", what,
                         st->latest);
    return rc;
}

int ckpt__state_unpack(ckpt_state **out, const uint8_t *buf, size_t len, const char *what)
{
    *out = NULL;
    Mpickpt__State *msg = mpickpt__state__unpack(NULL, len, buf);
    if (!msg)
        return ckpt__error(CKPT_ECORRUPT, "%s: the state does not parse", what);
    ckpt_state *st;
    int rc = ckpt_state_new(&st);
    /* Every entry's room at once: growing by one per entry copies the array each time under
     * allocators that do not grow in place (a sanitizer's), quadratic in a large state file. */
    if (rc == CKPT_OK && msg->n_checkpoints > 0) {
        st->entries = msg->n_checkpoints <= SIZE_MAX / sizeof *st->entries
                          ? malloc(msg->n_checkpoints * sizeof *st->entries)
                          : NULL;
        if (!st->entries)
            rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; rc == CKPT_OK && i < msg->n_checkpoints; i++) {
        const Mpickpt__StateEntry *m = msg->checkpoints[i];
        if (!ckpt__safe_filename(m->prefix) || strlen(m->prefix) >= sizeof st->entries->prefix) {
            rc = ckpt__error(CKPT_ECORRUPT, "%s: bad checkpoint name in the state", what);
            break;
        }
        ckpt_state_entry e;
        memset(&e, 0, sizeof e);
        snprintf(e.prefix, sizeof e.prefix, "%s", m->prefix);
        e.save_counter = m->save_counter;
        e.epoch = m->epoch;
        e.step = m->step;
        e.timestamp = m->timestamp;
        e.bytes = m->bytes;
        e.end_of_epoch = m->end_of_epoch;
        e.preserved = m->preserved;
        e.levels = m->levels & (CKPT_LEVEL_PERSISTENT | CKPT_LEVEL_CACHE);
        if (m->levels & ~(CKPT_LEVEL_PERSISTENT | CKPT_LEVEL_CACHE)) {
            rc = ckpt__error(CKPT_ECORRUPT, "%s: checkpoint %s is on unknown levels %#x", what,
                             m->prefix, (unsigned)m->levels);
            break;
        }
        st->entries[st->num_entries++] = e; /* the room is there; latest and counter below */
        if (e.save_counter > st->save_counter)
            st->save_counter = e.save_counter;
    }
    if (rc == CKPT_OK) {
        const char *latest = msg->model_checkpoint_path ? msg->model_checkpoint_path : "";
        if (*latest && (!ckpt__safe_filename(latest) || strlen(latest) >= sizeof st->latest))
            rc = ckpt__error(CKPT_ECORRUPT, "%s: bad latest checkpoint name", what);
        snprintf(st->latest, sizeof st->latest, "%s", latest);
        st->last_preserved_timestamp = msg->last_preserved_timestamp;
        if (msg->save_counter < 0 || msg->save_counter > CKPT__COUNTER_MAX)
            rc = ckpt__error(CKPT_ECORRUPT, "%s: save counter %lld is outside 0..%lld", what,
                             (long long)msg->save_counter, (long long)CKPT__COUNTER_MAX);
        else if (msg->save_counter > st->save_counter)
            st->save_counter = msg->save_counter;
    }
    if (rc == CKPT_OK)
        rc = state_check(st, what);
    mpickpt__state__free_unpacked(msg, NULL);
    if (rc != CKPT_OK) {
        ckpt_state_free(st);
        return rc;
    }
    *out = st;
    return CKPT_OK;
}

int ckpt_state_read(ckpt_state **out, const char *dir)
{
    char path[4200];
    uint8_t *buf = NULL;
    size_t len;
    const uint8_t *payload;
    size_t plen;
    *out = NULL;
    int rc = ckpt__path(path, sizeof path, "%s/" CKPT__STATE_FILE, dir);
    if (rc == CKPT_OK)
        rc = ckpt__read_file(&buf, &len, path, CKPT__MAX_STATE_BYTES);
    if (rc == CKPT_OK)
        rc = ckpt__container_open(&payload, &plen, buf, len, CKPT__MAGIC_STATE, path);
    if (rc == CKPT_OK)
        rc = ckpt__state_unpack(out, payload, plen, path);
    else if (rc == CKPT_ENOTFOUND) /* no state file: no checkpoint yet */
        ckpt__error_set_reason(rc, CKPT_REASON_NO_CHECKPOINT);
    free(buf);
    if (rc != CKPT_OK && !*out) {
        int r2 = ckpt_state_new(out);
        if (r2 != CKPT_OK)
            return r2;
    }
    return rc;
}

int ckpt__state_write(const ckpt_state *st, const char *dir)
{
    char path[4200];
    uint8_t *buf;
    size_t len;
    int rc = ckpt__path(path, sizeof path, "%s/" CKPT__STATE_FILE, dir);
    /* never write what the next reader must refuse */
    if (rc == CKPT_OK && (rc = state_check(st, path)) != CKPT_OK)
        return ckpt__error_wrap(CKPT_EINVAL, "refusing to write an inconsistent state");
    if (rc == CKPT_OK && (rc = ckpt__state_pack(&buf, &len, st, 1)) == CKPT_OK) {
        rc = ckpt__write_file_atomic(path, buf, len);
        free(buf);
    }
    return rc;
}

/* Deprecated (docs/api.md "Deprecated"): the manager owns the state file. */
int ckpt_state_write(const ckpt_state *st, const char *dir)
{
    return ckpt__state_write(st, dir);
}

/* ---- checkpoints in a directory ---------------------------------------------------------------- */

/* Index (or any file) bytes of `name` plus the data files its index lists, by descriptor. */
static int checkpoint_bytes_at(uint64_t *out, int dirfd, const char *dir, const char *iname)
{
    uint8_t *buf = NULL;
    const uint8_t *payload;
    size_t plen;
    char shown[4400];
    snprintf(shown, sizeof shown, "%s/%s", dir, iname);
    *out = 0;
    int rc = ckpt__index_read_at(&buf, &payload, &plen, dirfd, iname, dir);
    uint64_t total = 0;
    Mpickpt__Index *idx = NULL;
    if (rc == CKPT_OK) {
        total = CKPT__CONTAINER_HEAD + plen + CKPT__CONTAINER_TAIL;
        rc = ckpt__index_parse(&idx, payload, plen, shown, NULL, 1);
    }
    for (size_t i = 0; rc == CKPT_OK && i < idx->n_files; i++)
        total += idx->files[i]->bytes;
    if (idx)
        mpickpt__index__free_unpacked(idx, NULL);
    free(buf);
    if (rc == CKPT_OK)
        *out = total;
    return rc;
}

int ckpt_checkpoint_bytes(uint64_t *out, const char *prefix)
{
    char dir[4096], base[4096], iname[4200];
    int fd;
    *out = 0;
    int rc = ckpt__split_path(dir, sizeof dir, base, sizeof base, prefix);
    if (rc == CKPT_OK)
        rc = ckpt__path(iname, sizeof iname, "%s.index", base);
    if (rc == CKPT_OK)
        rc = ckpt__ckptdir_open(&fd, NULL, dir, 0);
    if (rc != CKPT_OK)
        return rc;
    rc = checkpoint_bytes_at(out, fd, dir, iname);
    close(fd);
    return rc;
}

static int all_digits(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* Keeps data file `name` of dirfd open in *held when it is a regular file of at least hold_min
 * bytes (lib/reaper.h); anything else is left to the plain unlink. */
static void hold_open(int **held, size_t *nheld, uint64_t hold_min, int dirfd, const char *name,
                      const char *dir)
{
    int f = -1;
    uint64_t size = 0;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    if (ckpt__file_open(&f, &size, dirfd, name, O_RDONLY, dir) != CKPT_OK) {
        ckpt__error_restore(&keep); /* raised here: the unlink below decides */
        return;
    }
    int *p = size >= hold_min ? realloc(*held, (*nheld + 1) * sizeof *p) : NULL;
    if (!p) {
        close(f);
        return;
    }
    *held = p;
    p[(*nheld)++] = f;
}

int ckpt_checkpoint_delete(const char *prefix)
{
    return ckpt__checkpoint_delete_held(prefix, 0, NULL, NULL);
}

int ckpt__checkpoint_delete_held(const char *prefix, uint64_t hold_min, int **held,
                                 size_t *nheld)
{
    char dir[4096], base[4096], iname[4200], path[8400];
    int rc = ckpt__split_path(dir, sizeof dir, base, sizeof base, prefix);
    if (rc == CKPT_OK && !ckpt__safe_filename(base))
        rc = ckpt__error(CKPT_EINVAL, "'%s' does not name a checkpoint", prefix);
    if (rc == CKPT_OK)
        rc = ckpt__path(iname, sizeof iname, "%s.index", base);
    int fd = -1;
    if (rc == CKPT_OK)
        rc = ckpt__ckptdir_open(&fd, NULL, dir, 0);
    if (rc != CKPT_OK)
        return rc;
    /* Un-commit first: once the index is gone, no reader can pick up a half-deleted checkpoint. */
    if (unlinkat(fd, iname, 0) != 0 && errno != ENOENT) {
        snprintf(path, sizeof path, "%s/%s", dir, iname);
        rc = ckpt__errno(errno, "unlink", path);
        close(fd);
        return rc;
    }
    if ((rc = ckpt__fsync_fd(fd, dir)) != CKPT_OK) {
        close(fd);
        return rc;
    }
    DIR *d;
    if ((rc = ckpt__listing_or_close(&d, fd, dir)) != CKPT_OK)
        return rc;
    struct dirent *e;
    char b[4096];
    while ((e = readdir(d)) != NULL) {
        if (!ckpt__data_file_base(b, sizeof b, e->d_name) || strcmp(b, base) != 0)
            continue;
        if (held && rc == CKPT_OK)
            hold_open(held, nheld, hold_min, fd, e->d_name, dir);
        /* unlinkat removes the entry (a planted link included), never what it points to */
        if (unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (errno == EISDIR) /* someone's directory under a data file name: not ours */
                ckpt__log(CKPT_LOG_WARN, "left %s: a directory, not a data file of %s", path,
                          base);
            else if (rc == CKPT_OK)
                rc = ckpt__errno(errno, "unlink", path);
        }
    }
    closedir(d);
    close(fd);
    return rc;
}

static int cmp_entry(const void *a, const void *b)
{
    const ckpt_state_entry *x = a, *y = b;
    if (x->save_counter != y->save_counter)
        return x->save_counter < y->save_counter ? -1 : 1;
    return strcmp(x->prefix, y->prefix);
}

/* An entry for committed checkpoint `iname` (<prefix>.index) of dirfd from its header, or an
 * error when the index does not load (then it is not a committed checkpoint). */
static int scan_one(ckpt_state_entry *ent, int dirfd, const char *dir, const char *iname)
{
    uint8_t *buf = NULL;
    const uint8_t *payload;
    size_t plen;
    char shown[4400];
    Mpickpt__Index *idx = NULL;
    snprintf(shown, sizeof shown, "%s/%s", dir, iname);
    memset(ent, 0, sizeof *ent);
    snprintf(ent->prefix, sizeof ent->prefix, "%.*s", (int)(strlen(iname) - 6), iname);
    int rc = ckpt__index_read_at(&buf, &payload, &plen, dirfd, iname, dir);
    if (rc == CKPT_OK)
        rc = ckpt__index_parse(&idx, payload, plen, shown, NULL, 1);
    /* An entry is listed in a state file: a header no state may hold (state_check) would make
     * the scan's state unwritable, and every save of a manager that rebuilt its list by a scan
     * fail. Such an index is not a checkpoint mpickpt committed. */
    if (rc == CKPT_OK && (idx->header->save_counter < 0 ||
                          idx->header->save_counter > CKPT__COUNTER_MAX))
        rc = ckpt__error(CKPT_ECORRUPT, "%s: its header says save counter %lld, outside 0..%lld",
                         shown, (long long)idx->header->save_counter,
                         (long long)CKPT__COUNTER_MAX);
    else if (rc == CKPT_OK && !isfinite(idx->header->timestamp))
        rc = ckpt__error(CKPT_ECORRUPT, "%s: its header has no valid time", shown);
    if (rc == CKPT_OK) {
        ent->save_counter = idx->header->save_counter;
        ent->epoch = idx->header->epoch;
        ent->step = idx->header->step;
        ent->timestamp = idx->header->timestamp;
        ent->end_of_epoch = idx->header->end_of_epoch;
        ent->bytes = CKPT__CONTAINER_HEAD + plen + CKPT__CONTAINER_TAIL;
        for (size_t i = 0; i < idx->n_files; i++)
            ent->bytes += idx->files[i]->bytes;
    }
    if (idx)
        mpickpt__index__free_unpacked(idx, NULL);
    free(buf);
    return rc;
}

/*
 * The committed checkpoints of dir. With `name` set, only "<name>-<N>.index" with N > `after`
 * whose header says counter N (what a manager with that name committed after what its state
 * file lists); otherwise every "<prefix>.index". Indexes that do not load, and names that are
 * not checkpoint names, are skipped with a warning (never fatal); without `name` they are all
 * read, which is what a directory without a usable state file needs.
 */
static int scan(ckpt_state **out, const char *dir, const char *name, int64_t after)
{
    int rc = ckpt_state_new(out);
    if (rc != CKPT_OK)
        return rc;
    ckpt_state *st = *out;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    int fd;
    if ((rc = ckpt__ckptdir_open(&fd, NULL, dir, 0)) != CKPT_OK)
        return rc;
    DIR *d;
    if ((rc = ckpt__listing_or_close(&d, fd, dir)) != CKPT_OK)
        return rc;
    size_t nlen = name ? strlen(name) : 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && rc == CKPT_OK) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (!ckpt__ends_with(n, ".index"))
            continue;
        int64_t counter = -1;
        if (name) {
            /* "<name>-<digits>.index": anything else is not this manager's, and not read */
            if (len <= nlen + 7 || strncmp(n, name, nlen) != 0 || n[nlen] != '-' ||
                !all_digits(n + nlen + 1, len - nlen - 7) || len - nlen - 7 > 16)
                continue;
            counter = strtoll(n + nlen + 1, NULL, 10);
            if (counter <= after)
                continue;
        }
        char stem[256];
        if (len - 6 == 0 || len - 6 >= sizeof stem) {
            ckpt__log(CKPT_LOG_WARN, "ignoring %s/%s: not a checkpoint name", dir, n);
            continue;
        }
        snprintf(stem, sizeof stem, "%.*s", (int)(len - 6), n);
        if (!ckpt__safe_filename(stem)) {
            ckpt__log(CKPT_LOG_WARN, "ignoring %s/%s: not a checkpoint name", dir, n);
            continue;
        }
        ckpt_state_entry ent;
        int r = scan_one(&ent, fd, dir, n);
        if (r == CKPT_OK && name && ent.save_counter != counter)
            r = ckpt__error(CKPT_ECORRUPT, "its header says save counter %lld",
                            (long long)ent.save_counter);
        if (r != CKPT_OK) {
            const ckpt_error *err = ckpt_error_last();
            ckpt__log(CKPT_LOG_WARN, "ignoring %s/%s: %s", dir, n,
                      err ? err->message : ckpt_strerror(r));
            ckpt__error_restore(&keep); /* logged; the caller's pending error back */
            continue; /* damaged: not a committed checkpoint */
        }
        if (st->num_entries == cap) { /* doubling: linear in the number of checkpoints */
            size_t ncap = cap ? 2 * cap : 16;
            ckpt_state_entry *grown = ncap <= SIZE_MAX / sizeof *grown
                                          ? realloc(st->entries, ncap * sizeof *grown)
                                          : NULL;
            if (!grown) {
                rc = ckpt__error(CKPT_ENOMEM, "out of memory");
                break;
            }
            st->entries = grown;
            cap = ncap;
        }
        st->entries[st->num_entries++] = ent;
    }
    closedir(d);
    close(fd);
    if (st->num_entries)
        qsort(st->entries, st->num_entries, sizeof *st->entries, cmp_entry);
    for (size_t i = 0; i < st->num_entries; i++)
        if (st->entries[i].save_counter > st->save_counter)
            st->save_counter = st->entries[i].save_counter;
    if (st->num_entries)
        snprintf(st->latest, sizeof st->latest, "%s", st->entries[st->num_entries - 1].prefix);
    return rc;
}

int ckpt_state_scan(ckpt_state **out, const char *dir)
{
    return scan(out, dir, NULL, 0);
}

int ckpt__state_scan_newer(ckpt_state **out, const char *dir, const char *name, int64_t after)
{
    return scan(out, dir, name, after);
}

/* ---- garbage ----------------------------------------------------------------------------------- */

