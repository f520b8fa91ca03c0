/* Internal helpers of the MPI layer. */
#ifndef MPICKPT_MPI_INTERNAL_H
#define MPICKPT_MPI_INTERNAL_H

#include "internal.h"

#include <mpi.h>

#pragma GCC visibility push(default)

/* Maps an MPI error code to CKPT_EMPI with MPI's own text; returns CKPT_EMPI. */
int ckpt__mpi_error(int mpi_rc, const char *what);

/*
 * Fault injection for tests and drills, read from MPICKPT_FAULT at every call:
 * "<rank>:<step>" makes `rank` fail at `step` with CKPT_EIO ("injected fault at <step> on rank R");
 * "<rank>:<step>:kill" makes it die with SIGKILL there. Returns CKPT_OK when not targeted.
 */
int ckpt__fault(int rank, const char *step);

/* Saver internals the manager needs. */
struct ckpt_saver;
MPI_Comm ckpt__saver_comm(const struct ckpt_saver *s);
int ckpt__saver_rank(const struct ckpt_saver *s);
void ckpt__saver_set_counter(struct ckpt_saver *s, int64_t counter);

#pragma GCC visibility pop

#endif
