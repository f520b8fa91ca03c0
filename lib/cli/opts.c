#include "opts.h"

#include "cli.h"

#include <stdarg.h>
#include <string.h>

void cli_print_usage(FILE *out, const cli_command *cmd)
{
    fprintf(out, "usage: mpickpt %s%s%s\n", cmd->name, cmd->synopsis[0] ? " " : "", cmd->synopsis);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "mpickpt: %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    cli_print_usage(stderr, cmd);
    return EXIT_USAGE;
}

static struct {
    const char *name;
    const char **values;
    size_t max;
    size_t *count;
} g_repeat;

void cli_repeatable(const char *name, const char **values, size_t max, size_t *count)
{
    g_repeat.name = name;
    g_repeat.values = values;
    g_repeat.max = max;
    g_repeat.count = count;
    *count = 0;
}

/* The options: moves the operands to the front of argv and counts them in *nops. Returns
 * CLI_GO, EXIT_USAGE after printing why, or EXIT_OK after printing the help of -h/--help. */
static int parse_options(const cli_command *cmd, const cli_spec *spec, int argc, char **argv,
                         int *nops)
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
            cli_print_usage(stdout, cmd);
            if (cmd->details)
                fputs(cmd->details, stdout);
            return EXIT_OK;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_option *opt = NULL;
        for (size_t k = 0; k < spec->num_options; k++)
            if (strlen(spec->options[k].name) == len &&
                strncmp(spec->options[k].name, arg, len) == 0)
                opt = &spec->options[k];
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
        if (opt->value && g_repeat.name && strcmp(opt->name, g_repeat.name) == 0) {
            if (*g_repeat.count >= g_repeat.max)
                return cli_usage_error(cmd, "option '%s' given more than %zu times", opt->name,
                                       g_repeat.max);
            g_repeat.values[(*g_repeat.count)++] = *opt->value;
        }
    }
    *nops = n;
    return CLI_GO;
}

int cli_parse(const cli_command *cmd, const cli_spec *spec, int argc, char **argv, int *nops)
{
    int n = 0;
    int rc = parse_options(cmd, spec, argc, argv, &n);
    g_repeat.name = NULL;
    *nops = n;
    if (rc != CLI_GO)
        return rc;
    if (n < spec->min_operands)
        return cli_usage_error(cmd, "%s", spec->too_few);
    if (spec->max_operands >= 0 && n > spec->max_operands) {
        if (!spec->too_many)
            return cli_usage_error(cmd, "unexpected argument '%s'", argv[spec->max_operands]);
        return cli_usage_error(cmd, "%s", spec->too_many);
    }
    if (spec->dir_operand && (rc = cli_check_dir(cmd, argv[0])) != 0)
        return rc;
    return CLI_GO;
}
