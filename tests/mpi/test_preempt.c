/* Preemption (mpickpt/preempt.h): handlers only set a flag; the collective check gives every rank
 * the same reason; a signal on one rank or a deadline on one rank stops all of them; signal wins
 * over halt, halt over deadline; reset clears; the deadline comes from the argument or the
 * environment; a due halt request (lib/halt.h) in a watched directory, read by rank 0 only, stops
 * every rank, a future one or a bad file (garbage, a FIFO) does not. */
#include "halt.h"
#include "mpi_check.h"
#include "mpickpt.h"
#include "paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *reason_name(ckpt_preempt_reason r)
{
    return r == CKPT_PREEMPT_NONE       ? "none"
           : r == CKPT_PREEMPT_SIGNAL   ? "signal"
           : r == CKPT_PREEMPT_DEADLINE ? "deadline"
           : r == CKPT_PREEMPT_HALT     ? "halt"
                                        : "?";
}

/* Runs the check and verifies that this rank got @p want and that every rank got the same. */
#define CHECK_REASON(want)                                                                     \
    do {                                                                                       \
        ckpt_preempt_reason r_ = (ckpt_preempt_reason)-1;                                      \
        CHECK_OK(ckpt_preempt_check(MPI_COMM_WORLD, &r_));                                     \
        CHECK_MSG(r_ == (want), "check said %s, expected %s", reason_name(r_),                 \
                  reason_name(want));                                                          \
        int lo_ = 0, hi_ = 0, v_ = (int)r_;                                                    \
        MPI_Allreduce(&v_, &lo_, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);                         \
        MPI_Allreduce(&v_, &hi_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);                         \
        CHECK_MSG(lo_ == hi_, "ranks disagree: reasons %d..%d", lo_, hi_);                     \
    } while (0)

int main(int argc, char **argv)
{
    int rank, size;
    check_mpi_init(&argc, &argv, &rank, &size);
    /* Whatever launched us (a Slurm job, a user) must not set the deadline of this test. */
    unsetenv("MPICKPT_DEADLINE");
    unsetenv("SLURM_JOB_END_TIME");
    int last = size - 1;
    double now = (double)time(NULL);

    /* Defaults: SIGTERM and SIGUSR1, with SA_RESTART, handled by a function (not SIG_DFL). */
    CHECK_OK(ckpt_preempt_install(NULL, 0));
    int defaults[] = { SIGTERM, SIGUSR1 };
    for (int i = 0; i < 2; i++) {
        struct sigaction sa;
        CHECK(sigaction(defaults[i], NULL, &sa) == 0);
        CHECK_MSG((sa.sa_flags & SA_RESTART) && !(sa.sa_flags & SA_SIGINFO) &&
                      sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN,
                  "signal %d: flags %#x", defaults[i], (unsigned)sa.sa_flags);
    }
    CHECK_OK(ckpt_preempt_set_deadline(0, 0));
    CHECK_EQ_INT(ckpt_preempt_signalled(), 0);
    CHECK_EQ_INT(ckpt_preempt_last_signal(), 0);

    /* Nothing happened: NONE, twice. */
    CHECK_REASON(CKPT_PREEMPT_NONE);
    CHECK_REASON(CKPT_PREEMPT_NONE);

    /* The last rank raises SIGUSR1 on itself: only it is flagged, every rank's check says SIGNAL,
     * and it keeps saying so (a check does not clear the flag). */
    if (rank == last)
        CHECK(raise(SIGUSR1) == 0);
    CHECK_EQ_INT(ckpt_preempt_signalled(), rank == last);
    CHECK_EQ_INT(ckpt_preempt_last_signal(), rank == last ? SIGUSR1 : 0);
    CHECK_REASON(CKPT_PREEMPT_SIGNAL);
    CHECK_REASON(CKPT_PREEMPT_SIGNAL);

    /* Reset: NONE again. */
    ckpt_preempt_reset();
    CHECK_EQ_INT(ckpt_preempt_signalled(), 0);
    CHECK_EQ_INT(ckpt_preempt_last_signal(), 0);
    CHECK_REASON(CKPT_PREEMPT_NONE);

    /* SIGTERM (what scancel and the end of a time limit send) works the same; the process lives. */
    if (rank == 0)
        CHECK(raise(SIGTERM) == 0);
    CHECK_EQ_INT(ckpt_preempt_last_signal(), rank == 0 ? SIGTERM : 0);
    CHECK_REASON(CKPT_PREEMPT_SIGNAL);
    ckpt_preempt_reset();

    /* A deadline in the past on one rank (rank 0): DEADLINE everywhere. */
    if (rank == 0)
        CHECK_OK(ckpt_preempt_set_deadline(now - 10, 0));
    CHECK_REASON(CKPT_PREEMPT_DEADLINE);
    CHECK_OK(ckpt_preempt_set_deadline(0, 0));
    CHECK_REASON(CKPT_PREEMPT_NONE);

    /* A deadline in the future: NONE, unless the reserve reaches back to now (last rank). */
    CHECK_OK(ckpt_preempt_set_deadline(now + 86400, 60));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    if (rank == last)
        CHECK_OK(ckpt_preempt_set_deadline(now + 100, 200));
    CHECK_REASON(CKPT_PREEMPT_DEADLINE);

    /* Signal on the last rank, deadline on rank 0: signal wins, on every rank (at np >= 2 the two
     * bits come from different ranks). */
    CHECK_OK(ckpt_preempt_set_deadline(rank == 0 ? now - 1 : 0, 0));
    if (rank == last)
        CHECK(raise(SIGUSR1) == 0);
    CHECK_REASON(CKPT_PREEMPT_SIGNAL);
    ckpt_preempt_reset();
    CHECK_REASON(CKPT_PREEMPT_DEADLINE);
    CHECK_OK(ckpt_preempt_set_deadline(0, 0));
    CHECK_REASON(CKPT_PREEMPT_NONE);

    /* From the environment (deadline < 0): none set -> no deadline. */
    CHECK_OK(ckpt_preempt_set_deadline(-1, 30));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    /* SLURM_JOB_END_TIME in the past on the last rank only -> DEADLINE everywhere. */
    char buf[64];
    snprintf(buf, sizeof buf, "%.0f", now - 5);
    if (rank == last)
        setenv("SLURM_JOB_END_TIME", buf, 1);
    CHECK_OK(ckpt_preempt_set_deadline(-1, 0));
    CHECK_REASON(CKPT_PREEMPT_DEADLINE);
    /* MPICKPT_DEADLINE wins over SLURM_JOB_END_TIME: far in the future -> NONE. */
    snprintf(buf, sizeof buf, "%.0f", now + 86400);
    setenv("MPICKPT_DEADLINE", buf, 1);
    CHECK_OK(ckpt_preempt_set_deadline(-1, 30));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    /* ... and the reserve counts: a deadline a day ahead with a reserve of a day and 30 s is due
     * now; without the reserve it is not. (A day, not seconds: a NONE must not depend on how fast
     * a loaded machine gets here from `now`.) */
    snprintf(buf, sizeof buf, "%.0f", now + 86400);
    setenv("MPICKPT_DEADLINE", buf, 1);
    CHECK_OK(ckpt_preempt_set_deadline(-1, 86400 + 30));
    CHECK_REASON(CKPT_PREEMPT_DEADLINE);
    CHECK_OK(ckpt_preempt_set_deadline(-1, 0));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    /* A malformed value is an error naming the variable; the previous deadline stays. */
    setenv("MPICKPT_DEADLINE", "tomorrow", 1);
    CHECK_RC(ckpt_preempt_set_deadline(-1, 0), CKPT_EINVAL);
    const ckpt_error *e = ckpt_error_last();
    CHECK_MSG(e && strstr(e->message, "MPICKPT_DEADLINE"), "message: %s",
              e ? e->message : "(none)");
    unsetenv("MPICKPT_DEADLINE");
    unsetenv("SLURM_JOB_END_TIME");
    CHECK_OK(ckpt_preempt_set_deadline(0, 0));
    CHECK_REASON(CKPT_PREEMPT_NONE);

    /* Bad arguments. */
    CHECK_RC(ckpt_preempt_set_deadline(now, -1), CKPT_EINVAL);
    int bad[] = { SIGKILL };
    CHECK_RC(ckpt_preempt_install(bad, 1), CKPT_EINVAL);
    CHECK_RC(ckpt_preempt_install(NULL, 2), CKPT_EINVAL);
    CHECK_RC(ckpt_preempt_install(defaults, -1), CKPT_EINVAL);
    /* NULL reason: still collective (no rank hangs), then EINVAL. */
    CHECK_RC(ckpt_preempt_check(MPI_COMM_WORLD, NULL), CKPT_EINVAL);

    /* Another set of signals: SIGUSR2 on the last rank. */
    int usr2[] = { SIGUSR2 };
    CHECK_OK(ckpt_preempt_install(usr2, 1));
    if (rank == last)
        CHECK(raise(SIGUSR2) == 0);
    CHECK_EQ_INT(ckpt_preempt_last_signal(), rank == last ? SIGUSR2 : 0);
    CHECK_REASON(CKPT_PREEMPT_SIGNAL);
    ckpt_preempt_reset();
    CHECK_REASON(CKPT_PREEMPT_NONE);

    /* A sub-communicator: the check is collective over it only. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    if (rank == 1)
        CHECK(raise(SIGUSR1) == 0);
    ckpt_preempt_reason r = (ckpt_preempt_reason)-1;
    CHECK_OK(ckpt_preempt_check(half, &r));
    CHECK_MSG(r == (rank % 2 == 1 ? CKPT_PREEMPT_SIGNAL : CKPT_PREEMPT_NONE),
              "sub-communicator: %s", reason_name(r));
    MPI_Comm_free(&half);
    ckpt_preempt_reset();

    /* Halt requests. Rank 0 writes them in the test's directory; every rank watches it, only
     * rank 0 reads it. */
    const char *out = getenv("MPICKPT_TEST_DIR");
    CHECK(out != NULL);
    char hdir[4096], hpath[4200];
    snprintf(hdir, sizeof hdir, "%s/halt-dir", out ? out : ".");
    snprintf(hpath, sizeof hpath, "%s/" CKPT__HALT_FILE, hdir);
    if (rank == 0)
        CHECK(mkdir(hdir, 0755) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_OK(ckpt_preempt_watch_dir(hdir));
    CHECK_OK(ckpt_preempt_watch_dir(hdir)); /* twice: one watch */
    CHECK_REASON(CKPT_PREEMPT_NONE);        /* no request */
    now = (double)time(NULL);
    ckpt__halt due = { (int64_t)now - 1, (int64_t)now - 1 };
    ckpt__halt later = { (int64_t)now + 86400, (int64_t)now };
    if (rank == 0)
        CHECK_OK(ckpt__halt_write(hdir, &later));
    CHECK_REASON(CKPT_PREEMPT_NONE); /* not due for a day */
    if (rank == 0)
        CHECK_OK(ckpt__halt_write(hdir, &due));
    CHECK_REASON(CKPT_PREEMPT_HALT);
    CHECK_REASON(CKPT_PREEMPT_HALT); /* it stays until cleared */
    /* a signal wins over a halt, a halt over a deadline */
    if (rank == last)
        CHECK(raise(SIGUSR1) == 0);
    CHECK_REASON(CKPT_PREEMPT_SIGNAL);
    ckpt_preempt_reset();
    CHECK_OK(ckpt_preempt_set_deadline(now - 10, 0));
    CHECK_REASON(CKPT_PREEMPT_HALT);
    CHECK_OK(ckpt_preempt_set_deadline(0, 0));
    /* no longer watched: NONE; watched again: HALT */
    CHECK_OK(ckpt_preempt_watch_dir(NULL));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    CHECK_OK(ckpt_preempt_watch_dir(hdir));
    CHECK_REASON(CKPT_PREEMPT_HALT);
    /* bad files are a warning, not a halt, and leave the caller's last error alone */
    int gone = 0;
    if (rank == 0) {
        CHECK_OK(ckpt__halt_clear(hdir, &gone));
        FILE *f = fopen(hpath, "w");
        CHECK(f != NULL);
        if (f) {
            fputs("halt now please\n", f);
            fclose(f);
        }
    }
    CHECK_REASON(CKPT_PREEMPT_NONE);
    CHECK_REASON(CKPT_PREEMPT_NONE);
    ckpt_error_clear();
    CHECK_REASON(CKPT_PREEMPT_NONE);
    CHECK(ckpt_error_last() == NULL);
    if (rank == 0) {
        CHECK(unlink(hpath) == 0);
        CHECK(mkfifo(hpath, 0644) == 0); /* never opened for reading: no hang */
    }
    CHECK_REASON(CKPT_PREEMPT_NONE);
    if (rank == 0) {
        CHECK(unlink(hpath) == 0);
        CHECK(symlink("/etc/hostname", hpath) == 0); /* a link: not followed */
    }
    CHECK_REASON(CKPT_PREEMPT_NONE);
    if (rank == 0)
        CHECK_OK(ckpt__halt_clear(hdir, &gone));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    /* the 16 directories watched last: the oldest is forgotten, the newest always watched */
    CHECK_OK(ckpt_preempt_watch_dir(NULL));
    CHECK_OK(ckpt_preempt_watch_dir(hdir));
    char name[64];
    for (int i = 0; i < 15; i++) {
        snprintf(name, sizeof name, "/nonexistent/dir-%d", i);
        CHECK_OK(ckpt_preempt_watch_dir(name));
    }
    if (rank == 0)
        CHECK_OK(ckpt__halt_write(hdir, &due));
    CHECK_REASON(CKPT_PREEMPT_HALT); /* hdir is one of the 16 */
    CHECK_OK(ckpt_preempt_watch_dir("/nonexistent/one-more"));
    CHECK_REASON(CKPT_PREEMPT_NONE); /* hdir, the oldest, was forgotten */
    CHECK_OK(ckpt_preempt_watch_dir(hdir));
    CHECK_REASON(CKPT_PREEMPT_HALT); /* watched again: the newest */
    if (rank == 0)
        CHECK_OK(ckpt__halt_clear(hdir, &gone));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    /* a training state's chief/ swapped for a link to a directory holding a due request: the
     * link is not followed (the watched path is trusted, what is below it is not) */
    char real[4200], work[4200], linked[4300];
    snprintf(real, sizeof real, "%s/real", hdir);
    snprintf(work, sizeof work, "%s/work", hdir);
    snprintf(linked, sizeof linked, "%s/" CKPT__CHIEF_DIR, work);
    if (rank == 0) {
        CHECK(mkdir(real, 0755) == 0);
        CHECK(mkdir(work, 0755) == 0);
        CHECK_OK(ckpt__halt_write(real, &due));
        CHECK(symlink(real, linked) == 0);
    }
    CHECK_OK(ckpt_preempt_watch_dir(NULL));
    CHECK_OK(ckpt_preempt_watch_dir(linked));
    CHECK_REASON(CKPT_PREEMPT_NONE);
    CHECK_OK(ckpt_preempt_watch_dir(real));
    CHECK_REASON(CKPT_PREEMPT_HALT); /* the same request, reached without a link */
    CHECK_OK(ckpt_preempt_watch_dir(NULL));

    return check_mpi_done("test_preempt");
}
