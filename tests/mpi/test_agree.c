/* ckpt_mpi_agree: every rank returns the same code and message, naming the lowest failing rank. */
#include "internal.h"
#include "mpi_check.h"
#include "mpickpt.h"

#include <string.h>

int main(int argc, char **argv)
{
    int rank, size;
    check_mpi_init(&argc, &argv, &rank, &size);

    CHECK_OK(ckpt_mpi_agree(MPI_COMM_WORLD, CKPT_OK));

    /* The last rank fails alone: every rank gets its code and its message. */
    int local = CKPT_OK;
    if (rank == size - 1)
        local = ckpt__error(CKPT_ECORRUPT, "bad bytes in /x/y.h5");
    int rc = ckpt_mpi_agree(MPI_COMM_WORLD, local);
    CHECK_RC(rc, CKPT_ECORRUPT);
    const ckpt_error *e = ckpt_error_last();
    char want[64];
    snprintf(want, sizeof want, "rank %d (host ", size - 1);
    CHECK_MSG(e && strstr(e->message, want) && strstr(e->message, "bad bytes in /x/y.h5"),
              "message: %s", e ? e->message : "(none)");

    /* Two ranks fail with different codes: the most negative code wins, deterministically. */
    local = CKPT_OK;
    if (rank == 0)
        local = ckpt__error(CKPT_EIO, "write failed");
    if (rank == size - 1)
        local = ckpt__error(CKPT_ENOSPC, "disk full on rank %d", rank);
    rc = ckpt_mpi_agree(MPI_COMM_WORLD, local);
    CHECK_RC(rc, size == 1 ? CKPT_ENOSPC : CKPT_EIO); /* EIO (-7) < ENOSPC (-5) */
    e = ckpt_error_last();
    CHECK(e && e->code == rc);

    /* Agreement results must be identical on every rank: compare the message hashes. */
    unsigned long h = 5381;
    for (const char *p = e ? e->message : ""; *p; p++)
        h = h * 33 + (unsigned char)*p;
    unsigned long hmin, hmax;
    MPI_Allreduce(&h, &hmin, 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hmax, 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(hmin == hmax, "ranks disagree on the message");

    CHECK_OK(ckpt_mpi_agree(MPI_COMM_WORLD, CKPT_OK));
    return check_mpi_done("test_agree");
}
