#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define ALIAS_MAX 64

/* ckpt__error_alias(): paths by descriptor and the names they are shown by */
static struct {
    char at[64];
    char shown[1024];
} g_alias[ALIAS_MAX];
static int g_naliases;
static pthread_mutex_t g_alias_lock = PTHREAD_MUTEX_INITIALIZER;

/* One slot per thread: the library never shares error state between threads. */
static _Thread_local char tl_message[CKPT__MSG_MAX];
static _Thread_local ckpt_error tl_error;
static _Thread_local int tl_set;
static _Thread_local int tl_agreed; /* ckpt__error_agreed() */

const char *ckpt_strerror(int code)
{
    switch (code) {
    case CKPT_OK: return "success";
    case CKPT_ERROR: return "error";
    case CKPT_EINVAL: return "invalid argument";
    case CKPT_ENOTFOUND: return "not found";
    case CKPT_ECORRUPT: return "corrupt data";
    case CKPT_ENOSPC: return "no space left on device";
    case CKPT_EMISMATCH: return "mismatch";
    case CKPT_EIO: return "I/O error";
    case CKPT_EPEER: return "another rank failed";
    case CKPT_ENOMEM: return "out of memory";
    case CKPT_EVERSION: return "unsupported format version";
    case CKPT_EMPI: return "MPI error";
    case CKPT_EEXISTS: return "already exists";
    case CKPT_ETIMEDOUT: return "timed out";
    case CKPT_EBUSY: return "in use by another job";
    default: return "unknown error";
    }
}

void ckpt__error_alias(const char *at, const char *shown)
{
    if (!at || !*at || strlen(at) >= sizeof g_alias[0].at)
        return;
    pthread_mutex_lock(&g_alias_lock);
    int i = 0;
    while (i < g_naliases && strcmp(g_alias[i].at, at) != 0)
        i++;
    if (!shown) { /* forget it */
        if (i < g_naliases)
            g_alias[i] = g_alias[--g_naliases];
    } else if (i < g_naliases || g_naliases < ALIAS_MAX) {
        if (i == g_naliases)
            g_naliases++;
        snprintf(g_alias[i].at, sizeof g_alias[i].at, "%s", at);
        snprintf(g_alias[i].shown, sizeof g_alias[i].shown, "%s", shown);
    }
    pthread_mutex_unlock(&g_alias_lock);
}

/* tl_message with every alias's `at` (not followed by another digit) read as its name */
static void apply_aliases(void)
{
    pthread_mutex_lock(&g_alias_lock);
    for (int i = 0; i < g_naliases; i++) {
        size_t n = strlen(g_alias[i].at);
        char *p = tl_message;
        while ((p = strstr(p, g_alias[i].at)) != NULL) {
            if (p[n] >= '0' && p[n] <= '9') {
                p += n;
                continue;
            }
            char rest[CKPT__MSG_MAX];
            snprintf(rest, sizeof rest, "%s", p + n);
            size_t at = (size_t)(p - tl_message);
            int w = snprintf(p, sizeof tl_message - at, "%s%s", g_alias[i].shown, rest);
            size_t step = strlen(g_alias[i].shown);
            if (w < 0 || at + step >= sizeof tl_message - 1)
                break;
            p += step;
        }
    }
    pthread_mutex_unlock(&g_alias_lock);
}

int ckpt__verror(int code, const char *fmt, va_list ap)
{
    int err = errno; /* the failed call's, when the message shows its strerror() */
    vsnprintf(tl_message, sizeof tl_message, fmt, ap);
    apply_aliases();
    tl_error.sys_errno = 0;
    tl_error.reason = CKPT_REASON_NONE; /* a new error: ckpt__error_set_reason() gives one */
    if (err > 0 && code != CKPT_OK) {
        const char *text = strerror(err);
        const char *at = text && *text ? strstr(tl_message, text) : NULL;
        /* "...: <strerror>" ending the message or a clause of it */
        if (at && at >= tl_message + 2 && at[-2] == ':' && at[-1] == ' ')
            tl_error.sys_errno = err;
    }
    if (code == CKPT_ENOSPC && tl_error.sys_errno == 0)
        tl_error.sys_errno = ENOSPC; /* a full disk found by a reservation says so itself */
    errno = err;
    tl_error.code = code;
    tl_error.message = tl_message;
    tl_set = 1;
    tl_agreed = 0;
    return code;
}

int ckpt__error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ckpt__verror(code, fmt, ap);
    va_end(ap);
    return code;
}

int ckpt__error_wrap(int code, const char *fmt, ...)
{
    char prefix[512];
    char old[CKPT__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (tl_set) {
        memcpy(old, tl_message, sizeof old);
    } else {
        snprintf(old, sizeof old, "%s", ckpt_strerror(code));
        tl_agreed = 0;
    }
    snprintf(tl_message, sizeof tl_message, "%s: %s", prefix, old);
    apply_aliases();
    tl_error.code = code;
    tl_error.message = tl_message;
    tl_set = 1;
    return code;
}

int ckpt__error_set_errno(int code, int err)
{
    if (tl_set && tl_error.code == code)
        tl_error.sys_errno = err > 0 ? err : 0;
    return code;
}

int ckpt__error_set_reason(int code, int reason)
{
    if (tl_set && tl_error.code == code)
        tl_error.reason = reason;
    return code;
}

int ckpt__error_reason(int code)
{
    return tl_set && tl_error.code == code ? tl_error.reason : CKPT_REASON_NONE;
}

ckpt__saved_error ckpt__error_save(void)
{
    ckpt__saved_error s;
    memset(&s, 0, sizeof s);
    s.set = tl_set;
    s.agreed = tl_agreed;
    s.error = tl_error;
    if (tl_set)
        memcpy(s.message, tl_message, sizeof s.message);
    return s;
}

void ckpt__error_restore(const ckpt__saved_error *s)
{
    if (!s->set) {
        ckpt_error_clear();
        return;
    }
    memcpy(tl_message, s->message, sizeof tl_message);
    tl_error = s->error;
    tl_error.message = tl_message;
    tl_set = 1;
    tl_agreed = s->agreed;
}

const char *ckpt_reason_name(int reason)
{
    switch (reason) {
    case CKPT_REASON_NONE: return "none";
    case CKPT_REASON_NO_CHECKPOINT: return "no checkpoint";
    case CKPT_REASON_NO_TENSOR: return "no tensor";
    case CKPT_REASON_PINNED: return "pinned";
    case CKPT_REASON_NO_METRICS: return "no metrics";
    case CKPT_REASON_CHECK: return "check";
    default: return "unknown reason";
    }
}

const ckpt_error *ckpt_error_last(void)
{
    return tl_set ? &tl_error : NULL;
}

void ckpt_error_clear(void)
{
    tl_set = 0;
    tl_agreed = 0;
    tl_error.sys_errno = 0;
    tl_error.reason = CKPT_REASON_NONE;
    tl_message[0] = '\0';
}

int ckpt__error_agreed(void)
{
    return tl_set && tl_agreed;
}

void ckpt__error_mark_agreed(void)
{
    tl_agreed = tl_set;
}

const char *ckpt_version(void)
{
    return CKPT_VERSION_STRING;
}
