/*
 * Retention's deletion with its block freeing in the background (lib/reaper.h), without MPI:
 *  - ckpt__checkpoint_delete_held removes the checkpoint's index and every data file (the
 *    directory as after ckpt_checkpoint_delete) and holds exactly the regular data files of at
 *    least hold_min bytes open: unlinked (st_nlink 0), their size intact until closed;
 *  - planted under data file names: a symbolic link to a file outside (removed, never followed:
 *    the target is neither held nor touched), a FIFO (removed, never opened: alarm() watchdog);
 *    a directory under a data file name is left, with a warning;
 *  - ckpt__reaper_close + ckpt__reaper_wait closes every held descriptor; a second batch waits
 *    for the first; a process forked while a batch is in flight has no copy of its descriptors.
 * Usage: test_reaper OUTDIR
 */
#include "check.h"
#include "mpickpt.h"
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_out[4096];

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_reaper: blocked (watchdog)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

static void put(const char *dir, const char *name, size_t bytes)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK_MSG(f != NULL, "create %s", p);
    if (!f)
        return;
    static char buf[65536];
    memset(buf, 7, sizeof buf);
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < sizeof buf ? bytes - done : sizeof buf;
        CHECK(fwrite(buf, 1, n, f) == n);
        done += n;
    }
    fclose(f);
}

static int present(const char *dir, const char *name)
{
    char p[8192];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

static int is_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

/* A checkpoint "ck-1" in a fresh directory `sub` with two large data files, a small one, a link
 * and a FIFO under data file names; returns the directory. */
static const char *make_ckpt(const char *sub, char *dir, size_t size)
{
    snprintf(dir, 4096, "%s/%s", g_out, sub);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK(mkdir(dir, 0700) == 0);
    put(dir, "ck-1.index", 100);
    put(dir, "ck-1.data-00000-of-00005", 3u << 20);
    put(dir, "ck-1.data-00001-of-00005", 2u << 20);
    put(dir, "ck-1.data-00002-of-00005", 1000);
    put(dir, "ck-2.data-00000-of-00001", 3u << 20); /* another checkpoint's: stays */
    put(g_out, "outside", 5u << 20);
    char p[8192], t[8192];
    snprintf(p, sizeof p, "%s/ck-1.data-00003-of-00005", dir);
    snprintf(t, sizeof t, "%s/outside", g_out);
    CHECK(symlink(t, p) == 0);
    snprintf(p, sizeof p, "%s/ck-1.data-00004-of-00005", dir);
    CHECK(mkfifo(p, 0600) == 0);
    (void)size;
    return dir;
}

static void test_delete_held(void)
{
    char dir[4096], prefix[8192];
    make_ckpt("held", dir, 0);
    snprintf(prefix, sizeof prefix, "%s/ck-1", dir);
    int *held = NULL;
    size_t n = 0;
    CHECK_OK(ckpt__checkpoint_delete_held(prefix, (uint64_t)1 << 20, &held, &n));
    CHECK_EQ_INT((int)n, 2);
    const char *gone[] = { "ck-1.index", "ck-1.data-00000-of-00005", "ck-1.data-00001-of-00005",
                           "ck-1.data-00002-of-00005", "ck-1.data-00003-of-00005",
                           "ck-1.data-00004-of-00005" };
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        CHECK_MSG(!present(dir, gone[i]), "%s/%s is still there", dir, gone[i]);
    CHECK_MSG(present(dir, "ck-2.data-00000-of-00001"), "another checkpoint's file was deleted");
    CHECK_MSG(present(g_out, "outside"), "the link's target was deleted");
    long long total = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        CHECK(fstat(held[i], &st) == 0);
        CHECK(S_ISREG(st.st_mode));
        CHECK_EQ_INT((int)st.st_nlink, 0);
        total += st.st_size;
    }
    CHECK_MSG(total == (5ll << 20), "held %lld bytes, expected the two large files' 5 MiB", total);
    int fds[2] = { n > 0 ? held[0] : -1, n > 1 ? held[1] : -1 };
    ckpt__reaper r;
    memset(&r, 0, sizeof r);
    ckpt__reaper_close(&r, held, n);
    ckpt__reaper_wait(&r);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(fds[i] >= 0 && !is_open(fds[i]), "descriptor %d still open after the wait",
                  fds[i]);
    ckpt__reaper_wait(&r); /* twice: nothing in flight */

    /* without `held`: the plain deletion */
    make_ckpt("plain", dir, 0);
    snprintf(prefix, sizeof prefix, "%s/ck-1", dir);
    CHECK_OK(ckpt_checkpoint_delete(prefix));
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        CHECK_MSG(!present(dir, gone[i]), "%s/%s is still there", dir, gone[i]);
}

/* Batches in a row, each forked over: the child never has a copy of a batch's descriptors. */
static void test_batches_and_fork(void)
{
    ckpt__reaper r;
    memset(&r, 0, sizeof r);
    for (int round = 0; round < 4; round++) {
        char dir[4096], prefix[8192], sub[64];
        snprintf(sub, sizeof sub, "round%d", round);
        make_ckpt(sub, dir, 0);
        snprintf(prefix, sizeof prefix, "%s/ck-1", dir);
        int *held = NULL;
        size_t n = 0;
        CHECK_OK(ckpt__checkpoint_delete_held(prefix, 1, &held, &n));
        CHECK_EQ_INT((int)n, 3); /* hold_min 1: the small file too */
        int fds[3];
        for (size_t i = 0; i < 3 && i < n; i++)
            fds[i] = held[i];
        ckpt__reaper_close(&r, held, n); /* waits for the previous round's batch */
        pid_t pid = fork();
        if (pid == 0) {
            int open_copies = 0;
            for (int i = 0; i < 3; i++)
                open_copies += is_open(fds[i]);
            _exit(open_copies);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "round %d: the forked child had %d of the batch's descriptors open", round,
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    ckpt__reaper_wait(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_reaper OUTDIR\n");
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    mkdir(g_out, 0755);
    signal(SIGALRM, on_alarm);
    alarm(60);
    test_delete_held();
    test_batches_and_fork();
    alarm(0);
    return CHECK_DONE();
}
