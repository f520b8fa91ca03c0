/* Transitional: the JSON escaper moved into lib/json.h (ckpt__json_write_string, unchanged), the
 * one JSON writer of the project. mpi/saver.c still includes this name; delete this file once it
 * includes json.h (or metrics.h) instead. */
#ifndef MPICKPT_JSONSTR_H
#define MPICKPT_JSONSTR_H

#include "json.h"

#endif
