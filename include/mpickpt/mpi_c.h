/**
 * @file mpickpt/mpi_c.h
 * @brief Includes <mpi.h> with its C interface only; every mpickpt header that needs MPI types
 * includes it.
 *
 * Open MPI's and MPICH's <mpi.h> pull in their C++ bindings when compiled as C++, and a program
 * that includes them must link the bindings' library (`libmpi_cxx`) or fail with
 * `undefined reference to MPI::Comm::Comm()`. mpickpt uses only the C interface, so it defines
 * OMPI_SKIP_MPICXX and MPICH_SKIP_MPICXX (when not already defined) before including <mpi.h>: a C++
 * program gets the C interface alone and links with no extra library. A program that wants the
 * (deprecated) C++ bindings includes <mpi.h> before any mpickpt header and links them itself.
 */
#ifndef MPICKPT_MPI_C_H
#define MPICKPT_MPI_C_H

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif

#include <mpi.h>

#endif
