#include "mpickpt/collective.h"

#include "internal.h"
#include "mpi_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A message that starts the way an agreed one does, "rank R (host H): ": one agreed on another
 * thread or copied (an async save's error, reported by the next call) has lost the mark of
 * ckpt__error_agreed() but not its prefix. */
static int agreed_text(const char *m)
{
    if (strncmp(m, "rank ", 5) != 0)
        return 0;
    m += 5;
    if (*m < '0' || *m > '9')
        return 0;
    while (*m >= '0' && *m <= '9')
        m++;
    if (strncmp(m, " (host ", 7) != 0)
        return 0;
    const char *close = strchr(m + 7, ')');
    return close && strncmp(close, "): ", 3) == 0;
}

/* m without a leading "rank R: " naming this rank (local messages of the save name their rank;
 * the agreed prefix names it again, with the host): the rank is named once. */
static const char *own_text(const char *m, int rank)
{
    char own[32];
    int n = snprintf(own, sizeof own, "rank %d: ", rank);
    return n > 0 && strncmp(m, own, (size_t)n) == 0 ? m + n : m;
}

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

    /* Every rank knows that out.rank failed, so all of them take this branch together. The
     * failing rank's errno and reason travel with its message (ckpt_error.sys_errno and .reason
     * on every rank). */
    struct { int sys_errno; int reason; char msg[1536]; } b;
    char *msg = b.msg;
    b.sys_errno = 0;
    b.reason = CKPT_REASON_NONE;
    if (rank == out.rank) {
        const ckpt_error *e = ckpt_error_last();
        int mine = e && e->code == out.code;
        b.sys_errno = mine ? e->sys_errno : 0;
        b.reason = mine ? e->reason : CKPT_REASON_NONE;
        if (mine && (ckpt__error_agreed() || agreed_text(e->message))) {
            /* agreed before (the status of an inner collective, passed on): it names the rank
             * that failed first; this one, the lowest now holding the code, may be another */
            snprintf(msg, sizeof b.msg, "%s", e->message);
        } else {
            char host[64] = "?";
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = '\0';
            const char *text = mine ? own_text(e->message, rank) : ckpt_strerror(out.code);
            snprintf(msg, sizeof b.msg, "rank %d (host %s): %s", rank, host, text);
        }
    }
    rc = MPI_Bcast(&b, (int)sizeof b, MPI_BYTE, out.rank, comm);
    if (rc != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "rank %d failed (%s); broadcasting its message failed too",
                           out.rank, ckpt_strerror(out.code));
    b.msg[sizeof b.msg - 1] = '\0';
    ckpt__error(out.code, "%s", b.msg);
    ckpt__error_set_errno(out.code, b.sys_errno);
    ckpt__error_set_reason(out.code, b.reason);
    ckpt__error_mark_agreed();
    return out.code;
}

/* A status and maxima in one MPI_Allreduce (MAX): the status travels negated, so the maximum is
 * the most negative code; a failure then costs the agreement that carries its message. */
int ckpt__mpi_vote(MPI_Comm comm, int local, double *vals, int n)
{
    double in[17], out[17];
    if (n < 0 || n > 16)
        return ckpt__error(CKPT_EINVAL, "ckpt__mpi_vote: %d values", n);
    in[0] = -(double)local;
    for (int i = 0; i < n; i++)
        in[i + 1] = vals[i];
    if (MPI_Allreduce(in, out, n + 1, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the vote failed");
    else if (out[0] == 0.0) {
        for (int i = 0; i < n; i++)
            vals[i] = out[i + 1];
        return CKPT_OK;
    }
    /* somebody failed: every rank takes this branch (the same maximum everywhere) */
    return ckpt_mpi_agree(comm, local);
}
