/* Retention's block freeing in the background (lib/reaper.h). */
#include "reaper.h"

#include "forkfd.h"

#include <stdlib.h>
#include <unistd.h>

static void *reap(void *arg)
{
    ckpt__reaper *r = arg;
    for (size_t i = 0; i < r->count; i++)
        ckpt__forkfd_close(r->fds[i]);
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
    /* registered: a child made by fork() never runs the thread, its copies would keep the
     * blocks allocated (lib/forkfd.h); unregistered (no memory): closed here and now */
    if (n == 0 || !ckpt__forkfd_add(fds, n)) {
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
