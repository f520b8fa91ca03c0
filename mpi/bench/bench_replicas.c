/* mpickpt-bench --scenario replicas: the cost of the replica check (issue 30). A state of
 * --mb-per-rank MiB of replicated float32 tensors (NT of them, equal on every rank: each written
 * by its primary rank) saved with check_replicas off, first and every: the first save of each
 * saver (plan + check for first and every) and the median of --reps later saves (first: no check
 * any more; every: a CRC-32C of every replicated byte on every rank and a wider vote). Rank 0
 * prints one line per mode and the ratios to off; with --json one JSON line per mode:
 *   {"scenario":"replicas","mode","ranks","bytes_per_rank","reps","first_save_s","save_s",
 *    "first_over_off","save_over_off"}
 * Collective. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void register_replicated(ckpt_saver *s, float *t[NT], size_t tbytes)
{
    int64_t n = (int64_t)(tbytes / sizeof(float));
    ckpt_shape sh;
    ckpt_shape_init(&sh, 1, &n);
    for (int k = 0; k < NT; k++) {
        char name[32];
        snprintf(name, sizeof name, "replicated%d", k);
        int rc = ckpt_saver_add_replicated(s, name, CKPT_FLOAT32, &sh, t[k], CKPT_REPLICA_PRIMARY);
        if (rc != CKPT_OK)
            die("ckpt_saver_add_replicated", rc);
    }
}

void run_replicas(const opts *o)
{
    size_t bytes = (size_t)o->mb << 20, tbytes = bytes / NT;
    unsigned char *arena = alloc_touched(bytes);
    float *t[NT];
    for (int k = 0; k < NT; k++) {
        t[k] = (float *)(arena + (size_t)k * tbytes);
        fill_linear(t[k], tbytes / sizeof(float), (uint64_t)k * 104729u); /* equal everywhere */
    }
    static const struct {
        const char *name;
        int mode;
    } modes[] = {{"off", CKPT_CHECK_REPLICAS_OFF},
                 {"first", CKPT_CHECK_REPLICAS_FIRST},
                 {"every", CKPT_CHECK_REPLICAS_EVERY}};
    /* the three savers side by side, their saves interleaved rep by rep (the machine's drift
     * spreads over all three) */
    double first[3], steady[3], v[3][MAX_REPS];
    ckpt_saver *s[3];
    char prefix[3][4200];
    for (int m = 0; m < 3; m++) {
        ckpt_saver_options so = CKPT_SAVER_OPTIONS_INIT;
        so.layout = o->layout_env ? CKPT_LAYOUT_UNKNOWN : o->layout;
        so.collective_io = o->collective;
        so.info = o->info;
        so.check_replicas = modes[m].mode;
        int rc = ckpt_saver_create(&s[m], MPI_COMM_WORLD, &so);
        if (rc != CKPT_OK)
            die("ckpt_saver_create", rc);
        register_replicated(s[m], t, tbytes);
        snprintf(prefix[m], sizeof prefix[m], "%s/bench-replicas-%s", o->dir, modes[m].name);
        first[m] = timed_save(s[m], prefix[m], NULL, 0);
    }
    for (int i = 0; i < o->reps; i++)
        for (int k = 0; k < 3; k++) {
            int m = (i + k) % 3;
            v[m][i] = timed_save(s[m], prefix[m], NULL, i);
        }
    for (int m = 0; m < 3; m++) {
        steady[m] = median(v[m], o->reps);
        delete_ckpt(prefix[m]);
        ckpt_saver_free(s[m]);
    }
    free(arena);
    if (g_rank != 0)
        return;
    for (int m = 0; m < 3; m++) {
        printf("%-20s %-6s %4d ranks %9.1f MiB/rank replicated: first save %.4f s (%.2fx off), "
               "later saves %.4f s (%.2fx off)\n",
               "replicas", modes[m].name, g_size, (double)bytes / MiB, first[m],
               first[m] / first[0], steady[m], steady[m] / steady[0]);
        if (o->json)
            printf("{\"scenario\":\"replicas\",\"mode\":\"%s\",\"ranks\":%d,\"bytes_per_rank\":%zu,"
                   "\"reps\":%d,\"first_save_s\":%.6f,\"save_s\":%.6f,\"first_over_off\":%.4f,"
                   "\"save_over_off\":%.4f}\n",
                   modes[m].name, g_size, bytes, o->reps, first[m], steady[m], first[m] / first[0],
                   steady[m] / steady[0]);
    }
    fflush(stdout);
}
