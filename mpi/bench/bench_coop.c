/* mpickpt-bench --scenario coop_restore: the cooperative restore (issue 32, mpi/restore_coop.c).
 * Two checkpoints of --mb-per-rank M MiB of float32:
 *   replicated  one replicated tensor, saved once (by its primary rank), restored on every rank;
 *   reshard     one tensor partitioned by rows, saved on ceil(N/2) ranks, restored on all N
 *               (N->M: every restoring rank's box straddles the writers' pieces).
 * Each restored --reps times with MPICKPT_RESTORE_COOPERATIVE=1 and =0, interleaved, the page
 * cache of the checkpoint's files dropped before each (fsync, then posix_fadvise DONTNEED on every
 * file, so the reads come from the disk). Measured: bytes read from storage (the sum over ranks
 * of the rchar delta of /proc/self/io across the restore) over the checkpoint's size (its files'
 * bytes), and the restore's time (max over ranks, median of the reps). Rank 0 prints one line per
 * case and mode; with --json one JSON line each:
 *   {"scenario":"coop_restore","case","cooperative","ranks","writers","ckpt_bytes","bytes_read",
 *    "read_over_ckpt","disk_bytes","disk_over_ckpt","restore_s","reps"}
 *    "net_bytes"
 * (disk_bytes: the sum of read_bytes, what the block layer read: on one host the page cache
 * already shares one rank's read with the others, so this stays near 1x without cooperation;
 * rchar is what each rank asks of storage, which on a parallel file system or several nodes is
 * what travels. Between real nodes, tests/cluster/bench_cluster.sh, Open MPI's tcp BTL reads
 * the forwarded bytes from sockets, which rchar counts too: bytes_read is rchar less what the
 * rank's TCP sockets received (tcpi_bytes_received), net_bytes the sum of the latter.)
 * Values are checked after every restore. Collective. */
#include "bench.h"
#include "tcp_received.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* rchar (bytes passed by read calls) less what TCP sockets received, read_bytes (bytes the block
 * layer read for this process: 0 for pages another rank's read brought into this host's page
 * cache) and what TCP sockets received */
static void io_now(uint64_t v[3])
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[256];
    unsigned long long x;
    v[0] = v[1] = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "rchar: %llu", &x) == 1)
            v[0] = x;
        else if (sscanf(line, "read_bytes: %llu", &x) == 1)
            v[1] = x;
    }
    if (f)
        fclose(f);
    v[2] = ckpt_bench_tcp_received();
    v[0] -= v[2];
}

/* Rank 0: fsync and drop from the page cache every file of checkpoint `prefix` (those named
 * <base>.*); returns their bytes. Collective (a barrier after). */
static uint64_t drop_ckpt_cache(const char *prefix)
{
    uint64_t total = 0;
    if (g_rank == 0) {
        char dir[4096], base[1024];
        snprintf(dir, sizeof dir, "%s", prefix);
        char *sl = strrchr(dir, '/');
        snprintf(base, sizeof base, "%s.", sl ? sl + 1 : dir);
        if (sl)
            *sl = '\0';
        DIR *d = opendir(sl ? dir : ".");
        if (!d)
            die_errno("opendir", dir);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, base, strlen(base)) != 0)
                continue;
            char path[8200];
            snprintf(path, sizeof path, "%s/%s", sl ? dir : ".", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0)
                die_errno("open", path);
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
                total += (uint64_t)st.st_size;
                (void)fsync(fd);
                (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            }
            close(fd);
        }
        closedir(d);
    }
    MPI_Bcast(&total, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return total;
}

/* rows [*r0, *r0 + *n) of part k of `parts` of `rows` */
static void rows_of(int64_t rows, int k, int parts, int64_t *r0, int64_t *n)
{
    int64_t b = rows / parts, x = rows % parts;
    *r0 = k * b + (k < x ? k : x);
    *n = b + (k < x ? 1 : 0);
}

/* A saver over `comm` with the case's tensor: the replicated one whole, or this rank's rows of
 * the partitioned one (`parts` ways). */
static ckpt_saver *make(MPI_Comm comm, int replicated, float *data, int64_t rows, int parts,
                        int part, int64_t *r0, int64_t *n)
{
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, comm, NULL);
    if (rc != CKPT_OK)
        die("ckpt_saver_create", rc);
    int64_t dims[2] = {rows, COLS};
    ckpt_shape sh;
    ckpt_shape_init(&sh, 2, dims);
    if (replicated) {
        *r0 = 0;
        *n = rows;
        rc = ckpt_saver_add_replicated(s, "t", CKPT_FLOAT32, &sh, data, CKPT_REPLICA_PRIMARY);
    } else {
        rows_of(rows, part, parts, r0, n);
        ckpt_slice sl;
        ckpt_slice_full(&sl, &sh);
        sl.start[0] = *r0;
        sl.count[0] = *n;
        rc = ckpt_saver_add_slice(s, "t", CKPT_FLOAT32, &sh, &sl, data);
    }
    if (rc != CKPT_OK)
        die("ckpt_saver_add", rc);
    return s;
}

static void run_case(const opts *o, int replicated)
{
    const char *name = replicated ? "replicated" : "reshard";
    int64_t rows = (int64_t)(((size_t)o->mb << 20) / (COLS * sizeof(float)));
    if (rows < g_size)
        rows = g_size;
    int writers = replicated ? g_size : (g_size + 1) / 2;
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/bench-coop-%s", o->dir, name);
    /* write */
    MPI_Comm wcomm;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank < writers ? 0 : MPI_UNDEFINED, g_rank, &wcomm);
    delete_ckpt(prefix);
    if (wcomm != MPI_COMM_NULL) {
        int64_t r0, n;
        rows_of(rows, g_rank, writers, &r0, &n);
        int64_t my = replicated ? rows : n;
        float *w = alloc_touched((size_t)(my * COLS) * sizeof(float));
        fill_linear(w, (size_t)(my * COLS), replicated ? 0 : (uint64_t)(r0 * COLS));
        ckpt_saver *s = make(wcomm, replicated, w, rows, writers, g_rank, &r0, &n);
        int rc = ckpt_saver_write(s, prefix, NULL);
        if (rc != CKPT_OK)
            die("ckpt_saver_write", rc);
        ckpt_saver_free(s);
        free(w);
        MPI_Comm_free(&wcomm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* restore on every rank, cooperation on and off interleaved */
    int64_t r0, n;
    rows_of(rows, g_rank, g_size, &r0, &n);
    if (replicated) {
        r0 = 0;
        n = rows;
    }
    float *buf = alloc_touched((size_t)(n * COLS) * sizeof(float));
    ckpt_saver *s = make(MPI_COMM_WORLD, replicated, buf, rows, g_size, g_rank, &r0, &n);
    double t[2][MAX_REPS];
    uint64_t bytes_read[2][3] = {{0, 0, 0}, {0, 0, 0}}, ckpt_bytes = 0;
    int reps = o->reps;
    for (int i = 0; i < reps; i++)
        for (int k = 0; k < 2; k++) {
            int coop = (i + k) % 2 == 0;
            setenv("MPICKPT_RESTORE_COOPERATIVE", coop ? "1" : "0", 1);
            memset(buf, 0, (size_t)(n * COLS) * sizeof(float));
            ckpt_bytes = drop_ckpt_cache(prefix);
            MPI_Barrier(MPI_COMM_WORLD);
            uint64_t before[3], after[3], mine[3], sum[3];
            io_now(before);
            double t0 = now();
            int rc = ckpt_saver_restore(s, prefix, NULL, NULL);
            double dt = now() - t0;
            io_now(after);
            mine[0] = after[0] - before[0];
            mine[1] = after[1] - before[1];
            mine[2] = after[2] - before[2];
            if (rc != CKPT_OK)
                die("ckpt_saver_restore", rc);
            t[coop][i] = max_all(dt);
            MPI_Allreduce(mine, sum, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
            bytes_read[coop][0] = sum[0]; /* the same every rep */
            bytes_read[coop][1] = sum[1];
            bytes_read[coop][2] = sum[2];
            if (!check_linear(buf, (size_t)(n * COLS), replicated ? 0 : (uint64_t)(r0 * COLS))) {
                fprintf(stderr, "mpickpt-bench: rank %d: coop_restore %s restored wrong values\n",
                        g_rank, name);
                MPI_Abort(MPI_COMM_WORLD, 5);
            }
        }
    unsetenv("MPICKPT_RESTORE_COOPERATIVE");
    ckpt_saver_free(s);
    free(buf);
    delete_ckpt(prefix);
    if (g_rank != 0)
        return;
    for (int coop = 1; coop >= 0; coop--) {
        double ratio = (double)bytes_read[coop][0] / (double)ckpt_bytes;
        double disk = (double)bytes_read[coop][1] / (double)ckpt_bytes;
        double med = median(t[coop], reps);
        printf("%-20s %-10s coop %-3s %d->%d ranks: read %.1f MiB of a %.1f MiB checkpoint "
               "(%.2fx; from the disk %.2fx; %.1f MiB over TCP), restore %.4f s (cold)\n",
               "coop_restore", name, coop ? "on" : "off", writers, g_size,
               (double)bytes_read[coop][0] / MiB, (double)ckpt_bytes / MiB, ratio, disk,
               (double)bytes_read[coop][2] / MiB, med);
        if (o->json)
            printf("{\"scenario\":\"coop_restore\",\"case\":\"%s\",\"cooperative\":%d,"
                   "\"ranks\":%d,\"writers\":%d,\"ckpt_bytes\":%llu,\"bytes_read\":%llu,"
                   "\"read_over_ckpt\":%.4f,\"disk_bytes\":%llu,\"disk_over_ckpt\":%.4f,"
                   "\"restore_s\":%.6f,\"reps\":%d,\"net_bytes\":%llu}\n",
                   name, coop, g_size, writers, (unsigned long long)ckpt_bytes,
                   (unsigned long long)bytes_read[coop][0], ratio,
                   (unsigned long long)bytes_read[coop][1], disk, med, reps,
                   (unsigned long long)bytes_read[coop][2]);
    }
    fflush(stdout);
}

void run_coop_restore(const opts *o)
{
    run_case(o, 1);
    run_case(o, 0);
}
