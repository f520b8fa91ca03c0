/* Descriptors closed in children made by fork() (lib/forkfd.h). */
#include "forkfd.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int *g_fds;
static size_t g_n, g_cap;

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_mu);
}

static void fork_child(void)
{
    for (size_t i = 0; i < g_n; i++)
        close(g_fds[i]);
    g_n = 0;
    pthread_mutex_unlock(&g_mu);
}

static void fork_setup(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int ckpt__forkfd_add(const int *fds, size_t n)
{
    pthread_once(&g_once, fork_setup);
    pthread_mutex_lock(&g_mu);
    int ok = 1;
    if (g_n + n > g_cap) {
        size_t cap = (g_n + n) * 2;
        int *p = realloc(g_fds, cap * sizeof *p);
        if (p) {
            g_fds = p;
            g_cap = cap;
        } else {
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < n; i++)
        g_fds[g_n++] = fds[i];
    pthread_mutex_unlock(&g_mu);
    return ok;
}

void ckpt__forkfd_close(int fd)
{
    pthread_once(&g_once, fork_setup);
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        if (g_fds[i] == fd) {
            g_fds[i] = g_fds[--g_n];
            break;
        }
    close(fd);
    pthread_mutex_unlock(&g_mu);
}
