/*
 * Private directories (privdir.h): the walk that resolves a cache directory's path one component
 * at a time, in the spirit of OpenSSH's secure-path check and systemd's chase(): the trust in a
 * directory is never more than the trust in the directory that names it.
 */
#include "privdir.h"
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* How many components, links' included, one walk takes before giving up. */
#define WALK_MAX 256

/* 1 when root or this process's user owns it. */
static int trusted_owner(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* An ancestor of a private directory: owned by root or this user, and writable by others only
 * with the sticky bit (others may add entries there, but not rename or remove ours). */
static int check_ancestor(const struct stat *st, const char *path, const char *shown)
{
    if (!trusted_owner(st->st_uid))
        return ckpt__error(CKPT_EINVAL,
                           "refusing cache directory %s: %s belongs to uid %u (neither root nor "
                           "this user, uid %u, mode %04o): its owner could rename the cache away "
                           "or put another in its place; choose a directory of your own",
                           path, shown, (unsigned)st->st_uid, (unsigned)geteuid(),
                           (unsigned)(st->st_mode & 07777));
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
        return ckpt__error(CKPT_EINVAL,
                           "refusing cache directory %s: %s (owner uid %u, mode %04o) can be "
                           "written by other users without the sticky bit: they could rename the "
                           "cache away or put another in its place; choose a directory of your own",
                           path, shown, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777));
    return CKPT_OK;
}

/* The directory itself: this user's, and neither its group nor others can write it. */
static int check_private(const struct stat *st, const char *shown)
{
    if (!S_ISDIR(st->st_mode))
        return ckpt__error(CKPT_EINVAL, "refusing cache directory %s: it is %s", shown,
                           ckpt__file_kind(st->st_mode));
    if (st->st_uid != geteuid())
        return ckpt__error(CKPT_EINVAL,
                           "refusing cache directory %s: it belongs to uid %u, not to this user "
                           "(uid %u; mode %04o): nothing in it is read or removed; remove it or "
                           "choose another",
                           shown, (unsigned)st->st_uid, (unsigned)geteuid(),
                           (unsigned)(st->st_mode & 07777));
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return ckpt__error(CKPT_EINVAL,
                           "refusing cache directory %s: other users can write it (owner uid %u, "
                           "mode %04o): nothing in it is read or removed; make it private "
                           "(chmod 700) or choose another",
                           shown, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777));
    return CKPT_OK;
}

/* Opens entry `name` of `dirfd` as a directory, creating it 0700 when missing. A link is refused as
 * the `last` component; elsewhere one that root or this user owns is not opened but read into
 * link[lsize] (the walk then goes on through its target, checked step by step), and *fd is -1.
 * Otherwise *st is what was opened and link[0] is '\0'. */
static int open_component(int *fd, struct stat *st, char *link, size_t lsize, int dirfd,
                          const char *name, int last, const char *path, const char *shown)
{
    *fd = -1;
    link[0] = '\0';
    struct stat lst;
    if (fstatat(dirfd, name, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT)
            return ckpt__errno(errno, "stat", shown);
        if (mkdirat(dirfd, name, 0700) != 0 && errno != EEXIST)
            return ckpt__error(errno == ENOSPC || errno == EDQUOT ? CKPT_ENOSPC : CKPT_EIO,
                               "cache directory %s: mkdir %s: %s", path, shown, strerror(errno));
        if (fstatat(dirfd, name, &lst, AT_SYMLINK_NOFOLLOW) != 0)
            return ckpt__errno(errno, "stat", shown);
    }
    if (S_ISLNK(lst.st_mode)) {
        if (last)
            return ckpt__error(CKPT_EINVAL,
                               "refusing cache directory %s: it is a symbolic link (owner uid "
                               "%u); mpickpt never follows a link there, whoever made it",
                               shown, (unsigned)lst.st_uid);
        if (!trusted_owner(lst.st_uid))
            return ckpt__error(CKPT_EINVAL,
                               "refusing cache directory %s: %s is a symbolic link that uid %u "
                               "made (neither root nor this user)",
                               path, shown, (unsigned)lst.st_uid);
        ssize_t n = readlinkat(dirfd, name, link, lsize);
        if (n <= 0 || (size_t)n >= lsize) {
            link[0] = '\0';
            return ckpt__error(CKPT_EINVAL, "refusing cache directory %s: the link %s cannot be "
                                            "read whole",
                               path, shown);
        }
        link[n] = '\0';
        return CKPT_OK;
    }
    if (!S_ISDIR(lst.st_mode))
        return ckpt__error(CKPT_EINVAL, "refusing cache directory %s: %s is %s, not a directory",
                           path, shown, ckpt__file_kind(lst.st_mode));
    int f = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0) /* ELOOP/ENOTDIR: swapped since the fstatat */
        return ckpt__error(errno == ENOENT ? CKPT_ENOTFOUND : CKPT_EINVAL,
                           "refusing cache directory %s: %s: %s (it changed while mpickpt "
                           "opened it)",
                           path, shown, strerror(errno));
    if (fstat(f, st) != 0) {
        int rc = ckpt__errno(errno, "stat", shown);
        close(f);
        return rc;
    }
    if (st->st_dev != lst.st_dev || st->st_ino != lst.st_ino) {
        close(f);
        return ckpt__error(CKPT_EINVAL, "refusing cache directory %s: %s changed while mpickpt "
                                        "opened it",
                           path, shown);
    }
    *fd = f;
    return CKPT_OK;
}

/* The first character of path `c` after any "/" and "." components. */
static char *skip_separators(char *c)
{
    for (;;) {
        while (*c == '/')
            c++;
        if (c[0] == '.' && (c[1] == '/' || c[1] == '\0')) {
            c++;
            continue;
        }
        return c;
    }
}

/* The next component of the path at *p (skipping "/" and "."), NUL-terminated in place, or NULL;
 * *last says whether any other follows. */
static char *next_component(char **p, int *last)
{
    char *c = skip_separators(*p);
    if (!*c)
        return NULL;
    char *end = c + strcspn(c, "/");
    *last = *skip_separators(end) == '\0'; /* does anything but "/" and "." follow? */
    if (*end)
        *end++ = '\0';
    *p = end;
    return c;
}

int ckpt__private_dir_open(int *fd, const char *path, const struct stat *avoid,
                           const char *avoid_shown)
{
    *fd = -1;
    /* rest: what is left to walk; a link's target is put in front of it */
    char rest[8192], link[4096], shown[4096];
    int rc = ckpt__path(rest, sizeof rest, "%s", path ? path : "");
    if (rc != CKPT_OK)
        return rc;
    if (!rest[0])
        return ckpt__error(CKPT_EINVAL, "empty cache directory");
    const char *start = rest[0] == '/' ? "/" : ".";
    int cur = open(start, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return ckpt__errno(errno, "open directory", start);
    snprintf(shown, sizeof shown, "%s", start);
    struct stat st;
    if (fstat(cur, &st) != 0) {
        rc = ckpt__errno(errno, "stat", shown);
        close(cur);
        return rc;
    }
    char *p = rest;
    int last = 0, reached = 0, steps = 0;
    char *comp;
    while (rc == CKPT_OK && (comp = next_component(&p, &last)) != NULL) {
        if (++steps > WALK_MAX) {
            rc = ckpt__error(CKPT_EINVAL, "cache directory %s: more than %d components and links",
                             path, WALK_MAX);
            break;
        }
        /* what holds the next component must be trusted (an ancestor) */
        if ((rc = check_ancestor(&st, path, shown)) != CKPT_OK)
            break;
        size_t at = strlen(shown);
        int r = snprintf(shown + at, sizeof shown - at, "%s%s",
                         shown[at - 1] == '/' ? "" : "/", comp);
        if (r < 0 || (size_t)r >= sizeof shown - at) {
            rc = ckpt__error(CKPT_EINVAL, "cache directory %s: path too long", path);
            break;
        }
        int next = -1;
        rc = open_component(&next, &st, link, sizeof link, cur, comp, last, path, shown);
        if (rc == CKPT_OK && link[0]) {
            /* a trusted link: its target's components are walked next, each checked */
            char tail[8192];
            if (ckpt__path(tail, sizeof tail, "%s", p) != CKPT_OK ||
                (rc = ckpt__path(rest, sizeof rest, "%s/%s", link, tail)) != CKPT_OK)
                break;
            p = rest;
            if (link[0] == '/') {
                int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (root < 0 || fstat(root, &st) != 0) {
                    rc = ckpt__errno(errno, "open directory", "/");
                    ckpt__close(root);
                    break;
                }
                close(cur);
                cur = root;
                snprintf(shown, sizeof shown, "/");
            } else {
                shown[at] = '\0';
            }
            continue;
        }
        close(cur);
        cur = next;
        if (rc != CKPT_OK)
            break;
        reached = last;
        if (avoid && st.st_dev == avoid->st_dev && st.st_ino == avoid->st_ino)
            rc = ckpt__error(CKPT_EINVAL,
                             "refusing cache directory %s: it is %s the persistent directory %s; "
                             "a node-local cache must be a directory of its own",
                             path, last ? "the same as" : "inside", avoid_shown);
    }
    if (rc == CKPT_OK && !reached)
        rc = ckpt__error(CKPT_EINVAL, "refusing cache directory %s: it names no directory below "
                                      "%s",
                         path, start);
    if (rc == CKPT_OK)
        rc = check_private(&st, path);
    if (rc != CKPT_OK) {
        ckpt__close(cur);
        return rc;
    }
    *fd = cur;
    return CKPT_OK;
}

int ckpt__private_subdir_open(int *fd, int parentfd, const char *name, const char *shown)
{
    *fd = -1;
    char full[4400];
    int rc = ckpt__path(full, sizeof full, "%s/%s", shown, name);
    if (rc != CKPT_OK)
        return rc;
    if (!ckpt__safe_filename(name))
        return ckpt__error(CKPT_EINVAL, "cache directory %s: not a plain name", full);
    struct stat st;
    if (fstat(parentfd, &st) != 0)
        return ckpt__errno(errno, "stat", shown);
    if ((rc = check_ancestor(&st, full, shown)) != CKPT_OK)
        return rc;
    int f = -1;
    char link[8];
    if ((rc = open_component(&f, &st, link, sizeof link, parentfd, name, 1, full, full)) !=
        CKPT_OK)
        return rc;
    if ((rc = check_private(&st, full)) != CKPT_OK) {
        close(f);
        return rc;
    }
    *fd = f;
    return CKPT_OK;
}

int ckpt__dir_within(int fd, const struct stat *top)
{
    int cur = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (cur < 0)
        return -1;
    struct stat st;
    int found = -1;
    for (int depth = 0; depth < 4096; depth++) {
        if (fstat(cur, &st) != 0)
            break;
        if (st.st_dev == top->st_dev && st.st_ino == top->st_ino) {
            found = 1;
            break;
        }
        int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat ust;
        if (up < 0 || fstat(up, &ust) != 0) {
            ckpt__close(up);
            break;
        }
        close(cur);
        cur = up;
        if (ust.st_dev == st.st_dev && ust.st_ino == st.st_ino) { /* the root */
            found = 0;
            break;
        }
    }
    close(cur);
    return found;
}
