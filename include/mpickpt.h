/**
 * @file mpickpt.h
 * @brief Umbrella header: every public mpickpt header.
 *
 * Functions marked "Collective" live in libmpickpt (the MPI layer); the rest in libmpickpt_core.
 */
#ifndef MPICKPT_H
#define MPICKPT_H

#include "mpickpt/common.h"
#include "mpickpt/collective.h"

#endif
