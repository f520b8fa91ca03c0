/* A small tmpfs for full-disk tests (test_async, test_hostile_mpi): rank 0 mounts it (root only),
 * everyone uses it, it is unmounted at exit even when a check fails. Include after mpi_check.h,
 * in one translation unit per program (the state below is per program). */
#ifndef MPICKPT_TESTS_TMPFS_H
#define MPICKPT_TESTS_TMPFS_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_mnt[2300]; /* the mount point */
static int g_mounted;    /* rank 0: mounted by this process */

static inline void umount_at_exit(void)
{
    if (g_mounted) {
        char cmd[4800];
        snprintf(cmd, sizeof cmd, "umount '%s' 2>/dev/null || umount -l '%s'", g_mnt, g_mnt);
        if (system(cmd) != 0)
            fprintf(stderr, "[rank 0] could not unmount %s\n", g_mnt);
        g_mounted = 0;
    }
}

static inline int is_mounted(const char *path)
{
    FILE *f = fopen("/proc/mounts", "r");
    if (!f)
        return 0;
    char line[8192];
    int hit = 0;
    size_t n = strlen(path);
    while (fgets(line, sizeof line, f)) {
        char *p = strchr(line, ' ');
        if (p && strncmp(p + 1, path, n) == 0 && p[1 + n] == ' ')
            hit = 1;
    }
    fclose(f);
    return hit;
}

/* Bytes in use on the file system of `path`. */
static inline uint64_t fs_used(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) != 0)
        return 0;
    return (uint64_t)(v.f_blocks - v.f_bfree) * (uint64_t)v.f_frsize;
}

/* Rank 0 runs a shell command; its exit status is shared. Collective. */
static inline int rank0_system(int rank, const char *cmd)
{
    int rc = 0;
    if (rank == 0) {
        int st = system(cmd);
        rc = st == 0 ? 0 : (st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128));
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

/* Rank 0 mounts a tmpfs of `size_kib` KiB at g_mnt (which exists), unmounting a leftover of a
 * previous run first. Collective: "" in `reason` on every rank when mounted, else why not (not
 * root, mount failed): the caller skips. */
static inline void tmpfs_mount(int rank, long size_kib, char *reason, size_t size)
{
    reason[0] = '\0';
    if (rank == 0) {
        if (is_mounted(g_mnt)) { /* a previous run that could not clean up */
            g_mounted = 1;
            umount_at_exit();
        }
        if (geteuid() != 0) {
            snprintf(reason, size, "not root (euid %d)", (int)geteuid());
        } else {
            char cmd[2800];
            snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=%ldk tmpfs '%s'", size_kib, g_mnt);
            int st = system(cmd);
            if (st == 0 && is_mounted(g_mnt)) {
                g_mounted = 1;
                atexit(umount_at_exit);
            } else {
                snprintf(reason, size, "'%s' failed (status %d)", cmd, st);
            }
        }
    }
    MPI_Bcast(reason, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
}

#endif
