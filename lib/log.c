#include "env.h"
#include "internal.h"
#include "mpickpt/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static ckpt_log_cb g_cb;
static void *g_payload;
static int g_level = -1; /* -1: not set yet, read MPICKPT_LOG on first use */
static int g_rank = -1;

/* A bad MPICKPT_LOG is reported by ckpt_saver_create() and the tool (ckpt__env_log_level); the
 * logger itself, which cannot fail, then keeps the default level. */
static int env_level(void)
{
    int level;
    ckpt__log_level_parse(&level);
    return level;
}

void ckpt_log_set(ckpt_log_cb cb, ckpt_log_level level, void *payload)
{
    g_cb = cb;
    g_payload = payload;
    g_level = cb ? (int)level : env_level();
}

void ckpt_log_set_rank(int rank)
{
    g_rank = rank;
}

static const char *level_name(ckpt_log_level l)
{
    switch (l) {
    case CKPT_LOG_ERROR: return "error";
    case CKPT_LOG_WARN: return "warning";
    case CKPT_LOG_INFO: return "info";
    default: return "debug";
    }
}

void ckpt__log(ckpt_log_level level, const char *fmt, ...)
{
    if (g_level < 0)
        g_level = env_level();
    if ((int)level > g_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_cb) {
        g_cb(level, msg, g_payload);
        return;
    }
    /* The default sink: one line on stderr, prefixed so interleaved ranks stay readable. */
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    fprintf(stderr, "[mpickpt rank %d host %s] %s: %s\n", g_rank, host, level_name(level), msg);
}

double ckpt__now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ckpt__mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
