/* mpickpt-bench: timing, statistics-free helpers and the plain-POSIX baselines (write+fsync,
 * read, read + CRC-32C) that every scenario measures the library against. A timed baseline is
 * collective (barrier before, max over ranks after); an I/O error aborts the job with a message. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64u << 20) /* baseline write/read chunk */

double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double max_all(double v)
{
    double m = 0;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

void die(const char *what, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    fprintf(stderr, "mpickpt-bench: rank %d: %s: %s: %s\n", g_rank, what, ckpt_strerror(rc),
            e && e->message[0] ? e->message : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void die_errno(const char *what, const char *path)
{
    fprintf(stderr, "mpickpt-bench: rank %d: %s %s: %s\n", g_rank, what, path, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Page-aligned, pre-faulted memory (first touch is slow here: never inside a measurement). */
void *alloc_touched(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
        fprintf(stderr, "mpickpt-bench: rank %d: cannot allocate %zu bytes\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(p, 0, n);
    return p;
}

/* Values of a tensor: element i of a linear run starting at `base` (exact in float32). */
void fill_linear(float *f, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i++)
        f[i] = (float)((base + i) & 0xFFFFF);
}

/* Checks a sample of the elements (and the last one) against fill_linear's values. */
int check_linear(const float *f, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i += 4099)
        if (f[i] != (float)((base + i) & 0xFFFFF))
            return 0;
    return n == 0 || f[n - 1] == (float)((base + n - 1) & 0xFFFFF);
}

static void write_all(int fd, const unsigned char *p, size_t n, const char *path)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n > CHUNK ? CHUNK : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die_errno("write", path);
        p += w;
        n -= (size_t)w;
    }
}

static void read_all(int fd, unsigned char *p, size_t n, const char *path)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n > CHUNK ? CHUNK : n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            die_errno("read", path);
        }
        p += r;
        n -= (size_t)r;
    }
}

/* open + write(2) in large chunks + fsync + close. Local. */
void plain_write(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die_errno("open", path);
    write_all(fd, buf, n, path);
    if (fsync(fd) != 0)
        die_errno("fsync", path);
    if (close(fd) != 0)
        die_errno("close", path);
}

static void plain_read(const char *path, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die_errno("open", path);
    read_all(fd, buf, n, path);
    close(fd);
}

/* open + pread(2) from offset 0 in large chunks + close. Local. */
void plain_pread(const char *path, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die_errno("open", path);
    size_t done = 0;
    while (done < n) {
        size_t want = n - done > CHUNK ? CHUNK : n - done;
        ssize_t r = pread(fd, (unsigned char *)buf + done, want, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            die_errno("pread", path);
        }
        done += (size_t)r;
    }
    close(fd);
}

/* The least a reader that checks every byte must do: read(2) in 256 KiB chunks, each checksummed
 * right after it is read (mpickpt's own read loop, without HDF5, the index or MPI). */
static void checked_read(const char *path, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die_errno("open", path);
    const size_t chunk = (size_t)256 << 10;
    uint32_t crc = 0;
    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        read_all(fd, (unsigned char *)buf + off, len, path);
        crc = ckpt_crc32c_extend(crc, (unsigned char *)buf + off, len);
    }
    close(fd);
    static volatile uint32_t sink;
    sink ^= crc;
}

/* Timed write baseline (collective): max over ranks; the file stays (the caller removes it). */
double timed_plain_write(const char *path, const void *buf, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    plain_write(path, buf, n);
    return max_all(now() - t0);
}

double timed_plain_read(const char *path, void *buf, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    plain_read(path, buf, n);
    return max_all(now() - t0);
}

double timed_checked_read(const char *path, void *buf, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    checked_read(path, buf, n);
    return max_all(now() - t0);
}

void remove_all(const char *path)
{
    unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Drops the page cache on every node (collective). Returns 1 when it worked everywhere; on failure
 * *why says why (rank 0's view). */
int drop_caches(char *why, size_t whylen)
{
    int ok = 1, node_rank = 0;
    MPI_Comm_rank(g_node, &node_rank);
    if (node_rank == 0) {
        sync();
        int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
        if (fd < 0 || write(fd, "3", 1) != 1) {
            ok = 0;
            if (why)
                snprintf(why, whylen, "cannot write /proc/sys/vm/drop_caches: %s (needs root)",
                         strerror(errno));
        }
        if (fd >= 0)
            close(fd);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (why) {
        MPI_Bcast(why, (int)whylen, MPI_CHAR, 0, MPI_COMM_WORLD);
        why[whylen - 1] = '\0';
    }
    return all;
}
