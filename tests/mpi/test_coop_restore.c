/*
 * The cooperative restore (issue 32, mpi/restore_coop.c), on any number of ranks.
 *
 * A checkpoint written by min(4, size) ranks: 'rep' (replicated, 4 MiB, saved once), 'part'
 * (partitioned by rows, 4 MiB), 'cols' (partitioned by columns, 1 MiB: every reader's box cuts
 * every row), 'small' (replicated, 12 bytes) and a blob per writer. Restored on
 * 2, 3 and `size` ranks (those <= size), with MPICKPT_RESTORE_COOPERATIVE on and off: every value
 * exactly back on every rank (an N->M reshard of 'part'), the blobs of the ranks the writer had
 * (skip_missing_per_rank for the others); the bytes read from storage (rchar of /proc/self/io less
 * what TCP sockets received, summed over the restoring ranks) at most 1.25x the checkpoint's data
 * with cooperation on, and at least (m - 0.5)x 'rep' with it off on m >= 2 ranks (every rank reads
 * 'rep': what this replaces). Then a byte of 'rep' flipped in its data file: the restore fails on
 * every rank with the same checksum-mismatch message (whichever rank read it), no hang, the blobs
 * (staged) untouched and the saver's counter unchanged; the byte put back, the restore succeeds
 * again. Every forwarded byte that crosses nodes is counted (ckpt__coop_cross_node_bytes, the
 * internal library's): restored on all `size` ranks, exactly one copy of each replicated tensor
 * reaches each node other than its reader's (nodes of MPICKPT_RANKS_PER_NODE ranks, else one).
 * Then failures on 2 ranks or more, every rank returning the same error, no hang, no blob
 * restored: a receiver whose share failed (MPICKPT_FAULT "R:share", as if it could not be
 * held), a rank that cannot open the index of its list ("R:coop") — rank 1 and the last
 * (readers), rank 0 (a receiver) —, and a rank whose registration of a forwarded tensor does not
 * match the checkpoint (its dtype). Then a rank that cannot allocate its list ("R:coop-list") or
 * its chunk buffers ("R:coop-buf"), rank 1, rank 0 and the last, the chief's send of rank R's
 * share failing ("R:share-send", rank 1 and the last), and a reader's sends of chunks failing at
 * the first try ("R:coop-send", rank 1, and the last from 8 ranks): the same error on every rank,
 * no hang, and the next restore brings every value back exactly.
 *
 * Modes for real nodes (tests/cluster/test_cluster.sh, case coop), one step per job:
 *   test_coop_restore OUTDIR save LAYOUT             every rank writes, with 3 replicated tensors
 *                                                    ('rep', 'rep1', 'rep2') instead of 1
 *   test_coop_restore OUTDIR restore LAYOUT WRITERS  restored on every rank (cooperation as
 *                                                    MPICKPT_RESTORE_COOPERATIVE says, on by
 *                                                    default): the same checks, and one line per
 *                                                    rank "coop_reads: rank R host H bytes B"
 *   test_coop_restore OUTDIR corrupt LAYOUT WRITERS  the flipped byte of 'rep', then put back
 * LAYOUT (per-node, per-rank, shared or default) is the restoring saver's: with per-node its
 * nodes are known and the readers spread over them.
 */
#include "mpi_check.h"
#include "mpickpt.h"

#include "coll.h"
#include "restore_coop.h" /* ckpt__coop_cross_node_bytes */
#include "tcp_received.h" /* mpi/bench/: the bench's own measure */

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define REP_N (1 << 20) /* float32: 4 MiB */
#define ROWS 8192       /* x COLS float64: 4 MiB */
#define COLS 64
#define CROWS 256 /* 'cols': CROWS x CCOLS float32 (1 MiB), split by columns */
#define CCOLS 1024

static int g_rank, g_size;
static int g_nrep = 1;  /* replicated 4 MiB tensors: 'rep', then 'rep1', ... */
static int g_hosts = 0; /* print each rank's bytes read and host */
static int g_bad_rank = -1; /* this rank registers 'small' as float32 (a mismatch) */
static ckpt_layout g_layout = CKPT_LAYOUT_UNKNOWN;
#define MAX_REP 3

static float rep_val(int64_t i)
{
    return (float)i * 0.5f + 1.0f;
}

/* replicated tensor k's values ('rep' is k = 0) */
static float repk_val(int k, int64_t i)
{
    return rep_val(i) + (float)(k * 3);
}

static double part_val(int64_t i, int64_t j)
{
    return (double)i * 1000.0 + (double)j;
}

static float cols_val(int64_t i, int64_t j)
{
    return (float)(i * CCOLS + j);
}

static int blob_save(const void **data, size_t *len, void *payload)
{
    *data = payload;
    *len = sizeof(int);
    return CKPT_OK;
}

static int blob_restore(const void *data, size_t len, void *payload)
{
    if (len == sizeof(int))
        memcpy(payload, data, len);
    return CKPT_OK;
}

/* The bytes this process read from storage: rchar of /proc/self/io (every byte passed by a read
 * call) less what its TCP sockets received. */
static uint64_t rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[256];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %llu", &v) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)v - ckpt_bench_tcp_received();
}

/* the rows [*r0, *r0 + *n) of `parts` equal parts that part k of ROWS holds */
static void rows_of(int k, int parts, int64_t *r0, int64_t *n)
{
    int64_t base = ROWS / parts, extra = ROWS % parts;
    *r0 = k * base + (k < extra ? k : extra);
    *n = base + (k < extra ? 1 : 0);
}

typedef struct regs {
    float *rep, *reps[MAX_REP]; /* rep == reps[0] */
    double *part;
    float *cols;
    int64_t c0, ncols;
    int32_t small[3];
    int blob;
    int64_t r0, nrows;
} regs;

static ckpt_saver *make_saver(MPI_Comm comm, regs *g, int write)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    ckpt_saver *s = NULL;
    ckpt_saver_options so = CKPT_SAVER_OPTIONS_INIT;
    so.layout = g_layout;
    CHECK_OK(ckpt_saver_create(&s, comm, g_layout == CKPT_LAYOUT_UNKNOWN ? NULL : &so));
    int64_t dn = REP_N, d3 = 3, dp[2] = {ROWS, COLS};
    ckpt_shape srep, ssmall, spart;
    ckpt_shape_init(&srep, 1, &dn);
    ckpt_shape_init(&ssmall, 1, &d3);
    ckpt_shape_init(&spart, 2, dp);
    rows_of(rank, size, &g->r0, &g->nrows);
    g->ncols = CCOLS / size;
    g->c0 = rank * g->ncols;
    if (rank == size - 1)
        g->ncols = CCOLS - g->c0;
    for (int k = 0; k < g_nrep; k++)
        CHECK((g->reps[k] = calloc(REP_N, sizeof *g->rep)) != NULL);
    g->rep = g->reps[0];
    g->part = calloc((size_t)(g->nrows * COLS), sizeof *g->part);
    g->cols = calloc((size_t)(CROWS * g->ncols), sizeof *g->cols);
    CHECK(g->rep && g->part && g->cols);
    for (int64_t i = 0; write && i < CROWS; i++)
        for (int64_t j = 0; j < g->ncols; j++)
            g->cols[i * g->ncols + j] = cols_val(i, g->c0 + j);
    for (int k = 0; k < g_nrep; k++)
        for (int64_t i = 0; write && i < REP_N; i++)
            g->reps[k][i] = repk_val(k, i);
    for (int64_t i = 0; write && i < g->nrows; i++)
        for (int64_t j = 0; j < COLS; j++)
            g->part[i * COLS + j] = part_val(g->r0 + i, j);
    for (int i = 0; i < 3; i++)
        g->small[i] = write ? 7 * (i + 1) : 0;
    g->blob = write ? 100 + rank : -1;
    ckpt_slice sl;
    ckpt_slice_full(&sl, &spart);
    sl.start[0] = g->r0;
    sl.count[0] = g->nrows;
    CHECK_OK(
        ckpt_saver_add_replicated(s, "rep", CKPT_FLOAT32, &srep, g->rep, CKPT_REPLICA_PRIMARY));
    for (int k = 1; k < g_nrep; k++) {
        char name[16];
        snprintf(name, sizeof name, "rep%d", k);
        CHECK_OK(ckpt_saver_add_replicated(s, name, CKPT_FLOAT32, &srep, g->reps[k],
                                           CKPT_REPLICA_PRIMARY));
    }
    CHECK_OK(ckpt_saver_add_replicated(s, "small", rank == g_bad_rank ? CKPT_FLOAT32 : CKPT_INT32,
                                       &ssmall, g->small, CKPT_REPLICA_PRIMARY));
    CHECK_OK(ckpt_saver_add_slice(s, "part", CKPT_FLOAT64, &spart, &sl, g->part));
    int64_t dc[2] = {CROWS, CCOLS};
    ckpt_shape scols;
    ckpt_shape_init(&scols, 2, dc);
    ckpt_slice_full(&sl, &scols);
    sl.start[1] = g->c0;
    sl.count[1] = g->ncols;
    CHECK_OK(ckpt_saver_add_slice(s, "cols", CKPT_FLOAT32, &scols, &sl, g->cols));
    ckpt_blob_callbacks cb = {blob_save, blob_restore};
    CHECK_OK(ckpt_saver_add_blob(s, "blob", &cb, &g->blob));
    return s;
}

/* How many of this rank's rows, columns and small values differ from the checkpoint's. */
static int bad_resharded(const regs *g)
{
    int bad = 0;
    for (int64_t i = 0; i < g->nrows; i++)
        for (int64_t j = 0; j < COLS; j++)
            bad += g->part[i * COLS + j] != part_val(g->r0 + i, j);
    for (int64_t i = 0; i < CROWS; i++)
        for (int64_t j = 0; j < g->ncols; j++)
            bad += g->cols[i * g->ncols + j] != cols_val(i, g->c0 + j);
    for (int i = 0; i < 3; i++)
        bad += g->small[i] != 7 * (i + 1);
    return bad;
}

static void regs_free(regs *g)
{
    for (int k = 0; k < g_nrep; k++)
        free(g->reps[k]);
    free(g->part);
    free(g->cols);
}

#define DATA_BYTES ((uint64_t)(g_nrep - 1) * REP_N * 4 + DATA_BYTES_1)
static const uint64_t DATA_BYTES_1 = (uint64_t)REP_N * 4 + (uint64_t)ROWS * COLS * 8 +
                                     (uint64_t)CROWS * CCOLS * 4 + 12 + 4 * sizeof(int);

/* Restores `prefix` on the first m ranks with cooperation `coop`; checks values and bytes. */
static void restore_on(const char *prefix, int writers, int m, int coop)
{
    check_case(1, "restore on %d of %d ranks (written by %d), cooperative %s", m, g_size, writers,
               coop ? "on" : "off");
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank < m ? 0 : MPI_UNDEFINED, g_rank, &comm);
    if (comm != MPI_COMM_NULL) {
        setenv("MPICKPT_RESTORE_COOPERATIVE", coop ? "1" : "0", 1);
        regs g;
        ckpt_saver *s = make_saver(comm, &g, 0);
        ckpt_restore_options o = {0};
        o.version = 1;
        o.skip_missing_per_rank = 1;
        uint64_t before = rchar(), cross0 = ckpt__coop_cross_node_bytes;
        int rc = ckpt_saver_restore(s, prefix, &o, NULL);
        uint64_t mine = rchar() - before, sum = 0;
        uint64_t cross = ckpt__coop_cross_node_bytes - cross0, cross_sum = 0;
        CHECK(coll_on(comm, rc, CKPT_OK, "restore"));
        MPI_Allreduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, comm);
        MPI_Allreduce(&cross, &cross_sum, 1, MPI_UINT64_T, MPI_SUM, comm);
        const char *rpn_env = getenv("MPICKPT_RANKS_PER_NODE");
        int rpn = rpn_env ? atoi(rpn_env) : 0, nodes = rpn > 0 ? (m + rpn - 1) / rpn : 1;
        if (g_hosts && comm_rank(comm) == 0)
            printf("coop_cross_node: %d ranks, %llu bytes sent to other nodes\n", m,
                   (unsigned long long)cross_sum);
        /* all ranks: 'part' and 'cols' are forwarded within nodes only (or not at all), each
         * replicated tensor once to every other node */
        uint64_t rep_bytes = (uint64_t)g_nrep * REP_N * 4 + 12;
        if (coop && m == g_size && !g_hosts)
            CHECK_MSG(cross_sum == (uint64_t)(nodes - 1) * rep_bytes,
                      "%llu bytes crossed nodes, expected %llu (%d nodes)",
                      (unsigned long long)cross_sum,
                      (unsigned long long)((uint64_t)(nodes - 1) * rep_bytes), nodes);
        if (!coop)
            CHECK_MSG(cross_sum == 0, "%llu bytes forwarded without cooperation",
                      (unsigned long long)cross_sum);
        int bad = 0;
        for (int k = 0; k < g_nrep; k++)
            for (int64_t i = 0; i < REP_N; i++)
                bad += g.reps[k][i] != repk_val(k, i);
        bad += bad_resharded(&g);
        int rank = comm_rank(comm);
        bad += g.blob != (rank < writers ? 100 + rank : -1);
        CHECK_MSG(bad == 0, "rank %d: %d values wrong", g_rank, bad);
        if (g_hosts) { /* each rank's bytes read and host, in rank order */
            char host[64] = "", *hosts = rank == 0 ? malloc((size_t)m * 64) : NULL;
            uint64_t *each = rank == 0 ? malloc((size_t)m * sizeof *each) : NULL;
            gethostname(host, sizeof host - 1);
            MPI_Gather(host, 64, MPI_CHAR, hosts, 64, MPI_CHAR, 0, comm);
            MPI_Gather(&mine, 1, MPI_UINT64_T, each, 1, MPI_UINT64_T, 0, comm);
            for (int r = 0; rank == 0 && r < m; r++)
                printf("coop_reads: rank %d host %s bytes %llu\n", r, hosts + (size_t)r * 64,
                       (unsigned long long)each[r]);
            free(hosts);
            free(each);
        }
        double ratio = (double)sum / (double)DATA_BYTES;
        if (rank == 0)
            printf("coop_restore: %d->%d ranks, cooperative %s: %llu bytes read, %.3fx the "
                   "data\n",
                   writers, m, coop ? "on" : "off", (unsigned long long)sum, ratio);
        if (coop)
            CHECK_MSG(ratio <= 1.25, "read %.3fx the checkpoint's data with cooperation", ratio);
        else if (m >= 2)
            CHECK_MSG(sum >= (uint64_t)((m - 0.5) * REP_N * 4),
                      "read %.3fx without cooperation: expected every rank to read 'rep'", ratio);
        ckpt_saver_free(s);
        regs_free(&g);
        MPI_Comm_free(&comm);
        unsetenv("MPICKPT_RESTORE_COOPERATIVE");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Flips (xor 0x5a) one byte of 'rep' in its data file: at element 12345 of it, found the first
 * time, the same byte again the second (which puts it back). Rank 0. */
static off_t g_flip_at = -1;

static void flip(const char *prefix)
{
    ckpt_reader *r = NULL;
    CHECK_OK(ckpt_reader_open(&r, prefix));
    size_t ti;
    CHECK_OK(ckpt_reader_find(&ti, r, "rep"));
    ckpt_piece_info pi;
    CHECK_OK(ckpt_reader_piece(&pi, r, ti, 0));
    char path[4400], dir[4096];
    snprintf(dir, sizeof dir, "%s", prefix);
    char *sl = strrchr(dir, '/');
    CHECK(sl != NULL);
    *sl = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, pi.file);
    ckpt_reader_free(r);
    float pat[8];
    for (int i = 0; i < 8; i++)
        pat[i] = rep_val(12345 + i);
    int fd = open(path, O_RDWR);
    CHECK_MSG(fd >= 0, "open %s", path);
    off_t size = lseek(fd, 0, SEEK_END);
    char *buf = malloc((size_t)size);
    CHECK(buf && pread(fd, buf, (size_t)size, 0) == size);
    if (g_flip_at < 0) {
        char *at = memmem(buf, (size_t)size, pat, sizeof pat);
        CHECK_MSG(at != NULL, "'rep' bytes not found in %s", path);
        g_flip_at = at + 1 - buf;
    }
    unsigned char b = (unsigned char)buf[g_flip_at] ^ 0x5a;
    CHECK(pwrite(fd, &b, 1, g_flip_at) == 1);
    CHECK(fsync(fd) == 0);
    close(fd);
    free(buf);
}

static void corrupt_case(const char *prefix, int writers)
{
    check_case(1, "a flipped byte of 'rep' on %d ranks", g_size);
    if (g_rank == 0)
        flip(prefix);
    MPI_Barrier(MPI_COMM_WORLD);
    regs g;
    ckpt_saver *s = make_saver(MPI_COMM_WORLD, &g, 0);
    g.blob = -7; /* staged: untouched by a failed restore */
    ckpt_restore_options o = {0};
    o.version = 1;
    o.skip_missing_per_rank = 1;
    int rc = ckpt_saver_restore(s, prefix, &o, NULL);
    CHECK(coll_on(MPI_COMM_WORLD, rc, CKPT_ECORRUPT, "corrupt restore"));
    CHECK_MSG(strstr(g_msg, "checksum mismatch") && strstr(g_msg, "'rep'"),
              "unexpected message: %s", g_msg);
    /* rank 0 is never the reader of a forwarded piece when another rank wants it: its message
     * (the agreed one) is the reader's, forwarded */
    if (g_size >= 2)
        CHECK_MSG(strstr(g_msg, "(read for it by rank "), "not a forwarded error: %s", g_msg);
    CHECK_MSG(g.blob == -7, "the blob was restored by a failed restore (%d)", g.blob);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0)
        flip(prefix); /* xor again: the byte is back */
    MPI_Barrier(MPI_COMM_WORLD);
    ckpt_restore_info info;
    rc = ckpt_saver_restore(s, prefix, &o, &info);
    CHECK(coll_on(MPI_COMM_WORLD, rc, CKPT_OK, "restore after repair"));
    int bad = 0;
    for (int64_t i = 0; i < REP_N; i++)
        bad += g.rep[i] != rep_val(i);
    bad += g.blob != (g_rank < writers ? 100 + g_rank : -7);
    CHECK_MSG(bad == 0, "rank %d: %d values wrong after the repair", g_rank, bad);
    ckpt_saver_free(s);
    regs_free(&g);
}

/* A fresh saver of `g` (its blob -7) restoring `prefix` (options version 1, missing per-rank
 * values skipped); the restore's status in *rc. */
static ckpt_saver *restore_fresh(const char *prefix, regs *g, int *rc)
{
    ckpt_saver *s = make_saver(MPI_COMM_WORLD, g, 0);
    g->blob = -7;
    ckpt_restore_options o = {0};
    o.version = 1;
    o.skip_missing_per_rank = 1;
    *rc = ckpt_saver_restore(s, prefix, &o, NULL);
    return s;
}

/* A restore on every rank with MPICKPT_FAULT=`fault` (NULL: none) or g_bad_rank = `bad`: it
 * fails with `expected` and a message holding `needle` on every rank, no hang, the blob
 * (staged) untouched. */
static void fail_case(const char *prefix, const char *fault, int bad, int expected,
                      const char *needle)
{
    check_case(1, "a failure on %d ranks: %s", g_size, fault ? fault : "a bad registration");
    if (fault)
        setenv("MPICKPT_FAULT", fault, 1);
    g_bad_rank = bad;
    regs g;
    int rc;
    ckpt_saver *s = restore_fresh(prefix, &g, &rc);
    CHECK(coll_on(MPI_COMM_WORLD, rc, expected, fault ? fault : "bad registration"));
    CHECK_MSG(strstr(g_msg, needle), "unexpected message (no \"%s\"): %s", needle, g_msg);
    CHECK_MSG(g.blob == -7, "the blob was restored by a failed restore (%d)", g.blob);
    unsetenv("MPICKPT_FAULT");
    g_bad_rank = -1;
    ckpt_saver_free(s);
    regs_free(&g);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* fail_case(), then the same restore without the fault: every value exactly back. */
static void fail_then_restore(const char *prefix, int writers, const char *fault,
                              const char *needle)
{
    fail_case(prefix, fault, -1, CKPT_EIO, needle);
    check_case(1, "the restore after %s on %d ranks", fault, g_size);
    regs g;
    int rc;
    ckpt_saver *s = restore_fresh(prefix, &g, &rc);
    CHECK(coll_on(MPI_COMM_WORLD, rc, CKPT_OK, "restore after a failure"));
    int bad = 0;
    for (int64_t i = 0; i < REP_N; i++)
        bad += g.rep[i] != rep_val(i);
    bad += bad_resharded(&g);
    bad += g.blob != (g_rank < writers ? 100 + g_rank : -7);
    CHECK_MSG(bad == 0, "rank %d: %d values wrong after %s", g_rank, bad, fault);
    ckpt_saver_free(s);
    regs_free(&g);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void fail_cases(const char *prefix, int writers)
{
    if (g_size < 2)
        return;
    char f[64], needle[96];
    int last = g_size - 1;
    snprintf(f, sizeof f, "%d:share", last);
    snprintf(needle, sizeof needle, "injected fault at share on rank %d", last);
    fail_case(prefix, f, -1, CKPT_EIO, needle);
    int coop_ranks[3] = {1, 0, last};
    for (int k = 0; k < 3; k++) {
        if (k == 2 && last == 1)
            continue;
        snprintf(f, sizeof f, "%d:coop", coop_ranks[k]);
        snprintf(needle, sizeof needle, "injected fault at coop on rank %d", coop_ranks[k]);
        fail_case(prefix, f, -1, CKPT_EIO, needle);
    }
    fail_case(prefix, NULL, last, CKPT_EMISMATCH, "'small' is int32 [3]");
    /* a rank that cannot hold its list or its chunk buffers, the chief's send of a rank's share
     * failing (after it went; not to itself), a reader's sends failing at the first try: the
     * same error everywhere, no hang, and the next restore exact */
    const char *steps[4] = {"coop-list", "coop-buf", "share-send", "coop-send"};
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 3; k++) {
            /* coop-send: rank 1, and the last from 8 ranks (a reader there; at 4 it sends
             * nothing) */
            if ((k == 2 && last == 1) || (q >= 2 && coop_ranks[k] == 0) ||
                (q == 3 && k == 2 && g_size < 8))
                continue;
            snprintf(f, sizeof f, "%d:%s", coop_ranks[k], steps[q]);
            snprintf(needle, sizeof needle, "injected fault at %s on rank %d", steps[q],
                     coop_ranks[k]);
            fail_then_restore(prefix, writers, f, needle);
        }
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    const char *mode = argc >= 3 ? argv[2] : "all";
    int mwriters = argc >= 5 ? atoi(argv[4]) : g_size;
    if (argc >= 4 && strcmp(argv[3], "default")) {
        g_layout = !strcmp(argv[3], "per-node")   ? CKPT_LAYOUT_PER_NODE
                   : !strcmp(argv[3], "per-rank") ? CKPT_LAYOUT_PER_RANK
                   : !strcmp(argv[3], "shared")   ? CKPT_LAYOUT_SHARED
                                                  : (ckpt_layout)-1;
    }
    if (argc < 2 || (strcmp(mode, "all") && argc < 4) || (int)g_layout == -1 ||
        (strcmp(mode, "all") && strcmp(mode, "save") && strcmp(mode, "restore") &&
         strcmp(mode, "corrupt")) ||
        mwriters < 1) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_coop_restore OUTDIR [save LAYOUT | restore LAYOUT "
                            "WRITERS | corrupt LAYOUT WRITERS]\n");
        MPI_Finalize();
        return 2;
    }
    char prefix[3100];
    make_dir(argv[1]);
    snprintf(prefix, sizeof prefix, "%s/coop", argv[1]);
    if (strcmp(mode, "all")) { /* one step of the cluster test */
        g_nrep = MAX_REP;
        g_hosts = 1;
        if (!strcmp(mode, "save")) {
            check_case(1, "write on %d ranks", g_size);
            regs g;
            ckpt_saver *s = make_saver(MPI_COMM_WORLD, &g, 1);
            CHECK(coll_on(MPI_COMM_WORLD, ckpt_saver_write(s, prefix, NULL), CKPT_OK, "write"));
            ckpt_saver_free(s);
            regs_free(&g);
        } else if (!strcmp(mode, "restore")) {
            const char *e = getenv("MPICKPT_RESTORE_COOPERATIVE");
            restore_on(prefix, mwriters, g_size, !e || strcmp(e, "0"));
        } else {
            corrupt_case(prefix, mwriters);
        }
        return check_mpi_done("test_coop_restore");
    }
    int writers = g_size < 4 ? g_size : 4;
    check_case(1, "write on %d ranks", writers);
    MPI_Comm wcomm;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank < writers ? 0 : MPI_UNDEFINED, g_rank, &wcomm);
    if (wcomm != MPI_COMM_NULL) {
        regs g;
        ckpt_saver *s = make_saver(wcomm, &g, 1);
        CHECK(coll_on(wcomm, ckpt_saver_write(s, prefix, NULL), CKPT_OK, "write"));
        ckpt_saver_free(s);
        regs_free(&g);
        MPI_Comm_free(&wcomm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int counts[3] = {2, 3, g_size};
    for (int k = 0; k < 3; k++) {
        int m = counts[k];
        if (m > g_size || (k == 2 && (m == 2 || m == 3)))
            continue;
        restore_on(prefix, writers, m, 1);
        restore_on(prefix, writers, m, 0);
    }
    fail_cases(prefix, writers);
    corrupt_case(prefix, writers);
    return check_mpi_done("test_coop_restore");
}
