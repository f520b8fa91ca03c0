/* The manager's kept checkpoints for a test's checks, through ckpt_manager_state_copy() (safe
 * while an async save commits; ckpt_manager_state() is deprecated): each copy is kept, reachable,
 * until the process's end, so a test may hold several. NULL when the copy fails. */
#ifndef MPICKPT_TESTS_STATE_COPY_H
#define MPICKPT_TESTS_STATE_COPY_H

#include "mpickpt/manager.h"

#include <stdlib.h>

static inline const ckpt_state *test_manager_state(const ckpt_manager *m)
{
    static ckpt_state **held;
    static size_t n;
    ckpt_state *c = NULL;
    if (ckpt_manager_state_copy(&c, m) != CKPT_OK)
        return NULL;
    ckpt_state **h = realloc(held, (n + 1) * sizeof *h);
    if (!h) {
        ckpt_state_free(c);
        return NULL;
    }
    held = h;
    held[n++] = c;
    return c;
}

#endif
