#include "internal.h"

#include <stdio.h>
#include <string.h>

#define CKPT__MSG_MAX 2048

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

int ckpt__verror(int code, const char *fmt, va_list ap)
{
    vsnprintf(tl_message, sizeof tl_message, fmt, ap);
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
    tl_error.code = code;
    tl_error.message = tl_message;
    tl_set = 1;
    return code;
}

const ckpt_error *ckpt_error_last(void)
{
    return tl_set ? &tl_error : NULL;
}

void ckpt_error_clear(void)
{
    tl_set = 0;
    tl_agreed = 0;
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
