/* The checkpoint state file, directory scans and garbage collection. */
#include "mpickpt/state.h"

#include "fsutil.h"
#include "index.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_FILE "checkpoint"

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

int ckpt__state_unpack(ckpt_state **out, const uint8_t *buf, size_t len, const char *what)
{
    *out = NULL;
    Mpickpt__State *msg = mpickpt__state__unpack(NULL, len, buf);
    if (!msg)
        return ckpt__error(CKPT_ECORRUPT, "%s: the state does not parse", what);
    ckpt_state *st;
    int rc = ckpt_state_new(&st);
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
        rc = ckpt_state_append(st, &e);
    }
    if (rc == CKPT_OK) {
        const char *latest = msg->model_checkpoint_path ? msg->model_checkpoint_path : "";
        if (*latest && (!ckpt__safe_filename(latest) || strlen(latest) >= sizeof st->latest))
            rc = ckpt__error(CKPT_ECORRUPT, "%s: bad latest checkpoint name", what);
        snprintf(st->latest, sizeof st->latest, "%s", latest);
        st->last_preserved_timestamp = msg->last_preserved_timestamp;
        if (msg->save_counter > st->save_counter)
            st->save_counter = msg->save_counter;
    }
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
    int rc = ckpt__path(path, sizeof path, "%s/" STATE_FILE, dir);
    if (rc == CKPT_OK)
        rc = ckpt__read_file(&buf, &len, path, CKPT__MAX_INDEX_BYTES);
    if (rc == CKPT_OK)
        rc = ckpt__container_open(&payload, &plen, buf, len, CKPT__MAGIC_STATE, path);
    if (rc == CKPT_OK)
        rc = ckpt__state_unpack(out, payload, plen, path);
    free(buf);
    if (rc != CKPT_OK && !*out) {
        int r2 = ckpt_state_new(out);
        if (r2 != CKPT_OK)
            return r2;
    }
    return rc;
}

int ckpt_state_write(const ckpt_state *st, const char *dir)
{
    char path[4200];
    uint8_t *buf;
    size_t len;
    int rc = ckpt__path(path, sizeof path, "%s/" STATE_FILE, dir);
    if (rc == CKPT_OK && (rc = ckpt__state_pack(&buf, &len, st, 1)) == CKPT_OK) {
        rc = ckpt__write_file_atomic(path, buf, len);
        free(buf);
    }
    return rc;
}

/* ---- checkpoints in a directory ---------------------------------------------------------------- */

int ckpt_checkpoint_bytes(uint64_t *out, const char *prefix)
{
    char path[4200];
    Mpickpt__Index *idx = NULL;
    uint64_t total = 0;
    *out = 0;
    int rc = ckpt__path(path, sizeof path, "%s.index", prefix);
    if (rc == CKPT_OK)
        rc = ckpt__file_size(&total, path);
    if (rc == CKPT_OK)
        rc = ckpt__index_load(&idx, path);
    for (size_t i = 0; rc == CKPT_OK && i < idx->n_files; i++)
        total += idx->files[i]->bytes;
    if (idx)
        mpickpt__index__free_unpacked(idx, NULL);
    if (rc == CKPT_OK)
        *out = total;
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Checkpoint name of a data file ("ckpt-3" for "ckpt-3.data-00001-of-00004": exactly the
 * `<name>.data-%05d-of-%05d` pattern mpickpt writes), or 0 for anything else. */
static int data_file_base(char *out, size_t size, const char *name)
{
    const char *p = strstr(name, ".data-");
    while (p && strstr(p + 1, ".data-"))
        p = strstr(p + 1, ".data-"); /* the last one: names may contain ".data-" themselves */
    if (!p || p == name || (size_t)(p - name) >= size)
        return 0;
    const char *q = p + 6;
    for (int i = 0; i < 5; i++)
        if (q[i] < '0' || q[i] > '9')
            return 0;
    if (strncmp(q + 5, "-of-", 4) != 0)
        return 0;
    for (int i = 9; i < 14; i++)
        if (q[i] < '0' || q[i] > '9')
            return 0;
    if (q[14] != '\0')
        return 0;
    memcpy(out, name, (size_t)(p - name));
    out[p - name] = '\0';
    return 1;
}

/* 1 for the temp files of ckpt__write_file_atomic: "<file>.tmp-<pid>" of an index or state file. */
static int is_atomic_temp(const char *name)
{
    const char *p = strstr(name, ".tmp-");
    if (!p || !p[5])
        return 0;
    for (const char *q = p + 5; *q; q++)
        if (*q < '0' || *q > '9')
            return 0;
    size_t stem = (size_t)(p - name);
    return (stem > 6 && strncmp(p - 6, ".index", 6) == 0) ||
           (stem == 10 && strncmp(name, "checkpoint", 10) == 0);
}

int ckpt_checkpoint_delete(const char *prefix)
{
    char dir[4096], base[4096], path[8400];
    int rc = ckpt__split_path(dir, sizeof dir, base, sizeof base, prefix);
    if (rc != CKPT_OK)
        return rc;
    /* Un-commit first: once the index is gone, no reader can pick up a half-deleted checkpoint. */
    if ((rc = ckpt__path(path, sizeof path, "%s.index", prefix)))
        return rc;
    if (unlink(path) != 0 && errno != ENOENT)
        return ckpt__errno(errno, "unlink", path);
    if ((rc = ckpt__fsync_path(dir)))
        return rc;
    DIR *d = opendir(dir);
    if (!d)
        return ckpt__errno(errno, "opendir", dir);
    struct dirent *e;
    char b[4096];
    while ((e = readdir(d)) != NULL) {
        if (!data_file_base(b, sizeof b, e->d_name) || strcmp(b, base) != 0)
            continue;
        if (ckpt__path(path, sizeof path, "%s/%s", dir, e->d_name) == CKPT_OK &&
            unlink(path) != 0 && errno != ENOENT && rc == CKPT_OK)
            rc = ckpt__errno(errno, "unlink", path);
    }
    closedir(d);
    return rc;
}

static int cmp_entry(const void *a, const void *b)
{
    const ckpt_state_entry *x = a, *y = b;
    if (x->save_counter != y->save_counter)
        return x->save_counter < y->save_counter ? -1 : 1;
    return strcmp(x->prefix, y->prefix);
}

int ckpt_state_scan(ckpt_state **out, const char *dir)
{
    int rc = ckpt_state_new(out);
    if (rc != CKPT_OK)
        return rc;
    ckpt_state *st = *out;
    DIR *d = opendir(dir);
    if (!d)
        return ckpt__errno(errno, "opendir", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && rc == CKPT_OK) {
        if (!ends_with(e->d_name, ".index") || strlen(e->d_name) - 6 >= sizeof st->latest)
            continue;
        char prefix[8400], ipath[8400];
        ckpt_state_entry ent;
        memset(&ent, 0, sizeof ent);
        snprintf(ent.prefix, sizeof ent.prefix, "%.*s", (int)(strlen(e->d_name) - 6), e->d_name);
        if (ckpt__path(prefix, sizeof prefix, "%s/%s", dir, ent.prefix) ||
            ckpt__path(ipath, sizeof ipath, "%s.index", prefix))
            continue;
        Mpickpt__Index *idx = NULL;
        if (ckpt__index_load(&idx, ipath) != CKPT_OK) {
            ckpt_error_clear();
            continue; /* damaged: not a committed checkpoint */
        }
        ent.save_counter = idx->header->save_counter;
        ent.epoch = idx->header->epoch;
        ent.step = idx->header->step;
        ent.timestamp = idx->header->timestamp;
        ent.end_of_epoch = idx->header->end_of_epoch;
        mpickpt__index__free_unpacked(idx, NULL);
        if (ckpt_checkpoint_bytes(&ent.bytes, prefix) != CKPT_OK)
            ent.bytes = 0;
        ckpt_state_entry *n = realloc(st->entries, (st->num_entries + 1) * sizeof *n);
        if (!n) {
            rc = ckpt__error(CKPT_ENOMEM, "out of memory");
            break;
        }
        st->entries = n;
        st->entries[st->num_entries++] = ent;
    }
    closedir(d);
    if (st->num_entries)
        qsort(st->entries, st->num_entries, sizeof *st->entries, cmp_entry);
    for (size_t i = 0; i < st->num_entries; i++)
        if (st->entries[i].save_counter > st->save_counter)
            st->save_counter = st->entries[i].save_counter;
    if (st->num_entries)
        snprintf(st->latest, sizeof st->latest, "%s", st->entries[st->num_entries - 1].prefix);
    return rc;
}

/* ---- garbage ----------------------------------------------------------------------------------- */

static int gc_remove(const char *path, const char *why, int dry_run, ckpt_gc_cb cb, void *payload,
                     size_t *count)
{
    int rc = dry_run ? CKPT_OK : ckpt__rmtree(path);
    if (rc == CKPT_OK) { /* report only what is really gone (or would be) */
        if (cb)
            cb(path, why, payload);
        (*count)++;
    }
    return rc;
}

/* Removes the workertemp_* directories found in `dir`. */
static int gc_workertemp(const char *dir, int dry_run, ckpt_gc_cb cb, void *payload, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? CKPT_OK : ckpt__errno(errno, "opendir", dir);
    int rc = CKPT_OK;
    struct dirent *e;
    char path[8400];
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "workertemp_", 11) != 0)
            continue;
        if (ckpt__path(path, sizeof path, "%s/%s", dir, e->d_name) == CKPT_OK) {
            int r = gc_remove(path, "in-flight parts of a non-chief rank", dry_run, cb, payload,
                              count);
            if (r != CKPT_OK && rc == CKPT_OK)
                rc = r;
        }
    }
    closedir(d);
    return rc;
}

int ckpt_gc(const char *dir_arg, int dry_run, ckpt_gc_cb cb, void *payload, size_t *removed)
{
    size_t count = 0;
    char dir[4096];
    int prc = ckpt__path(dir, sizeof dir, "%s", dir_arg);
    if (prc != CKPT_OK)
        return prc;
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = '\0'; /* "run/chief/" is "run/chief" */
    DIR *d = opendir(dir);
    if (!d)
        return ckpt__errno(errno, "opendir", dir);
    int rc = CKPT_OK;
    struct dirent *e;
    char path[8400], base[4096], ipath[8400];
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (ckpt__path(path, sizeof path, "%s/%s", dir, n) != CKPT_OK)
            continue;
        const char *why = NULL;
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && ends_with(n, "_temp"))
            why = "in-flight parts of an unfinished save";
        else if (S_ISREG(st.st_mode) && is_atomic_temp(n))
            why = "temp file of an unfinished index or state write";
        else if (S_ISREG(st.st_mode) && data_file_base(base, sizeof base, n) &&
                 ckpt__path(ipath, sizeof ipath, "%s/%s.index", dir, base) == CKPT_OK &&
                 access(ipath, F_OK) != 0)
            why = "data file of a checkpoint that was never committed (no index)";
        if (why) {
            int r = gc_remove(path, why, dry_run, cb, payload, &count);
            if (r != CKPT_OK && rc == CKPT_OK)
                rc = r;
        }
    }
    closedir(d);
    /* workertemp_<r> live next to chief/ in the training-state layout, else in the directory. */
    char parent[4096], last[4096];
    int r = ckpt__split_path(parent, sizeof parent, last, sizeof last, dir);
    if (r == CKPT_OK)
        r = gc_workertemp(strcmp(last, "chief") == 0 ? parent : dir, dry_run, cb, payload, &count);
    if (r != CKPT_OK && rc == CKPT_OK)
        rc = r;
    if (removed)
        *removed = count;
    return rc;
}
