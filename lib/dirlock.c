/*
 * The lock of a directory (lib/dirlock.h): flock on <dir>/lock, reached by descriptor, with the
 * holder's record in the file. Why flock and not fcntl (POSIX) locks: a POSIX lock is dropped when
 * the process closes ANY descriptor of the file (HDF5, a reader, `mpickpt` code that opens the
 * lock file to read the holder), while a flock lock belongs to the one open file description we
 * keep. NFS clients emulate flock with whole-file POSIX locks on the server (so it works across
 * nodes where the lock manager runs); Lustre needs -o flock (docs/operations.md).
 */
#include "dirlock.h"

#include "env.h"
#include "forkfd.h"
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How much of a holder's record is read (it is one short line when we wrote it). */
#define RECORD_MAX 512
/* Longest value of a record field shown in messages. */
#define FIELD_MAX 64

struct ckpt__dirlock {
    int fd;
    int locked; /* 0: the file system has no flock; nothing is held */
    pid_t pid;  /* the taker: in a child made by fork() the descriptor is closed (below) and its
                 * number may be another file's, so a release there touches nothing */
};

/* ---- the holder's record ------------------------------------------------------------------- */

/* A value for a record or a message: printable ASCII but space and '=' (others become '?'), at
 * most FIELD_MAX bytes. */
static void clean_value(char *out, size_t size, const char *in, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < size && k < FIELD_MAX; i++) {
        unsigned char c = (unsigned char)in[i];
        out[k++] = (c > 0x20 && c < 0x7f && c != '=') ? (char)c : '?';
    }
    out[k] = '\0';
}

static int record_make(char *buf, size_t size)
{
    char host[256] = "?", h[FIELD_MAX + 1], job[FIELD_MAX + 1] = "", user[FIELD_MAX + 1] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    clean_value(h, sizeof h, host, strlen(host));
    const char *v = getenv("SLURM_JOB_ID");
    if (v && *v)
        clean_value(job, sizeof job, v, strlen(v));
    v = getenv("USER");
    if (!v || !*v)
        v = getenv("LOGNAME");
    if (v && *v)
        clean_value(user, sizeof user, v, strlen(v));
    int n = snprintf(buf, size, "host=%s pid=%ld since=%lld uid=%lu%s%s%s%s\n", h, (long)getpid(),
                     (long long)time(NULL), (unsigned long)geteuid(), job[0] ? " job=" : "", job,
                     user[0] ? " user=" : "", user);
    return n > 0 && (size_t)n < size ? n : 0;
}

/* Writes this process's record over the file's content. A failure is only a warning: the lock is
 * held, the record only informs a job refused. */
static void record_write(int fd, const char *shown)
{
    char rec[RECORD_MAX];
    int n = record_make(rec, sizeof rec);
    /* the new line first, then the old tail cut: a reader meanwhile sees our first line */
    if (n <= 0 || pwrite(fd, rec, (size_t)n, 0) != n || ftruncate(fd, n) != 0)
        ckpt__log(CKPT_LOG_WARN,
                  "could not record this job as the holder of %s/" CKPT__LOCK_FILE
                  " (%s); the lock is held all the same",
                  shown, n > 0 ? strerror(errno) : "record too long");
}

/* "2026-11-25 10:00:00 UTC" */
static void format_time(char *buf, size_t size, long long t)
{
    time_t secs = (time_t)t;
    struct tm tm;
    if (!(gmtime_r(&secs, &tm) && strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm) > 0))
        snprintf(buf, size, "%lld", t);
}

/* 1 when process pid of this host (and PID namespace) has ended: gone, or a zombie. */
static int process_exited(pid_t pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *r = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold anything */
    return r && (r[1] == ' ') && (r[2] == 'Z' || r[2] == 'X');
}

/* The holder as read from its record, for messages: "host H, pid P, Slurm job J, user U (else
 * uid N), since T" (the fields present), or a sentence saying the record is unreadable. Untrusted
 * input: one bounded read, the first line only, each value cleaned (clean_value), numbers checked.
 */
static void holder_describe(char *out, size_t size, int fd)
{
    char buf[RECORD_MAX + 1];
    ssize_t n = pread(fd, buf, RECORD_MAX, 0);
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    char *nl = memchr(buf, '\n', (size_t)n);
    if (nl)
        *nl = '\0';
    char host[FIELD_MAX + 1] = "", pid[FIELD_MAX + 1] = "", since[FIELD_MAX + 1] = "",
                          job[FIELD_MAX + 1] = "", user[FIELD_MAX + 1] = "",
                          uid[FIELD_MAX + 1] = "";
    struct {
        const char *key;
        char *val;
    } fields[] = {{"host", host}, {"pid", pid},   {"since", since},
                  {"job", job},   {"user", user}, {"uid", uid}};
    for (char *p = buf; *p;) {
        while (*p == ' ')
            p++;
        char *end = p;
        while (*end && *end != ' ')
            end++;
        char *eq = memchr(p, '=', (size_t)(end - p));
        for (size_t i = 0; eq && i < CKPT__ARRAY_LEN(fields); i++)
            if ((size_t)(eq - p) == strlen(fields[i].key) &&
                memcmp(p, fields[i].key, (size_t)(eq - p)) == 0 && !fields[i].val[0])
                clean_value(fields[i].val, FIELD_MAX + 1, eq + 1, (size_t)(end - eq - 1));
        p = end;
    }
    char *e = NULL;
    long long p = pid[0] ? strtoll(pid, &e, 10) : -1;
    if (!host[0] || !e || *e || p <= 0) {
        snprintf(out, size,
                 "a holder whose record is missing or unreadable (host and pid "
                 "unknown; it may have only just taken the lock)");
        return;
    }
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    me[sizeof me - 1] = '\0';
    int self = (long long)getpid() == p && strcmp(me, host) == 0;
    int exited = !self && strcmp(me, host) == 0 && p <= INT_MAX && process_exited((pid_t)p);
    size_t k = (size_t)snprintf(out, size, "host %s, pid %lld%s", host, p,
                                self      ? " (this process)"
                                : exited  ? " (not running on this host: it exited and a process "
                                            "that inherited its descriptor holds the lock, or it "
                                            "runs in another PID namespace)"
                                          : "");
    if (job[0] && k < size)
        k += (size_t)snprintf(out + k, size - k, ", Slurm job %s", job);
    if ((user[0] || uid[0]) && k < size)
        k += (size_t)snprintf(out + k, size - k, ", %s %s", user[0] ? "user" : "uid",
                              user[0] ? user : uid);
    long long t = since[0] ? strtoll(since, &e, 10) : -1;
    if (since[0] && !*e && t > 0 && k < size) {
        char when[64];
        format_time(when, sizeof when, t);
        snprintf(out + k, size - k, ", since %s", when);
    }
}

/* ---- taking it ------------------------------------------------------------------------------ */

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int not_a_file(const char *shown, const char *kind)
{
    return ckpt__error(CKPT_ECORRUPT,
                       "refusing to use %s/" CKPT__LOCK_FILE ": it is %s, not a regular file; the "
                       "lock of a checkpoint directory is a regular file mpickpt makes (remove it)",
                       shown, kind);
}

/* Opens <dirfd>/lock read-write, making it (0600, O_EXCL) when missing; anything but a regular
 * file with one link is refused. Retries a few times when the name changes under us. */
static int lock_open(int *out, int dirfd, const char *shown)
{
    *out = -1;
    for (int attempt = 0; attempt < 16; attempt++) {
        struct stat st;
        int fd;
        if (fstatat(dirfd, CKPT__LOCK_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (!S_ISREG(st.st_mode)) /* checked first: opening a device has side effects */
                return not_a_file(shown, ckpt__file_kind(st.st_mode));
            fd = openat(dirfd, CKPT__LOCK_FILE, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT)
                continue; /* removed meanwhile */
        } else if (errno == ENOENT) {
            fd = openat(dirfd, CKPT__LOCK_FILE,
                        O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
            if (fd < 0 && errno == EEXIST)
                continue; /* another job made it first */
        } else {
            return ckpt__errno(errno, "stat", shown);
        }
        if (fd < 0) {
            int err = errno;
            if (err == ELOOP)
                return not_a_file(shown, "a symbolic link");
            if (err == EISDIR)
                return not_a_file(shown, "a directory");
            if (err == EACCES && fstatat(dirfd, CKPT__LOCK_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                ckpt__error(CKPT_EIO,
                            "cannot open %s/" CKPT__LOCK_FILE " to lock the directory: %s (it "
                            "belongs to uid %lu, mode %04o; this process runs as uid %lu: a "
                            "checkpoint directory is written by one user's jobs)",
                            shown, strerror(err), (unsigned long)st.st_uid,
                            (unsigned)(st.st_mode & 07777), (unsigned long)geteuid());
                return ckpt__error_set_errno(CKPT_EIO, err);
            }
            int code = err == ENOSPC || err == EDQUOT ? CKPT_ENOSPC : CKPT_EIO;
            ckpt__error(code, "cannot open %s/" CKPT__LOCK_FILE " to lock the directory: %s",
                        shown, strerror(err));
            return ckpt__error_set_errno(code, err);
        }
        if (fstat(fd, &st) != 0) {
            int rc = ckpt__errno(errno, "stat", shown);
            close(fd);
            return rc;
        }
        if (!S_ISREG(st.st_mode) || st.st_nlink != 1) { /* swapped, or linked to another file */
            close(fd);
            if (S_ISREG(st.st_mode))
                return ckpt__error(CKPT_ECORRUPT,
                                   "refusing to use %s/" CKPT__LOCK_FILE ": it has %lu hard links, "
                                   "so it is also another file; mpickpt's lock file has one "
                                   "(remove it)",
                                   shown, (unsigned long)st.st_nlink);
            return not_a_file(shown, ckpt__file_kind(st.st_mode));
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        *out = fd;
        return CKPT_OK;
    }
    return ckpt__error(CKPT_EIO,
                       "%s/" CKPT__LOCK_FILE " keeps being replaced; cannot lock the "
                       "directory",
                       shown);
}

/* 1 when fd is still the file named lock in dirfd (not removed or replaced while we waited). */
static int still_named(int fd, int dirfd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(dirfd, CKPT__LOCK_FILE, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int busy_error(const char *shown, const char *holder, double waited)
{
    char w[64] = "";
    if (waited > 0)
        snprintf(w, sizeof w, " (still, after waiting %.3g s)", waited);
    return ckpt__error(CKPT_EBUSY,
                       "checkpoint directory %s is in use by another job%s: %s. One job at a time "
                       "writes to a directory: wait for that job to end, or stop it (mpickpt halt "
                       "%s, scancel), or let this one wait for the directory (MPICKPT_LOCK_WAIT="
                       "SECONDS, the lock_wait_seconds option, `mpickpt gc|pin|drop --wait "
                       "SECONDS`)",
                       shown, w, holder, shown);
}

/* The handle of a taken lock (locked 0: flock unsupported, nothing held) on fd, which it owns. A
 * child made by fork() closes its copy (lib/forkfd.h): a data-loader worker outliving a killed job
 * would keep the directory locked; the parent's lock stays held (a flock lock goes only when the
 * last descriptor of the description closes). Without memory for that registry the lock stays
 * unregistered. */
static int lock_new(ckpt__dirlock **out, int fd, int locked)
{
    ckpt__dirlock *l = malloc(sizeof *l);
    if (!l) {
        close(fd);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    l->fd = fd;
    l->locked = locked;
    l->pid = getpid();
    (void)ckpt__forkfd_add(&fd, 1);
    *out = l;
    return CKPT_OK;
}

int ckpt__dirlock_take(ckpt__dirlock **out, int dirfd, const char *shown, double wait_seconds)
{
    *out = NULL;
    if (!(wait_seconds > 0)) /* NaN too */
        wait_seconds = 0;
    if (wait_seconds > 1e9)
        wait_seconds = 1e9;
    const double start = monotonic_now();
    double pause = 0.05;
    int warned = 0;
    for (int renamed = 0;;) {
        int fd, rc = lock_open(&fd, dirfd, shown);
        if (rc != CKPT_OK)
            return rc;
        int err = 0;
        while (flock(fd, LOCK_EX | LOCK_NB) != 0 && (err = errno) == EINTR)
            err = 0;
        if (err == 0) {
            if (!still_named(fd, dirfd)) {
                close(fd); /* we locked a file that lost its name: take the one named now */
                if (++renamed < 16)
                    continue;
                return ckpt__error(CKPT_EIO,
                                   "%s/" CKPT__LOCK_FILE " keeps being replaced; cannot lock the "
                                   "directory",
                                   shown);
            }
            record_write(fd, shown);
            return lock_new(out, fd, 1);
        }
        if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP) {
            ckpt__log(CKPT_LOG_WARN,
                      "cannot lock %s/" CKPT__LOCK_FILE " (flock: %s): the file system does not "
                      "support flock here (NFS without a running lock manager, Lustre mounted "
                      "without -o flock); going on WITHOUT the lock: nothing stops a second job "
                      "from writing to %s at the same time (docs/operations.md)",
                      shown, strerror(err), shown);
            return lock_new(out, fd, 0);
        }
        if (err != EWOULDBLOCK) {
            close(fd);
            return ckpt__error(CKPT_EIO, "cannot lock %s/" CKPT__LOCK_FILE ": flock: %s", shown,
                               strerror(err));
        }
        char holder[512];
        holder_describe(holder, sizeof holder, fd);
        close(fd);
        double waited = monotonic_now() - start;
        if (waited >= wait_seconds)
            return busy_error(shown, holder, wait_seconds > 0 ? waited : 0);
        if (!warned) {
            ckpt__log(CKPT_LOG_WARN,
                      "checkpoint directory %s is in use by another job: %s; "
                      "waiting up to %g s for it",
                      shown, holder, wait_seconds);
            warned = 1;
        }
        double left = wait_seconds - waited, s = pause < left ? pause : left;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        pause = pause * 2 < 1.0 ? pause * 2 : 1.0;
    }
}

void ckpt__dirlock_release(ckpt__dirlock *l)
{
    if (!l)
        return;
    if (l->pid != getpid()) { /* a child of the taker: its copy was closed at the fork */
        free(l);
        return;
    }
    if (l->locked) {
        /* the record goes first: a job refused meanwhile reads no stale holder */
        if (ftruncate(l->fd, 0) != 0) {
            /* only informative: the next holder writes its own */
        }
        flock(l->fd, LOCK_UN);
    }
    ckpt__forkfd_close(l->fd);
    free(l);
}

int ckpt__dirlock_held(const ckpt__dirlock *l)
{
    return l && l->locked;
}

int ckpt__dirlock_env_wait(double *seconds)
{
    int64_t n = 0;
    int rc = ckpt__env_int64(&n, "MPICKPT_LOCK_WAIT", 0, 31536000, 0);
    *seconds = rc == CKPT_OK ? (double)n : 0;
    return rc;
}
