/* Shared by the files of the mpickpt tool (lib/cli/): the command record, the exit codes, and the
 * helpers the commands have in common (opening a checkpoint, printing errors, names and shapes in
 * text and JSON, directory operands). common.c implements them; opts.h parses arguments.
 *
 * Adding a command: write cmd_NAME.c with `const cli_command cli_cmd_NAME` (name, synopsis, help
 * text, and its run function, which parses its arguments with cli_parse(), reports library errors
 * with cli_lib_error() and usage errors with cli_usage_error()), declare it below, list it in
 * main.c's commands[] and in CMakeLists.txt. */
#ifndef MPICKPT_CLI_CLI_H
#define MPICKPT_CLI_CLI_H

#include "dirlock.h" /* lib/dirlock.h */
#include "json.h"    /* lib/json.h */
#include "opts.h"
#include "paths.h" /* lib/paths.h: chief/ and the other names mpickpt writes */

#include "mpickpt/checkpoint.h"
#include "mpickpt/state.h"

#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 bad or missing data (any library error; for diff: the data differ),
 * 2 usage. */
enum { EXIT_OK = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };

struct cli_command {
    const char *name;
    const char *synopsis; /* arguments after the command name, for usage lines */
    const char *summary;  /* one line for `mpickpt help` */
    const char *details;  /* further lines for `mpickpt help NAME` and --help, or NULL */
    /* argv[0] is the command name; returns the exit code. */
    int (*run)(const cli_command *cmd, int argc, char **argv);
};

/* The commands, one file each (main.c has help and version). */
extern const cli_command cli_cmd_inspect; /* cmd_inspect.c */
extern const cli_command cli_cmd_verify;  /* cmd_verify.c */
extern const cli_command cli_cmd_dump;    /* cmd_dump.c */
extern const cli_command cli_cmd_list;    /* cmd_list.c */
extern const cli_command cli_cmd_diff;    /* cmd_diff.c */
extern const cli_command cli_cmd_export;  /* cmd_export.c */
extern const cli_command cli_cmd_gc;      /* cmd_gc.c */
extern const cli_command cli_cmd_stats;   /* cmd_stats.c */
extern const cli_command cli_cmd_pin;     /* cmd_pin.c */
extern const cli_command cli_cmd_drop;    /* cmd_pin.c (shares its restart control code) */
extern const cli_command cli_cmd_halt;    /* cmd_halt.c */
extern const cli_command cli_cmd_config;  /* cmd_config.c */
extern const cli_command cli_cmd_import_tf; /* cmd_import.c */

/* ---- errors ---- */

/* Prints the library's last error as "mpickpt: CMD: MESSAGE" (the message names the path and
 * cause); falls back to the status description when the library recorded none. Returns
 * EXIT_BAD. */
int cli_lib_error(const cli_command *cmd, int rc);

/* Prints "mpickpt: CMD: out of memory"; returns EXIT_BAD. */
int cli_oom(const cli_command *cmd);

/* ---- checkpoints ---- */

/* A malloc'd copy of a PREFIX argument without a trailing ".index" (users often pass the index
 * file itself, e.g. from shell completion), or NULL when out of memory. */
char *cli_prefix(const char *arg);

/* Opens the reader of a PREFIX argument (only its index when index_only); reports failures.
 * Returns 0 or EXIT_BAD. */
int cli_open(const cli_command *cmd, const char *arg, ckpt_reader **r, int index_only);

/* Sums the pieces of tensor i (count and bytes). Returns a ckpt_status. */
int cli_tensor_totals(const ckpt_reader *r, size_t i, size_t *pieces, uint64_t *bytes);
/* Tensor i's description and its totals. Returns a ckpt_status. */
int cli_tensor_row(const ckpt_reader *r, size_t i, ckpt_tensor_info *t, size_t *pieces,
                   uint64_t *bytes);

/* ---- names and shapes ---- */

/* Text output of a name: control characters (which would break the one-line-per-item layout or
 * drive the terminal) are shown as \xNN; everything else, UTF-8 included, as is. */
void cli_text_name(FILE *out, const char *s);

/* Terminal columns cli_text_name() uses for s: UTF-8 continuation bytes take none. */
int cli_text_width(const char *s);

/* Room for cli_format_dims() of any shape. */
#define CLI_DIMS_BUF (CKPT_MAX_DIMS * 24 + 8)

/* "[6, 4]" ("[]" for a scalar) into buf; cut short (never overflowing) if buf is too small. */
void cli_format_dims(char *buf, size_t size, int ndims, const int64_t *dims);

/* The dimensions as a JSON array of integers. */
void cli_json_dims(ckpt__json_writer *w, int ndims, const int64_t *dims);

/* The files of the checkpoint or TensorFlow bundle `prefix` that has one data file, as JSON
 * strings: its data file, then its index (written last: its commit). 0, or -1 when out of memory
 * (nothing written). */
int cli_json_prefix_files(ckpt__json_writer *w, const char *prefix);

/* ---- growing arrays ---- */

/* Room for element n of the array at *(T **)arr_ptr, which holds n elements of `size` bytes and
 * only grows: its allocation doubles when n is 0 or a power of two, so n appends copy O(n)
 * elements in all (one realloc per element would copy O(n^2) where realloc cannot grow in place,
 * as under the sanitizers). 0, or -1 when out of memory (the array is left as it was). */
int cli_grow(void *arr_ptr, size_t n, size_t size);

/* ---- paths and directories ---- */

/* "dir/name", without doubling a trailing slash of dir. malloc'd; NULL when out of memory. */
char *cli_path_join(const char *dir, const char *name);

/* A malloc'd copy of a DIR operand without trailing slashes ("run/" -> "run"; "/" stays), so
 * that joined paths read "run/ckpt-1" and the library sees "run/chief" as a chief directory.
 * NULL when out of memory. */
char *cli_dir_operand(const char *arg);

/* Whether path is a directory (links followed). */
int cli_is_dir(const char *path);

/* Checks that a DIR operand is an existing directory; prints why not. Returns 0 or EXIT_BAD. */
int cli_check_dir(const cli_command *cmd, const char *dir);

/* ---- the lock of a directory (lib/dirlock.h): gc, pin and drop hold it while they write ---- */

/* The seconds a command waits for a directory another job holds: its --wait value (a number
 * of seconds in 0..31536000), else MPICKPT_LOCK_WAIT, else 0. Returns 0, or EXIT_USAGE after
 * printing a usage error for a bad --wait, or EXIT_BAD for a bad MPICKPT_LOCK_WAIT. */
int cli_lock_wait(const cli_command *cmd, const char *arg, double *seconds);

/* cli_parse(), then cli_lock_wait() of the --wait value it stored in *wait_arg: CLI_GO, or the
 * exit status of the first that failed. */
int cli_parse_wait(const cli_command *cmd, const cli_spec *spec, int argc, char **argv, int *nops,
                   const char *const *wait_arg, double *seconds);

/* Takes the lock of directory dir (a state file's directory: DIR or DIR/chief), waiting up to
 * `wait` seconds; *lock is released with ckpt__dirlock_release(). Returns 0, or EXIT_BAD after
 * printing why (a job holding it: its host, pid and since when). */
int cli_lock_dir(const cli_command *cmd, const char *dir, double wait, ckpt__dirlock **lock);

/* ---- state files ---- */

/* The directory of the state file a DIR operand names (malloc'd, NULL when out of memory): DIR
 * itself when it has a state file, else DIR/chief when that has a state file, or has checkpoints
 * while DIR has none (a training state's backup directory), else DIR. */
char *cli_state_dir(const char *dir);

/* Reads the state of dir, falling back to a scan (with a warning on stderr) when the state file
 * is missing or damaged. Returns 0 or EXIT_BAD after printing why. */
int cli_read_state(const cli_command *cmd, const char *dir, ckpt_state **out);

#endif
