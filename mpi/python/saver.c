/* mpickpt._mpickpt.Saver: a collective saver over an mpi4py communicator. Registrations borrow
 * Python buffers zero-copy (NumPy arrays; the Python layer turns PyTorch CPU tensors into NumPy
 * views of the same memory): the Py_buffer is held until clear() or close(), so the memory the
 * C library reads at save and writes at restore stays alive. Blobs (per-rank bytes) live in C
 * storage of the Saver: set before a save, read after a restore. */
#include "pyckpt.h"

#include <stdlib.h>
#include <string.h>

typedef struct blob {
    char *name;
    uint8_t *out; /* what the next save stores */
    size_t out_len;
    uint8_t *in; /* what the last restore found for this rank */
    size_t in_len;
    int got;
} blob;

typedef struct {
    PyObject_HEAD
    ckpt_saver *s;
    int rank, size;
    Py_buffer *views; /* one per buffer registration, released by clear() */
    size_t nviews, capviews;
    blob **blobs;
    size_t nblobs;
} SaverObject;

static int blob_save_cb(const void **data, size_t *len, void *payload)
{
    blob *b = payload;
    *data = b->out ? (const void *)b->out : (const void *)"";
    *len = b->out_len;
    return CKPT_OK;
}

static int blob_restore_cb(const void *data, size_t len, void *payload)
{
    blob *b = payload;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return CKPT_ENOMEM;
    if (len)
        memcpy(copy, data, len);
    free(b->in);
    b->in = copy;
    b->in_len = len;
    b->got = 1;
    return CKPT_OK;
}

static void release_all(SaverObject *o)
{
    for (size_t i = 0; i < o->nviews; i++)
        PyBuffer_Release(&o->views[i]);
    o->nviews = 0;
    for (size_t i = 0; i < o->nblobs; i++) {
        free(o->blobs[i]->name);
        free(o->blobs[i]->out);
        free(o->blobs[i]->in);
        free(o->blobs[i]);
    }
    o->nblobs = 0;
}

static int check_open(SaverObject *o)
{
    if (!o->s) {
        PyErr_SetString(PyExc_ValueError, "the saver is closed");
        return -1;
    }
    return 0;
}

ckpt_saver *pyckpt_saver_get(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &pyckpt_SaverType)) {
        PyErr_SetString(PyExc_TypeError, "expected a mpickpt._mpickpt.Saver");
        return NULL;
    }
    SaverObject *o = (SaverObject *)obj;
    return check_open(o) < 0 ? NULL : o->s;
}

static int Saver_init(SaverObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "comm",           "layout",        "async_save",    "collective_io",
                             "max_shard_bytes", "pack_max_bytes", "close_timeout",
                             "check_replicas", "replica_mismatch", NULL };
    PyObject *co = Py_None;
    int layout = 0, async = 0, coll = 0;
    long long shard = 0, pack = 0;
    double timeout = 0;
    const char *check = NULL, *mismatch = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OippLLdzz:Saver", names, &co, &layout, &async,
                                     &coll, &shard, &pack, &timeout, &check, &mismatch))
        return -1;
    /* None: MPICKPT_CHECK_REPLICAS / MPICKPT_REPLICA_MISMATCH, else first / error */
    int check_v = CKPT_CHECK_REPLICAS_DEFAULT, mismatch_v = CKPT_REPLICA_MISMATCH_DEFAULT;
    if (check && strcmp(check, "first") == 0)
        check_v = CKPT_CHECK_REPLICAS_FIRST;
    else if (check && strcmp(check, "every") == 0)
        check_v = CKPT_CHECK_REPLICAS_EVERY;
    else if (check && strcmp(check, "off") == 0)
        check_v = CKPT_CHECK_REPLICAS_OFF;
    else if (check) {
        PyErr_Format(PyExc_ValueError, "check_replicas must be None, 'first', 'every' or 'off', "
                                       "not '%s'", check);
        return -1;
    }
    if (mismatch && strcmp(mismatch, "error") == 0)
        mismatch_v = CKPT_REPLICA_MISMATCH_ERROR;
    else if (mismatch && strcmp(mismatch, "warn") == 0)
        mismatch_v = CKPT_REPLICA_MISMATCH_WARN;
    else if (mismatch) {
        PyErr_Format(PyExc_ValueError, "replica_mismatch must be None, 'error' or 'warn', not "
                                       "'%s'", mismatch);
        return -1;
    }
    MPI_Comm comm;
    if (self->s) {
        PyErr_SetString(PyExc_RuntimeError, "Saver.__init__ called twice");
        return -1;
    }
    if (pyckpt_comm(co, &comm) < 0)
        return -1;
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = (ckpt_layout)layout;
    o.async = async;
    o.collective_io = coll;
    o.max_shard_bytes = shard;
    o.pack_max_bytes = pack;
    o.close_timeout_s = timeout;
    o.check_replicas = check_v;
    o.replica_mismatch = mismatch_v;
    int rc;
    ckpt_saver *s = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_saver_create(&s, comm, &o);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK) {
        pyckpt_raise(rc, NULL);
        return -1;
    }
    self->s = s;
    MPI_Comm_rank(comm, &self->rank);
    MPI_Comm_size(comm, &self->size);
    return 0;
}

/* Closes the C saver (waits for a save in flight). Collective; idempotent. */
static int saver_close(SaverObject *o)
{
    if (!o->s)
        return CKPT_OK;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_saver_close(o->s);
    Py_END_ALLOW_THREADS
    if (rc == CKPT_ETIMEDOUT) {
        /* the writer thread still uses the saver and the snapshot (saver.h): both are left to
         * the process's exit, and so are the buffers it may still read */
        o->s = NULL;
        o->nviews = 0;
        o->nblobs = 0;
        o->views = NULL;
        o->blobs = NULL;
        return rc;
    }
    o->s = NULL;
    release_all(o);
    return rc;
}

static void Saver_dealloc(SaverObject *self)
{
    int rc = saver_close(self);
    (void)rc; /* a failure at garbage collection has nowhere to go: close() explicitly */
    free(self->views);
    free(self->blobs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A writable C-contiguous buffer of `nelem` elements of `dtype`, kept by the saver. */
static int take_buffer(SaverObject *o, PyObject *obj, ckpt_dtype dtype, int64_t nelem,
                       const char *name, void **data)
{
    if (o->nviews == o->capviews) {
        size_t ncap = o->capviews ? 2 * o->capviews : 16;
        Py_buffer *nv = realloc(o->views, ncap * sizeof *nv);
        if (!nv) {
            PyErr_NoMemory();
            return -1;
        }
        o->views = nv;
        o->capviews = ncap;
    }
    Py_buffer *v = &o->views[o->nviews];
    if (PyObject_GetBuffer(obj, v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyObject *t, *val, *tb;
        PyErr_Fetch(&t, &val, &tb);
        PyObject *s = val ? PyObject_Str(val) : NULL;
        PyErr_Format(PyExc_ValueError,
                     "tensor '%s': needs a writable, C-contiguous buffer (%s); use "
                     "numpy.ascontiguousarray or tensor.contiguous()",
                     name, s ? PyUnicode_AsUTF8(s) : "not a buffer");
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        return -1;
    }
    size_t esize = ckpt_dtype_size(dtype);
    if ((size_t)v->itemsize != esize || (uint64_t)v->len != (uint64_t)nelem * esize) {
        PyErr_Format(PyExc_ValueError,
                     "tensor '%s': the buffer holds %zd bytes in items of %zd, its %s shape "
                     "needs %lld items of %zu",
                     name, v->len, v->itemsize, ckpt_dtype_name(dtype), (long long)nelem, esize);
        PyBuffer_Release(v);
        return -1;
    }
    *data = v->buf;
    o->nviews++;
    return 0;
}

static PyObject *register_result(SaverObject *o, int rc)
{
    if (rc != CKPT_OK) {
        PyBuffer_Release(&o->views[--o->nviews]);
        return pyckpt_raise(rc, NULL);
    }
    Py_RETURN_NONE;
}

static PyObject *Saver_add_full(SaverObject *self, PyObject *args)
{
    const char *name;
    PyObject *buf, *dto, *sho;
    ckpt_dtype dt;
    ckpt_shape sh;
    int64_t n;
    void *data;
    if (check_open(self) < 0 || !PyArg_ParseTuple(args, "sOOO:add_full", &name, &buf, &dto, &sho) ||
        pyckpt_dtype(dto, &dt) < 0 || pyckpt_shape(sho, &sh, name) < 0)
        return NULL;
    if (ckpt_shape_num_elements(&n, &sh) != CKPT_OK)
        return pyckpt_raise(CKPT_EINVAL, name);
    if (take_buffer(self, buf, dt, n, name, &data) < 0)
        return NULL;
    return register_result(self, ckpt_saver_add_full(self->s, name, dt, &sh, data));
}

static PyObject *Saver_add_slice(SaverObject *self, PyObject *args)
{
    const char *name;
    PyObject *buf, *dto, *sho, *sto, *cto;
    ckpt_dtype dt;
    ckpt_shape sh, st, ct;
    ckpt_slice sl;
    int64_t n;
    void *data;
    if (check_open(self) < 0 ||
        !PyArg_ParseTuple(args, "sOOOOO:add_slice", &name, &buf, &dto, &sho, &sto, &cto) ||
        pyckpt_dtype(dto, &dt) < 0 || pyckpt_shape(sho, &sh, name) < 0 ||
        pyckpt_shape(sto, &st, name) < 0 || pyckpt_shape(cto, &ct, name) < 0)
        return NULL;
    if (st.ndims != sh.ndims || ct.ndims != sh.ndims) {
        PyErr_Format(PyExc_ValueError, "tensor '%s': offsets and counts need %d entries", name,
                     sh.ndims);
        return NULL;
    }
    if (ckpt_slice_init(&sl, sh.ndims, st.dims, ct.dims) != CKPT_OK ||
        ckpt_slice_num_elements(&n, &sl) != CKPT_OK)
        return pyckpt_raise(CKPT_EINVAL, name);
    if (take_buffer(self, buf, dt, n, name, &data) < 0)
        return NULL;
    return register_result(self, ckpt_saver_add_slice(self->s, name, dt, &sh, &sl, data));
}

static PyObject *Saver_add_replicated(SaverObject *self, PyObject *args)
{
    const char *name;
    PyObject *buf, *dto, *sho;
    int per_component = 0;
    ckpt_dtype dt;
    ckpt_shape sh;
    int64_t n;
    void *data;
    if (check_open(self) < 0 ||
        !PyArg_ParseTuple(args, "sOOO|p:add_replicated", &name, &buf, &dto, &sho,
                          &per_component) ||
        pyckpt_dtype(dto, &dt) < 0 || pyckpt_shape(sho, &sh, name) < 0)
        return NULL;
    if (ckpt_shape_num_elements(&n, &sh) != CKPT_OK)
        return pyckpt_raise(CKPT_EINVAL, name);
    if (take_buffer(self, buf, dt, n, name, &data) < 0)
        return NULL;
    return register_result(self, ckpt_saver_add_replicated(
                                     self->s, name, dt, &sh, data,
                                     per_component ? CKPT_REPLICA_PER_COMPONENT
                                                   : CKPT_REPLICA_PRIMARY));
}

static blob *find_blob(SaverObject *o, const char *name)
{
    for (size_t i = 0; i < o->nblobs; i++)
        if (strcmp(o->blobs[i]->name, name) == 0)
            return o->blobs[i];
    PyErr_Format(PyExc_KeyError, "no blob '%s' is registered", name);
    return NULL;
}

static PyObject *Saver_add_blob(SaverObject *self, PyObject *args)
{
    const char *name;
    if (check_open(self) < 0 || !PyArg_ParseTuple(args, "s:add_blob", &name))
        return NULL;
    blob **nb = realloc(self->blobs, (self->nblobs + 1) * sizeof *nb);
    if (!nb)
        return PyErr_NoMemory();
    self->blobs = nb;
    blob *b = calloc(1, sizeof *b);
    if (!b || !(b->name = strdup(name))) {
        free(b);
        return PyErr_NoMemory();
    }
    ckpt_blob_callbacks cb = { blob_save_cb, blob_restore_cb };
    int rc = ckpt_saver_add_blob(self->s, name, &cb, b);
    if (rc != CKPT_OK) {
        free(b->name);
        free(b);
        return pyckpt_raise(rc, NULL);
    }
    self->blobs[self->nblobs++] = b;
    Py_RETURN_NONE;
}

static PyObject *Saver_set_blob(SaverObject *self, PyObject *args)
{
    const char *name;
    Py_buffer v;
    if (check_open(self) < 0 || !PyArg_ParseTuple(args, "sy*:set_blob", &name, &v))
        return NULL;
    blob *b = find_blob(self, name);
    uint8_t *copy = b ? malloc(v.len ? (size_t)v.len : 1) : NULL;
    if (b && !copy)
        PyErr_NoMemory();
    if (copy) {
        memcpy(copy, v.buf, (size_t)v.len);
        free(b->out);
        b->out = copy;
        b->out_len = (size_t)v.len;
    }
    PyBuffer_Release(&v);
    if (!copy)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Saver_get_blob(SaverObject *self, PyObject *args)
{
    const char *name;
    if (check_open(self) < 0 || !PyArg_ParseTuple(args, "s:get_blob", &name))
        return NULL;
    blob *b = find_blob(self, name);
    if (!b)
        return NULL;
    if (!b->got)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)b->in, (Py_ssize_t)b->in_len);
}

/* Forgets what the last restore gave the blobs (before the next restore). */
static PyObject *Saver_reset_blobs(SaverObject *self, PyObject *noargs)
{
    (void)noargs;
    for (size_t i = 0; i < self->nblobs; i++) {
        free(self->blobs[i]->in);
        self->blobs[i]->in = NULL;
        self->blobs[i]->in_len = 0;
        self->blobs[i]->got = 0;
    }
    Py_RETURN_NONE;
}

/* ckpt_saver_sync() with the GIL released: waits for a save in flight. */
static int sync_released(SaverObject *self)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_saver_sync(self->s);
    Py_END_ALLOW_THREADS
    return rc;
}

static PyObject *Saver_sync(SaverObject *self, PyObject *noargs)
{
    (void)noargs;
    if (check_open(self) < 0)
        return NULL;
    int rc = sync_released(self);
    return pyckpt_none_or_raise(rc);
}

/* Removes every registration, once a save in flight is done (it reads them). Its failure, if
 * any, stays pending (ckpt_saver_wait): the next save, sync or close reports it on every rank.
 * Raised here, on the ranks whose registrations changed only, it would leave the others' next
 * save in a collective these ranks no longer join. */
static PyObject *Saver_clear(SaverObject *self, PyObject *noargs)
{
    (void)noargs;
    if (check_open(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ckpt_saver_wait(self->s);
    Py_END_ALLOW_THREADS
    ckpt_saver_clear(self->s);
    release_all(self);
    Py_RETURN_NONE;
}

static int parse_info(PyObject *args, PyObject *kw, const char *fmt, const char **prefix,
                      ckpt_save_info *info)
{
    static char *names[] = { "prefix", "epoch", "step", "end_of_epoch", NULL };
    long long epoch = 0, step = 0;
    int eoe = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, names, prefix, &epoch, &step, &eoe))
        return -1;
    info->epoch = epoch;
    info->step = step;
    info->end_of_epoch = eoe;
    return 0;
}

static PyObject *Saver_save(SaverObject *self, PyObject *args, PyObject *kw)
{
    const char *prefix;
    ckpt_save_info info;
    if (check_open(self) < 0 || parse_info(args, kw, "s|LLp:save", &prefix, &info) < 0)
        return NULL;
    char out[4096] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_saver_save(self->s, prefix, &info, out, sizeof out);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return PyUnicode_DecodeFSDefault(out);
}

static PyObject *Saver_write(SaverObject *self, PyObject *args, PyObject *kw)
{
    const char *prefix;
    ckpt_save_info info;
    if (check_open(self) < 0 || parse_info(args, kw, "s|LLp:write", &prefix, &info) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_saver_write(self->s, prefix, &info);
    Py_END_ALLOW_THREADS
    return pyckpt_none_or_raise(rc);
}

static PyObject *Saver_restore(SaverObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "prefix", "skip_missing_per_rank", "strict", NULL };
    const char *prefix;
    int skip = 0, strict = 1;
    if (check_open(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "s|pp:restore", names, &prefix, &skip, &strict))
        return NULL;
    ckpt_restore_options o = CKPT_RESTORE_OPTIONS_INIT;
    ckpt_name_list *miss = NULL, *unexp = NULL;
    o.skip_missing_per_rank = skip;
    o.strict = strict;
    o.missing = &miss;
    o.unexpected = &unexp;
    ckpt_restore_info info;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_saver_restore(self->s, prefix, &o, &info);
    Py_END_ALLOW_THREADS
    PyObject *lm = rc == CKPT_OK ? pyckpt_names(miss) : NULL;
    PyObject *lu = lm ? pyckpt_names(unexp) : NULL;
    ckpt_name_list_free(miss);
    ckpt_name_list_free(unexp);
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    if (!lu) {
        Py_XDECREF(lm);
        return NULL;
    }
    return Py_BuildValue("{s:L,s:L,s:L,s:O,s:i,s:s,s:N,s:N}", "save_counter",
                         (long long)info.save_counter, "epoch", (long long)info.epoch, "step",
                         (long long)info.step, "end_of_epoch",
                         info.end_of_epoch ? Py_True : Py_False, "world_size",
                         (int)info.world_size, "layout", ckpt_layout_name(info.layout), "missing",
                         lm, "unexpected", lu);
}

/* A list of str of `l`'s names (an empty list for NULL). */
PyObject *pyckpt_names(const ckpt_name_list *l)
{
    size_t n = ckpt_name_list_size(l);
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *v = PyUnicode_DecodeUTF8(ckpt_name_list_get(l, i),
                                           (Py_ssize_t)strlen(ckpt_name_list_get(l, i)),
                                           "surrogateescape");
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

static PyObject *Saver_close(SaverObject *self, PyObject *noargs)
{
    (void)noargs;
    int rc = saver_close(self);
    return pyckpt_none_or_raise(rc);
}

static PyObject *Saver_last_metrics(SaverObject *self, PyObject *noargs)
{
    (void)noargs;
    if (check_open(self) < 0)
        return NULL;
    ckpt_saver_metrics m = CKPT_SAVER_METRICS_INIT;
    int rc = ckpt_saver_metrics_get(&m, self->s);
    if (rc == CKPT_ENOTFOUND) { /* no save committed yet */
        ckpt_error_clear(); /* kept: its own call's "no metrics" (reason no_metrics) */
        Py_RETURN_NONE;
    }
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return Py_BuildValue("{s:s,s:O,s:K,s:i,s:d,s:d,s:d,s:d,s:d}", "prefix", m.prefix, "async",
                         m.async ? Py_True : Py_False, "bytes", (unsigned long long)m.bytes,
                         "ranks", (int)m.ranks, "blocking_s", m.blocking_s, "write_s", m.write_s,
                         "agree_s", m.agree_s, "merge_s", m.merge_s, "commit_s", m.commit_s);
}

static PyObject *Saver_get_counter(SaverObject *self, void *closure)
{
    (void)closure;
    if (check_open(self) < 0)
        return NULL;
    return PyLong_FromLongLong((long long)ckpt_saver_counter(self->s));
}

static PyObject *Saver_get_rank(SaverObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->rank);
}

static PyObject *Saver_get_size(SaverObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->size);
}

static PyObject *Saver_get_closed(SaverObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->s == NULL);
}

static PyMethodDef Saver_methods[] = {
    { "add_full", (PyCFunction)Saver_add_full, METH_VARARGS,
      "add_full(name, buffer, dtype, shape): a tensor this rank owns whole" },
    { "add_slice", (PyCFunction)Saver_add_slice, METH_VARARGS,
      "add_slice(name, buffer, dtype, shape, offsets, counts): this rank's box of a tensor" },
    { "add_replicated", (PyCFunction)Saver_add_replicated, METH_VARARGS,
      "add_replicated(name, buffer, dtype, shape, per_component=False)" },
    { "add_blob", (PyCFunction)Saver_add_blob, METH_VARARGS,
      "add_blob(name): per-rank bytes, set with set_blob() before a save" },
    { "set_blob", (PyCFunction)Saver_set_blob, METH_VARARGS, "set_blob(name, bytes)" },
    { "get_blob", (PyCFunction)Saver_get_blob, METH_VARARGS,
      "get_blob(name) -> bytes this rank's blob held in the last restore, or None" },
    { "reset_blobs", (PyCFunction)Saver_reset_blobs, METH_NOARGS, "forget restored blobs" },
    { "clear", (PyCFunction)Saver_clear, METH_NOARGS,
      "waits for a save in flight, then removes every registration" },
    { "save", (PyCFunction)(void (*)(void))Saver_save, METH_VARARGS | METH_KEYWORDS,
      "save(prefix, epoch=0, step=0, end_of_epoch=False) -> prefix-N; collective" },
    { "write", (PyCFunction)(void (*)(void))Saver_write, METH_VARARGS | METH_KEYWORDS,
      "write(prefix, epoch=0, step=0, end_of_epoch=False); collective" },
    { "restore", (PyCFunction)(void (*)(void))Saver_restore, METH_VARARGS | METH_KEYWORDS,
      "restore(prefix, skip_missing_per_rank=False, strict=True) -> info (with 'missing' and "
      "'unexpected' names); collective" },
    { "sync", (PyCFunction)Saver_sync, METH_NOARGS, "waits for the save in flight" },
    { "close", (PyCFunction)Saver_close, METH_NOARGS, "waits, then frees the saver; collective" },
    { "last_metrics", (PyCFunction)Saver_last_metrics, METH_NOARGS,
      "metrics of the last committed save, or None" },
    { NULL, NULL, 0, NULL }
};

static PyGetSetDef Saver_getset[] = {
    { "counter", (getter)Saver_get_counter, NULL, "the save counter", NULL },
    { "rank", (getter)Saver_get_rank, NULL, "this rank in the saver's communicator", NULL },
    { "size", (getter)Saver_get_size, NULL, "ranks of the saver's communicator", NULL },
    { "closed", (getter)Saver_get_closed, NULL, "True once closed", NULL },
    { NULL, NULL, NULL, NULL, NULL }
};

PyTypeObject pyckpt_SaverType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mpickpt._mpickpt.Saver",
    .tp_basicsize = sizeof(SaverObject),
    .tp_dealloc = (destructor)Saver_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Saver(comm=None, layout=0, async_save=False, collective_io=False, "
              "max_shard_bytes=0, pack_max_bytes=0, close_timeout=0.0): a collective saver "
              "(mpickpt/saver.h); collective over comm",
    .tp_methods = Saver_methods,
    .tp_getset = Saver_getset,
    .tp_init = (initproc)Saver_init,
    .tp_new = PyType_GenericNew,
};

int pyckpt_saver_init(PyObject *module)
{
    if (PyType_Ready(&pyckpt_SaverType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Saver", (PyObject *)&pyckpt_SaverType);
}
