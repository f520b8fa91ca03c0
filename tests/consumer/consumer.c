/* Links against the installed mpickpt and checks the collective agreement on every rank. */
#include <mpickpt.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rc = ckpt_mpi_agree(MPI_COMM_WORLD, CKPT_OK);
    int bad = rc != CKPT_OK || strcmp(ckpt_version(), CKPT_VERSION_STRING) != 0;
    if (rank == 0)
        printf("consumer: mpickpt %s, agree=%s\n", ckpt_version(), ckpt_strerror(rc));
    MPI_Finalize();
    return bad;
}
