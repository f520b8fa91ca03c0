/* mpickpt-bench's shared parts (not installed): the options, a result row, the large model, and
 * what each of bench.c (main, options, output), bench_posix.c (timing, the plain-POSIX baselines)
 * and bench_scenarios.c (the models and the scenarios) takes from another. */
#ifndef MPICKPT_BENCH_H
#define MPICKPT_BENCH_H

#include <mpickpt.h>

#include <stddef.h>
#include <stdint.h>

#define MiB (1024.0 * 1024.0)
#define NT 4              /* tensors of the large model */
#define COLS 1024         /* float32 columns: 4 KiB rows */
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

extern int g_rank, g_size;
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

#endif
