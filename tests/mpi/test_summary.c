/*
 * The summary lines (docs/operations.md, "Summary lines"; mpi/save_summary.c): the chief logs one
 * line per committed save and per restore at info level, every rank one debug line per save, and
 * the library prints nothing at its default level.
 *
 *   test_summary OUTDIR
 *
 * Cases: a log callback at info (exactly one save line and one restore line, on rank 0 only; their
 * fields read back: bytes equal the bytes registered and the saver's metrics, ranks, the slowest
 * rank a rank, the median at most the maximum, seconds and GB/s consistent with the phases, the
 * metrics.jsonl line naming the same slowest rank); debug (one line per rank); the default sink at
 * the library's default level (stderr stays empty on every rank); a program's default of info
 * (ckpt_log_set_default_level: the line on rank 0's stderr only); MPICKPT_LOG=warn wins over it,
 * MPICKPT_LOG=debug prints for a successful save.
 */
#include "mpi_check.h"

#include <mpickpt.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { ROWS = 300, COLS = 16, REP = 100, NLOG = 64 };

static int g_rank, g_size;
static char g_out[2048];
static char g_logs[NLOG][2048];
static int g_levels[NLOG];
static int g_nlogs;

static void log_cb(ckpt_log_level level, const char *message, void *payload)
{
    (void)payload;
    if (g_nlogs < NLOG) {
        g_levels[g_nlogs] = (int)level;
        snprintf(g_logs[g_nlogs++], sizeof g_logs[0], "%s", message);
    }
}

/* How many captured messages start with `start`. */
static int count_logs(const char *start, int *last)
{
    int n = 0;
    for (int i = 0; i < g_nlogs; i++)
        if (strncmp(g_logs[i], start, strlen(start)) == 0) {
            n++;
            *last = i;
        }
    return n;
}

/* The value of " key=" in line (the prefix runs to the end of the line), or NULL. */
static const char *field(const char *line, const char *key, char *buf, size_t size)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    size_t n = strcmp(key, "prefix") == 0 ? strcspn(p, "\n") : strcspn(p, " \n");
    if (n >= size)
        n = size - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

static double num(const char *line, const char *key)
{
    char buf[256];
    const char *v = field(line, key, buf, sizeof buf);
    CHECK_MSG(v != NULL, "no %s= in '%s'", key, line);
    return v ? strtod(v, NULL) : NAN;
}

static uint64_t expected_bytes(void)
{
    return (uint64_t)g_size * ROWS * COLS * sizeof(float) + REP * sizeof(double);
}

/* The checks of a save line common to the callback and the stderr cases. */
static void check_save_line(const char *line, const char *prefix)
{
    char buf[2100];
    CHECK_MSG((uint64_t)num(line, "bytes") == expected_bytes(), "bytes in '%s', expected %llu",
              line, (unsigned long long)expected_bytes());
    CHECK_EQ_INT((int)num(line, "ranks"), g_size);
    CHECK_MSG(field(line, "mode", buf, sizeof buf) && strcmp(buf, "sync") == 0, "%s", line);
    CHECK_MSG(field(line, "prefix", buf, sizeof buf) && strcmp(buf, prefix) == 0,
              "prefix in '%s', expected %s", line, prefix);
    int slow = (int)num(line, "slowest_rank");
    CHECK_MSG(slow >= 0 && slow < g_size, "slowest_rank %d of %d", slow, g_size);
    CHECK_EQ_INT((int)num(line, "write_rank"), slow);
    CHECK_MSG(num(line, "slowest_s") == num(line, "write_s"), "%s", line);
    const char *phases[] = {"blocking_rank", "agree_rank", "merge_rank", "commit_rank"};
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        int r = (int)num(line, phases[i]);
        CHECK_MSG(r >= 0 && r < g_size, "%s %d", phases[i], r);
    }
    double w = num(line, "write_s"), med = num(line, "write_median_s");
    CHECK_MSG(med >= 0 && med <= w, "median %g, max %g", med, w);
    /* consistency of the printed numbers (each rounded to 6 or 4 decimals), not speed */
    double sec = num(line, "seconds"), sum = w + num(line, "agree_s") + num(line, "merge_s") +
                                             num(line, "commit_s");
    CHECK_MSG(fabs(sec - sum) < 5e-6, "seconds %g, phases %g", sec, sum);
    double gbps = num(line, "gbps");
    CHECK_MSG(sec <= 0 || fabs(gbps - (double)expected_bytes() / sec / 1e9) <=
                              1e-4 + 1e-3 * gbps + (double)expected_bytes() / 1e9 * 1e-6 / sec / sec,
              "gbps %g for %llu bytes in %g s", gbps, (unsigned long long)expected_bytes(), sec);
}

/* stderr into OUTDIR/<name>.<rank> until stderr_back(); the saved descriptor is returned. */
static int stderr_to(const char *name, char *path, size_t size)
{
    snprintf(path, size, "%s/%s.%d", g_out, name, g_rank);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

/* stderr back; returns what was captured (malloc'd). */
static char *stderr_back(int saved, const char *path)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 65536);
    if (f && buf)
        (void)!fread(buf, 1, 65535, f);
    if (f)
        fclose(f);
    return buf;
}

static int count_str(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void save(ckpt_saver *s, const char *name, char *prefix, size_t size)
{
    snprintf(prefix, size, "%s/%s", g_out, name);
    ckpt_save_info info = {0};
    CHECK_OK(ckpt_saver_write(s, prefix, &info));
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    if (argc != 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_summary OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    if (g_rank == 0)
        mkdir(g_out, 0755);
    MPI_Barrier(MPI_COMM_WORLD);
    unsetenv("MPICKPT_LOG");

    float *slice = malloc(sizeof(float) * ROWS * COLS);
    double rep[REP];
    for (int i = 0; i < ROWS * COLS; i++)
        slice[i] = (float)(g_rank * 1000 + i);
    for (int i = 0; i < REP; i++)
        rep[i] = i * 0.5;
    ckpt_saver *s = NULL;
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    CHECK_OK(ckpt_saver_create(&s, MPI_COMM_WORLD, &o));
    int64_t gdims[2] = {(int64_t)g_size * ROWS, COLS}, st[2] = {(int64_t)g_rank * ROWS, 0},
            ct[2] = {ROWS, COLS}, rdims[1] = {REP};
    ckpt_shape gshape, rshape;
    ckpt_shape_init(&gshape, 2, gdims);
    ckpt_shape_init(&rshape, 1, rdims);
    ckpt_slice sl;
    ckpt_slice_init(&sl, 2, st, ct);
    CHECK_OK(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &gshape, &sl, slice));
    CHECK_OK(ckpt_saver_add_replicated(s, "b", CKPT_FLOAT64, &rshape, rep, CKPT_REPLICA_PRIMARY));
    char prefix[2200];
    int last = -1;

    check_case(1, "info callback: one save line, one restore line, on the chief");
    ckpt_log_set(log_cb, CKPT_LOG_INFO, NULL);
    save(s, "ckpt-1", prefix, sizeof prefix);
    int nsave = count_logs("save ", &last);
    CHECK_EQ_INT(nsave, g_rank == 0 ? 1 : 0);
    if (g_rank == 0 && nsave == 1) {
        CHECK_EQ_INT(g_levels[last], CKPT_LOG_INFO);
        check_save_line(g_logs[last], prefix);
        ckpt_saver_metrics m = CKPT_SAVER_METRICS_INIT;
        CHECK_OK(ckpt_saver_metrics_get(&m, s));
        CHECK_MSG(m.bytes == expected_bytes(), "metrics bytes %llu", (unsigned long long)m.bytes);
        /* metrics.jsonl carries the same slowest rank */
        char path[2300], line[4096] = "", key[64];
        snprintf(path, sizeof path, "%s/metrics.jsonl", g_out);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        while (f && fgets(line, sizeof line, f))
            ;
        if (f)
            fclose(f);
        snprintf(key, sizeof key, "\"write_slowest_rank\":%d,", (int)num(g_logs[last], "slowest_rank"));
        CHECK_MSG(strstr(line, key) != NULL, "no %s in %s", key, line);
        snprintf(key, sizeof key, "\"bytes\":%llu,", (unsigned long long)expected_bytes());
        CHECK_MSG(strstr(line, key) != NULL, "no %s in %s", key, line);
        CHECK_MSG(strstr(line, "\"write_median_s\":") != NULL, "no median in %s", line);
    }
    g_nlogs = 0;
    for (int i = 0; i < ROWS * COLS; i++)
        slice[i] = -1;
    ckpt_restore_info ri;
    CHECK_OK(ckpt_saver_restore(s, prefix, NULL, &ri));
    CHECK_MSG(slice[7] == (float)(g_rank * 1000 + 7), "restored %g", (double)slice[7]);
    int nrest = count_logs("restore ", &last);
    CHECK_EQ_INT(nrest, g_rank == 0 ? 1 : 0);
    CHECK_EQ_INT(count_logs("save ", &last), 0);
    if (g_rank == 0 && nrest == 1) {
        const char *line = g_logs[last];
        char buf[2300];
        CHECK_MSG((uint64_t)num(line, "bytes") == expected_bytes(), "%s", line);
        CHECK_EQ_INT((int)num(line, "ranks"), g_size);
        CHECK_EQ_INT((int)num(line, "written_by"), g_size);
        int slow = (int)num(line, "slowest_rank");
        CHECK_MSG(slow >= 0 && slow < g_size, "%s", line);
        CHECK_EQ_INT((int)num(line, "read_rank"), slow);
        CHECK_MSG(num(line, "seconds") >= num(line, "read_s"), "%s", line);
        CHECK_MSG(field(line, "prefix", buf, sizeof buf) && strcmp(buf, prefix) == 0, "%s", line);
    }

    check_case(1, "debug callback: one line per rank and save");
    g_nlogs = 0;
    ckpt_log_set(log_cb, CKPT_LOG_DEBUG, NULL);
    save(s, "ckpt-2", prefix, sizeof prefix);
    char mine[64];
    snprintf(mine, sizeof mine, "save rank=%d ", g_rank);
    CHECK_EQ_INT(count_logs(mine, &last), 1);
    CHECK_EQ_INT(count_logs("save bytes=", &last), g_rank == 0 ? 1 : 0);

    check_case(1, "default sink, the library's default level: nothing on stderr");
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    char path[2300];
    int saved = stderr_to("quiet", path, sizeof path);
    save(s, "ckpt-3", prefix, sizeof prefix);
    CHECK_OK(ckpt_saver_restore(s, prefix, NULL, &ri));
    char *got = stderr_back(saved, path);
    CHECK_MSG(got && got[0] == '\0', "stderr at the default level: '%s'", got ? got : "");
    free(got);

    check_case(1, "a program's default of info: the chief's lines on stderr");
    ckpt_log_set_default_level(CKPT_LOG_INFO);
    saved = stderr_to("info", path, sizeof path);
    save(s, "ckpt-4", prefix, sizeof prefix);
    CHECK_OK(ckpt_saver_restore(s, prefix, NULL, &ri));
    got = stderr_back(saved, path);
    if (g_rank == 0) {
        CHECK_MSG(got && count_str(got, "] info: save bytes=") == 1 &&
                      count_str(got, "] info: restore bytes=") == 1 && count_str(got, "\n") == 2,
                  "stderr: '%s'", got ? got : "");
        const char *at = got ? strstr(got, "info: save") : NULL;
        if (at) {
            char line[2048];
            snprintf(line, sizeof line, "%.*s", (int)strcspn(at + 5, "\n"), at + 5);
            check_save_line(line, prefix);
        }
    } else {
        CHECK_MSG(got && got[0] == '\0', "stderr on rank %d: '%s'", g_rank, got ? got : "");
    }
    free(got);

    check_case(1, "MPICKPT_LOG=warn wins over the program's default; debug prints a save");
    setenv("MPICKPT_LOG", "warn", 1);
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    saved = stderr_to("warn", path, sizeof path);
    save(s, "ckpt-5", prefix, sizeof prefix);
    got = stderr_back(saved, path);
    CHECK_MSG(got && got[0] == '\0', "stderr with MPICKPT_LOG=warn: '%s'", got ? got : "");
    free(got);
    setenv("MPICKPT_LOG", "debug", 1);
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    saved = stderr_to("debug", path, sizeof path);
    save(s, "ckpt-6", prefix, sizeof prefix);
    got = stderr_back(saved, path);
    char want[64];
    snprintf(want, sizeof want, "debug: save rank=%d ", g_rank);
    CHECK_MSG(got && count_str(got, want) == 1, "stderr with MPICKPT_LOG=debug: '%s'",
              got ? got : "");
    free(got);
    unsetenv("MPICKPT_LOG");

    alarm(0);
    CHECK_OK(ckpt_saver_close(s));
    free(slice);
    return check_mpi_done("test_summary");
}
