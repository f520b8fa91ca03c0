/*
 * mpickpt-run's job and Slurm (run.c has the options, the relaunch loop and main; run.h between
 * them): the job runs in its own process group, the forwarded signals and SIGCHLD stay blocked and
 * are taken with sigwaitinfo() (nothing runs inside a handler), each forwarded to the group
 * (SIGTERM as --term-signal), and the job goes when mpickpt-run is killed (PR_SET_PDEATHSIG).
 * Slurm: a preempted job (exit 75) is requeued with `scontrol requeue` (--requeue,
 * --max-requeues); before a relaunch inside an allocation, the nodes sinfo reports down are left
 * out (srun --exclude, -N the nodes still up), like SCR's scr_srun. Programs run without a shell,
 * with the signal mask cleared; a Slurm command that cannot run is a warning, never a hang.
 */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static sigset_t g_watched; /* forwarded signals + SIGCHLD: blocked, taken by sigwaitinfo */
static sigset_t g_ignored; /* forwarded signals ignored when mpickpt-run started (nohup) */
static const int g_forwarded[] = { SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP };

/* A signal mpickpt-run was started with ignored (nohup: SIGHUP) stays ignored, for the job
 * too: it is neither taken nor forwarded. SIGCHLD must not be ignored: the kernel would then
 * reap the job itself and no SIGCHLD would ever end the wait. The watched signals are blocked. */
void watch_signals(void)
{
    sigemptyset(&g_watched);
    sigemptyset(&g_ignored);
    for (size_t i = 0; i < sizeof g_forwarded / sizeof g_forwarded[0]; i++) {
        struct sigaction old;
        if (sigaction(g_forwarded[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            sigaddset(&g_ignored, g_forwarded[i]);
        else
            sigaddset(&g_watched, g_forwarded[i]);
    }
    signal(SIGCHLD, SIG_DFL);
    sigaddset(&g_watched, SIGCHLD);
    sigprocmask(SIG_BLOCK, &g_watched, NULL);
}

/* Runs argv in its own process group and waits for it, forwarding signals; returns its status
 * as a shell would (128 + N for signal N), 127 with *exec_failed when it could not be started.
 * *signalled is set when a signal was forwarded, *killed_by to N when signal N killed it. */
int run_child(char **argv, int term_signal, int *signalled, int *exec_failed, int *killed_by)
{
    *exec_failed = 0;
    *killed_by = 0;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        say("pipe: %s", strerror(errno));
        *exec_failed = 1;
        return 127;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        *exec_failed = 1;
        return 127;
    }
    if (pid == 0) {
        close(pfd[0]);
        setpgid(0, 0);
        /* the job goes when mpickpt-run is killed (mpirun and srun stop their ranks on TERM) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(128 + SIGTERM);
        for (size_t i = 0; i < sizeof g_forwarded / sizeof g_forwarded[0]; i++)
            signal(g_forwarded[i], sigismember(&g_ignored, g_forwarded[i]) ? SIG_IGN : SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(argv[0], argv);
        int err = errno;
        ssize_t w = write(pfd[1], &err, sizeof err);
        (void)w;
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no signal may reach the old group in between */
    close(pfd[1]);
    int err = 0;
    ssize_t got;
    do
        got = read(pfd[0], &err, sizeof err);
    while (got < 0 && errno == EINTR);
    close(pfd[0]);
    int wstatus = 0;
    if (got == (ssize_t)sizeof err) {
        waitpid(pid, &wstatus, 0);
        say("cannot run '%s': %s", argv[0], strerror(err));
        *exec_failed = 1;
        return 127;
    }
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&g_watched, &si);
        if (sig < 0) {
            if (errno == EINTR)
                continue;
            say("sigwaitinfo: %s", strerror(errno));
            waitpid(pid, &wstatus, 0);
            break;
        }
        if (sig == SIGCHLD) {
            pid_t r = waitpid(pid, &wstatus, WNOHANG);
            if (r == pid)
                break;
            continue;
        }
        int to = sig == SIGTERM ? term_signal : sig;
        *signalled = 1;
        if (to == sig)
            say("got SIG%s: forwarding it to the job (process group %d)", sig_name(sig), (int)pid);
        else
            say("got SIG%s: forwarding SIG%s to the job (process group %d)", sig_name(sig),
                sig_name(to), (int)pid);
        if (kill(-pid, to) != 0)
            kill(pid, to);
    }
    if (WIFSIGNALED(wstatus)) {
        *killed_by = WTERMSIG(wstatus);
        return 128 + WTERMSIG(wstatus);
    }
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
}

/* Signals that arrived while no job ran: forwarded to nobody, but they stop the relaunches.
 * Returns the last one, or 0. */
int drain_signals(void)
{
    int any = 0;
    struct timespec zero = { 0, 0 };
    siginfo_t si;
    int sig;
    while ((sig = sigtimedwait(&g_watched, &si, &zero)) > 0) {
        if (sig == SIGCHLD)
            continue;
        say("got SIG%s between runs", sig_name(sig));
        any = sig;
    }
    return any;
}

/* ---- Slurm: requeue, and the allocation's nodes that are down --------------------------- */

/* scontrol requeue JOBID; 1 when it succeeded. */
static int slurm_requeue(const char *jobid)
{
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execlp("scontrol", "scontrol", "requeue", jobid, (char *)NULL);
        fprintf(stderr, "mpickpt-run: cannot run scontrol: %s\n", strerror(errno));
        _exit(127);
    }
    int wstatus = 0;
    pid_t r;
    while ((r = waitpid(pid, &wstatus, 0)) < 0 && errno == EINTR)
        ;
    return r == pid && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

/* Exit 75: requeue under Slurm, or pass the 75 on. */
int preempted(const options *o)
{
    const char *jobid = getenv("SLURM_JOB_ID");
    int slurm = jobid && *jobid;
    int batch = slurm && !getenv("SLURM_STEP_ID");
    int want = o->requeue == RQ_ALWAYS ? slurm : o->requeue == RQ_AUTO ? batch : 0;
    if (!want) {
        say("the job was preempted (exit 75) and checkpointed: run it again to resume%s",
            o->requeue == RQ_NEVER ? " (--requeue never)" : slurm ? "" : " (not under Slurm)");
        return EXIT_PREEMPTED;
    }
    long restarts = 0;
    const char *rs = getenv("SLURM_RESTART_COUNT");
    if (rs && *rs && parse_long(&restarts, rs, 0, 1000000000L) != 0)
        restarts = 0;
    if (restarts >= o->max_requeues) {
        say("preempted (exit 75) after %ld restarts: not requeueing again (--max-requeues %ld)",
            restarts, o->max_requeues);
        return EXIT_PREEMPTED;
    }
    say("preempted (exit 75): scontrol requeue %s", jobid);
    if (!slurm_requeue(jobid)) {
        say("scontrol requeue %s failed: exit 75", jobid);
        return EXIT_PREEMPTED;
    }
    return 0;
}

/* Runs argv (no shell), its standard output into buf (NUL-terminated, cut at size - 1);
 * 0 when it exited 0. */
static int capture(char *const argv[], char *buf, size_t size)
{
    buf[0] = '\0';
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(pfd[1], 1);
        execvp(argv[0], argv);
        fprintf(stderr, "mpickpt-run: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    size_t used = 0;
    for (;;) {
        char tmp[4096];
        ssize_t got = read(pfd[0], tmp, sizeof tmp);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        size_t n = (size_t)got;
        if (n > size - 1 - used)
            n = size - 1 - used;
        memcpy(buf + used, tmp, n);
        used += n;
    }
    buf[used] = '\0';
    close(pfd[0]);
    int wstatus = 0;
    pid_t r;
    while ((r = waitpid(pid, &wstatus, 0)) < 0 && errno == EINTR)
        ;
    return r == pid && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 ? 0 : -1;
}

/* 1 when a node in Slurm state `st` (sinfo %T: "allocated", "down*", "drained", ...) cannot run
 * a step: down, drained or draining, failing, not responding ('*'), powered down, unknown. */
static int state_down(const char *st)
{
    static const char *const bad[] = { "down", "drain", "fail", "unk", "power", "future",
                                       "maint", "inval", "no_resp", "not_resp" };
    size_t len = strlen(st);
    if (len && st[len - 1] == '*')
        return 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!strncmp(st, bad[i], strlen(bad[i])))
            return 1;
    return 0;
}

/* 1 when `name` is an element of the comma-separated `list`. */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return 1;
        p = c ? c + 1 : p + len;
    }
    return 0;
}

/* Adds to `exclude` (comma-separated, size bytes) the nodes of the allocation (SLURM_JOB_NODELIST)
 * that sinfo reports down; *up: the allocation's nodes not excluded; `newly`, `states`: what was
 * added now, with their states, for the log. -1 when Slurm could not be asked (nothing changed). */
static int slurm_down_nodes(char *exclude, size_t size, int *up, char *newly, size_t nsize,
                            char *states, size_t ssize)
{
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (!list || !*list)
        list = getenv("SLURM_NODELIST");
    newly[0] = states[0] = '\0';
    *up = 0;
    if (!list || !*list)
        return -1;
    char *argv[] = { "sinfo", "-h", "-N", "-n", (char *)list, "-o", "%N %T", NULL };
    char out[65536];
    if (capture(argv, out, sizeof out) != 0 || !out[0])
        return -1;
    char seen[65536] = "";
    int total = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char node[256], st[128];
        if (sscanf(line, "%255s %127s", node, st) != 2)
            continue;
        if (in_list(seen, node)) /* one line per partition */
            continue;
        size_t sl = strlen(seen);
        snprintf(seen + sl, sizeof seen - sl, "%s%s", sl ? "," : "", node);
        total++;
        if (in_list(exclude, node))
            continue;
        if (!state_down(st)) {
            (*up)++;
            continue;
        }
        size_t el = strlen(exclude), nl = strlen(newly), tl = strlen(states);
        if (el + strlen(node) + 2 > size)
            return -1;
        snprintf(exclude + el, size - el, "%s%s", el ? "," : "", node);
        snprintf(newly + nl, nsize - nl, "%s%s", nl ? "," : "", node);
        snprintf(states + tl, ssize - tl, "%s%s=%s", tl ? " " : "", node, st);
    }
    return total > 0 ? 0 : -1;
}

/* Before a relaunch inside an allocation: the nodes Slurm reports down are added to `exclude`;
 * 0 to relaunch (on *nodes with `exclude` when *changed), -1 when too few nodes are up. */
int nodes_lost(char *exclude, size_t size, long want_nodes, long min_nodes, long *nodes,
               int *changed)
{
    int up = 0;
    char newly[4096], states[8192];
    *changed = 0;
    if (slurm_down_nodes(exclude, size, &up, newly, sizeof newly, states, sizeof states) != 0) {
        say("warning: cannot list the allocation's nodes (sinfo); relaunching on the "
            "same nodes");
        return 0;
    }
    if (!newly[0])
        return 0;
    if (up < min_nodes) {
        say("node(s) %s of the allocation down (%s): %d node(s) still up, fewer "
            "than %ld (--min-nodes): not relaunching",
            newly, states, up, min_nodes);
        return -1;
    }
    long n = want_nodes && want_nodes <= up ? want_nodes : up;
    say("node(s) %s of the allocation down (%s): relaunching on %ld of the %d "
        "node(s) still up (srun -N %ld --exclude=%s)",
        newly, states, n, up, n, exclude);
    *nodes = n;
    *changed = 1;
    return 0;
}
