/* mpickpt: command-line tool for mpickpt checkpoints (inspect, verify, dump, list, diff, gc, stats,
 * import-tf, export, ...). This file: the command table, help, version and dispatch; each command
 * lives in its own cmd_NAME.c (cli.h says how to add one).
 *
 * Runs without mpirun and never initializes MPI: it only uses libmpickpt_core's single-process
 * reader and state-file functions. Every command but gc, pin, drop, halt, import-tf and export is
 * read-only (the last two only write their outputs).
 * Exit codes: 0 success, 1 bad or missing data (any library error; for diff: the data differ),
 * 2 usage. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int cmd_help(const cli_command *cmd, int argc, char **argv);
static int cmd_version(const cli_command *cmd, int argc, char **argv);

static const cli_command help_command = {"help", "[COMMAND]", "show this help, or a command's",
                                         NULL, cmd_help};
static const cli_command version_command = {
    "version", "", "print the library version (also: --version)", NULL, cmd_version};

/* In the order `mpickpt help` lists them. */
static const cli_command *const commands[] = {
    &cli_cmd_inspect, &cli_cmd_verify,    &cli_cmd_dump,   &cli_cmd_list, &cli_cmd_diff,
    &cli_cmd_gc,      &cli_cmd_stats,     &cli_cmd_pin,    &cli_cmd_drop, &cli_cmd_halt,
    &cli_cmd_config,  &cli_cmd_import_tf, &cli_cmd_export, &help_command, &version_command,
};

#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

static void print_help(FILE *out)
{
    fputs("usage: mpickpt COMMAND [ARGS]\n"
          "Tool for mpickpt checkpoints; only gc, pin, drop and halt modify a checkpoint directory,\n"
          "import-tf and export write only their outputs. PREFIX is a checkpoint's path without\n"
          "suffixes (dir/ckpt-3); dir/ckpt-3.index is accepted too.\n"
          "DIR is a checkpoint directory (the manager's, or a training state's with chief/ in it).\n"
          "\ncommands:\n",
          out);
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i]->name, commands[i]->summary);
    fputs("\nexit status: 0 ok, 1 bad or missing data (diff: the data differ), 2 usage error\n"
          "'mpickpt help COMMAND' shows a command's arguments.\n",
          out);
}

static int cmd_help(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0;
    const cli_spec spec = {NULL, 0, 0, 1, NULL, "expected at most one COMMAND", 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (nops == 0) {
        print_help(stdout);
        return EXIT_OK;
    }
    const cli_command *c = find_command(argv[0]);
    if (!c)
        return cli_usage_error(cmd, "unknown command '%s'", argv[0]);
    cli_print_usage(stdout, c);
    printf("%s\n", c->summary);
    if (c->details)
        fputs(c->details, stdout);
    return EXIT_OK;
}

static int cmd_version(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0;
    const cli_spec spec = {NULL, 0, 0, 0, NULL, NULL, 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
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
