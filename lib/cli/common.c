/* Helpers shared by the mpickpt tool's commands (declared in cli.h). */
#include "cli.h"

#include "fsutil.h" /* lib/fsutil.h */

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_lib_error(const cli_command *cmd, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    fprintf(stderr, "mpickpt: %s: %s\n", cmd->name,
            e && e->message && e->message[0] ? e->message : ckpt_strerror(rc));
    return EXIT_BAD;
}

int cli_oom(const cli_command *cmd)
{
    fprintf(stderr, "mpickpt: %s: out of memory\n", cmd->name);
    return EXIT_BAD;
}

char *cli_prefix(const char *arg)
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

int cli_open(const cli_command *cmd, const char *arg, ckpt_reader **r, int index_only)
{
    char *prefix = cli_prefix(arg);
    if (!prefix)
        return cli_oom(cmd);
    int rc = index_only ? ckpt_reader_open_index(r, prefix) : ckpt_reader_open(r, prefix);
    free(prefix);
    return rc == CKPT_OK ? 0 : cli_lib_error(cmd, rc);
}

int cli_tensor_totals(const ckpt_reader *r, size_t i, size_t *pieces, uint64_t *bytes)
{
    ckpt_tensor_info t;
    return cli_tensor_row(r, i, &t, pieces, bytes);
}

int cli_tensor_row(const ckpt_reader *r, size_t i, ckpt_tensor_info *out, size_t *pieces,
                   uint64_t *bytes)
{
    ckpt_tensor_info t;
    int rc = ckpt_reader_tensor(&t, r, i);
    if (rc != CKPT_OK)
        return rc;
    *out = t;
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

void cli_text_name(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
}

int cli_text_width(const char *s)
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

void cli_format_dims(char *buf, size_t size, int ndims, const int64_t *dims)
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

void cli_json_dims(ckpt__json_writer *w, int ndims, const int64_t *dims)
{
    ckpt__json_array_begin(w);
    for (int d = 0; d < ndims; d++)
        ckpt__json_int(w, dims[d]);
    ckpt__json_array_end(w);
}

int cli_json_prefix_files(ckpt__json_writer *w, const char *prefix)
{
    size_t n = strlen(prefix) + sizeof ".data-00000-of-00001";
    char *p = malloc(n);
    if (!p)
        return -1;
    ckpt__data_name(p, n, prefix, 0, 1);
    ckpt__json_string(w, p);
    snprintf(p, n, "%s.index", prefix);
    ckpt__json_string(w, p);
    free(p);
    return 0;
}

char *cli_path_join(const char *dir, const char *name)
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

char *cli_dir_operand(const char *arg)
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

int cli_is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int cli_check_dir(const cli_command *cmd, const char *dir)
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

/* ---- the lock of a directory ---- */

int cli_lock_wait(const cli_command *cmd, const char *arg, double *seconds)
{
    *seconds = 0;
    if (!arg) {
        int rc = ckpt__dirlock_env_wait(seconds);
        return rc == CKPT_OK ? 0 : cli_lib_error(cmd, rc);
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(arg, &end);
    if (errno || end == arg || *end || !isfinite(v) || v < 0 || v > 31536000)
        return cli_usage_error(cmd, "--wait needs a number of seconds in 0..31536000, got '%s'",
                               arg);
    *seconds = v;
    return 0;
}

int cli_parse_wait(const cli_command *cmd, const cli_spec *spec, int argc, char **argv, int *nops,
                   const char *const *wait_arg, double *seconds)
{
    *seconds = 0;
    int rc = cli_parse(cmd, spec, argc, argv, nops);
    if (rc != CLI_GO)
        return rc;
    rc = cli_lock_wait(cmd, *wait_arg, seconds);
    return rc != 0 ? rc : CLI_GO;
}

int cli_lock_dir(const cli_command *cmd, const char *dir, double wait, ckpt__dirlock **lock)
{
    *lock = NULL;
    int fd = -1, rc = ckpt__ckptdir_open(&fd, NULL, dir, 0);
    if (rc == CKPT_OK)
        rc = ckpt__dirlock_take(lock, fd, dir, wait);
    ckpt__close(fd);
    return rc == CKPT_OK ? 0 : cli_lib_error(cmd, rc);
}

/* ---- state directories ---- */

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
        char *path = cli_path_join(dir, e->d_name);
        struct stat sb;
        found = path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
        free(path);
    }
    closedir(d);
    return found;
}

/* Whether dir/name exists (any type). */
static int has_entry(const char *dir, const char *name)
{
    struct stat sb;
    char *path = cli_path_join(dir, name);
    int found = path && stat(path, &sb) == 0;
    free(path);
    return found;
}

/* The directory of the state file for a DIR operand (malloc'd, NULL when out of memory): DIR itself
 * when it has a state file, else DIR/chief when that has a state file, or has checkpoints while
 * DIR has none (a training state's backup directory), else DIR. */
char *cli_state_dir(const char *dir)
{
    char *chief = cli_path_join(dir, CKPT__CHIEF_DIR);
    if (!chief)
        return NULL;
    if (!has_entry(dir, "checkpoint") && cli_is_dir(chief) &&
        (has_entry(chief, "checkpoint") || (has_index_files(chief) && !has_index_files(dir))))
        return chief;
    free(chief);
    return cli_path_join("", dir);
}

/* Reads the state of dir, falling back to a scan (with a warning) when the state file is
 * missing or damaged. Returns 0 or EXIT_BAD after printing why. */
int cli_read_state(const cli_command *cmd, const char *dir, ckpt_state **out)
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

int cli_grow(void *arr_ptr, size_t n, size_t size)
{
    if (n != 0 && (n & (n - 1)) != 0)
        return 0; /* not a power of two: the last doubling left room */
    size_t cap = n ? 2 * n : 1;
    if (cap > SIZE_MAX / size)
        return -1;
    void **arr = arr_ptr;
    void *grown = realloc(*arr, cap * size);
    if (!grown)
        return -1;
    *arr = grown;
    return 0;
}
