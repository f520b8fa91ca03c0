/* mpickpt._mpickpt.export(): ckpt_export() (include/mpickpt/interop.h) for the Python package's
 * mpickpt.export(). Single-process, no MPI; the export runs with the GIL released. */
#include "pyckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The paths written: a TensorFlow bundle's data shard and index, else `out` itself. A new
 * reference, or NULL with an exception set. */
static PyObject *written_files(ckpt_export_format format, PyObject *out_bytes)
{
    if (format != CKPT_EXPORT_TF)
        return Py_BuildValue("[O&]", PyUnicode_DecodeFSDefault, PyBytes_AS_STRING(out_bytes));
    const char *out = PyBytes_AS_STRING(out_bytes);
    size_t len = strlen(out) + sizeof ".data-00000-of-00001";
    char *data = malloc(len), *index = malloc(len);
    PyObject *list = NULL;
    if (data && index) {
        snprintf(data, len, "%s.data-00000-of-00001", out);
        snprintf(index, len, "%s.index", out);
        list = Py_BuildValue("[O&O&]", PyUnicode_DecodeFSDefault, data, PyUnicode_DecodeFSDefault,
                             index);
    } else {
        PyErr_NoMemory();
    }
    free(data);
    free(index);
    return list;
}

static PyObject *py_export(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = { "prefix", "out", "format", "overwrite", NULL };
    PyObject *prefix = NULL, *out = NULL;
    const char *format_name;
    int overwrite = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&s|p:export", names, PyUnicode_FSConverter,
                                     &prefix, PyUnicode_FSConverter, &out, &format_name,
                                     &overwrite)) {
        Py_XDECREF(prefix);
        Py_XDECREF(out);
        return NULL;
    }
    PyObject *result = NULL;
    ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
    ckpt_interop_totals totals;
    int rc = ckpt_export_format_from_name(&opts.format, format_name);
    if (rc == CKPT_OK) {
        opts.overwrite = overwrite;
        const char *p = PyBytes_AS_STRING(prefix), *o = PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        rc = ckpt_export(p, o, &opts, &totals);
        Py_END_ALLOW_THREADS
    }
    if (rc != CKPT_OK) {
        pyckpt_raise(rc, NULL);
    } else {
        PyObject *files = written_files(opts.format, out);
        if (files)
            result = Py_BuildValue("{s:n,s:K,s:N}", "tensors", (Py_ssize_t)totals.tensors,
                                   "bytes", (unsigned long long)totals.bytes, "files", files);
    }
    Py_DECREF(prefix);
    Py_DECREF(out);
    return result;
}

static PyMethodDef interop_methods[] = {
    { "export", (PyCFunction)(void (*)(void))py_export, METH_VARARGS | METH_KEYWORDS,
      "export(prefix, out, format, overwrite=False) -> {tensors, bytes, files}: ckpt_export()" },
    { NULL, NULL, 0, NULL }
};

int pyckpt_interop_init(PyObject *module)
{
    return PyModule_AddFunctions(module, interop_methods);
}
