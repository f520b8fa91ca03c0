/* lib/levels.h: cache directory patterns (%n, %%, refused sequences, lengths) and partner nodes
 * (every node's partner is another node of another failure group; with no group over half of
 * the nodes the map is a permutation: each node holds one other node's copies; one node or one
 * group is refused). Partners are checked for 2..40 nodes with no groups, with random groups of
 * every size, and with the group layouts that the ring's construction finds hardest. */
#include "check.h"

#include "levels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 2026;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void test_cache_dir(void)
{
    char out[64];
    CHECK_OK(ckpt__cache_dir(out, sizeof out, "/dev/shm/ckpt/%n", 7));
    CHECK_MSG(strcmp(out, "/dev/shm/ckpt/7") == 0, "got %s", out);
    CHECK_OK(ckpt__cache_dir(out, sizeof out, "/tmp/n%n/x%n", 12));
    CHECK_MSG(strcmp(out, "/tmp/n12/x12") == 0, "got %s", out);
    CHECK_OK(ckpt__cache_dir(out, sizeof out, "/tmp/100%%/%n", 0));
    CHECK_MSG(strcmp(out, "/tmp/100%/0") == 0, "got %s", out);
    CHECK_OK(ckpt__cache_dir(out, sizeof out, "/local/ssd", 3)); /* real nodes: one path */
    CHECK_MSG(strcmp(out, "/local/ssd") == 0, "got %s", out);
    CHECK_RC(ckpt__cache_dir(out, sizeof out, "", 0), CKPT_EINVAL);
    CHECK_RC(ckpt__cache_dir(out, sizeof out, NULL, 0), CKPT_EINVAL);
    CHECK_RC(ckpt__cache_dir(out, sizeof out, "/tmp/%d", 0), CKPT_EINVAL);
    CHECK_MSG(strstr(ckpt_error_last()->message, "%d") != NULL, "message: %s",
              ckpt_error_last()->message);
    CHECK_RC(ckpt__cache_dir(out, sizeof out, "/tmp/%", 0), CKPT_EINVAL);
    /* lengths: 15 characters fit in 16 bytes, 16 do not, also when %n makes them */
    CHECK_OK(ckpt__cache_dir(out, 16, "/123456789abcde", 0));
    CHECK_RC(ckpt__cache_dir(out, 16, "/123456789abcdef", 0), CKPT_EINVAL);
    CHECK_OK(ckpt__cache_dir(out, 16, "/123456789abc%n", 10));
    CHECK_MSG(strcmp(out, "/123456789abc10") == 0, "got %s", out);
    CHECK_RC(ckpt__cache_dir(out, 16, "/123456789abc%n", 100), CKPT_EINVAL);
}

/* partner[] is valid for groups[] (NULL: each node its own): another node of another group;
 * a permutation when no group holds more than half of the nodes. */
static void check_partners(const int *groups, int n, const char *what)
{
    int *p = malloc((size_t)n * sizeof *p), *held = calloc((size_t)n, sizeof *held);
    CHECK(p && held);
    if (!p || !held)
        goto done;
    int rc = ckpt__partner_nodes(p, groups, n);
    CHECK_MSG(rc == CKPT_OK, "%s: %d nodes: %s", what, n, ckpt_error_last()->message);
    if (rc != CKPT_OK)
        goto done;
    int largest = 0;
    for (int k = 0; k < n; k++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            c += (groups ? groups[j] : j) == (groups ? groups[k] : k);
        largest = c > largest ? c : largest;
    }
    for (int k = 0; k < n; k++) {
        CHECK_MSG(p[k] >= 0 && p[k] < n && p[k] != k, "%s: node %d's partner is %d", what, k,
                  p[k]);
        if (p[k] < 0 || p[k] >= n)
            continue;
        held[p[k]]++;
        if (groups)
            CHECK_MSG(groups[p[k]] != groups[k], "%s: node %d and its partner %d are in group %d",
                      what, k, p[k], groups[k]);
    }
    if (2 * largest <= n)
        for (int k = 0; k < n; k++)
            CHECK_MSG(held[k] == 1, "%s (%d nodes, largest group %d): node %d holds %d nodes' "
                                    "copies",
                      what, n, largest, k, held[k]);
done:
    free(p);
    free(held);
}

static void test_partners(void)
{
    int p[64], g[64];
    CHECK_RC(ckpt__partner_nodes(p, NULL, 1), CKPT_EINVAL);
    CHECK_RC(ckpt__partner_nodes(p, NULL, 0), CKPT_EINVAL);
    for (int k = 0; k < 5; k++)
        g[k] = 3;
    CHECK_RC(ckpt__partner_nodes(p, g, 5), CKPT_EINVAL); /* one group */
    CHECK_MSG(strstr(ckpt_error_last()->message, "failure groups") != NULL, "message: %s",
              ckpt_error_last()->message);
    /* no groups: the ring 0 -> 1 -> ... */
    for (int n = 2; n <= 40; n++)
        check_partners(NULL, n, "no groups");
    CHECK_OK(ckpt__partner_nodes(p, NULL, 4));
    for (int k = 0; k < 4; k++)
        CHECK_EQ_INT(p[k], (k + 1) % 4);
    /* hard layouts: two halves; half and singles; a majority group (valid, not balanced) */
    for (int n = 2; n <= 40; n++) {
        for (int k = 0; k < n; k++)
            g[k] = k < n / 2 ? 1 : 2; /* racks of consecutive nodes */
        check_partners(g, n, "two racks");
        for (int k = 0; k < n; k++)
            g[k] = k % 2 == 0 ? 7 : 100 + k; /* half in one group, the rest alone */
        check_partners(g, n, "half and singles");
        for (int k = 0; k < n; k++)
            g[k] = k == 0 ? 1 : 0; /* all but one in group 0 */
        check_partners(g, n, "a majority group");
    }
    /* random groups */
    for (int round = 0; round < 2000; round++) {
        int n = 2 + (int)(next_rand() % 40), ng = 2 + (int)(next_rand() % 6);
        int seen0 = 0, seen1 = 0;
        for (int k = 0; k < n; k++) {
            g[k] = (int)(next_rand() % (uint32_t)ng) * 1000 - 5;
            seen0 |= g[k] == -5;
            seen1 |= g[k] != -5;
        }
        if (!seen0 || !seen1)
            g[0] = g[0] == -5 ? 995 : -5; /* at least two groups */
        char what[64];
        snprintf(what, sizeof what, "random round %d", round);
        check_partners(g, n, what);
    }
}

int main(void)
{
    test_cache_dir();
    test_partners();
    return CHECK_DONE();
}
