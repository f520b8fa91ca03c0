/* Retention's block freeing in the background (lib/reaper.h). */
#include "reaper.h"

#include <stdlib.h>
#include <unistd.h>

/* Every descriptor handed to a reaper and not yet closed, for the fork handler. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int *g_fds;
static size_t g_n, g_cap;

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_mu);
}

/* The child never runs the reaper's thread: its copies would keep the blocks allocated. */
static void fork_child(void)
{
    for (size_t i = 0; i < g_n; i++)
        close(g_fds[i]);
    g_n = 0;
    pthread_mutex_unlock(&g_mu);
}

static void fork_setup(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Registers fds (0 when the registry cannot grow: they are closed here and now instead). */
static int track(const int *fds, size_t n)
{
    pthread_once(&g_once, fork_setup);
    pthread_mutex_lock(&g_mu);
    int ok = 1;
    if (g_n + n > g_cap) {
        size_t cap = (g_n + n) * 2;
        int *p = realloc(g_fds, cap * sizeof *p);
        if (p) {
            g_fds = p;
            g_cap = cap;
        } else {
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < n; i++)
        g_fds[g_n++] = fds[i];
    pthread_mutex_unlock(&g_mu);
    return ok;
}

/* Unregisters and closes one descriptor. */
static void close_tracked(int fd)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        if (g_fds[i] == fd) {
            g_fds[i] = g_fds[--g_n];
            break;
        }
    close(fd); /* under the lock: a fork never copies a descriptor being closed */
    pthread_mutex_unlock(&g_mu);
}

static void *reap(void *arg)
{
    ckpt__reaper *r = arg;
    for (size_t i = 0; i < r->count; i++)
        close_tracked(r->fds[i]);
    return NULL;
}

void ckpt__reaper_wait(ckpt__reaper *r)
{
    if (!r || !r->running)
        return;
    pthread_join(r->thread, NULL);
    r->running = 0;
    free(r->fds);
    r->fds = NULL;
    r->count = 0;
}

void ckpt__reaper_close(ckpt__reaper *r, int *fds, size_t n)
{
    ckpt__reaper_wait(r);
    if (n == 0 || !track(fds, n)) {
        for (size_t i = 0; i < n; i++)
            close(fds[i]);
        free(fds);
        return;
    }
    r->fds = fds;
    r->count = n;
    if (pthread_create(&r->thread, NULL, reap, r) == 0) {
        r->running = 1;
        return;
    }
    reap(r); /* no thread (limits, memory): closed here */
    free(fds);
    r->fds = NULL;
    r->count = 0;
}
