/* The one option and operand parser of the mpickpt tool: every command describes its options and
 * operands in a cli_spec and calls cli_parse(), so spelling, order of checks, messages and exit
 * codes are the same everywhere. */
#ifndef MPICKPT_CLI_OPTS_H
#define MPICKPT_CLI_OPTS_H

#include "mpickpt/common.h" /* CKPT_PRINTF */

#include <stddef.h>
#include <stdio.h>

typedef struct cli_command cli_command; /* cli.h */

/* One option of a command: a flag (value == NULL) or an option taking an argument. */
typedef struct cli_option {
    const char *name;   /* "--json" */
    int *flag;          /* set to 1 when the flag is given */
    const char **value; /* set to the argument ("--name=value" or "--name value") */
} cli_option;

/* What a command accepts. */
typedef struct cli_spec {
    const cli_option *options;
    size_t num_options;
    int min_operands;
    int max_operands;     /* -1: no limit */
    const char *too_few;  /* usage message when there are fewer operands */
    const char *too_many; /* usage message when there are more; NULL: "unexpected argument 'X'"
                           * naming the first one too many */
    int dir_operand;      /* the operand must be an existing directory (EXIT_BAD otherwise) */
} cli_spec;

/* cli_parse(): the command goes on. */
#define CLI_GO (-1)

/*
 * Parses a command's arguments (argv[0] is the command name). Options may appear anywhere before
 * "--"; "--name=value" and "--name value" are both accepted; "-" is an operand. The operands are
 * moved to the front of argv and counted in *nops. Checks, in this order: the options (unknown,
 * a value given to a flag, a missing value: usage errors), -h/--help (the command's usage and
 * details on stdout), the number of operands (usage errors), then with spec->dir_operand that the
 * operand is an existing directory.
 * Returns CLI_GO when the command should go on, else the exit status it returns: EXIT_OK after
 * --help, EXIT_USAGE after printing a usage error, EXIT_BAD when the directory check failed.
 */
int cli_parse(const cli_command *cmd, const cli_spec *spec, int argc, char **argv, int *nops);

/* Makes the value option `name` of the next cli_parse() call repeatable: every value given is
 * appended to values (at most max: more is a usage error), *count says how many; the option's
 * own `value` gets the last one. The next cli_parse() call forgets it. */
void cli_repeatable(const char *name, const char **values, size_t max, size_t *count);

/* "usage: mpickpt NAME SYNOPSIS" and a newline on out. */
void cli_print_usage(FILE *out, const cli_command *cmd);

/* Prints "mpickpt: CMD: MESSAGE" and the command's usage on stderr; returns EXIT_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...) CKPT_PRINTF(2, 3);

#endif
