/* Retention's deletions in the background (lib/reaper.h). */
#include "reaper.h"

#include "mpickpt/state.h"

#include <stdlib.h>
#include <string.h>

static void free_batch(ckpt__reaper *r)
{
    for (size_t i = 0; i < r->count; i++)
        free(r->prefixes[i]);
    free(r->prefixes);
    r->prefixes = NULL;
    r->count = 0;
}

/* Each deletion's outcome: logged (its error is this thread's, reported nowhere else). */
static int delete_one(const char *prefix)
{
    int rc = ckpt_checkpoint_delete(prefix);
    if (rc == CKPT_OK)
        ckpt__log(CKPT_LOG_INFO, "retention deleted %s", prefix);
    return rc;
}

static void *reap(void *arg)
{
    ckpt__reaper *r = arg;
    for (size_t i = 0; i < r->count; i++)
        if (delete_one(r->prefixes[i]) != CKPT_OK)
            ckpt__log(CKPT_LOG_WARN, "retention could not delete %s (it is no longer listed; "
                                     "`mpickpt gc` removes it): %s",
                      r->prefixes[i], ckpt_error_last()->message);
    return NULL;
}

void ckpt__reaper_wait(ckpt__reaper *r)
{
    if (!r || !r->running)
        return;
    pthread_join(r->thread, NULL);
    r->running = 0;
    free_batch(r);
}

int ckpt__reaper_delete_inline(const char *const *prefixes, size_t n)
{
    int rc = CKPT_OK;
    for (size_t i = 0; rc == CKPT_OK && i < n; i++)
        rc = delete_one(prefixes[i]);
    return rc;
}

int ckpt__reaper_delete(ckpt__reaper *r, const char *const *prefixes, size_t n)
{
    ckpt__reaper_wait(r);
    if (n == 0)
        return CKPT_OK;
    r->prefixes = calloc(n, sizeof *r->prefixes);
    int rc = r->prefixes ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; rc == CKPT_OK && i < n; i++, r->count++)
        if (!(r->prefixes[i] = strdup(prefixes[i])))
            rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    /* no thread (memory, limits): the deletions run here, as MPICKPT_RETENTION=inline would */
    if (rc == CKPT_OK && pthread_create(&r->thread, NULL, reap, r) == 0) {
        r->running = 1;
        return CKPT_OK;
    }
    free_batch(r);
    return ckpt__reaper_delete_inline(prefixes, n);
}
