/*
 * The payload bytes this process's TCP sockets have received so far (tcpi_bytes_received of each
 * socket in /proc/self/fd). Between real nodes Open MPI's tcp BTL reads forwarded bytes with
 * readv, which rchar of /proc/self/io counts too: "bytes read from storage" is rchar less this.
 * Shared by mpickpt-bench's coop_restore rows (bench_coop.c) and the test that asserts the same
 * measure (tests/mpi/test_coop_restore.c). Header only; Linux.
 */
#ifndef MPICKPT_BENCH_TCP_RECEIVED_H
#define MPICKPT_BENCH_TCP_RECEIVED_H

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

static inline uint64_t ckpt_bench_tcp_received(void)
{
    uint64_t sum = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        struct stat st;
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) || fstat(fd, &st) != 0 ||
            !S_ISSOCK(st.st_mode))
            continue;
        memset(&ti, 0, sizeof ti);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
            len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
            sum += ti.tcpi_bytes_received;
    }
    if (d)
        closedir(d);
    return sum;
}

#endif
