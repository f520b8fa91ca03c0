/* mpickpt-bench: the scale rows about files (issue 15; the others are in bench_scale.c), each
 * printed as a table on rank 0 and, with --json, one JSON line per row:
 *   files        the directory entries one save creates, per layout (per-node when the saver
 *                accepts MPICKPT_LAYOUT=per-node).
 *   fixed        save and restore of a few MiB per rank as ratios to a raw write+fsync and a raw
 *                pread of the same bytes, interleaved in the same run.
 * Collective: every rank runs every row. */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files per checkpoint ---------------------------------------------------------------- */

typedef struct tree_count {
    long entries, regular, dirs, data, index, other;
    char names[512];
} tree_count;

/* Counts what is below dir (lstat: links are counted, not followed). Rank 0 only. */
static void count_tree(const char *dir, const char *rel, tree_count *t)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[4600], name[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s%s", rel, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        t->entries++;
        size_t used = strlen(t->names);
        if (t->entries <= 6)
            snprintf(t->names + used, sizeof t->names - used, "%s%s%s", used ? " " : "", name,
                     S_ISDIR(st.st_mode) ? "/" : "");
        else if (t->entries == 7)
            snprintf(t->names + used, sizeof t->names - used, " ...");
        if (S_ISDIR(st.st_mode)) {
            t->dirs++;
            char sub[600];
            snprintf(sub, sizeof sub, "%s/", name);
            count_tree(path, sub, t);
        } else if (S_ISREG(st.st_mode)) {
            t->regular++;
            if (strstr(e->d_name, ".data-"))
                t->data++;
            else if (strlen(e->d_name) > 6 && !strcmp(e->d_name + strlen(e->d_name) - 6, ".index"))
                t->index++;
            else
                t->other++;
        } else {
            t->other++;
        }
    }
    closedir(d);
}

/* Removes the benchmark's own directory (a checkpoint left by an interrupted run). Rank 0. */
void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char path[4600];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(path);
            else
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void files_row(const opts *base, const char *tag, ckpt_layout layout, const char *env,
                      int rpn, large_model *m)
{
    opts o = *base;
    o.layout = layout;
    o.layout_env = env;
    char label[64], dir[4096], prefix[4200], why[512];
    if (rpn)
        snprintf(label, sizeof label, "%s (%d ranks/node)", env ? env : layout_name(&o), rpn);
    else
        snprintf(label, sizeof label, "%s", env ? env : layout_name(&o));
    snprintf(dir, sizeof dir, "%s/bench-files-%s", o.dir, tag);
    snprintf(prefix, sizeof prefix, "%s/ckpt", dir);
    if (g_rank == 0) {
        remove_tree(dir);
        if (mkdir(dir, 0755) != 0)
            die_errno("mkdir", dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char rpn_s[32];
    snprintf(rpn_s, sizeof rpn_s, "%d", rpn);
    if (rpn)
        setenv("MPICKPT_RANKS_PER_NODE", rpn_s, 1);
    ckpt_saver *s = NULL;
    int rc = try_make_saver(&s, &o, 0);
    if (rc != CKPT_OK) {
        agreed_reason(why, sizeof why, "ckpt_saver_create", rc);
        if (rpn)
            unsetenv("MPICKPT_RANKS_PER_NODE");
        if (g_rank == 0) {
            printf("  %-24s skipped: %s\n", label, why);
            if (o.json)
                printf("{\"scenario\":\"files\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
                       "\"ranks_per_node\":%d,\"skipped\":\"%s\"}\n",
                       g_size, env ? env : layout_name(&o), o.collective, rpn, why);
            fflush(stdout);
            remove_tree(dir);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        return;
    }
    large_register(s, m, 0);
    rc = ckpt_saver_write(s, prefix, NULL);
    if (rpn)
        unsetenv("MPICKPT_RANKS_PER_NODE");
    if (rc != CKPT_OK)
        die("ckpt_saver_write", rc);
    ckpt_saver_free(s);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        tree_count t;
        memset(&t, 0, sizeof t);
        count_tree(dir, "", &t);
        int drc = ckpt_checkpoint_delete(prefix);
        tree_count left;
        memset(&left, 0, sizeof left);
        count_tree(dir, "", &left);
        printf("  %-24s %8ld %8ld %6ld %6ld %6ld %6ld %10ld | %s\n", label, t.entries, t.regular,
               t.data, t.index, t.dirs, t.other, left.entries, t.names);
        if (drc != CKPT_OK)
            printf("  (ckpt_checkpoint_delete: %s)\n", ckpt_strerror(drc));
        if (o.json)
            printf("{\"scenario\":\"files\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
                   "\"ranks_per_node\":%d,\"entries\":%ld,\"regular_files\":%ld,"
                   "\"data_files\":%ld,\"index_files\":%ld,\"dirs\":%ld,\"other\":%ld,"
                   "\"left_after_delete\":%ld}\n",
                   g_size, env ? env : layout_name(&o), o.collective, rpn, t.entries, t.regular,
                   t.data, t.index, t.dirs,
                   t.other, left.entries);
        fflush(stdout);
        remove_tree(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

void run_files(const opts *o)
{
    large_model m;
    large_init(&m, o->fixed_mb);
    if (g_rank == 0) {
        printf("\nfiles per checkpoint: entries one save creates in a fresh directory (%d ranks, "
               "%ld MiB per rank in 4 tensors); left: after ckpt_checkpoint_delete\n",
               g_size, o->fixed_mb);
        printf("  %-24s %8s %8s %6s %6s %6s %6s %10s | %s\n", "layout", "entries", "files", "data",
               "index", "dirs", "other", "left", "names");
        fflush(stdout);
    }
    files_row(o, "per-rank", CKPT_LAYOUT_PER_RANK, NULL, 0, &m);
    files_row(o, "shared", CKPT_LAYOUT_SHARED, NULL, 0, &m);
    files_row(o, "per-node", CKPT_LAYOUT_UNKNOWN, "per-node", 0, &m);
    if (o->ranks_per_node > 0) {
        char tag[32];
        snprintf(tag, sizeof tag, "per-node-%d", o->ranks_per_node);
        files_row(o, tag, CKPT_LAYOUT_UNKNOWN, "per-node", o->ranks_per_node, &m);
    }
    free(m.arena);
}

/* ---- fixed cost: a small save and restore against raw write+fsync and pread ---------------- */

static double min_of(const double *v, int n)
{
    double m = n > 0 ? v[0] : 0;
    for (int i = 1; i < n; i++)
        if (v[i] < m)
            m = v[i];
    return m;
}

/* Times of one fixed-cost row, per rep: [SPAN] from a barrier until every rank is done (a
 * closing barrier; the max over ranks is the first start to the last finish), [OWN] each rank's
 * own duration up to its return (max over ranks: the convention of the other rows). Measured in
 * the same calls. With more ranks than cores a rank's own duration hides the others' (a rank
 * that runs its 0.3 ms pread before the next one is scheduled measures 0.3 ms while all 16 take
 * 16 times that); the library's collectives make its own durations nearly spans anyway. So the
 * span is the row's ratio, and the own-duration ratio is printed next to it. */
enum { SPAN, OWN };
typedef struct fixed_times {
    double lib[2][MAX_REPS], raw[2][MAX_REPS];
    double empty[MAX_REPS]; /* the span of no operation: what the barriers cost */
} fixed_times;

/* Ends a measured call started at t0 on this rank: own and span, each the max over ranks. */
static void span_end(double t0, double *span, double *own)
{
    double t[2] = { now() - t0, 0 }, mx[2];
    MPI_Barrier(MPI_COMM_WORLD);
    t[1] = now() - t0;
    MPI_Allreduce(t, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *own = mx[0];
    *span = mx[1];
}

static void span_save(ckpt_saver *s, const char *prefix, result *r, int i, double *span,
                      double *own)
{
    delete_ckpt(prefix);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    int rc = ckpt_saver_write(s, prefix, NULL);
    if (rc != CKPT_OK)
        die("ckpt_saver_write", rc);
    span_end(t0, span, own);
    record_phases(s, r, i);
}

static void span_restore(ckpt_saver *s, const char *prefix, double *span, double *own)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    int rc = ckpt_saver_restore(s, prefix, NULL, NULL);
    if (rc != CKPT_OK)
        die("ckpt_saver_restore", rc);
    span_end(t0, span, own);
}

/* write: plain_write; 0: plain_pread; -1: nothing (the span's own cost) */
static void span_raw(const char *path, void *buf, size_t n, int write, double *span, double *own)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    if (write > 0)
        plain_write(path, buf, n);
    else if (write == 0)
        plain_pread(path, buf, n);
    span_end(t0, span, own);
}

/* median/median and best/best of lib over raw, and the per-rep ratios' quartiles */
typedef struct ratio_stats {
    double lm, lb, bm, bb, rm, rb, q1, q2, q3;
} ratio_stats;

static void ratios(ratio_stats *st, const double *lib, const double *raw, int n)
{
    double paired[MAX_REPS];
    for (int i = 0; i < n; i++)
        paired[i] = raw[i] > 0 ? lib[i] / raw[i] : 0;
    st->lm = median(lib, n);
    st->lb = min_of(lib, n);
    st->bm = median(raw, n);
    st->bb = min_of(raw, n);
    st->rm = st->bm > 0 ? st->lm / st->bm : 0;
    st->rb = st->bb > 0 ? st->lb / st->bb : 0;
    st->q1 = quantile(paired, n, 0.25);
    st->q2 = quantile(paired, n, 0.5);
    st->q3 = quantile(paired, n, 0.75);
}

static void print_fixed(const opts *o, const char *scenario, const char *label, const char *raw,
                        double goal, const char *goal_s, size_t bytes, const fixed_times *t,
                        int n, const result *ph)
{
    if (g_rank != 0)
        return;
    ratio_stats sp, ow;
    ratios(&sp, t->lib[SPAN], t->raw[SPAN], n);
    ratios(&ow, t->lib[OWN], t->raw[OWN], n);
    printf("  %-20s %9.4f %9.4f | %-12s %9.4f %9.4f | %7.2f %7.2f  %-7s | %5.2f..%-5.2f\n", label,
           sp.lm, sp.lb, raw, sp.bm, sp.bb, sp.rm, sp.rb, goal_s, sp.q1, sp.q3);
    printf("  %-20s %9.4f %9.4f | %-12s %9.4f %9.4f | %7.2f %7.2f  %-7s | %5.2f..%-5.2f\n",
           "  (own durations)", ow.lm, ow.lb, "", ow.bm, ow.bb, ow.rm, ow.rb, "", ow.q1, ow.q3);
    double em = median(t->empty, n);
    if (o->json) {
        printf("{\"scenario\":\"%s\",\"ranks\":%d,\"layout\":\"%s\",\"collective\":%d,"
               "\"bytes_per_rank\":%zu,\"reps\":%d,\"timing\":\"span\",\"mpickpt_s\":%.9g,"
               "\"mpickpt_best_s\":%.9g,\"baseline\":\"%s\",\"raw_s\":%.9g,\"raw_best_s\":%.9g,"
               "\"over_raw\":%.6g,\"over_raw_best\":%.6g,\"goal_over_raw\":%g,"
               "\"paired_over_raw_p25\":%.6g,\"paired_over_raw_p50\":%.6g,"
               "\"paired_over_raw_p75\":%.6g,\"empty_span_s\":%.9g",
               scenario, g_size, layout_name(o), o->collective, bytes, n, sp.lm, sp.lb, raw,
               sp.bm, sp.bb, sp.rm, sp.rb, goal, sp.q1, sp.q2, sp.q3, em);
        printf(",\"own\":{\"mpickpt_s\":%.9g,\"mpickpt_best_s\":%.9g,\"raw_s\":%.9g,"
               "\"raw_best_s\":%.9g,\"over_raw\":%.6g,\"over_raw_best\":%.6g}",
               ow.lm, ow.lb, ow.bm, ow.bb, ow.rm, ow.rb);
        if (ph)
            printf(",\"phases\":{\"write\":%.9g,\"agree\":%.9g,\"merge\":%.9g,\"commit\":%.9g}",
                   median(ph->ph[0], ph->nph), median(ph->ph[1], ph->nph),
                   median(ph->ph[2], ph->nph), median(ph->ph[3], ph->nph));
        printf("}\n");
    }
    fflush(stdout);
}

void run_fixed(const opts *o)
{
    static result sv;
    static fixed_times ts, tr; /* save, restore */
    memset(&sv, 0, sizeof sv);
    memset(&ts, 0, sizeof ts);
    memset(&tr, 0, sizeof tr);
    large_model m;
    large_init(&m, o->fixed_mb);
    unsigned char *rbuf = alloc_touched(m.bytes);
    char why[512];
    ckpt_saver *s = NULL;
    int rc = try_make_saver(&s, o, 0);
    if (rc != CKPT_OK) {
        agreed_reason(why, sizeof why, "ckpt_saver_create", rc);
        print_skipped(o, "fixed_save", layout_name(o), why);
        print_skipped(o, "fixed_restore", layout_name(o), why);
        free(rbuf);
        free(m.arena);
        return;
    }
    large_register(s, &m, 0);
    char prefix[4096], raw[4096];
    snprintf(raw, sizeof raw, "%s/bench-raw-%05d.bin", o->dir, g_rank);
    int n = o->fixed_reps;
    double sp, ow;
    /* warm-up: the plan, HDF5's first use, the first allocation of both files */
    scale_path(prefix, sizeof prefix, o, "fixed-0");
    span_save(s, prefix, &sv, 0, &sp, &ow);
    span_restore(s, prefix, &sp, &ow);
    delete_ckpt(prefix);
    span_raw(raw, m.arena, m.bytes, 1, &sp, &ow);
    span_raw(raw, rbuf, m.bytes, 0, &sp, &ow);
    remove_all(raw);
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "fixed-%d", i + 1);
        scale_path(prefix, sizeof prefix, o, what);
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0))
                span_save(s, prefix, &sv, i, &ts.lib[SPAN][i], &ts.lib[OWN][i]);
            else
                span_raw(raw, m.arena, m.bytes, 1, &ts.raw[SPAN][i], &ts.raw[OWN][i]);
        }
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                memset(m.arena, 0, m.bytes);
                span_restore(s, prefix, &tr.lib[SPAN][i], &tr.lib[OWN][i]);
                if (!large_check(&m, 0)) {
                    if (g_rank == 0)
                        fprintf(stderr, "mpickpt-bench: fixed: restored values are wrong\n");
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            } else {
                span_raw(raw, rbuf, m.bytes, 0, &tr.raw[SPAN][i], &tr.raw[OWN][i]);
            }
        }
        span_raw(NULL, NULL, 0, -1, &ts.empty[i], &sp);
        tr.empty[i] = ts.empty[i];
        delete_ckpt(prefix);
        remove_all(raw);
        if (o->verbose && g_rank == 0)
            fprintf(stderr, "  fixed rep %d (span): save %.4f s, write+fsync %.4f s, restore "
                            "%.4f s, pread %.4f s\n",
                    i, ts.lib[SPAN][i], ts.raw[SPAN][i], tr.lib[SPAN][i], tr.raw[SPAN][i]);
    }
    ckpt_saver_free(s);
    if (g_rank == 0) {
        printf("\nfixed cost: %ld MiB per rank (4 tensors), %d ranks, layout %s, %d reps "
               "interleaved; seconds from a barrier until every rank is done (a closing barrier "
               "on both sides; own durations below it); ratio = mpickpt / raw (lower is "
               "better)\n",
               o->fixed_mb, g_size, layout_name(o), n);
        printf("  %-20s %9s %9s | %-12s %9s %9s | %7s %7s  %-7s | %s\n", "row", "median", "best",
               "raw", "median", "best", "ratio", "best", "goal", "per-rep p25..p75");
    }
    print_fixed(o, "fixed_save", "small save / raw", "write+fsync", 1.5, "<= 1.5", m.bytes, &ts, n,
                &sv);
    print_fixed(o, "fixed_restore", "small restore / raw", "pread", 3.0, "<= 3", m.bytes, &tr, n,
                NULL);
    if (g_rank == 0) {
        printf("  (a span of no operation, i.e. the barriers alone: median %.6f s)\n",
               median(ts.empty, n));
        fflush(stdout);
    }
    free(rbuf);
    free(m.arena);
}
