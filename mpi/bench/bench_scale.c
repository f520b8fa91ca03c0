/* mpickpt-bench: the scale rows (issue 15), each printed as a table on rank 0 and, with --json,
 * one JSON line per row:
 *   collectives  MPI calls per save and restore, counted through PMPI (bench_pmpi.c): the first
 *                save (the plan is made), a save with the cached plan, the restore of that
 *                checkpoint, and an async save with a cached plan (start to ckpt_saver_sync);
 *                then a manager's (mgr_*): ckpt_manager_save with the plan cached, without and
 *                with retention deleting a checkpoint, ckpt_manager_restore_latest by a
 *                new manager, and an async manager's save to its ckpt_saver_sync (--verbose:
 *                each collective's call site, offsets in libmpickpt);
 *                per rank, reported as the max over ranks and the chief's (rank 0).
 *   memory       per-rank peak memory growth during ckpt_saver_restore against the total piece
 *                count (tiny pieces: one float32 each), on the chief and on the other ranks.
 * The files and fixed rows are in bench_files.c. Collective: every rank runs every row. */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int g_status; /* main's exit code: set when a row finds the benchmark itself broken */

void scale_path(char *out, size_t n, const opts *o, const char *what)
{
    snprintf(out, n, "%s/bench-%s", o->dir, what);
}

/* The reason of the last failed library call, the same text on every rank (rank 0's). */
void agreed_reason(char *why, size_t n, const char *what, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    snprintf(why, n, "%s: %s%s%s", what, ckpt_strerror(rc), e && e->message[0] ? ": " : "",
             e ? e->message : "");
    for (char *p = why; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '\'';
    MPI_Bcast(why, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
    why[n - 1] = '\0';
}

void print_skipped(const opts *o, const char *scenario, const char *layout, const char *why)
{
    if (g_rank != 0)
        return;
    printf("%-20s %s skipped: %s\n", scenario, layout, why);
    if (o->json)
        printf("{\"scenario\":\"%s\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
               "\"skipped\":\"%s\"}\n",
               scenario, g_size, layout, o->collective, why);
    fflush(stdout);
}

/* ---- collectives: MPI calls counted through PMPI ------------------------------------------- */

static const char *const g_kind_names[PMPI_NKIND] = { "collective", "p2p", "io", "wait" };
/* the groups reported: every call from libmpickpt, those of its ckpt_mpi_agree, HDF5's, the
 * benchmark's own (none: it makes no call inside a window), the rest (e.g. inside libmpi) */
enum { G_MPICKPT, G_AGREE, G_HDF5, G_BENCH, G_OTHER, NGROUP };
static const char *const g_group_names[NGROUP] = { "mpickpt", "mpickpt_agree", "hdf5", "bench",
                                                   "other" };

static void add_group(long *v, int g, int kind, long n)
{
    v[PMPI_NKIND + g * PMPI_NKIND + kind] += n;
}

/* One window's counts (this rank's), reduced to the max over ranks and printed with the chief's
 * (rank 0's). Returns this rank's number of collective calls made from libmpickpt. Collective. */
static long report_calls(const opts *o, const char *op, const long *c)
{
    int nf = pmpi_nfunc();
    /* v: kind totals, then [group][kind], then per function (all callers) */
    int nv = PMPI_NKIND + NGROUP * PMPI_NKIND + nf;
    long *v = calloc((size_t)nv, sizeof *v), *mx = calloc((size_t)nv, sizeof *mx);
    if (!v || !mx)
        die_errno("calloc", "counts");
    static const int group_of[PMPI_NCALLER] = { [PMPI_CALLER_AGREE] = G_AGREE,
                                                [PMPI_CALLER_MPICKPT] = G_MPICKPT,
                                                [PMPI_CALLER_HDF5] = G_HDF5,
                                                [PMPI_CALLER_BENCH] = G_BENCH,
                                                [PMPI_CALLER_OTHER] = G_OTHER };
    for (int f = 0; f < nf; f++)
        for (int k = 0; k < PMPI_NCALLER; k++) {
            long n = c[f * PMPI_NCALLER + k];
            int kind = pmpi_func_kind(f);
            v[kind] += n;
            add_group(v, group_of[k], kind, n);
            if (k == PMPI_CALLER_AGREE) /* also part of libmpickpt's */
                add_group(v, G_MPICKPT, kind, n);
            v[PMPI_NKIND + NGROUP * PMPI_NKIND + f] += n;
        }
    MPI_Allreduce(v, mx, nv, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
#define GV(a, g, k) (a)[PMPI_NKIND + (g)*PMPI_NKIND + (k)]
    long lib_coll = GV(v, G_MPICKPT, PMPI_COLL);
    if (g_rank == 0) {
        const long *cf = v + PMPI_NKIND + NGROUP * PMPI_NKIND;
        const long *mf = mx + PMPI_NKIND + NGROUP * PMPI_NKIND;
        char col[PMPI_NKIND][32], lib[32], agr[32], h5[32];
        for (int k = 0; k < PMPI_NKIND; k++)
            snprintf(col[k], sizeof col[k], "%ld/%ld", mx[k], v[k]);
        snprintf(lib, sizeof lib, "%ld/%ld", GV(mx, G_MPICKPT, PMPI_COLL), lib_coll);
        snprintf(agr, sizeof agr, "%ld/%ld", GV(mx, G_AGREE, PMPI_COLL), GV(v, G_AGREE, PMPI_COLL));
        snprintf(h5, sizeof h5, "%ld/%ld", GV(mx, G_HDF5, PMPI_COLL), GV(v, G_HDF5, PMPI_COLL));
        printf("  %-12s %10s %8s %8s %8s | %10s %8s %8s |", op, col[0], col[1], col[2], col[3],
               lib, agr, h5);
        for (int f = 0; f < nf; f++)
            if (mf[f] || cf[f])
                printf(" %s %ld/%ld", pmpi_func_name(f) + 4, mf[f], cf[f]);
        printf("\n");
        if (o->json) {
            printf("{\"scenario\":\"collectives\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
                   "\"op\":\"%s\",\"bytes_per_rank\":%zu",
                   g_size, layout_name(o), o->collective, op, (size_t)o->fixed_mb << 20);
            for (int k = 0; k < PMPI_NKIND; k++)
                printf(",\"%s_max\":%ld,\"%s_chief\":%ld", g_kind_names[k], mx[k], g_kind_names[k],
                       v[k]);
            printf(",\"mpickpt_collective_max\":%ld,\"mpickpt_collective_chief\":%ld,"
                   "\"agree_max\":%ld,\"agree_chief\":%ld,\"hdf5_collective_max\":%ld,"
                   "\"hdf5_collective_chief\":%ld",
                   GV(mx, G_MPICKPT, PMPI_COLL), lib_coll, GV(mx, G_AGREE, PMPI_COLL),
                   GV(v, G_AGREE, PMPI_COLL), GV(mx, G_HDF5, PMPI_COLL), GV(v, G_HDF5, PMPI_COLL));
            printf(",\"by_caller\":{");
            for (int g = 0; g < NGROUP; g++) {
                printf("%s\"%s\":{", g ? "," : "", g_group_names[g]);
                for (int k = 0; k < PMPI_NKIND; k++)
                    printf("%s\"%s_max\":%ld,\"%s_chief\":%ld", k ? "," : "", g_kind_names[k],
                           GV(mx, g, k), g_kind_names[k], GV(v, g, k));
                printf("}");
            }
            printf("},\"by_function\":{");
            int first = 1;
            for (int f = 0; f < nf; f++)
                if (mf[f] || cf[f]) {
                    printf("%s\"%s\":{\"kind\":\"%s\",\"max\":%ld,\"chief\":%ld}", first ? "" : ",",
                           pmpi_func_name(f), g_kind_names[pmpi_func_kind(f)], mf[f], cf[f]);
                    first = 0;
                }
            printf("}}\n");
        }
        fflush(stdout);
    }
#undef GV
    free(v);
    free(mx);
    return lib_coll;
}

static void calls_header(const opts *o)
{
    if (g_rank != 0)
        return;
    printf("\ncollective calls (counted through PMPI, per rank; cells: max over ranks/chief), "
           "layout %s, %ld MiB per rank in 4 tensors\n",
           layout_name(o), o->fixed_mb);
    printf("  %-12s %10s %8s %8s %8s | %10s %8s %8s | by function (max/chief)\n", "op",
           "collective", "p2p", "file_io", "wait", "libmpickpt", "of them", "hdf5");
    printf("  %-12s %10s %8s %8s %8s | %10s %8s %8s |\n", "", "", "", "indep.", "test",
           "collective", "agree", "collect.");
    fflush(stdout);
}

/* One counted window around fn(arg) (`what`: the call named if it fails), its row printed;
 * with `sites`, the call sites printed too with --verbose (the chief's). Returns the row's
 * libmpickpt collective count (report_calls). */
static long count_window_at(const opts *o, long *c, int (*fn)(void *), void *arg, const char *op,
                            const char *what, int sites)
{
    sites = sites && o->verbose;
    MPI_Barrier(MPI_COMM_WORLD);
    pmpi_sites(sites);
    pmpi_begin();
    int rc = fn(arg);
    pmpi_end(c);
    pmpi_sites(0);
    if (rc != CKPT_OK)
        die(what, rc);
    long lib = report_calls(o, op, c);
    if (sites && g_rank == 0)
        pmpi_sites_print();
    return lib;
}

static void count_window(const opts *o, long *c, int (*fn)(void *), void *arg, const char *op,
                         const char *what)
{
    count_window_at(o, c, fn, arg, op, what, 1);
}

/* The saver's windows (no call sites: --verbose shows the manager's) */
typedef struct saver_call {
    ckpt_saver *s;
    const char *prefix;
} saver_call;

static int saver_write(void *arg)
{
    saver_call *a = arg;
    return ckpt_saver_write(a->s, a->prefix, NULL);
}

/* an async saver's: the save and its completion (the writer thread's calls included) */
static int saver_write_sync(void *arg)
{
    saver_call *a = arg;
    int rc = ckpt_saver_write(a->s, a->prefix, NULL);
    return rc == CKPT_OK ? ckpt_saver_sync(a->s) : rc;
}

static int saver_restore(void *arg)
{
    saver_call *a = arg;
    return ckpt_saver_restore(a->s, a->prefix, NULL, NULL);
}

typedef struct mgr_call {
    ckpt_manager *mg;
    ckpt_saver *saver;
    ckpt_manager_save_info si;
    ckpt_manager_restore_result got;
} mgr_call;

static int mgr_save(void *arg)
{
    mgr_call *a = arg;
    return ckpt_manager_save(a->mg, &a->si, NULL, 0);
}

/* an async saver's: the save and its completion (the commit hook on the writer thread) */
static int mgr_save_async(void *arg)
{
    mgr_call *a = arg;
    int rc = ckpt_manager_save(a->mg, &a->si, NULL, 0);
    return rc == CKPT_OK ? ckpt_saver_sync(a->saver) : rc;
}

static int mgr_restore(void *arg)
{
    mgr_call *a = arg;
    a->got = (ckpt_manager_restore_result)CKPT_MANAGER_RESTORE_RESULT_INIT;
    return ckpt_manager_restore_latest(&a->got, a->mg);
}

/* The manager's restore of a checkpoint with a replicated tensor (as large as the rest of a
 * rank's data, saved once): on several ranks the cooperative restore reads it once and forwards
 * it (mpi/restore_coop_run.c), with the same collective calls as a plain restore. Collective. */
static void run_manager_rep(const opts *o, large_model *m, long *c, const char *dir,
                            const ckpt_manager_options *mo)
{
    int64_t n = (int64_t)(m->bytes / sizeof(float));
    float *rep = malloc((size_t)n * sizeof *rep);
    if (!rep)
        die_errno("malloc", "replicated tensor");
    for (int64_t i = 0; i < n; i++)
        rep[i] = (float)(i % 1000) + 0.25f;
    ckpt_saver *s = make_saver(o, 0);
    large_register(s, m, 0);
    ckpt_shape sh;
    ckpt_shape_init(&sh, 1, &n);
    int rc = ckpt_saver_add_replicated(s, "rep", CKPT_FLOAT32, &sh, rep, CKPT_REPLICA_PRIMARY);
    mgr_call a;
    memset(&a, 0, sizeof a);
    if (rc != CKPT_OK || (rc = ckpt_manager_create(&a.mg, s, dir, mo)) != CKPT_OK)
        die("ckpt_manager_create (replicated)", rc);
    a.si.step = 1;
    if ((rc = ckpt_manager_save(a.mg, &a.si, NULL, 0)) != CKPT_OK)
        die("ckpt_manager_save (replicated)", rc);
    ckpt_manager_free(a.mg);
    memset(m->arena, 0, m->bytes);
    memset(rep, 0, (size_t)n * sizeof *rep);
    if ((rc = ckpt_manager_create(&a.mg, s, dir, mo)) != CKPT_OK)
        die("ckpt_manager_create (replicated)", rc);
    count_window(o, c, mgr_restore, &a, "mgr_restore_rep", "ckpt_manager_restore_latest");
    int bad = !a.got.restored || a.got.step != 1 || !large_check(m, 0);
    for (int64_t i = 0; i < n && !bad; i++)
        bad = rep[i] != (float)(i % 1000) + 0.25f;
    if (bad) {
        fprintf(stderr, "mpickpt-bench: collectives: rank %d: the manager's restore of a "
                        "replicated tensor restored wrong values\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ckpt_manager_free(a.mg);
    ckpt_saver_free(s);
    free(rep);
    if (g_rank == 0)
        remove_tree(dir);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* The manager (sync saver, the layout's default options): a save with the plan cached (the
 * second; the first makes the plan) and ckpt_manager_restore_latest of it by a new
 * manager on the same directory (as a restarted job). Collective. */
static void run_manager_calls(const opts *o, large_model *m, long *c)
{
    char dir[4096];
    scale_path(dir, sizeof dir, o, "coll-manager");
    if (g_rank == 0)
        remove_tree(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    ckpt_saver *s = make_saver(o, 0);
    large_register(s, m, 0);
    ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT;
    mo.max_to_keep = 2;
    mgr_call a;
    memset(&a, 0, sizeof a);
    int rc = ckpt_manager_create(&a.mg, s, dir, &mo);
    if (rc != CKPT_OK)
        die("ckpt_manager_create", rc);
    a.si.step = 1;
    if ((rc = ckpt_manager_save(a.mg, &a.si, NULL, 0)) != CKPT_OK) /* the plan made */
        die("ckpt_manager_save", rc);
    a.si.step = 2;
    count_window(o, c, mgr_save, &a, "mgr_save", "ckpt_manager_save");
    a.si.step = 3; /* retention (max_to_keep 2) deletes the first */
    count_window(o, c, mgr_save, &a, "mgr_save_ret", "ckpt_manager_save");
    ckpt_manager_free(a.mg);
    a.mg = NULL;
    memset(m->arena, 0, m->bytes);
    if ((rc = ckpt_manager_create(&a.mg, s, dir, &mo)) != CKPT_OK)
        die("ckpt_manager_create", rc);
    count_window(o, c, mgr_restore, &a, "mgr_restore", "ckpt_manager_restore_latest");
    if (!a.got.restored || a.got.step != 3 || !large_check(m, 0)) {
        if (g_rank == 0)
            fprintf(stderr, "mpickpt-bench: collectives: the manager restored %s (step %lld)\n",
                    a.got.restored ? "wrong values" : "nothing", (long long)a.got.step);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ckpt_manager_free(a.mg);
    ckpt_saver_free(s);
    if (g_rank == 0)
        remove_tree(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    run_manager_rep(o, m, c, dir, &mo);

    /* async: a save with the plan cached, to its ckpt_saver_sync */
    a.saver = make_saver(o, 1);
    large_register(a.saver, m, 0);
    if ((rc = ckpt_manager_create(&a.mg, a.saver, dir, &mo)) != CKPT_OK)
        die("ckpt_manager_create", rc);
    a.si.step = 1;
    if ((rc = mgr_save_async(&a)) != CKPT_OK) /* the plan made */
        die("ckpt_manager_save (async)", rc);
    a.si.step = 2;
    count_window(o, c, mgr_save_async, &a, "mgr_async", "ckpt_manager_save (async)");
    ckpt_manager_free(a.mg);
    if ((rc = ckpt_saver_close(a.saver)) != CKPT_OK)
        die("ckpt_saver_close", rc);
    if (g_rank == 0)
        remove_tree(dir);
    MPI_Barrier(MPI_COMM_WORLD);
}

void run_collectives(const opts *o)
{
    int nf = pmpi_nfunc();
    long *c = calloc((size_t)nf * PMPI_NCALLER, sizeof *c);
    if (!c)
        die_errno("calloc", "counts");
    large_model m;
    large_init(&m, o->fixed_mb);
    char p1[4096], p2[4096], pa[4096], why[512];
    scale_path(p1, sizeof p1, o, "coll-first");
    scale_path(p2, sizeof p2, o, "coll-cached");
    scale_path(pa, sizeof pa, o, "coll-async");
    ckpt_saver *s = NULL;
    int rc = try_make_saver(&s, o, 0);
    if (rc != CKPT_OK) {
        agreed_reason(why, sizeof why, "ckpt_saver_create", rc);
        print_skipped(o, "collectives", layout_name(o), why);
        free(m.arena);
        free(c);
        return;
    }
    calls_header(o);
    large_register(s, &m, 0);
    delete_ckpt(p1);
    delete_ckpt(p2);
    delete_ckpt(pa);

    /* the first save: the plan is made */
    saver_call sc = { s, p1 };
    long lib_first = count_window_at(o, c, saver_write, &sc, "save_first", "ckpt_saver_write", 0);
    delete_ckpt(p1);

    /* the same registrations again: the cached plan */
    sc.prefix = p2;
    count_window_at(o, c, saver_write, &sc, "save_cached", "ckpt_saver_write", 0);

    /* restore of that checkpoint through the same registrations */
    memset(m.arena, 0, m.bytes);
    count_window_at(o, c, saver_restore, &sc, "restore", "ckpt_saver_restore", 0);
    if (!large_check(&m, 0)) {
        if (g_rank == 0)
            fprintf(stderr, "mpickpt-bench: collectives: restored values are wrong\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ckpt_saver_free(s);
    delete_ckpt(p2);

    /* async, the cached plan (a warm-up save first): start of the save to ckpt_saver_sync, the
     * writer thread's calls included */
    ckpt_saver *a = make_saver(o, 1);
    large_register(a, &m, 0);
    if ((rc = ckpt_saver_write(a, pa, NULL)) != CKPT_OK || (rc = ckpt_saver_sync(a)) != CKPT_OK)
        die("async warm-up save", rc);
    delete_ckpt(pa);
    sc.s = a;
    sc.prefix = pa;
    count_window_at(o, c, saver_write_sync, &sc, "async", "async ckpt_saver_write/sync", 0);
    if ((rc = ckpt_saver_close(a)) != CKPT_OK)
        die("ckpt_saver_close", rc);
    delete_ckpt(pa);

    run_manager_calls(o, &m, c);

    /* Every save makes collective calls: none counted from the library means its MPI_* calls do
     * not reach the executable's definitions, or its code is not where bench_pmpi.c looks
     * (mpi/bench/bench_text.ld). */
    if (g_rank == 0) {
        if (lib_first > 0)
            printf("  (interposition checked: the chief counted %ld collective calls from "
                   "libmpickpt in the first save)\n",
                   lib_first);
        else {
            fprintf(stderr, "mpickpt-bench: collectives: no MPI call from libmpickpt was counted: "
                            "the executable does not interpose MPI_* (export its symbols)\n");
            g_status = 4;
        }
        fflush(stdout);
    }
    free(m.arena);
    free(c);
}

/* ---- memory: per-rank restore memory against the total piece count ---------------------- */

/* A field of /proc/self/status in KiB, -1 when absent. */
static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = atol(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

/* Resets VmHWM to the current RSS (Linux >= 4.0; a process may do it to itself). */
static int hwm_reset(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0)
        return -1;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok ? 0 : -1;
}

static long heap_in_use_kb(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long)((mi.uordblks + mi.hblkhd) / 1024);
}

static float piece_value(long i)
{
    return (float)(i & 0xFFFFF);
}

/* Who holds which pieces at one point of the memory row. Rank 1 holds a fixed number of pieces
 * (K, --mem-rank1-pieces) at every point and the other ranks hold the rest, so that rank 1 shows
 * what a rank with a fixed share pays as the total grows (on 2 cores the total cannot grow by
 * adding ranks). partitioned: K tensors "s<j>" of `size` float32s, element r on rank r, and B
 * tensors "b<j>" of size-1 float32s split over the ranks other than 1; owned: full tensors
 * "t<j>" of one float32, K on rank 1, the rest spread over the others. */
typedef struct mem_plan {
    long K, B, total, nloc, first; /* first: owned, this rank's first tensor number */
    int part, W, elem;             /* partitioned: "b" tensors' length and this rank's element */
} mem_plan;

static void mem_plan_make(mem_plan *L, const opts *o, long P)
{
    memset(L, 0, sizeof *L);
    L->part = o->mem_partitioned;
    if (g_size == 1) {
        L->B = L->total = L->nloc = P;
        L->W = 1;
        return;
    }
    int others = g_size - 1, oi = g_rank == 0 ? 0 : g_rank - 1; /* rank's number among others */
    if (L->part) {
        L->K = o->mem_rank1 < P / g_size ? o->mem_rank1 : P / g_size;
        L->B = (P - L->K * g_size) / others;
        L->total = L->K * g_size + L->B * others;
        L->nloc = L->K + (g_rank == 1 ? 0 : L->B);
        L->W = others;
        L->elem = oi;
    } else {
        L->K = o->mem_rank1 < P ? o->mem_rank1 : P;
        long rest = P - L->K, per = rest / others, rem = rest % others;
        L->total = P;
        L->nloc = g_rank == 1 ? L->K : per + (oi < rem);
        L->first = g_rank == 1 ? 0 : L->K + oi * per + (oi < rem ? oi : rem);
    }
}

/* Piece i of this rank: registers it in s with its value in *v (the value's number from which
 * piece_value derives it: the same on save and check). */
static long mem_piece_id(const mem_plan *L, long i)
{
    if (!L->part)
        return L->first + i;
    if (i < L->K)
        return i * g_size + g_rank;
    return L->K * g_size + (i - L->K) * L->W + L->elem;
}

static int mem_register(ckpt_saver *s, const mem_plan *L, long i, float *v)
{
    char name[64];
    *v = piece_value(mem_piece_id(L, i));
    if (!L->part) {
        int64_t one = 1;
        ckpt_shape sh;
        ckpt_shape_init(&sh, 1, &one);
        snprintf(name, sizeof name, "t%08ld", L->first + i);
        return ckpt_saver_add_full(s, name, CKPT_FLOAT32, &sh, v);
    }
    int64_t dim = i < L->K ? g_size : L->W, st = i < L->K ? g_rank : L->elem, ct = 1;
    ckpt_shape sh;
    ckpt_slice sl;
    ckpt_shape_init(&sh, 1, &dim);
    ckpt_slice_init(&sl, 1, &st, &ct);
    snprintf(name, sizeof name, i < L->K ? "s%07ld" : "b%07ld", i < L->K ? i : i - L->K);
    return ckpt_saver_add_slice(s, name, CKPT_FLOAT32, &sh, &sl, v);
}

/* One point: P total pieces registered as mem_plan_make says, saved, then restored by every rank
 * through its own registrations with the peak measured. *warm: a first, unmeasured restore was
 * made (at the first point). */
static void memory_point(const opts *o, long P, int *warm)
{
    mem_plan L;
    mem_plan_make(&L, o, P);
    size_t vbytes = (size_t)(L.nloc ? L.nloc : 1) * sizeof(float);
    float *vals = alloc_touched(vbytes);
    ckpt_saver *s = make_saver(o, 0);
    int rc;
    double r0 = now();
    for (long i = 0; i < L.nloc; i++)
        if ((rc = mem_register(s, &L, i, vals + i)) != CKPT_OK)
            die("register", rc);
    double reg_s = max_all(now() - r0);
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/bench-memory-%ld", o->dir, L.total);
    double save_s = timed_save(s, prefix, NULL, 0);
    if (!*warm) {
        timed_restore(s, prefix); /* code pages, HDF5's first use, MPI's buffers */
        *warm = 1;
    }
    memset(vals, 0, vbytes);
    malloc_trim(0);
    MPI_Barrier(MPI_COMM_WORLD);
    int hwm_ok = hwm_reset() == 0;
    long base = status_kb("VmHWM"), heap0 = heap_in_use_kb();
    double t0 = now();
    rc = ckpt_saver_restore(s, prefix, NULL, NULL);
    double t = now() - t0;
    long peak = status_kb("VmHWM"), heap1 = heap_in_use_kb();
    if (rc != CKPT_OK)
        die("ckpt_saver_restore", rc);
    double restore_s = max_all(t);
    int ok = 1;
    for (long i = 0; i < L.nloc && ok; i++)
        ok = vals[i] == piece_value(mem_piece_id(&L, i));
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (g_rank == 0)
            fprintf(stderr, "mpickpt-bench: memory: restored values are wrong\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int64_t mine[5] = { hwm_ok && base >= 0 && peak >= 0 ? peak - base : -1, L.nloc, heap1 - heap0,
                        hwm_ok, peak };
    int64_t *all = g_rank == 0 ? calloc((size_t)g_size * 5, sizeof *all) : NULL;
    MPI_Gather(mine, 5, MPI_INT64_T, all, 5, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        struct stat st;
        char ipath[4200];
        snprintf(ipath, sizeof ipath, "%s.index", prefix);
        long long ibytes = stat(ipath, &st) == 0 ? (long long)st.st_size : -1;
        int hwm_all = 1;
        long long other_max = -1; /* ranks 2.. (the big shares) */
        for (int r = 0; r < g_size; r++) {
            hwm_all &= all[5 * r + 3] != 0;
            if (r > 1 && all[5 * r] > other_max)
                other_max = all[5 * r];
        }
        long long r1_peak = g_size > 1 ? all[5] : -1, r1_pieces = g_size > 1 ? all[6] : -1;
        long long r1_heap = g_size > 1 ? all[7] : 0;
        char c[5][32]; /* MiB, or "-" where there is no such rank or no VmHWM */
        long long kb[5] = { all[0], r1_peak, other_max, all[4], g_size > 1 ? all[9] : -1 };
        for (int i = 0; i < 5; i++)
            if (kb[i] < 0)
                snprintf(c[i], sizeof c[i], "-");
            else
                snprintf(c[i], sizeof c[i], "%.1f", (double)kb[i] / 1024);
        printf("  %10ld %10lld %9lld %9.2f %7.3f %7.3f %9.4f | %9s %9s %10s | %7s %7s | %7lld "
               "%7lld\n",
               L.total, (long long)all[1], r1_pieces, (double)ibytes / MiB, reg_s, save_s,
               restore_s, c[0], c[1], c[2], c[3], c[4], (long long)all[2], r1_heap);
        if (o->json) {
            printf("{\"scenario\":\"restore_memory\",\"ranks\":%d,\"layout\":\"%s\","
                   "\"collective\":%d,\"kind\":\"%s\",\"total_pieces\":%ld,"
                   "\"pieces_chief\":%lld,\"pieces_rank1\":%lld,\"index_bytes\":%lld,"
                   "\"register_s\":%.9g,\"save_s\":%.9g,\"restore_s\":%.9g,\"method\":\"%s\","
                   "\"peak_kb_chief\":%lld,\"peak_kb_rank1\":%lld,\"peak_kb_others_max\":%lld,"
                   "\"hwm_kb_chief\":%lld,\"hwm_kb_rank1\":%lld,"
                   "\"heap_retained_kb_chief\":%lld,\"heap_retained_kb_rank1\":%lld}\n",
                   g_size, layout_name(o), o->collective, L.part ? "partitioned" : "owned",
                   L.total, (long long)all[1], r1_pieces, ibytes, reg_s, save_s, restore_s,
                   hwm_all ? "VmHWM after clear_refs 5" : "unavailable", (long long)all[0],
                   r1_peak, other_max, (long long)all[4], g_size > 1 ? (long long)all[9] : -1LL,
                   (long long)all[2], r1_heap);
        }
        fflush(stdout);
        free(all);
    }
    ckpt_saver_free(s);
    delete_ckpt(prefix);
    free(vals);
}

void run_memory(const opts *o)
{
    /* a layout this build lacks: say so (the saver is made per point below) */
    ckpt_saver *probe = NULL;
    char why[512];
    int rc = try_make_saver(&probe, o, 0);
    if (rc != CKPT_OK) {
        agreed_reason(why, sizeof why, "ckpt_saver_create", rc);
        print_skipped(o, "restore_memory", layout_name(o), why);
        return;
    }
    ckpt_saver_free(probe);
    if (g_rank == 0) {
        printf("\nrestore memory per rank: %s pieces of one float32, rank 1 holds %ld of them at "
               "every point, the other ranks the rest; layout %s\n",
               o->mem_partitioned ? "partitioned (tensors split across ranks)"
                                  : "owned (full tensors)",
               o->mem_rank1, layout_name(o));
        printf("  peak: VmHWM growth during ckpt_saver_restore (VmHWM reset by clear_refs 5 just "
               "before; MiB); hwm: VmHWM after it; heap: mallinfo2 in use after - before (KiB)\n");
        printf("  %10s %10s %9s %9s %7s %7s %9s | %9s %9s %10s | %7s %7s | %7s %7s\n", "pieces",
               "chief's", "rank 1's", "index_MiB", "reg_s", "save_s", "restore_s", "peak_chf",
               "peak_r1", "peak_other", "hwm_chf", "hwm_r1", "heap_c", "heap_r1");
        fflush(stdout);
    }
    int warm = 0;
    for (int i = 0; i < o->n_mem; i++)
        memory_point(o, o->mem_pieces[i], &warm);
}
