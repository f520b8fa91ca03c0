/* Names of what mpickpt writes in a checkpoint directory, and the in-flight directories of a save:
 * see paths.h for the contract. */
#include "paths.h"

#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

int ckpt__ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int ckpt__work_dir(char *out, size_t size, const char *dir)
{
    const char *slash = strrchr(dir, '/');
    const char *last = slash ? slash + 1 : dir;
    if (strcmp(last, CKPT__CHIEF_DIR) == 0)
        return slash ? ckpt__path(out, size, "%.*s", (int)(slash - dir ? slash - dir : 1), dir)
                     : ckpt__path(out, size, ".");
    return ckpt__path(out, size, "%s", dir);
}

int ckpt__data_name(char *out, size_t size, const char *base, int r, int n)
{
    return ckpt__path(out, size, "%s.data-%05d-of-%05d", base, r, n);
}

int ckpt__data_file_base(char *out, size_t size, const char *name)
{
    const char *p = strstr(name, ".data-");
    while (p && strstr(p + 1, ".data-"))
        p = strstr(p + 1, ".data-"); /* the last one: names may contain ".data-" themselves */
    if (!p || p == name || (size_t)(p - name) >= size)
        return 0;
    const char *q = p + 6;
    size_t a = strspn(q, "0123456789");
    if (a < 5 || strncmp(q + a, "-of-", 4) != 0)
        return 0;
    const char *r = q + a + 4;
    size_t b = strspn(r, "0123456789");
    if (b < 5 || r[b] != '\0' || strtoull(q, NULL, 10) >= strtoull(r, NULL, 10))
        return 0;
    memcpy(out, name, (size_t)(p - name));
    out[p - name] = '\0';
    return 1;
}

int ckpt__data_name_rank(const char *name, const char *base, int size)
{
    char b[256];
    if (!ckpt__data_file_base(b, sizeof b, name) || strcmp(b, base) != 0)
        return -1;
    const char *q = name + strlen(base) + 6; /* after ".data-": RRRRR-of-NNNNN, checked */
    unsigned long long r = strtoull(q, NULL, 10), n = strtoull(strstr(q, "-of-") + 4, NULL, 10);
    return n == (unsigned long long)size ? (int)r : -1; /* r < n: ckpt__data_file_base */
}

int ckpt__data_name_number(const char *name, const char *base, int *of)
{
    size_t n = strlen(base);
    int a = -1, b = -1, used = 0;
    if (strncmp(name, base, n) != 0 ||
        sscanf(name + n, ".data-%5d-of-%5d%n", &a, &b, &used) != 2 || name[n + (size_t)used])
        return -1;
    *of = b;
    return a >= 0 && a < b ? a : -1;
}

void ckpt__worker_temp_name(char *out, size_t size, int rank, const char *save_id)
{
    snprintf(out, size, "workertemp_%d.%s", rank, save_id);
}

/* 1 when s is exactly 16 lowercase hex digits (a save id). */
static int is_save_id(const char *s)
{
    size_t n = 0;
    for (; (s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'); n++)
        ;
    return n == 16 && s[n] == '\0';
}

int ckpt__is_worker_temp_name(const char *name)
{
    if (strncmp(name, "workertemp_", 11) != 0)
        return 0;
    const char *r = name + 11, *dot = strchr(r, '.');
    if (!dot) /* older versions: one per rank, shared by every save */
        return all_digits(r);
    size_t n = (size_t)(dot - r);
    return n > 0 && strspn(r, "0123456789") == n && is_save_id(dot + 1);
}

int ckpt__is_temp_content_name(const char *n)
{
    char b[256];
    return !strcmp(n, "part-00000-of-00001") || ckpt__data_file_base(b, sizeof b, n) ||
           (!strncmp(n, ".reserve-", 9) && all_digits(n + 9)) ||
           (!strncmp(n, ".pad-", 5) && all_digits(n + 5));
}

int ckpt__save_names_init(ckpt__save_names *c, const char *prefix, int rank, int size,
                          int shared, uint64_t save_id)
{
    memset(c, 0, sizeof *c);
    char base[4096];
    int rc;
    if ((rc = ckpt__path(c->prefix, sizeof c->prefix, "%s", prefix)) ||
        (rc = ckpt__split_path(c->dir, sizeof c->dir, base, sizeof base, prefix)))
        return rc;
    if (!ckpt__safe_filename(base) || strlen(base) > 200)
        return ckpt__error(CKPT_EINVAL, "checkpoint prefix '%s' needs a file name part of 1..200 "
                                        "bytes",
                           prefix);
    c->shared = shared;
    c->node_leader = -1;
    snprintf(c->base, sizeof c->base, "%s", base);
    snprintf(c->index_name, sizeof c->index_name, "%s.index", base);
    snprintf(c->save_id, sizeof c->save_id, "%016llx", (unsigned long long)save_id);
    snprintf(c->temp_name, sizeof c->temp_name, "%s.%s_temp", base, c->save_id);
    ckpt__worker_temp_name(c->worker_temp, sizeof c->worker_temp, rank, c->save_id);
    snprintf(c->reserve_name, sizeof c->reserve_name, ".reserve-%d", rank);
    snprintf(c->pad_name, sizeof c->pad_name, ".pad-%d", rank);
    if ((rc = ckpt__path(c->chief_temp, sizeof c->chief_temp, "%s.%s_temp", prefix,
                         c->save_id)) ||
        (rc = ckpt__work_dir(c->work, sizeof c->work, c->dir)))
        return rc;
    if (rank == 0 || shared) /* the shared file is made in the chief's temp dir */
        rc = ckpt__path(c->my_temp, sizeof c->my_temp, "%s", c->chief_temp);
    else
        rc = ckpt__path(c->my_temp, sizeof c->my_temp, "%s/%s", c->work, c->worker_temp);
    if (rc)
        return rc;
    if (shared)
        return (rc = ckpt__data_name(c->data_name, sizeof c->data_name, base, 0, 1)) ? rc
               : ckpt__path(c->my_file, sizeof c->my_file, "%s/%s", c->chief_temp, c->data_name);
    if ((rc = ckpt__data_name(c->data_name, sizeof c->data_name, base, rank, size)))
        return rc;
    return ckpt__path(c->my_file, sizeof c->my_file, "%s/%s", c->my_temp, c->data_name);
}

int ckpt__save_names_node(ckpt__save_names *c, int node, int nnodes, int leader)
{
    if (node < 0 || node >= nnodes || leader < 0)
        return ckpt__error(CKPT_EINVAL, "node %d of %d (leader rank %d)", node, nnodes, leader);
    int rc;
    if (leader == 0) {
        rc = ckpt__path(c->node_temp, sizeof c->node_temp, "%s", c->chief_temp);
    } else {
        char wt[64];
        ckpt__worker_temp_name(wt, sizeof wt, leader, c->save_id);
        rc = ckpt__path(c->node_temp, sizeof c->node_temp, "%s/%s", c->work, wt);
    }
    if (rc || (rc = ckpt__data_name(c->data_name, sizeof c->data_name, c->base, node, nnodes)))
        return rc;
    c->node_leader = leader;
    return ckpt__path(c->my_file, sizeof c->my_file, "%s/%s", c->node_temp, c->data_name);
}

int ckpt__node_temp_open(const ckpt__save_names *c, int dirfd, int workfd, int *fd)
{
    *fd = -1;
    if (c->node_leader < 0)
        return ckpt__error(CKPT_EINVAL, "internal: no node file in this save");
    if (c->node_leader == 0)
        return ckpt__subdir_open(fd, dirfd, c->temp_name, 0, c->dir);
    char wt[64];
    ckpt__worker_temp_name(wt, sizeof wt, c->node_leader, c->save_id);
    return ckpt__subdir_open(fd, workfd, wt, 0, c->work);
}

int ckpt__temp_fresh(const ckpt__save_names *c, int dirfd, int *tempfd, int replace)
{
    *tempfd = -1;
    if (!replace && ckpt__exists_at(dirfd, c->index_name))
        return ckpt__error(CKPT_EEXISTS, "checkpoint %s.index already exists", c->prefix);
    /* A name of this save only: whatever stands there is not ours, and nothing is removed (an
     * in-flight directory of the same prefix may be another job's, alive) */
    return ckpt__subdir_create(tempfd, dirfd, c->temp_name, c->chief_temp);
}

int ckpt__temp_open(const ckpt__save_names *c, int rank, int dirfd, int workfd, int *tempfd)
{
    if (*tempfd >= 0)
        return CKPT_OK;
    if (c->shared || rank == 0)
        return ckpt__subdir_open(tempfd, dirfd, c->temp_name, 0, c->dir);
    return ckpt__subdir_create(tempfd, workfd, c->worker_temp, c->my_temp);
}

void ckpt__temp_cleanup(const ckpt__save_names *c, int rank, int dirfd, int workfd, int tempfd)
{
    if (tempfd < 0) /* only an in-flight directory this save made or opened */
        return;
    if (rank == 0) {
        if (dirfd >= 0)
            ckpt__rmtree_at(dirfd, c->temp_name, c->dir);
    } else if (!c->shared) {
        if (workfd >= 0) /* its own, made by ckpt__temp_open */
            ckpt__rmtree_at(workfd, c->worker_temp, c->work);
    } else {
        unlinkat(tempfd, c->reserve_name, 0);
    }
}

/* The counter N when `name` is <stem>-<N>, <stem>-<N>.* or <stem>-<N>_* with N written as the
 * manager writes it (decimal, no leading zero), else -1. */
static int64_t name_counter(const char *name, const char *stem, size_t sl)
{
    if (strncmp(name, stem, sl) != 0 || name[sl] != '-')
        return -1;
    const char *p = name + sl + 1;
    size_t d = strspn(p, "0123456789");
    if (d == 0 || d > 18 || (p[0] == '0' && d > 1) || (p[d] && p[d] != '.' && p[d] != '_'))
        return -1;
    return (int64_t)strtoll(p, NULL, 10);
}

int ckpt__counter_free(int64_t *next, const int *dirfds, const char *const *shown, size_t n,
                       const char *stem)
{
    enum { K = CKPT__COUNTER_SKIP_MAX };
    /* what took each of the counters *next .. *next + K - 1: the first entry found, and where */
    char (*taker)[256] = calloc(K, sizeof *taker);
    int *where = calloc(K, sizeof *where);
    int rc = taker && where ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    size_t sl = strlen(stem);
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        DIR *d = ckpt__listing(dirfds[i]);
        if (!d) {
            rc = ckpt__errno(errno, "opendir", shown[i]);
            break;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            int64_t v = name_counter(e->d_name, stem, sl);
            if (v < *next || v - *next >= K || taker[v - *next][0])
                continue;
            snprintf(taker[v - *next], sizeof taker[0], "%s", e->d_name);
            where[v - *next] = (int)i;
        }
        closedir(d);
    }
    int64_t k = 0;
    while (rc == CKPT_OK && k < K && taker[k][0])
        k++;
    if (rc == CKPT_OK && k == K)
        rc = ckpt__error(CKPT_EEXISTS,
                         "%s-%lld .. %s-%lld are all taken by entries this job did not make (the "
                         "first: %s/%s); remove them or save into another directory",
                         stem, (long long)*next, stem, (long long)(*next + K - 1),
                         shown[where[0]], taker[0]);
    for (int64_t j = 0; rc == CKPT_OK && j < k; j++) {
        struct stat st;
        const char *kind = fstatat(dirfds[where[j]], taker[j], &st, AT_SYMLINK_NOFOLLOW) == 0
                               ? ckpt__file_kind(st.st_mode)
                               : "an entry";
        ckpt__log(CKPT_LOG_WARN,
                  "%s-%lld is taken: %s/%s is %s this job did not make; saving as %s-%lld instead",
                  stem, (long long)(*next + j), shown[where[j]], taker[j], kind, stem,
                  (long long)(*next + k));
    }
    if (rc == CKPT_OK)
        *next += k;
    free(taker);
    free(where);
    return rc;
}
