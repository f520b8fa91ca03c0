/* metrics.jsonl, the saver's log of committed saves: one JSON object per line, appended by the
 * chief after each commit and read by `mpickpt stats`. The line format lives here once, writer
 * and reader side by side. Not installed.
 *
 * A line, keys in this order (times in seconds, "%.6f"; gbps "%.4f"; timestamp "%.3f", seconds
 * since the Epoch):
 *
 *   {"prefix":"ckpt-3","mode":"sync","bytes":4194304,"ranks":2,"blocking_s":0.012000,
 *    "write_s":0.010000,"agree_s":0.000100,"merge_s":0.000200,"commit_s":0.001000,
 *    "gbps":0.3712,"since_prev_s":0.000000,"training_time_saved_s":0.000000,
 *    "timestamp":1763700000.250,"blocking_slowest_rank":1,"write_slowest_rank":1,
 *    "agree_slowest_rank":0,"merge_slowest_rank":0,"commit_slowest_rank":0,
 *    "write_median_s":0.008000}
 *
 * (one line in the file). The last six keys (since issue 17) are optional: the rank that was
 * slowest in each phase (its time is the phase's key, the maximum over ranks) and the median over
 * ranks of the write phase's time; lines without them still parse. The prefix is the caller's bytes, escaped and made valid UTF-8 by the
 * JSON writer (lib/json.h). */
#ifndef MPICKPT_METRICS_H
#define MPICKPT_METRICS_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CKPT__METRICS_PHASES 5

/* One save's record. What the saver fills and what the parser returns. */
typedef struct ckpt__metrics_record {
    /* The checkpoint's prefix. Written as given (the writer does not keep it); from
     * ckpt__metrics_parse_line() a malloc'd copy that ckpt__metrics_record_clear() frees. */
    const char *prefix;
    int async;         /* 1: "mode":"async", 0: "mode":"sync" */
    uint64_t bytes;    /* bytes of tensor data, summed over ranks */
    uint64_t ranks;    /* ranks that saved; 0 when a parsed line has none */
    double blocking_s; /* time the caller was blocked (the maximum over ranks, as are the next) */
    double write_s;
    double agree_s;
    double merge_s;
    double commit_s;
    /* bytes / background / 1e9 (ckpt__metrics_gbps); computed by the parser when absent */
    double gbps;
    /* since the previous save's commit, 0 for the first save; NaN when a parsed line has none */
    double since_prev_s;
    /* async saves: background time beyond the blocking time; 0 when a parsed line has none */
    double training_time_saved_s;
    double timestamp; /* commit time, seconds since the Epoch; NaN when a parsed line has none */
    /* Optional. have_slowest: slowest_rank[] holds, for each phase in the order blocking, write,
     * agree, merge, commit, the rank that was slowest there (-1: unknown; the writer writes the
     * known ones). have_write_median: write_median_s holds the median over ranks of write_s. A
     * record initialized with zeros has neither (the writer then writes the line as before). */
    int have_slowest;
    int slowest_rank[CKPT__METRICS_PHASES];
    int have_write_median;
    double write_median_s;
} ckpt__metrics_record;

/* The phases' names in the order of slowest_rank[]: "blocking", "write", "agree", "merge",
 * "commit"; their times are the record's blocking_s .. commit_s. */
extern const char *const ckpt__metrics_phase_names[CKPT__METRICS_PHASES];

/* The record's time of phase k (0..CKPT__METRICS_PHASES-1). */
double ckpt__metrics_phase_s(const ckpt__metrics_record *m, int k);

/* The median of v[0..n) (n > 0; the mean of the two middle values when n is even); sorts v.
 * NaN when n is 0. */
double ckpt__metrics_median(double *v, size_t n);

/* write_s + agree_s + merge_s + commit_s: the work of the save, done in the background by an
 * async save. */
double ckpt__metrics_background_s(const ckpt__metrics_record *m);

/* Throughput of the save in GB/s: bytes / ckpt__metrics_background_s(m) / 1e9, 0 when that time
 * is not positive. */
double ckpt__metrics_gbps(const ckpt__metrics_record *m);

/*
 * Writes m as one line of metrics.jsonl (the object described above and a '\n') to out, through
 * the JSON writer: fields as given, gbps and training_time_saved_s included (the caller computes
 * them). Non-finite times are written as the strings "NaN"/"Infinity" (valid JSON, which the
 * parser refuses: a time must be a number). Returns CKPT_OK, or CKPT_EIO when the stream's error
 * indicator is set afterwards (the caller still fcloses it).
 */
int ckpt__metrics_write_line(FILE *out, const ckpt__metrics_record *m);

/* 1 when line[0..len) holds only JSON whitespace (space, tab, CR, LF): a line readers skip. */
int ckpt__metrics_line_blank(const char *line, size_t len);

/*
 * Parses one line of metrics.jsonl (len bytes, NULs included, with or without its newline): a
 * flat JSON object whose values are strings or numbers (true/false/null are tolerated for keys
 * this parser does not know, which are ignored: newer writers may add keys). The known keys may
 * appear once, in any order; prefix, mode, bytes and the five times (blocking_s, write_s, agree_s,
 * merge_s, commit_s) must. A line is refused when it is not exactly one such object (truncated,
 * text after it, nested values, a NUL byte, a raw control character or a bad escape in a string,
 * an escaped NUL, a lone surrogate), when a number is not finite or has 128 characters or more,
 * when mode is neither "sync" nor "async", when bytes or ranks is not a non-negative integer, or
 * when a time other than timestamp is negative. Strings may hold any other bytes (they are not
 * checked for UTF-8); escapes are decoded, surrogate pairs to UTF-8.
 * On success fills *out (see the struct for absent fields; out->prefix malloc'd) and returns
 * CKPT_OK. Otherwise *out holds nothing to free, the reason (e.g. "truncated line (no closing
 * '}')", "\"mode\" is neither \"sync\" nor \"async\"", "missing \"commit_s\"") is put in
 * reason[0..reason_size) and recorded for ckpt_error_last(), and the result is CKPT_ECORRUPT, or
 * CKPT_ENOMEM (reason "out of memory").
 */
int ckpt__metrics_parse_line(ckpt__metrics_record *out, const char *line, size_t len, char *reason,
                             size_t reason_size);

/*
 * The longest line a reader takes, newline included: the writer's lines are under 1 KiB plus the
 * prefix, which, escaped, is at most 6 bytes per byte of a path of 4096 (about 25 KiB). A reader
 * holds one line at a time, so this bounds its memory whatever the file holds.
 */
#define CKPT__METRICS_MAX_LINE ((size_t)64 << 10)

/* What ckpt__metrics_read_line() found. */
enum {
    CKPT__LINE_EOF = 0,     /* the end of the file: no line */
    CKPT__LINE_OK = 1,      /* a line in buf[0..*len), its '\n' included when it has one */
    CKPT__LINE_TOO_LONG = 2 /* a line of CKPT__METRICS_MAX_LINE bytes or more, read to its end
                             * and dropped; *len its length (saturated at SIZE_MAX) */
};

/*
 * Reads the next line of f into buf[0..CKPT__METRICS_MAX_LINE) (NUL bytes included; no NUL is
 * appended). Never holds more than that buffer: an over-long line is consumed in place, not
 * stored. Returns a CKPT__LINE_* value, or -1 on a read error (ferror(f) is set; errno says why).
 */
int ckpt__metrics_read_line(FILE *f, char *buf, size_t *len);

/* Frees what ckpt__metrics_parse_line() allocated in m and sets m->prefix to NULL. NULL is a
 * no-op. */
void ckpt__metrics_record_clear(ckpt__metrics_record *m);

#endif
