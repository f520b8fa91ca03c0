/* The CPython extension mpickpt._mpickpt: one C file per concern (module.c: module, errors,
 * communicators, preemption; saver.c: the Saver type and its registrations; manager.c: the
 * Manager and Training types; reader.c: the Reader type; interop.c: export(), import_tf()). It is a thin
 * layer over the public C API (include/mpickpt.h): Python objects in, ckpt_* calls with the GIL
 * released, exceptions carrying the library's message out. Not installed. */
#ifndef MPICKPT_PYCKPT_H
#define MPICKPT_PYCKPT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "mpickpt.h"

#include <mpi.h>

/* Raises the mpickpt.Error subclass of `code` with ckpt_error_last()'s message (or `fallback`
 * when there is none); returns NULL, for `return pyckpt_raise(rc, "...")`. */
PyObject *pyckpt_raise(int code, const char *fallback);
/* None for CKPT_OK, else pyckpt_raise(rc, NULL): the end of a method that returns nothing. */
PyObject *pyckpt_none_or_raise(int rc);

/* A save's options from the `error` and `check` keywords of Manager.save and Training.back_up
 * (ckpt_manager_save_options): error None or (code, message, errno, reason) with reason a
 * NotFoundError.reason name or None; check an int taken modulo 2**64. The message stays
 * borrowed from `error`, which must live until the save returns. -1 with an exception set. */
int pyckpt_save_options(PyObject *error, PyObject *check, ckpt_error *err,
                        ckpt_manager_save_options *out);
/* The same for any options struct: *out the error (NULL for None), *check_out the check. */
int pyckpt_caller(PyObject *error, PyObject *check, ckpt_error *err, const ckpt_error **out,
                  uint64_t *check_out);

/* The MPI_Comm of an mpi4py communicator (None: MPI_COMM_WORLD); mpi4py is imported, and with it
 * MPI initialized, on first use. -1 with an exception set on failure. */
int pyckpt_comm(PyObject *obj, MPI_Comm *out);

/* A dtype code from a Python int, checked. -1 with an exception set. */
int pyckpt_dtype(PyObject *obj, ckpt_dtype *out);

/* A shape from a sequence of non-negative ints. -1 with an exception set. */
int pyckpt_shape(PyObject *seq, ckpt_shape *out, const char *what);

/* The types, set up by their files' init functions (0 on success). */
extern PyTypeObject pyckpt_SaverType, pyckpt_ManagerType, pyckpt_TrainingType, pyckpt_ReaderType;
int pyckpt_saver_init(PyObject *module);
int pyckpt_manager_init(PyObject *module);
int pyckpt_reader_init(PyObject *module);
/* interop.c: export(), import_tf() */
int pyckpt_interop_init(PyObject *module);
/* manager.c: read_state(dir) -> the state file's checkpoints (a scan of *.index when it is missing
 * or damaged); no MPI, no lock (mpickpt.load and mpickpt.open of a directory) */
PyObject *pyckpt_read_state(PyObject *self, PyObject *arg);
PyObject *pyckpt_newest(PyObject *self, PyObject *arg);

/* The C saver of a Saver object (borrowed), or NULL with an exception set. */
ckpt_saver *pyckpt_saver_get(PyObject *saver);

/* A list of str of a restore's names (an empty list for NULL); a new reference. */
PyObject *pyckpt_names(const ckpt_name_list *l);

#endif
