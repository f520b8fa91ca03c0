/*
 * mpickpt-bench: how fast the collective saver saves and restores, against a plain-POSIX baseline
 * of the same bytes measured in the same run (this machine's disk drifts 2-3x over minutes, so
 * only ratios of medians of interleaved measurements mean anything).
 *
 *   mpirun -np N mpickpt-bench --dir DIR --scenario large|small|restore|async|all
 *          [--mb-per-rank M] [--reps R] [--layout shared|per-rank] [--collective 0|1] [--json]
 *          [--tensors K] [--min-kb A] [--max-kb B] [--max-shard-bytes S] [--hint KEY=VALUE]...
 *          [--cold 0|1] [-v]
 *
 * Scenarios (every time is the maximum over ranks: barrier before, allreduce MAX after; each rep
 * runs the library and the baseline back to back, alternating which goes first):
 *   large    4 float32 tensors per rank of M/4 MiB each (one partitioned across ranks by rows, three
 *            full), sync save (the library fsyncs) vs write(2) of the same buffers to one plain file
 *            per rank + fsync + close.
 *   small    K tensors per rank of A..B KiB (the same sizes on every rank), sync save vs one plain
 *            file per rank holding the same bytes, written as one stream + fsync; then the row
 *            restore_small: that checkpoint restored warm vs read(2) of the same bytes.
 *   restore  the large checkpoint restored warm (page cache), cold (drop_caches before each
 *            measurement; needs root, else skipped with a message) and resharded (the partitioned
 *            tensor registered with a row split shifted by half a block, and every rank restoring
 *            the previous rank's full tensors), vs read(2) of the same bytes from one plain file per
 *            rank (warm and cold likewise).
 *   async    the blocking time of an async save (option async = 1) vs a memcpy of the same bytes
 *            into pre-faulted buffers; also the background time (start to ckpt_saver_sync()).
 * A warm-up save (or restore) precedes the reps of each scenario and is not counted: it makes the
 * plan, faults in the library's snapshot buffers and HDF5's first-use costs.
 *
 * Output: a table on rank 0; with --json also one JSON line per scenario:
 *   {"scenario","ranks","layout","collective","bytes_per_rank","reps","mpickpt_s","baseline_s",
 *    "speed_ratio" (= baseline_s / mpickpt_s),"mpickpt_gbps","baseline_gbps" (aggregate over ranks,
 *    1e9 bytes/s),"phases":{"write","agree","merge","commit"} (medians of ckpt_saver_last_metrics;
 *    for restore scenarios: of the save that wrote the checkpoint), ...}
 *   "paired_ratio_p25/p50/p75": quartiles of the per-rep ratios (each rep's baseline / library
 *   time, measured back to back): the spread that the disk's drift and other load leave;
 *   restore rows add "checked_read_s" (read(2) of the same bytes with a CRC-32C of each 256 KiB
 *   chunk right after it is read: the least a reader that checks every byte does),
 *   "checked_ceiling" (= baseline_s / checked_read_s, the best speed_ratio such a reader can
 *   reach here) and "ratio_to_checked" (= checked_read_s / mpickpt_s);
 *   async adds "blocking_over_memcpy" (= median blocking / median memcpy) and "background_s".
 * Every checkpoint and baseline file is deleted after its rep. DIR must have 3x the bytes written
 * at once free (else exit 3 with a message).
 */
#include <mpickpt.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)
#define NT 4              /* tensors of the large model */
#define COLS 1024         /* float32 columns: 4 KiB rows */
#define CHUNK (64u << 20) /* baseline write/read chunk */
#define MAX_REPS 1000

typedef struct opts {
    const char *dir;
    const char *scenario;
    long mb;
    int reps;
    ckpt_layout layout;
    int collective;
    int json;
    int tensors, min_kb, max_kb;
    int64_t max_shard_bytes;
    MPI_Info info;
    int cold; /* 1: measure cold restores (when drop_caches is permitted) */
    int verbose;
} opts;

static int g_rank, g_size;
static MPI_Comm g_node; /* ranks on this node: its rank 0 drops the node's page cache */
static int g_header_done;

/* ---- helpers --------------------------------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double max_all(double v)
{
    double m = 0;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static void die(const char *what, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    fprintf(stderr, "mpickpt-bench: rank %d: %s: %s: %s\n", g_rank, what, ckpt_strerror(rc),
            e && e->message[0] ? e->message : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void die_errno(const char *what, const char *path)
{
    fprintf(stderr, "mpickpt-bench: rank %d: %s %s: %s\n", g_rank, what, path, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MAX_REPS];
    if (n <= 0)
        return 0;
    memcpy(s, v, sizeof *v * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* Quantile q of v (linear interpolation between order statistics). */
static double quantile(const double *v, int n, double q)
{
    double s[MAX_REPS];
    if (n <= 0)
        return 0;
    memcpy(s, v, sizeof *v * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double x = q * (n - 1);
    int i = (int)x;
    return i + 1 < n ? s[i] + (x - i) * (s[i + 1] - s[i]) : s[n - 1];
}

/* Page-aligned, pre-faulted memory (first touch is slow here: never inside a measurement). */
static void *alloc_touched(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
        fprintf(stderr, "mpickpt-bench: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(p, 0, n);
    return p;
}

/* Values of a tensor: element i of a linear run starting at `base` (exact in float32). */
static void fill_linear(float *f, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i++)
        f[i] = (float)((base + i) & 0xFFFFF);
}

/* Checks a sample of the elements (and the last one) against fill_linear's values. */
static int check_linear(const float *f, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i += 4099)
        if (f[i] != (float)((base + i) & 0xFFFFF))
            return 0;
    return n == 0 || f[n - 1] == (float)((base + n - 1) & 0xFFFFF);
}

/* ---- plain-POSIX baselines ------------------------------------------------------------------- */

static void write_all(int fd, const unsigned char *p, size_t n, const char *path)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n > CHUNK ? CHUNK : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die_errno("write", path);
        p += w;
        n -= (size_t)w;
    }
}

static void read_all(int fd, unsigned char *p, size_t n, const char *path)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n > CHUNK ? CHUNK : n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            die_errno("read", path);
        }
        p += r;
        n -= (size_t)r;
    }
}

/* open + write(2) in large chunks + fsync + close. Local. */
static void plain_write(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die_errno("open", path);
    write_all(fd, buf, n, path);
    if (fsync(fd) != 0)
        die_errno("fsync", path);
    if (close(fd) != 0)
        die_errno("close", path);
}

static void plain_read(const char *path, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die_errno("open", path);
    read_all(fd, buf, n, path);
    close(fd);
}

/* The least a reader that checks every byte must do: read(2) in 256 KiB chunks, each checksummed
 * right after it is read (mpickpt's own read loop, without HDF5, the index or MPI). */
static void checked_read(const char *path, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die_errno("open", path);
    const size_t chunk = (size_t)256 << 10;
    uint32_t crc = 0;
    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        read_all(fd, (unsigned char *)buf + off, len, path);
        crc = ckpt_crc32c_extend(crc, (unsigned char *)buf + off, len);
    }
    close(fd);
    static volatile uint32_t sink;
    sink ^= crc;
}

/* Timed write baseline (collective): max over ranks; the file stays (the caller removes it). */
static double timed_plain_write(const char *path, const void *buf, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    plain_write(path, buf, n);
    return max_all(now() - t0);
}

static double timed_plain_read(const char *path, void *buf, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    plain_read(path, buf, n);
    return max_all(now() - t0);
}

static double timed_checked_read(const char *path, void *buf, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    checked_read(path, buf, n);
    return max_all(now() - t0);
}

static void remove_all(const char *path)
{
    unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Drops the page cache on every node (collective). Returns 1 when it worked everywhere; on failure
 * *why says why (rank 0's view). */
static int drop_caches(char *why, size_t whylen)
{
    int ok = 1, node_rank = 0;
    MPI_Comm_rank(g_node, &node_rank);
    if (node_rank == 0) {
        sync();
        int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
        if (fd < 0 || write(fd, "3", 1) != 1) {
            ok = 0;
            if (why)
                snprintf(why, whylen, "cannot write /proc/sys/vm/drop_caches: %s (needs root)",
                         strerror(errno));
        }
        if (fd >= 0)
            close(fd);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (why) {
        MPI_Bcast(why, (int)whylen, MPI_CHAR, 0, MPI_COMM_WORLD);
        why[whylen - 1] = '\0';
    }
    return all;
}

/* ---- the models ------------------------------------------------------------------------------ */

/* Large: tensor 0 is `part` (global [size*R, COLS], this rank's R rows), 1..3 are full [R, COLS]
 * named rank<r>/full<k>; all four of R*COLS floats, contiguous in one arena. */
typedef struct large_model {
    unsigned char *arena;
    size_t bytes, tbytes;
    int64_t R;
    float *t[NT];
} large_model;

static uint64_t full_base(int owner, int k)
{
    return (uint64_t)owner * 7919u + (uint64_t)k * 104729u;
}

static void large_init(large_model *m, long mb)
{
    m->bytes = (size_t)mb << 20;
    m->tbytes = m->bytes / NT;
    m->R = (int64_t)(m->tbytes / (COLS * sizeof(float)));
    m->arena = alloc_touched(m->bytes);
    size_t n = m->tbytes / sizeof(float);
    for (int k = 0; k < NT; k++) {
        m->t[k] = (float *)(m->arena + (size_t)k * m->tbytes);
        fill_linear(m->t[k], n,
                    k == 0 ? (uint64_t)g_rank * (uint64_t)m->R * COLS : full_base(g_rank, k));
    }
}

/* Registers the large model: as written (reshard = 0), or resharded (1): rank r takes rows
 * [rR + R/2, (r+1)R + R/2) of `part` (the last rank: its last R/2 rows plus rows [0, R/2)), so
 * every rank's box straddles two stored pieces, and the full tensors of rank r-1 (another rank's
 * file). */
static void large_register(ckpt_saver *s, large_model *m, int reshard)
{
    int64_t R = m->R, half = R / 2, dims[2] = {(int64_t)g_size * R, COLS}, fd[2] = {R, COLS};
    ckpt_shape gshape, fshape;
    ckpt_shape_init(&gshape, 2, dims);
    ckpt_shape_init(&fshape, 2, fd);
    int rc;
    if (!reshard) {
        int64_t st[2] = {(int64_t)g_rank * R, 0}, ct[2] = {R, COLS};
        ckpt_slice sl;
        ckpt_slice_init(&sl, 2, st, ct);
        if ((rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &sl, m->t[0])))
            die("add_slice", rc);
    } else if (g_rank < g_size - 1) {
        int64_t st[2] = {(int64_t)g_rank * R + half, 0}, ct[2] = {R, COLS};
        ckpt_slice sl;
        ckpt_slice_init(&sl, 2, st, ct);
        if ((rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &sl, m->t[0])))
            die("add_slice", rc);
    } else {
        int64_t st1[2] = {(int64_t)g_rank * R + half, 0}, ct1[2] = {R - half, COLS};
        int64_t st2[2] = {0, 0}, ct2[2] = {half, COLS};
        ckpt_slice a, b;
        ckpt_slice_init(&a, 2, st1, ct1);
        ckpt_slice_init(&b, 2, st2, ct2);
        if ((rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &a, m->t[0])) ||
            (rc = ckpt_saver_add_slice(s, "part", CKPT_FLOAT32, &gshape, &b,
                                       m->t[0] + (size_t)(R - half) * COLS)))
            die("add_slice", rc);
    }
    int owner = reshard ? (g_rank + g_size - 1) % g_size : g_rank;
    for (int k = 1; k < NT; k++) {
        char name[64];
        snprintf(name, sizeof name, "rank%04d/full%d", owner, k);
        if ((rc = ckpt_saver_add_full(s, name, CKPT_FLOAT32, &fshape, m->t[k])))
            die("add_full", rc);
    }
}

/* After a restore with the given registration: are the values the ones that were saved? */
static int large_check(const large_model *m, int reshard)
{
    int64_t R = m->R, half = R / 2;
    size_t n = m->tbytes / sizeof(float);
    int ok;
    if (!reshard)
        ok = check_linear(m->t[0], n, (uint64_t)g_rank * (uint64_t)R * COLS);
    else if (g_rank < g_size - 1)
        ok = check_linear(m->t[0], n, (uint64_t)((int64_t)g_rank * R + half) * COLS);
    else
        ok = check_linear(m->t[0], (size_t)(R - half) * COLS,
                          (uint64_t)((int64_t)g_rank * R + half) * COLS) &&
             check_linear(m->t[0] + (size_t)(R - half) * COLS, (size_t)half * COLS, 0);
    int owner = reshard ? (g_rank + g_size - 1) % g_size : g_rank;
    for (int k = 1; k < NT; k++)
        ok = ok && check_linear(m->t[k], n, full_base(owner, k));
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* Small: K tensors of min_kb..max_kb KiB (the same sizes on every rank), contiguous. */
typedef struct small_model {
    unsigned char *arena;
    size_t bytes;
    int k;
    size_t *off, *len;
} small_model;

static void small_init(small_model *m, const opts *o)
{
    m->k = o->tensors;
    m->off = calloc((size_t)m->k, sizeof *m->off);
    m->len = calloc((size_t)m->k, sizeof *m->len);
    uint64_t x = 88172645463325252ull; /* xorshift, the same sequence on every rank */
    size_t lo = (size_t)o->min_kb * 1024, hi = (size_t)o->max_kb * 1024, total = 0;
    for (int i = 0; i < m->k; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t len = lo + (size_t)(x % (hi - lo + 1));
        len &= ~(size_t)3; /* whole float32s */
        if (len < 4)
            len = 4;
        m->off[i] = total;
        m->len[i] = len;
        total += len;
    }
    m->bytes = total;
    m->arena = alloc_touched(total);
    fill_linear((float *)m->arena, total / sizeof(float), (uint64_t)g_rank * 31337u);
}

static void small_register(ckpt_saver *s, small_model *m)
{
    for (int i = 0; i < m->k; i++) {
        char name[64];
        snprintf(name, sizeof name, "rank%04d/t%05d", g_rank, i);
        int64_t n = (int64_t)(m->len[i] / sizeof(float));
        ckpt_shape sh;
        ckpt_shape_init(&sh, 1, &n);
        int rc = ckpt_saver_add_full(s, name, CKPT_FLOAT32, &sh, m->arena + m->off[i]);
        if (rc != CKPT_OK)
            die("add_full", rc);
    }
}

/* ---- results --------------------------------------------------------------------------------- */

typedef struct result {
    const char *scenario;
    const char *baseline;
    size_t bytes; /* per rank */
    int reps;
    double lib[MAX_REPS], base[MAX_REPS], bg[MAX_REPS];
    double chk[MAX_REPS]; /* restore: checked_read() of the same bytes */
    int has_chk;
    double ph[4][MAX_REPS];
    int nph; /* samples of the phases */
    int async;
    const char *skipped;
} result;

static const char *layout_name(ckpt_layout l)
{
    return l == CKPT_LAYOUT_SHARED ? "shared" : "per-rank";
}

static void print_result(const opts *o, const result *r)
{
    if (g_rank != 0)
        return;
    if (!g_header_done) {
        printf("%-20s %-8s %4s %5s %9s %4s %10s %10s %7s %8s %8s | %8s %8s %8s %8s\n", "scenario",
               "layout", "coll", "ranks", "MiB/rank", "reps", "mpickpt_s", "baseline_s", "ratio",
               "lib_GB/s", "base_GB/s", "write_s", "agree_s", "merge_s", "commit_s");
        g_header_done = 1;
    }
    if (r->skipped) {
        printf("%-20s skipped: %s\n", r->scenario, r->skipped);
        if (o->json)
            printf("{\"scenario\":\"%s\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
                   "\"skipped\":\"%s\"}\n",
                   r->scenario, g_size, layout_name(o->layout), o->collective, r->skipped);
        fflush(stdout);
        return;
    }
    double lib = median(r->lib, r->reps), base = median(r->base, r->reps);
    double ph[4];
    for (int p = 0; p < 4; p++)
        ph[p] = median(r->ph[p], r->nph);
    double total = (double)r->bytes * g_size;
    double ratio = lib > 0 ? base / lib : 0;
    /* The spread: each rep's own ratio (library and baseline ran back to back), quartiles. */
    double paired[MAX_REPS];
    for (int i = 0; i < r->reps; i++)
        paired[i] = r->lib[i] > 0 ? r->base[i] / r->lib[i] : 0;
    double q1 = quantile(paired, r->reps, 0.25), q3 = quantile(paired, r->reps, 0.75);
    printf("%-20s %-8s %4s %5d %9.1f %4d %10.4f %10.4f %7.3f %8.3f %8.3f | %8.4f %8.4f %8.4f "
           "%8.4f\n",
           r->scenario, layout_name(o->layout),
           o->layout == CKPT_LAYOUT_SHARED ? (o->collective ? "on" : "off") : "-", g_size,
           (double)r->bytes / MiB, r->reps, lib, base, ratio, total / lib / 1e9, total / base / 1e9,
           ph[0], ph[1], ph[2], ph[3]);
    printf("%-20s   per-rep ratio quartiles %.3f .. %.3f (median %.3f)\n", "", q1, q3,
           quantile(paired, r->reps, 0.5));
    if (r->async)
        printf("%-20s   blocking_over_memcpy %.3f  background_s %.4f (start of save to sync)\n", "",
               base > 0 ? lib / base : 0, median(r->bg, r->reps));
    double chk = r->has_chk ? median(r->chk, r->reps) : 0;
    if (r->has_chk)
        printf("%-20s   checked read (read + CRC-32C per 256 KiB) %.4f s: baseline/checked %.3f "
               "(the ceiling of a reader that checks every byte), checked/mpickpt %.3f\n",
               "", chk, chk > 0 ? base / chk : 0, lib > 0 ? chk / lib : 0);
    if (o->json) {
        printf("{\"scenario\":\"%s\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
               "\"bytes_per_rank\":%zu,\"reps\":%d,\"mpickpt_s\":%.9g,\"baseline_s\":%.9g,"
               "\"speed_ratio\":%.6g,\"mpickpt_gbps\":%.6g,\"baseline_gbps\":%.6g,"
               "\"baseline\":\"%s\"",
               r->scenario, g_size, layout_name(o->layout), o->collective, r->bytes, r->reps, lib,
               base, ratio, total / lib / 1e9, total / base / 1e9, r->baseline);
        printf(",\"paired_ratio_p25\":%.6g,\"paired_ratio_p50\":%.6g,\"paired_ratio_p75\":%.6g", q1,
               quantile(paired, r->reps, 0.5), q3);
        if (r->async)
            printf(",\"blocking_over_memcpy\":%.6g,\"background_s\":%.9g",
                   base > 0 ? lib / base : 0, median(r->bg, r->reps));
        if (r->has_chk)
            printf(",\"checked_read_s\":%.9g,\"checked_ceiling\":%.6g,\"ratio_to_checked\":%.6g",
                   chk, chk > 0 ? base / chk : 0, lib > 0 ? chk / lib : 0);
        printf(",\"phases\":{\"write\":%.9g,\"agree\":%.9g,\"merge\":%.9g,\"commit\":%.9g}}\n",
               ph[0], ph[1], ph[2], ph[3]);
    }
    fflush(stdout);
}

/* ---- saves ----------------------------------------------------------------------------------- */

static ckpt_saver *make_saver(const opts *o, int async)
{
    ckpt_saver_options so = CKPT_SAVER_OPTIONS_INIT;
    so.layout = o->layout;
    so.collective_io = o->collective;
    so.info = o->info;
    so.max_shard_bytes = o->max_shard_bytes;
    so.async = async;
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, &so);
    if (rc != CKPT_OK)
        die("ckpt_saver_create", rc);
    return s;
}

static void ckpt_path(char *out, size_t n, const opts *o, const char *what, int rep)
{
    snprintf(out, n, "%s/bench-%s-%d", o->dir, what, rep);
}

/* Removes a checkpoint (rank 0) and waits for it (collective). Also used before a save, against
 * the leftovers of an interrupted run. */
static void delete_ckpt(const char *prefix)
{
    if (g_rank == 0) {
        int rc = ckpt_checkpoint_delete(prefix);
        if (rc != CKPT_OK && rc != CKPT_ENOTFOUND)
            die("ckpt_checkpoint_delete", rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* One timed sync save: max over ranks; phases into r at sample i (when r != NULL). */
static double timed_save(ckpt_saver *s, const char *prefix, result *r, int i)
{
    delete_ckpt(prefix);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    int rc = ckpt_saver_write(s, prefix, NULL);
    double t = now() - t0;
    if (rc != CKPT_OK)
        die("ckpt_saver_write", rc);
    t = max_all(t);
    if (r) {
        ckpt_save_metrics m;
        if ((rc = ckpt_saver_last_metrics(s, &m)) != CKPT_OK)
            die("ckpt_saver_last_metrics", rc);
        r->ph[0][i] = m.write_s;
        r->ph[1][i] = m.agree_s;
        r->ph[2][i] = m.merge_s;
        r->ph[3][i] = m.commit_s;
        if (i + 1 > r->nph)
            r->nph = i + 1;
    }
    return t;
}

static void baseline_path(char *out, size_t n, const opts *o)
{
    snprintf(out, n, "%s/bench-baseline-%05d.bin", o->dir, g_rank);
}

/* Sync saves of what `s` has registered (`bytes` per rank in `buf`) vs write+fsync, interleaved. */
static void save_scenario(const opts *o, ckpt_saver *s, const char *name, const void *buf,
                          size_t bytes, result *r)
{
    char prefix[4096], base[4096];
    baseline_path(base, sizeof base, o);
    r->scenario = name;
    r->baseline = "write+fsync";
    r->bytes = bytes;
    r->reps = o->reps;
    /* warm-up: the plan, HDF5's first use, the file system's first allocation */
    ckpt_path(prefix, sizeof prefix, o, name, 0);
    timed_save(s, prefix, NULL, 0);
    delete_ckpt(prefix);
    timed_plain_write(base, buf, bytes);
    remove_all(base);
    for (int i = 0; i < o->reps; i++) {
        ckpt_path(prefix, sizeof prefix, o, name, i + 1);
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                r->lib[i] = timed_save(s, prefix, r, i);
                delete_ckpt(prefix);
            } else {
                r->base[i] = timed_plain_write(base, buf, bytes);
                remove_all(base);
            }
        }
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  %s rep %d: mpickpt %.4f s, baseline %.4f s\n", name, i, r->lib[i],
                    r->base[i]);
    }
}

static void run_large(const opts *o, large_model *m)
{
    static result r;
    memset(&r, 0, sizeof r);
    ckpt_saver *s = make_saver(o, 0);
    large_register(s, m, 0);
    save_scenario(o, s, "large", m->arena, m->bytes, &r);
    ckpt_saver_free(s);
    print_result(o, &r);
}

static double timed_restore(ckpt_saver *s, const char *prefix);

static void run_small(const opts *o)
{
    static result r;
    memset(&r, 0, sizeof r);
    small_model m;
    small_init(&m, o);
    ckpt_saver *s = make_saver(o, 0);
    small_register(s, &m);
    save_scenario(o, s, "small", m.arena, m.bytes, &r);
    print_result(o, &r);

    /* restore_small: that checkpoint restored warm vs read(2) of the same bytes */
    static result rr;
    memset(&rr, 0, sizeof rr);
    rr.scenario = "restore_small";
    rr.baseline = "read (warm)";
    rr.bytes = m.bytes;
    rr.reps = o->reps;
    rr.has_chk = 1;
    char prefix[4096], base[4096];
    ckpt_path(prefix, sizeof prefix, o, "restore_small", 0);
    baseline_path(base, sizeof base, o);
    timed_save(s, prefix, &rr, 0); /* its phases go with the row */
    rr.nph = 1;
    plain_write(base, m.arena, m.bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    timed_restore(s, prefix); /* warm-up: page cache, HDF5 */
    timed_plain_read(base, m.arena, m.bytes);
    size_t nf = m.bytes / sizeof(float);
    uint64_t vbase = (uint64_t)g_rank * 31337u;
    for (int i = 0; i < o->reps; i++) {
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                memset(m.arena, 0, m.bytes);
                rr.lib[i] = timed_restore(s, prefix);
                if (!check_linear((const float *)m.arena, nf, vbase)) {
                    fprintf(stderr, "mpickpt-bench: restore_small: restored values are wrong\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            } else {
                rr.base[i] = timed_plain_read(base, m.arena, m.bytes);
            }
        }
        rr.chk[i] = timed_checked_read(base, m.arena, m.bytes);
    }
    fill_linear((float *)m.arena, nf, vbase);
    delete_ckpt(prefix);
    remove_all(base);
    ckpt_saver_free(s);
    print_result(o, &rr);
    free(m.arena);
    free(m.off);
    free(m.len);
}

/* ---- restore --------------------------------------------------------------------------------- */

static double timed_restore(ckpt_saver *s, const char *prefix)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    int rc = ckpt_saver_restore(s, prefix, NULL, NULL);
    double t = now() - t0;
    if (rc != CKPT_OK)
        die("ckpt_saver_restore", rc);
    return max_all(t);
}

/* Restores of `prefix` through `s` vs plain reads of `base`, interleaved; cold: drop_caches before
 * each measurement. Checks the restored values after every restore (outside the timing). */
static void restore_reps(const opts *o, ckpt_saver *s, const char *prefix, const char *base,
                         large_model *m, int reshard, int cold, result *r)
{
    for (int i = 0; i < o->reps; i++) {
        for (int k = 0; k < 2; k++) {
            if (cold && !drop_caches(NULL, 0)) {
                if (g_rank == 0)
                    fprintf(stderr, "mpickpt-bench: drop_caches stopped working\n");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if ((k == 0) == (i % 2 == 0)) {
                r->lib[i] = timed_restore(s, prefix);
                if (!large_check(m, reshard)) {
                    if (g_rank == 0)
                        fprintf(stderr, "mpickpt-bench: %s: restored values are wrong\n",
                                r->scenario);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            } else {
                r->base[i] = timed_plain_read(base, m->arena, m->bytes);
            }
        }
        if (cold && !drop_caches(NULL, 0))
            MPI_Abort(MPI_COMM_WORLD, 1);
        r->chk[i] = timed_checked_read(base, m->arena, m->bytes);
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  %s rep %d: mpickpt %.4f s, baseline %.4f s\n", r->scenario, i,
                    r->lib[i], r->base[i]);
    }
}

static void run_restore(const opts *o, large_model *m)
{
    static result r[4];
    const char *names[4] = {"restore_warm", "restore_cold", "restore_reshard_warm",
                            "restore_reshard_cold"};
    memset(r, 0, sizeof r);
    char prefix[4096], base[4096], why[256] = "";
    ckpt_path(prefix, sizeof prefix, o, "restore", 0);
    baseline_path(base, sizeof base, o);

    /* The checkpoint (its save's phases go with every restore row), and the baseline file. */
    ckpt_saver *s = make_saver(o, 0);
    large_register(s, m, 0);
    result wr;
    memset(&wr, 0, sizeof wr);
    timed_save(s, prefix, &wr, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    plain_write(base, m->arena, m->bytes);
    MPI_Barrier(MPI_COMM_WORLD);

    int can_cold = o->cold && drop_caches(why, sizeof why);
    if (!o->cold)
        snprintf(why, sizeof why, "--cold 0");
    ckpt_saver *rs = make_saver(o, 0);
    large_register(rs, m, 1);
    for (int v = 0; v < 4; v++) {
        int reshard = v >= 2, cold = v % 2;
        r[v].scenario = names[v];
        r[v].baseline = cold ? "read (cold)" : "read (warm)";
        r[v].bytes = m->bytes;
        r[v].reps = o->reps;
        r[v].nph = 1;
        r[v].has_chk = 1;
        for (int p = 0; p < 4; p++)
            r[v].ph[p][0] = wr.ph[p][0];
        if (cold && !can_cold) {
            r[v].skipped = why;
            print_result(o, &r[v]);
            continue;
        }
        ckpt_saver *use = reshard ? rs : s;
        if (!cold) { /* warm-up: the page cache holds both files, HDF5 is initialized */
            timed_restore(use, prefix);
            timed_plain_read(base, m->arena, m->bytes);
        }
        restore_reps(o, use, prefix, base, m, reshard, cold, &r[v]);
        print_result(o, &r[v]);
    }
    ckpt_saver_free(rs);
    ckpt_saver_free(s);
    delete_ckpt(prefix);
    remove_all(base);
    /* the buffers hold the resharded values now: back to the saved ones */
    size_t n = m->tbytes / sizeof(float);
    for (int k = 0; k < NT; k++)
        fill_linear(m->t[k], n,
                    k == 0 ? (uint64_t)g_rank * (uint64_t)m->R * COLS : full_base(g_rank, k));
}

/* ---- async ----------------------------------------------------------------------------------- */

static void run_async(const opts *o, large_model *m)
{
    static result r;
    memset(&r, 0, sizeof r);
    r.scenario = "async";
    r.baseline = "memcpy";
    r.bytes = m->bytes;
    r.reps = o->reps;
    r.async = 1;
    unsigned char *dst = alloc_touched(m->bytes);
    memcpy(dst, m->arena, m->bytes); /* warm */
    ckpt_saver *s = make_saver(o, 1);
    large_register(s, m, 0);
    char prefix[4096];
    /* warm-up: plan, snapshot buffers allocated and faulted by the library */
    ckpt_path(prefix, sizeof prefix, o, "async", 0);
    delete_ckpt(prefix);
    int rc = ckpt_saver_write(s, prefix, NULL);
    if (rc == CKPT_OK)
        rc = ckpt_saver_sync(s);
    if (rc != CKPT_OK)
        die("async warm-up save", rc);
    delete_ckpt(prefix);
    for (int i = 0; i < o->reps; i++) {
        ckpt_path(prefix, sizeof prefix, o, "async", i + 1);
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                delete_ckpt(prefix);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now();
                rc = ckpt_saver_write(s, prefix, NULL);
                double t1 = now();
                if (rc != CKPT_OK)
                    die("async ckpt_saver_write", rc);
                if ((rc = ckpt_saver_sync(s)) != CKPT_OK)
                    die("ckpt_saver_sync", rc);
                double t2 = now();
                r.lib[i] = max_all(t1 - t0);
                r.bg[i] = max_all(t2 - t0);
                ckpt_save_metrics mt;
                if ((rc = ckpt_saver_last_metrics(s, &mt)) != CKPT_OK)
                    die("ckpt_saver_last_metrics", rc);
                r.ph[0][i] = mt.write_s;
                r.ph[1][i] = mt.agree_s;
                r.ph[2][i] = mt.merge_s;
                r.ph[3][i] = mt.commit_s;
                r.nph = i + 1;
                delete_ckpt(prefix);
            } else {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now();
                memcpy(dst, m->arena, m->bytes);
                r.base[i] = max_all(now() - t0);
            }
        }
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  async rep %d: blocking %.4f s, memcpy %.4f s, background %.4f s\n",
                    i, r.lib[i], r.base[i], r.bg[i]);
    }
    if ((rc = ckpt_saver_close(s)) != CKPT_OK)
        die("ckpt_saver_close", rc);
    free(dst);
    print_result(o, &r);
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(void)
{
    if (g_rank == 0)
        fprintf(
            stderr,
            "usage: mpirun -np N mpickpt-bench --dir DIR --scenario large|small|restore|async|all\n"
            "         [--mb-per-rank M (256)] [--reps R (5)] [--layout shared|per-rank]\n"
            "         [--collective 0|1] [--json] [--tensors K (2000)] [--min-kb A (1)]\n"
            "         [--max-kb B (64)] [--max-shard-bytes S] [--hint KEY=VALUE]... [--cold 0|1]\n"
            "         [-v]\n");
}

static int parse(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->scenario = "all";
    o->mb = 256;
    o->reps = 5;
    o->layout = CKPT_LAYOUT_PER_RANK;
    o->tensors = 2000;
    o->min_kb = 1;
    o->max_kb = 64;
    o->cold = 1;
    o->info = MPI_INFO_NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->verbose = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return -1;
        if (!v) {
            if (g_rank == 0)
                fprintf(stderr, "mpickpt-bench: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--dir"))
            o->dir = v;
        else if (!strcmp(a, "--scenario"))
            o->scenario = v;
        else if (!strcmp(a, "--mb-per-rank"))
            o->mb = atol(v);
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v);
        else if (!strcmp(a, "--layout")) {
            if (!strcmp(v, "shared"))
                o->layout = CKPT_LAYOUT_SHARED;
            else if (!strcmp(v, "per-rank"))
                o->layout = CKPT_LAYOUT_PER_RANK;
            else
                return -1;
        } else if (!strcmp(a, "--collective"))
            o->collective = atoi(v) != 0;
        else if (!strcmp(a, "--tensors"))
            o->tensors = atoi(v);
        else if (!strcmp(a, "--min-kb"))
            o->min_kb = atoi(v);
        else if (!strcmp(a, "--max-kb"))
            o->max_kb = atoi(v);
        else if (!strcmp(a, "--max-shard-bytes"))
            o->max_shard_bytes = atoll(v);
        else if (!strcmp(a, "--cold"))
            o->cold = atoi(v) != 0;
        else if (!strcmp(a, "--hint")) {
            const char *eq = strchr(v, '=');
            if (!eq)
                return -1;
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
            if (o->info == MPI_INFO_NULL)
                MPI_Info_create(&o->info);
            MPI_Info_set(o->info, key, eq + 1);
        } else {
            if (g_rank == 0)
                fprintf(stderr, "mpickpt-bench: unknown option %s\n", a);
            return -1;
        }
    }
    const char *sc = o->scenario;
    if (!o->dir || o->mb < 1 || o->reps < 1 || o->reps > MAX_REPS || o->tensors < 1 ||
        o->min_kb < 1 || o->max_kb < o->min_kb ||
        (strcmp(sc, "large") && strcmp(sc, "small") && strcmp(sc, "restore") &&
         strcmp(sc, "async") && strcmp(sc, "all")))
        return -1;
    return 0;
}

/* Creates DIR and checks it has 3x the bytes that can be on disk at once. Collective. */
static int check_dir(const opts *o, size_t large_bytes, size_t small_bytes)
{
    int ok = 1;
    char msg[1024] = "";
    if (g_rank == 0) {
        char cmd[4200];
        struct stat st;
        if (stat(o->dir, &st) != 0) {
            snprintf(cmd, sizeof cmd, "%s", o->dir);
            for (char *p = cmd + 1; *p; p++)
                if (*p == '/') {
                    *p = '\0';
                    mkdir(cmd, 0755);
                    *p = '/';
                }
            mkdir(cmd, 0755);
        }
        struct statvfs vf;
        if (statvfs(o->dir, &vf) != 0) {
            ok = 0;
            snprintf(msg, sizeof msg, "cannot use --dir %s: %s", o->dir, strerror(errno));
        } else {
            double avail = (double)vf.f_bavail * (double)vf.f_frsize;
            double need = 3.0 * (double)(large_bytes > small_bytes ? large_bytes : small_bytes) *
                          (double)g_size;
            if (avail < need) {
                ok = 0;
                snprintf(msg, sizeof msg,
                         "%s has %.0f MiB free; this run needs 3 x %.0f MiB = %.0f MiB (lower "
                         "--mb-per-rank or --tensors, or use another --dir)",
                         o->dir, avail / MiB, need / 3 / MiB, need / MiB);
            }
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok && g_rank == 0)
        fprintf(stderr, "mpickpt-bench: refusing to run: %s\n", msg);
    return ok;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &g_node);
    opts o;
    if (parse(&o, argc, argv) != 0) {
        usage();
        MPI_Finalize();
        return 2;
    }
    const char *sc = o.scenario;
    int all = !strcmp(sc, "all");
    int do_large = all || !strcmp(sc, "large"), do_small = all || !strcmp(sc, "small");
    int do_restore = all || !strcmp(sc, "restore"), do_async = all || !strcmp(sc, "async");
    int uses_large = do_large || do_restore || do_async;
    /* small's bytes (the same sequence as small_init) */
    size_t small_bytes = 0;
    if (do_small) {
        uint64_t x = 88172645463325252ull;
        size_t lo = (size_t)o.min_kb * 1024, hi = (size_t)o.max_kb * 1024;
        for (int i = 0; i < o.tensors; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t len = (lo + (size_t)(x % (hi - lo + 1))) & ~(size_t)3;
            small_bytes += len < 4 ? 4 : len;
        }
    }
    if (!check_dir(&o, uses_large ? (size_t)o.mb << 20 : 0, small_bytes)) {
        MPI_Finalize();
        return 3;
    }
    if (g_rank == 0) {
        printf("mpickpt-bench %s: %d ranks, layout %s%s, %s, %d reps, dir %s\n", ckpt_version(),
               g_size, layout_name(o.layout),
               o.layout == CKPT_LAYOUT_SHARED
                   ? (o.collective ? " (collective MPI-IO)" : " (independent MPI-IO)")
                   : "",
               sc, o.reps, o.dir);
        printf("times: medians of the max over ranks; ratio = baseline_s / mpickpt_s (higher is "
               "better); GB/s aggregate over ranks\n");
        fflush(stdout);
    }
    large_model m;
    memset(&m, 0, sizeof m);
    if (uses_large)
        large_init(&m, o.mb);
    if (do_large)
        run_large(&o, &m);
    if (do_small)
        run_small(&o);
    if (do_restore)
        run_restore(&o, &m);
    if (do_async)
        run_async(&o, &m);
    free(m.arena);
    if (o.info != MPI_INFO_NULL)
        MPI_Info_free(&o.info);
    MPI_Comm_free(&g_node);
    MPI_Finalize();
    return 0;
}
