/* MPI flavour of check.h: CHECK_MPI_DONE() sums failures over all ranks so that every rank exits
 * with the same code, and rank 0 prints one summary line. */
#ifndef MPICKPT_TESTS_MPI_CHECK_H
#define MPICKPT_TESTS_MPI_CHECK_H

#include "check.h"

#include <mpi.h>

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
