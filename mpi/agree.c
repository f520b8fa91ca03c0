#include "mpickpt/collective.h"

#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int ckpt_mpi_agree(MPI_Comm comm, int local_status)
{
    int rank = 0;
    int rc = MPI_Comm_rank(comm, &rank);
    if (rc != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Comm_rank failed (%d)", rc);

    /* MINLOC picks the most negative code and the lowest rank holding it: deterministic. */
    struct { int code; int rank; } in = { local_status, rank }, out;
    rc = MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm);
    if (rc != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Allreduce of the status failed (%d)", rc);
    if (out.code == CKPT_OK)
        return CKPT_OK;

    /* Every rank knows that out.rank failed, so all of them take this branch together. */
    char msg[1536];
    if (rank == out.rank) {
        const ckpt_error *e = ckpt_error_last();
        char host[64] = "?";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        snprintf(msg, sizeof msg, "rank %d (host %s): %s", rank, host,
                 (e && e->code == out.code) ? e->message : ckpt_strerror(out.code));
    }
    rc = MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, out.rank, comm);
    if (rc != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "rank %d failed (%s); broadcasting its message failed too",
                           out.rank, ckpt_strerror(out.code));
    msg[sizeof msg - 1] = '\0';
    return ckpt__error(out.code, "%s", msg);
}
