/* mpickpt._mpickpt: module init, the exception hierarchy, communicators, dtypes, preemption. */
#include "pyckpt.h"

#include <mpi4py/mpi4py.h>

#include <errno.h>
#include <signal.h>

/* mpickpt.Error and its subclasses, one per status a caller acts on. */
static PyObject *g_error, *g_notfound, *g_corrupt, *g_mismatch, *g_nospace, *g_invalid, *g_version,
    *g_exists, *g_timedout, *g_busy, *g_mpi, *g_fs, *g_denied;
static int g_mpi4py_ready;

/* The class of a status and the errno behind it: a failed file-system call (CKPT_EIO) is a
 * FileSystemError, a PermissionDeniedError when the file system refused the operation (read-only,
 * EROFS; denied, EACCES or EPERM). */
static PyObject *error_class(int code, int sys_errno)
{
    switch (code) {
    case CKPT_ENOTFOUND: return g_notfound;
    case CKPT_ECORRUPT: return g_corrupt;
    case CKPT_EMISMATCH: return g_mismatch;
    case CKPT_ENOSPC: return g_nospace;
    case CKPT_EINVAL: return g_invalid;
    case CKPT_EVERSION: return g_version;
    case CKPT_EEXISTS: return g_exists;
    case CKPT_ETIMEDOUT: return g_timedout;
    case CKPT_EBUSY: return g_busy;
    case CKPT_EMPI: return g_mpi;
    case CKPT_EIO:
        return sys_errno == EROFS || sys_errno == EACCES || sys_errno == EPERM ? g_denied : g_fs;
    default: return g_error;
    }
}

/* NotFoundError.reason: ckpt_error.reason's name in Python (None: CKPT_REASON_NONE). */
static const char *reason_text(int reason)
{
    switch (reason) {
    case CKPT_REASON_NO_CHECKPOINT: return "no_checkpoint";
    case CKPT_REASON_NO_TENSOR: return "no_tensor";
    case CKPT_REASON_PINNED: return "pinned";
    case CKPT_REASON_NO_METRICS: return "no_metrics";
    case CKPT_REASON_CHECK: return "check";
    default: return NULL;
    }
}

PyObject *pyckpt_raise(int code, const char *fallback)
{
    const ckpt_error *e = ckpt_error_last();
    int mine = e && e->code == code;
    int sys_errno = mine ? e->sys_errno : 0;
    if (code == CKPT_ENOSPC && sys_errno == 0)
        sys_errno = ENOSPC;
    PyObject *cls = error_class(code, sys_errno);
    const char *msg = mine && e->message && e->message[0] ? e->message
                      : fallback                          ? fallback
                                                          : ckpt_strerror(code);
    /* the class's `code` attribute is the status; an OSError subclass's `errno` the errno (str()
     * stays the message: `strerror` is left None, it would replace str()) */
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    PyObject *exc = text ? PyObject_CallOneArg(cls, text) : NULL;
    Py_XDECREF(text);
    if (!exc)
        return NULL;
    const char *why = mine && (code == CKPT_ENOTFOUND || code == CKPT_EMISMATCH)
                          ? reason_text(e->reason) : NULL;
    if (why) { /* the class's `reason` (None) otherwise */
        PyObject *r = PyUnicode_FromString(why);
        int bad = !r || PyObject_SetAttrString(exc, "reason", r) < 0;
        Py_XDECREF(r);
        if (bad) {
            Py_DECREF(exc);
            return NULL;
        }
    }
    if (sys_errno && PyObject_IsSubclass(cls, PyExc_OSError) == 1) {
        PyObject *n = PyLong_FromLong(sys_errno);
        int bad = !n || PyObject_SetAttrString(exc, "errno", n) < 0;
        Py_XDECREF(n);
        if (bad) {
            Py_DECREF(exc);
            return NULL;
        }
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

int pyckpt_save_options(PyObject *error, PyObject *check, ckpt_error *err,
                        ckpt_manager_save_options *out)
{
    ckpt_manager_save_options init = CKPT_MANAGER_SAVE_OPTIONS_INIT;
    *out = init;
    return pyckpt_caller(error, check, err, &out->error, &out->check);
}

int pyckpt_caller(PyObject *error, PyObject *check, ckpt_error *err, const ckpt_error **out,
                  uint64_t *check_out)
{
    memset(err, 0, sizeof *err);
    *out = NULL;
    *check_out = 0;
    if (check && check != Py_None) {
        *check_out = (uint64_t)PyLong_AsUnsignedLongLongMask(check);
        if (PyErr_Occurred())
            return -1;
    }
    if (!error || error == Py_None)
        return 0;
    PyObject *why = Py_None, *text = NULL;
    if (!PyArg_ParseTuple(error, "iOi|O:error", &err->code, &text, &err->sys_errno, &why))
        return -1;
    /* a message that is not UTF-8 (a lone surrogate) must not fail here, on this rank alone:
     * the others would wait in the call's collective */
    err->message = PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : NULL;
    if (!err->message) {
        PyErr_Clear();
        err->message = "(a failure whose message is not UTF-8 text)";
    }
    if (err->code >= 0) {
        PyErr_SetString(PyExc_ValueError, "error: the code is not an mpickpt error code");
        return -1;
    }
    for (int r = CKPT_REASON_NO_CHECKPOINT; why != Py_None && r <= CKPT_REASON_CHECK; r++)
        if (PyUnicode_Check(why) && PyUnicode_CompareWithASCIIString(why, reason_text(r)) == 0)
            err->reason = r;
    *out = err;
    return 0;
}

PyObject *pyckpt_none_or_raise(int rc)
{
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    Py_RETURN_NONE;
}

int pyckpt_comm(PyObject *obj, MPI_Comm *out)
{
    if (!g_mpi4py_ready) {
        /* Imported here, not at module import: mpickpt.open() reads checkpoints without MPI. */
        if (import_mpi4py() < 0)
            return -1;
        g_mpi4py_ready = 1;
    }
    if (obj == NULL || obj == Py_None) {
        int init = 0;
        MPI_Initialized(&init);
        if (!init) {
            PyErr_SetString(g_mpi, "MPI is not initialized (import mpi4py.MPI first)");
            return -1;
        }
        *out = MPI_COMM_WORLD;
        return 0;
    }
    MPI_Comm *c = PyMPIComm_Get(obj);
    if (!c)
        return -1;
    if (*c == MPI_COMM_NULL) {
        PyErr_SetString(PyExc_ValueError, "the communicator is MPI.COMM_NULL");
        return -1;
    }
    *out = *c;
    return 0;
}

int pyckpt_dtype(PyObject *obj, ckpt_dtype *out)
{
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (!ckpt_dtype_valid((ckpt_dtype)v)) {
        PyErr_Format(PyExc_ValueError, "invalid dtype code %ld", v);
        return -1;
    }
    *out = (ckpt_dtype)v;
    return 0;
}

int pyckpt_shape(PyObject *seq, ckpt_shape *out, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, "a shape must be a sequence of ints");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int64_t dims[CKPT_MAX_DIMS];
    if (n > CKPT_MAX_DIMS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions, at most %d", what, n, CKPT_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (v < 0) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_ValueError, "%s: negative dimension %lld", what, v);
            return -1;
        }
        dims[i] = (int64_t)v;
    }
    Py_DECREF(fast);
    if (ckpt_shape_init(out, (int)n, dims) != CKPT_OK) {
        pyckpt_raise(CKPT_EINVAL, what);
        return -1;
    }
    return 0;
}

/* ---- preemption ---------------------------------------------------------------------------- */

static PyObject *py_preempt_install(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = { "signals", NULL };
    PyObject *sigs = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:preempt_install", names, &sigs))
        return NULL;
    int list[16], n = 0;
    if (sigs != Py_None) {
        PyObject *fast = PySequence_Fast(sigs, "signals must be a sequence of signal numbers");
        if (!fast)
            return NULL;
        Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
        if (m < 1 || m > 16) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "give 1 to 16 signals");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < m; i++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(fast);
                return NULL;
            }
            list[n++] = (int)v;
        }
        Py_DECREF(fast);
    }
    int rc = ckpt_preempt_install(n ? list : NULL, n);
    return pyckpt_none_or_raise(rc);
}

static PyObject *py_preempt_check(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = { "comm", NULL };
    PyObject *co = Py_None;
    MPI_Comm comm;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:preempt_check", names, &co) ||
        pyckpt_comm(co, &comm) < 0)
        return NULL;
    ckpt_preempt_reason reason = CKPT_PREEMPT_NONE;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_preempt_check(comm, &reason);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return PyLong_FromLong((long)reason);
}

static PyObject *py_preempt_set_deadline(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = { "deadline", "reserve_s", NULL };
    double deadline = -1, reserve = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|dd:preempt_set_deadline", names, &deadline,
                                     &reserve))
        return NULL;
    int rc = ckpt_preempt_set_deadline(deadline, reserve);
    return pyckpt_none_or_raise(rc);
}

static PyObject *py_preempt_watch_dir(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = { "dir", NULL };
    PyObject *o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:preempt_watch_dir", names, &o))
        return NULL;
    PyObject *bytes = NULL;
    if (o != Py_None && !PyUnicode_FSConverter(o, &bytes))
        return NULL;
    int rc = ckpt_preempt_watch_dir(bytes ? PyBytes_AS_STRING(bytes) : NULL);
    Py_XDECREF(bytes);
    return pyckpt_none_or_raise(rc);
}

static PyObject *py_preempt_signalled(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(ckpt_preempt_signalled());
}

static PyObject *py_preempt_reset(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    ckpt_preempt_reset();
    Py_RETURN_NONE;
}

static PyObject *py_version(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(ckpt_version());
}

static PyObject *py_dtype_size(PyObject *self, PyObject *arg)
{
    (void)self;
    ckpt_dtype dt;
    if (pyckpt_dtype(arg, &dt) < 0)
        return NULL;
    return PyLong_FromSize_t(ckpt_dtype_size(dt));
}

static PyObject *py_log_default_level(PyObject *self, PyObject *arg)
{
    (void)self;
    long level = PyLong_AsLong(arg);
    if (level == -1 && PyErr_Occurred())
        return NULL;
    if (level < CKPT_LOG_ERROR || level > CKPT_LOG_DEBUG)
        return PyErr_Format(PyExc_ValueError, "log level %ld is not 0..3", level);
    ckpt_log_set_default_level((ckpt_log_level)level);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    { "log_default_level", py_log_default_level, METH_O,
      "log_default_level(level): the log level (0 error .. 3 debug) when MPICKPT_LOG is unset" },
    { "preempt_install", (PyCFunction)(void (*)(void))py_preempt_install,
      METH_VARARGS | METH_KEYWORDS,
      "preempt_install(signals=None): handlers that only set a flag (default SIGTERM, SIGUSR1)" },
    { "preempt_check", (PyCFunction)(void (*)(void))py_preempt_check,
      METH_VARARGS | METH_KEYWORDS,
      "preempt_check(comm=None) -> reason (0 none, 1 signal, 2 deadline, 3 halt); collective" },
    { "preempt_set_deadline", (PyCFunction)(void (*)(void))py_preempt_set_deadline,
      METH_VARARGS | METH_KEYWORDS,
      "preempt_set_deadline(deadline=-1, reserve_s=0): -1 reads MPICKPT_DEADLINE" },
    { "preempt_watch_dir", (PyCFunction)(void (*)(void))py_preempt_watch_dir,
      METH_VARARGS | METH_KEYWORDS,
      "preempt_watch_dir(dir): halt requests in dir stop the job (None: watch none)" },
    { "preempt_signalled", py_preempt_signalled, METH_NOARGS, "1 when this rank was signalled" },
    { "preempt_reset", py_preempt_reset, METH_NOARGS, "clears the flag" },
    { "version", py_version, METH_NOARGS, "the C library's version" },
    { "dtype_size", py_dtype_size, METH_O, "bytes per element of a dtype code" },
    { "read_state", pyckpt_read_state, METH_O,
      "read_state(dir) -> {latest, save_counter, entries, scanned}: no MPI, no lock" },
    { "newest", pyckpt_newest, METH_O,
      "newest(dir) -> the prefix a restore of dir starts from (ckpt_newest_restorable)" },
    { NULL, NULL, 0, NULL }
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "mpickpt._mpickpt",
    "The C core of mpickpt's Python package (use the mpickpt package, not this module).", -1,
    module_methods, NULL, NULL, NULL, NULL
};

/* Creates exception class `name` deriving from `bases`, with a class attribute `code` (the C
 * status it stands for), and adds it to the module. */
static PyObject *new_error(PyObject *m, const char *name, PyObject *bases, int code,
                           const char *doc)
{
    char full[128];
    snprintf(full, sizeof full, "mpickpt.%s", name);
    PyObject *dict = Py_BuildValue("{s:i}", "code", code);
    PyObject *cls = dict ? PyErr_NewExceptionWithDoc(full, doc, bases, dict) : NULL;
    Py_XDECREF(dict);
    if (!cls || PyModule_AddObjectRef(m, name, cls) < 0) {
        Py_XDECREF(cls);
        return NULL;
    }
    return cls; /* kept for the module's life */
}

PyMODINIT_FUNC PyInit__mpickpt(void); /* the one exported symbol */
PyMODINIT_FUNC PyInit__mpickpt(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    PyObject *b = NULL;
    if (!(g_error = new_error(m, "Error", PyExc_Exception, CKPT_ERROR,
                              "An mpickpt call failed; str() is the library's message (the same "
                              "on every rank for collective calls), `code` the C status.")))
        goto fail;
#define SUB(var, name, extra, code, doc)                                                        \
    do {                                                                                       \
        b = extra ? PyTuple_Pack(2, g_error, extra) : PyTuple_Pack(1, g_error);                \
        if (!b || !(var = new_error(m, name, b, code, doc)))                                   \
            goto fail;                                                                         \
        Py_CLEAR(b);                                                                           \
    } while (0)
    SUB(g_notfound, "NotFoundError", PyExc_LookupError, CKPT_ENOTFOUND,
        "A checkpoint, file or tensor does not exist (CKPT_ENOTFOUND). `reason` tells which "
        "(ckpt_error.reason): 'no_checkpoint' (no index, state or checkpoint of that step: "
        "nothing to restore there), 'no_tensor' (the checkpoint lacks a tensor or value asked "
        "for or registered), 'pinned' (the pinned checkpoint cannot be restored, or the one "
        "asked for is dropped or set aside: `mpickpt pin`, `mpickpt drop`), 'no_metrics' (no "
        "save has committed yet), or None (another kind: a file named by the caller, ...).");
    {
        static const char *const names[][2] = { { "reason", NULL },
                                                { "NO_CHECKPOINT", "no_checkpoint" },
                                                { "NO_TENSOR", "no_tensor" },
                                                { "PINNED", "pinned" },
                                                { "NO_METRICS", "no_metrics" } };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            PyObject *v = names[i][1] ? PyUnicode_FromString(names[i][1]) : Py_NewRef(Py_None);
            int bad = !v || PyObject_SetAttrString(g_notfound, names[i][0], v) < 0;
            Py_XDECREF(v);
            if (bad)
                goto fail;
        }
    }
    SUB(g_corrupt, "CorruptError", (PyObject *)NULL, CKPT_ECORRUPT,
        "Data on disk is malformed, truncated or fails its checksum (CKPT_ECORRUPT).");
    SUB(g_mismatch, "MismatchError", PyExc_ValueError, CKPT_EMISMATCH,
        "A dtype, shape, slice or registration disagrees with the checkpoint (CKPT_EMISMATCH). "
        "`reason` is 'check' when the ranks passed a save different check values "
        "(ckpt_manager_save_options.check, MismatchError.CHECK), else None.");
    {
        PyObject *none = Py_NewRef(Py_None), *check = PyUnicode_FromString("check");
        int bad = !check || PyObject_SetAttrString(g_mismatch, "reason", none) < 0 ||
                  PyObject_SetAttrString(g_mismatch, "CHECK", check) < 0;
        Py_DECREF(none);
        Py_XDECREF(check);
        if (bad)
            goto fail;
    }
    SUB(g_nospace, "NoSpaceError", PyExc_OSError, CKPT_ENOSPC,
        "No space left on the device (CKPT_ENOSPC); an OSError with errno ENOSPC (or EDQUOT).");
    SUB(g_fs, "FileSystemError", PyExc_OSError, CKPT_EIO,
        "A file-system or I/O call failed (CKPT_EIO); an OSError whose errno is the failed "
        "call's (None when unknown).");
    b = PyTuple_Pack(2, g_fs, PyExc_PermissionError);
    if (!b || !(g_denied = new_error(m, "PermissionDeniedError", b, CKPT_EIO,
                                     "The file system refused: a read-only file system (EROFS) "
                                     "or permission denied (EACCES, EPERM); a FileSystemError "
                                     "and a builtins.PermissionError with errno set (CKPT_EIO).")))
        goto fail;
    Py_CLEAR(b);
    SUB(g_invalid, "InvalidArgumentError", PyExc_ValueError, CKPT_EINVAL,
        "An invalid argument or usage (CKPT_EINVAL).");
    SUB(g_version, "VersionError", (PyObject *)NULL, CKPT_EVERSION,
        "Written by an unknown (future) format version (CKPT_EVERSION).");
    SUB(g_exists, "ExistsError", (PyObject *)NULL, CKPT_EEXISTS,
        "The target already exists (CKPT_EEXISTS).");
    SUB(g_timedout, "TimeoutError", (PyObject *)NULL, CKPT_ETIMEDOUT,
        "Gave up waiting, e.g. for a background save at close (CKPT_ETIMEDOUT).");
    SUB(g_busy, "BusyError", (PyObject *)NULL, CKPT_EBUSY,
        "The checkpoint directory is in use by another job: its lock is held; the message names "
        "the holder (CKPT_EBUSY).");
    SUB(g_mpi, "MPIError", (PyObject *)NULL, CKPT_EMPI,
        "An MPI call failed or MPI is not usable (CKPT_EMPI).");
#undef SUB
    static const struct {
        const char *name;
        long value;
    } consts[] = {
        { "FLOAT16", CKPT_FLOAT16 },   { "BFLOAT16", CKPT_BFLOAT16 }, { "FLOAT32", CKPT_FLOAT32 },
        { "FLOAT64", CKPT_FLOAT64 },   { "INT8", CKPT_INT8 },         { "INT16", CKPT_INT16 },
        { "INT32", CKPT_INT32 },       { "INT64", CKPT_INT64 },       { "UINT8", CKPT_UINT8 },
        { "UINT16", CKPT_UINT16 },     { "UINT32", CKPT_UINT32 },     { "UINT64", CKPT_UINT64 },
        { "BOOL", CKPT_BOOL },         { "LAYOUT_DEFAULT", CKPT_LAYOUT_UNKNOWN },
        { "LAYOUT_SHARED", CKPT_LAYOUT_SHARED },  { "LAYOUT_PER_RANK", CKPT_LAYOUT_PER_RANK },
        { "LAYOUT_PER_NODE", CKPT_LAYOUT_PER_NODE },
        { "EXIT_PREEMPTED", CKPT_EXIT_PREEMPTED }, { "PREEMPT_NONE", CKPT_PREEMPT_NONE },
        { "PREEMPT_SIGNAL", CKPT_PREEMPT_SIGNAL }, { "PREEMPT_DEADLINE", CKPT_PREEMPT_DEADLINE },
        { "PREEMPT_HALT", CKPT_PREEMPT_HALT },
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0)
            goto fail;
    if (pyckpt_saver_init(m) < 0 || pyckpt_manager_init(m) < 0 || pyckpt_reader_init(m) < 0 ||
        pyckpt_interop_init(m) < 0)
        goto fail;
    return m;
fail:
    Py_XDECREF(b);
    Py_DECREF(m);
    return NULL;
}
