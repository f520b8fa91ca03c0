/* mpickpt._mpickpt.Reader: a read-only view of one checkpoint (mpickpt/checkpoint.h's reader),
 * without MPI. Reads land in a caller's writable buffer (the Python layer allocates NumPy
 * arrays). */
#include "pyckpt.h"

#include <stdio.h>

typedef struct {
    PyObject_HEAD
    ckpt_reader *r;
} ReaderObject;

static int Reader_init(ReaderObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "prefix", "check_files", NULL };
    PyObject *prefix_obj;
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|p:Reader", names, PyUnicode_FSConverter,
                                     &prefix_obj, &check))
        return -1;
    if (self->r) {
        Py_DECREF(prefix_obj);
        PyErr_SetString(PyExc_RuntimeError, "Reader.__init__ called twice");
        return -1;
    }
    const char *prefix = PyBytes_AS_STRING(prefix_obj);
    int rc;
    ckpt_reader *r = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = check ? ckpt_reader_open(&r, prefix) : ckpt_reader_open_index(&r, prefix);
    Py_END_ALLOW_THREADS
    Py_DECREF(prefix_obj);
    if (rc != CKPT_OK) {
        pyckpt_raise(rc, NULL);
        return -1;
    }
    self->r = r;
    return 0;
}

static int reader_open(ReaderObject *o)
{
    if (!o->r) {
        PyErr_SetString(PyExc_ValueError, "the reader is closed");
        return -1;
    }
    return 0;
}

static void Reader_dealloc(ReaderObject *self)
{
    ckpt_reader_free(self->r);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *shape_tuple(const ckpt_shape *sh)
{
    PyObject *t = PyTuple_New(sh->ndims);
    for (int d = 0; t && d < sh->ndims; d++) {
        PyObject *v = PyLong_FromLongLong((long long)sh->dims[d]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, d, v);
    }
    return t;
}

static PyObject *Reader_header(ReaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (reader_open(self) < 0)
        return NULL;
    const ckpt_header *h = ckpt_reader_header(self->r);
    return Py_BuildValue("{s:I,s:i,s:s,s:L,s:L,s:L,s:O,s:d,s:s}", "format_version",
                         h->format_version, "world_size", (int)h->world_size, "layout",
                         ckpt_layout_name(h->layout), "save_counter", (long long)h->save_counter,
                         "epoch", (long long)h->epoch, "step", (long long)h->step, "end_of_epoch",
                         h->end_of_epoch ? Py_True : Py_False, "timestamp", h->timestamp,
                         "producer", h->producer ? h->producer : "");
}

static PyObject *Reader_tensors(ReaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (reader_open(self) < 0)
        return NULL;
    size_t n = ckpt_reader_num_tensors(self->r);
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_tensor(&t, self->r, i) != CKPT_OK) {
            Py_DECREF(list);
            return pyckpt_raise(CKPT_ECORRUPT, NULL);
        }
        PyObject *shape = shape_tuple(&t.shape);
        PyObject *d = shape ? Py_BuildValue("{s:s,s:i,s:O,s:s,s:n}", "name", t.name, "dtype",
                                            (int)t.dtype, "shape", shape, "kind",
                                            ckpt_kind_name(t.kind), "pieces",
                                            (Py_ssize_t)t.num_pieces)
                            : NULL;
        Py_XDECREF(shape);
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *Reader_read(ReaderObject *self, PyObject *args)
{
    const char *name;
    PyObject *buf, *dto, *sto = Py_None, *cto = Py_None;
    ckpt_dtype dt;
    if (reader_open(self) < 0 ||
        !PyArg_ParseTuple(args, "sOO|OO:read", &name, &buf, &dto, &sto, &cto) ||
        pyckpt_dtype(dto, &dt) < 0)
        return NULL;
    ckpt_slice sl, *slp = NULL;
    if (sto != Py_None || cto != Py_None) {
        ckpt_shape st, ct;
        if (pyckpt_shape(sto, &st, name) < 0 || pyckpt_shape(cto, &ct, name) < 0)
            return NULL;
        if (st.ndims != ct.ndims || ckpt_slice_init(&sl, st.ndims, st.dims, ct.dims) != CKPT_OK) {
            PyErr_Format(PyExc_ValueError, "tensor '%s': offsets and counts differ in length",
                         name);
            return NULL;
        }
        slp = &sl;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(buf, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_reader_read(self->r, name, dt, slp, v.buf, (size_t)v.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    return pyckpt_none_or_raise(rc);
}

/* What verify() found: the first bad piece's message and how many were bad. */
typedef struct {
    char first[1024];
    size_t bad;
} verify_found;

/* Runs without the GIL: C strings only. */
static int verify_cb(const char *tensor, size_t piece, const char *file, int code,
                     const char *message, void *payload)
{
    (void)tensor;
    (void)piece;
    (void)file;
    (void)code;
    verify_found *f = payload;
    if (f->bad++ == 0)
        snprintf(f->first, sizeof f->first, "%s", message ? message : "");
    return 0;
}

static PyObject *Reader_verify(ReaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (reader_open(self) < 0)
        return NULL;
    int rc;
    verify_found found = { "", 0 };
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_reader_verify(self->r, verify_cb, &found);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK && found.bad && found.first[0]) {
        /* the library's own message only counts the bad pieces: name the first one */
        char msg[1200];
        snprintf(msg, sizeof msg, "%s (%zu bad piece(s) in all)", found.first, found.bad);
        ckpt_error_clear(); /* kept: replaced by the message naming the first bad piece */
        return pyckpt_raise(rc, msg);
    }
    return pyckpt_none_or_raise(rc);
}

static PyObject *Reader_close(ReaderObject *self, PyObject *noargs)
{
    (void)noargs;
    ckpt_reader_free(self->r);
    self->r = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Reader_methods[] = {
    { "header", (PyCFunction)Reader_header, METH_NOARGS, "the checkpoint's header (a dict)" },
    { "tensors", (PyCFunction)Reader_tensors, METH_NOARGS, "[{name, dtype, shape, kind}]" },
    { "read", (PyCFunction)Reader_read, METH_VARARGS,
      "read(name, buffer, dtype, offsets=None, counts=None): into a writable buffer" },
    { "verify", (PyCFunction)Reader_verify, METH_NOARGS, "recomputes every checksum" },
    { "close", (PyCFunction)Reader_close, METH_NOARGS, "closes the files" },
    { NULL, NULL, 0, NULL }
};

PyTypeObject pyckpt_ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mpickpt._mpickpt.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(prefix, check_files=True): a read-only view of a checkpoint, no MPI",
    .tp_methods = Reader_methods,
    .tp_init = (initproc)Reader_init,
    .tp_new = PyType_GenericNew,
};

int pyckpt_reader_init(PyObject *module)
{
    if (PyType_Ready(&pyckpt_ReaderType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Reader", (PyObject *)&pyckpt_ReaderType);
}
