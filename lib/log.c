#include "env.h"
#include "internal.h"
#include "mpickpt/log.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static ckpt_log_cb g_cb;
static void *g_payload;
static int g_level = -1; /* -1: not set yet, read MPICKPT_LOG on first use */
static int g_default = CKPT_LOG_WARN; /* when MPICKPT_LOG is unset */
static int g_rank = -1;

/* A bad MPICKPT_LOG is reported by ckpt_saver_create() and the tool (ckpt__env_log_level); the
 * logger itself, which cannot fail, then keeps the default level. */
static int env_level(void)
{
    const char *v = getenv("MPICKPT_LOG");
    if (!v || !*v)
        return g_default;
    int level;
    return ckpt__log_level_parse(&level) == 0 ? level : g_default;
}

void ckpt_log_set_default_level(ckpt_log_level level)
{
    g_default = (int)level < CKPT_LOG_ERROR ? CKPT_LOG_ERROR
                : (int)level > CKPT_LOG_DEBUG ? CKPT_LOG_DEBUG
                                             : (int)level;
    if (!g_cb)
        g_level = -1; /* read again on next use */
}

int ckpt__log_enabled(ckpt_log_level level)
{
    if (g_level < 0)
        g_level = env_level();
    return (int)level <= g_level;
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
    if (!ckpt__log_enabled(level))
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

double ckpt__maxloc_encode(double seconds, int rank)
{
    if (!(seconds > 0) || !isfinite(seconds))
        seconds = 0.0;
    uint64_t bits;
    memcpy(&bits, &seconds, sizeof bits);
    /* rank + 1: 0 is "no rank", so that a rank too large to encode decodes as -1 */
    uint64_t tag = rank >= 0 && rank < CKPT__MAXLOC_RANKS - 1 ? (uint64_t)rank + 1 : 0;
    bits = (bits & ~(uint64_t)(CKPT__MAXLOC_RANKS - 1)) | tag;
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

void ckpt__maxloc_decode(double v, double *seconds, int *rank)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint64_t tag = bits & (uint64_t)(CKPT__MAXLOC_RANKS - 1);
    bits &= ~(uint64_t)(CKPT__MAXLOC_RANKS - 1);
    memcpy(seconds, &bits, sizeof bits);
    *rank = tag ? (int)(tag - 1) : -1;
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
