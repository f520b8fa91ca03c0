/* mpickpt: command-line tool for mpickpt checkpoints (inspect, verify, dump, list, diff, gc,
 * stats).
 *
 * Runs without mpirun and never initializes MPI: it only uses libmpickpt_core's single-process
 * reader and state-file functions. Every command but gc is read-only.
 * Exit codes: 0 success, 1 bad or missing data (any library error; for diff: the data differ),
 * 2 usage.
 *
 * Adding a command: write `static int cmd_NAME(const cli_command *cmd, int argc, char **argv)`,
 * declare it next to the others and add one row to `commands[]`. Parse options with cli_parse(),
 * report library errors with cli_lib_error() and usage errors with cli_usage_error(). */
#include "fsutil.h"
#include "json.h"    /* lib/json.h */
#include "metrics.h" /* lib/metrics.h */

#include "mpickpt/checkpoint.h"
#include "mpickpt/state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };

typedef struct cli_command cli_command;

struct cli_command {
    const char *name;
    const char *synopsis; /* arguments after the command name, for usage lines */
    const char *summary;  /* one line for `mpickpt help` */
    const char *details;  /* further lines for `mpickpt help NAME`, or NULL */
    /* argv[0] is the command name; returns the exit code. */
    int (*run)(const cli_command *cmd, int argc, char **argv);
};

/* One option of a command: a flag (value == NULL) or an option taking an argument. */
typedef struct cli_option {
    const char *name; /* "--json" */
    int *flag;        /* set to 1 when the flag is given */
    const char **value;
} cli_option;

static int cmd_inspect(const cli_command *cmd, int argc, char **argv);
static int cmd_verify(const cli_command *cmd, int argc, char **argv);
static int cmd_dump(const cli_command *cmd, int argc, char **argv);
static int cmd_list(const cli_command *cmd, int argc, char **argv);
static int cmd_diff(const cli_command *cmd, int argc, char **argv);
static int cmd_gc(const cli_command *cmd, int argc, char **argv);
static int cmd_stats(const cli_command *cmd, int argc, char **argv);
static int cmd_help(const cli_command *cmd, int argc, char **argv);
static int cmd_version(const cli_command *cmd, int argc, char **argv);

static const cli_command commands[] = {
    {"inspect", "[--json] PREFIX", "show a checkpoint's header, tensors and pieces",
     "  --json   print one JSON document: the header, then every tensor with its pieces\n"
     "           (slice, writing rank, data file, HDF5 dataset, bytes, CRC-32C, and for a\n"
     "           packed piece its byte offset in the dataset)\n",
     cmd_inspect},
    {"verify", "PREFIX|DIR...", "re-read every piece and check sizes and CRC-32C checksums",
     "  A DIR verifies every checkpoint (*.index) directly in it and in DIR/chief/.\n"
     "  Bad pieces are listed on stderr; one ok/BAD line per checkpoint goes to stdout.\n"
     "  Exits 0 only when every checkpoint is good (an empty DIR is an error).\n",
     cmd_verify},
    {"dump", "[--json] [--slice SPEC] PREFIX NAME", "print the values of one tensor",
     "  --slice SPEC  only a sub-block: extents \"0,2:-\" (start,length or - per dimension)\n"
     "                or a full TensorFlow slice spec \"4 10 0,2:-\" (shape must match)\n"
     "  --json        {\"name\",\"dtype\",\"shape\",\"values\"} with values flattened row-major;\n"
     "                NaN and infinities as the strings \"NaN\", \"Infinity\", \"-Infinity\"\n",
     cmd_dump},
    {"list", "[--json] DIR", "list the committed checkpoints of a directory, oldest first",
     "  Reads DIR/checkpoint (the state file the manager writes); DIR/chief/ is used when DIR\n"
     "  has no state file but DIR/chief/ has one or has checkpoints. A missing or damaged state\n"
     "  file is reported on stderr and the checkpoints (*.index) are listed by scanning.\n"
     "  --json   {\"latest\":PREFIX|null,\"checkpoints\":[{\"prefix\",\"save_counter\",\"epoch\",\n"
     "           \"step\",\"timestamp\",\"bytes\",\"end_of_epoch\"}]}; every PREFIX is DIR joined\n"
     "           with the checkpoint's name, usable as given with inspect, verify and dump\n",
     cmd_list},
    {"diff", "[--json] [--block-bytes N] A B", "compare the tensors of two checkpoints",
     "  Reports tensors only in A or only in B, tensors whose dtype or shape differ, and for the\n"
     "  others the number of elements whose bytes differ and the first differing flat\n"
     "  (row-major) index. Header differences (save counter, epoch, step, world size, layout)\n"
     "  are shown but are not a data difference. Exits 0 when the data are identical, 1 when\n"
     "  they differ or a checkpoint cannot be read.\n"
     "  --block-bytes N  compare about N bytes of a tensor at a time (default 64M; suffixes\n"
     "                   K, M, G); never less than the tensor's largest stored piece, which\n"
     "                   the library reads whole\n"
     "  --json   {\"identical\",\"only_in_a\",\"only_in_b\",\"changed\":[{\"name\",\"reason\",\n"
     "           \"differing_elements\",\"first_index\"}],\"header\":{FIELD:{\"a\",\"b\"}}}\n",
     cmd_diff},
    {"gc", "[--dry-run] DIR", "remove the debris of crashed or failed saves",
     "  Removes, in DIR and in DIR/chief/: *_temp/ directories, data files (*.data-*) whose\n"
     "  index does not exist, and temp files (*.tmp-PID); and the non-chief ranks'\n"
     "  workertemp_*/ directories (in DIR, or next to DIR when DIR is a chief/). Committed\n"
     "  checkpoints are never touched. Do not run it while a job is saving into DIR.\n"
     "  Prints each path removed and why, then \"gc DIR: removed N path(s)\".\n"
     "  --dry-run  only print what would be removed (\"would remove\")\n",
     cmd_gc},
    {"stats", "[--json] DIR", "summarize the save timings the chief logged (metrics.jsonl)",
     "  Reads DIR/metrics.jsonl, or DIR/chief/metrics.jsonl when DIR has none (DIR may also be\n"
     "  the file itself): one JSON line per committed save, appended by the saver's chief.\n"
     "  Prints one row per save (prefix, mode, MiB, blocking, write, agree, merge and commit\n"
     "  seconds, GB/s, seconds since the previous save), then a summary: the number of saves,\n"
     "  median and max of the blocking time and of the background time (write + agree +\n"
     "  merge + commit), and the training time saved by async saves. A malformed line is\n"
     "  reported on stderr with its line number and skipped; exits 1 when no line is valid.\n"
     "  --json   the summary as one object: {\"path\",\"saves\",\"sync_saves\",\"async_saves\",\n"
     "           \"skipped_lines\",\"bytes\",\"blocking_s_median\",\"blocking_s_max\",\n"
     "           \"background_s_median\",\"background_s_max\",\"training_time_saved_s\"}\n",
     cmd_stats},
    {"help", "[COMMAND]", "show this help, or a command's", NULL, cmd_help},
    {"version", "", "print the library version (also: --version)", NULL, cmd_version},
};

#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

/* ---------------------------------------------------------------------------------------- */
/* Shared helpers                                                                             */

static void print_usage_line(FILE *out, const cli_command *cmd)
{
    fprintf(out, "usage: mpickpt %s%s%s\n", cmd->name, cmd->synopsis[0] ? " " : "",
            cmd->synopsis);
}

/* Prints "mpickpt: CMD: MESSAGE" and the command's usage on stderr; returns EXIT_USAGE. */
static int cli_usage_error(const cli_command *cmd, const char *fmt, ...) CKPT_PRINTF(2, 3);
static int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "mpickpt: %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_usage_line(stderr, cmd);
    return EXIT_USAGE;
}

/* Prints the library's last error as "mpickpt: CMD: MESSAGE" (the message names the path and
 * cause); falls back to the status description when the library recorded none. Returns
 * EXIT_BAD. */
static int cli_lib_error(const cli_command *cmd, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    fprintf(stderr, "mpickpt: %s: %s\n", cmd->name,
            e && e->message && e->message[0] ? e->message : ckpt_strerror(rc));
    return EXIT_BAD;
}

/*
 * Parses the options of a command (argv[1..argc)). Options may appear anywhere before "--";
 * "--name=value" and "--name value" are both accepted. The operands are moved to the front of
 * argv and counted in *nops. Returns 0, EXIT_USAGE after printing why, or -1 when -h/--help was
 * given (the usage is then printed on stdout and the command should exit 0).
 */
static int cli_parse(const cli_command *cmd, int argc, char **argv, const cli_option *opts,
                     size_t nopts, int *nops)
{
    int n = 0;
    int only_operands = 0;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (only_operands || arg[0] != '-' || arg[1] == '\0') {
            argv[n++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_operands = 1;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            print_usage_line(stdout, cmd);
            if (cmd->details)
                fputs(cmd->details, stdout);
            return -1;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_option *opt = NULL;
        for (size_t k = 0; k < nopts; k++)
            if (strlen(opts[k].name) == len && strncmp(opts[k].name, arg, len) == 0)
                opt = &opts[k];
        if (!opt)
            return cli_usage_error(cmd, "unknown option '%s'", arg);
        if (!opt->value) {
            if (eq)
                return cli_usage_error(cmd, "option '%s' takes no value", arg);
            *opt->flag = 1;
        } else if (eq) {
            *opt->value = eq + 1;
        } else if (i + 1 < argc) {
            *opt->value = argv[++i];
        } else {
            return cli_usage_error(cmd, "option '%s' needs a value", arg);
        }
    }
    *nops = n;
    return 0;
}

/* Returns a malloc'd copy of a PREFIX argument without a trailing ".index" (users often pass
 * the index file itself, e.g. from shell completion), or NULL when out of memory. */
static char *cli_prefix(const char *arg)
{
    static const char suffix[] = ".index";
    size_t len = strlen(arg);
    size_t slen = sizeof suffix - 1;
    if (len > slen && strcmp(arg + len - slen, suffix) == 0)
        len -= slen;
    char *p = malloc(len + 1);
    if (p) {
        memcpy(p, arg, len);
        p[len] = '\0';
    }
    return p;
}

/* "dir/name", without doubling a trailing slash of dir. malloc'd; NULL when out of memory. */
static char *path_join(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    int slash = dl > 0 && dir[dl - 1] != '/';
    char *p = malloc(dl + (size_t)slash + nl + 1);
    if (p) {
        memcpy(p, dir, dl);
        if (slash)
            p[dl] = '/';
        memcpy(p + dl + (size_t)slash, name, nl + 1);
    }
    return p;
}

/* Opens the reader of a PREFIX argument (only its index when index_only); reports failures.
 * Returns 0 or EXIT_BAD. */
static int cli_open(const cli_command *cmd, const char *arg, ckpt_reader **r, int index_only)
{
    char *prefix = cli_prefix(arg);
    if (!prefix) {
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        return EXIT_BAD;
    }
    int rc = index_only ? ckpt_reader_open_index(r, prefix) : ckpt_reader_open(r, prefix);
    free(prefix);
    return rc == CKPT_OK ? 0 : cli_lib_error(cmd, rc);
}

/* Text output of a name: control characters (which would break the one-line-per-item layout
 * or drive the terminal) are shown as \xNN; everything else, UTF-8 included, as is. */
static void text_name(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
}

/* Terminal columns text_name() uses for s: UTF-8 continuation bytes take none. */
static int text_width(const char *s)
{
    int w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            w += 4;
        else if ((*p & 0xc0) != 0x80)
            w++;
    }
    return w;
}

/* "[6, 4]" ("[]" for a scalar) into buf; cut short (never overflowing) if buf is too small. */
static void format_dims(char *buf, size_t size, int ndims, const int64_t *dims)
{
    size_t used = 0;
    int n = snprintf(buf, size, "[");
    for (int d = 0; d < ndims && n >= 0; d++) {
        used += (size_t)n;
        if (used >= size)
            return;
        n = snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", dims[d]);
    }
    if (n >= 0 && (used += (size_t)n) < size)
        snprintf(buf + used, size - used, "]");
}

static void json_dims(ckpt__json_writer *w, int ndims, const int64_t *dims)
{
    ckpt__json_array_begin(w);
    for (int d = 0; d < ndims; d++)
        ckpt__json_int(w, dims[d]);
    ckpt__json_array_end(w);
}

/* Sums the pieces of tensor i (count and bytes). Returns a ckpt_status. */
static int tensor_totals(const ckpt_reader *r, size_t i, size_t *pieces, uint64_t *bytes)
{
    ckpt_tensor_info t;
    int rc = ckpt_reader_tensor(&t, r, i);
    if (rc != CKPT_OK)
        return rc;
    *pieces = t.num_pieces;
    *bytes = 0;
    for (size_t j = 0; j < t.num_pieces; j++) {
        ckpt_piece_info p;
        if ((rc = ckpt_reader_piece(&p, r, i, j)) != CKPT_OK)
            return rc;
        *bytes += p.bytes;
    }
    return CKPT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* inspect                                                                                    */

/* The whole index as one JSON document (format in the tool's documentation). */
static int inspect_json(const cli_command *cmd, const ckpt_reader *r)
{
    const ckpt_header *h = ckpt_reader_header(r);
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, "format_version");
    ckpt__json_uint(&w, h->format_version);
    ckpt__json_key(&w, "world_size");
    ckpt__json_int(&w, h->world_size);
    ckpt__json_key(&w, "layout");
    ckpt__json_string(&w, ckpt_layout_name(h->layout));
    ckpt__json_key(&w, "save_counter");
    ckpt__json_int(&w, h->save_counter);
    ckpt__json_key(&w, "epoch");
    ckpt__json_int(&w, h->epoch);
    ckpt__json_key(&w, "step");
    ckpt__json_int(&w, h->step);
    ckpt__json_key(&w, "timestamp");
    ckpt__json_real(&w, h->timestamp);
    ckpt__json_key(&w, "producer");
    ckpt__json_string(&w, h->producer ? h->producer : "");
    ckpt__json_key(&w, "tensors");
    ckpt__json_array_begin(&w);
    size_t n = ckpt_reader_num_tensors(r);
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        int rc = ckpt_reader_tensor(&t, r, i);
        if (rc != CKPT_OK)
            return cli_lib_error(cmd, rc);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "name");
        ckpt__json_string(&w, t.name);
        ckpt__json_key(&w, "dtype");
        ckpt__json_string(&w, ckpt_dtype_name(t.dtype));
        ckpt__json_key(&w, "shape");
        json_dims(&w, t.shape.ndims, t.shape.dims);
        ckpt__json_key(&w, "kind");
        ckpt__json_string(&w, ckpt_kind_name(t.kind));
        ckpt__json_key(&w, "pieces");
        ckpt__json_array_begin(&w);
        for (size_t j = 0; j < t.num_pieces; j++) {
            ckpt_piece_info p;
            if ((rc = ckpt_reader_piece(&p, r, i, j)) != CKPT_OK)
                return cli_lib_error(cmd, rc);
            ckpt__json_object_begin(&w);
            ckpt__json_key(&w, "start");
            json_dims(&w, p.slice.ndims, p.slice.start);
            ckpt__json_key(&w, "count");
            json_dims(&w, p.slice.ndims, p.slice.count);
            ckpt__json_key(&w, "rank");
            ckpt__json_int(&w, p.rank);
            ckpt__json_key(&w, "file");
            ckpt__json_string(&w, p.file);
            ckpt__json_key(&w, "dataset");
            ckpt__json_string(&w, p.dataset);
            ckpt__json_key(&w, "dataset_start");
            json_dims(&w, p.dataset_slice.ndims, p.dataset_slice.start);
            ckpt__json_key(&w, "bytes");
            ckpt__json_uint(&w, p.bytes);
            ckpt__json_key(&w, "crc32c");
            ckpt__json_uint(&w, p.crc32c);
            int packed = 0;
            uint64_t pack_offset = 0;
            if ((rc = ckpt_reader_piece_packing(&packed, &pack_offset, r, i, j)) != CKPT_OK)
                return cli_lib_error(cmd, rc);
            ckpt__json_key(&w, "packed");
            ckpt__json_bool(&w, packed);
            ckpt__json_key(&w, "pack_offset");
            ckpt__json_uint(&w, pack_offset);
            ckpt__json_object_end(&w);
        }
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
    return EXIT_OK;
}

/* Header lines, then one table row per tensor. Names wider than the cap overflow their row
 * rather than widening the whole table. */
static int inspect_text(const cli_command *cmd, const ckpt_reader *r, const char *prefix)
{
    enum { NAME_CAP = 60 };
    const ckpt_header *h = ckpt_reader_header(r);
    size_t n = ckpt_reader_num_tensors(r);
    size_t all_pieces = 0;
    uint64_t all_bytes = 0;
    int name_w = 4;
    int shape_w = 5;
    char shape[CKPT_MAX_DIMS * 24 + 8];
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        size_t pieces;
        uint64_t bytes;
        int rc = ckpt_reader_tensor(&t, r, i);
        if (rc == CKPT_OK)
            rc = tensor_totals(r, i, &pieces, &bytes);
        if (rc != CKPT_OK)
            return cli_lib_error(cmd, rc);
        all_pieces += pieces;
        all_bytes += bytes;
        int tw = text_width(t.name);
        name_w = tw > name_w ? (tw < NAME_CAP ? tw : NAME_CAP) : name_w;
        format_dims(shape, sizeof shape, t.shape.ndims, t.shape.dims);
        shape_w = (int)strlen(shape) > shape_w ? (int)strlen(shape) : shape_w;
    }

    printf("checkpoint    ");
    text_name(stdout, prefix);
    printf("\nformat        %" PRIu32 " (%s)\n", h->format_version, h->producer ? h->producer : "");
    printf("written at    ");
    struct tm tm;
    char when[64];
    /* Range check first: converting a NaN or huge double to time_t is undefined. */
    time_t secs = isfinite(h->timestamp) && fabs(h->timestamp) < 1e15 ? (time_t)h->timestamp : 0;
    if (secs && gmtime_r(&secs, &tm) &&
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm) > 0)
        printf("%s (%.6f)\n", when, h->timestamp);
    else
        printf("%.17g\n", h->timestamp);
    printf("world size    %" PRId32 " (%s files, %s-endian data)\n", h->world_size,
           ckpt_layout_name(h->layout), h->little_endian ? "little" : "big");
    printf("save counter  %" PRId64 "\n", h->save_counter);
    printf("epoch         %" PRId64 "\n", h->epoch);
    printf("step          %" PRId64 "\n", h->step);
    printf("tensors       %zu (%zu pieces, %" PRIu64 " bytes)\n", n, all_pieces, all_bytes);
    if (n == 0)
        return EXIT_OK;

    printf("\n%-*s  %-8s  %-*s  %-11s  %6s  %s\n", name_w, "NAME", "DTYPE", shape_w, "SHAPE",
           "KIND", "PIECES", "BYTES");
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        size_t pieces;
        uint64_t bytes;
        int rc = ckpt_reader_tensor(&t, r, i);
        if (rc == CKPT_OK)
            rc = tensor_totals(r, i, &pieces, &bytes);
        if (rc != CKPT_OK)
            return cli_lib_error(cmd, rc);
        text_name(stdout, t.name);
        int pad = name_w - text_width(t.name);
        format_dims(shape, sizeof shape, t.shape.ndims, t.shape.dims);
        printf("%*s  %-8s  %-*s  %-11s  %6zu  %" PRIu64 "\n", pad > 0 ? pad : 0, "",
               ckpt_dtype_name(t.dtype), shape_w, shape, ckpt_kind_name(t.kind), pieces, bytes);
    }
    return EXIT_OK;
}

typedef struct inspect_state {
    const cli_command *cmd;
    size_t bad; /* pieces reported bad */
} inspect_state;

/* ckpt_verify_cb of ckpt_reader_check(): one stderr line per bad piece. */
static int inspect_report(const char *tensor, size_t piece, const char *file, int code,
                          const char *message, void *payload)
{
    inspect_state *st = payload;
    st->bad++;
    fprintf(stderr, "mpickpt: %s: tensor \"", st->cmd->name);
    text_name(stderr, tensor);
    fprintf(stderr, "\" piece %zu (%s): %s\n", piece, file ? file : "?",
            message && message[0] ? message : ckpt_strerror(code));
    return 0;
}

static int cmd_inspect(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const cli_option opts[] = {{"--json", &json, NULL}};
    int rc = cli_parse(cmd, argc, argv, opts, 1, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops != 1)
        return cli_usage_error(cmd, "%s", nops ? "expected one PREFIX" : "missing PREFIX");

    /* Show the index even when a data file is damaged (that is when one wants to look), then
     * report the damage and exit 1. */
    ckpt_reader *r = NULL;
    if ((rc = cli_open(cmd, argv[0], &r, 1)) != 0)
        return rc;
    rc = json ? inspect_json(cmd, r) : inspect_text(cmd, r, argv[0]);
    ckpt_reader_free(r);
    r = NULL;
    if (rc == EXIT_OK && (rc = cli_open(cmd, argv[0], &r, 0)) == 0) {
        /* Metadata only (no values read): each piece's dataset is found and stored the way the
         * format writes it, e.g. not in external storage that points outside the checkpoint. */
        inspect_state st = {cmd, 0};
        int crc = ckpt_reader_check(r, inspect_report, &st);
        if (crc != CKPT_OK)
            rc = st.bad ? EXIT_BAD : cli_lib_error(cmd, crc);
        ckpt_reader_free(r);
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* verify                                                                                     */

typedef struct verify_state {
    const char *prefix;
    size_t bad; /* pieces reported bad */
} verify_state;

/* ckpt_verify_cb: one stderr line per bad piece; keeps going to list them all. */
static int verify_report(const char *tensor, size_t piece, const char *file, int code,
                         const char *message, void *payload)
{
    verify_state *st = payload;
    st->bad++;
    fprintf(stderr, "mpickpt: verify: %s: tensor \"", st->prefix);
    text_name(stderr, tensor);
    fprintf(stderr, "\" piece %zu (%s): %s\n", piece, file ? file : "?",
            message && message[0] ? message : ckpt_strerror(code));
    return 0;
}

/* Verifies one checkpoint and prints its ok/BAD line. Returns 1 when it is good, else 0. */
static int verify_prefix(const cli_command *cmd, const char *arg)
{
    char *prefix = cli_prefix(arg);
    if (!prefix) {
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        return 0;
    }
    ckpt_reader *r = NULL;
    int good = 0;
    int rc = ckpt_reader_open(&r, prefix);
    if (rc != CKPT_OK) {
        cli_lib_error(cmd, rc);
        printf("%s: BAD (%s)\n", prefix, ckpt_strerror(rc));
        goto out;
    }

    size_t n = ckpt_reader_num_tensors(r), all_pieces = 0;
    uint64_t all_bytes = 0;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        size_t pieces;
        uint64_t bytes;
        rc = tensor_totals(r, i, &pieces, &bytes);
        all_pieces += pieces;
        all_bytes += bytes;
    }
    verify_state st = {prefix, 0};
    if (rc == CKPT_OK)
        rc = ckpt_reader_verify(r, verify_report, &st);
    if (rc == CKPT_OK) {
        printf("%s: ok (%zu tensors, %zu pieces, %" PRIu64 " bytes)\n", prefix, n, all_pieces,
               all_bytes);
        good = 1;
    } else {
        /* A failure that no piece report explains (I/O error, out of memory, ...) still needs
         * its cause shown. */
        if (st.bad == 0 || rc != CKPT_ECORRUPT)
            cli_lib_error(cmd, rc);
        if (st.bad)
            printf("%s: BAD (%zu of %zu pieces failed)\n", prefix, st.bad, all_pieces);
        else
            printf("%s: BAD (%s)\n", prefix, ckpt_strerror(rc));
    }
out:
    ckpt_reader_free(r);
    free(prefix);
    return good;
}

/* Appends dir/name minus ".index" to *list when it is a regular file. Returns 0, or -1 after
 * printing why. */
static int add_checkpoint(const cli_command *cmd, const char *dir, const char *name,
                          char ***list, size_t *count)
{
    struct stat sb;
    char *path = path_join(dir, name);
    if (path && (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        free(path); /* vanished, or a directory named *.index: not a checkpoint */
        return 0;
    }
    char **grown = path ? realloc(*list, (*count + 1) * sizeof **list) : NULL;
    if (!grown) {
        free(path);
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        return -1;
    }
    path[strlen(path) - strlen(".index")] = '\0';
    *list = grown;
    (*list)[(*count)++] = path;
    return 0;
}

/* Appends the committed checkpoints (regular files "*.index") directly in dir to *list as
 * malloc'd prefixes, in version order (ckpt-2 before ckpt-10). A missing dir adds nothing when
 * `optional`. Returns 0, or -1 after printing why. */
static int find_checkpoints(const cli_command *cmd, const char *dir, int optional, char ***list,
                            size_t *count)
{
    static const char suffix[] = ".index";
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, versionsort);
    if (n < 0) {
        if (optional && (errno == ENOENT || errno == ENOTDIR))
            return 0;
        fprintf(stderr, "mpickpt: %s: cannot read directory %s: %s\n", cmd->name, dir,
                strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        size_t len = strlen(name);
        if (rc == 0 && len > sizeof suffix - 1 &&
            strcmp(name + len - (sizeof suffix - 1), suffix) == 0)
            rc = add_checkpoint(cmd, dir, name, list, count);
        free(ents[i]);
    }
    free(ents);
    return rc;
}

/* Verifies every checkpoint of a directory (and of its chief/ subdirectory, where the manager
 * puts them). Returns 1 when there is at least one and all are good, else 0. */
static int verify_dir(const cli_command *cmd, const char *dir)
{
    char **list = NULL;
    size_t count = 0;
    int good = 0;
    char *chief = path_join(dir, "chief");
    if (!chief) {
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        return 0;
    }
    if (find_checkpoints(cmd, dir, 0, &list, &count) == 0 &&
        find_checkpoints(cmd, chief, 1, &list, &count) == 0) {
        good = 1;
        if (count == 0) {
            /* Almost always a wrong path or a job that never saved; not a success. */
            fprintf(stderr, "mpickpt: %s: %s: no checkpoints (*.index) found\n", cmd->name, dir);
            good = 0;
        }
        for (size_t i = 0; i < count; i++)
            good &= verify_prefix(cmd, list[i]);
    }
    for (size_t i = 0; i < count; i++)
        free(list[i]);
    free(list);
    free(chief);
    return good;
}

/* A directory argument is a DIR unless "<arg>.index" exists (a prefix that is also a directory
 * name stays a prefix). */
static int is_checkpoint_dir(const char *arg)
{
    struct stat sb;
    if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return 0;
    size_t len = strlen(arg);
    char *index = malloc(len + 7);
    if (!index)
        return 1;
    memcpy(index, arg, len);
    memcpy(index + len, ".index", 7);
    int prefix_exists = stat(index, &sb) == 0;
    free(index);
    return !prefix_exists;
}

static int cmd_verify(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0;
    int rc = cli_parse(cmd, argc, argv, NULL, 0, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops < 1)
        return cli_usage_error(cmd, "missing PREFIX or DIR");

    int good = 1;
    for (int i = 0; i < nops; i++)
        good &= is_checkpoint_dir(argv[i]) ? verify_dir(cmd, argv[i]) : verify_prefix(cmd, argv[i]);
    return good ? EXIT_OK : EXIT_BAD;
}

/* ---------------------------------------------------------------------------------------- */
/* dump                                                                                       */

/* IEEE 754 binary16 -> binary32, exact for every input: subnormals are renormalized, infinities
 * and NaNs keep their sign (and NaN payload bits). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* 0.mant * 2^-14: shift the leading one up to the implicit bit, one exponent each. */
        uint32_t e = 127 - 14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 is the upper half of a binary32, so widening is exact for all inputs. */
static float bfloat16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* One element, widened to a type printf can show exactly. */
typedef struct value {
    enum { VAL_INT, VAL_UINT, VAL_FLOAT, VAL_BOOL } kind;
    int digits; /* significant digits of a float: enough to round-trip its source type */
    int64_t i;
    uint64_t u;
    double d;
} value;

/* Loads element p of a dense buffer (memcpy: the buffer has no alignment guarantee per type). */
static value load_value(ckpt_dtype dtype, const unsigned char *p)
{
    value v = {VAL_INT, 9, 0, 0, 0.0};
    switch (dtype) {
    case CKPT_FLOAT16:
    case CKPT_BFLOAT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v.kind = VAL_FLOAT;
        v.d = dtype == CKPT_FLOAT16 ? half_to_float(x) : bfloat16_to_float(x);
        break;
    }
    case CKPT_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        v.kind = VAL_FLOAT;
        v.d = x;
        break;
    }
    case CKPT_FLOAT64:
        memcpy(&v.d, p, 8);
        v.kind = VAL_FLOAT;
        v.digits = 17;
        break;
    case CKPT_INT8: { int8_t x; memcpy(&x, p, 1); v.i = x; break; }
    case CKPT_INT16: { int16_t x; memcpy(&x, p, 2); v.i = x; break; }
    case CKPT_INT32: { int32_t x; memcpy(&x, p, 4); v.i = x; break; }
    case CKPT_INT64: memcpy(&v.i, p, 8); break;
    case CKPT_UINT8: v.kind = VAL_UINT; v.u = p[0]; break;
    case CKPT_UINT16: { uint16_t x; memcpy(&x, p, 2); v.kind = VAL_UINT; v.u = x; break; }
    case CKPT_UINT32: { uint32_t x; memcpy(&x, p, 4); v.kind = VAL_UINT; v.u = x; break; }
    case CKPT_UINT64: memcpy(&v.u, p, 8); v.kind = VAL_UINT; break;
    case CKPT_BOOL: v.kind = VAL_BOOL; v.i = p[0] != 0; break;
    default: break;
    }
    return v;
}

static void json_value(ckpt__json_writer *w, value v)
{
    switch (v.kind) {
    case VAL_INT: ckpt__json_int(w, v.i); break;
    case VAL_UINT: ckpt__json_uint(w, v.u); break;
    case VAL_BOOL: ckpt__json_bool(w, (int)v.i); break;
    case VAL_FLOAT: ckpt__json_double(w, v.d, v.digits); break;
    }
}

static void text_value(FILE *out, value v)
{
    switch (v.kind) {
    case VAL_INT: fprintf(out, "%" PRId64, v.i); break;
    case VAL_UINT: fprintf(out, "%" PRIu64, v.u); break;
    case VAL_BOOL: fputs(v.i ? "true" : "false", out); break;
    case VAL_FLOAT:
        if (isnan(v.d))
            fputs("nan", out);
        else if (isinf(v.d))
            fputs(v.d > 0 ? "inf" : "-inf", out);
        else
            fprintf(out, "%.*g", v.digits, v.d);
        break;
    }
}

/* Parses --slice against the tensor's shape: a full TensorFlow spec (it has a space between the
 * shape and the extents; the shape must be the tensor's) or only the extents. Returns 0 or
 * EXIT_USAGE after printing why. */
static int dump_parse_slice(const cli_command *cmd, const char *spec, const ckpt_shape *shape,
                            ckpt_slice *slice)
{
    int rc;
    if (strchr(spec, ' ')) {
        ckpt_shape spec_shape;
        rc = ckpt_slice_spec_parse(&spec_shape, slice, spec);
        if (rc == CKPT_OK && !ckpt_shape_equal(&spec_shape, shape)) {
            char want[CKPT_MAX_DIMS * 24 + 8], got[CKPT_MAX_DIMS * 24 + 8];
            format_dims(want, sizeof want, shape->ndims, shape->dims);
            format_dims(got, sizeof got, spec_shape.ndims, spec_shape.dims);
            fprintf(stderr, "mpickpt: %s: --slice '%s' is for shape %s, the tensor's is %s\n",
                    cmd->name, spec, got, want);
            return EXIT_USAGE;
        }
    } else {
        rc = ckpt_slice_parse_extent(slice, shape, spec);
    }
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        fprintf(stderr, "mpickpt: %s: bad --slice '%s': %s\n", cmd->name, spec,
                e && e->message ? e->message : ckpt_strerror(rc));
        return EXIT_USAGE;
    }
    return 0;
}

/* Prints the dumped values: JSON, or a header line then one line per innermost row. */
static void dump_print(int json, const char *name, ckpt_dtype dtype, const ckpt_slice *slice,
                       const char *spec_text, const unsigned char *buf, int64_t count)
{
    size_t esize = ckpt_dtype_size(dtype);
    if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "name");
        ckpt__json_string(&w, name);
        ckpt__json_key(&w, "dtype");
        ckpt__json_string(&w, ckpt_dtype_name(dtype));
        ckpt__json_key(&w, "shape");
        json_dims(&w, slice->ndims, slice->count);
        ckpt__json_key(&w, "values");
        ckpt__json_array_begin(&w);
        for (int64_t k = 0; k < count; k++)
            json_value(&w, load_value(dtype, buf + (size_t)k * esize));
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
        return;
    }
    char shape[CKPT_MAX_DIMS * 24 + 8];
    format_dims(shape, sizeof shape, slice->ndims, slice->count);
    text_name(stdout, name);
    printf(": %s %s", ckpt_dtype_name(dtype), shape);
    if (spec_text)
        printf(" (slice \"%s\")", spec_text);
    fputc('\n', stdout);
    int64_t row = slice->ndims ? slice->count[slice->ndims - 1] : 1;
    for (int64_t k = 0; k < count; k++) {
        text_value(stdout, load_value(dtype, buf + (size_t)k * esize));
        fputc((k + 1) % row == 0 ? '\n' : ' ', stdout);
    }
}

/* Reads tensor `name` (or the block `spec` selects) and prints it. Returns the exit code. */
static int dump_tensor(const cli_command *cmd, ckpt_reader *r, const char *name, const char *spec,
                       int json)
{
    size_t index;
    ckpt_tensor_info t;
    ckpt_slice slice;
    int64_t count;
    char spec_text[1024]; /* 16 dims of "N " plus "start,length:" fit */
    int rc;
    if ((rc = ckpt_reader_find(&index, r, name)) != CKPT_OK ||
        (rc = ckpt_reader_tensor(&t, r, index)) != CKPT_OK)
        return cli_lib_error(cmd, rc);
    if (spec) {
        if ((rc = dump_parse_slice(cmd, spec, &t.shape, &slice)) != 0)
            return rc;
        if (ckpt_slice_spec_format(spec_text, sizeof spec_text, &t.shape, &slice) != CKPT_OK)
            snprintf(spec_text, sizeof spec_text, "%s", spec);
    } else {
        ckpt_slice_full(&slice, &t.shape);
    }
    if ((rc = ckpt_slice_num_elements(&count, &slice)) != CKPT_OK)
        return cli_lib_error(cmd, rc);
    size_t esize = ckpt_dtype_size(t.dtype);
    if (esize == 0 || (uint64_t)count > SIZE_MAX / esize) {
        fprintf(stderr, "mpickpt: %s: tensor \"%s\" (%s) cannot be held in memory\n", cmd->name,
                name, ckpt_dtype_name(t.dtype));
        return EXIT_BAD;
    }
    size_t bytes = (size_t)count * esize;
    unsigned char *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        fprintf(stderr, "mpickpt: %s: out of memory for %zu bytes\n", cmd->name, bytes);
        return EXIT_BAD;
    }
    rc = ckpt_reader_read(r, name, t.dtype, spec ? &slice : NULL, buf, bytes);
    if (rc == CKPT_OK)
        dump_print(json, name, t.dtype, &slice, spec ? spec_text : NULL, buf, count);
    else
        cli_lib_error(cmd, rc);
    free(buf);
    return rc == CKPT_OK ? EXIT_OK : EXIT_BAD;
}

static int cmd_dump(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const char *spec = NULL;
    const cli_option opts[] = {{"--json", &json, NULL}, {"--slice", NULL, &spec}};
    int rc = cli_parse(cmd, argc, argv, opts, 2, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops != 2)
        return cli_usage_error(cmd, "%s", nops < 2 ? "expected PREFIX and NAME" :
                                                     "too many arguments");
    ckpt_reader *r = NULL;
    if ((rc = cli_open(cmd, argv[0], &r, 0)) != 0)
        return rc;
    rc = dump_tensor(cmd, r, argv[1], spec, json);
    ckpt_reader_free(r);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Directory helpers (list, gc)                                                               */

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Whether dir directly holds a regular file "*.index" (a committed checkpoint, or a damaged
 * one). An unreadable dir holds none. */
static int has_index_files(const char *dir)
{
    static const char suffix[] = ".index";
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= sizeof suffix - 1 || strcmp(e->d_name + len - (sizeof suffix - 1), suffix) != 0)
            continue;
        char *path = path_join(dir, e->d_name);
        struct stat sb;
        found = path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
        free(path);
    }
    closedir(d);
    return found;
}

/* A malloc'd copy of a DIR operand without trailing slashes ("run/" -> "run"; "/" stays), so
 * that joined paths read "run/ckpt-1" and the library sees "run/chief" as a chief directory.
 * NULL when out of memory. */
static char *dir_operand(const char *arg)
{
    size_t len = strlen(arg);
    while (len > 1 && arg[len - 1] == '/')
        len--;
    char *p = malloc(len + 1);
    if (p) {
        memcpy(p, arg, len);
        p[len] = '\0';
    }
    return p;
}

/* Whether dir/name exists (any type). */
static int has_entry(const char *dir, const char *name)
{
    struct stat sb;
    char *path = path_join(dir, name);
    int found = path && stat(path, &sb) == 0;
    free(path);
    return found;
}

/* Checks that a DIR operand is an existing directory; prints why not. Returns 0 or EXIT_BAD. */
static int cli_check_dir(const cli_command *cmd, const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        fprintf(stderr, "mpickpt: %s: cannot access directory %s: %s\n", cmd->name, dir,
                strerror(errno));
        return EXIT_BAD;
    }
    if (!S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "mpickpt: %s: %s is not a directory\n", cmd->name, dir);
        return EXIT_BAD;
    }
    return 0;
}

/* The options of a command that takes one flag and one DIR operand (moved to argv[0]); with
 * `must_be_dir`, the operand must be an existing directory. Returns -1 to go on, else the exit
 * status the command returns (EXIT_OK after --help). */
static int cli_parse_dir(const cli_command *cmd, int argc, char **argv, const char *flag,
                         int *flag_set, int must_be_dir)
{
    int nops = 0;
    const cli_option opts[] = {{flag, flag_set, NULL}};
    int rc = cli_parse(cmd, argc, argv, opts, 1, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops != 1)
        return cli_usage_error(cmd, "%s", nops ? "expected one DIR" : "missing DIR");
    if (must_be_dir && (rc = cli_check_dir(cmd, argv[0])) != 0)
        return rc;
    return -1;
}

/* The directory `list` reads for a DIR operand (malloc'd, NULL when out of memory): DIR itself
 * when it has a state file, else DIR/chief when that has a state file, or has checkpoints while
 * DIR has none (a training state's backup directory), else DIR. */
static char *list_dir(const char *dir)
{
    char *chief = path_join(dir, "chief");
    if (!chief)
        return NULL;
    if (!has_entry(dir, "checkpoint") && is_dir(chief) &&
        (has_entry(chief, "checkpoint") || (has_index_files(chief) && !has_index_files(dir))))
        return chief;
    free(chief);
    return path_join("", dir);
}

/* The path of a state-file name: relative names are joined to dir, absolute ones kept. */
static char *state_path(const char *dir, const char *name)
{
    return name[0] == '/' ? path_join("", name) : path_join(dir, name);
}

/* ---------------------------------------------------------------------------------------- */
/* list                                                                                       */

/* "2025-11-21 12:00:00" (UTC) into buf, or the raw number when the time is not representable. */
static void format_utc(char *buf, size_t size, double timestamp)
{
    struct tm tm;
    /* Range check first: converting a NaN or huge double to time_t is undefined. */
    time_t secs = isfinite(timestamp) && fabs(timestamp) < 1e15 ? (time_t)timestamp : 0;
    if (!(secs && gmtime_r(&secs, &tm) && strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) > 0))
        snprintf(buf, size, "%.17g", timestamp);
}

static int list_print(const ckpt_state *st, char **paths, const uint64_t *bytes,
                      const char *latest, int json)
{
    if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "latest");
        if (latest)
            ckpt__json_string(&w, latest);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "checkpoints");
        ckpt__json_array_begin(&w);
        for (size_t i = 0; i < st->num_entries; i++) {
            const ckpt_state_entry *e = &st->entries[i];
            ckpt__json_object_begin(&w);
            ckpt__json_key(&w, "prefix");
            ckpt__json_string(&w, paths[i]);
            ckpt__json_key(&w, "save_counter");
            ckpt__json_int(&w, e->save_counter);
            ckpt__json_key(&w, "epoch");
            ckpt__json_int(&w, e->epoch);
            ckpt__json_key(&w, "step");
            ckpt__json_int(&w, e->step);
            ckpt__json_key(&w, "timestamp");
            ckpt__json_real(&w, e->timestamp);
            ckpt__json_key(&w, "bytes");
            ckpt__json_uint(&w, bytes[i]);
            ckpt__json_key(&w, "end_of_epoch");
            ckpt__json_bool(&w, e->end_of_epoch != 0);
            ckpt__json_object_end(&w);
        }
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
        return EXIT_OK;
    }

    if (st->num_entries == 0) {
        printf("no checkpoints\n");
        return EXIT_OK;
    }
    int prefix_w = 6;
    for (size_t i = 0; i < st->num_entries; i++) {
        int tw = text_width(paths[i]);
        prefix_w = tw > prefix_w ? tw : prefix_w;
    }
    printf("  %-*s  %7s  %6s  %9s  %-9s  %-19s  %12s\n", prefix_w, "PREFIX", "COUNTER", "EPOCH",
           "STEP", "SAVED AT", "TIME (UTC)", "BYTES");
    for (size_t i = 0; i < st->num_entries; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        char when[64];
        format_utc(when, sizeof when, e->timestamp);
        int is_latest = latest && strcmp(latest, paths[i]) == 0;
        printf("%c ", is_latest ? '*' : ' ');
        text_name(stdout, paths[i]);
        int pad = prefix_w - text_width(paths[i]);
        printf("%*s  %7" PRId64 "  %6" PRId64 "  %9" PRId64 "  %-9s  %-19s  %12" PRIu64 "%s\n",
               pad > 0 ? pad : 0, "", e->save_counter, e->epoch, e->step,
               e->end_of_epoch ? "epoch end" : "mid-epoch", when, bytes[i],
               is_latest ? "  (latest)" : "");
    }
    if (latest) {
        printf("latest: ");
        text_name(stdout, latest);
        fputc('\n', stdout);
    } else {
        printf("latest: none\n");
    }
    return EXIT_OK;
}

/* Reads the state of dir, falling back to a scan (with a warning) when the state file is
 * missing or damaged. Returns 0 or EXIT_BAD after printing why. */
static int list_read_state(const cli_command *cmd, const char *dir, ckpt_state **out)
{
    ckpt_state *st = NULL;
    int rc = ckpt_state_read(&st, dir);
    if (rc == CKPT_OK) {
        *out = st;
        return 0;
    }
    /* Keep the cause: the scan replaces the thread's last error. */
    char why[1024];
    const ckpt_error *e = ckpt_error_last();
    snprintf(why, sizeof why, "%s", e && e->message && e->message[0] ? e->message :
                                                                      ckpt_strerror(rc));
    ckpt_state_free(st);
    st = NULL;
    int src = ckpt_state_scan(&st, dir);
    if (src != CKPT_OK) {
        ckpt_state_free(st);
        return cli_lib_error(cmd, src);
    }
    if (st->num_entries == 0) {
        ckpt_state_free(st);
        if (rc == CKPT_ENOTFOUND)
            fprintf(stderr, "mpickpt: %s: %s: no state file (checkpoint) and no checkpoints "
                            "(*.index)\n", cmd->name, dir);
        else
            fprintf(stderr, "mpickpt: %s: %s: the state file is unreadable (%s) and no "
                            "checkpoints (*.index) were found\n", cmd->name, dir, why);
        return EXIT_BAD;
    }
    if (rc == CKPT_ENOTFOUND)
        fprintf(stderr, "mpickpt: %s: warning: %s has no state file (checkpoint); listing the "
                        "checkpoints found by scanning\n", cmd->name, dir);
    else
        fprintf(stderr, "mpickpt: %s: warning: cannot use the state file of %s (%s); listing the "
                        "checkpoints found by scanning\n", cmd->name, dir, why);
    *out = st;
    return 0;
}

static int cmd_list(const cli_command *cmd, int argc, char **argv)
{
    int json = 0;
    int rc = cli_parse_dir(cmd, argc, argv, "--json", &json, 1);
    if (rc >= 0)
        return rc;

    char *arg = dir_operand(argv[0]);
    char *dir = arg ? list_dir(arg) : NULL;
    ckpt_state *st = NULL;
    char **paths = NULL;
    uint64_t *bytes = NULL;
    char *latest = NULL;
    free(arg);
    if (!dir) {
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        return EXIT_BAD;
    }
    if ((rc = list_read_state(cmd, dir, &st)) != 0)
        goto out;

    size_t n = st->num_entries;
    paths = calloc(n ? n : 1, sizeof *paths);
    bytes = calloc(n ? n : 1, sizeof *bytes);
    if (!paths || !bytes)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        const ckpt_state_entry *e = &st->entries[i];
        if (!(paths[i] = state_path(dir, e->prefix)))
            goto oom;
        /* The sizes on disk now; the state file's record when the checkpoint cannot be read. */
        bytes[i] = e->bytes;
        int brc = ckpt_checkpoint_bytes(&bytes[i], paths[i]);
        if (brc != CKPT_OK) {
            const ckpt_error *err = ckpt_error_last();
            bytes[i] = e->bytes;
            fprintf(stderr, "mpickpt: %s: warning: %s is in the state file but cannot be read: "
                            "%s\n", cmd->name, paths[i],
                    err && err->message && err->message[0] ? err->message : ckpt_strerror(brc));
        }
    }
    if (st->latest[0]) {
        if (!(latest = state_path(dir, st->latest)))
            goto oom;
    } else if (n > 0) {
        /* A scan may leave latest empty: the newest is the last entry. */
        if (!(latest = path_join("", paths[n - 1])))
            goto oom;
    }
    rc = list_print(st, paths, bytes, latest, json);
    goto out;
oom:
    fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
    rc = EXIT_BAD;
out:
    if (paths)
        for (size_t i = 0; i < st->num_entries; i++)
            free(paths[i]);
    free(paths);
    free(bytes);
    free(latest);
    ckpt_state_free(st);
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* gc                                                                                         */

typedef struct gc_report_state {
    int dry_run;
    char **seen; /* canonical paths reported so far: DIR and DIR/chief share workertemp_* */
    size_t count;
    int oom;
} gc_report_state;

/* The real path of path's parent joined with its base name (the path itself may be gone),
 * or a copy of path when the parent cannot be resolved. malloc'd; NULL when out of memory. */
static char *canonical_path(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 1;
    char *parent = malloc(plen + 1);
    if (!parent)
        return NULL;
    if (slash)
        memcpy(parent, path, plen);
    else
        parent[0] = '.';
    parent[plen] = '\0';
    if (plen == 0) /* "/name" */
        strcpy(parent, "/");
    char *real = realpath(parent, NULL);
    free(parent);
    char *out = real ? path_join(real, slash ? slash + 1 : path) : path_join("", path);
    free(real);
    return out;
}

/* ckpt_gc_cb: one stdout line per path, each path once. */
static void gc_report(const char *path, const char *why, void *payload)
{
    gc_report_state *st = payload;
    char *canon = canonical_path(path);
    if (!canon) {
        st->oom = 1;
        return;
    }
    for (size_t i = 0; i < st->count; i++) {
        if (strcmp(st->seen[i], canon) == 0) {
            free(canon);
            return;
        }
    }
    char **grown = realloc(st->seen, (st->count + 1) * sizeof *grown);
    if (!grown) {
        free(canon);
        st->oom = 1;
        return;
    }
    st->seen = grown;
    st->seen[st->count++] = canon;
    printf("%s ", st->dry_run ? "would remove" : "removed");
    text_name(stdout, path);
    if (why && why[0]) {
        printf(" (");
        text_name(stdout, why);
        printf(")");
    }
    fputc('\n', stdout);
}

static int cmd_gc(const cli_command *cmd, int argc, char **argv)
{
    int dry_run = 0;
    int rc = cli_parse_dir(cmd, argc, argv, "--dry-run", &dry_run, 1);
    if (rc >= 0)
        return rc;
    char *dir = dir_operand(argv[0]);
    char *chief = dir ? path_join(dir, "chief") : NULL;
    if (!chief) {
        free(dir);
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        return EXIT_BAD;
    }

    gc_report_state st = {dry_run, NULL, 0, 0};
    rc = ckpt_gc(dir, dry_run, gc_report, &st, NULL);
    if (rc == CKPT_OK && is_dir(chief))
        rc = ckpt_gc(chief, dry_run, gc_report, &st, NULL);
    if (rc != CKPT_OK)
        cli_lib_error(cmd, rc);
    else if (st.oom)
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
    printf("gc ");
    text_name(stdout, dir);
    printf(": %s %zu path(s)%s\n", dry_run ? "would remove" : "removed", st.count,
           rc != CKPT_OK ? " before failing" : "");
    for (size_t i = 0; i < st.count; i++)
        free(st.seen[i]);
    free(st.seen);
    free(chief);
    free(dir);
    return rc == CKPT_OK && !st.oom ? EXIT_OK : EXIT_BAD;
}

/* ---------------------------------------------------------------------------------------- */
/* diff                                                                                       */

enum { DIFF_DTYPE, DIFF_SHAPE, DIFF_VALUES };

/* Out of memory in the tool itself (no library error is recorded); not a ckpt_status. */
enum { DIFF_ENOMEM = -1000 };

static const char *const diff_reason_names[] = {"dtype", "shape", "values"};

/* A tensor in both checkpoints that differs. */
typedef struct diff_change {
    const char *name; /* lives as long as reader A */
    int reason;
    ckpt_tensor_info a, b;
    uint64_t differing; /* DIFF_VALUES: elements whose bytes differ */
    int64_t first;      /* DIFF_VALUES: flat row-major index of the first */
} diff_change;

typedef struct diff_result {
    const char **only_a, **only_b;
    size_t n_only_a, n_only_b;
    diff_change *changed;
    size_t n_changed;
} diff_result;

static int push_name(const char ***list, size_t *n, const char *name)
{
    const char **grown = realloc(*list, (*n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    grown[(*n)++] = name;
    *list = grown;
    return 0;
}

static int push_change(diff_result *res, const diff_change *c)
{
    diff_change *grown = realloc(res->changed, (res->n_changed + 1) * sizeof *grown);
    if (!grown)
        return -1;
    grown[res->n_changed++] = *c;
    res->changed = grown;
    return 0;
}

/* Bytes of the largest stored piece of tensor i. */
static uint64_t largest_piece(const ckpt_reader *r, size_t i, size_t num_pieces)
{
    uint64_t most = 0;
    for (size_t j = 0; j < num_pieces; j++) {
        ckpt_piece_info p;
        if (ckpt_reader_piece(&p, r, i, j) == CKPT_OK && p.bytes > most)
            most = p.bytes;
    }
    return most;
}

/*
 * Compares the values of a tensor that has the same dtype and shape in both checkpoints, a block
 * at a time: each block is a slice that is contiguous in row-major order (single indices in the
 * outer dimensions, a run of one dimension, the inner dimensions whole), so its elements are the
 * flat range [base, base + count). A block holds about block_bytes, but never less than the
 * largest stored piece of the tensor: the reader reads (and checksums) every piece a slice
 * overlaps whole, so smaller blocks would only re-read the same pieces.
 * Returns a ckpt_status (the library's error is set) or DIFF_ENOMEM.
 */
static int diff_values(ckpt_reader *ra, ckpt_reader *rb, size_t ia, size_t ib,
                       const ckpt_tensor_info *t, uint64_t block_bytes, uint64_t *differing,
                       int64_t *first)
{
    *differing = 0;
    *first = -1;
    int64_t n;
    int rc = ckpt_shape_num_elements(&n, &t->shape);
    if (rc != CKPT_OK || n == 0)
        return rc;
    size_t esize = ckpt_dtype_size(t->dtype);
    ckpt_tensor_info tb;
    if ((rc = ckpt_reader_tensor(&tb, rb, ib)) != CKPT_OK)
        return rc;
    uint64_t block = block_bytes;
    uint64_t pa = largest_piece(ra, ia, t->num_pieces), pb = largest_piece(rb, ib, tb.num_pieces);
    block = pa > block ? pa : block;
    block = pb > block ? pb : block;
    int64_t block_elems = (int64_t)(block / esize > (uint64_t)INT64_MAX ? INT64_MAX :
                                                                          block / esize);
    if (block_elems < 1)
        block_elems = 1;

    /* k: the dimension split into runs; inner: elements of one index of k. */
    int nd = t->shape.ndims;
    const int64_t *dims = t->shape.dims;
    int k = nd > 0 ? nd - 1 : 0;
    int64_t inner = 1;
    while (k > 0 && dims[k] <= block_elems / inner) {
        inner *= dims[k];
        k--;
    }
    int64_t run = nd > 0 ? block_elems / inner : 1;
    if (nd > 0 && run > dims[k])
        run = dims[k];
    if (run < 1)
        run = 1;
    if ((uint64_t)(run * inner) > SIZE_MAX / esize)
        return DIFF_ENOMEM;
    size_t cap = (size_t)(run * inner) * esize;
    unsigned char *ba = malloc(cap), *bb = malloc(cap);
    if (!ba || !bb) {
        free(ba);
        free(bb);
        return DIFF_ENOMEM;
    }

    int64_t coords[CKPT_MAX_DIMS] = {0}; /* indices of dimensions < k, and the run start at k */
    int64_t base = 0;                    /* flat index of the block's first element */
    for (;;) {
        ckpt_slice s;
        int64_t start[CKPT_MAX_DIMS], count[CKPT_MAX_DIMS];
        int64_t len = nd > 0 ? (dims[k] - coords[k] < run ? dims[k] - coords[k] : run) : 1;
        for (int d = 0; d < nd; d++) {
            start[d] = d <= k ? coords[d] : 0;
            count[d] = d < k ? 1 : d == k ? len : dims[d];
        }
        size_t bytes = (size_t)(len * inner) * esize;
        rc = nd > 0 ? ckpt_slice_init(&s, nd, start, count) : CKPT_OK;
        if (rc == CKPT_OK)
            rc = ckpt_reader_read(ra, t->name, t->dtype, nd > 0 ? &s : NULL, ba, bytes);
        if (rc == CKPT_OK)
            rc = ckpt_reader_read(rb, t->name, t->dtype, nd > 0 ? &s : NULL, bb, bytes);
        if (rc != CKPT_OK)
            break;
        if (memcmp(ba, bb, bytes) != 0) {
            for (int64_t e = 0; e < len * inner; e++) {
                if (memcmp(ba + (size_t)e * esize, bb + (size_t)e * esize, esize) != 0) {
                    if (*differing == 0)
                        *first = base + e;
                    (*differing)++;
                }
            }
        }
        base += len * inner;
        /* Next block: advance the run, then the outer indices like an odometer. */
        if (nd == 0)
            break;
        coords[k] += len;
        int d = k;
        while (d > 0 && coords[d] >= dims[d]) {
            coords[d] = 0;
            coords[--d]++;
        }
        if (coords[0] >= dims[0])
            break;
    }
    free(ba);
    free(bb);
    return rc;
}

static void json_tensor_side(ckpt__json_writer *w, const char *key, const ckpt_tensor_info *t)
{
    ckpt__json_key(w, key);
    ckpt__json_object_begin(w);
    ckpt__json_key(w, "dtype");
    ckpt__json_string(w, ckpt_dtype_name(t->dtype));
    ckpt__json_key(w, "shape");
    json_dims(w, t->shape.ndims, t->shape.dims);
    ckpt__json_object_end(w);
}

/* Header fields compared by diff. */
typedef struct diff_header_field {
    const char *name;
    int64_t a, b;
    const char *sa, *sb; /* layout names; NULL for numbers */
} diff_header_field;

static size_t diff_header(const ckpt_header *a, const ckpt_header *b, diff_header_field *out)
{
    size_t n = 0;
#define DIFF_FIELD(f)                                                                           \
    if (a->f != b->f)                                                                           \
        out[n++] = (diff_header_field){#f, (int64_t)a->f, (int64_t)b->f, NULL, NULL};
    DIFF_FIELD(save_counter)
    DIFF_FIELD(epoch)
    DIFF_FIELD(step)
    DIFF_FIELD(world_size)
#undef DIFF_FIELD
    if (a->layout != b->layout)
        out[n++] = (diff_header_field){"layout", a->layout, b->layout, ckpt_layout_name(a->layout),
                                       ckpt_layout_name(b->layout)};
    return n;
}

static void diff_print_json(const diff_result *res, const diff_header_field *hf, size_t nh,
                            int identical)
{
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, "identical");
    ckpt__json_bool(&w, identical);
    ckpt__json_key(&w, "only_in_a");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < res->n_only_a; i++)
        ckpt__json_string(&w, res->only_a[i]);
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "only_in_b");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < res->n_only_b; i++)
        ckpt__json_string(&w, res->only_b[i]);
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "changed");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < res->n_changed; i++) {
        const diff_change *c = &res->changed[i];
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "name");
        ckpt__json_string(&w, c->name);
        ckpt__json_key(&w, "reason");
        ckpt__json_string(&w, diff_reason_names[c->reason]);
        ckpt__json_key(&w, "differing_elements");
        if (c->reason == DIFF_VALUES)
            ckpt__json_uint(&w, c->differing);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "first_index");
        if (c->reason == DIFF_VALUES)
            ckpt__json_int(&w, c->first);
        else
            ckpt__json_null(&w);
        json_tensor_side(&w, "a", &c->a);
        json_tensor_side(&w, "b", &c->b);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "header");
    ckpt__json_object_begin(&w);
    for (size_t i = 0; i < nh; i++) {
        ckpt__json_key(&w, hf[i].name);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "a");
        if (hf[i].sa)
            ckpt__json_string(&w, hf[i].sa);
        else
            ckpt__json_int(&w, hf[i].a);
        ckpt__json_key(&w, "b");
        if (hf[i].sb)
            ckpt__json_string(&w, hf[i].sb);
        else
            ckpt__json_int(&w, hf[i].b);
        ckpt__json_object_end(&w);
    }
    ckpt__json_object_end(&w);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
}

static void text_tensor(FILE *out, const ckpt_tensor_info *t)
{
    char shape[CKPT_MAX_DIMS * 24 + 8];
    format_dims(shape, sizeof shape, t->shape.ndims, t->shape.dims);
    fprintf(out, "%s %s", ckpt_dtype_name(t->dtype), shape);
}

static void diff_print_text(const char *a, const char *b, const ckpt_reader *ra,
                            const ckpt_reader *rb, const diff_result *res,
                            const diff_header_field *hf, size_t nh, int identical)
{
    printf("A: ");
    text_name(stdout, a);
    printf("\nB: ");
    text_name(stdout, b);
    fputc('\n', stdout);
    for (size_t i = 0; i < nh; i++) {
        printf("header %s: ", hf[i].name);
        if (hf[i].sa)
            printf("%s (A) vs %s (B)\n", hf[i].sa, hf[i].sb);
        else
            printf("%" PRId64 " (A) vs %" PRId64 " (B)\n", hf[i].a, hf[i].b);
    }
    for (int side = 0; side < 2; side++) {
        const ckpt_reader *r = side ? rb : ra;
        const char **names = side ? res->only_b : res->only_a;
        size_t n = side ? res->n_only_b : res->n_only_a;
        for (size_t i = 0; i < n; i++) {
            ckpt_tensor_info t;
            size_t idx;
            printf("only in %c: ", side ? 'B' : 'A');
            text_name(stdout, names[i]);
            if (ckpt_reader_find(&idx, r, names[i]) == CKPT_OK &&
                ckpt_reader_tensor(&t, r, idx) == CKPT_OK) {
                printf(" (");
                text_tensor(stdout, &t);
                printf(")");
            }
            fputc('\n', stdout);
        }
    }
    for (size_t i = 0; i < res->n_changed; i++) {
        const diff_change *c = &res->changed[i];
        printf("%s differ: ", diff_reason_names[c->reason]);
        text_name(stdout, c->name);
        if (c->reason == DIFF_VALUES) {
            int64_t n = 0;
            ckpt_shape_num_elements(&n, &c->a.shape);
            printf(": %" PRIu64 " of %" PRId64 " elements, the first at flat index %" PRId64 "\n",
                   c->differing, n, c->first);
        } else {
            printf(": ");
            text_tensor(stdout, &c->a);
            printf(" (A) vs ");
            text_tensor(stdout, &c->b);
            printf(" (B)\n");
        }
    }
    if (identical)
        printf("identical data (%zu tensors%s)\n", ckpt_reader_num_tensors(ra),
               nh ? "; the headers differ" : "");
    else
        printf("data differ: %zu only in A, %zu only in B, %zu changed\n", res->n_only_a,
               res->n_only_b, res->n_changed);
}

/* Parses a byte count: digits with an optional K, M or G suffix (powers of 1024). */
static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    if (!(s[0] >= '0' && s[0] <= '9'))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*end != '\0' || v == 0 || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* Walks both tensor lists (sorted by name) and fills res. Returns a ckpt_status or
 * DIFF_ENOMEM. */
static int diff_tensors(ckpt_reader *ra, ckpt_reader *rb, uint64_t block_bytes, diff_result *res)
{
    size_t na = ckpt_reader_num_tensors(ra), nb = ckpt_reader_num_tensors(rb);
    size_t i = 0, j = 0;
    int rc = CKPT_OK;
    while (rc == CKPT_OK && (i < na || j < nb)) {
        ckpt_tensor_info ta, tb;
        if (i < na && (rc = ckpt_reader_tensor(&ta, ra, i)) != CKPT_OK)
            break;
        if (j < nb && (rc = ckpt_reader_tensor(&tb, rb, j)) != CKPT_OK)
            break;
        int cmp = i >= na ? 1 : j >= nb ? -1 : strcmp(ta.name, tb.name);
        if (cmp < 0) {
            if (push_name(&res->only_a, &res->n_only_a, ta.name) != 0)
                rc = DIFF_ENOMEM;
            i++;
            continue;
        }
        if (cmp > 0) {
            if (push_name(&res->only_b, &res->n_only_b, tb.name) != 0)
                rc = DIFF_ENOMEM;
            j++;
            continue;
        }
        diff_change c = {ta.name, DIFF_VALUES, ta, tb, 0, -1};
        if (ta.dtype != tb.dtype)
            c.reason = DIFF_DTYPE;
        else if (!ckpt_shape_equal(&ta.shape, &tb.shape))
            c.reason = DIFF_SHAPE;
        else
            rc = diff_values(ra, rb, i, j, &ta, block_bytes, &c.differing, &c.first);
        if (rc == CKPT_OK && (c.reason != DIFF_VALUES || c.differing > 0) &&
            push_change(res, &c) != 0)
            rc = DIFF_ENOMEM;
        i++;
        j++;
    }
    return rc;
}

static int cmd_diff(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const char *block_arg = NULL;
    const cli_option opts[] = {{"--json", &json, NULL}, {"--block-bytes", NULL, &block_arg}};
    int rc = cli_parse(cmd, argc, argv, opts, 2, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops != 2)
        return cli_usage_error(cmd, "%s", nops < 2 ? "expected two PREFIXes, A and B" :
                                                     "too many arguments");
    uint64_t block_bytes = UINT64_C(64) << 20;
    if (block_arg && parse_bytes(block_arg, &block_bytes) != 0)
        return cli_usage_error(cmd, "bad --block-bytes '%s' (a positive byte count, e.g. 4096, "
                                    "512K, 64M)", block_arg);

    ckpt_reader *ra = NULL, *rb = NULL;
    if ((rc = cli_open(cmd, argv[0], &ra, 0)) != 0)
        return rc;
    if ((rc = cli_open(cmd, argv[1], &rb, 0)) != 0) {
        ckpt_reader_free(ra);
        return rc;
    }
    diff_result res = {NULL, NULL, 0, 0, NULL, 0};
    diff_header_field hf[8];
    size_t nh = diff_header(ckpt_reader_header(ra), ckpt_reader_header(rb), hf);
    int lrc = diff_tensors(ra, rb, block_bytes, &res);
    if (lrc == DIFF_ENOMEM) {
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        rc = EXIT_BAD;
    } else if (lrc != CKPT_OK) {
        rc = cli_lib_error(cmd, lrc);
    } else {
        int identical = res.n_only_a == 0 && res.n_only_b == 0 && res.n_changed == 0;
        if (json)
            diff_print_json(&res, hf, nh, identical);
        else
            diff_print_text(argv[0], argv[1], ra, rb, &res, hf, nh, identical);
        rc = identical ? EXIT_OK : EXIT_BAD;
    }
    free(res.only_a);
    free(res.only_b);
    free(res.changed);
    ckpt_reader_free(ra);
    ckpt_reader_free(rb);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* stats                                                                                      */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
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
 * the tool (DESIGN §12). NULL after printing why. */
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
        if (!(*path = path_join("", arg)))
            fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        else if (!(f = fopen(arg, "r")))
            fprintf(stderr, "mpickpt: %s: cannot open %s: %s\n", cmd->name, arg,
                    strerror(errno));
        return f;
    }
    char *dir = dir_operand(arg);
    char *chief = dir ? path_join(dir, "chief") : NULL;
    if (!chief) {
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
        free(dir);
        return NULL;
    }
    int dfd = -1, cfd = -1, fd = -1;
    const char *name = "metrics.jsonl";
    int rc = ckpt__dir_open(&dfd, dir);
    if (rc == CKPT_OK && (rc = ckpt__file_open(&fd, NULL, dfd, name, O_RDONLY, dir)) ==
                             CKPT_ENOTFOUND) {
        name = "chief/metrics.jsonl";
        if ((rc = ckpt__subdir_open(&cfd, dfd, "chief", 0, dir)) == CKPT_OK)
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
    else if (!(*path = path_join(dir, name)) || !(f = fdopen(fd, "r")))
        fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
    if (!f) {
        ckpt__close(fd);
        free(*path);
        *path = NULL;
    }
    free(chief);
    free(dir);
    return f;
}

static void stats_print_text(const char *path, const ckpt__metrics_record *rows, size_t n,
                             size_t skipped, const double *summary)
{
    enum { PREFIX_CAP = 40 };
    int prefix_w = 6;
    for (size_t i = 0; i < n; i++) {
        int tw = text_width(rows[i].prefix);
        prefix_w = tw > prefix_w ? (tw < PREFIX_CAP ? tw : PREFIX_CAP) : prefix_w;
    }
    printf("metrics  ");
    text_name(stdout, path);
    printf(" (%zu save%s", n, n == 1 ? "" : "s");
    if (skipped)
        printf(", %zu malformed line%s skipped", skipped, skipped == 1 ? "" : "s");
    printf(")\n\n");
    printf("%-*s  %-5s  %10s  %10s  %9s  %9s  %9s  %9s  %8s  %12s\n", prefix_w, "PREFIX", "MODE",
           "MIB", "BLOCKING_S", "WRITE_S", "AGREE_S", "MERGE_S", "COMMIT_S", "GB/S",
           "SINCE_PREV_S");
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
        text_name(stdout, r->prefix);
        int pad = prefix_w - text_width(r->prefix);
        printf("%*s  %-5s  %10.2f  %10.4f  %9.4f  %9.4f  %9.4f  %9.4f  %8.3f  %12s\n",
               pad > 0 ? pad : 0, "", r->async ? "async" : "sync",
               (double)r->bytes / (1024.0 * 1024.0), r->blocking_s, r->write_s, r->agree_s,
               r->merge_s, r->commit_s, r->gbps, since);
    }
    printf("\nsaves                  %zu (%zu sync, %zu async), %.2f MiB in all\n", n, n - async,
           async, (double)bytes / (1024.0 * 1024.0));
    printf("blocking s             median %.4f  max %.4f\n", summary[0], summary[1]);
    printf("background s           median %.4f  max %.4f  (write + agree + merge + commit)\n",
           summary[2], summary[3]);
    printf("training time saved s  %.4f  (async saves: background time beyond blocking)\n",
           summary[4]);
}

static void stats_print_json(const char *path, const ckpt__metrics_record *rows, size_t n,
                             size_t skipped, const double *summary)
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
    ckpt__json_key(&w, "path");
    ckpt__json_string(&w, path);
    ckpt__json_key(&w, "saves");
    ckpt__json_uint(&w, n);
    ckpt__json_key(&w, "sync_saves");
    ckpt__json_uint(&w, n - async);
    ckpt__json_key(&w, "async_saves");
    ckpt__json_uint(&w, async);
    ckpt__json_key(&w, "skipped_lines");
    ckpt__json_uint(&w, skipped);
    ckpt__json_key(&w, "bytes");
    ckpt__json_uint(&w, bytes);
    static const char *const keys[] = {"blocking_s_median", "blocking_s_max",
                                       "background_s_median", "background_s_max",
                                       "training_time_saved_s"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        ckpt__json_key(&w, keys[i]);
        ckpt__json_double(&w, summary[i], 12);
    }
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
}

static int cmd_stats(const cli_command *cmd, int argc, char **argv)
{
    int json = 0;
    int rc = cli_parse_dir(cmd, argc, argv, "--json", &json, 0);
    if (rc >= 0)
        return rc;
    char *path;
    FILE *f = stats_open(cmd, argv[0], &path);
    if (!f)
        return EXIT_BAD;

    ckpt__metrics_record *rows = NULL;
    size_t n = 0, cap = 0, skipped = 0, lineno = 0;
    double *scratch = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    rc = EXIT_OK;
    errno = 0;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if (ckpt__metrics_line_blank(line, (size_t)len))
            continue;
        ckpt__metrics_record row;
        char why[128];
        int prc = ckpt__metrics_parse_line(&row, line, (size_t)len, why, sizeof why);
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
    if (ferror(f)) {
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

    /* blocking median/max, background median/max, training time saved */
    double summary[5] = {0, 0, 0, 0, 0};
    if (!(scratch = malloc(n * sizeof *scratch)))
        goto oom;
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
    if (json)
        stats_print_json(path, rows, n, skipped, summary);
    else
        stats_print_text(path, rows, n, skipped, summary);
    goto out;
oom:
    fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
    rc = EXIT_BAD;
out:
    for (size_t i = 0; i < n; i++)
        ckpt__metrics_record_clear(&rows[i]);
    free(rows);
    free(scratch);
    free(line);
    fclose(f);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* help, version, main                                                                        */

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_help(FILE *out)
{
    fputs("usage: mpickpt COMMAND [ARGS]\n"
          "Tool for mpickpt checkpoints; only gc modifies anything. PREFIX is a checkpoint's\n"
          "path without suffixes (dir/ckpt-3); dir/ckpt-3.index is accepted too. DIR is a\n"
          "checkpoint directory (the manager's, or a training state's with chief/ in it).\n"
          "\ncommands:\n",
          out);
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fputs("\nexit status: 0 ok, 1 bad or missing data (diff: the data differ), 2 usage error\n"
          "'mpickpt help COMMAND' shows a command's arguments.\n",
          out);
}

static int cmd_help(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0;
    int rc = cli_parse(cmd, argc, argv, NULL, 0, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops == 0) {
        print_help(stdout);
        return EXIT_OK;
    }
    if (nops > 1)
        return cli_usage_error(cmd, "expected at most one COMMAND");
    const cli_command *c = find_command(argv[0]);
    if (!c)
        return cli_usage_error(cmd, "unknown command '%s'", argv[0]);
    print_usage_line(stdout, c);
    printf("%s\n", c->summary);
    if (c->details)
        fputs(c->details, stdout);
    return EXIT_OK;
}

static int cmd_version(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0;
    int rc = cli_parse(cmd, argc, argv, NULL, 0, &nops);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (nops != 0)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[0]);
    printf("mpickpt %s\n", ckpt_version());
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        name = "help";
    else if (strcmp(name, "--version") == 0)
        name = "version";
    const cli_command *cmd = find_command(name);
    if (!cmd) {
        fprintf(stderr, "mpickpt: unknown command '%s' (see 'mpickpt help')\n", name);
        return EXIT_USAGE;
    }
    int rc = cmd->run(cmd, argc - 1, argv + 1);
    /* Output that never reached its file (full disk, closed pipe) must not look like success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "mpickpt: %s: cannot write standard output: %s\n", cmd->name,
                strerror(errno));
        if (rc == EXIT_OK)
            rc = EXIT_BAD;
    }
    return rc;
}
