/**
 * @file mpickpt.h
 * @brief Umbrella header: every public mpickpt header.
 *
 * Functions marked "Collective" live in libmpickpt (the MPI layer); the rest in libmpickpt_core.
 */
#ifndef MPICKPT_H
#define MPICKPT_H

#include "mpickpt/common.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/collective.h"
#include "mpickpt/crc32c.h"
#include "mpickpt/interop.h"
#include "mpickpt/saver.h"
#include "mpickpt/dtype.h"
#include "mpickpt/log.h"
#include "mpickpt/manager.h"
#include "mpickpt/mpi_c.h"
#include "mpickpt/preempt.h"
#include "mpickpt/slice.h"
#include "mpickpt/state.h"

#endif
