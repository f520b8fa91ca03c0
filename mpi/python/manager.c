/* mpickpt._mpickpt.Manager and Training: the checkpoint manager and the worker training state
 * (mpickpt/manager.h) over a Saver object, which they keep alive. Every method but the local
 * getters is collective over the saver's communicator. */
#include "pyckpt.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *saver; /* the Saver object (a reference) */
    ckpt_manager *m;
} ManagerObject;

typedef struct {
    PyObject_HEAD
    PyObject *saver;
    ckpt_training *t;
} TrainingObject;

/* The restore's result; with `m`, the names it compared ('missing', 'unexpected': the C lists
 * of ckpt_manager_restore_names, empty when it compared none). */
static PyObject *restored_dict(const ckpt_manager_restore_result *r, const ckpt_manager *m)
{
    const ckpt_name_list *miss = NULL, *unexp = NULL;
    ckpt_manager_restore_names(m, &miss, &unexp);
    PyObject *lm = pyckpt_names(miss);
    PyObject *lu = lm ? pyckpt_names(unexp) : NULL;
    if (!lu) {
        Py_XDECREF(lm);
        return NULL;
    }
    return Py_BuildValue("{s:O,s:s,s:L,s:L,s:L,s:O,s:i,s:i,s:N,s:N}", "restored",
                         r->restored ? Py_True : Py_False, "prefix", r->prefix, "save_counter",
                         (long long)r->save_counter, "epoch", (long long)r->epoch, "step",
                         (long long)r->step, "end_of_epoch", r->end_of_epoch ? Py_True : Py_False,
                         "world_size", (int)r->world_size, "skipped", r->skipped, "missing", lm,
                         "unexpected", lu);
}

/* One state entry as a dict (a new reference); `levels` are its levels as a list of names. */
static PyObject *entry_dict(const ckpt_state_entry *e)
{
    unsigned lv = e->levels ? e->levels : CKPT_LEVEL_PERSISTENT;
    PyObject *d = Py_BuildValue("{s:s,s:L,s:L,s:L,s:d,s:K,s:O,s:O,s:[ss]}", "prefix", e->prefix,
                                "save_counter", (long long)e->save_counter, "epoch",
                                (long long)e->epoch, "step", (long long)e->step, "timestamp",
                                e->timestamp, "bytes", (unsigned long long)e->bytes,
                                "end_of_epoch", e->end_of_epoch ? Py_True : Py_False,
                                "preserved", e->preserved ? Py_True : Py_False, "levels",
                                (lv & CKPT_LEVEL_PERSISTENT) ? "persistent" : "",
                                (lv & CKPT_LEVEL_CACHE) ? "cache" : "");
    /* the levels as a list of names: the empty ones out */
    PyObject *lvs = d ? PyDict_GetItemString(d, "levels") : NULL;
    for (Py_ssize_t k = lvs ? PyList_GET_SIZE(lvs) : 0; k-- > 0;)
        if (PyUnicode_GET_LENGTH(PyList_GET_ITEM(lvs, k)) == 0)
            PySequence_DelItem(lvs, k);
    return d;
}

static PyObject *state_dict(const ckpt_state *st)
{
    PyObject *entries = PyList_New(0);
    if (!entries)
        return NULL;
    for (size_t i = 0; st && i < st->num_entries; i++) {
        PyObject *d = entry_dict(&st->entries[i]);
        if (!d || PyList_Append(entries, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(entries);
            return NULL;
        }
        Py_DECREF(d);
    }
    PyObject *out = Py_BuildValue("{s:s,s:L,s:O}", "latest", st ? st->latest : "",
                                  "save_counter", st ? (long long)st->save_counter : 0LL,
                                  "entries", entries);
    Py_DECREF(entries);
    return out;
}

/* ckpt_manager_restorable() as {"entries": [entry dict + "restart"], "start": index or None}. */
static PyObject *restorable_dict(const ckpt_manager_restorable_list *l)
{
    static const char *const restart[] = { "normal", "pinned", "behind pin" };
    PyObject *entries = PyList_New(0);
    if (!entries)
        return NULL;
    for (size_t i = 0; i < l->num_entries; i++) {
        const ckpt_manager_restorable_entry *r = &l->entries[i];
        PyObject *d = entry_dict(&r->entry);
        PyObject *word = PyUnicode_FromString(
            r->restart >= 0 && r->restart <= CKPT_RESTART_BEHIND_PIN ? restart[r->restart] : "?");
        int bad = !d || !word || PyDict_SetItemString(d, "restart", word) < 0 ||
                  PyList_Append(entries, d) < 0;
        Py_XDECREF(word);
        Py_XDECREF(d);
        if (bad) {
            Py_DECREF(entries);
            return NULL;
        }
    }
    PyObject *start = NULL;
    if (l->start < l->num_entries) {
        start = PyLong_FromSize_t(l->start);
    } else {
        Py_INCREF(Py_None); /* (Py_NewRef is 3.10's) */
        start = Py_None;
    }
    PyObject *out = start ? Py_BuildValue("{s:O,s:O}", "entries", entries, "start", start) : NULL;
    Py_XDECREF(start);
    Py_DECREF(entries);
    return out;
}

/* The checkpoints of a directory, read-only and without its lock (a load while the job that owns
 * the directory runs): the state file, or a scan of its indexes when the state file is missing or
 * damaged (as `mpickpt list` does). */
PyObject *pyckpt_read_state(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    const char *dir = PyBytes_AS_STRING(bytes);
    ckpt_state *st = NULL;
    int scanned = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_state_read(&st, dir);
    if (rc != CKPT_OK) {
        ckpt_state_free(st);
        st = NULL;
        scanned = 1;
        rc = ckpt_state_scan(&st, dir);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc != CKPT_OK) {
        ckpt_state_free(st);
        return pyckpt_raise(rc, NULL);
    }
    PyObject *d = state_dict(st);
    ckpt_state_free(st);
    if (d && PyDict_SetItemString(d, "scanned", scanned ? Py_True : Py_False) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* ckpt_newest_restorable(): the checkpoint a restore of the directory starts from, read-only. */
PyObject *pyckpt_newest(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    char out[8192];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_newest_restorable(out, sizeof out, PyBytes_AS_STRING(bytes));
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return PyUnicode_DecodeFSDefault(out);
}

/* ---- Manager ---------------------------------------------------------------------------------- */

static int Manager_init(ManagerObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "saver",         "directory",          "max_to_keep",
                             "keep_every_n_hours", "min_step_interval", "name",
                             "skip_missing_per_rank", "cache_dir",      "redundancy",
                             "persist_every", "cache_max_to_keep",  "failure_group",
                             "lock_wait",     NULL };
    PyObject *saver;
    PyObject *dir_obj, *cache_obj = NULL;
    int keep = 5, skip = 0, every = 0, cache_keep = 0;
    double hours = 0, lock_wait = 0;
    long long minstep = 0;
    const char *name = NULL, *redundancy = NULL, *group = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|idLzpO&ziizd:Manager", names, &saver,
                                     PyUnicode_FSConverter, &dir_obj, &keep, &hours, &minstep,
                                     &name, &skip, PyUnicode_FSConverter, &cache_obj, &redundancy,
                                     &every, &cache_keep, &group, &lock_wait))
        return -1;
    int red = CKPT_REDUNDANCY_DEFAULT;
    if (redundancy && strcmp(redundancy, "none") == 0)
        red = CKPT_REDUNDANCY_NONE;
    else if (redundancy && strcmp(redundancy, "partner") == 0)
        red = CKPT_REDUNDANCY_PARTNER;
    else if (redundancy) {
        PyErr_Format(PyExc_ValueError, "redundancy must be 'none' or 'partner', not '%s'",
                     redundancy);
        Py_DECREF(dir_obj);
        Py_XDECREF(cache_obj);
        return -1;
    }
    ckpt_saver *s = pyckpt_saver_get(saver);
    if (!s || self->m) {
        if (s)
            PyErr_SetString(PyExc_RuntimeError, "Manager.__init__ called twice");
        Py_DECREF(dir_obj);
        Py_XDECREF(cache_obj);
        return -1;
    }
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = keep;
    o.keep_every_n_hours = hours;
    o.min_step_interval = minstep;
    o.name = name;
    o.skip_missing_per_rank = skip;
    o.cache_dir = cache_obj ? PyBytes_AS_STRING(cache_obj) : NULL;
    o.redundancy = red;
    o.persist_every = every;
    o.cache_max_to_keep = cache_keep;
    o.failure_group = group;
    o.lock_wait_seconds = lock_wait; /* 0: MPICKPT_LOCK_WAIT; < 0: no wait */
    const char *dir = PyBytes_AS_STRING(dir_obj);
    int rc;
    ckpt_manager *m = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_manager_create(&m, s, dir, &o);
    Py_END_ALLOW_THREADS
    Py_DECREF(dir_obj);
    Py_XDECREF(cache_obj);
    if (rc != CKPT_OK) {
        pyckpt_raise(rc, NULL);
        return -1;
    }
    self->m = m;
    Py_INCREF(saver);
    self->saver = saver;
    return 0;
}

/* The manager, usable only while its saver is open. */
static int manager_ready(ManagerObject *o)
{
    if (!o->m) {
        PyErr_SetString(PyExc_ValueError, "the manager is closed");
        return -1;
    }
    return pyckpt_saver_get(o->saver) ? 0 : -1;
}

static void manager_free(ManagerObject *o)
{
    if (o->m) {
        ckpt_manager *m = o->m;
        o->m = NULL;
        Py_BEGIN_ALLOW_THREADS
        ckpt_manager_free(m); /* waits for a save in flight that it started */
        Py_END_ALLOW_THREADS
    }
}

static void Manager_dealloc(ManagerObject *self)
{
    manager_free(self);
    Py_CLEAR(self->saver);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Manager_save(ManagerObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "epoch", "step", "end_of_epoch", "force", "error", "check", NULL };
    long long epoch = 0, step = 0;
    int eoe = 0, force = 0;
    PyObject *error = Py_None, *check = Py_None;
    ckpt_error err;
    ckpt_manager_save_options so;
    if (manager_ready(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "|LLpp$OO:save", names, &epoch, &step, &eoe,
                                     &force, &error, &check) ||
        pyckpt_save_options(error, check, &err, &so) < 0)
        return NULL;
    ckpt_manager_save_info si = { epoch, step, eoe, force };
    char out[4400] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_manager_save_ex(out, sizeof out, self->m, &si, &so);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    if (!out[0])
        Py_RETURN_NONE; /* skipped (min_step_interval) */
    return PyUnicode_DecodeFSDefault(out);
}

/* The caller's error, check and leniency of a restore (error=, check=, lenient=) into `o`. */
static int restore_options(PyObject *error, PyObject *check, int lenient, ckpt_error *err,
                           ckpt_manager_restore_options *o)
{
    ckpt_manager_restore_options init = CKPT_MANAGER_RESTORE_OPTIONS_INIT;
    *o = init;
    o->lenient = lenient;
    return pyckpt_caller(error, check, err, &o->error, &o->check);
}

static PyObject *Manager_restore_or_initialize(ManagerObject *self, PyObject *args,
                                               PyObject *kw)
{
    static char *names[] = { "strict", "error", "check", "lenient", NULL };
    int strict = 1, lenient = 0;
    PyObject *error = Py_None, *check = Py_None;
    ckpt_error err;
    ckpt_manager_restore_options o;
    if (manager_ready(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "|$pOOp:restore_or_initialize", names, &strict,
                                     &error, &check, &lenient) ||
        restore_options(error, check, lenient, &err, &o) < 0)
        return NULL;
    ckpt_manager_set_strict(self->m, strict);
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_manager_restore_ex(&r, self->m, &o);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return restored_dict(&r, self->m);
}

/* restore(step=None, save_counter=None): exactly one of them; the manager's rules, no fallback. */
static PyObject *Manager_restore(ManagerObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "step", "save_counter", "strict", "error", "check", "lenient", NULL };
    PyObject *step = Py_None, *counter = Py_None, *error = Py_None, *check = Py_None;
    int strict = 1, lenient = 0;
    ckpt_error err;
    ckpt_manager_restore_options o;
    if (manager_ready(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "|$OOpOOp:restore", names, &step, &counter,
                                     &strict, &error, &check, &lenient) ||
        restore_options(error, check, lenient, &err, &o) < 0)
        return NULL;
    if ((step == Py_None) == (counter == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "restore() takes exactly one of step, save_counter");
        return NULL;
    }
    long long v = PyLong_AsLongLong(step != Py_None ? step : counter);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    ckpt_manager_set_strict(self->m, strict);
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    o.which = step != Py_None ? CKPT_MANAGER_RESTORE_STEP : CKPT_MANAGER_RESTORE_COUNTER;
    o.value = v;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_manager_restore_ex(&r, self->m, &o);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return restored_dict(&r, self->m);
}

static PyObject *Manager_restorable(ManagerObject *self, PyObject *noargs)
{
    (void)noargs;
    if (manager_ready(self) < 0)
        return NULL;
    ckpt_manager_restorable_list *l = NULL;
    int rc = ckpt_manager_restorable(&l, self->m); /* under the manager's lock: no GIL release */
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    PyObject *d = restorable_dict(l);
    ckpt_manager_restorable_free(l);
    return d;
}

static PyObject *Manager_latest(ManagerObject *self, PyObject *noargs)
{
    (void)noargs;
    if (manager_ready(self) < 0)
        return NULL;
    char out[4400];
    int rc = ckpt_manager_latest(self->m, out, sizeof out);
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return PyUnicode_DecodeFSDefault(out);
}

/* The manager's kept checkpoints as a dict: a copy, since an async save's commit may replace
 * them at any time (the writer thread does not need the GIL). */
static PyObject *kept_dict(ckpt_manager *m)
{
    ckpt_state *st = NULL;
    int rc = ckpt_manager_state_copy(&st, m);
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    PyObject *d = state_dict(st);
    ckpt_state_free(st);
    return d;
}

static PyObject *Manager_state(ManagerObject *self, PyObject *noargs)
{
    (void)noargs;
    if (manager_ready(self) < 0)
        return NULL;
    return kept_dict(self->m);
}

static PyObject *Manager_close(ManagerObject *self, PyObject *noargs)
{
    (void)noargs;
    manager_free(self);
    Py_RETURN_NONE;
}

static PyMethodDef Manager_methods[] = {
    { "save", (PyCFunction)(void (*)(void))Manager_save, METH_VARARGS | METH_KEYWORDS,
      "save(epoch=0, step=0, end_of_epoch=False, force=False, *, error=None, check=None) -> "
      "path, or None when skipped" },
    { "restore_or_initialize", (PyCFunction)(void (*)(void))Manager_restore_or_initialize,
      METH_VARARGS | METH_KEYWORDS,
      "restore_or_initialize(*, strict=True, error=None, check=None, lenient=False): the newest "
      "valid checkpoint -> info (restored False: none; 'missing' and 'unexpected' names)" },
    { "restore", (PyCFunction)(void (*)(void))Manager_restore, METH_VARARGS | METH_KEYWORDS,
      "restore(*, step=None, save_counter=None, strict=True, error=None, check=None, "
      "lenient=False) -> info: that checkpoint under the "
      "manager's rules (pin, drop, levels), never another" },
    { "restorable", (PyCFunction)Manager_restorable, METH_NOARGS,
      "the checkpoints a restore may use, oldest first: {'entries': [...], 'start': index of the "
      "one restore_or_initialize tries first, or None}" },
    { "latest", (PyCFunction)Manager_latest, METH_NOARGS, "the latest checkpoint's path, or ''" },
    { "state", (PyCFunction)Manager_state, METH_NOARGS, "the kept checkpoints (a dict)" },
    { "close", (PyCFunction)Manager_close, METH_NOARGS,
      "frees the manager, after a save in flight that it started" },
    { NULL, NULL, 0, NULL }
};

PyTypeObject pyckpt_ManagerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mpickpt._mpickpt.Manager",
    .tp_basicsize = sizeof(ManagerObject),
    .tp_dealloc = (destructor)Manager_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Manager(saver, directory, max_to_keep=5, keep_every_n_hours=0.0, "
              "min_step_interval=0, name=None, skip_missing_per_rank=False, ..., "
              "lock_wait=0.0); collective",
    .tp_methods = Manager_methods,
    .tp_init = (initproc)Manager_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Training --------------------------------------------------------------------------------- */

static int Training_init(TrainingObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "saver", "directory", "max_to_keep", "skip_missing_per_rank",
                             "lock_wait", NULL };
    PyObject *saver, *dir_obj;
    int keep = 1, skip = 0;
    double lock_wait = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|ipd:Training", names, &saver,
                                     PyUnicode_FSConverter, &dir_obj, &keep, &skip, &lock_wait))
        return -1;
    ckpt_saver *s = pyckpt_saver_get(saver);
    if (!s || self->t) {
        if (s)
            PyErr_SetString(PyExc_RuntimeError, "Training.__init__ called twice");
        Py_DECREF(dir_obj);
        return -1;
    }
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = keep;
    o.skip_missing_per_rank = skip;
    o.lock_wait_seconds = lock_wait;
    const char *dir = PyBytes_AS_STRING(dir_obj);
    int rc;
    ckpt_training *t = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_training_create(&t, s, dir, &o);
    Py_END_ALLOW_THREADS
    Py_DECREF(dir_obj);
    if (rc != CKPT_OK) {
        pyckpt_raise(rc, NULL);
        return -1;
    }
    self->t = t;
    Py_INCREF(saver);
    self->saver = saver;
    return 0;
}

static int training_ready(TrainingObject *o)
{
    if (!o->t) {
        PyErr_SetString(PyExc_ValueError, "the training state is closed");
        return -1;
    }
    return pyckpt_saver_get(o->saver) ? 0 : -1;
}

static void training_free(TrainingObject *o)
{
    if (o->t) {
        ckpt_training *t = o->t;
        o->t = NULL;
        Py_BEGIN_ALLOW_THREADS
        ckpt_training_free(t);
        Py_END_ALLOW_THREADS
    }
}

static void Training_dealloc(TrainingObject *self)
{
    training_free(self);
    Py_CLEAR(self->saver);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Training_back_up(TrainingObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "epoch", "step", "end_of_epoch", "error", "check", NULL };
    long long epoch = 0, step = 0;
    int eoe = 1;
    PyObject *error = Py_None, *check = Py_None;
    ckpt_error err;
    ckpt_manager_save_options so;
    if (training_ready(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "L|Lp$OO:back_up", names, &epoch, &step, &eoe,
                                     &error, &check) ||
        pyckpt_save_options(error, check, &err, &so) < 0)
        return NULL;
    /* ckpt_training_back_up() with the options: its manager's save, forced */
    ckpt_manager_save_info si = { epoch, step, eoe, 1 };
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_manager_save_ex(NULL, 0, ckpt_training_manager(self->t), &si, &so);
    Py_END_ALLOW_THREADS
    return pyckpt_none_or_raise(rc);
}

static PyObject *Training_restore(TrainingObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "strict", "error", "check", "lenient", NULL };
    int strict = 1, lenient = 0;
    PyObject *error = Py_None, *check = Py_None;
    ckpt_error err;
    ckpt_manager_restore_options o;
    if (training_ready(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "|$pOOp:restore", names, &strict, &error, &check,
                                     &lenient) ||
        restore_options(error, check, lenient, &err, &o) < 0)
        return NULL;
    ckpt_manager_set_strict(ckpt_training_manager(self->t), strict);
    int restored = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_training_restore_ex(&restored, self->t, &o);
    Py_END_ALLOW_THREADS
    if (rc != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if ((rc = ckpt_training_restore_result(&r, self->t)) != CKPT_OK)
        return pyckpt_raise(rc, NULL);
    return restored_dict(&r, ckpt_training_manager(self->t));
}

static PyObject *Training_initial_epoch(TrainingObject *self, PyObject *args)
{
    long long initial = 0;
    if (training_ready(self) < 0 || !PyArg_ParseTuple(args, "|L:initial_epoch", &initial))
        return NULL;
    return PyLong_FromLongLong((long long)ckpt_training_initial_epoch(self->t, initial));
}

static PyObject *Training_initial_step(TrainingObject *self, PyObject *args)
{
    long long initial = 0;
    if (training_ready(self) < 0 || !PyArg_ParseTuple(args, "|L:initial_step", &initial))
        return NULL;
    return PyLong_FromLongLong((long long)ckpt_training_initial_step(self->t, initial));
}

static PyObject *Training_delete_backup(TrainingObject *self, PyObject *noargs)
{
    (void)noargs;
    if (training_ready(self) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ckpt_training_delete_backup(self->t);
    Py_END_ALLOW_THREADS
    return pyckpt_none_or_raise(rc);
}

static PyObject *Training_state(TrainingObject *self, PyObject *noargs)
{
    (void)noargs;
    if (training_ready(self) < 0)
        return NULL;
    return kept_dict(ckpt_training_manager(self->t));
}

static PyObject *Training_close(TrainingObject *self, PyObject *noargs)
{
    (void)noargs;
    training_free(self);
    Py_RETURN_NONE;
}

static PyMethodDef Training_methods[] = {
    { "back_up", (PyCFunction)(void (*)(void))Training_back_up, METH_VARARGS | METH_KEYWORDS,
      "back_up(epoch, step=0, end_of_epoch=True, *, error=None, check=None)" },
    { "restore", (PyCFunction)(void (*)(void))Training_restore, METH_VARARGS | METH_KEYWORDS,
      "restore(*, strict=True, error=None, check=None, lenient=False) -> info (restored False: "
      "none)" },
    { "initial_epoch", (PyCFunction)Training_initial_epoch, METH_VARARGS,
      "initial_epoch(initial=0)" },
    { "initial_step", (PyCFunction)Training_initial_step, METH_VARARGS,
      "initial_step(initial=0)" },
    { "delete_backup", (PyCFunction)Training_delete_backup, METH_NOARGS,
      "removes the backup directory" },
    { "state", (PyCFunction)Training_state, METH_NOARGS, "the kept backups (a dict)" },
    { "close", (PyCFunction)Training_close, METH_NOARGS, "frees the training state" },
    { NULL, NULL, 0, NULL }
};

PyTypeObject pyckpt_TrainingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mpickpt._mpickpt.Training",
    .tp_basicsize = sizeof(TrainingObject),
    .tp_dealloc = (destructor)Training_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Training(saver, directory, max_to_keep=1, skip_missing_per_rank=False): the "
              "worker training state (chief/ and workertemp_<rank>); collective",
    .tp_methods = Training_methods,
    .tp_init = (initproc)Training_init,
    .tp_new = PyType_GenericNew,
};

int pyckpt_manager_init(PyObject *module)
{
    if (PyType_Ready(&pyckpt_ManagerType) < 0 || PyType_Ready(&pyckpt_TrainingType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "Manager", (PyObject *)&pyckpt_ManagerType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Training", (PyObject *)&pyckpt_TrainingType);
}
