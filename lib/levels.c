/* Storage levels, the pure parts: cache directory patterns and partner nodes (see levels.h). */
#include "levels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ckpt__cache_dir(char *out, size_t size, const char *pattern, int node)
{
    if (!pattern || !*pattern)
        return ckpt__error(CKPT_EINVAL, "the cache directory is empty");
    if (size == 0)
        return ckpt__error(CKPT_EINVAL, "no room for the cache directory");
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char num[16];
        const char *add = p;
        size_t len = 1;
        if (*p == '%') {
            if (p[1] == 'n') {
                snprintf(num, sizeof num, "%d", node);
                add = num;
                len = strlen(num);
                p++;
            } else if (p[1] == '%') {
                p++;
            } else {
                return ckpt__error(CKPT_EINVAL,
                                   "cache directory '%s': '%%%c' is not %%n (the node) or %%%%",
                                   pattern, p[1] ? p[1] : ' ');
            }
        }
        if (len >= size - n)
            return ckpt__error(CKPT_EINVAL, "cache directory '%s' of node %d is too long",
                               pattern, node);
        memcpy(out + n, add, len);
        n += len;
    }
    out[n] = '\0';
    return CKPT_OK;
}

typedef struct {
    int group, first, count; /* a group's value, its first member in `by`, how many */
} group_run;

static int cmp_int_pair(const void *a, const void *b)
{
    const int *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int cmp_run(const void *a, const void *b)
{
    const group_run *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1; /* largest first */
    return x->group < y->group ? -1 : x->group > y->group;
}

int ckpt__partner_nodes(int *partner, const int *groups, int nnodes)
{
    if (nnodes < 2)
        return ckpt__error(CKPT_EINVAL,
                           "partner redundancy needs at least two nodes (the job has %d)", nnodes);
    size_t n = (size_t)nnodes;
    int *pairs = malloc(2 * n * sizeof *pairs); /* (group, node), sorted */
    int *ring = malloc(n * sizeof *ring);
    int *taken = calloc(n, sizeof *taken);
    group_run *runs = malloc(n * sizeof *runs);
    int rc = CKPT_OK;
    if (!pairs || !ring || !taken || !runs) {
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        pairs[2 * k] = groups ? groups[k] : (int)k;
        pairs[2 * k + 1] = (int)k;
    }
    qsort(pairs, n, 2 * sizeof *pairs, cmp_int_pair);
    size_t nruns = 0;
    for (size_t k = 0; k < n; k++) {
        if (k == 0 || pairs[2 * k] != pairs[2 * (k - 1)])
            runs[nruns++] = (group_run){ pairs[2 * k], (int)k, 0 };
        runs[nruns - 1].count++;
    }
    if (nruns < 2) {
        rc = ckpt__error(CKPT_EINVAL,
                         "partner redundancy needs nodes in at least two failure groups (all %d "
                         "nodes are in one)",
                         nnodes);
        goto done;
    }
    /* the ring: the nodes sorted by group (largest group first, each group's in node order)
     * fill the even positions, then the odd ones: no two neighbours (the last and the first
     * too) share a group when no group holds more than half of the nodes */
    qsort(runs, nruns, sizeof *runs, cmp_run);
    size_t m = 0, half = (n + 1) / 2;
    for (size_t g = 0; g < nruns; g++)
        for (int i = 0; i < runs[g].count; i++, m++)
            ring[m < half ? 2 * m : 2 * (m - half) + 1] = pairs[2 * (runs[g].first + i) + 1];
    if (nruns == n) /* every node its own group: the ring in node order, k -> k + 1 */
        for (size_t k = 0; k < n; k++)
            ring[k] = (int)k;
    /* a node's partner: the next node in the ring of another group */
    int *grp = taken; /* node -> its group, reusing the buffer */
    for (size_t k = 0; k < n; k++)
        grp[pairs[2 * k + 1]] = pairs[2 * k];
    for (size_t i = 0; i < n; i++) {
        int node = ring[i];
        partner[node] = -1;
        for (size_t j = 1; j < n && partner[node] < 0; j++) {
            int other = ring[(i + j) % n];
            if (grp[other] != grp[node])
                partner[node] = other;
        }
    }
done:
    free(pairs);
    free(ring);
    free(taken);
    free(runs);
    return rc;
}
