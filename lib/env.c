/*
 * Strict parsing of the MPICKPT_* environment variables (docs/operations.md lists them). A value
 * that does not parse is an error naming the variable and the value, never silently ignored: a
 * typo in a batch script must not quietly change how a job checkpoints. An unset or empty
 * variable means the default.
 */
#include "env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int ckpt__env_bool(int *out, const char *name, int dflt)
{
    static const char *const yes[] = { "1", "true", "yes", "on" };
    static const char *const no[] = { "0", "false", "no", "off" };
    const char *v = env_value(name);
    *out = dflt;
    if (!v)
        return CKPT_OK;
    for (size_t i = 0; i < CKPT__ARRAY_LEN(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = 1;
            return CKPT_OK;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = 0;
            return CKPT_OK;
        }
    }
    return ckpt__error(CKPT_EINVAL, "%s='%.100s' is not a boolean (use 1 or 0)", name, v);
}

int ckpt__env_int64(int64_t *out, const char *name, int64_t lo, int64_t hi, int64_t dflt)
{
    const char *v = env_value(name);
    *out = dflt;
    if (!v)
        return CKPT_OK;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        return ckpt__error(CKPT_EINVAL, "%s='%.100s' is not an integer in %lld..%lld", name, v,
                           (long long)lo, (long long)hi);
    *out = (int64_t)n;
    return CKPT_OK;
}

int ckpt__env_choice(int *out, const char *name, const char *const *words, const int *values,
                     size_t n, int dflt)
{
    const char *v = env_value(name);
    *out = dflt;
    if (!v)
        return CKPT_OK;
    char list[256] = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v, words[i]) == 0) {
            *out = values[i];
            return CKPT_OK;
        }
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", words[i]);
    }
    return ckpt__error(CKPT_EINVAL, "%s='%.100s' is not one of: %s", name, v, list);
}

static const char *const log_words[] = { "error", "warn", "warning", "info", "debug" };
static const int log_values[] = { CKPT_LOG_ERROR, CKPT_LOG_WARN, CKPT_LOG_WARN, CKPT_LOG_INFO,
                                  CKPT_LOG_DEBUG };

int ckpt__log_level_parse(int *out)
{
    const char *v = env_value("MPICKPT_LOG");
    *out = CKPT_LOG_WARN;
    for (size_t i = 0; v && i < CKPT__ARRAY_LEN(log_words); i++)
        if (strcmp(v, log_words[i]) == 0) {
            *out = log_values[i];
            return 0;
        }
    return v ? -1 : 0;
}

int ckpt__env_log_level(int *out)
{
    return ckpt__env_choice(out, "MPICKPT_LOG", log_words, log_values, CKPT__ARRAY_LEN(log_words),
                            CKPT_LOG_WARN);
}
