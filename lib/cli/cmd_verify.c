/* mpickpt verify: re-reads every piece of checkpoints (PREFIXes, or every checkpoint of a DIR
 * and of DIR/chief/) and checks sizes and CRC-32C checksums. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    cli_text_name(stderr, tensor);
    fprintf(stderr, "\" piece %zu (%s): %s\n", piece, file ? file : "?",
            message && message[0] ? message : ckpt_strerror(code));
    return 0;
}

/* Verifies one checkpoint and prints its ok/BAD line. Returns 1 when it is good, else 0. */
static int verify_prefix(const cli_command *cmd, const char *arg)
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
        cli_lib_error(cmd, rc);
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
    char *path = cli_path_join(dir, name);
    if (path && (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        free(path); /* vanished, or a directory named *.index: not a checkpoint */
        return 0;
    }
    char **grown = path ? realloc(*list, (*count + 1) * sizeof **list) : NULL;
    if (!grown) {
        free(path);
        cli_oom(cmd);
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
    const cli_spec spec = {NULL, 0, 1, -1, "missing PREFIX or DIR", NULL, 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;

    int good = 1;
    for (int i = 0; i < nops; i++)
        good &= is_checkpoint_dir(argv[i]) ? verify_dir(cmd, argv[i]) : verify_prefix(cmd, argv[i]);
    return good ? EXIT_OK : EXIT_BAD;
}

const cli_command cli_cmd_verify = {
    "verify", "PREFIX|DIR...", "re-read every piece and check sizes and CRC-32C checksums",
    "  A DIR verifies every checkpoint (*.index) directly in it and in DIR/chief/.\n"
    "  Bad pieces are listed on stderr; one ok/BAD line per checkpoint goes to stdout.\n"
    "  Exits 0 only when every checkpoint is good (an empty DIR is an error).\n",
    cmd_verify};
