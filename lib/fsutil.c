/*
 * File-system helpers. Everything inside a checkpoint directory is treated as written by someone
 * else (docs/design.md §10): entries are reached by an open directory's descriptor, never through a
 * symbolic link (O_NOFOLLOW, fstatat(AT_SYMLINK_NOFOLLOW)), files are opened with O_NONBLOCK and
 * checked to be regular files before use (a FIFO or a device never blocks or feeds a read), new
 * files are created with O_EXCL under names nobody can predict, and trees are removed by
 * descriptor. Only the directory the caller names is resolved as a path (its symlinks are the
 * caller's choice); see ckpt__ckptdir_open() for which entries below it are trusted. This file:
 * errors, paths, directories, opening files, temp names, renames, listings; lib/fileio.c: whole
 * transfers and durable writes, tree removal, the pad, the same by path, reads with CRCs.
 */
#include "fsutil.h"
#include "paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ckpt__errno(int err, const char *what, const char *path)
{
    int code;
    switch (err) {
    case ENOSPC:
    case EDQUOT: code = CKPT_ENOSPC; break;
    case ENOENT: code = CKPT_ENOTFOUND; break;
    case ENOMEM: code = CKPT_ENOMEM; break;
    case EEXIST: code = CKPT_EEXISTS; break;
    case ELOOP:
        return ckpt__error(CKPT_ECORRUPT,
                           "%s %s: it is a symbolic link; mpickpt never follows links inside a "
                           "checkpoint directory (remove it)",
                           what, path);
    default: code = CKPT_EIO; break;
    }
    ckpt__error(code, "%s %s: %s", what, path, strerror(err));
    return ckpt__error_set_errno(code, err);
}

int ckpt__path(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size)
        return ckpt__error(CKPT_EINVAL, "path too long (%d bytes, limit %zu)", n, size - 1);
    return CKPT_OK;
}

int ckpt__split_path(char *dir, size_t dsize, char *base, size_t bsize, const char *path)
{
    const char *slash = strrchr(path, '/');
    int rc;
    if (!slash) {
        if ((rc = ckpt__path(dir, dsize, ".")) != CKPT_OK)
            return rc;
        return ckpt__path(base, bsize, "%s", path);
    }
    size_t n = (size_t)(slash - path);
    if ((rc = ckpt__path(dir, dsize, "%.*s", (int)(n ? n : 1), n ? path : "/")) != CKPT_OK)
        return rc;
    return ckpt__path(base, bsize, "%s", slash + 1);
}

int ckpt__safe_filename(const char *name)
{
    size_t n = name ? strnlen(name, 256) : 0;
    return n > 0 && n <= 255 && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

const char *ckpt__file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "a special file";
    }
}

void ckpt__close(int fd)
{
    if (fd >= 0)
        close(fd);
}

/* ---- directories --------------------------------------------------------------------------- */

/* The mode of a new entry of dirfd: `mode`, or only the owner's part of it when dirfd is a private
 * directory (no permission for group or others: a node-local cache, lib/privdir.h), so that what
 * is created there stays private even if the directory's mode is loosened later. */
static mode_t mode_in(int dirfd, mode_t mode)
{
    struct stat st;
    if (fstat(dirfd, &st) == 0 && !(st.st_mode & 077))
        return mode & 0700;
    return mode;
}

int ckpt__dir_open(int *fd, const char *path)
{
    *fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0)
        return ckpt__errno(errno, "open directory", path);
    return CKPT_OK;
}

int ckpt__subdir_open(int *fd, int dirfd, const char *name, int create, const char *shown)
{
    *fd = -1;
    if (create && mkdirat(dirfd, name, mode_in(dirfd, 0755)) != 0 && errno != EEXIST)
        return ckpt__error(errno == ENOSPC || errno == EDQUOT ? CKPT_ENOSPC : CKPT_EIO,
                           "mkdir %s/%s: %s", shown, name, strerror(errno));
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return ckpt__error(errno == ENOENT ? CKPT_ENOTFOUND : CKPT_EIO, "%s/%s: %s", shown, name,
                           strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ckpt__error(CKPT_ECORRUPT,
                           "refusing to use %s/%s: it is %s, not a directory (mpickpt never "
                           "follows links inside a checkpoint directory; remove it)",
                           shown, name, ckpt__file_kind(st.st_mode));
    int d = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0) /* swapped for a link since the fstatat: ELOOP or ENOTDIR */
        return ckpt__error(errno == ENOENT ? CKPT_ENOTFOUND : CKPT_ECORRUPT,
                           "refusing to use %s/%s: %s (it changed while mpickpt opened it)", shown,
                           name, strerror(errno));
    if (fstat(d, &st) != 0) {
        int err = errno;
        close(d);
        return ckpt__errno(err, "stat", name);
    }
    /* (errno cannot tell this case apart: it still holds mkdirat's EEXIST) */
    if (create && st.st_uid != geteuid()) {
        close(d);
        return ckpt__error(CKPT_ECORRUPT,
                           "refusing to write into %s/%s: it belongs to uid %u, not to this "
                           "process (uid %u); remove it",
                           shown, name, (unsigned)st.st_uid, (unsigned)geteuid());
    }
    *fd = d;
    return CKPT_OK;
}

int ckpt__subdir_create(int *fd, int dirfd, const char *name, const char *shown)
{
    *fd = -1;
    if (mkdirat(dirfd, name, mode_in(dirfd, 0755)) != 0) {
        int err = errno;
        if (err == EEXIST)
            return ckpt__name_taken(dirfd, name, shown);
        return ckpt__error(err == ENOSPC || err == EDQUOT ? CKPT_ENOSPC : CKPT_EIO,
                           "mkdir %s: %s", shown, strerror(err));
    }
    /* made just now; still checked: the parent may be writable by others, who could have
     * swapped it for something else since */
    int d = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (d < 0 || fstat(d, &st) != 0 || st.st_uid != geteuid()) {
        int err = errno;
        ckpt__close(d);
        return ckpt__error(CKPT_ECORRUPT, "refusing to use %s: it changed right after mpickpt "
                                          "made it (%s)",
                           shown, d < 0 ? strerror(err) : "another owner");
    }
    *fd = d;
    return CKPT_OK;
}

int ckpt__mkdir_p(const char *path, unsigned mode)
{
    char buf[4096];
    int rc = ckpt__path(buf, sizeof buf, "%s", path);
    if (rc != CKPT_OK)
        return rc;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return ckpt__errno(errno, "mkdir", buf);
        *p = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST)
        return ckpt__errno(errno, "mkdir", buf);
    return CKPT_OK;
}

int ckpt__ckptdir_open(int *dirfd, int *workfd, const char *path, int create)
{
    *dirfd = -1;
    if (workfd)
        *workfd = -1;
    char buf[4096], parent[4096], last[4096];
    int rc = ckpt__path(buf, sizeof buf, "%s", path && *path ? path : ".");
    if (rc != CKPT_OK)
        return rc;
    for (size_t n = strlen(buf); n > 1 && buf[n - 1] == '/'; n--)
        buf[n - 1] = '\0';
    if ((rc = ckpt__split_path(parent, sizeof parent, last, sizeof last, buf)) != CKPT_OK)
        return rc;
    int work = -1, dir = -1;
    if (strcmp(last, CKPT__CHIEF_DIR) == 0) {
        /* The training-state layout: <work>/chief and <work>/workertemp_<r>. <work> is the
         * caller's; chief/ is an entry of it like any other. */
        if ((create && (rc = ckpt__mkdir_p(parent, 0755)) != CKPT_OK) ||
            (rc = ckpt__dir_open(&work, parent)) != CKPT_OK)
            return rc;
        if ((rc = ckpt__subdir_open(&dir, work, CKPT__CHIEF_DIR, create, parent)) != CKPT_OK) {
            close(work);
            return rc;
        }
    } else {
        if ((create && (rc = ckpt__mkdir_p(buf, 0755)) != CKPT_OK) ||
            (rc = ckpt__dir_open(&dir, buf)) != CKPT_OK)
            return rc;
        if (workfd && (work = fcntl(dir, F_DUPFD_CLOEXEC, 0)) < 0) {
            rc = ckpt__errno(errno, "dup", buf);
            close(dir);
            return rc;
        }
    }
    *dirfd = dir;
    if (workfd)
        *workfd = work;
    else
        ckpt__close(work);
    return CKPT_OK;
}

/* ---- files ------------------------------------------------------------------------------------ */

/* CKPT_OK when entry `name` of dirfd is a regular file (size in *size), CKPT_ENOTFOUND when there
 * is none, CKPT_ECORRUPT naming what it is otherwise. Does not open it. */
int ckpt__stat_regular(uint64_t *size, int dirfd, const char *name, const char *shown)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return ckpt__error(errno == ENOENT ? CKPT_ENOTFOUND : CKPT_EIO, "%s/%s: %s", shown, name,
                           strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ckpt__error(CKPT_ECORRUPT,
                           "%s/%s is %s, not a regular file; mpickpt only reads files it wrote",
                           shown, name, ckpt__file_kind(st.st_mode));
    if (size)
        *size = (uint64_t)st.st_size;
    return CKPT_OK;
}

int ckpt__exists_at(int dirfd, const char *name)
{
    struct stat st;
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

int ckpt__file_open(int *fd, uint64_t *size, int dirfd, const char *name, int flags,
                    const char *shown)
{
    *fd = -1;
    /* Checked before opening too: opening some devices has side effects. */
    int rc = ckpt__stat_regular(NULL, dirfd, name, shown);
    if (rc != CKPT_OK)
        return rc;
    int f = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) {
        if (errno == ENOENT)
            return ckpt__error(CKPT_ENOTFOUND, "%s/%s: %s", shown, name, strerror(errno));
        return ckpt__errno(errno, "open", name);
    }
    struct stat st;
    if (fstat(f, &st) != 0) {
        rc = ckpt__errno(errno, "stat", name);
        close(f);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) { /* swapped since the fstatat */
        close(f);
        return ckpt__error(CKPT_ECORRUPT, "%s/%s is %s, not a regular file", shown, name,
                           ckpt__file_kind(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    if (size)
        *size = (uint64_t)st.st_size;
    *fd = f;
    return CKPT_OK;
}

int ckpt__file_open_append(int *fd, int dirfd, const char *name, const char *shown)
{
    *fd = -1;
    uint64_t size;
    int rc = ckpt__stat_regular(&size, dirfd, name, shown);
    if (rc != CKPT_OK && rc != CKPT_ENOTFOUND)
        return rc;
    int f = openat(dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                   mode_in(dirfd, 0644));
    if (f < 0)
        return ckpt__errno(errno, "open for appending", name);
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return ckpt__error(CKPT_ECORRUPT, "%s/%s is not a regular file", shown, name);
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return CKPT_OK;
}

int ckpt__file_create(int *fd, int dirfd, const char *name, int flags, const char *shown)
{
    *fd = openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 mode_in(dirfd, 0644));
    if (*fd < 0)
        return ckpt__error(errno == ENOSPC || errno == EDQUOT ? CKPT_ENOSPC
                           : errno == EEXIST                  ? CKPT_EEXISTS
                                                              : CKPT_EIO,
                           "create %s/%s: %s", shown, name, strerror(errno));
    return CKPT_OK;
}

int ckpt__fsync_fd(int fd, const char *shown)
{
    if (fsync(fd) != 0 && errno != EINVAL) /* EINVAL: the file system has no fsync for dirs */
        return ckpt__errno(errno, "fsync", shown);
    return CKPT_OK;
}

/* /proc/self/fd/<n> names the open file itself: HDF5, which opens files by name, reaches exactly
 * the inode that was checked, whatever happens to the directory entry afterwards. */
static int g_proc_fd = -1;
static pthread_once_t g_proc_once = PTHREAD_ONCE_INIT;

static void proc_probe(void)
{
    int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char p[64];
    struct stat a, b;
    g_proc_fd = 0;
    if (fd < 0)
        return;
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        g_proc_fd = 1;
    close(fd);
}

int ckpt__fd_path(char *out, size_t size, int fd, const char *fallback)
{
    pthread_once(&g_proc_once, proc_probe);
    if (g_proc_fd == 1)
        return ckpt__path(out, size, "/proc/self/fd/%d", fd);
    return ckpt__path(out, size, "%s", fallback);
}

uint64_t ckpt__random_u64(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* No entropy yet (early boot): still unique, unpredictable enough for O_EXCL to do the
         * rest (a clash fails the create, it never follows anything). */
        static uint64_t seq;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^
            __atomic_add_fetch(&seq, 0x9e3779b97f4a7c15u, __ATOMIC_RELAXED);
    }
    return r;
}

int ckpt__temp_name(char *out, size_t size, const char *name)
{
    return ckpt__path(out, size, "%s.tmp-%016llx", name, (unsigned long long)ckpt__random_u64());
}

/* Tests only (ckpt__noreplace_force_link): take the fallback as if the file system refused the
 * flag. */
static atomic_int g_force_link;

void ckpt__noreplace_force_link(int on)
{
    atomic_store(&g_force_link, on);
}

int ckpt__rename_noreplace(int fromfd, const char *from, int tofd, const char *to)
{
    if (!atomic_load(&g_force_link)) {
        if (renameat2(fromfd, from, tofd, to, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
            return -1;
    }
    /* The file system refuses the flag (NFS: EINVAL): a hard link takes the name only when it is
     * free (EEXIST otherwise, whatever stands there: a link is not followed, flags 0), then the
     * old name goes. Between the two, the file has both names; a crash there leaves the in-flight
     * name for gc. */
    if (linkat(fromfd, from, tofd, to, 0) != 0)
        return -1;
    if (unlinkat(fromfd, from, 0) != 0 && errno != ENOENT) {
        int err = errno;
        unlinkat(tofd, to, 0); /* ours: it was made just now */
        errno = err;
        return -1;
    }
    return 0;
}

int ckpt__is_temp_name(const char *name, const char *stem_suffix)
{
    const char *p = strstr(name, ".tmp-");
    if (!p || !p[5])
        return 0;
    for (const char *q = p + 5; *q; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f')))
            return 0;
    size_t stem = (size_t)(p - name), n = strlen(stem_suffix);
    if (stem_suffix[0] == '.')
        return stem > n && strncmp(p - n, stem_suffix, n) == 0;
    return stem == n && strncmp(name, stem_suffix, n) == 0;
}

/* ---- listings and file kinds (state file scans, gc) ------------------------------------------- */

/* A listing of directory fd from its first entry (on a duplicate descriptor: fd stays open, and
 * since the two share one read position it is rewound). NULL with errno set on failure. */
DIR *ckpt__listing(int fd)
{
    int lfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        int err = errno;
        ckpt__close(lfd);
        errno = err;
        return NULL;
    }
    rewinddir(d);
    return d;
}

/* listing() of fd, or an error naming `dir` with fd closed. */
int ckpt__listing_or_close(DIR **d, int fd, const char *dir)
{
    if ((*d = ckpt__listing(fd)) != NULL)
        return CKPT_OK;
    int rc = ckpt__errno(errno, "opendir", dir);
    close(fd);
    return rc;
}

/* 1 when regular file `name` of dirfd starts with `magic` (len bytes). Opens it safely. */
int ckpt__has_magic(int dirfd, const char *name, const char *magic, size_t len)
{
    int fd;
    ckpt__saved_error keep = ckpt__error_save(); /* a yes/no answer: the caller's error stays */
    if (ckpt__file_open(&fd, NULL, dirfd, name, O_RDONLY, ".") != CKPT_OK) {
        ckpt__error_restore(&keep);
        return 0;
    }
    char head[16];
    ssize_t n = pread(fd, head, len, 0);
    close(fd);
    return n == (ssize_t)len && memcmp(head, magic, len) == 0;
}

#define HDF5_SIGNATURE "\x89HDF\r\n\x1a\n"

/* A data file mpickpt wrote (or started to): an HDF5 file, or empty (created, then the writer
 * died before HDF5 wrote its superblock). */
int ckpt__is_data_file(int dirfd, const char *name)
{
    uint64_t size = 0;
    ckpt__saved_error keep = ckpt__error_save(); /* a yes/no answer: the caller's error stays */
    if (ckpt__stat_regular(&size, dirfd, name, ".") != CKPT_OK) {
        ckpt__error_restore(&keep);
        return 0;
    }
    return size == 0 || ckpt__has_magic(dirfd, name, HDF5_SIGNATURE, 8);
}
