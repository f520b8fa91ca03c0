/* mpickpt verify: re-reads every piece of checkpoints (PREFIXes, or every checkpoint of a DIR
 * and of DIR/chief/) and checks sizes and CRC-32C checksums. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How the run reports: text (an ok/BAD line per checkpoint) or one JSON object, and whether
 * progress goes to stderr (a terminal, not --json). */
typedef struct verify_run {
    ckpt__json_writer *json; /* --json: the "checkpoints" array is open */
    int progress;
    char **errors; /* --json: operand-level failures (an empty or unreadable DIR) */
    size_t nerrors;
} verify_run;

typedef struct verify_state {
    const char *prefix;
    size_t bad; /* pieces reported bad */
    verify_run *run;
    double last; /* progress: when the line was last drawn (monotonic seconds), 0 never */
} verify_state;

/* ckpt_verify_cb: one stderr line per bad piece; keeps going to list them all. With --json the
 * piece also goes into the checkpoint's "bad_pieces" array. */
static int verify_report(const char *tensor, size_t piece, const char *file, int code,
                         const char *message, void *payload)
{
    verify_state *st = payload;
    const char *why = message && message[0] ? message : ckpt_strerror(code);
    st->bad++;
    if (st->last > 0) /* a progress line is on the terminal: start a fresh line */
        fputs("\r\033[K", stderr);
    fprintf(stderr, "mpickpt: verify: %s: tensor \"", st->prefix);
    cli_text_name(stderr, tensor);
    fprintf(stderr, "\" piece %zu (%s): %s\n", piece, file ? file : "?", why);
    ckpt__json_writer *w = st->run->json;
    if (w) {
        ckpt__json_object_begin(w);
        ckpt__json_kstring(w, "tensor", tensor);
        ckpt__json_kuint(w, "piece", piece);
        ckpt__json_key(w, "file");
        if (file)
            ckpt__json_string(w, file);
        else
            ckpt__json_null(w);
        ckpt__json_kstring(w, "error", why);
        ckpt__json_object_end(w);
    }
    return 0;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ckpt__verify_progress_cb: "verify PREFIX: 42% (X of Y MiB)" redrawn in place on stderr, at
 * most ten times a second (and at the end); erased when the checkpoint is done. */
static void verify_progress(uint64_t done, uint64_t total, void *payload)
{
    verify_state *st = payload;
    double now = mono_now();
    if (st->last > 0 && now - st->last < 0.1 && done < total)
        return;
    st->last = now;
    fputs("\r\033[Kverify ", stderr);
    cli_text_name(stderr, st->prefix);
    fprintf(stderr, ": %3d%% (%.1f of %.1f MiB)",
            total ? (int)(done * 100 / total) : 100, (double)done / 1048576.0,
            (double)total / 1048576.0);
    fflush(stderr);
}

/* --json: the checkpoint's object up to its "bad_pieces" array, which stays open. */
static void json_checkpoint_begin(ckpt__json_writer *w, const char *prefix, int opened, size_t n,
                                  size_t pieces, uint64_t bytes)
{
    ckpt__json_object_begin(w);
    ckpt__json_kstring(w, "prefix", prefix);
    const char *keys[] = {"tensors", "pieces", "bytes"};
    uint64_t vals[] = {n, pieces, bytes};
    for (size_t i = 0; i < 3; i++) {
        ckpt__json_key(w, keys[i]);
        if (opened)
            ckpt__json_uint(w, vals[i]);
        else
            ckpt__json_null(w);
    }
    ckpt__json_key(w, "bad_pieces");
    ckpt__json_array_begin(w);
}

/* --json: closes the checkpoint's object with its verdict and, when bad, the cause. */
static void json_checkpoint_end(ckpt__json_writer *w, int good, int rc)
{
    ckpt__json_array_end(w);
    ckpt__json_kbool(w, "ok", good);
    ckpt__json_key(w, "error");
    if (good) {
        ckpt__json_null(w);
    } else {
        const ckpt_error *e = ckpt_error_last();
        ckpt__json_string(w, e && e->code == rc && e->message[0] ? e->message
                                                                  : ckpt_strerror(rc));
    }
    ckpt__json_object_end(w);
}

/* Verifies one checkpoint and prints its ok/BAD line (or its JSON object). Returns 1 when it is
 * good, else 0. */
static int verify_prefix(const cli_command *cmd, verify_run *run, const char *arg)
{
    char *prefix = cli_prefix(arg);
    if (!prefix) {
        cli_oom(cmd);
        return 0;
    }
    ckpt_reader *r = NULL;
    int good = 0;
    int rc = ckpt_reader_open(&r, prefix);
    if (rc != CKPT_OK) {
        if (run->json) {
            json_checkpoint_begin(run->json, prefix, 0, 0, 0, 0);
            json_checkpoint_end(run->json, 0, rc);
        }
        cli_lib_error(cmd, rc);
        if (!run->json)
            printf("%s: BAD (%s)\n", prefix, ckpt_strerror(rc));
        goto out;
    }

    size_t n = ckpt_reader_num_tensors(r), all_pieces = 0;
    uint64_t all_bytes = 0;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        size_t pieces;
        uint64_t bytes;
        rc = cli_tensor_totals(r, i, &pieces, &bytes);
        all_pieces += pieces;
        all_bytes += bytes;
    }
    verify_state st = {prefix, 0, run, 0};
    if (run->json)
        json_checkpoint_begin(run->json, prefix, 1, n, all_pieces, all_bytes);
    if (rc == CKPT_OK)
        rc = ckpt__reader_verify_progress(r, verify_report, &st,
                                          run->progress ? verify_progress : NULL, &st);
    if (st.last > 0) { /* erase the progress line */
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    good = rc == CKPT_OK;
    if (run->json)
        json_checkpoint_end(run->json, good, rc);
    if (good) {
        if (!run->json)
            printf("%s: ok (%zu tensors, %zu pieces, %" PRIu64 " bytes)\n", prefix, n,
                   all_pieces, all_bytes);
    } else {
        /* A failure that no piece report explains (I/O error, out of memory, ...) still needs
         * its cause shown. */
        if (st.bad == 0 || rc != CKPT_ECORRUPT)
            cli_lib_error(cmd, rc);
        if (!run->json && st.bad)
            printf("%s: BAD (%zu of %zu pieces failed)\n", prefix, st.bad, all_pieces);
        else if (!run->json)
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
    char *path = cli_path_join(dir, name);
    if (path && (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        free(path); /* vanished, or a directory named *.index: not a checkpoint */
        return 0;
    }
    if (!path || cli_grow(list, *count, sizeof **list) != 0) {
        free(path);
        cli_oom(cmd);
        return -1;
    }
    path[strlen(path) - strlen(".index")] = '\0';
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
/* --json: an operand-level failure for the "errors" array (printed on stderr too). */
static void run_error(verify_run *run, const char *dir, const char *what)
{
    if (!run->json)
        return;
    size_t len = strlen(dir) + strlen(what) + 3;
    char *msg = malloc(len);
    if (!msg || cli_grow(&run->errors, run->nerrors, sizeof *run->errors) != 0) {
        free(msg);
        return;
    }
    snprintf(msg, len, "%s: %s", dir, what);
    run->errors[run->nerrors++] = msg;
}

static int verify_dir(const cli_command *cmd, verify_run *run, const char *dir)
{
    char **list = NULL;
    size_t count = 0;
    int good = 0;
    char *chief = cli_path_join(dir, CKPT__CHIEF_DIR);
    if (!chief) {
        cli_oom(cmd);
        return 0;
    }
    if (find_checkpoints(cmd, dir, 0, &list, &count) == 0 &&
        find_checkpoints(cmd, chief, 1, &list, &count) == 0) {
        good = 1;
        if (count == 0) {
            /* Almost always a wrong path or a job that never saved; not a success. */
            fprintf(stderr, "mpickpt: %s: %s: no checkpoints (*.index) found\n", cmd->name, dir);
            run_error(run, dir, "no checkpoints (*.index) found");
            good = 0;
        }
        for (size_t i = 0; i < count; i++)
            good &= verify_prefix(cmd, run, list[i]);
    } else {
        run_error(run, dir, "cannot read the directory");
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
    int nops = 0, json = 0;
    const cli_option opts[] = {{"--json", &json, NULL}};
    const cli_spec spec = {opts, 1, 1, -1, "missing PREFIX or DIR", NULL, 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;

    ckpt__json_writer w;
    verify_run run = {json ? &w : NULL, !json && isatty(STDERR_FILENO), NULL, 0};
    if (json) {
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "checkpoints");
        ckpt__json_array_begin(&w);
    }
    int good = 1;
    for (int i = 0; i < nops; i++)
        good &= is_checkpoint_dir(argv[i]) ? verify_dir(cmd, &run, argv[i])
                                           : verify_prefix(cmd, &run, argv[i]);
    if (json) {
        ckpt__json_array_end(&w);
        ckpt__json_key(&w, "errors");
        ckpt__json_array_begin(&w);
        for (size_t i = 0; i < run.nerrors; i++)
            ckpt__json_string(&w, run.errors[i]);
        ckpt__json_array_end(&w);
        ckpt__json_kbool(&w, "ok", good);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
    }
    for (size_t i = 0; i < run.nerrors; i++)
        free(run.errors[i]);
    free(run.errors);
    return good ? EXIT_OK : EXIT_BAD;
}

const cli_command cli_cmd_verify = {
    "verify", "[--json] PREFIX|DIR...", "re-read every piece and check sizes and CRC-32C checksums",
    "  A DIR verifies every checkpoint (*.index) directly in it and in DIR/chief/.\n"
    "  Bad pieces are listed on stderr; one ok/BAD line per checkpoint goes to stdout.\n"
    "  On a terminal, stderr shows the progress of each checkpoint (erased when it is done).\n"
    "  Exits 0 only when every checkpoint is good (an empty DIR is an error).\n"
    "  --json   one object instead of the lines: {\"checkpoints\":[{\"prefix\",\"tensors\",\n"
    "           \"pieces\",\"bytes\",\"bad_pieces\":[{\"tensor\",\"piece\",\"file\",\"error\"}],\n"
    "           \"ok\",\"error\"}],\"errors\":[...],\"ok\"} (no progress)\n",
    cmd_verify};
