/* MPI flavour of check.h: CHECK_MPI_DONE() sums failures over all ranks so that every rank exits
 * with the same code, and rank 0 prints one summary line. */
#ifndef MPICKPT_TESTS_MPI_CHECK_H
#define MPICKPT_TESTS_MPI_CHECK_H

#include "check.h"

#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

/* Per-case watchdog: a collective that hangs fails the test within check_watchdog_s seconds,
 * naming the case, instead of running into ctest's bare timeout. Arm it with check_case(). */
static char check_case_name[512] = "start";
static int check_watchdog_s = 90;

static inline void check_on_alarm(int sig)
{
    (void)sig;
    char buf[700];
    int n = snprintf(buf, sizeof buf, "[rank %d] WATCHDOG: case \"%s\" did not finish in %d s\n",
                     check_rank, check_case_name, check_watchdog_s);
    if (n > 0)
        (void)!write(2, buf, (size_t)n);
    _exit(124);
}

/* Names the case that starts now and (re)arms the watchdog; with `announce`, rank 0 prints it. */
static inline void check_case(int announce, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void check_case(int announce, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(check_case_name, sizeof check_case_name, fmt, ap);
    va_end(ap);
    signal(SIGALRM, check_on_alarm);
    alarm((unsigned)check_watchdog_s);
    if (announce && check_rank == 0) {
        printf("-- %s\n", check_case_name);
        fflush(stdout);
    }
}

static inline void check_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    check_rank = *rank;
}

static inline int check_mpi_done(const char *name)
{
    int local[2] = { check_failures, check_count }, total[2] = { 0, 0 };
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(local, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (check_rank == 0)
        printf("%s: %d ranks, %d checks, %d failed\n", name, size, total[1], total[0]);
    MPI_Finalize();
    return total[0] ? 1 : 0;
}

#endif
