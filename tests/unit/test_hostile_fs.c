/* Issue 12, "a checkpoint directory others can write to" (docs/design.md §10): the library in
 * directories where someone else planted symbolic links, FIFOs, devices, crafted state files,
 * look-alike names, and races that swap a directory for a link while mpickpt works in it.
 *
 *   test_hostile_fs [CASE...]   in $MPICKPT_TEST_DIR (default /tmp/test_hostile_fs)
 *
 * CASE is writer, reader, state, scan, race or ownership (default: all). Every case makes its own
 * victim directory outside the checkpoint directories, with sentinel files, and checks at the end
 * that every victim file is still there, byte for byte, and that nothing was added to it. A call
 * that blocks (on a FIFO, say) is caught by the watchdog: alarm() per case, which names the case
 * and exits; the CTest TIMEOUT is the last resort. No assertion depends on timing. */
#include "check.h"
#include "fsutil.h"
#include "index.h"
#include "mpickpt.h"
#include "paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define HDF5_SIGNATURE "\x89HDF\r\n\x1a\n"
#define CASE_SECONDS 60 /* watchdog per case: a hang guard, never a measurement */
#define RACE_ITERATIONS 300

static char root[4096];
static const char *volatile g_case = "setup";

/* ---- plumbing -------------------------------------------------------------------------------- */

static void say(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void on_alarm(int sig)
{
    (void)sig;
    say("test_hostile_fs: watchdog: case '");
    say(g_case);
    say("' blocked (a FIFO opened without O_NONBLOCK, or a lock that never came); failing\n");
    _exit(3);
}

static void begin_case(const char *name, unsigned seconds)
{
    g_case = name;
    printf("== %s\n", name);
    fflush(stdout);
    alarm(seconds);
}

static const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e && e->message ? e->message : "";
}

/* snprintf into a caller buffer; the test's own paths always fit. */
static char *pathf(char *out, size_t size, const char *fmt, ...) CKPT_PRINTF(3, 4);
static char *pathf(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "test_hostile_fs: path too long: %s\n", fmt);
        exit(2);
    }
    return out;
}
#define PATHF(buf, ...) pathf((buf), sizeof(buf), __VA_ARGS__)

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(p) : unlink(p)) == 0 || errno == ENOENT ? 0 : -1;
}

/* rm -rf of the test's own trees: FTW_PHYS, so a link is removed, never followed. */
static void rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkdir_or_die(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "test_hostile_fs: mkdir %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

static int put_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = len ? write(fd, data, len) : 0;
    close(fd);
    return n == (ssize_t)len ? 0 : -1;
}

static int put_text(const char *path, const char *text)
{
    return put_file(path, text, strlen(text));
}

/* The whole content of a regular file (never opens anything else, so a FIFO cannot block it).
 * Returns 0 and a malloc'd buffer, or -1. */
static int get_file(const char *path, uint8_t **buf, size_t *len)
{
    struct stat sb;
    *buf = NULL;
    *len = 0;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return -1;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    uint8_t *b = malloc((size_t)sb.st_size + 1);
    ssize_t n = b ? read(fd, b, (size_t)sb.st_size) : -1;
    close(fd);
    if (n != (ssize_t)sb.st_size) {
        free(b);
        return -1;
    }
    *buf = b;
    *len = (size_t)n;
    return 0;
}

static int copy_file(const char *src, const char *dst)
{
    uint8_t *b;
    size_t n;
    if (get_file(src, &b, &n) != 0)
        return -1;
    int rc = put_file(dst, b, n);
    free(b);
    return rc;
}

/* 1 when the file at `path` holds exactly `len` bytes equal to `data`. */
static int file_equals(const char *path, const void *data, size_t len)
{
    uint8_t *b;
    size_t n;
    if (get_file(path, &b, &n) != 0)
        return 0;
    int same = n == len && memcmp(b, data, len) == 0;
    free(b);
    return same;
}

/* The st_mode type of `path` without following it, or 0 when there is none. */
static unsigned kind_of(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 ? (unsigned)(sb.st_mode & S_IFMT) : 0u;
}

/* 1 when `path` is a symbolic link whose target is exactly `target`. */
static int is_link_to(const char *path, const char *target)
{
    char buf[4200];
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    if (n < 0)
        return 0;
    buf[n] = '\0';
    return strcmp(buf, target) == 0;
}

/* Number of entries of directory `path` (without . and ..), or -1. */
static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* 1 when directory `path` holds exactly the names in `names` (NULL-terminated), no others. */
static int holds_exactly(const char *path, const char *const *names)
{
    int want = 0;
    char p[8400];
    for (; names[want]; want++)
        if (kind_of(PATHF(p, "%s/%s", path, names[want])) == 0) {
            fprintf(stderr, "  %s: %s is missing\n", path, names[want]);
            return 0;
        }
    int have = count_entries(path);
    if (have != want) {
        fprintf(stderr, "  %s holds %d entries, expected %d:", path, have, want);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL)
            fprintf(stderr, " '%s'", e->d_name);
        if (d)
            closedir(d);
        fputc('\n', stderr);
        return 0;
    }
    return 1;
}

/* ---- victims: what must never change, outside every checkpoint directory ------------------- */

#define VICTIM_MAX 8

typedef struct victim {
    char dir[4200];
    int n;
    char name[VICTIM_MAX][64];
    uint8_t *data[VICTIM_MAX]; /* what each file must hold */
    size_t len[VICTIM_MAX];
} victim;

static const char *victim_file(char *buf, size_t size, const victim *v, int i)
{
    return pathf(buf, size, "%s/%s", v->dir, v->name[i]);
}

/* Gives victim file i the content `data` (the file and the record of what it must hold). */
static void victim_set(victim *v, int i, const void *data, size_t len)
{
    char p[8400];
    free(v->data[i]);
    v->data[i] = malloc(len ? len : 1);
    if (!v->data[i] || put_file(victim_file(p, sizeof p, v, i), data, len) != 0) {
        fprintf(stderr, "test_hostile_fs: cannot write %s\n", p);
        exit(2);
    }
    memcpy(v->data[i], data, len);
    v->len[i] = len;
}

/* Makes directory `dir` holding one sentinel file per name (NULL-terminated). */
static void victim_make(victim *v, const char *dir, const char *const *names)
{
    memset(v, 0, sizeof *v);
    snprintf(v->dir, sizeof v->dir, "%s", dir);
    mkdir_or_die(dir);
    for (; names[v->n] && v->n < VICTIM_MAX; v->n++) {
        char text[4400];
        snprintf(v->name[v->n], sizeof v->name[v->n], "%s", names[v->n]);
        snprintf(text, sizeof text,
                 "victim sentinel %d of %s: nobody but its owner may change this file\n", v->n,
                 dir);
        victim_set(v, v->n, text, strlen(text));
    }
}

static void victim_free(victim *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->data[i]);
    memset(v, 0, sizeof *v);
}

/* 1 when the victim is as made: its directory, exactly its files, each byte for byte. */
static int victim_intact(const victim *v, int quiet)
{
    if (kind_of(v->dir) != S_IFDIR) {
        if (!quiet)
            fprintf(stderr, "  victim %s is gone\n", v->dir);
        return 0;
    }
    char p[8400];
    for (int i = 0; i < v->n; i++) {
        if (!file_equals(victim_file(p, sizeof p, v, i), v->data[i], v->len[i])) {
            if (!quiet)
                fprintf(stderr, "  victim file %s was changed or removed\n", p);
            return 0;
        }
    }
    if (count_entries(v->dir) != v->n) {
        if (!quiet)
            fprintf(stderr, "  victim %s holds %d entries, %d were made\n", v->dir,
                    count_entries(v->dir), v->n);
        return 0;
    }
    return 1;
}

/* Checks the victim, then frees it. */
#define CHECK_VICTIM(v)                                                                        \
    do {                                                                                       \
        CHECK_MSG(victim_intact((v), 0), "victim %s was touched", (v)->dir);                   \
        victim_free(v);                                                                        \
    } while (0)

/* ---- checkpoints ----------------------------------------------------------------------------- */

static float w_value(int64_t counter, int i)
{
    return (float)counter * 100.0f + (float)i * 0.5f;
}

/* Writes checkpoint `prefix`: w float32 [3,4] and b int64 [5], values from `counter`. */
static int set_index_counter(const char *prefix, int64_t counter);

static int write_ck(const char *prefix, int64_t counter, int overwrite)
{
    ckpt_writer_options o = CKPT_WRITER_OPTIONS_INIT;
    /* the writer refuses a counter outside 0..CKPT__COUNTER_MAX: such an index is crafted after */
    int crafted = counter < 0 || counter > CKPT__COUNTER_MAX;
    o.save_counter = crafted ? 0 : counter;
    o.epoch = counter % 1000 + 10; /* (counters may be INT64_MAX here) */
    o.step = counter % 1000 * 100;
    o.overwrite = overwrite;
    ckpt_writer *w = NULL;
    int rc = ckpt_writer_open(&w, prefix, &o);
    float wv[12];
    int64_t bv[5];
    for (int i = 0; i < 12; i++)
        wv[i] = w_value(counter, i);
    for (int i = 0; i < 5; i++)
        bv[i] = counter % 1000 * 1000 + i;
    int64_t dw[2] = {3, 4}, db[1] = {5};
    ckpt_shape sw, sb;
    ckpt_shape_init(&sw, 2, dw);
    ckpt_shape_init(&sb, 1, db);
    if (rc == CKPT_OK)
        rc = ckpt_writer_add(w, "w", CKPT_FLOAT32, &sw, NULL, wv);
    if (rc == CKPT_OK)
        rc = ckpt_writer_add(w, "b", CKPT_INT64, &sb, NULL, bv);
    if (rc == CKPT_OK)
        rc = ckpt_writer_commit(w);
    ckpt_writer_free(w);
    if (rc == CKPT_OK && crafted)
        rc = set_index_counter(prefix, counter);
    return rc;
}

/* 1 when checkpoint `prefix` opens and reads back exactly what write_ck(prefix, counter) wrote. */
static int reads_back(const char *prefix, int64_t counter)
{
    ckpt_reader *r = NULL;
    int rc = ckpt_reader_open(&r, prefix);
    float wv[12];
    int64_t bv[5];
    if (rc == CKPT_OK)
        rc = ckpt_reader_read(r, "w", CKPT_FLOAT32, NULL, wv, sizeof wv);
    if (rc == CKPT_OK)
        rc = ckpt_reader_read(r, "b", CKPT_INT64, NULL, bv, sizeof bv);
    if (rc == CKPT_OK)
        rc = ckpt_reader_verify(r, NULL, NULL);
    int ok = rc == CKPT_OK && ckpt_reader_header(r)->save_counter == counter;
    for (int i = 0; ok && i < 12; i++)
        ok = wv[i] == w_value(counter, i);
    for (int i = 0; ok && i < 5; i++)
        ok = bv[i] == counter % 1000 * 1000 + i;
    if (!ok)
        fprintf(stderr, "  %s does not read back (%s): %s\n", prefix, ckpt_strerror(rc),
                last_msg());
    ckpt_reader_free(r);
    return ok;
}

/* ---- log capture ----------------------------------------------------------------------------- */

typedef struct logcap {
    int n;
    char msg[32][1024];
} logcap;

static void log_capture(ckpt_log_level level, const char *message, void *payload)
{
    logcap *c = payload;
    if (level <= CKPT_LOG_WARN && c->n < 32)
        snprintf(c->msg[c->n++], sizeof c->msg[0], "%s", message);
}

/* How many captured messages contain `needle`. */
static int log_count(const logcap *c, const char *needle)
{
    int k = 0;
    for (int i = 0; i < c->n; i++)
        k += strstr(c->msg[i], needle) != NULL;
    return k;
}

/* =============================================================================================
 * 1. The single-process writer among planted links
 * ============================================================================================= */

static void case_writer(void)
{
    char base[4200], dir[4200], p[8400], q[8400], prefix[8400];
    PATHF(base, "%s/writer", root);
    mkdir_or_die(base);
    victim v;
    static const char *const vnames[] = {"index-target", "state-target", "data-target",
                                         "kept.txt", NULL};
    victim_make(&v, PATHF(p, "%s/victim", base), vnames);
    char vindex[8400], vstate[8400], vdata[8400];
    victim_file(vindex, sizeof vindex, &v, 0);
    victim_file(vstate, sizeof vstate, &v, 1);
    victim_file(vdata, sizeof vdata, &v, 2);
    long pid = (long)getpid();

    /* (a) links under every temp name the old code used (<file>.tmp-<pid>) and under the data
     * file's final name: written into, they would overwrite the victim's files. The final name
     * is not the writer's to take (issue 29): CKPT_EEXISTS naming it, the link left as it is;
     * once it is gone, the same save commits. */
    PATHF(dir, "%s/a", base);
    mkdir_or_die(dir);
    char tmp_index[8400], tmp_state[8400];
    PATHF(tmp_index, "%s/ck.index.tmp-%ld", dir, pid);
    PATHF(tmp_state, "%s/checkpoint.tmp-%ld", dir, pid);
    CHECK(symlink(vindex, tmp_index) == 0);
    CHECK(symlink(vstate, tmp_state) == 0);
    CHECK(symlink(vdata, PATHF(p, "%s/ck.data-00000-of-00001", dir)) == 0);
    ckpt_error_clear();
    CHECK_RC(write_ck(PATHF(prefix, "%s/ck", dir), 3, 0), CKPT_EEXISTS);
    CHECK_MSG(strstr(last_msg(), "ck.data-00000-of-00001") && strstr(last_msg(), "symbolic link"),
              "the refusal should name the data file and say it is a symbolic link: %s",
              last_msg());
    CHECK(is_link_to(p, vdata));
    CHECK_EQ_INT(kind_of(PATHF(q, "%s/ck.index", dir)), 0);
    CHECK(unlink(p) == 0);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck", dir), 3, 0));
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/ck.index", dir)), S_IFREG);
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/ck.data-00000-of-00001", dir)), S_IFREG);
    uint8_t *data = NULL;
    size_t dlen = 0;
    CHECK(get_file(p, &data, &dlen) == 0 && dlen > 8 && memcmp(data, HDF5_SIGNATURE, 8) == 0);
    free(data);
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/ck_temp", dir)), 0);
    CHECK(reads_back(prefix, 3));
    /* the state file too (what make_state and the manager do) */
    ckpt_state *st = NULL;
    CHECK_OK(ckpt_state_scan(&st, dir));
    CHECK_EQ_INT(st->num_entries, 1);
    CHECK_OK(ckpt__state_write(st, dir));
    ckpt_state_free(st);
    st = NULL;
    CHECK_OK(ckpt_state_read(&st, dir));
    CHECK(st->num_entries == 1 && strcmp(st->entries[0].prefix, "ck") == 0 &&
          st->entries[0].save_counter == 3 && strcmp(st->latest, "ck") == 0);
    ckpt_state_free(st);
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/checkpoint", dir)), S_IFREG);
    /* The planted temp names were never written through: each is gone, a regular file, or still
     * exactly the link that was planted (left alone; it is not mpickpt's). */
    CHECK_MSG(kind_of(tmp_index) == 0 || kind_of(tmp_index) == S_IFREG ||
                  is_link_to(tmp_index, vindex),
              "%s is neither gone, nor a regular file, nor the untouched link", tmp_index);
    CHECK_MSG(kind_of(tmp_state) == 0 || kind_of(tmp_state) == S_IFREG ||
                  is_link_to(tmp_state, vstate),
              "%s is neither gone, nor a regular file, nor the untouched link", tmp_state);
    /* nothing else was left behind: no temp file, no temp dir */
    {
        char ti[64], ts[64];
        snprintf(ti, sizeof ti, "ck.index.tmp-%ld", pid);
        snprintf(ts, sizeof ts, "checkpoint.tmp-%ld", pid);
        const char *want[] = {"ck.index", "ck.data-00000-of-00001", "checkpoint", NULL, NULL, NULL};
        int k = 3;
        if (kind_of(tmp_index))
            want[k++] = ti;
        if (kind_of(tmp_state))
            want[k++] = ts;
        CHECK(holds_exactly(dir, want));
    }

    /* (b) <base>_temp (an older version's in-flight name) is a link to the victim directory:
     * not used at all (this writer's in-flight directory is ck.<id>_temp, its own), left as it
     * was, nothing written through it */
    PATHF(dir, "%s/b", base);
    mkdir_or_die(dir);
    CHECK(symlink(v.dir, PATHF(p, "%s/ck_temp", dir)) == 0);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck", dir), 4, 0));
    CHECK(reads_back(prefix, 4));
    CHECK(is_link_to(p, v.dir)); /* left as it was */
    {
        const char *want[] = {"ck_temp", "ck.index", "ck.data-00000-of-00001", NULL};
        CHECK(holds_exactly(dir, want));
    }

    /* (c) <base>.index is a dangling link: the name is taken by someone else; not overwritten,
     * and its target is not created */
    PATHF(dir, "%s/c", base);
    mkdir_or_die(dir);
    PATHF(q, "%s/created-through-link", v.dir);
    CHECK(symlink(q, PATHF(p, "%s/ck.index", dir)) == 0);
    ckpt_writer *w = NULL;
    CHECK_RC(ckpt_writer_open(&w, PATHF(prefix, "%s/ck", dir), NULL), CKPT_EEXISTS);
    CHECK(w == NULL);
    CHECK_MSG(strstr(last_msg(), "ck.index") != NULL, "should name ck.index: %s", last_msg());
    ckpt_writer_free(w);
    CHECK(is_link_to(p, q));
    CHECK_EQ_INT(kind_of(q), 0);
    {
        const char *want[] = {"ck.index", NULL};
        CHECK(holds_exactly(dir, want));
    }

    /* (d) overwrite of a checkpoint whose index was replaced by a link to a victim file: the link
     * is un-committed (removed), never written through */
    PATHF(dir, "%s/d", base);
    mkdir_or_die(dir);
    CHECK(symlink(vindex, PATHF(p, "%s/ck.index", dir)) == 0);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck", dir), 4, 1));
    CHECK_EQ_INT(kind_of(p), S_IFREG);
    CHECK(reads_back(prefix, 4));

    /* (e) <work>/chief is a link to the victim directory: refused (chief/ is an entry of the
     * work directory like any other) */
    PATHF(dir, "%s/e", base);
    mkdir_or_die(dir);
    CHECK(symlink(v.dir, PATHF(p, "%s/chief", dir)) == 0);
    w = NULL;
    CHECK_RC(ckpt_writer_open(&w, PATHF(prefix, "%s/chief/ck", dir), NULL), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "chief") && strstr(last_msg(), "symbolic link"),
              "the refusal should name chief and say it is a symbolic link: %s", last_msg());
    ckpt_writer_free(w);
    CHECK(is_link_to(p, v.dir));

    /* (f) <work>/chief belongs to someone else: not written into */
    PATHF(dir, "%s/f", base);
    mkdir_or_die(dir);
    mkdir_or_die(PATHF(p, "%s/chief", dir));
    if (geteuid() != 0 || chown(p, 4242, 4242) != 0) {
        printf("  (f) skipped: cannot give %s to another user (needs root)\n", p);
    } else {
        w = NULL;
        CHECK_RC(ckpt_writer_open(&w, PATHF(prefix, "%s/chief/ck", dir), NULL), CKPT_ECORRUPT);
        CHECK_MSG(strstr(last_msg(), "chief") && strstr(last_msg(), "4242"),
                  "the refusal should name chief and its owner: %s", last_msg());
        ckpt_writer_free(w);
        CHECK_EQ_INT(count_entries(p), 0);
    }

    CHECK_VICTIM(&v);
}

/* =============================================================================================
 * 2. The reader: the index or a data file is not the regular file the index describes
 * ============================================================================================= */

/* A copy of checkpoint good/ck into base/<name>/ck; returns the new prefix in `prefix`. */
static void copy_ck(char *prefix, size_t size, const char *base, const char *name)
{
    char d[8400], s[8400], t[8400];
    mkdir_or_die(PATHF(d, "%s/%s", base, name));
    CHECK(copy_file(PATHF(s, "%s/good/ck.index", base), PATHF(t, "%s/ck.index", d)) == 0);
    CHECK(copy_file(PATHF(s, "%s/good/ck.data-00000-of-00001", base),
                    PATHF(t, "%s/ck.data-00000-of-00001", d)) == 0);
    pathf(prefix, size, "%s/ck", d);
}

/* ckpt_reader_open of `prefix` fails with CKPT_ECORRUPT naming `file` (and `kind` when set). */
static void expect_open_refused(const char *prefix, const char *file, const char *kind)
{
    ckpt_reader *r = NULL;
    CHECK_RC(ckpt_reader_open(&r, prefix), CKPT_ECORRUPT);
    CHECK(r == NULL);
    CHECK_MSG(strstr(last_msg(), file) && (!kind || strstr(last_msg(), kind)),
              "%s: the error should name %s (%s): %s", prefix, file, kind ? kind : "", last_msg());
    ckpt_reader_free(r);
}

/* The index opens (it is fine), but reading, checking or verifying a tensor of the replaced data
 * file fails with CKPT_ECORRUPT naming it, and no value reaches the caller's buffer. */
static void expect_read_refused(const char *prefix, const char *kind)
{
    ckpt_reader *r = NULL;
    CHECK_OK(ckpt_reader_open_index(&r, prefix));
    if (!r)
        return;
    float wv[12];
    memset(wv, 0xA5, sizeof wv);
    CHECK_RC(ckpt_reader_read(r, "w", CKPT_FLOAT32, NULL, wv, sizeof wv), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "ck.data-00000-of-00001") && (!kind || strstr(last_msg(), kind)),
              "%s: the read error should name the data file (%s): %s", prefix, kind ? kind : "",
              last_msg());
    const uint8_t *b = (const uint8_t *)wv;
    int untouched = 1;
    for (size_t i = 0; i < sizeof wv; i++)
        untouched &= b[i] == 0xA5;
    CHECK_MSG(untouched, "%s: values reached the caller's buffer", prefix);
    CHECK_RC(ckpt_reader_check(r, NULL, NULL), CKPT_ECORRUPT);
    CHECK_RC(ckpt_reader_verify(r, NULL, NULL), CKPT_ECORRUPT);
    ckpt_reader_free(r);
}

static void case_reader(void)
{
    char base[4200], p[8400], prefix[8400], good_index[8400], good_data[8400];
    PATHF(base, "%s/reader", root);
    mkdir_or_die(base);
    mkdir_or_die(PATHF(p, "%s/good", base));
    CHECK_OK(write_ck(PATHF(prefix, "%s/good/ck", base), 5, 0));
    /* the victim holds a valid index and data file: "valid files elsewhere" to link to */
    victim v;
    static const char *const vnames[] = {"ck.index", "ck.data-00000-of-00001", "notes.txt", NULL};
    victim_make(&v, PATHF(p, "%s/victim", base), vnames);
    victim_file(good_index, sizeof good_index, &v, 0);
    victim_file(good_data, sizeof good_data, &v, 1);
    /* ...holding a copy of the good checkpoint's files (which it must keep, byte for byte) */
    for (int i = 0; i < 2; i++) {
        uint8_t *b = NULL;
        size_t n = 0;
        CHECK(get_file(PATHF(p, "%s/good/%s", base, v.name[i]), &b, &n) == 0);
        victim_set(&v, i, b, n);
        free(b);
    }
    CHECK(reads_back(prefix, 5));

    /* the index is a link to a valid index elsewhere: not followed */
    copy_ck(prefix, sizeof prefix, base, "index-link");
    CHECK(unlink(PATHF(p, "%s/index-link/ck.index", base)) == 0 && symlink(good_index, p) == 0);
    expect_open_refused(prefix, "ck.index", "symbolic link");
    ckpt_reader *r = NULL;
    CHECK_RC(ckpt_reader_open_index(&r, prefix), CKPT_ECORRUPT);
    ckpt_reader_free(r);

    /* the index is a FIFO nobody writes into: refused without blocking */
    copy_ck(prefix, sizeof prefix, base, "index-fifo");
    CHECK(unlink(PATHF(p, "%s/index-fifo/ck.index", base)) == 0 && mkfifo(p, 0644) == 0);
    expect_open_refused(prefix, "ck.index", "FIFO");
    r = NULL;
    CHECK_RC(ckpt_reader_open_index(&r, prefix), CKPT_ECORRUPT);
    ckpt_reader_free(r);
    CHECK_EQ_INT(kind_of(p), S_IFIFO);

    /* the data file is a FIFO */
    copy_ck(prefix, sizeof prefix, base, "data-fifo");
    CHECK(unlink(PATHF(p, "%s/data-fifo/ck.data-00000-of-00001", base)) == 0 &&
          mkfifo(p, 0644) == 0);
    expect_open_refused(prefix, "ck.data-00000-of-00001", "FIFO");
    expect_read_refused(prefix, "FIFO");
    CHECK_EQ_INT(kind_of(p), S_IFIFO);

    /* the data file is a link to a valid data file elsewhere (same size, same bytes) */
    copy_ck(prefix, sizeof prefix, base, "data-link");
    CHECK(unlink(PATHF(p, "%s/data-link/ck.data-00000-of-00001", base)) == 0 &&
          symlink(good_data, p) == 0);
    expect_open_refused(prefix, "ck.data-00000-of-00001", "symbolic link");
    expect_read_refused(prefix, "symbolic link");
    CHECK(is_link_to(p, good_data));

    /* the data file is a directory */
    copy_ck(prefix, sizeof prefix, base, "data-dir");
    CHECK(unlink(PATHF(p, "%s/data-dir/ck.data-00000-of-00001", base)) == 0 && mkdir(p, 0755) == 0);
    expect_open_refused(prefix, "ck.data-00000-of-00001", "directory");
    expect_read_refused(prefix, "directory");

    /* the data file is a character device (/dev/null's numbers): never opened */
    copy_ck(prefix, sizeof prefix, base, "data-chardev");
    CHECK(unlink(PATHF(p, "%s/data-chardev/ck.data-00000-of-00001", base)) == 0);
    if (mknod(p, S_IFCHR | 0644, makedev(1, 3)) != 0) {
        printf("  char device case skipped: mknod %s: %s (needs root and a file system that "
               "allows devices)\n",
               p, strerror(errno));
    } else {
        expect_open_refused(prefix, "ck.data-00000-of-00001", "character device");
        expect_read_refused(prefix, "character device");
        CHECK_EQ_INT(kind_of(p), S_IFCHR);
    }

    /* the checkpoint they were all copied from is still good */
    CHECK(reads_back(PATHF(prefix, "%s/good/ck", base), 5));
    CHECK_VICTIM(&v);
}

/* =============================================================================================
 * 3. The state file: not a regular file, or crafted to make retention delete the wrong thing
 * ============================================================================================= */

static ckpt_state_entry entry(const char *prefix, int64_t counter, double ts)
{
    ckpt_state_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.prefix, sizeof e.prefix, "%s", prefix);
    e.save_counter = counter;
    e.epoch = counter % 1000 + 10; /* (counters may be INT64_MAX here) */
    e.step = counter % 1000 * 100 + 7;
    e.timestamp = ts;
    e.bytes = (uint64_t)counter * 4096 + 17;
    e.end_of_epoch = (int)(counter % 2);
    e.preserved = counter == 1;
    return e;
}

typedef struct crafted {
    const char *what;   /* what is wrong */
    const char *expect; /* a piece of the error message that names it */
    ckpt_state_entry entries[4];
    size_t n;
    const char *latest;
    int64_t save_counter;
    double last_preserved;
} crafted;

static void craft_state(ckpt_state *st, const crafted *c)
{
    memset(st, 0, sizeof *st);
    st->entries = (ckpt_state_entry *)c->entries;
    st->num_entries = c->n;
    snprintf(st->latest, sizeof st->latest, "%s", c->latest);
    st->save_counter = c->save_counter;
    st->last_preserved_timestamp = c->last_preserved;
}

static void case_state(void)
{
    char base[4200], dir[8400], p[8400], q[8400];
    PATHF(base, "%s/state", root);
    mkdir_or_die(base);
    victim v;
    static const char *const vnames[] = {"checkpoint", "tmp-target", NULL};
    victim_make(&v, PATHF(p, "%s/victim", base), vnames);
    double t0 = 1700000000.25;

    /* a valid state round-trips, written through a planted old-style temp link without
     * touching its target */
    ckpt_state_entry good_entries[3] = {entry("ck-1", 1, t0), entry("ck-2", 2, t0 + 60),
                                        entry("ck-3", 3, t0 + 120)};
    crafted good = {"valid", "", {good_entries[0], good_entries[1], good_entries[2]}, 3, "ck-3",
                    3, t0 - 5};
    ckpt_state gst;
    craft_state(&gst, &good);
    PATHF(dir, "%s/valid", base);
    mkdir_or_die(dir);
    PATHF(q, "%s/checkpoint.tmp-%ld", dir, (long)getpid());
    CHECK(symlink(victim_file(p, sizeof p, &v, 1), q) == 0);
    CHECK_OK(ckpt__state_write(&gst, dir));
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/checkpoint", dir)), S_IFREG);
    ckpt_state *st = NULL;
    CHECK_OK(ckpt_state_read(&st, dir));
    CHECK(st != NULL);
    if (st) {
        CHECK(strcmp(st->latest, "ck-3") == 0);
        CHECK_EQ_INT(st->save_counter, 3);
        CHECK(st->last_preserved_timestamp == t0 - 5);
        CHECK_EQ_INT(st->num_entries, 3);
        for (size_t i = 0; i < st->num_entries && i < 3; i++) {
            const ckpt_state_entry *a = &st->entries[i], *b = &good_entries[i];
            CHECK_MSG(strcmp(a->prefix, b->prefix) == 0 && a->save_counter == b->save_counter &&
                          a->epoch == b->epoch && a->step == b->step &&
                          a->timestamp == b->timestamp && a->bytes == b->bytes &&
                          a->end_of_epoch == b->end_of_epoch && a->preserved == b->preserved,
                      "entry %zu does not round-trip", i);
        }
    }
    ckpt_state_free(st);
    {
        char tn[64];
        snprintf(tn, sizeof tn, "checkpoint.tmp-%ld", (long)getpid());
        const char *want[] = {"checkpoint", tn, NULL};
        CHECK(holds_exactly(dir, want)); /* no temp file left; the planted link left alone */
    }
    uint8_t *valid_bytes = NULL;
    size_t valid_len = 0;
    CHECK(get_file(PATHF(p, "%s/checkpoint", dir), &valid_bytes, &valid_len) == 0);

    /* not a regular file: a FIFO (must not block), a link to a valid state file elsewhere */
    PATHF(dir, "%s/fifo", base);
    mkdir_or_die(dir);
    CHECK(mkfifo(PATHF(p, "%s/checkpoint", dir), 0644) == 0);
    st = NULL;
    CHECK_RC(ckpt_state_read(&st, dir), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "checkpoint") && strstr(last_msg(), "FIFO"),
              "should name the state file and say FIFO: %s", last_msg());
    CHECK(st != NULL && st->num_entries == 0 && st->latest[0] == '\0');
    ckpt_state_free(st);
    CHECK_EQ_INT(kind_of(p), S_IFIFO);

    victim_set(&v, 0, valid_bytes, valid_len); /* a valid state file elsewhere */
    victim_file(q, sizeof q, &v, 0);
    PATHF(dir, "%s/link", base);
    mkdir_or_die(dir);
    CHECK(symlink(q, PATHF(p, "%s/checkpoint", dir)) == 0);
    st = NULL;
    CHECK_RC(ckpt_state_read(&st, dir), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "checkpoint") && strstr(last_msg(), "symbolic link"),
              "should name the state file and say symbolic link: %s", last_msg());
    CHECK(st != NULL && st->num_entries == 0);
    ckpt_state_free(st);

    /* crafted states in a valid container */
    double nan = NAN;
    const crafted bad[] = {
        {"latest listed twice", "listed twice",
         {entry("ck-1", 1, t0), entry("ck-3", 3, t0 + 1), entry("ck-3", 3, t0 + 2)}, 3, "ck-3", 3,
         0},
        {"two entries with the same prefix", "ck-1 is listed twice",
         {entry("ck-1", 1, t0), entry("ck-2", 2, t0 + 1), entry("ck-1", 3, t0 + 2)}, 3, "ck-1", 3,
         0},
        {"negative counter", "-5",
         {entry("ck-1", -5, t0), entry("ck-2", 2, t0 + 1)}, 2, "ck-2", 2, 0},
        {"counter INT64_MAX", "9223372036854775807",
         {entry("ck-1", 1, t0), entry("ck-2", INT64_MAX, t0 + 1)}, 2, "ck-2", 2, 0},
        {"counter past 10^15", "1000000000000001",
         {entry("ck-1", 1, t0), entry("ck-2", CKPT__COUNTER_MAX + 1, t0 + 1)}, 2, "ck-2", 2, 0},
        {"unsorted counters", "oldest first",
         {entry("ck-2", 2, t0), entry("ck-1", 1, t0 + 1), entry("ck-3", 3, t0 + 2)}, 3, "ck-3", 3,
         0},
        {"latest not the newest entry", "newest listed is ck-2",
         {entry("ck-1", 1, t0), entry("ck-2", 2, t0 + 1)}, 2, "ck-1", 2, 0},
        {"latest not listed at all", "ck-9 is not listed", {entry("", 0, 0)}, 0, "ck-9", 9, 0},
        {"save counter -1", "-1", {entry("ck-1", 1, t0), entry("ck-2", 2, t0 + 1)}, 2, "ck-2", -1,
         0},
        {"NaN timestamp", "no valid time",
         {entry("ck-1", 1, t0), entry("ck-2", 2, nan)}, 2, "ck-2", 2, 0},
        {"NaN last preserved time", "not a number",
         {entry("ck-1", 1, t0), entry("ck-2", 2, t0 + 1)}, 2, "ck-2", 2, nan},
    };
    /* every crafted state is refused by the reader... */
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        ckpt_state cs;
        craft_state(&cs, &bad[i]);
        uint8_t *buf = NULL;
        size_t len = 0;
        CHECK_OK(ckpt__state_pack(&buf, &len, &cs, 1));
        PATHF(dir, "%s/crafted-%zu", base, i);
        mkdir_or_die(dir);
        CHECK(put_file(PATHF(p, "%s/checkpoint", dir), buf, len) == 0);
        free(buf);
        st = NULL;
        int rc = ckpt_state_read(&st, dir);
        CHECK_MSG(rc == CKPT_ECORRUPT, "%s: ckpt_state_read returned %d (%s), expected "
                                       "CKPT_ECORRUPT: %s",
                  bad[i].what, rc, ckpt_strerror(rc), last_msg());
        CHECK_MSG(rc != CKPT_OK ? strstr(last_msg(), bad[i].expect) != NULL &&
                                      strstr(last_msg(), "checkpoint") != NULL
                                : 0,
                  "%s: the error should name the file and say '%s': %s", bad[i].what,
                  bad[i].expect, last_msg());
        CHECK(st != NULL && st->num_entries == 0 && st->latest[0] == '\0');
        ckpt_state_free(st);
    }
    /* ...and refused by the writer: nothing written, the old file intact, no temp file left */
    PATHF(dir, "%s/valid", base);
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        ckpt_state cs;
        craft_state(&cs, &bad[i]);
        /* the deprecated public wrapper: the same refusal as the manager's writer */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        int rc = i % 2 ? ckpt_state_write(&cs, dir) : ckpt__state_write(&cs, dir);
#pragma GCC diagnostic pop
        CHECK_MSG(rc == CKPT_EINVAL, "%s: ckpt_state_write returned %d (%s), expected CKPT_EINVAL",
                  bad[i].what, rc, ckpt_strerror(rc));
        CHECK_MSG(file_equals(PATHF(p, "%s/checkpoint", dir), valid_bytes, valid_len),
                  "%s: the state file changed", bad[i].what);
    }
    {
        char tn[64];
        snprintf(tn, sizeof tn, "checkpoint.tmp-%ld", (long)getpid());
        const char *want[] = {"checkpoint", tn, NULL};
        CHECK(holds_exactly(dir, want));
    }
    st = NULL;
    CHECK_OK(ckpt_state_read(&st, dir));
    CHECK(st && st->num_entries == 3 && strcmp(st->latest, "ck-3") == 0);
    ckpt_state_free(st);
    free(valid_bytes);
    CHECK_VICTIM(&v);
}

/* =============================================================================================
 * 4. Scanning a directory with damaged, foreign and hostile *.index entries
 * ============================================================================================= */

/* Copies index `src` to `dst` with its header's timestamp set to NaN (a valid container). */
/* Copies index `src` to `dst` with its header changed by `edit` (container and CRC kept valid,
 * no validation): an index that no writer of ours makes. */
static int rewrite_index(const char *src, const char *dst, void (*edit)(Mpickpt__Header *, int64_t),
                         int64_t arg)
{
    uint8_t *buf = NULL, *out = NULL;
    size_t len = 0, olen = 0, plen = 0;
    const uint8_t *payload = NULL;
    Mpickpt__Index *idx = NULL;
    int rc = get_file(src, &buf, &len) == 0 ? CKPT_OK : CKPT_EIO;
    if (rc == CKPT_OK)
        rc = ckpt__container_open(&payload, &plen, buf, len, CKPT__MAGIC_INDEX, src);
    if (rc == CKPT_OK && !(idx = mpickpt__index__unpack(NULL, plen, payload)))
        rc = CKPT_ECORRUPT;
    if (rc == CKPT_OK && idx->header) {
        edit(idx->header, arg);
        rc = ckpt__container_pack(&out, &olen, CKPT__MAGIC_INDEX, &idx->base);
    }
    if (rc == CKPT_OK && put_file(dst, out, olen) != 0)
        rc = CKPT_EIO;
    if (idx)
        mpickpt__index__free_unpacked(idx, NULL);
    free(out);
    free(buf);
    return rc;
}

static void edit_nan_time(Mpickpt__Header *h, int64_t unused)
{
    (void)unused;
    h->timestamp = NAN;
}

static void edit_counter(Mpickpt__Header *h, int64_t counter)
{
    h->save_counter = counter;
}

static int write_nan_time_index(const char *src, const char *dst)
{
    return rewrite_index(src, dst, edit_nan_time, 0);
}

/* Rewrites the header's save counter of checkpoint `prefix`. */
static int set_index_counter(const char *prefix, int64_t counter)
{
    char path[8400];
    snprintf(path, sizeof path, "%s.index", prefix);
    return rewrite_index(path, path, edit_counter, counter);
}


static void case_scan(void)
{
    char base[4200], dir[8400], p[8400], q[8400], prefix[8400];
    PATHF(base, "%s/scan", root);
    mkdir_or_die(base);
    PATHF(dir, "%s/dir", base);
    mkdir_or_die(dir);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck-1", dir), 1, 0));
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck-2", dir), 2, 0));
    mkdir_or_die(PATHF(p, "%s/other", base));
    CHECK_OK(write_ck(PATHF(prefix, "%s/other/run-5", base), 5, 0));
    victim v;
    static const char *const vnames[] = {"valid.index", "notes.txt", NULL};
    victim_make(&v, PATHF(p, "%s/victim", base), vnames);
    uint8_t *idx = NULL;
    size_t idx_len = 0;
    CHECK(get_file(PATHF(p, "%s/other/run-5.index", base), &idx, &idx_len) == 0);
    victim_set(&v, 0, idx, idx_len); /* a valid index elsewhere */
    victim_file(q, sizeof q, &v, 0);

    /* the stray: a valid index under another name (its data file elsewhere: scan reads indexes) */
    CHECK(put_file(PATHF(p, "%s/stray.index", dir), idx, idx_len) == 0);
    /* ".index": a valid index without a name */
    CHECK(put_file(PATHF(p, "%s/.index", dir), idx, idx_len) == 0);
    CHECK(put_text(PATHF(p, "%s/x y.index", dir), "this is not an index at all\n") == 0);
    CHECK(mkfifo(PATHF(p, "%s/fifo.index", dir), 0644) == 0);
    CHECK(put_file(PATHF(p, "%s/trunc.index", dir), idx, idx_len / 2) == 0);
    CHECK(mkdir(PATHF(p, "%s/dir.index", dir), 0755) == 0);
    CHECK(symlink(q, PATHF(p, "%s/link.index", dir)) == 0);

    logcap cap;
    memset(&cap, 0, sizeof cap);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    ckpt_state *st = NULL;
    CHECK_OK(ckpt_state_scan(&st, dir));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    CHECK(st != NULL);
    if (st) {
        CHECK_EQ_INT(st->num_entries, 3);
        static const char *const want[] = {"ck-1", "ck-2", "stray"};
        static const int64_t counters[] = {1, 2, 5};
        for (size_t i = 0; i < st->num_entries && i < 3; i++) {
            const ckpt_state_entry *e = &st->entries[i];
            CHECK_MSG(strcmp(e->prefix, want[i]) == 0 && e->save_counter == counters[i] &&
                          e->epoch == counters[i] + 10 && e->step == counters[i] * 100 &&
                          isfinite(e->timestamp),
                      "scan entry %zu is '%s' (counter %lld), expected '%s' (counter %lld)", i,
                      e->prefix, (long long)e->save_counter, want[i], (long long)counters[i]);
        }
        if (st->num_entries >= 1) {
            struct stat a, b;
            char d[8400];
            CHECK(stat(PATHF(p, "%s/ck-1.index", dir), &a) == 0 &&
                  stat(PATHF(d, "%s/ck-1.data-00000-of-00001", dir), &b) == 0 &&
                  st->entries[0].bytes == (uint64_t)(a.st_size + b.st_size));
        }
        CHECK(strcmp(st->latest, "stray") == 0);
        CHECK_EQ_INT(st->save_counter, 5);
    }
    ckpt_state_free(st);
    /* one warning per skipped name, naming it */
    static const char *const skipped[] = {"/.index:", "/x y.index:", "/fifo.index:",
                                          "/trunc.index:", "/dir.index:", "/link.index:"};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(skipped); i++)
        CHECK_MSG(log_count(&cap, skipped[i]) == 1, "expected one warning naming '%s', got %d",
                  skipped[i], log_count(&cap, skipped[i]));
    /* ...by its own path, saying what it is */
    CHECK_MSG(log_count(&cap, "/dir/fifo.index is a FIFO") == 1 &&
                  log_count(&cap, "/dir/dir.index is a directory") == 1 &&
                  log_count(&cap, "/dir/link.index is a symbolic link") == 1 &&
                  log_count(&cap, ".index/") == 0,
              "the warnings should name each file by its path");
    CHECK_MSG(log_count(&cap, "/dir/x y.index: not an mpickpt index file") == 1,
              "the warning for 'x y.index' should say it is not an index file");
    CHECK_MSG(cap.n == (int)CKPT__ARRAY_LEN(skipped), "expected %zu warnings, got %d",
              CKPT__ARRAY_LEN(skipped), cap.n);
    for (int i = 0; i < cap.n; i++)
        printf("  warning: %s\n", cap.msg[i]);
    /* nothing was changed or removed */
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/fifo.index", dir)), S_IFIFO);
    CHECK(is_link_to(PATHF(p, "%s/link.index", dir), q));
    CHECK(file_equals(PATHF(p, "%s/trunc.index", dir), idx, idx_len / 2));
    CHECK(reads_back(PATHF(prefix, "%s/ck-2", dir), 2));
    free(idx);

    /* (b) valid indexes whose header cannot be listed in a state file: a save counter outside
     * 0..10^15, no valid time. Listed, they would make a state ckpt__state_write refuses (the
     * manager rebuilds its state by this scan, then every save would fail): skipped, with a
     * warning, like any index that does not load. */
    PATHF(dir, "%s/counters", base);
    mkdir_or_die(dir);
    static const struct {
        const char *name;
        int64_t counter;
    } hdr[] = {{"ck-1", 1}, {"neg", -5}, {"big", INT64_MAX}, {"past", CKPT__COUNTER_MAX + 1},
               {"edge", CKPT__COUNTER_MAX}};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(hdr); i++)
        CHECK_OK(write_ck(PATHF(prefix, "%s/%s", dir, hdr[i].name), hdr[i].counter, 0));
    CHECK_OK(write_nan_time_index(PATHF(p, "%s/ck-1.index", dir), PATHF(q, "%s/nan.index", dir)));
    memset(&cap, 0, sizeof cap);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    st = NULL;
    CHECK_OK(ckpt_state_scan(&st, dir));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    for (int i = 0; i < cap.n; i++)
        printf("  warning: %s\n", cap.msg[i]);
    CHECK(st && st->num_entries == 2 && strcmp(st->entries[0].prefix, "ck-1") == 0 &&
          strcmp(st->entries[st->num_entries - 1].prefix, "edge") == 0 &&
          st->save_counter == CKPT__COUNTER_MAX);
    static const char *const bad_hdr[] = {"/neg.index:", "/big.index:", "/past.index:",
                                          "/nan.index:"};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad_hdr); i++)
        CHECK_MSG(log_count(&cap, bad_hdr[i]) == 1, "expected one warning naming '%s'",
                  bad_hdr[i]);
    CHECK_EQ_INT(cap.n, 4);
    CHECK_MSG(log_count(&cap, "-5") == 1 && log_count(&cap, "9223372036854775807") == 1 &&
                  log_count(&cap, "1000000000000001") == 1,
              "each warning should say which save counter");
    /* what the scan found is a state that can be written and read back */
    if (st)
        CHECK_OK(ckpt__state_write(st, dir));
    ckpt_state_free(st);
    st = NULL;
    CHECK_OK(ckpt_state_read(&st, dir));
    CHECK(st && st->num_entries == 2 && strcmp(st->latest, "edge") == 0);
    ckpt_state_free(st);
    /* the manager's scan for "<name>-<N>.index" newer than its state file */
    CHECK_OK(write_ck(PATHF(prefix, "%s/ckpt-3", dir), 3, 0));
    CHECK_OK(write_ck(PATHF(prefix, "%s/ckpt-9999999999999999", dir), 9999999999999999LL, 0));
    memset(&cap, 0, sizeof cap);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    st = NULL;
    CHECK_OK(ckpt__state_scan_newer(&st, dir, "ckpt", 0));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    CHECK(st && st->num_entries == 1 && strcmp(st->entries[0].prefix, "ckpt-3") == 0);
    CHECK_MSG(log_count(&cap, "/ckpt-9999999999999999.index:") == 1,
              "expected a warning naming ckpt-9999999999999999.index");
    ckpt_state_free(st);
    CHECK_VICTIM(&v);
}

/* =============================================================================================
 * 5. gc and rmtree while someone swaps our temp directories for links to a victim directory
 * ============================================================================================= */

static const char *const race_names[2] = {"ck-9_temp", "workertemp_1"};
static const char *const race_stash[2] = {".stash-0", ".stash-1"};
/* names mpickpt owns inside a temp directory: gc removes them when it finds them there */
static const char *const race_files[2][3] = {
    {"part-00000-of-00001", "ck-9.data-00000-of-00001", ".pad-0"},
    {"ck-9.data-00001-of-00002", ".reserve-1", ".pad-1"},
};

static void make_race_dir(int dfd, int i)
{
    if (mkdirat(dfd, race_names[i], 0755) != 0 && errno != EEXIST)
        return;
    int d = openat(dfd, race_names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0)
        return;
    for (int k = 0; k < 3; k++) {
        int f = openat(d, race_files[i][k], O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (f >= 0) {
            ssize_t n = write(f, "garbage", 7);
            (void)n;
            close(f);
        }
    }
    close(d);
}

typedef struct racer {
    int dfd;
    const char *victim;
    atomic_int stop;
    atomic_long swaps;
} racer;

/* Swaps each name between the real directory and a link to the victim directory, until told to
 * stop; a directory that was removed meanwhile is made again (so the next call has work). Leaves
 * each name as a real directory or absent, never as the link. */
static void *race_thread(void *arg)
{
    racer *r = arg;
    while (!atomic_load(&r->stop)) {
        for (int i = 0; i < 2; i++) {
            if (renameat(r->dfd, race_names[i], r->dfd, race_stash[i]) != 0) {
                if (errno == ENOENT)
                    make_race_dir(r->dfd, i);
                continue;
            }
            if (symlinkat(r->victim, r->dfd, race_names[i]) == 0) {
                atomic_fetch_add(&r->swaps, 1);
                for (int k = 0; k < 20; k++)
                    sched_yield();
                unlinkat(r->dfd, race_names[i], 0);
            }
            renameat(r->dfd, race_stash[i], r->dfd, race_names[i]);
        }
    }
    return NULL;
}

/* One iteration: a checkpoint directory (a state file when `use_state`, else an index), our two
 * temp directories, a victim whose files carry our names; the racer swaps while the main thread
 * runs `op` (0: ckpt_gc, 1: ckpt__rmtree_at of both names). Returns 1 when the victim survived. */
static int race_once(const char *base, int it, int op, const uint8_t *index, size_t index_len,
                     int *op_failed)
{
    char dir[8400], p[8400], vdir[8400];
    PATHF(dir, "%s/%s-%d", base, op ? "rmtree" : "gc", it);
    mkdir_or_die(dir);
    if (it % 2) {
        CHECK(put_file(PATHF(p, "%s/ck-1.index", dir), index, index_len) == 0);
    } else {
        ckpt_state *st = NULL;
        CHECK_OK(ckpt_state_new(&st));
        CHECK_OK(ckpt__state_write(st, dir));
        ckpt_state_free(st);
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dfd >= 0);
    make_race_dir(dfd, 0);
    make_race_dir(dfd, 1);
    victim v;
    static const char *const vnames[] = {"part-00000-of-00001", "ck-9.data-00000-of-00001",
                                         "ck-9.data-00001-of-00002", ".pad-0", ".reserve-1",
                                         ".pad-1", NULL};
    victim_make(&v, PATHF(vdir, "%s/victim-%s-%d", base, op ? "rmtree" : "gc", it), vnames);

    racer r;
    r.dfd = dfd;
    r.victim = v.dir;
    atomic_init(&r.stop, 0);
    atomic_init(&r.swaps, 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, race_thread, &r) == 0);
    while (atomic_load(&r.swaps) < 2)
        sched_yield();
    int rc;
    if (op == 0) {
        rc = ckpt_gc(dir, 0, NULL, NULL, NULL);
    } else {
        rc = CKPT_OK;
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 2; i++) {
                int x = ckpt__rmtree_at(dfd, race_names[i], dir);
                rc = rc == CKPT_OK ? x : rc;
            }
    }
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    /* gc leaves a directory that changed under it (a warning); rmtree reports it */
    CHECK_MSG(rc == CKPT_OK || (op == 1 && rc == CKPT_EIO),
              "iteration %d: %s returned %d (%s) during the race: %s", it,
              op ? "ckpt__rmtree_at" : "ckpt_gc", rc, ckpt_strerror(rc), last_msg());
    if (rc != CKPT_OK) {
        (*op_failed)++;
        if (*op_failed <= 3)
            printf("  iteration %d (%s, during the race): %s: %s\n", it, op ? "rmtree" : "gc",
                   ckpt_strerror(rc), last_msg());
        ckpt_error_clear();
    }
    int intact = victim_intact(&v, 1);
    if (!intact)
        victim_intact(&v, 0); /* say what happened */

    /* without the race: our garbage goes, the checkpoint stays, the victim is still intact */
    CHECK_OK(ckpt_gc(dir, 0, NULL, NULL, NULL));
    const char *want[] = {it % 2 ? "ck-1.index" : "checkpoint", CKPT__LOCK_FILE, NULL};
    CHECK(holds_exactly(dir, want));
    CHECK(victim_intact(&v, 0));
    close(dfd);
    rm_rf(dir);
    if (intact)
        rm_rf(v.dir);
    victim_free(&v);
    return intact;
}

/* Counts the warnings of gc leaving a directory that changed under it. */
static void log_count_left(ckpt_log_level level, const char *message, void *payload)
{
    if (level <= CKPT_LOG_WARN && strstr(message, "gc: leaving "))
        (*(int *)payload)++;
}

static void case_race(void)
{
    char base[4200], p[8400], prefix[8400];
    PATHF(base, "%s/race", root);
    mkdir_or_die(base);
    mkdir_or_die(PATHF(p, "%s/src", base));
    CHECK_OK(write_ck(PATHF(prefix, "%s/src/ck-1", base), 1, 0));
    uint8_t *index = NULL;
    size_t index_len = 0;
    CHECK(get_file(PATHF(p, "%s/src/ck-1.index", base), &index, &index_len) == 0);
    for (int op = 0; op < 2; op++) {
        int damaged = 0, failed = 0, left = 0;
        ckpt_log_set(log_count_left, CKPT_LOG_WARN, &left);
        for (int it = 0; it < RACE_ITERATIONS; it++) {
            alarm(CASE_SECONDS); /* per iteration: a hang guard, not a deadline */
            damaged += !race_once(base, it, op, index, index_len, &failed);
        }
        ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
        printf("  %s: victim damaged in %d of %d iterations; %d call(s) reported an error "
               "and %d directories were left (warnings) during the race\n",
               op ? "ckpt__rmtree_at" : "ckpt_gc", damaged, RACE_ITERATIONS, failed, left);
        CHECK_MSG(damaged == 0, "%s deleted files outside the checkpoint directory in %d of %d "
                                "iterations",
                  op ? "ckpt__rmtree_at" : "ckpt_gc", damaged, RACE_ITERATIONS);
    }
    free(index);
}

/* =============================================================================================
 * 6. gc and delete_backup remove only what mpickpt owns
 * ============================================================================================= */

typedef struct gc_seen {
    int n;
    char path[16][512];
} gc_seen;

static void gc_collect(const char *path, const char *why, void *payload)
{
    (void)why;
    gc_seen *s = payload;
    if (s->n < 16)
        snprintf(s->path[s->n++], sizeof s->path[0], "%s", path);
}

/* The user's files of a project directory, whose names look like ours. */
static void make_project_files(const char *dir)
{
    char p[8400];
    mkdir_or_die(PATHF(p, "%s/build_temp", dir));
    CHECK(put_text(PATHF(p, "%s/build_temp/main.o", dir), "object code\n") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_logs", dir));
    CHECK(put_text(PATHF(p, "%s/workertemp_logs/log.txt", dir), "worker log\n") == 0);
    CHECK(put_text(PATHF(p, "%s/corpus.data-00000-of-00010", dir), "a text corpus shard\n") == 0);
    CHECK(put_text(PATHF(p, "%s/notes.txt", dir), "my notes\n") == 0);
}

static void check_project_files(const char *dir)
{
    char p[8400];
    CHECK(file_equals(PATHF(p, "%s/build_temp/main.o", dir), "object code\n", 12));
    CHECK(file_equals(PATHF(p, "%s/workertemp_logs/log.txt", dir), "worker log\n", 11));
    CHECK(file_equals(PATHF(p, "%s/corpus.data-00000-of-00010", dir), "a text corpus shard\n",
                      20));
    CHECK(file_equals(PATHF(p, "%s/notes.txt", dir), "my notes\n", 9));
}

static void case_ownership(void)
{
    char base[4200], dir[8400], p[8400], q[8400], prefix[8400];
    PATHF(base, "%s/ownership", root);
    mkdir_or_die(base);
    victim v;
    static const char *const vnames[] = {"part-00000-of-00001", "notes.txt", NULL};
    victim_make(&v, PATHF(p, "%s/victim", base), vnames);

    /* (a) a project directory that is not a checkpoint directory: refused, nothing removed */
    PATHF(dir, "%s/project", base);
    mkdir_or_die(dir);
    make_project_files(dir);
    mkdir_or_die(PATHF(p, "%s/chief", dir)); /* a chief/ that is not ours either */
    CHECK(put_text(PATHF(p, "%s/chief/readme", dir), "hello\n") == 0);
    gc_seen seen;
    memset(&seen, 0, sizeof seen);
    size_t removed = 99;
    for (int dry = 1; dry >= 0; dry--) {
        CHECK_RC(ckpt_gc(dir, dry, gc_collect, &seen, &removed), CKPT_EINVAL);
        CHECK_MSG(strstr(last_msg(), "not a checkpoint directory") &&
                      strstr(last_msg(), "nothing was removed"),
                  "the refusal should say why: %s", last_msg());
        CHECK_EQ_INT(removed, 0);
        CHECK_EQ_INT(seen.n, 0);
    }
    check_project_files(dir);
    {
        const char *want[] = {"build_temp", "workertemp_logs", "corpus.data-00000-of-00010",
                              "notes.txt", "chief", NULL};
        CHECK(holds_exactly(dir, want));
    }

    /* (b) the same names inside a real checkpoint directory, next to our real garbage */
    PATHF(dir, "%s/ckdir", base);
    mkdir_or_die(dir);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck-1", dir), 1, 0));
    make_project_files(dir);
    /* our garbage */
    mkdir_or_die(PATHF(p, "%s/ck-9_temp", dir));
    CHECK(put_text(PATHF(p, "%s/ck-9_temp/part-00000-of-00001", dir), "x") == 0);
    CHECK(put_text(PATHF(p, "%s/ck-9_temp/.pad-0", dir), "") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_1", dir));
    CHECK(put_text(PATHF(p, "%s/workertemp_1/ck-9.data-00001-of-00002", dir), "y") == 0);
    CHECK(put_text(PATHF(p, "%s/ck-9.data-00000-of-00002", dir), HDF5_SIGNATURE "rest") == 0);
    CHECK(put_text(PATHF(p, "%s/ck-8.data-00000-of-00001", dir), "") == 0);
    CHECK(put_text(PATHF(p, "%s/ck-1.index.tmp-0123456789abcdef", dir), "partial") == 0);
    CHECK(put_text(PATHF(p, "%s/checkpoint.tmp-4242", dir), "partial") == 0);
    /* look-alikes that are not ours */
    CHECK(put_text(PATHF(p, "%s/ck-7.data-00003-of-00002", dir), HDF5_SIGNATURE "rest") == 0);
    CHECK(mkfifo(PATHF(p, "%s/ck-6.data-00000-of-00001", dir), 0644) == 0);
    mkdir_or_die(PATHF(p, "%s/ck-5_temp", dir));
    CHECK(symlink(victim_file(prefix, sizeof prefix, &v, 0),
                  PATHF(p, "%s/ck-5_temp/part-00000-of-00001", dir)) == 0);
    CHECK(symlink(v.dir, PATHF(p, "%s/ck-4_temp", dir)) == 0);
    CHECK(symlink(v.dir, PATHF(p, "%s/workertemp_2", dir)) == 0);
    /* this version's in-flight names (issue 29: <base>.<id>_temp, workertemp_<r>.<id>): ours
     * when they hold only our files ... */
    mkdir_or_die(PATHF(p, "%s/ck-9.0123456789abcdef_temp", dir));
    CHECK(put_text(PATHF(p, "%s/ck-9.0123456789abcdef_temp/ck-9.data-00000-of-00002", dir),
                   HDF5_SIGNATURE) == 0);
    CHECK(put_text(PATHF(p, "%s/ck-9.0123456789abcdef_temp/.reserve-0", dir), "") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_1.0123456789abcdef", dir));
    CHECK(put_text(PATHF(p, "%s/workertemp_1.0123456789abcdef/ck-9.data-00001-of-00002", dir),
                   "y") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_3.fedcba9876543210", dir));
    /* ... and look-alikes that are not: a link, a name that is not an id, someone's file or a
     * link inside */
    CHECK(symlink(v.dir, PATHF(p, "%s/workertemp_2.0123456789abcdef", dir)) == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_4.0123456789ABCDEF", dir));
    CHECK(put_text(PATHF(p, "%s/workertemp_4.0123456789ABCDEF/.pad-4", dir), "") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_5.0123456789abcdef", dir));
    CHECK(put_text(PATHF(p, "%s/workertemp_5.0123456789abcdef/notes.txt", dir), "mine") == 0);
    mkdir_or_die(PATHF(p, "%s/ck-3.0123456789abcdef_temp", dir));
    CHECK(symlink(victim_file(q, sizeof q, &v, 1),
                  PATHF(p, "%s/ck-3.0123456789abcdef_temp/.pad-0", dir)) == 0);

    logcap cap;
    memset(&cap, 0, sizeof cap);
    memset(&seen, 0, sizeof seen);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    CHECK_OK(ckpt_gc(dir, 0, gc_collect, &seen, &removed));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    CHECK_EQ_INT(removed, 9);
    CHECK_EQ_INT(seen.n, 9);
    for (int i = 0; i < seen.n; i++)
        printf("  removed %s\n", seen.path[i]);
    for (int i = 0; i < cap.n; i++)
        printf("  warning: %s\n", cap.msg[i]);
    CHECK_MSG(log_count(&cap, "build_temp") == 1, "expected a warning naming build_temp");
    CHECK_MSG(log_count(&cap, "ck-5_temp") == 1, "expected a warning naming ck-5_temp");
    CHECK_MSG(log_count(&cap, "workertemp_5.0123456789abcdef") == 1,
              "expected a warning naming workertemp_5.0123456789abcdef");
    CHECK_MSG(log_count(&cap, "ck-3.0123456789abcdef_temp") == 1,
              "expected a warning naming ck-3.0123456789abcdef_temp");
    check_project_files(dir);
    {
        const char *want[] = {"ck-1.index", "ck-1.data-00000-of-00001", "build_temp",
                              "workertemp_logs", "corpus.data-00000-of-00010", "notes.txt",
                              "ck-7.data-00003-of-00002", "ck-6.data-00000-of-00001",
                              "ck-5_temp", "ck-4_temp", "workertemp_2",
                              "workertemp_2.0123456789abcdef", "workertemp_4.0123456789ABCDEF",
                              "workertemp_5.0123456789abcdef", "ck-3.0123456789abcdef_temp",
                              CKPT__LOCK_FILE /* gc's lock, kept */, NULL};
        CHECK(holds_exactly(dir, want));
    }
    CHECK(is_link_to(PATHF(p, "%s/workertemp_2.0123456789abcdef", dir), v.dir));
    CHECK(file_equals(PATHF(p, "%s/workertemp_5.0123456789abcdef/notes.txt", dir), "mine", 4));
    CHECK_EQ_INT(kind_of(PATHF(p, "%s/ck-6.data-00000-of-00001", dir)), S_IFIFO);
    CHECK(is_link_to(PATHF(p, "%s/ck-4_temp", dir), v.dir));
    CHECK(is_link_to(PATHF(p, "%s/workertemp_2", dir), v.dir));
    CHECK(reads_back(PATHF(prefix, "%s/ck-1", dir), 1));

    /* (c) delete_backup of a work directory whose chief/ also holds the user's notes.txt */
    char work[8400];
    PATHF(work, "%s/work", base);
    mkdir_or_die(work);
    mkdir_or_die(PATHF(p, "%s/chief", work));
    CHECK_OK(write_ck(PATHF(prefix, "%s/chief/ck-1", work), 1, 0));
    CHECK_OK(write_ck(PATHF(prefix, "%s/chief/ck-2", work), 2, 0));
    ckpt_state *st = NULL;
    CHECK_OK(ckpt_state_scan(&st, PATHF(p, "%s/chief", work)));
    CHECK_OK(ckpt__state_write(st, p));
    ckpt_state_free(st);
    CHECK(put_text(PATHF(p, "%s/chief/metrics.jsonl", work), "{}\n") == 0);
    mkdir_or_die(PATHF(p, "%s/chief/ck-3_temp", work));
    CHECK(put_text(PATHF(p, "%s/chief/ck-3_temp/part-00000-of-00001", work), "z") == 0);
    CHECK(put_text(PATHF(p, "%s/chief/notes.txt", work), "my notes\n") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_1", work));
    CHECK(put_text(PATHF(p, "%s/workertemp_1/ck-3.data-00001-of-00002", work), "w") == 0);
    CHECK(symlink(v.dir, PATHF(p, "%s/workertemp_3", work)) == 0);
    memset(&cap, 0, sizeof cap);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    CHECK_OK(ckpt__remove_backup_dir(work));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    for (int i = 0; i < cap.n; i++)
        printf("  warning: %s\n", cap.msg[i]);
    CHECK_MSG(log_count(&cap, "work/chief: it holds files mpickpt did not write") == 1,
              "expected a warning that work/chief was left");
    CHECK(file_equals(PATHF(p, "%s/chief/notes.txt", work), "my notes\n", 9));
    {
        const char *want[] = {"notes.txt", NULL};
        CHECK(holds_exactly(PATHF(p, "%s/chief", work), want));
        const char *want_work[] = {"chief", "workertemp_3", NULL};
        CHECK(holds_exactly(work, want_work));
    }
    CHECK(is_link_to(PATHF(p, "%s/workertemp_3", work), v.dir));

    /* (d) delete_backup of a work directory whose chief/ is not a checkpoint directory: nothing
     * removed, not even a workertemp_<r> with our names in it */
    PATHF(work, "%s/work2", base);
    mkdir_or_die(work);
    mkdir_or_die(PATHF(p, "%s/chief", work));
    CHECK(put_text(PATHF(p, "%s/chief/notes.txt", work), "my notes\n") == 0);
    mkdir_or_die(PATHF(p, "%s/workertemp_7", work));
    CHECK(put_text(PATHF(p, "%s/workertemp_7/part-00000-of-00001", work), "mine\n") == 0);
    memset(&cap, 0, sizeof cap);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    CHECK_OK(ckpt__remove_backup_dir(work));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    CHECK_MSG(log_count(&cap, "work2: it holds files mpickpt did not write") == 1,
              "expected a warning that work2 was left");
    CHECK(file_equals(PATHF(p, "%s/chief/notes.txt", work), "my notes\n", 9));
    CHECK(file_equals(PATHF(p, "%s/workertemp_7/part-00000-of-00001", work), "mine\n", 5));

    /* (d2) delete_backup of a work directory whose chief/ is a link to someone's checkpoint
     * directory: refused, naming it; the link's target untouched */
    char theirs[8400];
    PATHF(theirs, "%s/theirs", base);
    mkdir_or_die(theirs);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck-1", theirs), 1, 0));
    PATHF(work, "%s/work3", base);
    mkdir_or_die(work);
    CHECK(symlink(theirs, PATHF(p, "%s/chief", work)) == 0);
    CHECK_RC(ckpt__remove_backup_dir(work), CKPT_ECORRUPT);
    CHECK_MSG(strstr(last_msg(), "chief") && strstr(last_msg(), "symbolic link"),
              "the refusal should name chief and say it is a symbolic link: %s", last_msg());
    CHECK(is_link_to(p, theirs));
    CHECK(reads_back(prefix, 1));
    {
        const char *want[] = {"ck-1.index", "ck-1.data-00000-of-00001", NULL};
        CHECK(holds_exactly(theirs, want));
    }

    /* (e) deleting a checkpoint (retention) among entries that carry its data file names but
     * are not its data files: a link (the entry goes, never its target) and a directory (left,
     * with a warning: a failure here would fail the save that applied retention) */
    PATHF(dir, "%s/retention", base);
    mkdir_or_die(dir);
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck-1", dir), 1, 0));
    CHECK_OK(write_ck(PATHF(prefix, "%s/ck-2", dir), 2, 0));
    CHECK(symlink(victim_file(p, sizeof p, &v, 0),
                  PATHF(q, "%s/ck-1.data-00001-of-00003", dir)) == 0);
    mkdir_or_die(PATHF(p, "%s/ck-1.data-00002-of-00003", dir));
    CHECK(put_text(PATHF(p, "%s/ck-1.data-00002-of-00003/mine.txt", dir), "mine\n") == 0);
    memset(&cap, 0, sizeof cap);
    ckpt_log_set(log_capture, CKPT_LOG_WARN, &cap);
    CHECK_OK(ckpt_checkpoint_delete(PATHF(prefix, "%s/ck-1", dir)));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    for (int i = 0; i < cap.n; i++)
        printf("  warning: %s\n", cap.msg[i]);
    CHECK_MSG(log_count(&cap, "ck-1.data-00002-of-00003") == 1,
              "expected a warning naming the directory left");
    CHECK(file_equals(PATHF(p, "%s/ck-1.data-00002-of-00003/mine.txt", dir), "mine\n", 5));
    {
        const char *want[] = {"ck-2.index", "ck-2.data-00000-of-00001",
                              "ck-1.data-00002-of-00003", NULL};
        CHECK(holds_exactly(dir, want));
    }
    CHECK(reads_back(PATHF(prefix, "%s/ck-2", dir), 2));

    CHECK_VICTIM(&v);
}

/* ============================================================================================= */

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"writer", case_writer}, {"reader", case_reader}, {"state", case_state},
    {"scan", case_scan},     {"race", case_race},     {"ownership", case_ownership},
};

int main(int argc, char **argv)
{
    const char *env = getenv("MPICKPT_TEST_DIR");
    snprintf(root, sizeof root, "%s", env && *env ? env : "/tmp/test_hostile_fs");
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    rm_rf(root);
    CHECK(ckpt__mkdir_p(root, 0755) == CKPT_OK);
    for (size_t i = 0; i < CKPT__ARRAY_LEN(cases); i++) {
        int run = argc < 2;
        for (int a = 1; a < argc; a++)
            run |= strcmp(argv[a], cases[i].name) == 0;
        if (!run)
            continue;
        begin_case(cases[i].name, CASE_SECONDS);
        cases[i].fn();
        alarm(0);
    }
    return CHECK_DONE();
}
