/*
 * The manager's lifetime over the saver it borrows, through the saver's public API only
 * (include/mpickpt/saver.h): a close callback (ckpt_saver_on_close) tells the manager when the
 * saver is closed first, and a guard of the manager's own is the payload of its commit hooks, so
 * that a manager freed while a save may still call them (its saver's close timed out and left
 * that save running) withdraws itself, or, when a hook runs at that moment, is released by the
 * hook's thread when the hook returns. docs/api.md ("Saver and manager, in either order of
 * closes") states the contract; tests/mpi/test_close_order.c tests it.
 */
#include "manager_internal.h"

#include "fault.h"

#include <stdlib.h>

/*
 * The payload of a save's commit hooks. One save is in flight at a time: the manager's hooks of
 * that save are kept here (ckpt__mgr_guard_hooks, before the save; the save copies the struct).
 */
struct ckpt__mgr_guard {
    pthread_mutex_t lock;
    ckpt_manager *m; /* NULL once withdrawn: the hooks do nothing */
    int running;     /* a hook runs now */
    int freed;       /* ckpt_manager_free came meanwhile: the hook's thread releases `m` */
    atomic_int gone; /* the same, for MPICKPT_FAULT=<rank>:mgr-hook:hold (tests) */
    int (*prep)(const char *, int64_t, ckpt_commit_vote *, void *);
    int (*committed)(MPI_Comm, const char *, int64_t, const ckpt_commit_vote *, void *);
};

/* The saver was closed first: nothing of it may be used afterwards. */
static void saver_closed(int save_running, void *payload)
{
    ckpt_manager *m = payload;
    m->on_close = 0;
    m->saver_state = save_running ? CKPT__SAVER_LEFT_RUNNING : CKPT__SAVER_CLOSED;
    if (!save_running) /* freed; else kept, unused, for the hooks of the save left running */
        m->saver = NULL;
}

int ckpt__mgr_watch_saver(ckpt_manager *m)
{
    m->guard = calloc(1, sizeof *m->guard);
    if (!m->guard)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    pthread_mutex_init(&m->guard->lock, NULL);
    atomic_init(&m->guard->gone, 0);
    m->guard->m = m;
    int rc = ckpt_saver_on_close(m->saver, saver_closed, m);
    m->on_close = rc == CKPT_OK;
    return rc;
}

int ckpt__mgr_saver_open(const ckpt_manager *m, const char *fn)
{
    if (m->saver_state == CKPT__SAVER_OPEN)
        return CKPT_OK;
    return ckpt__error(CKPT_EINVAL, "%s: the saver of the manager of %s was closed (only "
                                    "ckpt_manager_free() and the state's accessors remain)",
                       fn, m->dir);
}

int ckpt__mgr_unwatch_saver(ckpt_manager *m)
{
    if (m->saver_state == CKPT__SAVER_OPEN) {
        /* A background save started by this manager calls it back after its commit (the state
         * file, retention): wait for it, so that the checkpoint is listed and nothing uses freed
         * memory. */
        ckpt_saver_wait(m->saver);
        if (m->on_close)
            (void)ckpt_saver_on_close_remove(m->saver, saver_closed, m);
        return 0;
    }
    if (m->saver_state == CKPT__SAVER_CLOSED || !m->guard)
        return 0; /* the close waited for the save: no hook runs again */
    /* the save left running may still call the hooks: withdrawn, unless one runs now; the guard
     * stays with that save (and the process's exit), like the saver */
    struct ckpt__mgr_guard *g = m->guard;
    m->guard = NULL;
    pthread_mutex_lock(&g->lock);
    int running = g->running;
    if (running) {
        g->freed = 1;
        atomic_store(&g->gone, 1);
    } else {
        g->m = NULL;
    }
    pthread_mutex_unlock(&g->lock);
    if (running)
        ckpt__log(CKPT_LOG_WARN, "the manager of %s is released when the commit hook of the save "
                                 "its saver's close left running returns",
                  m->dir);
    return running;
}

void ckpt__mgr_guard_free(struct ckpt__mgr_guard *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static ckpt_manager *guard_enter(struct ckpt__mgr_guard *g)
{
    pthread_mutex_lock(&g->lock);
    ckpt_manager *m = g->m;
    g->running = m != NULL;
    pthread_mutex_unlock(&g->lock);
    return m;
}

static void guard_leave(struct ckpt__mgr_guard *g)
{
    pthread_mutex_lock(&g->lock);
    g->running = 0;
    ckpt_manager *freed = g->freed ? g->m : NULL;
    if (freed)
        g->m = NULL;
    pthread_mutex_unlock(&g->lock);
    if (freed) /* its guard is no longer its own (ckpt__mgr_unwatch_saver): kept */
        ckpt__mgr_release(freed);
}

static int guarded_prep(const char *prefix, int64_t counter, ckpt_commit_vote *v, void *payload)
{
    struct ckpt__mgr_guard *g = payload;
    ckpt_manager *m = guard_enter(g);
    if (!m)
        return CKPT_OK; /* withdrawn: no values, the others' second halves add nothing */
    int rc = g->prep(prefix, counter, v, m);
    /* tests (tests/mpi/test_close_order.c): held here, the hook running, until the free */
    ckpt__fault_hold(m->rank, "mgr-hook", &g->gone);
    guard_leave(g);
    return rc;
}

static int guarded_committed(MPI_Comm comm, const char *prefix, int64_t counter,
                             const ckpt_commit_vote *v, void *payload)
{
    struct ckpt__mgr_guard *g = payload;
    ckpt_manager *m = guard_enter(g);
    if (!m)
        return CKPT_OK;
    int rc = g->committed(comm, prefix, counter, v, m);
    guard_leave(g);
    return rc;
}

void ckpt__mgr_guard_hooks(ckpt_manager *m, ckpt_commit_hooks *h)
{
    m->guard->prep = h->prepare;
    m->guard->committed = h->committed;
    h->prepare = h->prepare ? guarded_prep : NULL;
    h->committed = h->committed ? guarded_committed : NULL;
    h->payload = m->guard;
}
