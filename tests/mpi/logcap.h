/* The library's warnings captured on this rank, for MPI tests that check what was said
 * (ckpt_log_set(logcap_cb, CKPT_LOG_WARN, NULL) at the start; MPICKPT_TEST_VERBOSE also prints
 * them). Include after coll.h, in one translation unit per program. */
#ifndef MPICKPT_TESTS_LOGCAP_H
#define MPICKPT_TESTS_LOGCAP_H

#include "coll.h"
#include "mpickpt/log.h"

#include <stdio.h>
#include <stdlib.h>

#define LOG_MAX 128
static char g_logs[LOG_MAX][1024];
static int g_nlogs;

static inline void logcap_cb(ckpt_log_level level, const char *message, void *payload)
{
    (void)payload;
    if (getenv("MPICKPT_TEST_VERBOSE"))
        fprintf(stderr, "[rank %d] log %d: %s\n", comm_rank(MPI_COMM_WORLD), (int)level, message);
    if (level <= CKPT_LOG_WARN && g_nlogs < LOG_MAX)
        snprintf(g_logs[g_nlogs++], sizeof g_logs[0], "%s", message ? message : "");
}

/* The first captured warning containing every one of the NULL-terminated `words`, or NULL. */
static inline const char *logs_find(const char *const *words)
{
    for (int i = 0; i < g_nlogs; i++) {
        int all = 1;
        for (const char *const *w = words; *w; w++)
            all &= contains_ci(g_logs[i], *w);
        if (all)
            return g_logs[i];
    }
    return NULL;
}

#endif
