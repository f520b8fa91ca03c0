/* Shared by the two files of mpickpt-run (not the mpickpt tool's cli.h): run.c (the options, the
 * checkpoint directory's progress and halt requests, the job's command line, the relaunch loop,
 * main) and run_job.c (the job's process and the signals forwarded to it, Slurm: the requeue of a
 * preempted job and the allocation's nodes that are down). Everything here is mpickpt-run's own:
 * single-threaded, messages through say(). */
#ifndef MPICKPT_CLI_RUN_H
#define MPICKPT_CLI_RUN_H

#include "mpickpt/common.h" /* CKPT_PRINTF */

#include <stddef.h>

#define EXIT_PREEMPTED 75 /* CKPT_EXIT_PREEMPTED, mpickpt/preempt.h (that header needs mpi.h) */

enum launcher { L_AUTO, L_MPIRUN, L_SRUN, L_NONE };
enum requeue { RQ_AUTO, RQ_ALWAYS, RQ_NEVER };

typedef struct options {
    const char *dir;
    enum launcher launcher;
    long np; /* 0: the launcher's default */
    char **largs;
    int nlargs;
    long max_runs;
    enum requeue requeue;
    long max_requeues;
    int term_signal; /* 0: by the launcher */
    long nodes;      /* srun -N; 0: srun's default */
    long min_nodes;  /* 0: --nodes, else 1 */
} options;

/* ---- run.c ---- */

/* "mpickpt-run: MESSAGE" on standard error. */
void say(const char *fmt, ...) CKPT_PRINTF(1, 2);
/* The library's strict rule (lib/env.h), as for MPICKPT_RUNS: digits only, no blanks. */
int parse_long(long *out, const char *s, long lo, long hi);
/* "USR1", "TERM", ... for the forwarded signals, else "another signal". */
const char *sig_name(int sig);

/* ---- run_job.c ---- */

/* Blocks the forwarded signals and SIGCHLD (taken by sigwaitinfo from then on); one ignored at
 * start (nohup) stays ignored. Once, before the first run. */
void watch_signals(void);
/* Runs argv in its own process group and waits for it, forwarding signals; returns its status
 * as a shell would (128 + N for signal N), 127 with *exec_failed when it could not be started.
 * *signalled is set when a signal was forwarded, *killed_by to N when signal N killed it. */
int run_child(char **argv, int term_signal, int *signalled, int *exec_failed, int *killed_by);
/* Signals that arrived while no job ran: forwarded to nobody, but they stop the relaunches.
 * Returns the last one, or 0. */
int drain_signals(void);
/* Exit 75: requeue under Slurm (then 0), or pass the 75 on. */
int preempted(const options *o);
/* Before a relaunch inside an allocation: the nodes Slurm reports down are added to `exclude`
 * (comma-separated, size bytes). 0 to relaunch: with srun -N *nodes and the new `exclude` when
 * *changed, else as before; -1 when fewer than min_nodes nodes are still up (said). */
int nodes_lost(char *exclude, size_t size, long want_nodes, long min_nodes, long *nodes,
               int *changed);

#endif
