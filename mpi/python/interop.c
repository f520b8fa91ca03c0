/* mpickpt._mpickpt.export() and import_tf(): ckpt_export() and ckpt_import_tf()
 * (include/mpickpt/interop.h) for the Python package's mpickpt.export() and mpickpt.import_tf().
 * Single-process, no MPI; both run with the GIL released. */
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
    static char *names[] = { "prefix", "out", "format", "overwrite", "only", "strip_prefix",
                             NULL };
    PyObject *prefix = NULL, *out = NULL, *only_obj = Py_None;
    const char *format_name, *strip = NULL;
    int overwrite = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&s|pOz:export", names, PyUnicode_FSConverter,
                                     &prefix, PyUnicode_FSConverter, &out, &format_name,
                                     &overwrite, &only_obj, &strip)) {
        Py_XDECREF(prefix);
        Py_XDECREF(out);
        return NULL;
    }
    PyObject *result = NULL, *only = NULL;
    const char **onlies = NULL;
    Py_ssize_t num_only = 0;
    /* only: a sequence of str (the package passes a tuple); held in a tuple of our own while the
     * GIL is released */
    if (only_obj != Py_None) {
        only = PySequence_Tuple(only_obj);
        if (!only)
            goto done;
        num_only = PyTuple_GET_SIZE(only);
        onlies = PyMem_Calloc((size_t)num_only + 1, sizeof *onlies);
        if (!onlies) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < num_only; i++) {
            PyObject *item = PyTuple_GET_ITEM(only, i);
            if (!PyUnicode_Check(item)) {
                PyErr_Format(PyExc_TypeError, "only: expected str, got %.80s",
                             Py_TYPE(item)->tp_name);
                goto done;
            }
            if (!(onlies[i] = PyUnicode_AsUTF8(item)))
                goto done;
        }
    }
    ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
    ckpt_interop_totals totals;
    int rc = ckpt_export_format_from_name(&opts.format, format_name);
    if (rc == CKPT_OK) {
        opts.overwrite = overwrite;
        opts.only = onlies;
        opts.num_only = (size_t)num_only;
        opts.strip_prefix = strip;
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
done:
    PyMem_Free(onlies);
    Py_XDECREF(only);
    Py_DECREF(prefix);
    Py_DECREF(out);
    return result;
}

/* ckpt_interop_cb of import_tf: the skipped tensors, gathered while the GIL is released. */
typedef struct skipped_list {
    char **names, **dtypes, **reasons;
    size_t n;
    int oom;
} skipped_list;

static void on_import_item(const ckpt_interop_item *item, void *payload)
{
    skipped_list *sk = payload;
    if (!item->skipped || sk->oom)
        return;
    char **a = realloc(sk->names, (sk->n + 1) * sizeof *a);
    if (a)
        sk->names = a;
    char **b = a ? realloc(sk->dtypes, (sk->n + 1) * sizeof *b) : NULL;
    if (b)
        sk->dtypes = b;
    char **c = b ? realloc(sk->reasons, (sk->n + 1) * sizeof *c) : NULL;
    if (c)
        sk->reasons = c;
    if (!c) {
        sk->oom = 1;
        return;
    }
    a[sk->n] = strdup(item->name);
    b[sk->n] = strdup(item->dtype);
    c[sk->n] = strdup(item->reason ? item->reason : "");
    sk->n++;
    if (!a[sk->n - 1] || !b[sk->n - 1] || !c[sk->n - 1])
        sk->oom = 1;
}

static PyObject *py_import_tf(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = { "tf_prefix", "out_prefix", "skip_unsupported", "overwrite",
                             "save_counter", "epoch", "step", NULL };
    PyObject *in = NULL, *out = NULL;
    int skip = 0, overwrite = 0;
    long long counter = 0, epoch = 0, step = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|ppLLL:import_tf", names,
                                     PyUnicode_FSConverter, &in, PyUnicode_FSConverter, &out,
                                     &skip, &overwrite, &counter, &epoch, &step)) {
        Py_XDECREF(in);
        Py_XDECREF(out);
        return NULL;
    }
    ckpt_import_options opts = CKPT_IMPORT_OPTIONS_INIT;
    opts.skip_unsupported = skip;
    opts.overwrite = overwrite;
    opts.save_counter = counter;
    opts.epoch = epoch;
    opts.step = step;
    skipped_list sk;
    memset(&sk, 0, sizeof sk);
    opts.progress = on_import_item;
    opts.payload = &sk;
    ckpt_interop_totals totals;
    int rc;
    const char *i = PyBytes_AS_STRING(in), *o = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_import_tf(i, o, &opts, &totals);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *skipped = NULL;
    if (rc != CKPT_OK) {
        pyckpt_raise(rc, NULL);
    } else if (sk.oom) {
        PyErr_NoMemory();
    } else if ((skipped = PyList_New(0)) != NULL) {
        for (size_t k = 0; k < sk.n && skipped; k++) {
            PyObject *e = Py_BuildValue("{s:s,s:s,s:s}", "name", sk.names[k], "dtype",
                                        sk.dtypes[k], "reason", sk.reasons[k]);
            if (!e || PyList_Append(skipped, e) < 0)
                Py_CLEAR(skipped);
            Py_XDECREF(e);
        }
        if (skipped)
            result = Py_BuildValue("{s:n,s:K,s:N}", "tensors", (Py_ssize_t)totals.tensors,
                                   "bytes", (unsigned long long)totals.bytes, "skipped", skipped);
    }
    for (size_t k = 0; k < sk.n; k++) {
        free(sk.names[k]);
        free(sk.dtypes[k]);
        free(sk.reasons[k]);
    }
    free(sk.names);
    free(sk.dtypes);
    free(sk.reasons);
    Py_DECREF(in);
    Py_DECREF(out);
    return result;
}

static PyMethodDef interop_methods[] = {
    { "import_tf", (PyCFunction)(void (*)(void))py_import_tf, METH_VARARGS | METH_KEYWORDS,
      "import_tf(tf_prefix, out_prefix, skip_unsupported=False, overwrite=False, save_counter=0, "
      "epoch=0, step=0) -> {tensors, bytes, skipped}: ckpt_import_tf()" },
    { "export", (PyCFunction)(void (*)(void))py_export, METH_VARARGS | METH_KEYWORDS,
      "export(prefix, out, format, overwrite=False, only=None, strip_prefix=None) -> {tensors, "
      "bytes, files}: ckpt_export()" },
    { NULL, NULL, 0, NULL }
};

int pyckpt_interop_init(PyObject *module)
{
    return PyModule_AddFunctions(module, interop_methods);
}
