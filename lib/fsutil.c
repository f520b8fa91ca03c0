/*
 * File-system helpers. Everything inside a checkpoint directory is treated as written by someone
 * else (docs/design.md §10): entries are reached by an open directory's descriptor, never through a
 * symbolic link (O_NOFOLLOW, fstatat(AT_SYMLINK_NOFOLLOW)), files are opened with O_NONBLOCK and
 * checked to be regular files before use (a FIFO or a device never blocks or feeds a read), new
 * files are created with O_EXCL under names nobody can predict, and trees are removed by
 * descriptor. Only the directory the caller names is resolved as a path (its symlinks are the
 * caller's choice); see ckpt__ckptdir_open() for which entries below it are trusted.
 */
#include "fsutil.h"
#include "paths.h"

#include "mpickpt/crc32c.h"

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

/* How deep ckpt__rmtree_at() descends: mpickpt makes trees two levels deep; a deeper tree was made
 * by someone else and is left alone rather than exhausting descriptors. */
#define RMTREE_MAX_DEPTH 16

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

int ckpt__pread_full(int fd, void *buf, size_t len, uint64_t off, const char *what,
                     const char *shown)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ckpt__errno(n < 0 ? errno : EIO, what, shown);
        done += (size_t)n;
    }
    return CKPT_OK;
}

int ckpt__pwrite_full(int fd, const void *buf, size_t len, uint64_t off, const char *what,
                      const char *shown)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(fd, (const uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ckpt__errno(n < 0 ? errno : ENOSPC, what, shown);
        done += (size_t)n;
    }
    return CKPT_OK;
}

static int write_all(int fd, const void *data, size_t len, const char *shown)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ckpt__errno(n < 0 ? errno : EIO, "write", shown);
        p += n;
        len -= (size_t)n;
    }
    return CKPT_OK;
}

/* ckpt__write_file_atomic_at and ckpt__write_file_new_at: the final rename replaces, or not. */
static int write_file_at(int dirfd, const char *name, const void *data, size_t len,
                         const char *shown, int *renamed, int replace)
{
    char tmp[512], where[4400];
    if (renamed)
        *renamed = 0;
    int rc = ckpt__temp_name(tmp, sizeof tmp, name);
    if (rc != CKPT_OK)
        return rc;
    snprintf(where, sizeof where, "%s/%s", shown, tmp);
    int fd;
    if ((rc = ckpt__file_create(&fd, dirfd, tmp, O_WRONLY, shown)) != CKPT_OK)
        return rc;
    if ((rc = write_all(fd, data, len, where)) != CKPT_OK)
        goto fail;
    if (fsync(fd) != 0) {
        rc = ckpt__errno(errno, "fsync", where);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = ckpt__errno(errno, "close", where);
        goto fail;
    }
    fd = -1;
    /* renameat replaces whatever entry `name` is (a planted link included) without following
     * it; without `replace`, a name taken by anything is CKPT_EEXISTS and stays as it is */
    if (replace ? renameat(dirfd, tmp, dirfd, name) != 0
                : ckpt__rename_noreplace(dirfd, tmp, dirfd, name) != 0) {
        int err = errno; /* before snprintf, which may change it */
        snprintf(where, sizeof where, "%s/%s", shown, name);
        rc = err == EEXIST ? ckpt__name_taken(dirfd, name, where)
                           : ckpt__errno(err, "rename to", where);
        goto fail;
    }
    if (renamed)
        *renamed = 1;
    return ckpt__fsync_fd(dirfd, shown);
fail:
    ckpt__close(fd);
    unlinkat(dirfd, tmp, 0);
    return rc;
}

int ckpt__write_file_atomic_at(int dirfd, const char *name, const void *data, size_t len,
                               const char *shown, int *renamed)
{
    return write_file_at(dirfd, name, data, len, shown, renamed, 1);
}

int ckpt__write_file_new_at(int dirfd, const char *name, const void *data, size_t len,
                            const char *shown, int *renamed)
{
    return write_file_at(dirfd, name, data, len, shown, renamed, 0);
}

int ckpt__name_taken(int dirfd, const char *name, const char *shown)
{
    struct stat st;
    const char *kind = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0
                           ? ckpt__file_kind(st.st_mode)
                           : "something";
    return ckpt__error(CKPT_EEXISTS,
                       "%s already exists (%s this save did not create: another job saving the "
                       "same checkpoint?); it was left as it is",
                       shown, kind);
}

int ckpt__read_file_at(uint8_t **out, size_t *len, int dirfd, const char *name, size_t max,
                       const char *shown)
{
    *out = NULL;
    *len = 0;
    int fd;
    uint64_t fsize;
    int rc = ckpt__file_open(&fd, &fsize, dirfd, name, O_RDONLY, shown);
    if (rc != CKPT_OK)
        return rc;
    uint8_t *buf = NULL;
    if (fsize > (uint64_t)max) {
        rc = ckpt__error(CKPT_ECORRUPT, "%s/%s: %llu bytes, more than the %zu mpickpt accepts",
                         shown, name, (unsigned long long)fsize, max);
        goto done;
    }
    size_t size = (size_t)fsize;
    buf = malloc(size ? size : 1);
    if (!buf) {
        rc = ckpt__error(CKPT_ENOMEM, "%s/%s: cannot allocate %zu bytes", shown, name, size);
        goto done;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ckpt__errno(errno, "read", name);
            goto done;
        }
        if (n == 0)
            break; /* shrank while reading: the caller's length check catches it */
        got += (size_t)n;
    }
    *out = buf;
    *len = got;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return rc;
}

static int rmtree_at(int dfd, const char *name, const char *shown, int depth)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? CKPT_OK : ckpt__error(CKPT_EIO, "stat %s/%s: %s", shown, name,
                                                       strerror(errno));
    if (!S_ISDIR(st.st_mode)) { /* a file, or a link: the entry goes, never its target */
        if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
            return ckpt__error(CKPT_EIO, "unlink %s/%s: %s", shown, name, strerror(errno));
        return CKPT_OK;
    }
    if (depth >= RMTREE_MAX_DEPTH)
        return ckpt__error(CKPT_EIO, "%s/%s: more than %d levels deep; not made by mpickpt, left "
                                     "alone",
                           shown, name, RMTREE_MAX_DEPTH);
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return CKPT_OK;
        if (errno == ELOOP || errno == ENOTDIR) /* swapped for a link or a file meanwhile */
            return rmtree_at(dfd, name, shown, depth + 1);
        return ckpt__error(CKPT_EIO, "open %s/%s: %s", shown, name, strerror(errno));
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return ckpt__error(CKPT_EIO, "opendir %s/%s: %s", shown, name, strerror(errno));
    }
    char sub[4400];
    snprintf(sub, sizeof sub, "%s/%s", shown, name);
    int rc = CKPT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int r = rmtree_at(dirfd(d), e->d_name, sub, depth + 1);
        if (r != CKPT_OK && rc == CKPT_OK)
            rc = r;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && rc == CKPT_OK)
        rc = ckpt__error(CKPT_EIO, "rmdir %s/%s: %s", shown, name, strerror(errno));
    return rc;
}

int ckpt__rmtree_at(int dirfd, const char *name, const char *shown)
{
    return rmtree_at(dirfd, name, shown, 0);
}

/* ---- room for HDF5's metadata ------------------------------------------------------------------ */

#define PAD_STEP ((uint64_t)64 << 10)

int ckpt__pad_grow(int fd, uint64_t bytes, const char *shown)
{
    /* Real blocks: fallocate where the file system has it, else zeros written out. Only the
     * part past the file's size: the pad grows a little per dataset, and allocating from 0 each
     * time walks every extent already there (a writer of 10000 tensors spent 0.9 s in it); in
     * steps of 64 KiB, not one call per dataset. */
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ckpt__error(CKPT_EIO, "room for HDF5's metadata in %s: %s", shown,
                           strerror(errno));
    if ((uint64_t)st.st_size >= bytes)
        return CKPT_OK;
    if (bytes < UINT64_MAX - PAD_STEP)
        bytes = (bytes + PAD_STEP - 1) / PAD_STEP * PAD_STEP; /* fewer, larger allocations */
    int err = fallocate(fd, 0, st.st_size, (off_t)(bytes - (uint64_t)st.st_size)) == 0 ? 0
                                                                                        : errno;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
        static const char zeros[65536];
        err = 0;
        for (uint64_t off = (uint64_t)st.st_size; off < bytes && !err;) {
            size_t n = bytes - off < sizeof zeros ? (size_t)(bytes - off) : sizeof zeros;
            ssize_t w = pwrite(fd, zeros, n, (off_t)off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                err = w < 0 ? errno : EIO;
            else
                off += (uint64_t)w;
        }
    }
    if (err == ENOSPC || err == EDQUOT) {
        ckpt__error(CKPT_ENOSPC, "no space left on device for this checkpoint in %s (%llu bytes "
                                 "of room for HDF5's metadata)",
                    shown, (unsigned long long)bytes);
        return ckpt__error_set_errno(CKPT_ENOSPC, err);
    }
    if (err) {
        ckpt__error(CKPT_EIO, "room for HDF5's metadata in %s: %s", shown, strerror(err));
        return ckpt__error_set_errno(CKPT_EIO, err);
    }
    return CKPT_OK;
}

int ckpt__pad_create(int *fd, int dirfd, const char *name, uint64_t bytes, const char *shown)
{
    *fd = -1;
    int rc = ckpt__rmtree_at(dirfd, name, shown);
    if (rc == CKPT_OK)
        rc = ckpt__file_create(fd, dirfd, name, O_WRONLY, shown);
    if (rc == CKPT_OK && (rc = ckpt__pad_grow(*fd, bytes, shown)) != CKPT_OK) {
        ckpt__pad_release(dirfd, name, *fd);
        *fd = -1;
    }
    return rc;
}

void ckpt__pad_release(int dirfd, const char *name, int fd)
{
    if (fd < 0)
        return;
    unlinkat(dirfd, name, 0);
    close(fd); /* the blocks go back once both are done */
}

/* ---- by path: the directory part resolved by ckpt__ckptdir_open(), the rest by descriptor ---- */

/* Opens the directory of `path` (checkpoint-directory rules) and copies its last component. */
static int open_parent(int *dirfd, char *dir, size_t dsize, char *base, size_t bsize,
                       const char *path)
{
    int rc = ckpt__split_path(dir, dsize, base, bsize, path);
    if (rc != CKPT_OK)
        return rc;
    if (!ckpt__safe_filename(base))
        return ckpt__error(CKPT_EINVAL, "'%s' does not end in a file name", path);
    return ckpt__ckptdir_open(dirfd, NULL, dir, 0);
}

int ckpt__fsync_parent(const char *path)
{
    char dir[4096], base[4096];
    int fd, rc = open_parent(&fd, dir, sizeof dir, base, sizeof base, path);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__fsync_fd(fd, dir);
    close(fd);
    return rc;
}

int ckpt__write_file_atomic(const char *path, const void *data, size_t len)
{
    char dir[4096], base[4096];
    int fd, rc = open_parent(&fd, dir, sizeof dir, base, sizeof base, path);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__write_file_atomic_at(fd, base, data, len, dir, NULL);
    close(fd);
    return rc;
}

int ckpt__read_file(uint8_t **out, size_t *len, const char *path, size_t max)
{
    char dir[4096], base[4096];
    *out = NULL;
    *len = 0;
    int fd, rc = open_parent(&fd, dir, sizeof dir, base, sizeof base, path);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__read_file_at(out, len, fd, base, max, dir);
    close(fd);
    return rc;
}

int ckpt__rmtree(const char *path)
{
    char dir[4096], base[4096];
    ckpt__saved_error keep = ckpt__error_save(); /* undo paths call this with their error */
    int fd, rc = open_parent(&fd, dir, sizeof dir, base, sizeof base, path);
    if (rc == CKPT_ENOTFOUND) { /* no parent: nothing to remove */
        ckpt__error_restore(&keep);
        return CKPT_OK;
    }
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt__rmtree_at(fd, base, dir);
    close(fd);
    return rc;
}

/* ---- reading with checksums ------------------------------------------------------------------ */

int ckpt__pread_crc(int fd, uint64_t off, void *buf, size_t len, uint32_t *crc)
{
    /* 256 KiB: the chunk just read is still in the 2 MiB L2 cache when it is checksummed, so the
     * check runs at in-cache speed instead of making a second pass over memory. */
    const size_t chunk = (size_t)256 << 10;
    uint32_t c = *crc;
    size_t done = 0;
    while (done < len) {
        size_t want = len - done < chunk ? len - done : chunk;
        ssize_t n = pread(fd, (uint8_t *)buf + done, want, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ckpt__error(CKPT_EIO, "read of %zu bytes at offset %llu: %s", want,
                               (unsigned long long)(off + done), strerror(errno));
        if (n == 0)
            return ckpt__error(CKPT_ECORRUPT, "data file ends at offset %llu, %zu bytes short",
                               (unsigned long long)(off + done), len - done);
        c = ckpt_crc32c_extend(c, (uint8_t *)buf + done, (size_t)n);
        done += (size_t)n;
    }
    *crc = c;
    return CKPT_OK;
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
