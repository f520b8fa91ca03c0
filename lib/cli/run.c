/*
 * mpickpt-run: runs any training command under mpirun or srun (or as is), forwards preemption
 * signals to it, requeues a preempted job under Slurm, relaunches a crashed one inside the
 * allocation up to --max-runs runs while each relaunch makes progress, and honours halt requests
 * (`mpickpt halt DIR`). docs/operations.md, "mpickpt-run", is the user's page; the usage text below
 * is the reference (the man page is made from it).
 *
 * No MPI: links only libmpickpt_core, to read the state file of --dir (the newest committed
 * checkpoint's save counter: progress) and the halt request, both through lib/fsutil.h (no link
 * followed, regular files only, never blocking). Single-threaded: the forwarded signals and
 * SIGCHLD stay blocked and are taken with sigwaitinfo(), so nothing runs inside a handler.
 *
 * Under srun inside an allocation, a relaunch after a crash leaves out the allocation's nodes that
 * Slurm reports down (sinfo), like SCR's scr_srun: srun --exclude=NODES -N <nodes still up>.
 *
 * Exit status: the job's (128 + N when it was killed by signal N), 0 after a halt or a requeue,
 * 75 when preempted and not requeued, 127 when the command cannot be started, 2 on a usage error.
 *
 * Two files (run.h between them): this one the options, the checkpoint directory's progress and
 * halt requests, the job's command line, the relaunch loop and main; run_job.c the job's process
 * and the signals forwarded to it, and Slurm (the requeue, the allocation's nodes that are down).
 */
#include "env.h"
#include "halt.h"
#include "index.h"
#include "paths.h"
#include "run.h"

#include "mpickpt/state.h"

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage_text[] =
    "usage: mpickpt-run [OPTIONS] [--] COMMAND [ARGS...]\n"
    "Runs a training job that checkpoints with mpickpt under mpirun or srun, forwards\n"
    "preemption signals to it, requeues it under Slurm when it was preempted (exit 75),\n"
    "relaunches it after a crash (up to --max-runs runs, each resuming from the newest\n"
    "checkpoint, while each relaunch makes progress), and stops it for good on a halt\n"
    "request ('mpickpt halt DIR').\n"
    "\n"
    "options:\n"
    "  --dir DIR             the job's checkpoint directory (a manager's, or a training\n"
    "                        state's with chief/): progress between runs is the newest\n"
    "                        committed checkpoint's save counter in its state file; halt\n"
    "                        requests are read there. Without it every crash counts as\n"
    "                        progress and halt requests are not seen by the launcher.\n"
    "  --launcher L          auto (default), mpirun, srun or none. auto: COMMAND as is when\n"
    "                        its name is mpirun, mpiexec, orterun or srun; else srun inside a\n"
    "                        Slurm allocation (SLURM_JOB_ID set), else mpirun. none: COMMAND\n"
    "                        as is.\n"
    "  -n N, --np N          ranks (mpirun -np N, srun -n N; default: the launcher's)\n"
    "  --launcher-arg ARG    one more argument for mpirun or srun (repeatable); srun gets\n"
    "                        --mpi=pmix unless an ARG starts with --mpi\n"
    "  -N N, --nodes N       srun: run on N nodes of the allocation (srun -N N; default:\n"
    "                        srun's, every node); the others are spares for relaunches\n"
    "  --min-nodes M         srun: relaunch after a node loss only while at least M of\n"
    "                        the allocation's nodes are up (default: --nodes, else 1)\n"
    "  --max-runs N          runs at most, the first included (default: MPICKPT_RUNS, else\n"
    "                        1: no relaunch). After a crash (a status other than 0 and 75,\n"
    "                        or a signal) the job is relaunched unless a relaunch made no\n"
    "                        progress (no newer checkpoint committed during it), a signal\n"
    "                        was forwarded during the run, or N runs were made. Each run\n"
    "                        sees MPICKPT_RUN_ATTEMPT=1, 2, ...\n"
    "  --requeue MODE        what exit 75 (preempted, checkpointed) does: auto (default):\n"
    "                        'scontrol requeue $SLURM_JOB_ID' in a Slurm batch job\n"
    "                        (SLURM_JOB_ID set, SLURM_STEP_ID not), then exit 0; always:\n"
    "                        whenever SLURM_JOB_ID is set; never: exit 75\n"
    "  --max-requeues N      no requeue once SLURM_RESTART_COUNT >= N (default 20): exit 75\n"
    "  --term-signal SIG     the signal a SIGTERM to mpickpt-run becomes for the job: USR1,\n"
    "                        TERM, INT, USR2 or HUP; default USR1 when the job runs under\n"
    "                        mpirun or srun (they kill their ranks on SIGTERM), else TERM\n"
    "  -h, --help            this text\n"
    "\n"
    "nodes lost: under srun inside an allocation, before a relaunch after a crash,\n"
    "mpickpt-run asks Slurm (sinfo) which of the allocation's nodes are down (down,\n"
    "drained, failing or not responding) and relaunches on the others: srun\n"
    "--exclude=NODES -N K, K = --nodes when that many are up, else the nodes up (the\n"
    "job then restores on fewer nodes). The allocation must survive the loss: submit\n"
    "with 'sbatch --no-kill' (else Slurm ends the job and requeues it).\n"
    "\n"
    "signals: SIGINT, SIGTERM, SIGUSR1, SIGUSR2 and SIGHUP are forwarded to the job's process\n"
    "group (SIGTERM as --term-signal); a job whose run saw one is not relaunched after a\n"
    "crash. With mpickpt's preemption check the ranks take a final checkpoint and exit 75.\n"
    "\n"
    "halt: before each run, a due halt request in DIR stops mpickpt-run (exit 0) without\n"
    "running anything; after a run, one makes it exit 0 (the run's status when the job\n"
    "failed) without requeue or relaunch. 'mpickpt halt DIR --clear' removes it.\n"
    "\n"
    "exit status: the job's (128+N when killed by signal N); 0 after a halt or a requeue;\n"
    "75 when preempted and not requeued; 127 when COMMAND cannot be started; 2 usage error.\n"
    "Messages start with 'mpickpt-run:' and go to standard error.\n";

void say(const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mpickpt-run: %s\n", buf);
    fflush(stderr);
}

static int usage_error(const char *fmt, ...) CKPT_PRINTF(1, 2);
static int usage_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mpickpt-run: %s\n(see mpickpt-run --help)\n", buf);
    return 2;
}

/* Library warnings (a damaged state file met while reading progress) in our own words. */
static void log_sink(ckpt_log_level level, const char *message, void *payload)
{
    (void)payload;
    say("%s: %s", level == CKPT_LOG_ERROR ? "error" : "warning", message);
}

/* The library's strict rule (lib/env.h), as for MPICKPT_RUNS: digits only, no blanks. */
int parse_long(long *out, const char *s, long lo, long hi)
{
    int64_t v;
    if (ckpt__parse_int64(&v, s, lo, hi) != 0)
        return -1;
    *out = (long)v;
    return 0;
}

static const struct {
    const char *name;
    int sig;
} g_signames[] = { { "USR1", SIGUSR1 }, { "TERM", SIGTERM }, { "INT", SIGINT },
                   { "USR2", SIGUSR2 }, { "HUP", SIGHUP } };

const char *sig_name(int sig)
{
    for (size_t i = 0; i < sizeof g_signames / sizeof g_signames[0]; i++)
        if (g_signames[i].sig == sig)
            return g_signames[i].name;
    return "another signal";
}

/* ---- the checkpoint directory: progress and halt ---------------------------------------- */

typedef struct newest {
    int found;
    int64_t counter, epoch, step;
    char prefix[256];
} newest;

/* The newest committed checkpoint of the job's directory: the state file's newest entry, or
 * any newer "<name>-<N>.index" committed after the state was written (a crash in between); the
 * indexes themselves when there is no usable state file. Nothing found is not an error. */
static void read_newest(newest *out, const char *dir)
{
    memset(out, 0, sizeof *out);
    out->counter = -1;
    char sd[4200];
    int exists = 0;
    if (ckpt__halt_dir(sd, sizeof sd, dir, &exists) != CKPT_OK) {
        say("warning: %s", ckpt_error_last()->message);
        return;
    }
    if (!exists)
        return;
    ckpt_state *st = NULL;
    int rc = ckpt_state_read(&st, sd);
    if (rc != CKPT_OK) {
        if (rc != CKPT_ENOTFOUND)
            say("warning: %s; scanning the indexes instead", ckpt_error_last()->message);
        ckpt_state_free(st);
        st = NULL;
        if (ckpt_state_scan(&st, sd) != CKPT_OK)
            say("warning: %s", ckpt_error_last()->message);
    } else if (st->latest[0]) {
        /* checkpoints committed after the state file was written: "<name>-<N>.index" */
        char name[256];
        snprintf(name, sizeof name, "%s", st->latest);
        char *dash = strrchr(name, '-');
        ckpt_state *more = NULL;
        if (dash) {
            *dash = '\0';
            if (ckpt__state_scan_newer(&more, sd, name, st->save_counter) == CKPT_OK && more)
                for (size_t i = 0; i < more->num_entries; i++)
                    ckpt_state_append(st, &more->entries[i]);
        }
        ckpt_state_free(more);
    }
    for (size_t i = 0; st && i < st->num_entries; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        if (!out->found || e->save_counter > out->counter) {
            out->found = 1;
            out->counter = e->save_counter;
            out->epoch = e->epoch;
            out->step = e->step;
            snprintf(out->prefix, sizeof out->prefix, "%s", e->prefix);
        }
    }
    ckpt_state_free(st);
    ckpt_error_clear(); /* kept: the launcher's own lookups (best effort); nothing is pending */
}

static void describe_newest(char *buf, size_t size, const newest *n)
{
    if (n->found)
        snprintf(buf, size, "%s (save %lld, epoch %lld, step %lld)", n->prefix,
                 (long long)n->counter, (long long)n->epoch, (long long)n->step);
    else
        snprintf(buf, size, "none yet (the job starts fresh)");
}

/* 1 when the job's directory holds a due halt request (*where: its directory); a request file
 * that cannot be used is a warning (the library ignores it too). */
static int halt_due(const char *dir, char *where, size_t size)
{
    /* The job watches both the state file's directory (DIR/chief for a training state) and
     * DIR (a request made before chief/ existed): a request due in either stops it, so either
     * stops the launcher too, or it would requeue a job that halts at once, again and again. */
    char sd[4200];
    int exists = 0;
    if (ckpt__halt_dir(sd, sizeof sd, dir, &exists) != CKPT_OK || !exists) {
        ckpt_error_clear(); /* kept: the launcher's own lookup; no request */
        return 0;
    }
    const char *cand[2] = { sd, dir };
    int n = strcmp(sd, dir) != 0 ? 2 : 1;
    for (int i = 0; i < n; i++) {
        ckpt__halt h;
        int rc = ckpt__halt_read(&h, cand[i]);
        if (rc == CKPT_OK && ckpt__halt_due(&h, (double)time(NULL))) {
            snprintf(where, size, "%s", cand[i]);
            return 1;
        }
        if (rc != CKPT_OK && rc != CKPT_ENOTFOUND)
            say("warning: ignoring the halt request: %s", ckpt_error_last()->message);
        ckpt_error_clear(); /* kept: the launcher's own read, said above */
    }
    return 0;
}

/* ---- the job's command line (run_job.c runs it) ----------------------------------------- */

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int is_mpirun_name(const char *b)
{
    return !strcmp(b, "mpirun") || !strcmp(b, "mpiexec") || !strcmp(b, "orterun");
}

/* The command line of the job: COMMAND as is, or behind mpirun / srun. NULL when out of memory. */
static char **job_argv(const options *o, enum launcher kind, char **cmd, int ncmd,
                       const char *exclude, long nodes)
{
    char **v = calloc((size_t)(ncmd + o->nlargs + 12), sizeof *v);
    static char np[32], nn[32], ex[4200];
    if (!v)
        return NULL;
    int k = 0;
    snprintf(np, sizeof np, "%ld", o->np);
    snprintf(nn, sizeof nn, "%ld", nodes);
    snprintf(ex, sizeof ex, "--exclude=%s", exclude ? exclude : "");
    if (kind == L_MPIRUN) {
        v[k++] = "mpirun";
        if (o->np > 0) {
            v[k++] = "-np";
            v[k++] = np;
        }
        v[k++] = "-x"; /* to ranks on other nodes too */
        v[k++] = "MPICKPT_RUN_ATTEMPT";
    } else if (kind == L_SRUN) {
        v[k++] = "srun";
        int mpi = 0;
        for (int i = 0; i < o->nlargs; i++)
            mpi |= !strncmp(o->largs[i], "--mpi", 5);
        if (!mpi)
            v[k++] = "--mpi=pmix";
        if (o->np > 0) {
            v[k++] = "-n";
            v[k++] = np;
        }
        if (nodes > 0) {
            v[k++] = "-N";
            v[k++] = nn;
        }
        if (exclude && *exclude)
            v[k++] = ex;
    }
    if (kind == L_MPIRUN || kind == L_SRUN)
        for (int i = 0; i < o->nlargs; i++)
            v[k++] = o->largs[i];
    for (int i = 0; i < ncmd; i++)
        v[k++] = cmd[i];
    v[k] = NULL;
    return v;
}

static void join_argv(char *buf, size_t size, char **v)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; v[i] && used + 1 < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%s", i ? " " : "", v[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static void describe_status(char *buf, size_t size, int status, int killed_by)
{
    if (killed_by)
        snprintf(buf, size, "was killed by signal %d (status %d)", killed_by, status);
    else
        snprintf(buf, size, "exited with status %d", status);
}

static int parse_options(options *o, int argc, char **argv)
{
    static const struct option longs[] = {
        { "dir", required_argument, NULL, 'd' },
        { "launcher", required_argument, NULL, 'l' },
        { "np", required_argument, NULL, 'n' },
        { "launcher-arg", required_argument, NULL, 'a' },
        { "nodes", required_argument, NULL, 'N' },
        { "min-nodes", required_argument, NULL, 'm' },
        { "max-runs", required_argument, NULL, 'r' },
        { "requeue", required_argument, NULL, 'q' },
        { "max-requeues", required_argument, NULL, 'Q' },
        { "term-signal", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int64_t runs = 1;
    if (ckpt__env_int64(&runs, "MPICKPT_RUNS", 1, 1000000, 1) != CKPT_OK)
        return usage_error("%s", ckpt_error_last()->message);
    o->max_runs = (long)runs;
    opterr = 0;
    int c;
    /* "+": options end at COMMAND, whose own options stay its own */
    while ((c = getopt_long(argc, argv, "+n:N:h", longs, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (!*optarg)
                return usage_error("--dir needs a directory");
            o->dir = optarg;
            break;
        case 'l':
            if (!strcmp(optarg, "auto"))
                o->launcher = L_AUTO;
            else if (!strcmp(optarg, "mpirun"))
                o->launcher = L_MPIRUN;
            else if (!strcmp(optarg, "srun"))
                o->launcher = L_SRUN;
            else if (!strcmp(optarg, "none"))
                o->launcher = L_NONE;
            else
                return usage_error("--launcher is auto, mpirun, srun or none, got '%s'", optarg);
            break;
        case 'n':
            if (parse_long(&o->np, optarg, 1, 100000000L) != 0)
                return usage_error("--np needs a positive number of ranks, got '%s'", optarg);
            break;
        case 'a':
            o->largs[o->nlargs++] = optarg;
            break;
        case 'N':
            if (parse_long(&o->nodes, optarg, 1, 1000000L) != 0)
                return usage_error("--nodes needs a positive number of nodes, got '%s'", optarg);
            break;
        case 'm':
            if (parse_long(&o->min_nodes, optarg, 1, 1000000L) != 0)
                return usage_error("--min-nodes needs a positive number of nodes, got '%s'",
                                   optarg);
            break;
        case 'r':
            if (parse_long(&o->max_runs, optarg, 1, 1000000L) != 0)
                return usage_error("--max-runs needs a number of runs in 1..1000000, got '%s'",
                                   optarg);
            break;
        case 'q':
            if (!strcmp(optarg, "auto"))
                o->requeue = RQ_AUTO;
            else if (!strcmp(optarg, "always"))
                o->requeue = RQ_ALWAYS;
            else if (!strcmp(optarg, "never"))
                o->requeue = RQ_NEVER;
            else
                return usage_error("--requeue is auto, always or never, got '%s'", optarg);
            break;
        case 'Q':
            if (parse_long(&o->max_requeues, optarg, 0, 1000000000L) != 0)
                return usage_error("--max-requeues needs a non-negative number, got '%s'",
                                   optarg);
            break;
        case 't': {
            const char *s = !strncmp(optarg, "SIG", 3) ? optarg + 3 : optarg;
            o->term_signal = -1;
            for (size_t i = 0; i < sizeof g_signames / sizeof g_signames[0]; i++)
                if (!strcmp(s, g_signames[i].name))
                    o->term_signal = g_signames[i].sig;
            if (o->term_signal < 0)
                return usage_error("--term-signal is USR1, TERM, INT, USR2 or HUP, got '%s'",
                                   optarg);
            break;
        }
        case 'h':
            fputs(usage_text, stdout);
            return 3;
        default:
            if (optopt == 'n' || optopt == 'N' ||
                (optopt > 0 && optopt < 128 && !strchr("dlarqQtm", optopt) &&
                                  optind > 0 && argv[optind - 1][1] != '-'))
                return usage_error("option -%c: unknown, or its value is missing", optopt);
            return usage_error("unknown option '%s', or its value is missing",
                               argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("missing COMMAND");
    return 0;
}

/* The job's command line in *jv and `line` (size 8192), srun's with `exclude` and `nodes`. */
static int make_job(char ***jv, char *line, const options *o, enum launcher kind, char **cmd,
                    int ncmd, const char *exclude, long nodes)
{
    free(*jv);
    *jv = job_argv(o, kind, cmd, ncmd, exclude, nodes);
    if (!*jv) {
        say("out of memory");
        return -1;
    }
    join_argv(line, 8192, *jv);
    return 0;
}

/* Before run `run`: a signal that arrived between runs, or a due halt request, stops
 * mpickpt-run; returns 1 then, with *status its exit status. */
static int stop_before(const options *o, long run, int *status)
{
    char where[4200];
    int pending = drain_signals();
    if (pending) {
        /* not a success: Slurm must not report the job COMPLETED */
        say("not starting run %ld: SIG%s arrived (exit %d)", run, sig_name(pending), 128 + pending);
        *status = 128 + pending;
        return 1;
    }
    if (o->dir && halt_due(o->dir, where, sizeof where)) {
        say("a halt request is due in %s: not starting the job (exit 0); remove it with "
            "'mpickpt halt %s --clear'",
            where, o->dir);
        *status = 0;
        return 1;
    }
    return 0;
}

/* Runs the job (COMMAND behind `kind`) until it finishes, is halted or preempted, makes no
 * progress or has used its --max-runs; returns mpickpt-run's exit status. */
static int run_loop(const options *o, enum launcher kind, char **cmd, int ncmd, int term_signal)
{
    int status = 0, signalled = 0;
    char where[4200], desc[512], what[128];
    char **jv = NULL, line[8192];
    static char exclude[4096];
    const char *jobid = getenv("SLURM_JOB_ID");
    int in_alloc = kind == L_SRUN && jobid && *jobid;
    long min_nodes = o->min_nodes ? o->min_nodes : o->nodes ? o->nodes : 1;
    if (make_job(&jv, line, o, kind, cmd, ncmd, NULL, o->nodes) != 0)
        return 1;
    for (long run = 1;; run++) {
        if (stop_before(o, run, &status))
            break;
        newest before, after;
        memset(&before, 0, sizeof before);
        memset(&after, 0, sizeof after);
        if (o->dir) {
            read_newest(&before, o->dir);
            describe_newest(desc, sizeof desc, &before);
            say("the newest checkpoint in %s: %s", o->dir, desc);
        }
        char attempt[32];
        snprintf(attempt, sizeof attempt, "%ld", run);
        setenv("MPICKPT_RUN_ATTEMPT", attempt, 1);
        say("run %ld of %ld (MPICKPT_RUN_ATTEMPT=%ld): %s", run, o->max_runs, run, line);
        int exec_failed = 0, killed_by = 0;
        signalled = 0;
        status = run_child(jv, term_signal, &signalled, &exec_failed, &killed_by);
        if (exec_failed)
            break;
        describe_status(what, sizeof what, status, killed_by);
        say("run %ld: %s %s", run, base_name(jv[0]), what);
        if (o->dir && halt_due(o->dir, where, sizeof where)) {
            if (status == 0 || status == EXIT_PREEMPTED) {
                say("halted by the request in %s: exit 0, no requeue, no relaunch (remove it "
                    "with 'mpickpt halt %s --clear' before running the job again)",
                    where, o->dir);
                status = 0;
            } else {
                say("a halt request is due in %s: not relaunching", where);
            }
            break;
        }
        if (status == 0) {
            say("the job finished");
            break;
        }
        if (status == EXIT_PREEMPTED) {
            status = preempted(o);
            break;
        }
        if (signalled) {
            say("not relaunching: the job was signalled during the run");
            break;
        }
        int progress = 1;
        if (o->dir) {
            read_newest(&after, o->dir);
            progress = after.found && after.counter > before.counter;
            describe_newest(desc, sizeof desc, &after);
        }
        if (run >= o->max_runs) {
            if (o->max_runs > 1)
                say("giving up after %ld runs (--max-runs %ld)", run, o->max_runs);
            break;
        }
        if (run > 1 && !progress) {
            say("run %ld made no progress (the newest checkpoint is still %s): not relaunching "
                "(%ld of %ld runs used)",
                run, desc, run, o->max_runs);
            break;
        }
        if (in_alloc) {
            /* nodes lost: the relaunch leaves out the allocation's nodes Slurm reports down */
            long n = 0;
            int changed = 0;
            if (nodes_lost(exclude, sizeof exclude, o->nodes, min_nodes, &n, &changed) != 0)
                break;
            if (changed && make_job(&jv, line, o, kind, cmd, ncmd, exclude, n) != 0) {
                status = 1;
                break;
            }
        }
        if (o->dir)
            say("relaunching after the crash (run %ld of %ld) from the newest checkpoint: %s",
                run + 1, o->max_runs, desc);
        else
            say("relaunching after the crash (run %ld of %ld)", run + 1, o->max_runs);
    }
    free(jv);
    return status;
}

int main(int argc, char **argv)
{
    options o = { NULL, L_AUTO, 0, NULL, 0, 1, RQ_AUTO, 20, 0, 0, 0 };
    o.largs = calloc((size_t)argc + 1, sizeof *o.largs);
    if (!o.largs) {
        say("out of memory");
        return 1;
    }
    int rc = parse_options(&o, argc, argv);
    if (rc != 0) {
        free(o.largs);
        return rc == 3 ? 0 : rc;
    }
    char **cmd = argv + optind;
    int ncmd = argc - optind;
    ckpt_log_set(log_sink, CKPT_LOG_WARN, NULL);

    /* What runs: the launcher, and what a SIGTERM becomes for it. */
    const char *b = base_name(cmd[0]);
    enum launcher kind = o.launcher; /* L_NONE: as is */
    int under = is_mpirun_name(b) ? L_MPIRUN : !strcmp(b, "srun") ? L_SRUN : L_NONE;
    if (kind == L_AUTO) {
        const char *jobid = getenv("SLURM_JOB_ID");
        kind = under != L_NONE ? L_NONE : jobid && *jobid ? L_SRUN : L_MPIRUN;
    }
    if (kind != L_NONE)
        under = kind;
    if (kind == L_NONE && (o.np > 0 || o.nlargs > 0)) {
        free(o.largs);
        return usage_error("--np and --launcher-arg need mpickpt-run to start the launcher: "
                           "give them to %s yourself, or leave it out",
                           b);
    }
    if (kind != L_SRUN && (o.nodes > 0 || o.min_nodes > 0)) {
        free(o.largs);
        return usage_error("--nodes and --min-nodes are srun's (mpickpt-run's launcher srun)");
    }
    int term_signal = o.term_signal ? o.term_signal : under != L_NONE ? SIGUSR1 : SIGTERM;

    watch_signals();

    if (!o.dir && o.max_runs > 1)
        say("warning: no --dir: progress cannot be checked, every relaunch counts as progress");
    int status = run_loop(&o, kind, cmd, ncmd, term_signal);
    free(o.largs);
    return status;
}
