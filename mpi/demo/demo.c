/*
 * mpickpt-demo: a small data-parallel "training job" that checkpoints with the worker training
 * state (ckpt_training_*), can be made to crash, and resumes — on any number of ranks — checking
 * every value it restored.
 *
 *   mpirun -np N mpickpt-demo --dir DIR [--epochs E] [--steps-per-epoch S] [--ckpt-every K]
 *          [--keep N] [--mb M] [--layout shared|per-rank|per-node] [--crash-rank R --crash-step T] [--async]
 *          [--cache-dir PATTERN [--redundancy none|partner] [--persist-every K] [--cache-keep N]]
 *          [--deadline-reserve S] [--step-sleep MS]
 *
 * The state looks like a model's:
 *   model/dense/kernel        float32 [R, C]  partitioned by rows over the ranks (uneven split)
 *   optimizer/dense/kernel/m  float32 [R, C]  its optimizer slot, partitioned the same way
 *   model/dense/bias          float32 [C]     replicated, stored once (CKPT_REPLICA_PRIMARY)
 *   rng/state                 uint64  [4]     per rank (CKPT_REPLICA_PER_COMPONENT)
 *   data_loader               blob            per rank: this rank's data-loader position
 * with C = 1024 and R = 512 * M + 5, a function of M only (never of N, so a checkpoint resumes on
 * any rank count): kernel + slot are 4 * M MiB in total, i.e. about M MiB per rank at 4 ranks.
 *
 * Every value is a function of the element's GLOBAL index and the global step t (independent of
 * the rank count), so after a restore each rank checks every value it got, exactly:
 *   kernel[g] = (g % 9973) * 0.25 + t        (g = row * C + col)
 *   slot[g]   = kernel[g] * 0.5
 *   bias[j]   = j + 0.5 * t
 *   rng[k]    = splitmix64(rank, t, k)       data_loader = { rank, t, t * 64 + rank * 1000003 }
 * Per-rank state of a rank the writer did not have (resume on more ranks) is left untouched by
 * the restore and re-initialised here from (rank, t).
 *
 * The training loop: global steps t = 1, 2, ...; epoch e has S steps. A step sets every buffer to
 * the values of t and does one (scalar) allreduce, like a gradient allreduce. A backup
 * (ckpt_training_back_up, sync: the loop waits for it) after the last step of every epoch
 * (end_of_epoch = 1) and after every other step t with t % K == 0. A resume continues at
 * ckpt_training_initial_epoch / _initial_step; resuming a finished run restores its last
 * checkpoint, checks it, trains no step, writes no checkpoint and prints `done` again.
 *
 * Preemption (mpickpt/preempt.h): SIGTERM and SIGUSR1 only set a flag; after every step all ranks
 * run the collective ckpt_preempt_check. When it says stop (some rank was signalled, or the
 * deadline from MPICKPT_DEADLINE / SLURM_JOB_END_TIME minus --deadline-reserve seconds was
 * reached, or a halt request, `mpickpt halt DIR`, is due), every rank takes the final backup at the current epoch and step (end-of-epoch when the
 * step ends the epoch, mid-epoch otherwise; none when that step was just backed up), rank 0 prints
 * `preempted ...` and every rank exits with CKPT_EXIT_PREEMPTED (75): the batch script requeues
 * the job and the next run resumes at the following step. --step-sleep MS slows every step down
 * (tests use it to preempt a run on demand).
 *
 * Output (rank 0 only, except crash / errors / verification failures, which name the rank):
 *   fresh start | resumed epoch=E step=T from=PREFIX     (E, T: what the checkpoint holds)
 *   verified every restored value at step T: ...
 *   checkpoint prefix=P epoch=E step=T blocking_s=B write_s=W
 *   crash rank=R step=T
 *   preempted epoch=E step=T reason=signal|deadline|halt (after the final `checkpoint` line)
 *   done epoch=E step=T
 * Exit codes: 0 ok, 1 library error or verification failure, 2 usage, 75 preempted (checkpointed:
 * run it again to resume).
 *
 * Test hook: MPICKPT_DEMO_TAMPER=<rank> makes <rank> change one restored kernel value before the
 * check, to prove that the check catches it (tests/scripts/test_demo.sh).
 */
#include <mpickpt.h>
#include <mpickpt/manager.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COLS 1024
#define KERNEL "model/dense/kernel"
#define SLOT "optimizer/dense/kernel/m"
#define BIAS "model/dense/bias"
#define RNG "rng/state"
#define LOADER "data_loader"
#define LOADER_MAGIC 0x6d70636b64656d6fULL /* "mpckdemo" */

typedef struct options {
    const char *dir;
    int64_t epochs, steps, every, keep, mb;
    ckpt_layout layout;
    int64_t crash_rank, crash_step;
    int async;
    int64_t deadline_reserve, step_sleep_ms;
    int hold;
    int crash_fresh; /* --crash-fresh: the crash only in a fresh run */
    /* the cache level (docs/levels.md) */
    const char *cache_dir;
    int partner;
    int64_t persist_every, cache_keep;
} options;

/* This rank's data-loader position: what the registered saver "data_loader" stores. */
typedef struct loader_state {
    uint64_t magic;
    int64_t rank;
    int64_t step;
    int64_t position;
} loader_state;

typedef struct demo {
    int rank, size;
    int64_t rows, r0, r1; /* global rows; this rank owns [r0, r1) */
    float *kernel, *slot;
    float bias[COLS];
    uint64_t rng[4];
    loader_state loader;
    int loader_restored; /* set by the blob's restore callback */
    /* --async: the backup in flight, whose `checkpoint` line is printed once it committed */
    int async;
    ckpt_saver *saver;
    char pending[4096];
    int64_t pending_epoch, pending_step;
    double pending_block;
} demo;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np N mpickpt-demo --dir DIR [--epochs E] [--steps-per-epoch S]\n"
            "         [--ckpt-every K] [--keep N] [--mb M] [--layout shared|per-rank|per-node]\n"
            "         [--crash-rank R --crash-step T] [--async] [--deadline-reserve S]\n"
            "         [--step-sleep MS] [--hold] [--crash-fresh]\n"
            "  --dir DIR              training-state directory (checkpoints in DIR/chief/)\n"
            "  --epochs E             epochs to train (default 3)\n"
            "  --steps-per-epoch S    steps per epoch (default 10)\n"
            "  --ckpt-every K         also back up every K global steps inside an epoch (default 5;\n"
            "                         0: only at the end of each epoch)\n"
            "  --keep N               checkpoints kept (default 3; 0 keeps all)\n"
            "  --cache-dir P          the cache level: node-local directory pattern (%%n: the\n"
            "                         node), with --redundancy none|partner, --persist-every K\n"
            "                         (default 10) and --cache-keep N (default 2); docs/levels.md\n"
            "  --mb M                 model size: 4*M MiB of kernel + optimizer slot in total,\n"
            "                         about M MiB per rank at 4 ranks (default 4)\n"
            "  --layout L             data files: per-rank (default), shared (one file, MPI-IO)\n"
            "                         or per-node (one file per node)\n"
            "  --crash-rank R --crash-step T   rank R aborts at global step T (simulated failure)\n"
            "  --crash-fresh          ... only in a fresh run (nothing restored): a relaunch that\n"
            "                         resumed from a checkpoint before T runs on past T\n"
            "  --async                asynchronous saves: a backup blocks the loop only while the\n"
            "                         state is copied; its `checkpoint` line (with the background\n"
            "                         write time) is printed once it committed\n"
            "  --deadline-reserve S   stop (final checkpoint, exit 75) S seconds before the deadline\n"
            "                         in MPICKPT_DEADLINE or SLURM_JOB_END_TIME (default 30)\n"
            "  --step-sleep MS        sleep MS milliseconds in every step (default 0)\n"
            "  --hold                 a fresh run (nothing restored) stops at its first\n"
            "                         checkpoint once it is committed and waits there until it\n"
            "                         is preempted (to preempt a run at a known step, whatever\n"
            "                         the machine's speed); a resumed run never holds\n"
            "  SIGTERM or SIGUSR1 (Slurm's --signal, scancel --signal): final checkpoint at the\n"
            "  current step, then exit 75 (CKPT_EXIT_PREEMPTED) on every rank\n");
}

/* Parses a non-negative integer option value; -1 on error (explained on @p err). */
static int64_t parse_int(FILE *err, const char *opt, const char *s)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : -1;
    if (!s || errno || end == s || *end || v < 0 || v > INT_MAX) {
        fprintf(err, "mpickpt-demo: %s needs a non-negative integer, got '%s'\n", opt,
                s ? s : "");
        return -1;
    }
    return (int64_t)v;
}

/* 0 ok, 2 usage error, 3 --help. Prints only when @p verbose. */
static int parse_args(options *o, int argc, char **argv, int verbose)
{
    FILE *err = verbose ? stderr : fopen("/dev/null", "w");
    int rc = 0;
    *o = (options){ NULL, 3, 10, 5, 3, 4, CKPT_LAYOUT_PER_RANK, -1, -1, 0, 30, 0, 0, 0,
                    NULL, 0, 0, 0 };
    if (!err)
        err = stderr;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *target = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            rc = 3;
            break;
        } else if (!strcmp(a, "--async")) {
            o->async = 1;
            continue;
        } else if (!strcmp(a, "--hold")) {
            o->hold = 1;
            continue;
        } else if (!strcmp(a, "--crash-fresh")) {
            o->crash_fresh = 1;
            continue;
        } else if (!strcmp(a, "--dir")) {
            if (!v || !*v) {
                fprintf(err, "mpickpt-demo: --dir needs a directory\n");
                rc = 2;
            }
            o->dir = v;
            i++;
            continue;
        } else if (!strcmp(a, "--cache-dir")) {
            if (!v || !*v) {
                fprintf(err, "mpickpt-demo: --cache-dir needs a directory pattern\n");
                rc = 2;
            }
            o->cache_dir = v;
            i++;
            continue;
        } else if (!strcmp(a, "--redundancy")) {
            if (v && (!strcmp(v, "partner") || !strcmp(v, "none"))) {
                o->partner = !strcmp(v, "partner");
            } else {
                fprintf(err, "mpickpt-demo: --redundancy is none or partner, got '%s'\n",
                        v ? v : "");
                rc = 2;
            }
            i++;
            continue;
        } else if (!strcmp(a, "--layout")) {
            if (v && !strcmp(v, "shared"))
                o->layout = CKPT_LAYOUT_SHARED;
            else if (v && !strcmp(v, "per-rank"))
                o->layout = CKPT_LAYOUT_PER_RANK;
            else if (v && !strcmp(v, "per-node"))
                o->layout = CKPT_LAYOUT_PER_NODE;
            else {
                fprintf(err, "mpickpt-demo: --layout is shared, per-rank or per-node, got '%s'\n",
                        v ? v : "");
                rc = 2;
            }
            i++;
            continue;
        } else if (!strcmp(a, "--epochs"))
            target = &o->epochs;
        else if (!strcmp(a, "--steps-per-epoch"))
            target = &o->steps;
        else if (!strcmp(a, "--ckpt-every"))
            target = &o->every;
        else if (!strcmp(a, "--keep"))
            target = &o->keep;
        else if (!strcmp(a, "--mb"))
            target = &o->mb;
        else if (!strcmp(a, "--crash-rank"))
            target = &o->crash_rank;
        else if (!strcmp(a, "--crash-step"))
            target = &o->crash_step;
        else if (!strcmp(a, "--deadline-reserve"))
            target = &o->deadline_reserve;
        else if (!strcmp(a, "--step-sleep"))
            target = &o->step_sleep_ms;
        else if (!strcmp(a, "--persist-every"))
            target = &o->persist_every;
        else if (!strcmp(a, "--cache-keep"))
            target = &o->cache_keep;
        else {
            fprintf(err, "mpickpt-demo: unknown option '%s'\n", a);
            rc = 2;
            break;
        }
        *target = parse_int(err, a, v);
        if (*target < 0)
            rc = 2;
        i++;
    }
    if (rc == 0 && !o->dir) {
        fprintf(err, "mpickpt-demo: --dir is required\n");
        rc = 2;
    }
    if (rc == 0 && (o->epochs < 1 || o->steps < 1 || o->mb < 1 || o->mb > 1024)) {
        fprintf(err, "mpickpt-demo: --epochs and --steps-per-epoch must be >= 1, --mb in 1..1024\n");
        rc = 2;
    }
    if (rc == 0 && (o->crash_rank < 0) != (o->crash_step < 0)) {
        fprintf(err, "mpickpt-demo: --crash-rank and --crash-step go together\n");
        rc = 2;
    }
    if (rc == 2)
        usage(err);
    if (err != stderr)
        fclose(err);
    return rc;
}

/* ---- the values: functions of the global index and the global step only ---- */

static float kernel_value(int64_t g, int64_t step)
{
    return (float)((double)(g % 9973) * 0.25 + (double)step);
}

static float slot_value(int64_t g, int64_t step)
{
    return kernel_value(g, step) * 0.5f;
}

static float bias_value(int64_t j, int64_t step)
{
    return (float)((double)j + 0.5 * (double)step);
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t rng_value(int rank, int64_t step, int k)
{
    return splitmix64(((uint64_t)(uint32_t)rank << 40) ^ ((uint64_t)step << 2) ^ (uint64_t)k);
}

static loader_state loader_value(int rank, int64_t step)
{
    loader_state l = { LOADER_MAGIC, rank, step, step * 64 + (int64_t)rank * 1000003 };
    return l;
}

/* One "training step": every buffer takes the values of step t (cheap arithmetic over its rows). */
static void set_step(demo *d, int64_t step)
{
    int64_t n = (d->r1 - d->r0) * COLS, g0 = d->r0 * COLS;
    int64_t m = g0 % 9973;
    for (int64_t i = 0; i < n; i++) {
        float k = (float)((double)m * 0.25 + (double)step);
        d->kernel[i] = k;
        d->slot[i] = k * 0.5f;
        if (++m == 9973)
            m = 0;
    }
    for (int64_t j = 0; j < COLS; j++)
        d->bias[j] = bias_value(j, step);
    for (int k = 0; k < 4; k++)
        d->rng[k] = rng_value(d->rank, step, k);
    d->loader = loader_value(d->rank, step);
}

/* Puts values no step produces into every buffer, so a value the restore did not write is caught. */
static void poison(demo *d)
{
    int64_t n = (d->r1 - d->r0) * COLS;
    for (int64_t i = 0; i < n; i++)
        d->kernel[i] = d->slot[i] = -1.0f;
    for (int64_t j = 0; j < COLS; j++)
        d->bias[j] = -1.0f;
    memset(d->rng, 0, sizeof d->rng);
    memset(&d->loader, 0, sizeof d->loader);
    d->loader_restored = 0;
}

/* ---- the registered saver "data_loader" ---- */

static int loader_save(const void **data, size_t *len, void *payload)
{
    demo *d = payload;
    *data = &d->loader;
    *len = sizeof d->loader;
    return CKPT_OK;
}

static int loader_restore(const void *data, size_t len, void *payload)
{
    demo *d = payload;
    if (len != sizeof d->loader) {
        fprintf(stderr, "mpickpt-demo: rank %d: data_loader state is %zu bytes, expected %zu\n",
                d->rank, len, sizeof d->loader);
        return CKPT_EMISMATCH;
    }
    memcpy(&d->loader, data, len);
    d->loader_restored = 1;
    return CKPT_OK;
}

/* ---- verification ---- */

static int failures;

static void fail_f(const demo *d, const char *tensor, int64_t index, double got, double want)
{
    if (failures++ < 5)
        fprintf(stderr,
                "mpickpt-demo: rank %d: verification failed: %s[%lld] = %.9g, expected %.9g\n",
                d->rank, tensor, (long long)index, got, want);
}

static void fail_u(const demo *d, const char *tensor, int64_t index, unsigned long long got,
                   unsigned long long want)
{
    if (failures++ < 5)
        fprintf(stderr,
                "mpickpt-demo: rank %d: verification failed: %s[%lld] = %llu, expected %llu\n",
                d->rank, tensor, (long long)index, got, want);
}

/*
 * Checks every restored value against the formula for @p step. Ranks below @p writer_size must
 * have their own per-rank state restored; ranks the writer did not have must have it untouched
 * (then it is re-initialised from (rank, step)). Returns the number of wrong values on this rank.
 */
static int verify(demo *d, int64_t step, int writer_size)
{
    failures = 0;
    int64_t n = (d->r1 - d->r0) * COLS, g0 = d->r0 * COLS;
    for (int64_t i = 0; i < n; i++) {
        float want = kernel_value(g0 + i, step);
        if (d->kernel[i] != want) /* exact: every value is representable */
            fail_f(d, KERNEL, g0 + i, d->kernel[i], want);
        want = slot_value(g0 + i, step);
        if (d->slot[i] != want)
            fail_f(d, SLOT, g0 + i, d->slot[i], want);
    }
    for (int64_t j = 0; j < COLS; j++)
        if (d->bias[j] != bias_value(j, step))
            fail_f(d, BIAS, j, d->bias[j], bias_value(j, step));
    if (d->rank < writer_size) {
        for (int k = 0; k < 4; k++)
            if (d->rng[k] != rng_value(d->rank, step, k))
                fail_u(d, RNG, k, (unsigned long long)d->rng[k],
                       (unsigned long long)rng_value(d->rank, step, k));
        loader_state want = loader_value(d->rank, step);
        if (!d->loader_restored)
            fail_u(d, LOADER " (restore callback not called)", 0, 0, 1);
        else if (memcmp(&d->loader, &want, sizeof want) != 0) {
            fail_u(d, LOADER ".rank", 0, (unsigned long long)d->loader.rank,
                   (unsigned long long)want.rank);
            fail_u(d, LOADER ".step", 0, (unsigned long long)d->loader.step,
                   (unsigned long long)want.step);
            fail_u(d, LOADER ".position", 0, (unsigned long long)d->loader.position,
                   (unsigned long long)want.position);
        }
    } else {
        /* Not in the checkpoint: the restore must have left it alone. */
        for (int k = 0; k < 4; k++)
            if (d->rng[k] != 0)
                fail_u(d, RNG " (rank not in the checkpoint: must be untouched)", k,
                       (unsigned long long)d->rng[k], 0);
        if (d->loader_restored)
            fail_u(d, LOADER " (rank not in the checkpoint: restore callback called)", 0, 1, 0);
        for (int k = 0; k < 4; k++)
            d->rng[k] = rng_value(d->rank, step, k);
        d->loader = loader_value(d->rank, step);
    }
    if (failures > 5)
        fprintf(stderr, "mpickpt-demo: rank %d: verification failed: %d wrong values in all\n",
                d->rank, failures);
    return failures;
}

/* ---- main ---- */

/* Sleeps @p ms milliseconds (--step-sleep); a signal ends the sleep early, which is what we want. */
static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* A library error. A collective's is the same on every rank (its message names the failing rank):
 * rank 0 prints it; a local one is printed by the rank that had it. Returns the exit status. */
static int lib_error(int rank, int rc, int collective)
{
    const ckpt_error *e = ckpt_error_last();
    if (!collective || rank == 0)
        fprintf(stderr, "mpickpt-demo: %s\n", e && e->message[0] ? e->message : ckpt_strerror(rc));
    return 1;
}


/* Prints the `checkpoint` line of the async backup in flight once it committed (waits for it).
 * Returns 0 or 1 (the background failure, printed by rank 0). Collective in effect. */
static int flush_pending(demo *d)
{
    if (!d->async || !d->pending[0])
        return 0;
    int rc = ckpt_saver_sync(d->saver);
    if (rc != CKPT_OK)
        return lib_error(d->rank, rc, 1);
    ckpt_saver_metrics mt = CKPT_SAVER_METRICS_INIT;
    double w = 0;
    if (ckpt_saver_metrics_get(&mt, d->saver) == CKPT_OK)
        w = mt.write_s + mt.agree_s + mt.merge_s + mt.commit_s;
    if (d->rank == 0) {
        printf("checkpoint prefix=%s epoch=%lld step=%lld blocking_s=%.3f write_s=%.3f\n",
               d->pending, (long long)d->pending_epoch, (long long)d->pending_step,
               d->pending_block, w);
        fflush(stdout);
    }
    d->pending[0] = '\0';
    return 0;
}

/* One backup (collective) at epoch @p e, step @p t, and rank 0's `checkpoint ...` line: at once in
 * sync mode (the loop was blocked for all of it), once committed in async mode. Returns the exit
 * status: 0 or 1 (the library error, printed by rank 0). */
static int back_up(demo *d, ckpt_training *train, int64_t e, int64_t t, int end)
{
    /* async: the previous backup must be complete first (the library waits for it anyway) */
    int st = flush_pending(d);
    if (st != 0)
        return st;
    ckpt_manager_save_info info = { .epoch = e, .step = t, .end_of_epoch = end, .force = 1 };
    char name[4096] = "";
    double t0 = MPI_Wtime();
    int rc = ckpt_manager_save(ckpt_training_manager(train), &info, name, sizeof name);
    double blocked = MPI_Wtime() - t0, bmax = 0;
    MPI_Reduce(&blocked, &bmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rc != CKPT_OK)
        return lib_error(d->rank, rc, 1);
    if (d->async) {
        snprintf(d->pending, sizeof d->pending, "%s", name);
        d->pending_epoch = e;
        d->pending_step = t;
        d->pending_block = bmax;
        return 0;
    }
    if (d->rank == 0) {
        /* Sync mode: the loop is blocked for the whole write. */
        printf("checkpoint prefix=%s epoch=%lld step=%lld blocking_s=%.3f write_s=%.3f\n", name,
               (long long)e, (long long)t, bmax, bmax);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    /* The chief's summary line per save and restore on stderr, unless MPICKPT_LOG says otherwise */
    ckpt_log_set_default_level(CKPT_LOG_INFO);
    /* First thing: SIGTERM / SIGUSR1 only set a flag from now on (checked after every step). */
    int prc = ckpt_preempt_install(NULL, 0);
    if (prc != CKPT_OK) {
        fprintf(stderr, "mpickpt-demo: %s\n", ckpt_error_last()->message);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    demo d;
    memset(&d, 0, sizeof d);
    MPI_Comm_rank(MPI_COMM_WORLD, &d.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d.size);

    options o;
    prc = parse_args(&o, argc, argv, d.rank == 0);
    if (prc == 3) {
        if (d.rank == 0)
            usage(stdout);
        MPI_Finalize();
        return 0;
    }
    if (prc != 0) {
        MPI_Finalize();
        return 2;
    }
    d.async = o.async;

    /* The model: R rows (a function of --mb only), split by rows, unevenly when N does not divide. */
    d.rows = 512 * o.mb + 5;
    d.r0 = (int64_t)d.rank * d.rows / d.size;
    d.r1 = (int64_t)(d.rank + 1) * d.rows / d.size;
    size_t elems = (size_t)((d.r1 - d.r0) * COLS);
    d.kernel = malloc(sizeof(float) * (elems ? elems : 1));
    d.slot = malloc(sizeof(float) * (elems ? elems : 1));
    if (!d.kernel || !d.slot) {
        fprintf(stderr, "mpickpt-demo: rank %d: out of memory\n", d.rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    int64_t dims[2] = { d.rows, COLS }, start[2] = { d.r0, 0 }, count[2] = { d.r1 - d.r0, COLS };
    int64_t bdim = COLS, rdim = 4;
    ckpt_shape shape, bshape, rshape;
    ckpt_slice mine;
    ckpt_shape_init(&shape, 2, dims);
    ckpt_shape_init(&bshape, 1, &bdim);
    ckpt_shape_init(&rshape, 1, &rdim);
    ckpt_slice_init(&mine, 2, start, count);

    ckpt_saver_options sopts = CKPT_SAVER_OPTIONS_INIT;
    sopts.layout = o.layout;
    sopts.async = o.async;
    ckpt_saver *saver = NULL;
    ckpt_training *train = NULL;
    int status = 0;
    int rc = ckpt_saver_create(&saver, MPI_COMM_WORLD, &sopts); /* collective */
    d.saver = saver;
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_slice(saver, KERNEL, CKPT_FLOAT32, &shape, &mine, d.kernel);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_slice(saver, SLOT, CKPT_FLOAT32, &shape, &mine, d.slot);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_replicated(saver, BIAS, CKPT_FLOAT32, &bshape, d.bias,
                                       CKPT_REPLICA_PRIMARY);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_replicated(saver, RNG, CKPT_UINT64, &rshape, d.rng,
                                       CKPT_REPLICA_PER_COMPONENT);
    ckpt_blob_callbacks cb = { loader_save, loader_restore };
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_blob(saver, LOADER, &cb, &d);
    /* The deadline: MPICKPT_DEADLINE or SLURM_JOB_END_TIME (none when neither is set). */
    if (rc == CKPT_OK)
        rc = ckpt_preempt_set_deadline(-1, (double)o.deadline_reserve);
    /* Registration is local: agree before the first collective of the training state. */
    int failed = rc != CKPT_OK, any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rc != CKPT_OK) {
        status = lib_error(d.rank, rc, 0);
    } else if (any_failed) {
        status = 1; /* another rank failed and said so */
    }

    ckpt_manager_options mopts = CKPT_MANAGER_OPTIONS_INIT;
    mopts.max_to_keep = (int)o.keep;
    mopts.skip_missing_per_rank = 1; /* resuming on more ranks: their RNG/loader start fresh */
    mopts.cache_dir = o.cache_dir;   /* the cache level, when asked (docs/levels.md) */
    mopts.redundancy = o.partner ? CKPT_REDUNDANCY_PARTNER : CKPT_REDUNDANCY_NONE;
    mopts.persist_every = (int)o.persist_every;
    mopts.cache_max_to_keep = (int)o.cache_keep;
    if (status == 0) {
        rc = ckpt_training_create(&train, saver, o.dir, &mopts); /* collective */
        if (rc != CKPT_OK)
            status = lib_error(d.rank, rc, 1);
    }

    /* Restore (or start fresh), then check every restored value. */
    int64_t epoch0 = 0, step0 = 1; /* where training continues: epoch and global step */
    int fresh = 0;                 /* nothing was restored (the same on every rank) */
    if (status == 0) {
        poison(&d);
        int restored = 0;
        rc = ckpt_training_restore(train, &restored); /* collective; falls back past damage */
        if (rc != CKPT_OK) {
            status = lib_error(d.rank, rc, 1);
        } else if (!restored) {
            fresh = 1;
            if (d.rank == 0)
                printf("fresh start\n");
            set_step(&d, 0);
        } else {
            /* What was restored (identical on every rank: the chief's view). */
            ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
            (void)ckpt_training_restore_result(&r, train); /* cannot fail: a known version */
            const ckpt_manager_restore_result *res = &r;
            {
                const char *dir_prefix = res->prefix;
                int64_t saved_step = res->step, saved_epoch = res->epoch;
                epoch0 = ckpt_training_initial_epoch(train, 0);
                step0 = ckpt_training_initial_step(train, 1);
                if (d.rank == 0)
                    printf("resumed epoch=%lld step=%lld from=%s\n", (long long)saved_epoch,
                           (long long)saved_step, dir_prefix);
                int ws = res->world_size;
                const char *tamper = getenv("MPICKPT_DEMO_TAMPER");
                if (tamper && *tamper && atoi(tamper) == d.rank && d.r1 > d.r0)
                    d.kernel[0] += 1.0f;
                int bad = verify(&d, saved_step, ws < 0 ? d.size : ws);
                int total = 0;
                MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                if (total) {
                    if (d.rank == 0)
                        fprintf(stderr, "mpickpt-demo: verification failed: %d wrong values\n",
                                total);
                    status = 1;
                } else if (d.rank == 0) {
                    int had = ws < 0 || ws > d.size ? d.size : ws;
                    printf("verified every restored value at step %lld: kernel and slot %lldx%d, "
                           "bias, rng/state and data_loader of rank%s 0-%d",
                           (long long)saved_step, (long long)d.rows, COLS, had > 1 ? "s" : "",
                           had - 1);
                    if (had < d.size)
                        printf(" (ranks %d-%d were not in the checkpoint: their rng/state and "
                               "data_loader start fresh)", had, d.size - 1);
                    printf("\n");
                }
            }
        }
        fflush(stdout);
    }

    /* Train. */
    int64_t last_epoch = epoch0 > 0 ? epoch0 - 1 : 0, t = step0 - 1;
    ckpt_preempt_reason preempted = CKPT_PREEMPT_NONE;
    for (int64_t e = epoch0; status == 0 && e < o.epochs; e++) {
        last_epoch = e;
        for (t = step0 > e * o.steps + 1 ? step0 : e * o.steps + 1;
             status == 0 && t <= (e + 1) * o.steps; t++) {
            set_step(&d, t);
            sleep_ms(o.step_sleep_ms);
            /* The gradient allreduce of a data-parallel step (a scalar stands in for it). */
            double loss = 1.0 / (double)t, sum = 0;
            MPI_Allreduce(&loss, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (t == o.crash_step && d.rank == o.crash_rank && (fresh || !o.crash_fresh)) {
                printf("crash rank=%lld step=%lld\n", (long long)o.crash_rank, (long long)t);
                fflush(stdout);
                fflush(stderr);
                abort();
            }
            int end = t == (e + 1) * o.steps;
            int backed_up = 0;
            if (end || (o.every > 0 && t % o.every == 0)) {
                status = back_up(&d, train, e, t, end);
                if (status != 0)
                    break;
                backed_up = 1;
            }
            /* The step boundary: did any rank get a signal, or is the deadline near? */
            rc = ckpt_preempt_check(MPI_COMM_WORLD, &preempted);
            /* --hold: a fresh run waits at its first checkpoint, once committed (its line is
             * out), until a signal or the deadline preempts it; every rank keeps joining the
             * collective check. */
            if (rc == CKPT_OK && preempted == CKPT_PREEMPT_NONE && o.hold && fresh && backed_up) {
                status = flush_pending(&d);
                if (status != 0)
                    break;
                while (rc == CKPT_OK && preempted == CKPT_PREEMPT_NONE) {
                    sleep_ms(20);
                    rc = ckpt_preempt_check(MPI_COMM_WORLD, &preempted);
                }
            }
            if (rc != CKPT_OK) {
                status = lib_error(d.rank, rc, 0);
                break;
            }
            if (preempted != CKPT_PREEMPT_NONE) {
                /* The final backup, unless this step was just backed up. */
                if (!backed_up)
                    status = back_up(&d, train, e, t, end);
                if (status == 0)
                    status = flush_pending(&d); /* the final checkpoint must be committed */
                if (status == 0 && d.rank == 0) {
                    printf("preempted epoch=%lld step=%lld reason=%s\n", (long long)e,
                           (long long)t,
                           preempted == CKPT_PREEMPT_SIGNAL ? "signal"
                           : preempted == CKPT_PREEMPT_HALT ? "halt"
                                                             : "deadline");
                    fflush(stdout);
                }
                break;
            }
        }
        if (preempted != CKPT_PREEMPT_NONE)
            break;
        if (status == 0)
            t = (e + 1) * o.steps;
    }
    if (status == 0 && preempted == CKPT_PREEMPT_NONE)
        status = flush_pending(&d);
    if (status == 0 && preempted == CKPT_PREEMPT_NONE && d.rank == 0) {
        printf("done epoch=%lld step=%lld\n", (long long)last_epoch, (long long)t);
        fflush(stdout);
    }

    ckpt_training_free(train);
    ckpt_saver_free(saver); /* collective */
    free(d.kernel);
    free(d.slot);
    int worst = 0;
    MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    /* Preempted and checkpointed (the same on every rank): the batch script requeues on 75. */
    if (worst == 0 && preempted != CKPT_PREEMPT_NONE)
        return CKPT_EXIT_PREEMPTED;
    return worst;
}
