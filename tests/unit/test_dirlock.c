/*
 * The lock of a directory (lib/dirlock.h), without MPI: other "jobs" are forked processes.
 *  - take/release: the record in the file names this process; a second take in the same process
 *    conflicts (flock locks belong to the open file description) and names "(this process)";
 *    after the release the record is cleared and the lock can be taken again; a forked child
 *    that releases the parent's handle touches neither the parent's lock nor its own files.
 *  - another process holding it: CKPT_EBUSY at once naming its host, pid, uid and start, the
 *    directory and the ways out; with a wait, the take succeeds once the holder releases (the
 *    holder releases when our log sink reports that we wait: no timing involved), and a holder
 *    that never releases is CKPT_EBUSY "after waiting".
 *  - a holder that dies (SIGKILL) releases it; a child it forked without exec (a data-loader
 *    worker) that outlives it does not keep it (the child's copy is closed at fork), however many
 *    locks the process holds (80 here: the registry of lib/forkfd.c grows). A holder that exited
 *    while a process that inherited its descriptor outside the fork handler (_Fork) lives on:
 *    CKPT_EBUSY says it is not running.
 *  - planted under the lock's name: a FIFO, a symbolic link to a file outside, a directory, a
 *    hard link to a file outside, a socket: CKPT_ECORRUPT naming what it is, nothing followed,
 *    written or blocked on (alarm() watchdog), and the plant left as it was.
 *  - a holder's record that is hostile (terminal escapes, 64 KiB without a newline, no pid):
 *    the message stays printable and bounded.
 *  - MPICKPT_LOCK_WAIT: a number of seconds, anything else CKPT_EINVAL naming the variable.
 * Usage: test_dirlock_unit OUTDIR
 */
#include "check.h"
#include "dirlock.h"
#include "mpickpt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_out[4096];
static int g_wake_fd = -1; /* the log sink writes a byte here when the library says it waits */

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_dirlock_unit: watchdog: a case did not finish (blocked?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(124);
}

static void log_sink(ckpt_log_level level, const char *msg, void *payload)
{
    (void)level;
    (void)payload;
    if (g_wake_fd >= 0 && strstr(msg, "waiting up to"))
        (void)!write(g_wake_fd, "w", 1);
}

static const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e && e->message ? e->message : "";
}

static int open_dir(const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_out, name);
    mkdir(p, 0755);
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_MSG(fd >= 0, "open %s: %s", p, strerror(errno));
    return fd;
}

static size_t read_lock(int dirfd, char *buf, size_t size)
{
    int fd = openat(dirfd, "lock", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n > 0 ? (size_t)n : 0;
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return 0;
    return 1;
}

/* A child process that takes the lock of dirfd, says so on `ready`, and releases it (and exits)
 * when a byte arrives on `go` ('k': exits without releasing it). With worker[2] (a pipe), it first
 * forks a worker that does not exec and lives until worker[1] is closed (the caller closes it).
 * Returns its pid. */
static pid_t holder(int dirfd, int *ready_rd, int *go_wr, const int *worker)
{
    int r[2], g[2];
    CHECK(pipe(r) == 0 && pipe(g) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(r[0]);
        close(g[1]);
        if (worker)
            close(worker[1]);
        ckpt__dirlock *l = NULL;
        if (ckpt__dirlock_take(&l, dirfd, "held", 0) != CKPT_OK)
            _exit(3);
        if (worker && fork() == 0) { /* a worker that outlives its parent */
            close(g[0]);
            (void)!write(r[1], "w", 1); /* running: its fork handlers ran */
            char c;
            (void)!read(worker[0], &c, 1);
            _exit(0);
        }
        (void)!write(r[1], "r", 1);
        char c;
        if (read(g[0], &c, 1) == 1 && c == 'k')
            _exit(0); /* dies holding it (no release) */
        ckpt__dirlock_release(l);
        _exit(0);
    }
    close(r[1]);
    close(g[0]);
    char c[2] = {0, 0};
    int n = worker ? 2 : 1;
    CHECK_MSG(read(r[0], c, 1) == 1 && (n == 1 || read(r[0], c + 1, 1) == 1) &&
                  (c[0] == 'r' || c[1] == 'r'),
              "the holder did not take the lock");
    *ready_rd = r[0];
    *go_wr = g[1];
    return pid;
}

static int reap(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_basic(void)
{
    int dfd = open_dir("basic");
    ckpt__dirlock *a = NULL, *b = NULL;
    CHECK_OK(ckpt__dirlock_take(&a, dfd, "DIR-basic", 0));
    CHECK(ckpt__dirlock_held(a));
    char rec[1024], want[64];
    read_lock(dfd, rec, sizeof rec);
    snprintf(want, sizeof want, " pid=%ld ", (long)getpid());
    CHECK_MSG(strncmp(rec, "host=", 5) == 0 && strstr(rec, want) && strstr(rec, " since="),
              "the record: %s", rec);
    struct stat st;
    CHECK(fstatat(dfd, "lock", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
          (st.st_mode & 0777) == 0600);
    /* the same process again: another open file description, so it conflicts */
    CHECK_RC(ckpt__dirlock_take(&b, dfd, "DIR-basic", 0), CKPT_EBUSY);
    CHECK(b == NULL);
    snprintf(want, sizeof want, "pid %ld (this process)", (long)getpid());
    CHECK_MSG(strstr(last_msg(), "DIR-basic") && strstr(last_msg(), want) &&
                  strstr(last_msg(), "since ") && strstr(last_msg(), "mpickpt halt") &&
                  strstr(last_msg(), "MPICKPT_LOCK_WAIT"),
              "the message: %s", last_msg());
    /* a child made by fork() that releases the parent's handle (a library's atexit, say): its
     * copy of the descriptor was closed at the fork and the number may be another file's now;
     * that file is left alone and the parent keeps its lock */
    pid_t child = fork();
    if (child == 0) {
        char p[4200], buf[16] = "";
        snprintf(p, sizeof p, "%s/child-file", g_out);
        int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int ok = fd >= 0 && write(fd, "keep", 4) == 4;
        ckpt__dirlock_release(a);
        ok = ok && pread(fd, buf, sizeof buf - 1, 0) == 4 && strcmp(buf, "keep") == 0;
        _exit(ok ? 0 : 1);
    }
    CHECK_EQ_INT(reap(child), 0);
    CHECK_RC(ckpt__dirlock_take(&b, dfd, "DIR-basic", 0), CKPT_EBUSY);
    ckpt__dirlock_release(a);
    CHECK_EQ_INT(read_lock(dfd, rec, sizeof rec), 0); /* the record cleared */
    CHECK_OK(ckpt__dirlock_take(&b, dfd, "DIR-basic", 0));
    ckpt__dirlock_release(b);
    ckpt__dirlock_release(NULL);
    close(dfd);
}

/* The holder exited but a process that inherited its descriptor outside our fork handler
 * (glibc's _Fork runs no handlers, like a raw clone) holds the lock: CKPT_EBUSY says the holder
 * is not running. */
static void test_exited_holder(void)
{
    int dfd = open_dir("exited");
    int p[2], q[2];
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    pid_t h = fork();
    if (h == 0) {
        close(p[1]); /* q[0] stays open: it waits on it for its child */
        ckpt__dirlock *l = NULL;
        if (ckpt__dirlock_take(&l, dfd, "exited", 0) != CKPT_OK)
            _exit(1);
        if (_Fork() == 0) { /* keeps the descriptor until the test closes the pipe */
            char c = 'r';
            if (write(q[1], &c, 1) != 1)
                _exit(1);
            _exit(read(p[0], &c, 1) >= 0 ? 0 : 1);
        }
        close(q[1]);
        char c;
        _exit(read(q[0], &c, 1) == 1 ? 0 : 1);
    }
    close(p[0]);
    close(q[0]);
    close(q[1]);
    CHECK_EQ_INT(reap(h), 0); /* it ended once its child ran */
    ckpt__dirlock *l = NULL;
    CHECK_RC(ckpt__dirlock_take(&l, dfd, "DIR-exited", 0), CKPT_EBUSY);
    char want[64];
    snprintf(want, sizeof want, "pid %ld (not running on this host:", (long)h);
    CHECK_MSG(strstr(last_msg(), want) && strstr(last_msg(), "inherited its descriptor"),
              "the message: %s", last_msg());
    close(p[1]); /* the child ends, and with it the lock: a wait gets it */
    CHECK_OK(ckpt__dirlock_take(&l, dfd, "DIR-exited", 600));
    ckpt__dirlock_release(l);
    close(dfd);
}

/* More locks than the lock's old registry had slots (64): a holder takes them all, forks a worker
 * that stays alive, and exits without releasing; the worker holds none of them (its copies were
 * closed at the fork), so every one can be taken. */
static void test_many_forked(void)
{
    enum { N = 80 };
    int dfd[N], p[2], q[2];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "many-%d", i);
        dfd[i] = open_dir(name);
    }
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    pid_t h = fork();
    if (h == 0) {
        close(p[1]); /* q[0] stays open: it waits on it for its child */
        for (int i = 0; i < N; i++) {
            ckpt__dirlock *l = NULL;
            if (ckpt__dirlock_take(&l, dfd[i], "many", 0) != CKPT_OK)
                _exit(1);
        }
        if (fork() == 0) { /* the worker: alive until the test closes the pipe */
            char c = 'r'; /* its fork returned: the fork handlers closed its copies */
            if (write(q[1], &c, 1) != 1)
                _exit(1);
            _exit(read(p[0], &c, 1) >= 0 ? 0 : 1);
        }
        close(q[1]);
        char c;
        if (read(q[0], &c, 1) != 1) /* the holder ends only once the worker runs */
            _exit(1);
        _exit(0); /* the locks not released: only the process's end drops them */
    }
    close(p[0]);
    close(q[0]);
    close(q[1]);
    CHECK_EQ_INT(reap(h), 0);
    int taken = 0;
    for (int i = 0; i < N; i++) {
        ckpt__dirlock *l = NULL;
        if (ckpt__dirlock_take(&l, dfd[i], "many", 0) == CKPT_OK)
            taken++;
        ckpt__dirlock_release(l);
        close(dfd[i]);
    }
    CHECK_EQ_INT(taken, N);
    close(p[1]); /* the worker ends */
}

static void test_other_process(void)
{
    int dfd = open_dir("other");
    int ready, go;
    pid_t pid = holder(dfd, &ready, &go, NULL);
    ckpt__dirlock *l = NULL;
    CHECK_RC(ckpt__dirlock_take(&l, dfd, "DIR-other", 0), CKPT_EBUSY);
    char want[64];
    snprintf(want, sizeof want, "pid %ld,", (long)pid);
    CHECK_MSG(strstr(last_msg(), want) && !strstr(last_msg(), "this process") &&
                  strstr(last_msg(), "host ") && strstr(last_msg(), "since "),
              "the message: %s", last_msg());
    /* a wait: the holder lets go once we say we wait (the sink wakes it) */
    g_wake_fd = go;
    ckpt_log_set(log_sink, CKPT_LOG_WARN, NULL);
    CHECK_OK(ckpt__dirlock_take(&l, dfd, "DIR-other", 600));
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    g_wake_fd = -1;
    CHECK_EQ_INT(reap(pid), 0);
    ckpt__dirlock_release(l);
    close(ready);
    close(go);

    /* a holder that never lets go: a short wait ends in CKPT_EBUSY saying it waited */
    pid = holder(dfd, &ready, &go, NULL);
    CHECK_RC(ckpt__dirlock_take(&l, dfd, "DIR-other", 0.3), CKPT_EBUSY);
    CHECK_MSG(strstr(last_msg(), "after waiting"), "the message: %s", last_msg());
    (void)!write(go, "g", 1);
    CHECK_EQ_INT(reap(pid), 0);
    close(ready);
    close(go);

    /* a holder killed: the kernel releases it */
    pid = holder(dfd, &ready, &go, NULL);
    kill(pid, SIGKILL);
    reap(pid);
    CHECK_OK(ckpt__dirlock_take(&l, dfd, "DIR-other", 0));
    ckpt__dirlock_release(l);
    close(ready);
    close(go);

    /* a holder that dies leaving a forked worker behind: the worker holds no lock */
    int worker[2];
    CHECK(pipe(worker) == 0);
    pid = holder(dfd, &ready, &go, worker);
    close(worker[0]);
    (void)!write(go, "k", 1); /* the holder dies without releasing; its worker lives on */
    CHECK_EQ_INT(reap(pid), 0);
    CHECK_OK(ckpt__dirlock_take(&l, dfd, "DIR-other", 0));
    ckpt__dirlock_release(l);
    close(worker[1]); /* the worker ends */
    close(go);
    close(ready);
    close(dfd);
}

static void test_planted(void)
{
    char victim[4200], path[4200], buf[64];
    snprintf(victim, sizeof victim, "%s/victim", g_out);
    FILE *f = fopen(victim, "w");
    CHECK(f && fputs("victim\n", f) >= 0 && fclose(f) == 0);
    static const char *const kinds[] = {"fifo", "symlink", "dir", "hardlink", "socket", "dangling"};
    static const char *const shown[] = {"a FIFO",       "a symbolic link", "a directory",
                                        "2 hard links", "a socket",        "a symbolic link"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int dfd = open_dir(kinds[i]);
        snprintf(path, sizeof path, "%s/%s/lock", g_out, kinds[i]);
        int ok = 0;
        if (!strcmp(kinds[i], "fifo"))
            ok = mkfifo(path, 0600) == 0;
        else if (!strcmp(kinds[i], "symlink"))
            ok = symlink(victim, path) == 0;
        else if (!strcmp(kinds[i], "dangling"))
            ok = symlink("/nonexistent/mpickpt-lock", path) == 0;
        else if (!strcmp(kinds[i], "dir"))
            ok = mkdir(path, 0700) == 0;
        else if (!strcmp(kinds[i], "hardlink"))
            ok = link(victim, path) == 0;
        else {
            int s = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
            ok = s >= 0 && strlen(path) < sizeof a.sun_path &&
                 bind(s, (struct sockaddr *)&a, sizeof a) == 0;
            if (s >= 0)
                close(s);
            if (!ok) {
                printf("  (socket case skipped: path too long for a socket)\n");
                close(dfd);
                continue;
            }
        }
        CHECK_MSG(ok, "cannot plant %s: %s", kinds[i], strerror(errno));
        ckpt__dirlock *l = NULL;
        CHECK_RC(ckpt__dirlock_take(&l, dfd, kinds[i], 0), CKPT_ECORRUPT);
        CHECK(l == NULL);
        CHECK_MSG(strstr(last_msg(), shown[i]) && strstr(last_msg(), "/lock"),
                  "%s: the message: %s", kinds[i], last_msg());
        printf("  %s: %s\n", kinds[i], last_msg());
        /* with a wait too: refused at once, not retried */
        CHECK_RC(ckpt__dirlock_take(&l, dfd, kinds[i], 600), CKPT_ECORRUPT);
        close(dfd);
    }
    f = fopen(victim, "r");
    CHECK(f && fgets(buf, sizeof buf, f) && strcmp(buf, "victim\n") == 0 && !fgets(buf, 2, f));
    if (f)
        fclose(f);
    struct stat st;
    CHECK(stat(victim, &st) == 0 && st.st_nlink == 2); /* the hard link left as it was */
}

static void test_hostile_record(void)
{
    int dfd = open_dir("record");
    int ready, go;
    pid_t pid = holder(dfd, &ready, &go, NULL);
    /* the holder's file now holds what anyone who can write it put there */
    static const char *const records[] = {
        "host=\x1b[31mred\x1b[0m pid=12 since=99 user=a\tb job=\x07\n",
        "pid=12 since=99\n",                               /* no host */
        "host=h pid=-5 since=x\n",                         /* a pid that is no pid */
        "host=h pid=77 since=99999999999999999999\n", NULL /* 64 KiB without a newline */
    };
    for (size_t i = 0; i < sizeof records / sizeof records[0]; i++) {
        int fd = openat(dfd, "lock", O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
        CHECK(fd >= 0);
        if (records[i]) {
            CHECK(write(fd, records[i], strlen(records[i])) == (ssize_t)strlen(records[i]));
        } else {
            static char big[65536];
            memset(big, 'h', sizeof big);
            memcpy(big, "host=", 5);
            CHECK(write(fd, big, sizeof big) == (ssize_t)sizeof big);
        }
        close(fd);
        ckpt__dirlock *l = NULL;
        CHECK_RC(ckpt__dirlock_take(&l, dfd, "DIR-record", 0), CKPT_EBUSY);
        const char *m = last_msg();
        CHECK_MSG(printable(m) && strlen(m) < 1200, "record %zu: the message (%zu bytes): %s", i,
                  strlen(m), m);
        if (i == 0)
            CHECK_MSG(strstr(m, "host ?[31mred?[0m, pid 12") && strstr(m, "user a?b"),
                      "record 0: %s", m);
        if (i == 1 || i == 2 || i == 4)
            CHECK_MSG(strstr(m, "unreadable"), "record %zu: %s", i, m);
        printf("  record %zu: %.200s\n", i, m);
    }
    (void)!write(go, "g", 1);
    CHECK_EQ_INT(reap(pid), 0);
    close(ready);
    close(go);
    close(dfd);
}

static void test_env(void)
{
    double w = -1;
    unsetenv("MPICKPT_LOCK_WAIT");
    CHECK_OK(ckpt__dirlock_env_wait(&w));
    CHECK(w == 0);
    setenv("MPICKPT_LOCK_WAIT", "120", 1);
    CHECK_OK(ckpt__dirlock_env_wait(&w));
    CHECK(w == 120);
    static const char *const bad[] = {"abc", "-1", "1.5", "99999999999", "12s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("MPICKPT_LOCK_WAIT", bad[i], 1);
        CHECK_RC(ckpt__dirlock_env_wait(&w), CKPT_EINVAL);
        CHECK_MSG(strstr(last_msg(), "MPICKPT_LOCK_WAIT"), "%s: %s", bad[i], last_msg());
    }
    unsetenv("MPICKPT_LOCK_WAIT");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_dirlock_unit OUTDIR\n");
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    mkdir(g_out, 0755);
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm(60);
    test_basic();
    test_other_process();
    test_many_forked();
    test_exited_holder();
    test_planted();
    test_hostile_record();
    test_env();
    alarm(0);
    return CHECK_DONE();
}
