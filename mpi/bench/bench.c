/*
 * mpickpt-bench: how fast the collective saver saves and restores, against a plain-POSIX baseline
 * of the same bytes measured in the same run (this machine's disk drifts 2-3x over minutes, so
 * only ratios of medians of interleaved measurements mean anything).
 *
 *   mpirun -np N mpickpt-bench --dir DIR --scenario LIST
 *          [--mb-per-rank M] [--reps R] [--layout shared|per-rank|per-node] [--collective 0|1]
 *          [--json] [--tensors K] [--min-kb A] [--max-kb B] [--max-shard-bytes S]
 *          [--hint KEY=VALUE]... [--cold 0|1] [--fixed-mb M] [--fixed-reps R]
 *          [--mem-pieces P1,P2,...] [--mem-kind partitioned|owned] [--mem-rank1-pieces K]
 *          [--ranks-per-node K] [-v]
 *
 * LIST: comma-separated scenarios; "all" is large,small,restore,async (as it always was); the
 * scale rows (bench_scale.c) are asked for by name: collectives, memory, files, fixed; so is
 * replicas (bench_replicas.c: the replica check's cost, check_replicas off / first / every),
 * coop_restore (bench_coop.c: bytes read from storage by cold restores, cooperative on / off).
 * --layout per-node asks for it through MPICKPT_LAYOUT=per-node (rows skipped with the saver's
 * message when this build has no such layout).
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
 * The scale rows (issue 15; bench_scale.c; each prints its own table and JSON lines; see
 * docs/performance.md):
 *   collectives  MPI calls of the first save, a save with the cached plan, a restore and an async
 *                save (4 tensors, --fixed-mb MiB per rank), counted per rank through PMPI
 *                (bench_pmpi.c): {"scenario":"collectives","op",...,"collective_max/_chief",
 *                "p2p_*","io_*","wait_*","mpickpt_collective_*","agree_*","hdf5_collective_*",
 *                "by_caller":{...},"by_function":{"MPI_X":{"kind","max","chief"}}}
 *   memory       peak VmHWM growth of each rank during a restore, for each --mem-pieces total
 *                (rank 1 holds a fixed --mem-rank1-pieces): {"scenario":"restore_memory",
 *                "total_pieces","pieces_chief","pieces_rank1","peak_kb_chief","peak_kb_rank1",...}
 *   files        the entries one save creates, per layout: {"scenario":"files","entries",...}
 *   fixed        save and restore of --fixed-mb MiB per rank vs write+fsync and pread of the same
 *                bytes, --fixed-reps reps: {"scenario":"fixed_save"|"fixed_restore","over_raw"
 *                (median mpickpt / median raw),"over_raw_best" (best / best),"goal_over_raw",...}
 *
 * Output: a table on rank 0; with --json also one JSON line per scenario:
 *   {"scenario","ranks","layout","collective","bytes_per_rank","reps","mpickpt_s","baseline_s",
 *    "speed_ratio" (= baseline_s / mpickpt_s),"mpickpt_gbps","baseline_gbps" (aggregate over ranks,
 *    1e9 bytes/s),"phases":{"write","agree","merge","commit"} (medians of ckpt_saver_metrics_get;
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
 *
 * This file: main, the options and the output (table and JSON lines); bench_posix.c: timing and
 * the plain-POSIX baselines; bench_scenarios.c: the models and the scenarios (bench.h).
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

int g_rank, g_size;
MPI_Comm g_node;
static int g_header_done;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double median(const double *v, int n)
{
    double s[MAX_REPS];
    if (n <= 0)
        return 0;
    memcpy(s, v, sizeof *v * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* Quantile q of v (linear interpolation between order statistics). */
double quantile(const double *v, int n, double q)
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

const char *layout_name(const opts *o)
{
    if (o->layout_env)
        return o->layout_env;
    return o->layout == CKPT_LAYOUT_SHARED ? "shared" : "per-rank";
}

void print_result(const opts *o, const result *r)
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
                   r->scenario, g_size, layout_name(o), o->collective, r->skipped);
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
           r->scenario, layout_name(o),
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
               r->scenario, g_size, layout_name(o), o->collective, r->bytes, r->reps, lib,
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

static void usage(void)
{
    if (g_rank == 0)
        fprintf(
            stderr,
            "usage: mpirun -np N mpickpt-bench --dir DIR --scenario LIST\n"
            "         LIST: comma-separated of large|small|restore|async|all (the four before)\n"
            "               |collectives|memory|files|fixed (the scale rows)\n"
            "               |cache (saves to DIR/cache/%%n, without and with partner copies)\n"
            "               |replicas (the replica check: check_replicas off, first, every)\n"
            "               |coop_restore (bytes read from storage by a cold restore of a\n"
            "               replicated and an N->M checkpoint of M MiB, cooperative on and off)\n"
            "         [--mb-per-rank M (256)] [--reps R (5)] [--layout shared|per-rank|per-node]\n"
            "         [--collective 0|1] [--json] [--tensors K (2000)] [--min-kb A (1)]\n"
            "         [--max-kb B (64)] [--max-shard-bytes S] [--hint KEY=VALUE]... [--cold 0|1]\n"
            "         [--fixed-mb M (4)] [--fixed-reps R (11)] [--mem-pieces P1,P2,...\n"
            "         (1000,10000,100000)] [--mem-kind partitioned|owned] [--mem-rank1-pieces K\n"
            "         (100)] [--ranks-per-node K]\n"
            "         [-v]\n");
}

static void set_defaults(opts *o)
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
    o->fixed_mb = 4;
    o->fixed_reps = 11;
    o->n_mem = 3;
    o->mem_partitioned = 1;
    o->mem_rank1 = 100;
    o->mem_pieces[0] = 1000;
    o->mem_pieces[1] = 10000;
    o->mem_pieces[2] = 100000;
}

/* 0 when every comma-separated name of `list` is a known scenario; else -1, named on rank 0. */
static int check_scenarios(const char *list)
{
    static const char *const known[] = { "large", "small", "restore", "async", "all",
                                         "collectives", "memory", "files", "fixed", "cache",
                                         "replicas", "coop_restore" };
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            ok |= strlen(known[k]) == n && !strncmp(p, known[k], n);
        if (!ok) {
            if (g_rank == 0)
                fprintf(stderr, "mpickpt-bench: unknown scenario %.*s\n", (int)n, p);
            return -1;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

/* --mem-pieces P1,P2,...: at least one, at most MAX_MEM_POINTS, each >= 1. 0 or -1. */
static int parse_mem_pieces(opts *o, const char *v)
{
    o->n_mem = 0;
    for (const char *p = v; *p;) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1 || o->n_mem == MAX_MEM_POINTS || (*end && *end != ','))
            return -1;
        o->mem_pieces[o->n_mem++] = n;
        p = *end ? end + 1 : end;
    }
    return o->n_mem == 0 ? -1 : 0;
}

static int parse(opts *o, int argc, char **argv)
{
    set_defaults(o);
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
            o->layout_env = NULL;
            if (!strcmp(v, "shared"))
                o->layout = CKPT_LAYOUT_SHARED;
            else if (!strcmp(v, "per-rank"))
                o->layout = CKPT_LAYOUT_PER_RANK;
            else if (!strcmp(v, "per-node")) {
                o->layout = CKPT_LAYOUT_UNKNOWN;
                o->layout_env = "per-node";
            } else
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
        else if (!strcmp(a, "--fixed-mb"))
            o->fixed_mb = atol(v);
        else if (!strcmp(a, "--fixed-reps"))
            o->fixed_reps = atoi(v);
        else if (!strcmp(a, "--mem-rank1-pieces"))
            o->mem_rank1 = atol(v);
        else if (!strcmp(a, "--ranks-per-node"))
            o->ranks_per_node = atoi(v);
        else if (!strcmp(a, "--mem-kind")) {
            if (!strcmp(v, "owned"))
                o->mem_partitioned = 0;
            else if (!strcmp(v, "partitioned"))
                o->mem_partitioned = 1;
            else
                return -1;
        } else if (!strcmp(a, "--mem-pieces")) {
            if (parse_mem_pieces(o, v) != 0)
                return -1;
        }
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
    if (!o->dir || o->mb < 1 || o->reps < 1 || o->reps > MAX_REPS || o->tensors < 1 ||
        o->min_kb < 1 || o->max_kb < o->min_kb || o->fixed_mb < 1 || o->fixed_reps < 1 ||
        o->fixed_reps > MAX_REPS || o->ranks_per_node < 0 || o->mem_rank1 < 0)
        return -1;
    if (check_scenarios(o->scenario) != 0)
        return -1;
    return o->scenario[0] ? 0 : -1;
}

/* Is `name` one of the comma-separated scenarios of `list`? */
static int has_scenario(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n == len && !strncmp(p, name, n))
            return 1;
        p += n + (p[n] == ',');
    }
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
    int all = has_scenario(sc, "all");
    int do_large = all || has_scenario(sc, "large"), do_small = all || has_scenario(sc, "small");
    int do_restore = all || has_scenario(sc, "restore");
    int do_async = all || has_scenario(sc, "async");
    int do_cache = has_scenario(sc, "cache");
    int uses_large = do_large || do_restore || do_async || do_cache ||
                     has_scenario(sc, "replicas"); /* the same bytes per rank (disk check) */
    size_t small_bytes = do_small ? small_model_bytes(&o) : 0;
    int scale_rows = has_scenario(sc, "collectives") || has_scenario(sc, "files") ||
                     has_scenario(sc, "memory") || has_scenario(sc, "fixed");
    size_t big = uses_large ? (size_t)o.mb << 20 : 0;
    if (scale_rows && ((size_t)o.fixed_mb << 20) > big)
        big = (size_t)o.fixed_mb << 20;
    if (!check_dir(&o, big, small_bytes)) {
        MPI_Finalize();
        return 3;
    }
    if (g_rank == 0) {
        printf("mpickpt-bench %s: %d ranks, layout %s%s, %s, %d reps, dir %s\n", ckpt_version(),
               g_size, layout_name(&o),
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
    if (do_cache) {
        run_cache(&o, &m);
        run_cache_drain(&o, &m);
    }
    free(m.arena);
    if (has_scenario(sc, "collectives"))
        run_collectives(&o);
    if (has_scenario(sc, "files"))
        run_files(&o);
    if (has_scenario(sc, "memory"))
        run_memory(&o);
    if (has_scenario(sc, "fixed"))
        run_fixed(&o);
    if (has_scenario(sc, "replicas"))
        run_replicas(&o);
    if (has_scenario(sc, "coop_restore"))
        run_coop_restore(&o);
    if (o.info != MPI_INFO_NULL)
        MPI_Info_free(&o.info);
    MPI_Comm_free(&g_node);
    MPI_Finalize();
    return g_status;
}
