/* mpickpt-bench's shared parts (not installed): the options, a result row, the large model, and
 * what each of bench.c (main, options, output), bench_posix.c (timing, the plain-POSIX baselines),
 * bench_scenarios.c (the models and the scenarios), bench_scale.c (the scale rows: collective
 * calls, restore memory), bench_files.c (the scale rows: files, fixed cost) and bench_pmpi.c (MPI
 * calls counted through PMPI) takes from another. */
#ifndef MPICKPT_BENCH_H
#define MPICKPT_BENCH_H

#include <mpickpt.h>

#include <stddef.h>
#include <stdint.h>

#define MiB (1024.0 * 1024.0)
#define NT 4              /* tensors of the large model */
#define COLS 1024         /* float32 columns: 4 KiB rows */
#define MAX_REPS 1000
#define MAX_MEM_POINTS 16 /* --mem-pieces: total piece counts of the memory row */

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
    /* --layout per-node: the saver is created with layout "unknown" and MPICKPT_LAYOUT=per-node
     * (a layout this build may not have: the rows that need it say so and are skipped) */
    const char *layout_env;
    int ranks_per_node;   /* files row: also per-node with MPICKPT_RANKS_PER_NODE=K (0: no) */
    long fixed_mb;        /* fixed-cost, collectives and files rows: MiB per rank (4) */
    int fixed_reps;       /* fixed-cost rows: reps (11) */
    long mem_pieces[MAX_MEM_POINTS]; /* memory row: total piece counts */
    int n_mem;
    int mem_partitioned;  /* memory row: 1 tensors split across ranks (default); 0 full tensors */
    long mem_rank1;       /* memory row: the pieces rank 1 holds at every point (100) */
} opts;

extern int g_rank, g_size;
extern int g_status; /* main's exit code (bench_scale.c sets 4 when PMPI counting is broken) */
extern MPI_Comm g_node; /* ranks on this node: its rank 0 drops the node's page cache */

/* ---- bench_posix.c: helpers and plain-POSIX baselines (timed ones are collective: barrier
 * before, max over ranks after) ---- */
double now(void);
double max_all(double v);
void die(const char *what, int rc);
void die_errno(const char *what, const char *path);
void *alloc_touched(size_t n);
void fill_linear(float *f, size_t n, uint64_t base);
int check_linear(const float *f, size_t n, uint64_t base);
void plain_write(const char *path, const void *buf, size_t n);
double timed_plain_write(const char *path, const void *buf, size_t n);
double timed_plain_read(const char *path, void *buf, size_t n);
void plain_pread(const char *path, void *buf, size_t n);
double timed_checked_read(const char *path, void *buf, size_t n);
void remove_all(const char *path);
int drop_caches(char *why, size_t whylen);

/* ---- bench.c: one row of the table (and its JSON line), printed by rank 0 ---- */
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

void print_result(const opts *o, const result *r);
/* *r zeroed, then its scenario, baseline, bytes per rank and o->reps set (bench_scenarios.c) */
void result_begin(result *r, const opts *o, const char *scenario, const char *baseline,
                  size_t bytes);
double median(const double *v, int n);
double quantile(const double *v, int n, double q);
const char *layout_name(const opts *o);

/* ---- bench_scenarios.c ---- */
/* Large: tensor 0 is `part` (global [size*R, COLS], this rank's R rows), 1..3 are full [R, COLS]
 * named rank<r>/full<k>; all four of R*COLS floats, contiguous in one arena. */
typedef struct large_model {
    unsigned char *arena;
    size_t bytes, tbytes;
    int64_t R;
    float *t[NT];
} large_model;

void large_init(large_model *m, long mb);
size_t small_model_bytes(const opts *o); /* per rank, as the small scenario allocates them */
void run_large(const opts *o, large_model *m);
void run_small(const opts *o);
void run_restore(const opts *o, large_model *m);
void run_async(const opts *o, large_model *m);
/* bench_cache.c: saves to the cache level (DIR/cache/%n), without and with partner copies */
void run_cache(const opts *o, large_model *m);
/* ... and the drain's cost to a compute loop (a manager with an async saver) */
void run_cache_drain(const opts *o, large_model *m);
/* shared with bench_scale.c */
ckpt_saver *make_saver(const opts *o, int async);
int try_make_saver(ckpt_saver **out, const opts *o, int async); /* agreed code, no exit */
void large_register(ckpt_saver *s, large_model *m, int reshard);
int large_check(const large_model *m, int reshard);
void delete_ckpt(const char *prefix);
double timed_save(ckpt_saver *s, const char *prefix, result *r, int i);
/* the phases of the saver's last save into row r's sample i */
void record_phases(ckpt_saver *s, result *r, int i);
/* The end of a timed save started at t0 (rc its status, `what` the call to name if it failed):
 * seconds, max over ranks; phases into r at sample i (when r != NULL). */
double timed_save_end(ckpt_saver *s, double t0, int rc, const char *what, result *r, int i);
double timed_restore(ckpt_saver *s, const char *prefix);

/* ---- bench_scale.c: the scale rows (issue 15) ---- */
void run_collectives(const opts *o);
void run_memory(const opts *o);
void run_files(const opts *o);
void run_fixed(const opts *o);
/* shared by bench_scale.c and bench_files.c (bench_files.c: files and fixed rows) */
void scale_path(char *out, size_t n, const opts *o, const char *what); /* DIR/bench-WHAT */
void agreed_reason(char *why, size_t n, const char *what, int rc);
void print_skipped(const opts *o, const char *scenario, const char *layout, const char *why);
void remove_tree(const char *dir); /* bench_files.c; rank 0 only, links not followed */
/* bench_replicas.c: the replica check's cost (check_replicas off / first / every) */
void run_replicas(const opts *o);
void run_coop_restore(const opts *o); /* bench_coop.c */

/* ---- bench_pmpi.c: MPI calls counted through the profiling interface ---- */
enum { PMPI_COLL, PMPI_P2P, PMPI_IO, PMPI_WAIT, PMPI_NKIND };
enum { PMPI_CALLER_AGREE /* libmpickpt's ckpt_mpi_agree */, PMPI_CALLER_MPICKPT /* the rest */,
       PMPI_CALLER_HDF5, PMPI_CALLER_BENCH, PMPI_CALLER_OTHER, PMPI_NCALLER };
int pmpi_nfunc(void);
const char *pmpi_func_name(int f);
int pmpi_func_kind(int f);
void pmpi_begin(void);    /* zeroes this process's counters and starts counting */
void pmpi_end(long *out); /* stops; out[f * PMPI_NCALLER + caller] for f < pmpi_nfunc() */
void pmpi_sites(int on);  /* also records each collective call's stack (costly: --verbose) */
void pmpi_sites_print(void); /* this process's call sites of the last window, on stdout */

#endif
