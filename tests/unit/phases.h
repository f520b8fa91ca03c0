/* Helpers shared by the unit tests of the saver's MPI-free phases (test_plan, test_commit,
 * test_paths): a private directory per test, and small file checks made by path (the test's own
 * view of the directory, independent of lib/fsutil.c). */
#ifndef MPICKPT_TESTS_PHASES_H
#define MPICKPT_TESTS_PHASES_H

#include "check.h"
#include "fsutil.h"
#include "mpickpt.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char phases_root[4096];

/* $MPICKPT_TEST_DIR (or /tmp/<name>), emptied. */
static inline void phases_init(const char *name)
{
    const char *env = getenv("MPICKPT_TEST_DIR");
    if (env && *env)
        snprintf(phases_root, sizeof phases_root, "%s", env);
    else
        snprintf(phases_root, sizeof phases_root, "/tmp/%s", name);
    ckpt__rmtree(phases_root);
    if (ckpt__mkdir_p(phases_root, 0755) != CKPT_OK) {
        fprintf(stderr, "cannot create %s\n", phases_root);
        exit(2);
    }
}

static inline const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e && e->message ? e->message : "";
}

static inline char *pathf(char *out, size_t size, const char *fmt, ...) CKPT_PRINTF(3, 4);
static inline char *pathf(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "path too long: %s\n", fmt);
        exit(2);
    }
    return out;
}

/* A fresh directory <root>/<name>. */
static inline char *case_dir(char *out, size_t size, const char *name)
{
    pathf(out, size, "%s/%s", phases_root, name);
    ckpt__rmtree(out);
    if (ckpt__mkdir_p(out, 0755) != CKPT_OK) {
        fprintf(stderr, "cannot create %s\n", out);
        exit(2);
    }
    return out;
}

static inline int put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* 1 when the file holds exactly `text`. */
static inline int has_text(const char *path, const char *text)
{
    char buf[256];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return n == strlen(text) && memcmp(buf, text, n) == 0;
}

/* st_mode of path (not followed), 0 when it does not exist. */
static inline unsigned kind_at(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? (unsigned)(st.st_mode & S_IFMT) : 0u;
}

/* Entries of a directory (without . and ..), -1 when it cannot be listed. */
static inline int count_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Entries of a directory whose name starts with `prefix`. */
static inline int count_prefixed(const char *path, const char *prefix)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

#endif
