/**
 * @file mpickpt/collective.h
 * @brief Agreement of a status across the ranks of a communicator.
 */
#ifndef MPICKPT_COLLECTIVE_H
#define MPICKPT_COLLECTIVE_H

#include "common.h"

#include "mpi_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Combines the local status of every rank into one result that every rank returns.
 *
 * Returns CKPT_OK on every rank when every rank passed CKPT_OK. Otherwise every rank returns the
 * same error code (the most negative one passed), and ckpt_error_last() on every rank holds the
 * same message: that of the lowest rank which passed that code, prefixed with its rank and host
 * ("rank R (host H): "). A message that is already an agreed one (this rank's status came from
 * an earlier agreement, say of an inner collective) is passed on as it is: it names the rank that
 * failed first, once.
 *
 * Collective: every rank of @p comm must call it, whatever its local status.
 *
 * @param comm          the communicator
 * @param local_status  this rank's status (CKPT_OK or a negative ckpt_status)
 */
CKPT_EXTERN int ckpt_mpi_agree(MPI_Comm comm, int local_status);

#ifdef __cplusplus
}
#endif
#endif
