/*
 * Garbage collection in a checkpoint directory (ckpt_gc, `mpickpt gc`, the manager's gc at its
 * next save) and delete_backup of a training-state directory.
 *
 * Takes a directory that may hold anything anyone wrote. Guarantees: only a recognisable checkpoint
 * directory is touched (an index or a state file of ours in it), and in it only names mpickpt
 * owns (lib/paths.h): in-flight directories holding only our files (<base>.<id>_temp, and the
 * <base>_temp of older versions), data files of no committed index, temp files of atomic writes,
 * workertemp_<r>.<id> (and older versions' workertemp_<r>) next to a chief/ of ours. Every entry
 * is reached by descriptor, links are removed as entries and never followed; a committed
 * checkpoint is never removed. Anything foreign leaves its directory alone, with a warning.
 */
#include "mpickpt/state.h"

#include "dirlock.h"
#include "fsutil.h"
#include "identity.h"
#include "index.h"
#include "paths.h"
#include "restart.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 1 when dirfd is recognisably a checkpoint directory: it has a state file or an mpickpt index
 * (by their magic numbers, not their names). */
static int is_checkpoint_dir(int dirfd)
{
    if (ckpt__has_magic(dirfd, CKPT__STATE_FILE, CKPT__MAGIC_STATE, 8))
        return 1;
    DIR *d = ckpt__listing(dirfd);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL)
        found = ckpt__ends_with(e->d_name, ".index") &&
                ckpt__has_magic(dirfd, e->d_name, CKPT__MAGIC_INDEX, 8);
    closedir(d);
    return found;
}

typedef struct gc_ctx {
    const char *dir; /* for messages */
    int dry_run;
    ckpt_gc_cb cb;
    void *payload;
    size_t count;
} gc_ctx;

/* What may be inside a temp dir of ours: "part-00000-of-00001" (the single-process writer),
 * "<name>.data-NNNNN-of-NNNNN" (the saver), ".reserve-<rank>" (space reservations) and
 * ".pad-<rank>" (room for HDF5's metadata). */
static int temp_content_ok(int dirfd, const char *n)
{
    if (!ckpt__is_temp_content_name(n))
        return 0;
    ckpt__saved_error keep = ckpt__error_save(); /* a yes/no answer: the caller's error stays */
    if (ckpt__stat_regular(NULL, dirfd, n, ".") == CKPT_OK)
        return 1;
    ckpt__error_restore(&keep);
    return 0;
}

/* Removes directory `name` of dirfd when everything in it is a file of ours (walked by descriptor;
 * a link or anything else inside leaves the whole directory alone, with a warning). */
static int gc_temp_dir(gc_ctx *g, int dirfd, const char *shown_parent, const char *name,
                       const char *why)
{
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", shown_parent, name);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return CKPT_OK; /* gone, or swapped for something else: not ours to remove */
    DIR *d = ckpt__listing(fd);
    if (!d) {
        int rc = ckpt__errno(errno, "opendir", path);
        close(fd);
        return rc;
    }
    struct dirent *e;
    const char *foreign = NULL;
    char first[256] = "";
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!temp_content_ok(fd, e->d_name)) {
            foreign = first;
            snprintf(first, sizeof first, "%s", e->d_name);
            break;
        }
    }
    if (foreign) {
        closedir(d);
        close(fd);
        ckpt__log(CKPT_LOG_WARN, "gc: leaving %s alone: it holds %s, which mpickpt did not write",
                  path, first);
        return CKPT_OK;
    }
    int rc = CKPT_OK, left = 0;
    if (!g->dry_run) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            if (unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT && rc == CKPT_OK)
                rc = ckpt__errno(errno, "unlink", e->d_name);
        }
        if (rc == CKPT_OK && unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
            left = 1; /* the name is not ours any more: left, with a warning, and not an error
                       * (the manager's save would fail on it) */
            if (errno == ENOTEMPTY || errno == EEXIST) /* something new arrived */
                ckpt__log(CKPT_LOG_WARN, "gc: leaving %s: it is no longer empty", path);
            else if (errno == ENOTDIR) /* replaced by a link or a file since it was opened */
                ckpt__log(CKPT_LOG_WARN, "gc: leaving %s: it was replaced while gc emptied it",
                          path);
            else
                rc = ckpt__errno(errno, "rmdir", path);
        }
    }
    closedir(d);
    close(fd);
    if (rc == CKPT_OK && !left) {
        if (g->cb)
            g->cb(path, why, g->payload);
        g->count++;
    }
    return rc;
}

static int gc_file(gc_ctx *g, int dirfd, const char *name, const char *why)
{
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", g->dir, name);
    if (!g->dry_run && unlinkat(dirfd, name, 0) != 0) {
        if (errno == ENOENT)
            return CKPT_OK;
        return ckpt__errno(errno, "unlink", path);
    }
    if (g->cb)
        g->cb(path, why, g->payload);
    g->count++;
    return CKPT_OK;
}

/* Removes the workertemp_<rank>.<id> (and older versions' workertemp_<rank>) directories of work
 * directory workfd that hold only our files. */
static int gc_workertemp(gc_ctx *g, int workfd, const char *work)
{
    DIR *d = ckpt__listing(workfd);
    if (!d)
        return ckpt__errno(errno, "opendir", work);
    int rc = CKPT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        struct stat st;
        if (!ckpt__is_worker_temp_name(n) ||
            fstatat(workfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        int r = gc_temp_dir(g, workfd, work, n, "in-flight parts of a non-chief rank");
        if (r != CKPT_OK && rc == CKPT_OK)
            rc = r;
    }
    closedir(d);
    return rc;
}

static int gc_dir(const char *dir_arg, int dry_run, ckpt_gc_cb cb, void *payload, size_t *removed,
                  int refuse_foreign, double lock_wait);

int ckpt_gc(const char *dir, int dry_run, ckpt_gc_cb cb, void *payload, size_t *removed)
{
    double wait = 0;
    int rc = dry_run ? CKPT_OK : ckpt__dirlock_env_wait(&wait);
    return rc == CKPT_OK ? ckpt__gc_locked(dir, dry_run, cb, payload, removed, wait) : rc;
}

int ckpt__gc_locked(const char *dir, int dry_run, ckpt_gc_cb cb, void *payload, size_t *removed,
                    double lock_wait)
{
    return gc_dir(dir, dry_run, cb, payload, removed, 1, dry_run ? -1 : lock_wait);
}

int ckpt__gc(const char *dir, int dry_run, ckpt_gc_cb cb, void *payload, size_t *removed,
             int refuse_foreign)
{
    return gc_dir(dir, dry_run, cb, payload, removed, refuse_foreign, -1);
}

/* ckpt__gc, and with lock_wait >= 0 under the lock of the directory whose state file it serves
 * (taken once the directory is known to be ours: nothing is made in a foreign one). */
static int gc_dir(const char *dir_arg, int dry_run, ckpt_gc_cb cb, void *payload, size_t *removed,
                  int refuse_foreign, double lock_wait)
{
    char dir[4096], work[4096], last[4096];
    if (removed)
        *removed = 0;
    int rc = ckpt__path(dir, sizeof dir, "%s", dir_arg);
    if (rc != CKPT_OK)
        return rc;
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = '\0'; /* "run/chief/" is "run/chief" */
    if ((rc = ckpt__split_path(work, sizeof work, last, sizeof last, dir)) != CKPT_OK)
        return rc;
    int is_chief = strcmp(last, CKPT__CHIEF_DIR) == 0;
    if (!is_chief)
        snprintf(work, sizeof work, "%s", dir);
    int fd, workfd;
    if ((rc = ckpt__ckptdir_open(&fd, &workfd, dir, 0)) != CKPT_OK)
        return rc;
    /* Only a directory that is recognisably ours: a state file or an index, by magic; or a work
     * directory whose chief/ is one (its workertemp_<r> are then ours). */
    int ours = is_checkpoint_dir(fd), work_only = 0, cfd = -1;
    if (!ours && !is_chief) {
        ckpt__saved_error keep = ckpt__error_save(); /* no chief/ is an answer, not an error */
        if (ckpt__subdir_open(&cfd, fd, CKPT__CHIEF_DIR, 0, dir) == CKPT_OK)
            work_only = ours = is_checkpoint_dir(cfd);
        ckpt__error_restore(&keep);
    }
    /* A job writing here holds the lock of the state file's directory: that one, also for the
     * workertemp_<r> of a work directory (they are its chief's job's). */
    ckpt__dirlock *lock = NULL;
    if (ours && lock_wait >= 0) {
        char shown[4200];
        rc = ckpt__path(shown, sizeof shown, work_only ? "%s/" CKPT__CHIEF_DIR : "%s", dir);
        if (rc == CKPT_OK)
            rc = ckpt__dirlock_take(&lock, work_only ? cfd : fd, shown, lock_wait);
        if (rc != CKPT_OK) {
            ckpt__close(cfd);
            close(fd);
            close(workfd);
            return rc;
        }
    }
    ckpt__close(cfd);
    if (!ours) {
        close(fd);
        close(workfd);
        if (!refuse_foreign)
            return CKPT_OK;
        return ckpt__error(CKPT_EINVAL,
                           "refusing to clean %s: it is not a checkpoint directory (no mpickpt state "
                           "file or index in it%s); nothing was removed",
                           dir, is_chief ? "" : " or in its chief/");
    }
    gc_ctx g = { dir, dry_run, cb, payload, 0 };
    DIR *d = work_only ? NULL : ckpt__listing(fd);
    if (!work_only && !d)
        rc = ckpt__errno(errno, "opendir", dir);
    struct dirent *e;
    char base[4096], iname[4200];
    while (d && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        struct stat st;
        if (!strcmp(n, ".") || !strcmp(n, "..") ||
            fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        int r = CKPT_OK;
        /* <base>.<id>_temp, or an older version's <base>_temp */
        if (S_ISDIR(st.st_mode) && ckpt__ends_with(n, "_temp") && strlen(n) > 5)
            r = gc_temp_dir(&g, fd, dir, n, "in-flight parts of an unfinished save");
        else if (S_ISREG(st.st_mode) &&
                 (ckpt__is_temp_name(n, ".index") || ckpt__is_temp_name(n, CKPT__STATE_FILE) ||
                  ckpt__is_temp_name(n, CKPT__HALT_FILE) ||
                  ckpt__is_temp_name(n, CKPT__RESTART_FILE) ||
                  ckpt__is_temp_name(n, CKPT__IDENTITY_FILE)))
            r = gc_file(&g, fd, n,
                        "temp file of an unfinished index, state, halt, restart or identity write");
        else if (S_ISREG(st.st_mode) && ckpt__data_file_base(base, sizeof base, n) &&
                 ckpt__path(iname, sizeof iname, "%s.index", base) == CKPT_OK &&
                 !ckpt__exists_at(fd, iname) && ckpt__is_data_file(fd, n))
            r = gc_file(&g, fd, n, "data file of a checkpoint that was never committed (no index)");
        if (r != CKPT_OK && rc == CKPT_OK)
            rc = r;
    }
    if (d)
        closedir(d);
    /* workertemp_<r> live next to chief/ in the training-state layout, else in the directory. */
    int r = gc_workertemp(&g, is_chief ? workfd : fd, is_chief ? work : dir);
    if (r != CKPT_OK && rc == CKPT_OK)
        rc = r;
    close(fd);
    close(workfd);
    ckpt__dirlock_release(lock);
    if (removed)
        *removed = g.count;
    return rc;
}

/* 1 when directory fd holds `name` and nothing else. */
static int holds_only(int fd, const char *name)
{
    DIR *d = ckpt__listing(fd);
    if (!d)
        return 0;
    int found = 0, other = 0;
    struct dirent *e;
    while (!other && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (strcmp(e->d_name, name) == 0)
            found = 1;
        else
            other = 1;
    }
    closedir(d);
    return found && !other;
}

/* Removes every checkpoint of dir (indexes by magic, with their data files), its state file,
 * metrics and garbage. Only names mpickpt owns are touched; what is left keeps the directory. */
static int clear_checkpoint_dir(const char *dir, int *ours)
{
    *ours = 0;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    int fd, rc = ckpt__ckptdir_open(&fd, NULL, dir, 0);
    if (rc == CKPT_ENOTFOUND) { /* nothing to clear */
        ckpt__error_restore(&keep);
        return CKPT_OK;
    }
    if (rc != CKPT_OK)
        return rc;
    if (!(*ours = is_checkpoint_dir(fd))) {
        /* a training state that never backed up left only its lock (held by our caller) */
        if (holds_only(fd, CKPT__LOCK_FILE) &&
            ckpt__stat_regular(NULL, fd, CKPT__LOCK_FILE, dir) == CKPT_OK)
            unlinkat(fd, CKPT__LOCK_FILE, 0);
        ckpt__error_restore(&keep);
        close(fd);
        return CKPT_OK;
    }
    DIR *d;
    if ((rc = ckpt__listing_or_close(&d, fd, dir)) != CKPT_OK)
        return rc;
    struct dirent *e;
    char prefix[8400];
    while ((e = readdir(d)) != NULL && rc == CKPT_OK) {
        size_t n = strlen(e->d_name);
        if (n <= 6 || !ckpt__ends_with(e->d_name, ".index") ||
            !ckpt__has_magic(fd, e->d_name, CKPT__MAGIC_INDEX, 8))
            continue;
        if ((rc = ckpt__path(prefix, sizeof prefix, "%s/%.*s", dir, (int)(n - 6), e->d_name)) ==
            CKPT_OK)
            rc = ckpt_checkpoint_delete(prefix);
    }
    closedir(d);
    if (rc == CKPT_OK)
        rc = ckpt__gc(dir, 0, NULL, NULL, NULL, 0);
    /* the lock too: delete_backup's caller holds it (its manager), and chief/ goes */
    static const char *const files[] = { CKPT__STATE_FILE, "metrics.jsonl", CKPT__RESTART_FILE,
                                         CKPT__HALT_FILE, CKPT__IDENTITY_FILE, CKPT__LOCK_FILE };
    for (size_t i = 0; rc == CKPT_OK && i < CKPT__ARRAY_LEN(files); i++)
        if (ckpt__stat_regular(NULL, fd, files[i], dir) == CKPT_OK && unlinkat(fd, files[i], 0) != 0)
            rc = ckpt__errno(errno, "unlink", files[i]);
    if (rc == CKPT_OK) /* a file that was not there: the stat's answer, not an error */
        ckpt__error_restore(&keep);
    close(fd);
    return rc;
}

int ckpt__remove_backup_dir(const char *work)
{
    char chief[4200];
    int ours = 0;
    int rc = ckpt__path(chief, sizeof chief, "%s/" CKPT__CHIEF_DIR, work);
    if (rc == CKPT_OK)
        rc = clear_checkpoint_dir(chief, &ours);
    if (rc != CKPT_OK)
        return rc;
    int wfd;
    ckpt__saved_error keep = ckpt__error_save(); /* the caller's pending error, put back */
    if ((rc = ckpt__dir_open(&wfd, work)) != CKPT_OK) {
        if (rc != CKPT_ENOTFOUND)
            return rc;
        ckpt__error_restore(&keep); /* no work directory: nothing to remove */
        return CKPT_OK;
    }
    gc_ctx g = { work, 0, NULL, NULL, 0 };
    if (ours) /* workertemp_<r> next to a chief/ that is ours are ours */
        rc = gc_workertemp(&g, wfd, work);
    if (rc == CKPT_OK && ours && ckpt__stat_regular(NULL, wfd, CKPT__HALT_FILE, work) == CKPT_OK &&
        unlinkat(wfd, CKPT__HALT_FILE, 0) != 0 && errno != ENOENT) /* a request made in <work> */
        rc = ckpt__errno(errno, "unlink", CKPT__HALT_FILE);
    if (rc == CKPT_OK) /* no halt file: the stat's answer, not an error */
        ckpt__error_restore(&keep);
    if (rc == CKPT_OK && unlinkat(wfd, CKPT__CHIEF_DIR, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR)
            ckpt__log(CKPT_LOG_WARN, "delete_backup: left %s: it holds files mpickpt did not write",
                      chief);
        else
            rc = ckpt__errno(errno, "rmdir", chief);
    }
    close(wfd);
    if (rc == CKPT_OK && rmdir(work) != 0 && errno != ENOENT) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            ckpt__log(CKPT_LOG_WARN, "delete_backup: left %s: it holds files mpickpt did not write",
                      work);
        else
            rc = ckpt__errno(errno, "rmdir", work);
    }
    if (rc == CKPT_OK)
        rc = ckpt__fsync_parent(work);
    return rc;
}
