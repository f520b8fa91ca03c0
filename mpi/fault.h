/* Fault injection for tests and drills (mpi/fault.c): MPICKPT_FAULT's steps, for the MPI layer
 * and the manager (which includes this, not mpi_internal.h). */
#ifndef MPICKPT_FAULT_H
#define MPICKPT_FAULT_H

#include <stdatomic.h>

/*
 * Fault injection for tests and drills, read from MPICKPT_FAULT at every call:
 * "<rank>:<step>" makes `rank` fail at `step` with CKPT_EIO ("injected fault at <step> on rank R");
 * "<rank>:<step>:kill" makes it die with SIGKILL there; "<rank>:<step>:hold" (a step other than
 * "write", whose hold is ckpt__fault_hold's) makes it print a line and wait there up to 120 s, then
 * go on. Returns CKPT_OK when not targeted.
 */
int ckpt__fault(int rank, const char *step);
/* ckpt__fault_spec(): MPICKPT_FAULT parsed strictly, in lib/env.c (env.h) with the other
 * variables, so that `mpickpt config` checks it too. */

/* "<rank>:<step>:hold" (tests of async close): `rank` waits at `step` until *release is set (the
 * saver was closed and gave up on the save), at most 60 s. */
void ckpt__fault_hold(int rank, const char *step, atomic_int *release);

#endif
