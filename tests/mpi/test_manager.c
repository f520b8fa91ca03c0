/* Checkpoint manager and worker training state under MPI.
 * Usage: test_manager OUTDIR CASE [per-rank|shared|per-node]
 *
 * CASE (each a ctest entry; "all" runs every one in its own subdirectory of OUTDIR):
 *   retention   max_to_keep=3 over 7 saves: the state lists exactly ckpt-5..7 oldest first, the
 *               directory holds exactly their files and the state file; entries carry the saved
 *               epoch/step/end_of_epoch/bytes; counters continue after re-creating the manager,
 *               also when the state file is missing or damaged (scan); a custom name stem;
 *               max_to_keep 0 and -1 keep everything; min_step_interval skips (out == "") and
 *               force overrides, also after re-creating the manager.
 *   keep_hours  keep_every_n_hours = 0.5 s: which checkpoints TensorFlow's rule preserves on top
 *               of the newest max_to_keep, recomputed from the recorded commit timestamps with the
 *               manager's own arithmetic (so the verdict holds however long saves and sleeps
 *               take); 1 s sleeps before saves 1 and 5 make those two preserved whatever the
 *               delays; the bookkeeping survives re-creating the manager.
 *   fallback    restore_or_initialize past a damaged latest (a flipped tensor byte found with
 *               H5Dget_offset, a truncated data file, a deleted index, a deleted data file, and
 *               a missing state file): restores ckpt-2 exactly, skipped == 1, a warning naming
 *               ckpt-3 and the cause; a save afterwards is ckpt-4; everything damaged ->
 *               restored == 0 with CKPT_OK; a registration mismatch against a valid checkpoint is
 *               an error on every rank (no fallback).
 *   bcast       training state: a non-chief rank sees a stale copy of the directory; restore gives
 *               every rank the chief's epoch/step and exact values (both ways round); a backup
 *               made with mixed views lands in the chief's directory.
 *   initial     initial_epoch/initial_step with no backup, after end-of-epoch and mid-epoch
 *               backups.
 *   delete      delete_backup: the directory is gone on every rank, same status everywhere, a new
 *               training state starts fresh.
 *   gc          leftovers of a crashed save (temp dir, data without index, workertemp part, index
 *               and state temp files) removed at the next save (training dir and plain manager
 *               dir), committed checkpoints intact; ckpt_gc directly, and its dry run.
 *   workertemp  after every successful back_up every workertemp_<r> is empty or absent, also
 *               after injected failures (MPICKPT_FAULT); the chief keeps exactly one backup.
 *   pin         the restart control (`mpickpt pin`/`drop`, lib/restart.h) written by hand: a pin
 *               restores exactly the pinned checkpoint, the newer ones listed then are set aside
 *               (not restored, not deleted, not counted by retention) until the pin is cleared;
 *               a newer save is restored past the pin; a drop is skipped and deleted at the next
 *               save; a damaged or vanished pinned checkpoint is an error on every rank; a
 *               damaged control (bad records, a link) fails the manager's creation on every rank,
 *               and only warns when a running job reads it before a save.
 *   chosen      ckpt_manager_restore_step/_counter and ckpt_manager_restorable after the real CLI's
 *               `mpickpt drop DIR ckpt-3 ckpt-1` and `pin DIR ckpt-4` (MPICKPT_CLI): dropped and
 *               set-aside checkpoints are neither listed nor restored (CKPT_ENOTFOUND naming why
 *               and the command that undoes it), a step no checkpoint has names the restorable
 *               ones, a checkpoint behind the pin is restored when asked for, ranks asking for
 *               different steps get CKPT_EINVAL, a damaged chosen one is CKPT_ECORRUPT naming it
 *               (no other restored), every value exact on every rank.
 *   pin_big     (issue 29) a control of 1 MiB of distinct drop records, one of them dropping the
 *               newest checkpoint: the manager's creation skips it (latest, restore), a save
 *               deletes it by retention. Every rank parses the control at creation and before
 *               each save: that was quadratic (minutes under the sanitizers), now n log n; the
 *               TIMEOUT catches the old code, nothing here measures time.
 * Every check runs on every rank; every collective must return the same status everywhere.
 * A watchdog aborts the job (naming the case) when a collective call does not return. */
#include "mpi_check.h"
#include "coll.h"
#include "mpickpt.h"
#include "state_copy.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAXNAMES 256

static int g_rank, g_size;
static char g_out[2048];
static ckpt_layout g_layout = CKPT_LAYOUT_PER_RANK;

/* ---- watchdog ---- */


/* The per-case watchdog of mpi_check.h. */
#define begin_case(...) check_case(getenv("MPICKPT_TEST_VERBOSE") != NULL, __VA_ARGS__)

/* ---- log capture ---- */

#define LOG_MAX 256
typedef struct log_entry {
    int level;
    char msg[1024];
} log_entry;
static log_entry g_logs[LOG_MAX];
static int g_nlogs;

static void log_cb(ckpt_log_level level, const char *message, void *payload)
{
    (void)payload;
    if (getenv("MPICKPT_TEST_VERBOSE"))
        fprintf(stderr, "[rank %d] log %d: %s\n", g_rank, (int)level, message);
    if (g_nlogs < LOG_MAX) {
        g_logs[g_nlogs].level = (int)level;
        snprintf(g_logs[g_nlogs].msg, sizeof g_logs[g_nlogs].msg, "%s", message ? message : "");
        g_nlogs++;
    }
}

static void logs_clear(void)
{
    g_nlogs = 0;
}

/* A warning (or error) naming `name` (not as a prefix of a longer number: "ckpt-3" does not match
 * "ckpt-30") and containing one of the NULL-terminated `causes` (case-insensitive). Returns the
 * message or NULL. *named receives a warning naming `name` (any cause). */
static const char *logs_find(const char *name, const char *const *causes, const char **named)
{
    *named = NULL;
    for (int i = 0; i < g_nlogs; i++) {
        if (g_logs[i].level > CKPT_LOG_WARN)
            continue;
        const char *msg = g_logs[i].msg, *p = msg;
        int has = 0;
        size_t nl = strlen(name);
        while ((p = strstr(p, name)) != NULL) {
            if (!isdigit((unsigned char)p[nl])) {
                has = 1;
                break;
            }
            p += nl;
        }
        if (!has)
            continue;
        if (!*named)
            *named = msg;
        for (const char *const *c = causes; *c; c++)
            if (strcasestr(msg, *c))
                return msg;
    }
    return NULL;
}

static void logs_dump(const char *what)
{
    fprintf(stderr, "[rank %d] %s: %d log messages captured:\n", g_rank, what, g_nlogs);
    for (int i = 0; i < g_nlogs; i++)
        fprintf(stderr, "[rank %d]   level %d: %s\n", g_rank, g_logs[i].level, g_logs[i].msg);
}

/* Rank 0 must have logged a warning naming `name` and one of `causes`. */
static void expect_warning(const char *name, const char *const *causes, const char *what)
{
    if (g_rank != 0)
        return;
    const char *named = NULL;
    const char *hit = logs_find(name, causes, &named);
    CHECK_MSG(named != NULL, "%s: rank 0 logged no warning naming %s", what, name);
    if (named)
        CHECK_MSG(hit != NULL, "%s: the warning naming %s does not state the cause (one of \"%s\"...): %s",
                  what, name, causes[0], named);
    if (!hit)
        logs_dump(what);
}

/* ---- the model (model.h) ---- */

/* A saver with this rank's part of the model registered (as `v` says). */
static ckpt_saver *new_saver(tm_model *m, tm_variant v)
{
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, g_layout, 0, 0);
    CHECK_OK(tm_init(m, g_size, g_rank, g_size, 0));
    CHECK_OK(tm_register_variant(m, s, v));
    return s;
}

/* ---- collective checks ---- */

/* FNV-1a, for comparing strings and states over the ranks. */
static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * UINT64_C(1099511628211);
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return fnv_bytes(h, s, strlen(s) + 1);
}

#define HASH0 UINT64_C(14695981039346656037)

/* `v` is the same on every rank. */
static void same_i64(int64_t v, const char *field, const char *what)
{
    int64_t mn, mx;
    MPI_Allreduce(&v, &mn, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &mx, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(mn == mx, "%s: %s differs between ranks (min %" PRId64 ", max %" PRId64 ")", what,
              field, mn, mx);
}

static void same_str(const char *s, const char *field, const char *what)
{
    uint64_t h = fnv_str(HASH0, s), mn, mx;
    MPI_Allreduce(&h, &mn, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &mx, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(mn == mx, "%s: %s differs between ranks; this rank: \"%s\"", what, field, s);
}

/* ---- file-system helpers ---- */

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* Recursive copy of directories and regular files (rank 0 makes a "stale view"). */
static int copy_tree(const char *src, const char *dst)
{
    struct stat st;
    if (stat(src, &st) != 0)
        return -1;
    if (S_ISDIR(st.st_mode)) {
        if (mkdir(dst, 0755) != 0 && errno != EEXIST)
            return -1;
        DIR *d = opendir(src);
        if (!d)
            return -1;
        struct dirent *de;
        int rc = 0;
        while (rc == 0 && (de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char s2[4096], d2[4096];
            snprintf(s2, sizeof s2, "%s/%s", src, de->d_name);
            snprintf(d2, sizeof d2, "%s/%s", dst, de->d_name);
            rc = copy_tree(s2, d2);
        }
        closedir(d);
        return rc;
    }
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = (in >= 0 && out >= 0) ? 0 : -1;
    char buf[65536];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            rc = -1;
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0)
        rc = -1;
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Sorted entries of `dir` (without . and ..); -1 when it cannot be listed. */
static int list_dir(const char *dir, char (*names)[256], int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n < max)
            snprintf(names[n++], 256, "%s", de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 256, cmp_str);
    return n;
}

static void data_name(char *out, size_t n, const char *stem, int64_t counter, int file, int nfiles)
{
    snprintf(out, n, "%s-%" PRId64 ".data-%05d-of-%05d", stem, counter, file, nfiles);
}

static int num_data_files(void)
{
    return tm_data_files(g_layout, g_size); /* per-node: one per node (model.h) */
}

/* Files a checkpoint directory may hold besides checkpoints and the state file: the saver's
 * per-save metrics log, the directory's lock (made by the first manager on it). */
static const char *const optional_files[] = { "metrics.jsonl", "lock", NULL };

/* The directory holds exactly the files of checkpoints `ns` (stem `stem`), the state file and the
 * NULL-terminated `extra` names. Checked on every rank. */
static void expect_dir(const char *dir, const char *stem, const int64_t *ns, int n,
                       const char *const *extra, const char *what)
{
    static char want[MAXNAMES][256], have[MAXNAMES][256];
    int nw = 0;
    snprintf(want[nw++], 256, "checkpoint");
    for (int i = 0; i < n; i++) {
        snprintf(want[nw++], 256, "%s-%" PRId64 ".index", stem, ns[i]);
        for (int f = 0; f < num_data_files(); f++)
            data_name(want[nw++], 256, stem, ns[i], f, num_data_files());
    }
    for (const char *const *e = extra; e && *e; e++)
        snprintf(want[nw++], 256, "%s", *e);
    qsort(want, (size_t)nw, 256, cmp_str);
    int nh = list_dir(dir, have, MAXNAMES);
    CHECK_MSG(nh >= 0, "%s: cannot list %s", what, dir);
    if (nh < 0)
        return;
    /* files of other features that may or may not be there */
    for (int k = 0; k < nh;) {
        int optional = 0;
        for (const char *const *o = optional_files; *o; o++)
            optional |= strcmp(have[k], *o) == 0;
        if (optional) {
            memmove(have[k], have[k + 1], 256 * (size_t)(nh - k - 1));
            nh--;
        } else {
            k++;
        }
    }
    int i = 0, j = 0, bad = 0;
    while (i < nw || j < nh) {
        int c = i >= nw ? 1 : j >= nh ? -1 : strcmp(want[i], have[j]);
        if (c < 0) {
            CHECK_MSG(0, "%s: %s/%s is missing", what, dir, want[i]);
            i++;
            bad++;
        } else if (c > 0) {
            CHECK_MSG(0, "%s: unexpected %s/%s", what, dir, have[j]);
            j++;
            bad++;
        } else {
            i++;
            j++;
        }
    }
    if (bad && g_rank == 0) {
        fprintf(stderr, "[rank 0] %s: %s holds:", what, dir);
        for (int k = 0; k < nh; k++)
            fprintf(stderr, " %s", have[k]);
        fprintf(stderr, "\n");
    }
    check_count++;
}

/* Every workertemp_* directory in `dir` is empty (and this rank's own is empty or absent). */
static void expect_workertemp_clean(const char *dir, const char *what)
{
    char own[4096];
    snprintf(own, sizeof own, "%s/workertemp_%d", dir, g_rank);
    static char names[MAXNAMES][256], inner[MAXNAMES][256];
    int ni = list_dir(own, inner, MAXNAMES);
    CHECK_MSG(ni <= 0, "%s: %s holds %d entries (first: %s)", what, own, ni,
              ni > 0 ? inner[0] : "");
    int n = list_dir(dir, names, MAXNAMES);
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "workertemp_", 11) != 0)
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        ni = list_dir(p, inner, MAXNAMES);
        CHECK_MSG(ni == 0, "%s: %s is not an empty directory (%d entries, first: %s)", what, p, ni,
                  ni > 0 ? inner[0] : "");
    }
}

/* No `*_temp` directory, `*.tmp-*` file or data file without its index in `dir`. */
static void expect_no_leftovers(const char *dir, const char *what)
{
    static char names[MAXNAMES][256];
    int n = list_dir(dir, names, MAXNAMES);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(!ends_with(names[i], "_temp"), "%s: temp directory left: %s/%s", what, dir,
                  names[i]);
        CHECK_MSG(strstr(names[i], ".tmp") == NULL, "%s: temp file left: %s/%s", what, dir,
                  names[i]);
        const char *d = strstr(names[i], ".data-");
        if (d) {
            char idx[4096];
            snprintf(idx, sizeof idx, "%s/%.*s.index", dir, (int)(d - names[i]), names[i]);
            CHECK_MSG(exists(idx), "%s: data file without an index: %s/%s", what, dir, names[i]);
        }
    }
}

static void barrier(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- damage (rank 0) ---- */

/* The last data file of checkpoint `stem-N` in `dir` (highest file number). */
static void last_data_file(char *out, size_t n, const char *dir, const char *stem, int64_t counter)
{
    char name[256];
    data_name(name, sizeof name, stem, counter, num_data_files() - 1, num_data_files());
    snprintf(out, n, "%s/%s", dir, name);
}

typedef enum damage {
    DMG_FLIP,     /* a byte of a tensor's elements: CRC mismatch */
    DMG_TRUNCATE, /* a data file cut in half */
    DMG_NOINDEX,  /* the index deleted */
    DMG_NODATA,   /* a data file deleted */
} damage;

static const char *damage_name(damage d)
{
    switch (d) {
    case DMG_FLIP: return "flipped tensor byte";
    case DMG_TRUNCATE: return "truncated data file";
    case DMG_NOINDEX: return "deleted index";
    case DMG_NODATA: return "deleted data file";
    }
    return "?";
}

static const char *const causes_flip[] = { "crc", "checksum", "corrupt", NULL };
static const char *const causes_trunc[] = { "size", "truncat", "bytes", "short", "corrupt", NULL };
static const char *const causes_noindex[] = { "index", NULL };
static const char *const causes_nodata[] = { "data", "missing", "no such", "not found", NULL };

static const char *const *damage_causes(damage d)
{
    switch (d) {
    case DMG_FLIP: return causes_flip;
    case DMG_TRUNCATE: return causes_trunc;
    case DMG_NOINDEX: return causes_noindex;
    case DMG_NODATA: return causes_nodata;
    }
    return causes_flip;
}

/* Rank 0 damages `dir/stem-N`; collective (barrier after). */
static void damage_ckpt(const char *dir, int64_t counter, damage d, const char *what)
{
    if (g_rank == 0) {
        char prefix[4096], p[4400];
        snprintf(prefix, sizeof prefix, "%s/ckpt-%" PRId64, dir, counter);
        int ok = 0;
        switch (d) {
        case DMG_FLIP:
            ok = tm_flip_piece_byte(prefix, "w", g_size - 1, NULL, 0) == CKPT_OK;
            break;
        case DMG_TRUNCATE:
            last_data_file(p, sizeof p, dir, "ckpt", counter);
            ok = file_size(p) > 0 && truncate(p, file_size(p) / 2) == 0;
            break;
        case DMG_NOINDEX:
            snprintf(p, sizeof p, "%s.index", prefix);
            ok = unlink(p) == 0;
            break;
        case DMG_NODATA:
            last_data_file(p, sizeof p, dir, "ckpt", counter);
            ok = unlink(p) == 0;
            break;
        }
        CHECK_MSG(ok, "%s: cannot damage %s (%s)", what, prefix, damage_name(d));
    }
    barrier();
}

/* ---- manager helpers ---- */

typedef struct meta {
    int64_t epoch, step;
    int eoe;
} meta;

/* Bytes of checkpoint stem-N in dir: index + data files (stat). */
static int64_t ckpt_bytes_on_disk(const char *dir, const char *stem, int64_t counter)
{
    char p[4400], name[256];
    snprintf(p, sizeof p, "%s/%s-%" PRId64 ".index", dir, stem, counter);
    int64_t total = file_size(p);
    if (total < 0)
        return -1;
    for (int f = 0; f < num_data_files(); f++) {
        data_name(name, sizeof name, stem, counter, f, num_data_files());
        snprintf(p, sizeof p, "%s/%s", dir, name);
        int64_t b = file_size(p);
        if (b < 0)
            return -1;
        total += b;
    }
    return total;
}

static uint64_t state_hash(const ckpt_state *st)
{
    uint64_t h = HASH0;
    if (!st)
        return 0;
    h = fnv_str(h, st->latest);
    h = fnv_bytes(h, &st->num_entries, sizeof st->num_entries);
    h = fnv_bytes(h, &st->save_counter, sizeof st->save_counter);
    h = fnv_bytes(h, &st->last_preserved_timestamp, sizeof st->last_preserved_timestamp);
    for (size_t i = 0; i < st->num_entries; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        h = fnv_str(h, e->prefix);
        h = fnv_bytes(h, &e->save_counter, sizeof e->save_counter);
        h = fnv_bytes(h, &e->epoch, sizeof e->epoch);
        h = fnv_bytes(h, &e->step, sizeof e->step);
        h = fnv_bytes(h, &e->timestamp, sizeof e->timestamp);
        h = fnv_bytes(h, &e->bytes, sizeof e->bytes);
        h = fnv_bytes(h, &e->end_of_epoch, sizeof e->end_of_epoch);
        h = fnv_bytes(h, &e->preserved, sizeof e->preserved);
    }
    return h;
}

/* The manager's state lists exactly `ns` (oldest first) with their metadata (`metas` indexed by
 * counter; NULL: not checked), latest = the last one, the same on every rank. */
static void expect_state(const ckpt_manager *mg, const char *dir, const char *stem,
                         const int64_t *ns, int n, const meta *metas, const char *what)
{
    const ckpt_state *st = test_manager_state(mg);
    CHECK_MSG(st != NULL, "%s: ckpt_manager_state returned NULL", what);
    uint64_t h = state_hash(st), mn, mx;
    MPI_Allreduce(&h, &mn, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &mx, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(mn == mx, "%s: the manager state differs between ranks", what);
    if (!st)
        return;
    char want[256], listed[1024] = "";
    for (size_t i = 0; i < st->num_entries; i++) {
        size_t l = strlen(listed);
        snprintf(listed + l, sizeof listed - l, "%s%s", i ? " " : "", st->entries[i].prefix);
    }
    CHECK_MSG(st->num_entries == (size_t)n, "%s: the state lists %zu checkpoints (%s), expected %d",
              what, st->num_entries, listed, n);
    for (int i = 0; i < n && (size_t)i < st->num_entries; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        snprintf(want, sizeof want, "%s-%" PRId64, stem, ns[i]);
        CHECK_MSG(strcmp(e->prefix, want) == 0, "%s: state entry %d is \"%s\", expected \"%s\" (%s)",
                  what, i, e->prefix, want, listed);
        CHECK_MSG(e->save_counter == ns[i], "%s: %s has save_counter %" PRId64, what, want,
                  e->save_counter);
        if (metas) {
            const meta *mt = &metas[ns[i]];
            CHECK_MSG(e->epoch == mt->epoch && e->step == mt->step && e->end_of_epoch == mt->eoe,
                      "%s: %s records epoch %" PRId64 " step %" PRId64 " end_of_epoch %d, saved "
                      "with %" PRId64 "/%" PRId64 "/%d",
                      what, want, e->epoch, e->step, e->end_of_epoch, mt->epoch, mt->step, mt->eoe);
        }
        int64_t b = ckpt_bytes_on_disk(dir, stem, ns[i]);
        CHECK_MSG(b >= 0 && e->bytes == (uint64_t)b,
                  "%s: %s records %" PRIu64 " bytes, index + data files hold %" PRId64, what, want,
                  e->bytes, b);
        if (i > 0)
            CHECK_MSG(e->timestamp >= st->entries[i - 1].timestamp,
                      "%s: timestamps not in order (%s %.3f after %.3f)", what, want, e->timestamp,
                      st->entries[i - 1].timestamp);
        CHECK_MSG(e->timestamp > 1.5e9 && e->timestamp <= now_s() + 5,
                  "%s: %s has timestamp %.3f", what, want, e->timestamp);
    }
    if (n > 0) {
        snprintf(want, sizeof want, "%s-%" PRId64, stem, ns[n - 1]);
        CHECK_MSG(strcmp(st->latest, want) == 0, "%s: state latest \"%s\", expected \"%s\"", what,
                  st->latest, want);
        char lp[4096] = "x";
        CHECK_OK(ckpt_manager_latest(mg, lp, sizeof lp));
        CHECK_MSG(strcmp(base_of(lp), want) == 0 && strchr(lp, '/') != NULL,
                  "%s: ckpt_manager_latest is \"%s\", expected <dir>/%s", what, lp, want);
    } else {
        CHECK_MSG(st->latest[0] == '\0', "%s: state latest \"%s\", expected none", what, st->latest);
        char lp[4096] = "x";
        CHECK_OK(ckpt_manager_latest(mg, lp, sizeof lp));
        CHECK_MSG(lp[0] == '\0', "%s: ckpt_manager_latest is \"%s\", expected \"\"", what, lp);
    }
}

/* The state file on disk (read by every rank) lists the same checkpoints as the manager. */
static void expect_state_file(const ckpt_manager *mg, const char *dir, const char *what)
{
    ckpt_state *fs = NULL;
    int rc = ckpt_state_read(&fs, dir);
    CHECK_MSG(rc == CKPT_OK, "%s: ckpt_state_read(%s) returned %s: %s", what, dir,
              ckpt_strerror(rc), msg_of());
    const ckpt_state *st = test_manager_state(mg);
    if (rc == CKPT_OK && fs && st) {
        CHECK_MSG(strcmp(fs->latest, st->latest) == 0,
                  "%s: state file latest \"%s\", manager \"%s\"", what, fs->latest, st->latest);
        CHECK_MSG(fs->num_entries == st->num_entries,
                  "%s: state file lists %zu, manager %zu", what, fs->num_entries, st->num_entries);
        for (size_t i = 0; i < fs->num_entries && i < st->num_entries; i++)
            CHECK_MSG(strcmp(fs->entries[i].prefix, st->entries[i].prefix) == 0,
                      "%s: state file entry %zu \"%s\", manager \"%s\"", what, i,
                      fs->entries[i].prefix, st->entries[i].prefix);
        CHECK_MSG(fs->save_counter == st->save_counter,
                  "%s: state file save_counter %" PRId64 ", manager %" PRId64, what,
                  fs->save_counter, st->save_counter);
    }
    ckpt_state_free(fs);
}

static ckpt_manager *new_manager(ckpt_saver *s, const char *dir, int max_to_keep,
                                 double keep_hours, int64_t min_step, const char *name,
                                 const char *what)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = max_to_keep;
    o.keep_every_n_hours = keep_hours;
    o.min_step_interval = min_step;
    o.name = name;
    ckpt_manager *mg = NULL;
    char w[512];
    snprintf(w, sizeof w, "%s: ckpt_manager_create", what);
    int rc = ckpt_manager_create(&mg, s, dir, &o);
    if (!coll(rc, CKPT_OK, w) || !mg) {
        if (mg)
            ckpt_manager_free(mg);
        return NULL;
    }
    return mg;
}

/* A manager save that must write `stem-<expect>` (expect 0: must be skipped). */
static void msave(ckpt_manager *mg, tm_model *m, const meta *mt, int force, const char *stem,
                  int64_t expect, const char *what)
{
    tm_fill(m, mt->step);
    ckpt_manager_save_info si = { mt->epoch, mt->step, mt->eoe, force };
    char out[4096] = "not-touched", w[512];
    snprintf(w, sizeof w, "%s: save at step %" PRId64, what, mt->step);
    int rc = ckpt_manager_save(mg, &si, out, sizeof out);
    if (!coll(rc, CKPT_OK, w))
        return;
    same_str(out, "the saved name", w);
    if (expect == 0) {
        CHECK_MSG(out[0] == '\0', "%s: expected a skipped save (out == \"\"), got \"%s\"", w, out);
    } else {
        char want[256];
        snprintf(want, sizeof want, "%s-%" PRId64, stem, expect);
        CHECK_MSG(strcmp(base_of(out), want) == 0, "%s: saved \"%s\", expected <dir>/%s", w, out,
                  want);
    }
}

typedef struct restored_want {
    int restored;
    int64_t counter, epoch, step;
    int eoe;
    int skipped;
} restored_want;

/* restore_or_initialize into a clobbered model; checks the result, the values (when restored)
 * and that every rank agrees. */
static void mrestore(ckpt_manager *mg, tm_model *m, const restored_want *want, const char *what)
{
    tm_sentinel(m);
    ckpt_manager_restore_result r;
    memset(&r, 0x5a, sizeof r);
    r.version = CKPT_MANAGER_RESTORE_RESULT_VERSION;
    char w[512];
    snprintf(w, sizeof w, "%s: restore_or_initialize", what);
    int rc = ckpt_manager_restore_latest(&r, mg);
    if (!coll(rc, CKPT_OK, w))
        return;
    same_i64(r.restored, "restored", w);
    same_i64(r.skipped, "skipped", w);
    CHECK_MSG(r.restored == want->restored, "%s: restored = %d, expected %d", w, r.restored,
              want->restored);
    CHECK_MSG(r.skipped == want->skipped, "%s: skipped = %d, expected %d", w, r.skipped,
              want->skipped);
    if (!want->restored || r.restored != 1)
        return;
    same_str(r.prefix, "prefix", w);
    same_i64(r.save_counter, "save_counter", w);
    same_i64(r.epoch, "epoch", w);
    same_i64(r.step, "step", w);
    same_i64(r.end_of_epoch, "end_of_epoch", w);
    char name[64];
    snprintf(name, sizeof name, "ckpt-%" PRId64, want->counter);
    CHECK_MSG(strcmp(base_of(r.prefix), name) == 0, "%s: restored \"%s\", expected <dir>/%s", w,
              r.prefix, name);
    CHECK_MSG(r.save_counter == want->counter && r.epoch == want->epoch && r.step == want->step &&
                  r.end_of_epoch == want->eoe,
              "%s: counter/epoch/step/end_of_epoch = %" PRId64 "/%" PRId64 "/%" PRId64 "/%d, "
              "expected %" PRId64 "/%" PRId64 "/%" PRId64 "/%d",
              w, r.save_counter, r.epoch, r.step, r.end_of_epoch, want->counter, want->epoch,
              want->step, want->eoe);
    check_model(m, want->step, TM_RESTORED_LAST, w);
}

/* ---- case 1: retention, counters, min_step_interval ---- */

static void retention_run(int max_to_keep, int nsaves, const char *sub)
{
    char dir[4096], what[256];
    snprintf(dir, sizeof dir, "%s/%s", g_out, sub);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_manager *mg = new_manager(s, dir, max_to_keep, 0, 0, NULL, sub);
    if (!mg) {
        ckpt_saver_free(s);
        return;
    }
    meta metas[32];
    memset(metas, 0, sizeof metas);
    snprintf(what, sizeof what, "%s: fresh manager", sub);
    expect_state(mg, dir, "ckpt", NULL, 0, metas, what);
    int64_t ns[32];
    for (int i = 1; i <= nsaves; i++) {
        metas[i] = (meta){ i / 2, 10 * i + 1, i % 2 };
        snprintf(what, sizeof what, "%s: save %d", sub, i);
        msave(mg, &m, &metas[i], 0, "ckpt", i, what);
        int lo = (max_to_keep > 0 && i > max_to_keep) ? i - max_to_keep + 1 : 1, n = 0;
        for (int k = lo; k <= i; k++)
            ns[n++] = k;
        expect_state(mg, dir, "ckpt", ns, n, metas, what);
        expect_dir(dir, "ckpt", ns, n, NULL, what);
    }
    int n = 0, lo = (max_to_keep > 0 && nsaves > max_to_keep) ? nsaves - max_to_keep + 1 : 1;
    for (int k = lo; k <= nsaves; k++)
        ns[n++] = k;
    snprintf(what, sizeof what, "%s: after %d saves", sub, nsaves);
    expect_state_file(mg, dir, what);
    CHECK_EQ_INT(test_manager_state(mg)->save_counter, nsaves);
    ckpt_manager_free(mg);

    /* A new manager on the same directory continues the numbering. */
    snprintf(what, sizeof what, "%s: re-created manager", sub);
    mg = new_manager(s, dir, max_to_keep, 0, 0, NULL, what);
    if (mg) {
        expect_state(mg, dir, "ckpt", ns, n, metas, what);
        metas[nsaves + 1] = (meta){ 9, 1000 + nsaves, 1 };
        msave(mg, &m, &metas[nsaves + 1], 0, "ckpt", nsaves + 1, what);
        if (max_to_keep > 0 && n == max_to_keep) {
            memmove(ns, ns + 1, sizeof ns[0] * (size_t)(n - 1));
            n--;
        }
        ns[n++] = nsaves + 1;
        expect_state(mg, dir, "ckpt", ns, n, metas, what);
        expect_dir(dir, "ckpt", ns, n, NULL, what);
        restored_want rw = { 1, nsaves + 1, 9, 1000 + nsaves, 1, 0 };
        mrestore(mg, &m, &rw, what);
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);
}

static void test_retention(void)
{
    begin_case("retention: max_to_keep=3, 7 saves");
    char dir[4096], what[256];
    snprintf(dir, sizeof dir, "%s/keep3", g_out);
    retention_run(3, 7, "keep3");

    /* The state file missing, then damaged: a new manager scans the directory. */
    begin_case("retention: state file missing or damaged");
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    meta metas[32];
    memset(metas, 0, sizeof metas);
    metas[6] = (meta){ 3, 61, 0 };
    metas[7] = (meta){ 3, 71, 1 };
    metas[8] = (meta){ 9, 1007, 1 };
    char state_path[4200];
    snprintf(state_path, sizeof state_path, "%s/checkpoint", dir);
    if (g_rank == 0)
        CHECK_MSG(unlink(state_path) == 0, "cannot delete %s", state_path);
    barrier();
    snprintf(what, sizeof what, "retention: no state file");
    ckpt_manager *mg = new_manager(s, dir, 3, 0, 0, NULL, what);
    if (mg) {
        int64_t ns[3] = { 6, 7, 8 };
        expect_state(mg, dir, "ckpt", ns, 3, metas, what);
        metas[9] = (meta){ 10, 1100, 0 };
        msave(mg, &m, &metas[9], 0, "ckpt", 9, what);
        int64_t ns2[3] = { 7, 8, 9 };
        expect_state(mg, dir, "ckpt", ns2, 3, metas, what);
        expect_dir(dir, "ckpt", ns2, 3, NULL, what);
        expect_state_file(mg, dir, what);
        ckpt_manager_free(mg);
    }
    barrier(); /* everybody has read the state file */
    if (g_rank == 0)
        CHECK_MSG(truncate(state_path, 11) == 0, "cannot truncate %s", state_path);
    barrier();
    snprintf(what, sizeof what, "retention: damaged state file");
    mg = new_manager(s, dir, 3, 0, 0, NULL, what);
    if (mg) {
        int64_t ns[3] = { 7, 8, 9 };
        expect_state(mg, dir, "ckpt", ns, 3, metas, what);
        restored_want rw = { 1, 9, 10, 1100, 0, 0 };
        mrestore(mg, &m, &rw, what);
        metas[10] = (meta){ 10, 1200, 1 };
        msave(mg, &m, &metas[10], 0, "ckpt", 10, what);
        int64_t ns2[3] = { 8, 9, 10 };
        expect_state(mg, dir, "ckpt", ns2, 3, metas, what);
        expect_dir(dir, "ckpt", ns2, 3, NULL, what);
        expect_state_file(mg, dir, what);
        ckpt_manager_free(mg);
    }

    /* A custom name stem (a new saver: the counter belongs to the saver, like TensorFlow's
     * save_counter, so the old one would go on from 10). */
    begin_case("retention: name \"model\", max_to_keep=2");
    ckpt_saver_free(s);
    s = new_saver(&m, TM_REG_OK);
    snprintf(dir, sizeof dir, "%s/named", g_out);
    mg = new_manager(s, dir, 2, 0, 0, "model", "named");
    if (mg) {
        for (int i = 1; i <= 3; i++) {
            metas[i] = (meta){ i, i, 1 };
            msave(mg, &m, &metas[i], 0, "model", i, "named");
        }
        int64_t ns[2] = { 2, 3 };
        expect_state(mg, dir, "model", ns, 2, metas, "named");
        expect_dir(dir, "model", ns, 2, NULL, "named");
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);

    begin_case("retention: max_to_keep=0 keeps all");
    retention_run(0, 6, "keep0");
    begin_case("retention: max_to_keep=-1 keeps all");
    retention_run(-1, 3, "keepneg");

    /* min_step_interval = 10 */
    begin_case("retention: min_step_interval");
    snprintf(dir, sizeof dir, "%s/minstep", g_out);
    s = new_saver(&m, TM_REG_OK);
    mg = new_manager(s, dir, 0, 0, 10, NULL, "minstep");
    if (mg) {
        memset(metas, 0, sizeof metas);
        meta m10 = { 1, 10, 0 }, m19 = { 1, 19, 0 }, m28 = { 2, 28, 0 }, m29 = { 2, 29, 1 },
             m30 = { 3, 30, 0 };
        msave(mg, &m, &m10, 0, "ckpt", 1, "minstep: first save");
        metas[1] = m10;
        msave(mg, &m, &m19, 0, "ckpt", 0, "minstep: 9 steps later");
        int64_t ns1[1] = { 1 };
        expect_state(mg, dir, "ckpt", ns1, 1, metas, "minstep: after a skipped save");
        expect_dir(dir, "ckpt", ns1, 1, NULL, "minstep: after a skipped save");
        msave(mg, &m, &m19, 1, "ckpt", 2, "minstep: forced");
        metas[2] = m19;
        msave(mg, &m, &m28, 0, "ckpt", 0, "minstep: 9 steps after the forced one");
        msave(mg, &m, &m29, 0, "ckpt", 3, "minstep: 10 steps after the forced one");
        metas[3] = m29;
        int64_t ns3[3] = { 1, 2, 3 };
        expect_state(mg, dir, "ckpt", ns3, 3, metas, "minstep");
        expect_dir(dir, "ckpt", ns3, 3, NULL, "minstep");
        ckpt_manager_free(mg);
        /* the last saved step comes from the state file */
        mg = new_manager(s, dir, 0, 0, 10, NULL, "minstep: re-created");
        if (mg) {
            msave(mg, &m, &m30, 0, "ckpt", 0, "minstep: re-created, 1 step after the last");
            expect_state(mg, dir, "ckpt", ns3, 3, metas, "minstep: re-created, skipped");
            msave(mg, &m, &m30, 1, "ckpt", 4, "minstep: re-created, forced");
            metas[4] = m30;
            restored_want rw = { 1, 4, 3, 30, 0, 0 };
            mrestore(mg, &m, &rw, "minstep: re-created");
            ckpt_manager_free(mg);
        }
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case 1b: keep_every_n_hours ---- */

#define KEEP_S 0.5
/* The option as the manager gets it; the simulation compares with KEEP_HOURS * 3600.0 exactly as
 * apply_retention does, so that both decide alike even at the threshold. */
#define KEEP_HOURS (KEEP_S / 3600.0)

typedef struct sweep_sim {
    int64_t maybe[64];
    double maybe_ts[64];
    int nmaybe;
    int64_t preserved[64];
    int npreserved;
    double last;
} sweep_sim;

/* TensorFlow's CheckpointManager._sweep after appending checkpoint n (timestamp ts), fed with the
 * commit timestamps the manager recorded: whatever the delays, it must decide as the manager. */
static void sim_save(sweep_sim *sm, int64_t n, double ts, int max_to_keep)
{
    sm->maybe[sm->nmaybe] = n;
    sm->maybe_ts[sm->nmaybe++] = ts;
    while (sm->nmaybe > max_to_keep) {
        int64_t old = sm->maybe[0];
        double ots = sm->maybe_ts[0];
        memmove(sm->maybe, sm->maybe + 1, sizeof sm->maybe[0] * (size_t)(sm->nmaybe - 1));
        memmove(sm->maybe_ts, sm->maybe_ts + 1, sizeof sm->maybe_ts[0] * (size_t)(sm->nmaybe - 1));
        sm->nmaybe--;
        double keep_hours = KEEP_HOURS; /* a double variable, as in the manager's options */
        if (ots - sm->last >= keep_hours * 3600.0) {
            sm->last = ots;
            sm->preserved[sm->npreserved++] = old;
        }
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* What the simulation keeps on disk (sorted). */
static int sim_kept(const sweep_sim *sm, int64_t *out)
{
    int n = 0;
    for (int i = 0; i < sm->npreserved; i++)
        out[n++] = sm->preserved[i];
    for (int i = 0; i < sm->nmaybe; i++)
        out[n++] = sm->maybe[i];
    qsort(out, (size_t)n, sizeof out[0], cmp_i64);
    return n;
}

static void kept_str(char *buf, size_t size, const int64_t *ns, int n)
{
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, size - l, "%s%" PRId64, i ? "," : "", ns[i]);
    }
}

/* What is on disk and in the state is exactly what TensorFlow's rule keeps: the preserved ones
 * (listed with preserved = 1) and the newest max_to_keep; last_preserved_timestamp is the commit
 * time of the last preserved one. */
static void keep_check(ckpt_manager *mg, const char *dir, const sweep_sim *sm, const meta *metas,
                       const char *what)
{
    int64_t kept[64];
    int nk = sim_kept(sm, kept);
    char ks[256];
    kept_str(ks, sizeof ks, kept, nk);
    expect_dir(dir, "ckpt", kept, nk, NULL, what);
    expect_state(mg, dir, "ckpt", kept, nk, metas, what);
    const ckpt_state *st = test_manager_state(mg);
    if (!st)
        return;
    for (size_t i = 0; i < st->num_entries; i++) {
        int want = 0;
        for (int j = 0; j < sm->npreserved; j++)
            want |= st->entries[i].save_counter == sm->preserved[j];
        CHECK_MSG(st->entries[i].preserved == want, "%s: %s has preserved = %d, expected %d (kept "
                  "%s)", what, st->entries[i].prefix, st->entries[i].preserved, want, ks);
    }
    if (sm->npreserved > 0)
        CHECK_MSG(st->last_preserved_timestamp == sm->last,
                  "%s: last_preserved_timestamp %.6f, expected %.6f (the commit time of ckpt-%" PRId64
                  ", the last preserved)",
                  what, st->last_preserved_timestamp, sm->last,
                  sm->preserved[sm->npreserved - 1]);
}

static double newest_ts(const ckpt_manager *mg)
{
    const ckpt_state *st = test_manager_state(mg);
    return (st && st->num_entries) ? st->entries[st->num_entries - 1].timestamp : 0;
}

static void test_keep_hours(void)
{
    begin_case("keep_every_n_hours");
    char dir[4096], what[256];
    snprintf(dir, sizeof dir, "%s/keephours", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    const int keep = 2;
    ckpt_manager *mg = new_manager(s, dir, keep, KEEP_HOURS, 0, NULL, "keep_hours");
    if (!mg) {
        ckpt_saver_free(s);
        return;
    }
    sweep_sim sm;
    memset(&sm, 0, sizeof sm);
    /* the manager's starting point (its creation time; TensorFlow's is the creation time - 1 s) */
    sm.last = test_manager_state(mg)->last_preserved_timestamp;
    same_i64((int64_t)(sm.last * 1e6), "initial last_preserved_timestamp", "keep_hours");
    CHECK_MSG(sm.last > 1.5e9, "keep_hours: initial last_preserved_timestamp %.6f", sm.last);
    meta metas[32];
    memset(metas, 0, sizeof metas);
    /* Sleeps of 2 KEEP_S before saves 1 and 5: ckpt-1 is committed at least 1 s after the
     * manager's starting point and ckpt-5 at least 1 s after ckpt-4, so both are preserved
     * however long anything takes (a sleep or a save that lasts longer only widens the gaps). */
    for (int i = 1; i <= 7; i++) {
        if (i == 1 || i == 5)
            sleep_s(2 * KEEP_S);
        barrier();
        metas[i] = (meta){ 0, i, 0 };
        snprintf(what, sizeof what, "keep_hours: save %d", i);
        msave(mg, &m, &metas[i], 0, "ckpt", i, what);
        double ts = newest_ts(mg);
        same_i64((int64_t)(ts * 1e6), "commit timestamp", what);
        sim_save(&sm, i, ts, keep);
        keep_check(mg, dir, &sm, metas, what);
    }
    int64_t kept[64];
    int nk = sim_kept(&sm, kept);
    char ks[256];
    kept_str(ks, sizeof ks, kept, nk);
    int64_t typical[4] = { 1, 5, 6, 7 };
    int same = nk == 4 && memcmp(kept, typical, sizeof typical) == 0;
    if (g_rank == 0 && !same)
        printf("  keep_hours: saves were slow; kept %s (checked against the commit times) "
               "instead of the usual 1,5,6,7\n",
               ks);
    /* What holds whatever the delays: 1 and 5 preserved, the newest two kept. */
    int p1 = 0, p5 = 0;
    for (int j = 0; j < sm.npreserved; j++) {
        p1 |= sm.preserved[j] == 1;
        p5 |= sm.preserved[j] == 5;
    }
    CHECK_MSG(p1 && p5, "keep_hours: ckpt-1 and ckpt-5 must be preserved (kept %s)", ks);
    CHECK_MSG(nk >= 4 && kept[nk - 2] == 6 && kept[nk - 1] == 7,
              "keep_hours: the newest two are not kept (kept %s)", ks);
    ckpt_manager_free(mg);

    /* The bookkeeping survives a new manager: it starts from the last preserved commit time, so
     * ckpt-6 (usually committed right after ckpt-5, the last preserved) is deleted at the next
     * save, not preserved -- or kept, as the simulation says, if that save was slow. */
    begin_case("keep_every_n_hours: re-created manager");
    mg = new_manager(s, dir, keep, KEEP_HOURS, 0, NULL, "keep_hours: re-created");
    if (mg) {
        CHECK_MSG(test_manager_state(mg)->last_preserved_timestamp == sm.last,
                  "keep_hours: re-created manager starts from %.6f, expected %.6f",
                  test_manager_state(mg)->last_preserved_timestamp, sm.last);
        metas[8] = (meta){ 0, 8, 0 };
        msave(mg, &m, &metas[8], 0, "ckpt", 8, "keep_hours: re-created");
        sim_save(&sm, 8, newest_ts(mg), keep);
        keep_check(mg, dir, &sm, metas, "keep_hours: re-created, save 8");
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case 2: fallback past damaged checkpoints ---- */

static const meta fb_meta[4] = { { 0, 0, 0 }, { 1, 11, 1 }, { 2, 22, 0 }, { 3, 33, 1 } };

/* dir with ckpt-1..3 (steps 11, 22, 33); returns the manager (NULL on failure). */
static ckpt_manager *fb_setup(ckpt_saver *s, tm_model *m, const char *dir, const char *what)
{
    ckpt_manager *mg = new_manager(s, dir, 5, 0, 0, NULL, what);
    if (!mg)
        return NULL;
    for (int i = 1; i <= 3; i++)
        msave(mg, m, &fb_meta[i], 0, "ckpt", i, what);
    return mg;
}

static void fallback_one(damage d, const char *sub)
{
    begin_case("fallback: %s", damage_name(d));
    char dir[4096], what[256], name3[] = "ckpt-3";
    snprintf(dir, sizeof dir, "%s/%s", g_out, sub);
    snprintf(what, sizeof what, "fallback past a %s", damage_name(d));
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_manager *mg = fb_setup(s, &m, dir, what);
    if (mg) {
        damage_ckpt(dir, 3, d, what);
        logs_clear();
        restored_want rw = { 1, 2, 2, 22, 0, 1 };
        mrestore(mg, &m, &rw, what);
        expect_warning(name3, damage_causes(d), what);
        /* numbering goes past the damaged one; the restored one is newest again after */
        char w2[300];
        snprintf(w2, sizeof w2, "%s, then a save", what);
        meta m4 = { 4, 44, 0 };
        msave(mg, &m, &m4, 0, "ckpt", 4, w2);
        restored_want rw4 = { 1, 4, 4, 44, 0, 0 };
        mrestore(mg, &m, &rw4, w2);
        expect_no_leftovers(dir, w2);
        ckpt_manager_free(mg);
        /* a fresh manager (state file read again) agrees */
        snprintf(w2, sizeof w2, "%s, re-created manager", what);
        mg = new_manager(s, dir, 5, 0, 0, NULL, w2);
        if (mg) {
            mrestore(mg, &m, &rw4, w2);
            ckpt_manager_free(mg);
        }
    }
    ckpt_saver_free(s);
}

static void test_fallback(void)
{
    fallback_one(DMG_FLIP, "fb_flip");
    fallback_one(DMG_TRUNCATE, "fb_trunc");
    fallback_one(DMG_NOINDEX, "fb_noindex");
    fallback_one(DMG_NODATA, "fb_nodata");

    char dir[4096];
    tm_model m;

    /* No state file and a damaged latest: the scan finds ckpt-3, restore falls back. */
    begin_case("fallback: no state file, damaged latest");
    snprintf(dir, sizeof dir, "%s/fb_nostate", g_out);
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_manager *mg = fb_setup(s, &m, dir, "fallback without a state file");
    if (mg) {
        ckpt_manager_free(mg);
        damage_ckpt(dir, 3, DMG_FLIP, "fallback without a state file");
        if (g_rank == 0) {
            char p[4200];
            snprintf(p, sizeof p, "%s/checkpoint", dir);
            CHECK(unlink(p) == 0);
        }
        barrier();
        mg = new_manager(s, dir, 5, 0, 0, NULL, "fallback without a state file");
        if (mg) {
            logs_clear();
            restored_want rw = { 1, 2, 2, 22, 0, 1 };
            mrestore(mg, &m, &rw, "fallback without a state file");
            expect_warning("ckpt-3", causes_flip, "fallback without a state file");
            ckpt_manager_free(mg);
        }
    }
    ckpt_saver_free(s);

    /* min_step_interval counts from the restored checkpoint: after falling back to ckpt-2
     * (step 22) past a damaged ckpt-3 (step 33), training resumes at step 23 and the save at
     * step 32 is due (TensorFlow sets the last checkpoint step at restore). */
    begin_case("fallback: min_step_interval after a fallback");
    snprintf(dir, sizeof dir, "%s/fb_minstep", g_out);
    s = new_saver(&m, TM_REG_OK);
    mg = fb_setup(s, &m, dir, "min_step_interval after a fallback");
    if (mg) {
        ckpt_manager_free(mg);
        damage_ckpt(dir, 3, DMG_TRUNCATE, "min_step_interval after a fallback");
        mg = new_manager(s, dir, 5, 0, 10, NULL, "min_step_interval after a fallback");
    }
    if (mg) {
        restored_want rw = { 1, 2, 2, 22, 0, 1 };
        mrestore(mg, &m, &rw, "min_step_interval after a fallback");
        meta m31 = { 2, 31, 0 }, m32 = { 2, 32, 0 };
        msave(mg, &m, &m31, 0, "ckpt", 0, "min_step_interval after a fallback: 9 steps on");
        msave(mg, &m, &m32, 0, "ckpt", 4, "min_step_interval after a fallback: 10 steps on");
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);

    /* Everything damaged: nothing restored, CKPT_OK, each one skipped with a warning. */
    begin_case("fallback: everything damaged");
    snprintf(dir, sizeof dir, "%s/fb_all", g_out);
    s = new_saver(&m, TM_REG_OK);
    mg = fb_setup(s, &m, dir, "all damaged");
    if (mg) {
        damage_ckpt(dir, 1, DMG_TRUNCATE, "all damaged");
        damage_ckpt(dir, 2, DMG_FLIP, "all damaged");
        damage_ckpt(dir, 3, DMG_NOINDEX, "all damaged");
        logs_clear();
        restored_want rw = { 0, 0, 0, 0, 0, 3 };
        mrestore(mg, &m, &rw, "all damaged");
        expect_warning("ckpt-1", causes_trunc, "all damaged");
        expect_warning("ckpt-2", causes_flip, "all damaged");
        expect_warning("ckpt-3", causes_noindex, "all damaged");
        /* the caller initializes and trains on: the next save does not reuse a number */
        meta ms[9];
        memset(ms, 0, sizeof ms);
        ms[4] = (meta){ 0, 1, 0 };
        msave(mg, &m, &ms[4], 0, "ckpt", 4, "all damaged, then a save");
        restored_want rw4 = { 1, 4, 0, 1, 0, 0 };
        mrestore(mg, &m, &rw4, "all damaged, then a save");
        /* retention deletes the damaged ones in turn (one without its index) without failing */
        for (int i = 5; i <= 8; i++) {
            ms[i] = (meta){ 0, i, 0 };
            msave(mg, &m, &ms[i], 0, "ckpt", i, "all damaged, retention");
        }
        int64_t ns[5] = { 4, 5, 6, 7, 8 };
        expect_state(mg, dir, "ckpt", ns, 5, ms, "all damaged, retention");
        expect_dir(dir, "ckpt", ns, 5, NULL, "all damaged, retention");
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);

    /* Registrations that do not match a valid checkpoint: an error everywhere, no fallback. */
    static const struct {
        tm_variant v;
        int expected;
        const char *what;
    } mism[] = {
        { TM_REG_W_FLOAT64, CKPT_EMISMATCH, "registration mismatch: \"w\" as float64" },
        { TM_REG_W_SHAPE, CKPT_EMISMATCH, "registration mismatch: \"w\" with another shape" },
        { TM_REG_EXTRA_NAME, CKPT_ERROR, "registration mismatch: a name the checkpoint lacks" },
    };
    snprintf(dir, sizeof dir, "%s/fb_flip", g_out); /* ckpt-4 there is valid */
    for (size_t i = 0; i < sizeof mism / sizeof mism[0]; i++) {
        begin_case("%s", mism[i].what);
        s = new_saver(&m, mism[i].v);
        mg = new_manager(s, dir, 5, 0, 0, NULL, mism[i].what);
        if (mg) {
            ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
            logs_clear();
            int rc = ckpt_manager_restore_latest(&r, mg);
            coll(rc, mism[i].expected, mism[i].what);
            CHECK_MSG(rc != CKPT_OK, "%s: silently %s (restored=%d, skipped=%d)", mism[i].what,
                      r.restored ? "restored" : "fell back to initializing", r.restored,
                      r.skipped);
            ckpt_manager_free(mg);
        }
        ckpt_saver_free(s);
        /* the checkpoint was not touched: the right registrations still restore it */
        s = new_saver(&m, TM_REG_OK);
        mg = new_manager(s, dir, 5, 0, 0, NULL, mism[i].what);
        if (mg) {
            restored_want rw4 = { 1, 4, 4, 44, 0, 0 };
            mrestore(mg, &m, &rw4, mism[i].what);
            ckpt_manager_free(mg);
        }
        ckpt_saver_free(s);
    }
    alarm(0);
}

/* ---- training-state helpers ---- */

static ckpt_training *new_training(ckpt_saver *s, const char *dir, const ckpt_manager_options *o,
                                   const char *what)
{
    ckpt_training *t = NULL;
    char w[512];
    snprintf(w, sizeof w, "%s: ckpt_training_create", what);
    int rc = ckpt_training_create(&t, s, dir, o);
    if (!coll(rc, CKPT_OK, w) || !t) {
        ckpt_training_free(t);
        return NULL;
    }
    CHECK_MSG(ckpt_training_manager(t) != NULL, "%s: ckpt_training_manager is NULL", what);
    return t;
}

/* A successful back_up of the model at `step`; then the state records it and every
 * workertemp_<r> in `dir` (the training directory) is empty or absent. */
static int backup(ckpt_training *t, tm_model *m, const char *dir, int64_t epoch, int64_t step,
                  int eoe, const char *what)
{
    tm_fill(m, step);
    char w[512];
    snprintf(w, sizeof w, "%s: back_up(epoch %" PRId64 ", step %" PRId64 ", %s)", what, epoch,
             step, eoe ? "end of epoch" : "mid-epoch");
    int rc = ckpt_training_back_up(t, epoch, step, eoe);
    int ok = coll(rc, CKPT_OK, w);
    const ckpt_manager *mg = ckpt_training_manager(t);
    const ckpt_state *st = mg ? test_manager_state(mg) : NULL;
    if (ok && st) {
        CHECK_MSG(st->num_entries > 0, "%s: the state lists nothing", w);
        if (st->num_entries > 0) {
            const ckpt_state_entry *e = &st->entries[st->num_entries - 1];
            CHECK_MSG(e->epoch == epoch && e->step == step && e->end_of_epoch == eoe &&
                          strcmp(e->prefix, st->latest) == 0,
                      "%s: newest entry %s records %" PRId64 "/%" PRId64 "/%d (latest %s)", w,
                      e->prefix, e->epoch, e->step, e->end_of_epoch, st->latest);
        }
    }
    barrier();
    expect_workertemp_clean(dir, w);
    char chief[4200];
    snprintf(chief, sizeof chief, "%s/chief", dir);
    expect_no_leftovers(chief, w);
    return ok;
}

/* Training restore into a clobbered model: restored flag, the chief's epoch/step on every rank
 * (via initial_epoch/initial_step), exact values. */
static void trestore(ckpt_training *t, tm_model *m, int want_restored, int64_t values_step,
                     int64_t want_epoch, int64_t want_step, const char *what)
{
    tm_sentinel(m);
    int restored = -1;
    char w[512];
    snprintf(w, sizeof w, "%s: ckpt_training_restore", what);
    int rc = ckpt_training_restore(t, &restored);
    if (!coll(rc, CKPT_OK, w))
        return;
    same_i64(restored, "restored", w);
    CHECK_MSG(restored == want_restored, "%s: restored = %d, expected %d", w, restored,
              want_restored);
    int64_t e = ckpt_training_initial_epoch(t, 0), st = ckpt_training_initial_step(t, 0);
    same_i64(e, "initial_epoch", w);
    same_i64(st, "initial_step", w);
    CHECK_MSG(e == want_epoch, "%s: initial_epoch(0) = %" PRId64 ", expected %" PRId64, w, e,
              want_epoch);
    CHECK_MSG(st == want_step, "%s: initial_step(0) = %" PRId64 ", expected %" PRId64, w, st,
              want_step);
    if (want_restored && restored == 1) {
        check_model(m, values_step, TM_RESTORED_LAST, w);
    }
}

/* ---- case 3: epoch/step broadcast with differing views ---- */

static void test_bcast(void)
{
    begin_case("bcast: stale view on non-chief ranks");
    char dir[4096], stale[4096];
    snprintf(dir, sizeof dir, "%s/tr", g_out);
    snprintf(stale, sizeof stale, "%s/tr_stale", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_training *t = new_training(s, dir, NULL, "bcast");
    if (!t) {
        ckpt_saver_free(s);
        return;
    }
    trestore(t, &m, 0, 0, 0, 0, "bcast: nothing yet");
    backup(t, &m, dir, 1, 10, 1, "bcast: backup #1");
    if (g_rank == 0)
        CHECK_MSG(copy_tree(dir, stale) == 0, "bcast: cannot copy %s to %s", dir, stale);
    barrier();
    backup(t, &m, dir, 3, 35, 0, "bcast: backup #2");
    ckpt_training_free(t);

    /* rank 0 sees the fresh directory, the others the stale copy (backup #1 only) */
    t = new_training(s, g_rank == 0 ? dir : stale, NULL, "bcast: chief fresh, others stale");
    if (t) {
        trestore(t, &m, 1, 35, 3, 36, "bcast: chief fresh, others stale");
        /* a backup with mixed views lands in the chief's directory */
        backup(t, &m, dir, 4, 40, 1, "bcast: backup #3 with mixed views");
        barrier();
        ckpt_state *st = NULL;
        char chief[4200];
        snprintf(chief, sizeof chief, "%s/chief", stale);
        int rc = ckpt_state_read(&st, chief);
        CHECK_MSG(rc == CKPT_OK && st && st->num_entries == 1 &&
                      strcmp(st->entries[0].prefix, "ckpt-1") == 0,
                  "bcast: the stale copy's state file changed (rc %d, latest %s)", rc,
                  st ? st->latest : "?");
        ckpt_state_free(st);
        expect_workertemp_clean(stale, "bcast: stale copy after a backup");
        ckpt_training_free(t);
    }

    t = new_training(s, dir, NULL, "bcast: all fresh after backup #3");
    if (t) {
        trestore(t, &m, 1, 40, 5, 41, "bcast: all fresh after backup #3");
        ckpt_training_free(t);
    }

    /* reversed: the chief sees the stale copy -> everybody resumes from backup #1 */
    t = new_training(s, g_rank == 0 ? stale : dir, NULL, "bcast: chief stale, others fresh");
    if (t) {
        trestore(t, &m, 1, 10, 2, 11, "bcast: chief stale, others fresh");
        ckpt_training_free(t);
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case 4: initial_epoch / initial_step ---- */

static void test_initial(void)
{
    begin_case("initial: no backup");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/init", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_training *t = new_training(s, dir, NULL, "initial");
    if (!t) {
        ckpt_saver_free(s);
        return;
    }
    trestore(t, &m, 0, 0, 0, 0, "initial: no backup");
    int64_t vals[3] = { ckpt_training_initial_epoch(t, 7), ckpt_training_initial_step(t, 17),
                        ckpt_training_initial_epoch(t, -3) };
    same_i64(vals[0], "initial_epoch(7)", "initial: no backup");
    same_i64(vals[1], "initial_step(17)", "initial: no backup");
    CHECK_EQ_INT(vals[0], 7);
    CHECK_EQ_INT(vals[1], 17);
    CHECK_EQ_INT(vals[2], -3);

    begin_case("initial: end-of-epoch backup");
    backup(t, &m, dir, 3, 30, 1, "initial");
    ckpt_training_free(t);
    t = new_training(s, dir, NULL, "initial: end of epoch 3 at step 30");
    if (t) {
        trestore(t, &m, 1, 30, 4, 31, "initial: end of epoch 3 at step 30");
        /* after an end-of-epoch backup the step does not depend on the caller's initial value */
        int64_t st = ckpt_training_initial_step(t, 5);
        CHECK_MSG(st == 31, "initial: end of epoch 3 at step 30: initial_step(5) = %" PRId64
                  ", expected 31", st);

        begin_case("initial: mid-epoch backup");
        backup(t, &m, dir, 4, 37, 0, "initial");
        ckpt_training_free(t);
    }
    t = new_training(s, dir, NULL, "initial: mid-epoch 4 at step 37");
    if (t) {
        trestore(t, &m, 1, 37, 4, 38, "initial: mid-epoch 4 at step 37");
        ckpt_training_free(t);
    }

    /* a fresh directory with only a mid-epoch backup */
    snprintf(dir, sizeof dir, "%s/init_mid", g_out);
    t = new_training(s, dir, NULL, "initial: mid-epoch");
    if (t) {
        backup(t, &m, dir, 3, 25, 0, "initial: mid-epoch");
        /* the same training state, restored in place */
        trestore(t, &m, 1, 25, 3, 26, "initial: mid-epoch 3 at step 25 (same state)");
        ckpt_training_free(t);
    }
    t = new_training(s, dir, NULL, "initial: mid-epoch 3 at step 25");
    if (t) {
        trestore(t, &m, 1, 25, 3, 26, "initial: mid-epoch 3 at step 25");
        CHECK_EQ_INT(ckpt_training_initial_epoch(t, 9), 3);
        CHECK_EQ_INT(ckpt_training_initial_step(t, 9), 26);
        ckpt_training_free(t);
    }

    /* The state file lost: the backup is found by scanning chief/, and resumes at the same point
     * (an end-of-epoch backup must still resume at the next epoch). */
    begin_case("initial: state file lost");
    snprintf(dir, sizeof dir, "%s/init_lost", g_out);
    t = new_training(s, dir, NULL, "initial: state file lost");
    if (t) {
        backup(t, &m, dir, 3, 30, 1, "initial: state file lost");
        ckpt_training_free(t);
        if (g_rank == 0) {
            char p[4200];
            snprintf(p, sizeof p, "%s/chief/checkpoint", dir);
            CHECK_MSG(unlink(p) == 0, "cannot delete %s", p);
        }
        barrier();
        t = new_training(s, dir, NULL, "initial: state file lost");
        if (t) {
            trestore(t, &m, 1, 30, 4, 31, "initial: end of epoch 3 at step 30, state file lost");
            ckpt_training_free(t);
        }
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case 5: delete_backup ---- */

static void expect_gone(const char *dir, const char *what)
{
    barrier();
    struct stat st;
    int r = stat(dir, &st), e = errno;
    CHECK_MSG(r != 0 && e == ENOENT, "%s: %s still exists on rank %d", what, dir, g_rank);
}

static void put_control(const char *dir, const char *text, const char *what);

static void test_delete(void)
{
    begin_case("delete_backup");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/del", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_training *t = new_training(s, dir, NULL, "delete");
    if (!t) {
        ckpt_saver_free(s);
        return;
    }
    backup(t, &m, dir, 1, 10, 1, "delete");
    backup(t, &m, dir, 2, 15, 0, "delete");
    char chief[4200];
    snprintf(chief, sizeof chief, "%s/chief", dir);
    put_control(chief, "drop ckpt-1 1\n", "delete: a restart control (mpickpt drop)");
    coll(ckpt_training_delete_backup(t), CKPT_OK, "delete: delete_backup");
    expect_gone(dir, "delete: after delete_backup");
    ckpt_training_free(t);

    begin_case("delete_backup: a new training state starts fresh");
    t = new_training(s, dir, NULL, "delete: new training state");
    if (t) {
        trestore(t, &m, 0, 0, 0, 0, "delete: new training state");
        ckpt_training_free(t);
    }
    /* a new job (new saver, counter 0) on the same directory backs up from ckpt-1 again */
    ckpt_saver_free(s);
    s = new_saver(&m, TM_REG_OK);
    t = new_training(s, dir, NULL, "delete: new job");
    if (t) {
        trestore(t, &m, 0, 0, 0, 0, "delete: new job");
        backup(t, &m, dir, 0, 3, 0, "delete: new job");
        const ckpt_state *st = test_manager_state(ckpt_training_manager(t));
        CHECK_MSG(st && strcmp(st->latest, "ckpt-1") == 0, "delete: first backup after a delete "
                  "is %s, expected ckpt-1", st ? st->latest : "?");
        coll(ckpt_training_delete_backup(t), CKPT_OK, "delete: second delete_backup");
        expect_gone(dir, "delete: after the second delete_backup");
        ckpt_training_free(t);
    }

    begin_case("delete_backup: nothing backed up");
    t = new_training(s, dir, NULL, "delete: nothing backed up");
    if (t) {
        coll(ckpt_training_delete_backup(t), CKPT_OK, "delete: delete_backup without backups");
        expect_gone(dir, "delete: after delete_backup without backups");
        ckpt_training_free(t);
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case 6: garbage of crashed saves ---- */

/* Garbage relative to the work directory `base` whose checkpoints are in `base/<sub>` (sub is
 * "chief" for a training dir, "" for a plain manager dir). The first entries are the top-level
 * items; NULL-terminated. */
#define HDF5_SIG "\x89HDF\r\n\x1a\n"

static void garbage_paths(char (*out)[4400], int *n, const char *base, const char *sub)
{
    char cd[4200];
    snprintf(cd, sizeof cd, "%s%s%s", base, sub[0] ? "/" : "", sub);
    *n = 0;
    snprintf(out[(*n)++], 4400, "%s/ckpt-9_temp", cd);
    snprintf(out[(*n)++], 4400, "%s/ckpt-9.data-00000-of-00002", cd);
    snprintf(out[(*n)++], 4400, "%s/workertemp_1/ckpt-9.data-00001-of-00002", base);
    snprintf(out[(*n)++], 4400, "%s/ckpt-9.index.tmp-1234", cd);
    snprintf(out[(*n)++], 4400, "%s/checkpoint.tmp-1234", cd);
}

static void make_garbage(const char *base, const char *sub)
{
    if (g_rank == 0) {
        char g[8][4400], p[4500];
        int n;
        garbage_paths(g, &n, base, sub);
        int ok = mkdir(g[0], 0755) == 0;
        snprintf(p, sizeof p, "%s/ckpt-9.data-00000-of-00002", g[0]);
        ok &= write_file(p, "partial HDF5") == 0;
        /* gc takes a data file without an index for ours only when it is HDF5 (or empty) */
        ok &= write_file(g[1], HDF5_SIG "data of a save that never committed") == 0;
        snprintf(p, sizeof p, "%s/workertemp_1", base);
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            ok = 0;
        ok &= write_file(g[2], "a worker's part") == 0;
        ok &= write_file(g[3], "half an index") == 0;
        ok &= write_file(g[4], "half a state file") == 0;
        CHECK_MSG(ok, "gc: cannot create the garbage under %s", base);
    }
    barrier();
}

static void expect_garbage(const char *base, const char *sub, int present, const char *what)
{
    char g[8][4400];
    int n;
    garbage_paths(g, &n, base, sub);
    for (int i = 0; i < n; i++)
        CHECK_MSG(exists(g[i]) == present, "%s: %s %s", what, g[i],
                  present ? "is gone" : "is still there");
}

typedef struct gc_rec {
    char paths[32][4400];
    int n;
} gc_rec;

static void gc_cb(const char *path, const char *why, void *payload)
{
    gc_rec *r = payload;
    if (getenv("MPICKPT_TEST_VERBOSE"))
        printf("  gc: %s (%s)\n", path, why ? why : "");
    if (r->n < 32)
        snprintf(r->paths[r->n++], 4400, "%s", path);
}

/* Every garbage item is covered by a reported path (itself, a directory holding it, or a file
 * inside it); no reported path names a committed file. */
static void expect_gc_report(const gc_rec *r, const char *base, const char *sub, const char *what)
{
    char g[8][4400];
    int n;
    garbage_paths(g, &n, base, sub);
    for (int i = 0; i < n; i++) {
        int covered = 0;
        size_t gl = strlen(g[i]);
        for (int j = 0; j < r->n && !covered; j++) {
            size_t pl = strlen(r->paths[j]);
            covered = strcmp(r->paths[j], g[i]) == 0 ||
                      (pl < gl && strncmp(g[i], r->paths[j], pl) == 0 && g[i][pl] == '/') ||
                      (gl < pl && strncmp(r->paths[j], g[i], gl) == 0 && r->paths[j][gl] == '/');
        }
        CHECK_MSG(covered, "%s: the callback did not report %s", what, g[i]);
    }
    for (int j = 0; j < r->n; j++) {
        const char *b = base_of(r->paths[j]);
        CHECK_MSG(strncmp(b, "ckpt-1.", 7) != 0 && strncmp(b, "other.", 6) != 0 &&
                      strcmp(b, "checkpoint") != 0 && strcmp(b, "notes.txt") != 0,
                  "%s: reported a committed file: %s", what, r->paths[j]);
    }
}

static void test_gc(void)
{
    begin_case("gc: leftovers removed at the next training backup");
    char dir[4096], chief[4200], p[4400];
    snprintf(dir, sizeof dir, "%s/gc", g_out);
    snprintf(chief, sizeof chief, "%s/chief", dir);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = 0;
    ckpt_training *t = new_training(s, dir, &o, "gc");
    if (!t) {
        ckpt_saver_free(s);
        return;
    }
    backup(t, &m, dir, 0, 1, 0, "gc");
    /* a committed checkpoint of another name, and a user's file */
    snprintf(p, sizeof p, "%s/other", chief);
    tm_fill(&m, 77);
    ckpt_save_info si;
    memset(&si, 0, sizeof si);
    si.step = 77;
    coll(ckpt_saver_write(s, p, &si), CKPT_OK, "gc: write other");
    if (g_rank == 0) {
        snprintf(p, sizeof p, "%s/notes.txt", chief);
        CHECK(write_file(p, "mine") == 0);
    }
    make_garbage(dir, "chief");
    /* what a crash of the save of ckpt-2 itself leaves (by a job of another size): data renamed
     * into place, no index yet */
    char crash2[2][4400];
    snprintf(crash2[0], sizeof crash2[0], "%s/ckpt-2.data-00000-of-00099", chief);
    snprintf(crash2[1], sizeof crash2[1], "%s/ckpt-2.data-00098-of-00099", chief);
    if (g_rank == 0)
        for (int i = 0; i < 2; i++)
            CHECK(write_file(crash2[i], HDF5_SIG "renamed before the crash") == 0);
    barrier();
    expect_garbage(dir, "chief", 1, "gc: before the backup");
    barrier(); /* the chief removes it as soon as it enters the save */
    backup(t, &m, dir, 0, 2, 0, "gc: backup after a crash");
    const ckpt_state *st = test_manager_state(ckpt_training_manager(t));
    CHECK_MSG(st && strcmp(st->latest, "ckpt-2") == 0, "gc: the backup after the crash is %s, "
              "expected ckpt-2", st ? st->latest : "?");
    barrier();
    expect_garbage(dir, "chief", 0, "gc: after the backup");
    for (int i = 0; i < 2; i++)
        CHECK_MSG(!exists(crash2[i]), "gc: after the backup: %s (left by a crashed save of "
                  "ckpt-2) is still there", crash2[i]);
    expect_workertemp_clean(dir, "gc: after the backup");
    snprintf(p, sizeof p, "%s/notes.txt", chief);
    CHECK_MSG(exists(p), "gc: a user's file %s was removed", p);
    trestore(t, &m, 1, 2, 0, 3, "gc: after the backup");
    ckpt_training_free(t);

    /* the committed checkpoints are intact */
    const char *names[2] = { "ckpt-1", "other" };
    const int64_t steps[2] = { 1, 77 };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", chief, names[i]);
        tm_sentinel(&m);
        char w[300];
        snprintf(w, sizeof w, "gc: restore %s", names[i]);
        if (coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_OK, w))
            check_model(&m, steps[i], TM_RESTORED, w);
    }

    /* ckpt_gc directly (rank 0, no MPI inside); the dry run removes nothing */
    begin_case("gc: ckpt_gc and its dry run");
    make_garbage(dir, "chief");
    static gc_rec dry, real;
    size_t ndry = 99, nreal = 99;
    if (g_rank == 0) {
        memset(&dry, 0, sizeof dry);
        memset(&real, 0, sizeof real);
        CHECK_OK(ckpt_gc(chief, 1, gc_cb, &dry, &ndry));
        expect_garbage(dir, "chief", 1, "gc: after the dry run");
        CHECK_MSG(ndry == (size_t)dry.n, "gc: dry run counted %zu, reported %d", ndry, dry.n);
        expect_gc_report(&dry, dir, "chief", "gc: dry run");
        CHECK_OK(ckpt_gc(chief, 0, gc_cb, &real, &nreal));
        CHECK_MSG(nreal == (size_t)real.n, "gc: counted %zu, reported %d", nreal, real.n);
        CHECK_MSG(nreal == ndry, "gc: removed %zu paths, the dry run announced %zu", nreal, ndry);
        expect_gc_report(&real, dir, "chief", "gc");
        for (int i = 0; i < dry.n && i < real.n; i++)
            CHECK_MSG(strcmp(dry.paths[i], real.paths[i]) == 0,
                      "gc: path %d: dry run \"%s\", real \"%s\"", i, dry.paths[i], real.paths[i]);
        /* nothing left to remove; NULL callback and count are fine */
        size_t again = 99;
        CHECK_OK(ckpt_gc(chief, 0, NULL, NULL, &again));
        CHECK_EQ_INT(again, 0);
        CHECK_OK(ckpt_gc(chief, 1, NULL, NULL, NULL));
    }
    barrier();
    expect_garbage(dir, "chief", 0, "gc: after ckpt_gc");
    expect_workertemp_clean(dir, "gc: after ckpt_gc");
    snprintf(p, sizeof p, "%s/notes.txt", chief);
    CHECK_MSG(exists(p), "gc: ckpt_gc removed a user's file %s", p);
    t = new_training(s, dir, &o, "gc: after ckpt_gc");
    if (t) {
        trestore(t, &m, 1, 2, 0, 3, "gc: after ckpt_gc");
        ckpt_training_free(t);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", chief, names[i]);
        tm_sentinel(&m);
        char w[300];
        snprintf(w, sizeof w, "gc: after ckpt_gc, restore %s", names[i]);
        if (coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_OK, w))
            check_model(&m, steps[i], TM_RESTORED, w);
    }

    /* a plain manager directory: the workertemp_* dirs are inside it */
    begin_case("gc: plain manager directory");
    snprintf(dir, sizeof dir, "%s/gc_plain", g_out);
    ckpt_manager *mg = new_manager(s, dir, 0, 0, 0, NULL, "gc plain");
    if (mg) {
        meta m1 = { 0, 1, 0 }, m2 = { 0, 2, 1 };
        msave(mg, &m, &m1, 0, "ckpt", 1, "gc plain");
        make_garbage(dir, "");
        msave(mg, &m, &m2, 0, "ckpt", 2, "gc plain: save after a crash");
        barrier();
        expect_garbage(dir, "", 0, "gc plain: after the save");
        expect_workertemp_clean(dir, "gc plain: after the save");
        expect_no_leftovers(dir, "gc plain: after the save");
        meta metas[3] = { { 0, 0, 0 }, m1, m2 };
        int64_t ns[2] = { 1, 2 };
        expect_state(mg, dir, "ckpt", ns, 2, metas, "gc plain: after the save");
        restored_want rw = { 1, 2, 0, 2, 1, 0 };
        mrestore(mg, &m, &rw, "gc plain");
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case 7: workertemp after every backup, also after failed ones ---- */

static void test_workertemp(void)
{
    begin_case("workertemp: backups");
    char dir[4096], chief[4200];
    snprintf(dir, sizeof dir, "%s/wt", g_out);
    snprintf(chief, sizeof chief, "%s/chief", dir);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    ckpt_training *t = new_training(s, dir, NULL, "workertemp");
    if (!t) {
        ckpt_saver_free(s);
        return;
    }
    for (int i = 1; i <= 4; i++)
        backup(t, &m, dir, i, 10 * i, 1, "workertemp");
    /* the training state keeps one backup by default */
    int64_t ns[1] = { 4 };
    expect_dir(chief, "ckpt", ns, 1, NULL, "workertemp: chief after 4 backups");

    static const char *const faults[] = { "last:write", "0:write", "last:commit", "0:merge" };
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        begin_case("workertemp: failed backup (%s)", faults[i]);
        char f[64], w[128];
        if (strncmp(faults[i], "last", 4) == 0)
            snprintf(f, sizeof f, "%d%s", g_size - 1, faults[i] + 4);
        else
            snprintf(f, sizeof f, "%s", faults[i]);
        snprintf(w, sizeof w, "workertemp: back_up with MPICKPT_FAULT=%s", f);
        setenv("MPICKPT_FAULT", f, 1);
        tm_fill(&m, 99);
        coll(ckpt_training_back_up(t, 9, 99, 1), CKPT_EIO, w);
        unsetenv("MPICKPT_FAULT");
        barrier();
        expect_workertemp_clean(dir, w);
        expect_no_leftovers(chief, w);
        expect_dir(chief, "ckpt", ns, 1, NULL, w);
        trestore(t, &m, 1, 40, 5, 41, w);
    }
    begin_case("workertemp: backup after failures");
    backup(t, &m, dir, 5, 50, 0, "workertemp: after failures");
    int64_t ns5[1] = { 5 };
    expect_dir(chief, "ckpt", ns5, 1, NULL, "workertemp: after failures");
    ckpt_training_free(t);
    t = new_training(s, dir, NULL, "workertemp: after failures");
    if (t) {
        trestore(t, &m, 1, 50, 5, 51, "workertemp: after failures");
        ckpt_training_free(t);
    }
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case: pin and drop (the restart control, `mpickpt pin`/`drop`) ---- */

/* Rank 0 writes <dir>/restart (the format mpickpt pin/drop write: lib/restart.h); "" removes it. */
static void put_control(const char *dir, const char *text, const char *what)
{
    if (g_rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/restart", dir);
        if (!text[0])
            CHECK_MSG(unlink(path) == 0 || errno == ENOENT, "%s: unlink %s", what, path);
        else
            CHECK_MSG(write_file(path, text) == 0, "%s: cannot write %s", what, path);
    }
    barrier();
}

static int index_n_exists(const char *dir, int64_t n)
{
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/ckpt-%" PRId64 ".index", dir, n);
    return stat(path, &sb) == 0;
}

/* On every rank: which of ckpt-1..max have an index, as a string of 0/1, must equal want. */
static void expect_indexes(const char *dir, const char *want, const char *what)
{
    char got[64];
    size_t n = strlen(want);
    for (size_t i = 0; i < n && i + 1 < sizeof got; i++)
        got[i] = index_n_exists(dir, (int64_t)i + 1) ? '1' : '0';
    got[n < sizeof got ? n : sizeof got - 1] = '\0';
    CHECK_MSG(strcmp(got, want) == 0, "%s: indexes of ckpt-1.. present %s, expected %s", what,
              got, want);
}

/* The manager's latest on every rank ends in ckpt-<n>. */
static void expect_latest(ckpt_manager *mg, int64_t n, const char *what)
{
    char latest[4400], want[64];
    CHECK(ckpt_manager_latest(mg, latest, sizeof latest) == CKPT_OK);
    same_str(latest, "latest", what);
    snprintf(want, sizeof want, "ckpt-%" PRId64, n);
    CHECK_MSG(strcmp(base_of(latest), want) == 0, "%s: latest %s, expected <dir>/%s", what,
              latest, want);
}

/* A restore that must fail on every rank with `want`, naming the pin. */
static void restore_fails(ckpt_manager *mg, tm_model *m, int want, const char *what)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_latest(&r, mg);
    if (coll(rc, want, what)) {
        const ckpt_error *e = ckpt_error_last();
        CHECK_MSG(e && e->message && strstr(e->message, "pinned") &&
                      strstr(e->message, "mpickpt pin"),
                  "%s: the error does not name the pin and how to clear it: %s", what,
                  e && e->message ? e->message : "(none)");
    }
    (void)m;
}

static void test_pin(void)
{
    alarm(120);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/pin", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    static const meta mt[10] = { { 0, 0, 0 },   { 0, 11, 0 },  { 0, 22, 1 }, { 1, 33, 0 },
                                 { 1, 44, 1 },  { 2, 55, 0 },  { 2, 66, 1 }, { 3, 77, 0 },
                                 { 3, 88, 1 },  { 4, 99, 0 } };
    begin_case("pin: ckpt-2 pinned among ckpt-1..4");
    ckpt_manager *mg = new_manager(s, dir, 3, 0, 0, NULL, "pin: setup");
    if (!mg)
        goto out;
    for (int i = 1; i <= 4; i++)
        msave(mg, &m, &mt[i], 0, "ckpt", i, "pin: setup");
    ckpt_manager_free(mg);
    expect_indexes(dir, "0111", "pin: setup (max_to_keep 3)");
    put_control(dir, "# a comment\npin ckpt-2 2 4\n", "pin: ckpt-2");
    logs_clear();
    mg = new_manager(s, dir, 3, 0, 0, NULL, "pin: ckpt-2");
    if (!mg)
        goto out;
    static const char *const causes_pin[] = { "pinned", NULL };
    expect_warning("ckpt-2", causes_pin, "pin: the manager says it honours the pin");
    expect_latest(mg, 2, "pin: latest is the pinned one");
    restored_want r2 = { 1, 2, 0, 22, 1, 0 };
    mrestore(mg, &m, &r2, "pin: restores the pinned ckpt-2");
    /* saves go on past every counter; what was set aside is neither counted nor deleted */
    msave(mg, &m, &mt[5], 0, "ckpt", 5, "pin: first save after the pin");
    msave(mg, &m, &mt[6], 0, "ckpt", 6, "pin: second save");
    msave(mg, &m, &mt[7], 0, "ckpt", 7, "pin: third save");
    expect_indexes(dir, "0011111", "pin: retention keeps 5..7 and the set-aside 3, 4");
    expect_latest(mg, 7, "pin: latest after saves");
    ckpt_manager_free(mg);

    begin_case("pin: a newer checkpoint than the pin is restored");
    mg = new_manager(s, dir, 3, 0, 0, NULL, "pin: restart");
    if (!mg)
        goto out;
    restored_want r7 = { 1, 7, 3, 77, 0, 0 };
    mrestore(mg, &m, &r7, "pin: restart restores ckpt-7");
    ckpt_manager_free(mg);

    begin_case("drop: ckpt-7 dropped");
    put_control(dir, "pin ckpt-2 2 4\ndrop ckpt-7 7\n", "drop: ckpt-7");
    mg = new_manager(s, dir, 3, 0, 0, NULL, "drop: ckpt-7");
    if (!mg)
        goto out;
    expect_latest(mg, 6, "drop: latest skips the dropped ckpt-7");
    restored_want r6 = { 1, 6, 2, 66, 1, 0 };
    mrestore(mg, &m, &r6, "drop: restores ckpt-6");
    msave(mg, &m, &mt[8], 0, "ckpt", 8, "drop: the save after it");
    expect_indexes(dir, "00111101", "drop: ckpt-7 deleted by retention, 3 and 4 still aside");
    ckpt_manager_free(mg);

    begin_case("pin: cleared");
    put_control(dir, "drop ckpt-7 7\n", "pin: cleared");
    mg = new_manager(s, dir, 3, 0, 0, NULL, "pin: cleared");
    if (!mg)
        goto out;
    msave(mg, &m, &mt[9], 0, "ckpt", 9, "pin: cleared, a save");
    expect_indexes(dir, "000001011", "pin: cleared, 3 and 4 count again (keep 6, 8, 9)");
    ckpt_manager_free(mg);

    begin_case("pin: a damaged pinned checkpoint is an error, not a fallback");
    put_control(dir, "pin ckpt-8 8 9\n", "pin: ckpt-8");
    damage_ckpt(dir, 8, DMG_TRUNCATE, "pin: ckpt-8 truncated");
    mg = new_manager(s, dir, 3, 0, 0, NULL, "pin: damaged");
    if (mg) {
        restore_fails(mg, &m, CKPT_ENOTFOUND, "pin: the pinned ckpt-8 is damaged");
        ckpt_manager_free(mg);
    }
    begin_case("pin: a pin naming a checkpoint no longer listed is an error");
    put_control(dir, "pin ckpt-1 1 9\n", "pin: ckpt-1");
    mg = new_manager(s, dir, 3, 0, 0, NULL, "pin: gone");
    if (mg) {
        restore_fails(mg, &m, CKPT_ENOTFOUND, "pin: the pinned ckpt-1 is gone");
        ckpt_manager_free(mg);
    }

    begin_case("restart control: damaged or not a regular file");
    static const char *const bad[] = { "pin ckpt-6\n", "drop ckpt-6 six\n", "pin ckpt-6 6 2\n",
                                       "pin ckpt-6 6 9\npin ckpt-9 9 9\n", "frobnicate\n",
                                       "drop ../ckpt-6 6\n" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char w[300];
        snprintf(w, sizeof w, "restart control %zu (\"%.20s\")", i, bad[i]);
        put_control(dir, bad[i], w);
        ckpt_manager *bm = NULL;
        ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
        if (!coll(ckpt_manager_create(&bm, s, dir, &o), CKPT_ECORRUPT, w) && bm)
            ckpt_manager_free(bm);
    }
    put_control(dir, "", "restart control: a link");
    if (g_rank == 0) {
        char path[4200], target[4200];
        snprintf(path, sizeof path, "%s/restart", dir);
        snprintf(target, sizeof target, "%s/elsewhere", g_out);
        CHECK(write_file(target, "pin ckpt-6 6 9\n") == 0);
        CHECK(symlink(target, path) == 0);
    }
    barrier();
    {
        ckpt_manager *bm = NULL;
        if (!coll(ckpt_manager_create(&bm, s, dir, NULL), CKPT_ECORRUPT,
                  "restart control: a symbolic link is not followed") &&
            bm)
            ckpt_manager_free(bm);
    }
    put_control(dir, "", "restart control: removed");

    begin_case("restart control: damaged while a job runs is a warning");
    mg = new_manager(s, dir, 3, 0, 0, NULL, "running");
    if (mg) {
        put_control(dir, "garbage\n", "running: garbage");
        logs_clear();
        meta m10 = { 5, 110, 0 };
        msave(mg, &m, &m10, 0, "ckpt", 10, "running: a save with a damaged control");
        static const char *const causes_bad[] = { "not a restart record", NULL };
        expect_warning("restart", causes_bad, "running: the damaged control is reported");
        ckpt_manager_free(mg);
    }
    put_control(dir, "", "running: removed");
out:
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- case: chosen (ckpt_manager_restore_step/_counter, ckpt_manager_restorable; issue 29) ---- */

/* Rank 0 runs the real CLI, `$MPICKPT_CLI ARGS...` (NULL-terminated), as an operator between two
 * jobs: no manager is open on the directory. It must exit 0. Collective (barriers). */
static void run_cli(const char *what, ...)
{
    barrier();
    if (g_rank == 0) {
        const char *cli = getenv("MPICKPT_CLI");
        char *argv[16] = { (char *)cli };
        va_list ap;
        va_start(ap, what);
        for (int i = 1; i < 15 && (argv[i] = va_arg(ap, char *)) != NULL; i++)
            ;
        va_end(ap);
        argv[15] = NULL;
        pid_t pid;
        int st = -1, rc = cli && *cli ? posix_spawn(&pid, cli, NULL, NULL, argv, environ) : -1;
        if (rc == 0 && waitpid(pid, &st, 0) != pid)
            rc = -1;
        CHECK_MSG(rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s: mpickpt %s %s ... (MPICKPT_CLI=%s) failed: spawn %d, status %d", what,
                  argv[1] ? argv[1] : "", argv[2] ? argv[2] : "", cli ? cli : "(unset)", rc, st);
    }
    barrier();
}

/* ckpt_manager_restorable lists exactly the counters `want` ("2 4 5") with the restart statuses
 * `restart` (one letter each: N normal, P pinned, B behind the pin), its start is counter
 * `start` (0: none) and ckpt_manager_latest names it: the same on every rank. */
static void expect_restorable(ckpt_manager *mg, const char *want, const char *restart,
                              int64_t start, const char *what)
{
    ckpt_manager_restorable_list *l = NULL;
    char got[256] = "", rs[64] = "", latest[4400] = "x";
    int64_t got_start = 0;
    CHECK(ckpt_manager_restorable(&l, mg) == CKPT_OK && l != NULL);
    for (size_t i = 0; l && i < l->num_entries; i++) {
        const ckpt_manager_restorable_entry *r = &l->entries[i];
        size_t n = strlen(got);
        snprintf(got + n, sizeof got - n, "%s%" PRId64, i ? " " : "", r->entry.save_counter);
        if (i + 1 < sizeof rs)
            rs[i] = "NPB?"[r->restart >= 0 && r->restart <= 2 ? r->restart : 3];
        CHECK_MSG(r->entry.levels == CKPT_LEVEL_PERSISTENT &&
                      r->entry.step == r->entry.save_counter * 10,
                  "%s: %s listed with levels %u, step %" PRId64, what, r->entry.prefix,
                  r->entry.levels, r->entry.step);
    }
    if (l && l->start < l->num_entries)
        got_start = l->entries[l->start].entry.save_counter;
    CHECK_MSG(!l || l->start <= l->num_entries, "%s: start %zu of %zu", what, l ? l->start : 0,
              l ? l->num_entries : 0);
    ckpt_manager_restorable_free(l);
    same_str(got, "the restorable list", what);
    CHECK_MSG(strcmp(got, want) == 0 && strcmp(rs, restart) == 0 && got_start == start,
              "%s: restorable [%s] (%s) from %" PRId64 ", expected [%s] (%s) from %" PRId64, what,
              got, rs, got_start, want, restart, start);
    CHECK(ckpt_manager_latest(mg, latest, sizeof latest) == CKPT_OK);
    char name[64] = "";
    if (start)
        snprintf(name, sizeof name, "ckpt-%" PRId64, start);
    CHECK_MSG(strcmp(start ? base_of(latest) : latest, name) == 0,
              "%s: ckpt_manager_latest \"%s\", expected ckpt-%" PRId64, what, latest, start);
}

/* A chosen restore (by_counter: save counter, else step) that must restore ckpt-<counter>
 * exactly, on every rank. */
static void chosen_ok(ckpt_manager *mg, tm_model *m, int by_counter, int64_t value,
                      int64_t counter, const char *what)
{
    tm_sentinel(m);
    ckpt_manager_restore_result r;
    memset(&r, 0x5a, sizeof r);
    r.version = CKPT_MANAGER_RESTORE_RESULT_VERSION;
    int rc = by_counter ? ckpt_manager_restore_at_counter(&r, mg, value)
                        : ckpt_manager_restore_at_step(&r, mg, value);
    if (!coll(rc, CKPT_OK, what))
        return;
    same_str(r.prefix, "prefix", what);
    char name[64];
    snprintf(name, sizeof name, "ckpt-%" PRId64, counter);
    CHECK_MSG(r.restored == 1 && r.skipped == 0 && r.save_counter == counter &&
                  r.step == counter * 10 && strcmp(base_of(r.prefix), name) == 0,
              "%s: restored %d \"%s\" counter %" PRId64 " step %" PRId64 " skipped %d, expected "
              "%s",
              what, r.restored, r.prefix, r.save_counter, r.step, r.skipped, name);
    check_model(m, counter * 10, TM_RESTORED_LAST, what);
}

/* A chosen restore that must fail with `want` on every rank, the message holding each of the
 * NULL-terminated needles. */
static void chosen_fails(ckpt_manager *mg, int by_counter, int64_t value, int want,
                         const char *what, ...)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = by_counter ? ckpt_manager_restore_at_counter(&r, mg, value)
                        : ckpt_manager_restore_at_step(&r, mg, value);
    if (!coll(rc, want, what))
        return;
    va_list ap;
    va_start(ap, what);
    for (const char *n; (n = va_arg(ap, const char *)) != NULL;)
        CHECK_MSG(strstr(g_msg, n) != NULL, "%s: the error does not name \"%s\": %s", what, n,
                  g_msg);
    va_end(ap);
}

static void test_chosen(void)
{
    alarm(120);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/chosen", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    static const meta mt[6] = { { 0, 0, 0 }, { 0, 10, 0 }, { 0, 20, 1 }, { 1, 30, 0 },
                                { 1, 40, 1 }, { 2, 50, 0 } };
    begin_case("chosen: five saves");
    ckpt_manager *mg = new_manager(s, dir, 0, 0, 0, NULL, "chosen: setup");
    if (!mg)
        goto out;
    for (int i = 1; i <= 5; i++)
        msave(mg, &m, &mt[i], 0, "ckpt", i, "chosen: setup");
    expect_restorable(mg, "1 2 3 4 5", "NNNNN", 5, "chosen: five saves");
    chosen_ok(mg, &m, 0, 30, 3, "chosen: step 30 in the manager that saved it");
    ckpt_manager_free(mg);

    begin_case("chosen: mpickpt drop DIR ckpt-3 ckpt-1");
    run_cli("chosen: drop", "drop", dir, "ckpt-3", "ckpt-1", (char *)NULL);
    mg = new_manager(s, dir, 0, 0, 0, NULL, "chosen: dropped");
    if (!mg)
        goto out;
    expect_restorable(mg, "2 4 5", "NNN", 5, "chosen: 3 and 1 dropped");
    chosen_fails(mg, 0, 30, CKPT_ENOTFOUND, "chosen: step 30 is dropped", "ckpt-3", "dropped",
                 "mpickpt drop --undo", (char *)NULL);
    chosen_fails(mg, 1, 1, CKPT_ENOTFOUND, "chosen: counter 1 is dropped", "ckpt-1", "dropped",
                 (char *)NULL);
    chosen_fails(mg, 0, 99, CKPT_ENOTFOUND, "chosen: no step 99", "step 99", "20, 40, 50",
                 (char *)NULL);
    chosen_ok(mg, &m, 0, 40, 4, "chosen: step 40");
    chosen_ok(mg, &m, 1, 2, 2, "chosen: counter 2");
    if (g_size > 1) /* every rank must ask for the same one */
        chosen_fails(mg, 0, g_rank ? 40 : 20, CKPT_EINVAL, "chosen: ranks ask for different steps",
                     "step 40", (char *)NULL);
    ckpt_manager_free(mg);

    begin_case("chosen: mpickpt pin DIR ckpt-4");
    run_cli("chosen: pin", "pin", dir, "ckpt-4", (char *)NULL);
    mg = new_manager(s, dir, 0, 0, 0, NULL, "chosen: pinned");
    if (!mg)
        goto out;
    expect_restorable(mg, "2 4", "BP", 4, "chosen: ckpt-4 pinned, ckpt-5 set aside");
    chosen_fails(mg, 0, 50, CKPT_ENOTFOUND, "chosen: step 50 is set aside", "ckpt-5",
                 "set aside", "ckpt-4", "mpickpt pin", (char *)NULL);
    chosen_ok(mg, &m, 0, 20, 2, "chosen: step 20, behind the pin, when asked for");
    chosen_ok(mg, &m, 1, 4, 4, "chosen: the pinned counter 4");
    restored_want r4 = { 1, 4, 1, 40, 1, 0 };
    mrestore(mg, &m, &r4, "chosen: restore_or_initialize starts from the pin");
    ckpt_manager_free(mg);

    begin_case("chosen: the pinned ckpt-4 damaged");
    damage_ckpt(dir, 4, DMG_FLIP, "chosen: ckpt-4 flipped");
    mg = new_manager(s, dir, 0, 0, 0, NULL, "chosen: damaged");
    if (!mg)
        goto out;
    chosen_fails(mg, 1, 4, CKPT_ECORRUPT, "chosen: the damaged ckpt-4", "ckpt-4", (char *)NULL);
    restore_fails(mg, &m, CKPT_ENOTFOUND, "chosen: restore_or_initialize of the damaged pin");
    chosen_ok(mg, &m, 0, 20, 2, "chosen: step 20 after the damaged ckpt-4");
    ckpt_manager_free(mg);

    begin_case("chosen: mpickpt pin --clear DIR");
    run_cli("chosen: clear", "pin", "--clear", dir, (char *)NULL);
    mg = new_manager(s, dir, 0, 0, 0, NULL, "chosen: cleared");
    if (!mg)
        goto out;
    expect_restorable(mg, "2 4 5", "NNN", 5, "chosen: pin cleared");
    chosen_ok(mg, &m, 0, 50, 5, "chosen: step 50 once the pin is cleared");
    ckpt_manager_free(mg);
out:
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- main ---- */

/* A control of at most 1 MiB (CKPT__RESTART_MAX_BYTES): distinct drop records that match no
 * checkpoint ("drop q N"), with `extra` in the middle. malloc'd. */
static char *big_control(const char *extra, size_t *records)
{
    size_t cap = (size_t)1 << 20, n = 0, k = 0;
    char *text = malloc(cap + 1);
    if (!text)
        return NULL;
    for (;; k++) {
        char line[64];
        int len = k == 40000 ? snprintf(line, sizeof line, "%s\n", extra)
                             : snprintf(line, sizeof line, "drop q %zu\n", k + 10);
        if (n + (size_t)len > cap)
            break;
        memcpy(text + n, line, (size_t)len);
        n += (size_t)len;
    }
    text[n] = '\0';
    *records = k;
    return text;
}

static void test_pin_big(void)
{
    alarm(600); /* a watchdog for hangs only; the TIMEOUT is what catches slowness */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/pin_big", g_out);
    tm_model m;
    ckpt_saver *s = new_saver(&m, TM_REG_OK);
    static const meta mt[5] = { { 0, 0, 0 }, { 0, 11, 0 }, { 0, 22, 1 }, { 1, 33, 0 },
                                { 1, 44, 1 } };
    begin_case("pin_big: ckpt-3 dropped among 1 MiB of drop records");
    ckpt_manager *mg = new_manager(s, dir, 5, 0, 0, NULL, "pin_big: setup");
    if (!mg)
        goto out;
    for (int i = 1; i <= 3; i++)
        msave(mg, &m, &mt[i], 0, "ckpt", i, "pin_big: setup");
    ckpt_manager_free(mg);
    size_t records = 0;
    char *text = big_control("drop ckpt-3 3", &records);
    CHECK_MSG(text && strlen(text) > 1000000 && records > 70000,
              "pin_big: the control has %zu records", records);
    if (!text)
        goto out;
    put_control(dir, text, "pin_big: 1 MiB control");
    free(text);
    logs_clear();
    mg = new_manager(s, dir, 5, 0, 0, NULL, "pin_big: creation");
    if (!mg)
        goto out;
    expect_latest(mg, 2, "pin_big: latest skips the dropped ckpt-3");
    restored_want r2 = { 1, 2, 0, 22, 1, 0 };
    mrestore(mg, &m, &r2, "pin_big: restores ckpt-2");
    msave(mg, &m, &mt[4], 0, "ckpt", 4, "pin_big: a save (the control read again)");
    expect_indexes(dir, "1101", "pin_big: the dropped ckpt-3 deleted by retention");
    expect_latest(mg, 4, "pin_big: latest after the save");
    ckpt_manager_free(mg);
    put_control(dir, "", "pin_big: removed");
out:
    ckpt_saver_free(s);
    alarm(0);
}

/* ---- main ---- */

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

static const test_case cases[] = {
    { "retention", test_retention }, { "keep_hours", test_keep_hours },
    { "fallback", test_fallback },   { "bcast", test_bcast },
    { "initial", test_initial },     { "delete", test_delete },
    { "gc", test_gc },               { "workertemp", test_workertemp },
    { "pin", test_pin },             { "chosen", test_chosen },
    { "pin_big", test_pin_big },
};

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    int found = 0;
    if (argc >= 3 && argc <= 4) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            found |= strcmp(argv[2], cases[i].name) == 0;
        found |= strcmp(argv[2], "all") == 0;
        if (argc == 4) {
            g_layout = tm_layout(argv[3]);
            if (g_layout == CKPT_LAYOUT_UNKNOWN)
                found = 0;
        }
    }
    if (!found) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_manager OUTDIR CASE [per-rank|shared|per-node]; CASE: all "
                            "retention keep_hours fallback bcast initial delete gc workertemp pin "
                            "chosen\n");
        MPI_Finalize();
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    unsetenv("MPICKPT_FAULT");
    ckpt_log_set(log_cb, CKPT_LOG_INFO, NULL);
    if (g_rank == 0)
        mkdir(g_out, 0755);
    barrier();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[2], "all") == 0 || strcmp(argv[2], cases[i].name) == 0)
            cases[i].fn();
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    return check_mpi_done("test_manager");
}
