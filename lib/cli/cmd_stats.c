/* mpickpt stats: the save timings the saver's chief appends to metrics.jsonl (one line per
 * committed save, read with lib/metrics.h), per save and summarized. */
#include "cli.h"

#include "fsutil.h"  /* lib/fsutil.h */
#include "metrics.h" /* lib/metrics.h */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (n > 0; sorts v): the mean of the middle two for an even n. */
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Opens the metrics file of a stats operand for reading; *path (malloc'd) names it. A FILE
 * operand is the user's own path. For a DIR operand, DIR/metrics.jsonl, else
 * DIR/chief/metrics.jsonl, is reached below DIR by descriptor: a link there is not followed and
 * anything but a regular file is refused, so a FIFO planted in a shared directory cannot block
 * the tool (docs/design.md §10). NULL after printing why. */
static FILE *stats_open(const cli_command *cmd, const char *arg, char **path)
{
    struct stat sb;
    *path = NULL;
    if (stat(arg, &sb) != 0) {
        fprintf(stderr, "mpickpt: %s: cannot access %s: %s\n", cmd->name, arg, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(sb.st_mode)) {
        FILE *f = NULL;
        if (!(*path = cli_path_join("", arg)))
            cli_oom(cmd);
        else if (!(f = fopen(arg, "r")))
            fprintf(stderr, "mpickpt: %s: cannot open %s: %s\n", cmd->name, arg,
                    strerror(errno));
        return f;
    }
    char *dir = cli_dir_operand(arg);
    char *chief = dir ? cli_path_join(dir, CKPT__CHIEF_DIR) : NULL;
    if (!chief) {
        cli_oom(cmd);
        free(dir);
        return NULL;
    }
    int dfd = -1, cfd = -1, fd = -1;
    const char *name = "metrics.jsonl";
    int rc = ckpt__dir_open(&dfd, dir);
    if (rc == CKPT_OK && (rc = ckpt__file_open(&fd, NULL, dfd, name, O_RDONLY, dir)) ==
                             CKPT_ENOTFOUND) {
        name = CKPT__CHIEF_DIR "/metrics.jsonl";
        if ((rc = ckpt__subdir_open(&cfd, dfd, CKPT__CHIEF_DIR, 0, dir)) == CKPT_OK)
            rc = ckpt__file_open(&fd, NULL, cfd, "metrics.jsonl", O_RDONLY, chief);
    }
    ckpt__close(cfd);
    ckpt__close(dfd);
    FILE *f = NULL;
    if (rc == CKPT_ENOTFOUND)
        fprintf(stderr, "mpickpt: %s: no metrics.jsonl in %s or %s (the saver's chief appends "
                        "one line per committed save)\n", cmd->name, dir, chief);
    else if (rc != CKPT_OK)
        cli_lib_error(cmd, rc);
    else if (!(*path = cli_path_join(dir, name)) || !(f = fdopen(fd, "r")))
        cli_oom(cmd);
    if (!f) {
        ckpt__close(fd);
        free(*path);
        *path = NULL;
    }
    free(chief);
    free(dir);
    return f;
}

/* The write phase's straggler over the saves that recorded one: the rank slowest most often
 * (the lowest such rank on a tie), in how many saves, and the write time over the median. */
typedef struct stragglers {
    size_t saves; /* saves with a slowest write rank */
    int rank;
    size_t count;
    double ratio_median, ratio_max; /* of write_s / write_median_s, where the median is known */
} stragglers;

static int find_stragglers(stragglers *st, const ckpt__metrics_record *rows, size_t n)
{
    memset(st, 0, sizeof *st);
    st->rank = -1;
    int *ranks = malloc((n ? n : 1) * sizeof *ranks);
    double *ratios = malloc((n ? n : 1) * sizeof *ratios);
    if (!ranks || !ratios) {
        free(ranks);
        free(ratios);
        return -1;
    }
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].have_slowest && rows[i].slowest_rank[1] >= 0)
            ranks[st->saves++] = rows[i].slowest_rank[1];
        if (rows[i].have_write_median && rows[i].write_median_s > 0)
            ratios[nr++] = rows[i].write_s / rows[i].write_median_s;
    }
    /* the mode of ranks[]: sorted, the longest run (O(n log n) for any rank numbers) */
    qsort(ranks, st->saves, sizeof *ranks, cmp_int);
    for (size_t i = 0, j; i < st->saves; i = j) {
        for (j = i; j < st->saves && ranks[j] == ranks[i]; j++)
            ;
        if (j - i > st->count) {
            st->count = j - i;
            st->rank = ranks[i];
        }
    }
    for (size_t i = 0; i < nr; i++)
        st->ratio_max = ratios[i] > st->ratio_max ? ratios[i] : st->ratio_max;
    st->ratio_median = nr ? median(ratios, nr) : NAN;
    if (!nr)
        st->ratio_max = NAN;
    free(ranks);
    free(ratios);
    return 0;
}

/* The text cells of a row's straggler columns: the write phase's slowest rank, and its time
 * over the median of the ranks' write times ("-" where the line does not say). */
static void straggler_cells(const ckpt__metrics_record *r, char *slow, size_t ssize, char *ratio,
                            size_t rsize)
{
    snprintf(slow, ssize, "-");
    snprintf(ratio, rsize, "-");
    if (r->have_slowest && r->slowest_rank[1] >= 0)
        snprintf(slow, ssize, "%d", r->slowest_rank[1]);
    if (r->have_write_median && r->write_median_s > 0)
        snprintf(ratio, rsize, "%.2f", r->write_s / r->write_median_s);
}

static void stats_print_text(const char *path, const ckpt__metrics_record *rows, size_t n,
                             size_t skipped, const double *summary, const stragglers *st)
{
    enum { PREFIX_CAP = 40 };
    int prefix_w = 6;
    for (size_t i = 0; i < n; i++) {
        int tw = cli_text_width(rows[i].prefix);
        prefix_w = tw > prefix_w ? (tw < PREFIX_CAP ? tw : PREFIX_CAP) : prefix_w;
    }
    printf("metrics  ");
    cli_text_name(stdout, path);
    printf(" (%zu save%s", n, n == 1 ? "" : "s");
    if (skipped)
        printf(", %zu malformed line%s skipped", skipped, skipped == 1 ? "" : "s");
    printf(")\n\n");
    printf("%-*s  %-5s  %10s  %10s  %9s  %9s  %9s  %9s  %8s  %12s  %9s  %8s\n", prefix_w,
           "PREFIX", "MODE", "MIB", "BLOCKING_S", "WRITE_S", "AGREE_S", "MERGE_S", "COMMIT_S",
           "GB/S", "SINCE_PREV_S", "SLOW_RANK", "X_MEDIAN");
    uint64_t bytes = 0;
    size_t async = 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt__metrics_record *r = &rows[i];
        char since[32];
        bytes += r->bytes;
        async += (size_t)r->async;
        /* the writer records 0 for a first save: nothing to measure from */
        if (isnan(r->since_prev_s) || r->since_prev_s == 0)
            snprintf(since, sizeof since, "-");
        else
            snprintf(since, sizeof since, "%.3f", r->since_prev_s);
        cli_text_name(stdout, r->prefix);
        int pad = prefix_w - cli_text_width(r->prefix);
        char slow[16], ratio[32];
        straggler_cells(r, slow, sizeof slow, ratio, sizeof ratio);
        printf("%*s  %-5s  %10.2f  %10.4f  %9.4f  %9.4f  %9.4f  %9.4f  %8.3f  %12s  %9s  %8s\n",
               pad > 0 ? pad : 0, "", r->async ? "async" : "sync",
               (double)r->bytes / (1024.0 * 1024.0), r->blocking_s, r->write_s, r->agree_s,
               r->merge_s, r->commit_s, r->gbps, since, slow, ratio);
    }
    /* the slowest rank of every phase, for the saves that recorded them */
    size_t with = 0;
    for (size_t i = 0; i < n; i++)
        with += (size_t)rows[i].have_slowest;
    if (with) {
        printf("\nslowest rank per phase (its time is the phase's column above)\n");
        printf("%-*s  %8s  %8s  %8s  %8s  %8s\n", prefix_w, "PREFIX", "BLOCKING", "WRITE",
               "AGREE", "MERGE", "COMMIT");
        for (size_t i = 0; i < n; i++) {
            const ckpt__metrics_record *r = &rows[i];
            if (!r->have_slowest)
                continue;
            cli_text_name(stdout, r->prefix);
            int pad = prefix_w - cli_text_width(r->prefix);
            printf("%*s", pad > 0 ? pad : 0, "");
            for (int k = 0; k < CKPT__METRICS_PHASES; k++) {
                char cell[16] = "-";
                if (r->slowest_rank[k] >= 0)
                    snprintf(cell, sizeof cell, "%d", r->slowest_rank[k]);
                printf("  %8s", cell);
            }
            printf("\n");
        }
    }
    printf("\nsaves                  %zu (%zu sync, %zu async), %.2f MiB in all\n", n, n - async,
           async, (double)bytes / (1024.0 * 1024.0));
    printf("blocking s             median %.4f  max %.4f\n", summary[0], summary[1]);
    printf("background s           median %.4f  max %.4f  (write + agree + merge + commit)\n",
           summary[2], summary[3]);
    printf("training time saved s  %.4f  (async saves: background time beyond blocking)\n",
           summary[4]);
    if (st->saves) {
        printf("straggler              rank %d slowest to write in %zu of %zu saves", st->rank,
               st->count, st->saves);
        if (!isnan(st->ratio_median))
            printf("; write time x the median: median %.2f, max %.2f", st->ratio_median,
                   st->ratio_max);
        printf("\n");
    }
}

static void json_double_or_null(ckpt__json_writer *w, double v)
{
    if (isnan(v))
        ckpt__json_null(w);
    else
        ckpt__json_double(w, v, 12);
}

static void stats_print_json(const char *path, const ckpt__metrics_record *rows, size_t n,
                             size_t skipped, const double *summary, const stragglers *st)
{
    uint64_t bytes = 0;
    size_t async = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += rows[i].bytes;
        async += (size_t)rows[i].async;
    }
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_kstring(&w, "path", path);
    ckpt__json_kuint(&w, "saves", n);
    ckpt__json_kuint(&w, "sync_saves", n - async);
    ckpt__json_kuint(&w, "async_saves", async);
    ckpt__json_kuint(&w, "skipped_lines", skipped);
    ckpt__json_kuint(&w, "bytes", bytes);
    static const char *const keys[] = {"blocking_s_median", "blocking_s_max",
                                       "background_s_median", "background_s_max",
                                       "training_time_saved_s"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        ckpt__json_key(&w, keys[i]);
        ckpt__json_double(&w, summary[i], 12);
    }
    /* the most frequent write straggler over the saves that recorded one */
    ckpt__json_key(&w, "straggler");
    if (st->saves) {
        ckpt__json_object_begin(&w);
        ckpt__json_kint(&w, "rank", st->rank);
        ckpt__json_kuint(&w, "slowest_saves", st->count);
        ckpt__json_kuint(&w, "saves", st->saves);
        ckpt__json_key(&w, "write_vs_median_median");
        json_double_or_null(&w, st->ratio_median);
        ckpt__json_key(&w, "write_vs_median_max");
        json_double_or_null(&w, st->ratio_max);
        ckpt__json_object_end(&w);
    } else {
        ckpt__json_null(&w);
    }
    /* per save, in file order: the slowest rank of each phase and the write time's ratio */
    ckpt__json_key(&w, "per_save");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < n; i++) {
        const ckpt__metrics_record *r = &rows[i];
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "prefix", r->prefix);
        for (int k = 0; k < CKPT__METRICS_PHASES; k++) {
            char key[40];
            snprintf(key, sizeof key, "%s_s", ckpt__metrics_phase_names[k]);
            ckpt__json_key(&w, key);
            ckpt__json_double(&w, ckpt__metrics_phase_s(r, k), 12);
            snprintf(key, sizeof key, "%s_slowest_rank", ckpt__metrics_phase_names[k]);
            ckpt__json_key(&w, key);
            if (r->have_slowest && r->slowest_rank[k] >= 0)
                ckpt__json_int(&w, r->slowest_rank[k]);
            else
                ckpt__json_null(&w);
        }
        ckpt__json_key(&w, "write_median_s");
        if (r->have_write_median)
            ckpt__json_double(&w, r->write_median_s, 12);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "write_vs_median");
        if (r->have_write_median && r->write_median_s > 0)
            ckpt__json_double(&w, r->write_s / r->write_median_s, 12);
        else
            ckpt__json_null(&w);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
}

/* summary: blocking median and max, background (write + agree + merge + commit) median and max,
 * training time saved, over rows[0..n), n > 0. 0, or -1 when out of memory. */
static int summarize(double summary[5], const ckpt__metrics_record *rows, size_t n)
{
    double *scratch = malloc(n * sizeof *scratch);
    if (!scratch)
        return -1;
    for (int k = 0; k < 5; k++)
        summary[k] = 0;
    for (size_t i = 0; i < n; i++) {
        double bg = ckpt__metrics_background_s(&rows[i]);
        scratch[i] = rows[i].blocking_s;
        summary[1] = rows[i].blocking_s > summary[1] ? rows[i].blocking_s : summary[1];
        summary[3] = bg > summary[3] ? bg : summary[3];
        summary[4] += rows[i].training_time_saved_s;
    }
    summary[0] = median(scratch, n);
    for (size_t i = 0; i < n; i++)
        scratch[i] = ckpt__metrics_background_s(&rows[i]);
    summary[2] = median(scratch, n);
    free(scratch);
    return 0;
}

static int cmd_stats(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const cli_option opts[] = {{"--json", &json, NULL}};
    const cli_spec spec = {opts, 1, 1, 1, "missing DIR", "expected one DIR", 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    char *path;
    FILE *f = stats_open(cmd, argv[0], &path);
    if (!f)
        return EXIT_BAD;

    ckpt__metrics_record *rows = NULL;
    size_t n = 0, cap = 0, skipped = 0, lineno = 0;
    /* one line at a time in a buffer of bounded size (lib/metrics.h) */
    char *line = malloc(CKPT__METRICS_MAX_LINE);
    size_t len;
    int got;
    if (!line) {
        fclose(f);
        free(path);
        return cli_oom(cmd);
    }
    rc = EXIT_OK;
    errno = 0;
    while ((got = ckpt__metrics_read_line(f, line, &len)) > 0) {
        lineno++;
        if (got == CKPT__LINE_TOO_LONG) {
            fprintf(stderr, "mpickpt: %s: %s:%zu: line of %zu bytes skipped: longer than %zu "
                            "(no save's line is)\n",
                    cmd->name, path, lineno, len, CKPT__METRICS_MAX_LINE - 1);
            skipped++;
            continue;
        }
        if (ckpt__metrics_line_blank(line, len))
            continue;
        ckpt__metrics_record row;
        char why[128];
        int prc = ckpt__metrics_parse_line(&row, line, len, why, sizeof why);
        if (prc == CKPT_ENOMEM)
            goto oom;
        if (prc != CKPT_OK) {
            fprintf(stderr, "mpickpt: %s: %s:%zu: malformed line skipped: %s\n", cmd->name, path,
                    lineno, why);
            skipped++;
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            ckpt__metrics_record *grown = realloc(rows, ncap * sizeof *grown);
            if (!grown) {
                ckpt__metrics_record_clear(&row);
                goto oom;
            }
            rows = grown;
            cap = ncap;
        }
        rows[n++] = row;
    }
    if (got < 0) {
        fprintf(stderr, "mpickpt: %s: cannot read %s: %s\n", cmd->name, path, strerror(errno));
        rc = EXIT_BAD;
        goto out;
    }
    if (n == 0) {
        fprintf(stderr, "mpickpt: %s: %s: no valid metrics line (%zu line%s)\n", cmd->name, path,
                lineno, lineno == 1 ? "" : "s");
        rc = EXIT_BAD;
        goto out;
    }

    double summary[5];
    if (summarize(summary, rows, n) != 0)
        goto oom;
    stragglers st;
    if (find_stragglers(&st, rows, n) != 0)
        goto oom;
    if (json)
        stats_print_json(path, rows, n, skipped, summary, &st);
    else
        stats_print_text(path, rows, n, skipped, summary, &st);
    goto out;
oom:
    rc = cli_oom(cmd);
out:
    for (size_t i = 0; i < n; i++)
        ckpt__metrics_record_clear(&rows[i]);
    free(rows);
    free(line);
    fclose(f);
    free(path);
    return rc;
}

const cli_command cli_cmd_stats = {
    "stats", "[--json] DIR", "summarize the save timings the chief logged (metrics.jsonl)",
    "  Reads DIR/metrics.jsonl, or DIR/chief/metrics.jsonl when DIR has none (DIR may also be\n"
    "  the file itself): one JSON line per committed save, appended by the saver's chief.\n"
    "  Prints one row per save (prefix, mode, MiB, blocking, write, agree, merge and commit\n"
    "  seconds, each the maximum over ranks, GB/s, seconds since the previous save, the rank\n"
    "  slowest to write, its write time over the median of the ranks'), the slowest rank of\n"
    "  every phase, then a summary: the number of saves, median and max of the blocking time\n"
    "  and of the background time (write + agree + merge + commit), the training time saved\n"
    "  by async saves, and the straggler: the rank slowest to write most often, and its write\n"
    "  time over the median (median and max over saves). Lines of older writers\n"
    "  lack the ranks: '-'. A malformed line is reported on stderr with its line number and\n"
    "  skipped, as is a line of 64 KiB or more (read through, never held); exits 1 when no\n"
    "  line is valid.\n"
    "  --json   one object: {\"path\",\"saves\",\"sync_saves\",\"async_saves\",\n"
    "           \"skipped_lines\",\"bytes\",\"blocking_s_median\",\"blocking_s_max\",\n"
    "           \"background_s_median\",\"background_s_max\",\"training_time_saved_s\",\n"
    "           \"straggler\":{\"rank\",\"slowest_saves\",\"saves\",\"write_vs_median_median\",\n"
    "           \"write_vs_median_max\"} or null,\"per_save\":[{\"prefix\",\"<phase>_s\",\n"
    "           \"<phase>_slowest_rank\" (phases blocking, write, agree, merge, commit),\n"
    "           \"write_median_s\",\"write_vs_median\"}]} (unknown values null)\n",
    cmd_stats};
