/* mpickpt config: the effective MPICKPT_* settings of this environment and where each came from
 * (the environment, or the default), every value checked by the parser its reader uses; the
 * table is lib/env.c's ckpt__settings[] (docs/configuration.md lists the same). */
#include "cli.h"

#include "env.h" /* lib/env.h */

#include <stdlib.h>
#include <string.h>

extern char **environ;

/* One row: the variable's value or its default, the source, and the error of an invalid value. */
typedef struct config_row {
    const ckpt__setting *s;
    const char *value; /* the environment's, or NULL: the default */
    char error[1024];  /* "" when valid */
} config_row;

/* Whether the environment's name=value entry is an MPICKPT_* variable the table lacks. */
static int unknown_variable(const char *entry, char *name, size_t size)
{
    if (strncmp(entry, "MPICKPT_", 8) != 0)
        return 0;
    size_t n = strcspn(entry, "=");
    snprintf(name, size, "%.*s", (int)n, entry);
    for (size_t i = 0; i < ckpt__num_settings; i++)
        if (strcmp(ckpt__settings[i].name, name) == 0)
            return 0;
    return 1;
}

static void print_json(const config_row *rows, size_t n, size_t invalid)
{
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, "settings");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < n; i++) {
        const config_row *r = &rows[i];
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "name", r->s->name);
        ckpt__json_kstring(&w, "value", r->value ? r->value : r->s->dflt);
        ckpt__json_kstring(&w, "source", r->value ? "environment" : "default");
        ckpt__json_kbool(&w, "valid", !r->error[0]);
        ckpt__json_key(&w, "error");
        if (r->error[0])
            ckpt__json_string(&w, r->error);
        else
            ckpt__json_null(&w);
        ckpt__json_kstring(&w, "default", r->s->dflt);
        ckpt__json_kstring(&w, "scope", r->s->scope);
        ckpt__json_kstring(&w, "read_by", r->s->read_by);
        ckpt__json_kstring(&w, "meaning", r->s->meaning);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "unknown");
    ckpt__json_array_begin(&w);
    char name[256];
    for (char **e = environ; e && *e; e++)
        if (unknown_variable(*e, name, sizeof name))
            ckpt__json_string(&w, name);
    ckpt__json_array_end(&w);
    ckpt__json_kuint(&w, "invalid", invalid);
    ckpt__json_kbool(&w, "ok", invalid == 0);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
}

static void print_text(const config_row *rows, size_t n, size_t invalid)
{
    int w = 4;
    for (size_t i = 0; i < n; i++)
        w = (int)strlen(rows[i].s->name) > w ? (int)strlen(rows[i].s->name) : w;
    printf("%-*s  %-12s  %s\n", w, "NAME", "SOURCE", "VALUE");
    size_t from_env = 0;
    for (size_t i = 0; i < n; i++) {
        const config_row *r = &rows[i];
        from_env += r->value != NULL;
        printf("%-*s  %-12s  ", w, r->s->name, r->value ? "environment" : "default");
        cli_text_name(stdout, r->value ? r->value : r->s->dflt);
        if (r->error[0]) {
            printf("  INVALID: ");
            cli_text_name(stdout, r->error);
        }
        fputc('\n', stdout);
    }
    char name[256];
    for (char **e = environ; e && *e; e++)
        if (unknown_variable(*e, name, sizeof name))
            printf("%-*s  %-12s  (not an mpickpt setting: a typo?)\n", w, name, "environment");
    printf("\n%zu setting(s) from the environment, %zu invalid\n", from_env, invalid);
}

static int cmd_config(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, all = 0, nops = 0;
    const cli_option opts[] = {{"--json", &json, NULL}, {"--all", &all, NULL}};
    const cli_spec spec = {opts, 2, 0, 0, NULL, NULL, 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    config_row *rows = calloc(ckpt__num_settings, sizeof *rows);
    if (!rows)
        return cli_oom(cmd);
    size_t n = 0, invalid = 0;
    for (size_t i = 0; i < ckpt__num_settings; i++) {
        const ckpt__setting *s = &ckpt__settings[i];
        if (!all && !s->library)
            continue;
        config_row *r = &rows[n++];
        r->s = s;
        if (ckpt__setting_check(s, &r->value) != CKPT_OK) {
            const ckpt_error *e = ckpt_error_last();
            snprintf(r->error, sizeof r->error, "%s",
                     e && e->message && e->message[0] ? e->message : "invalid value");
            fprintf(stderr, "mpickpt: config: %s\n", r->error);
            invalid++;
        }
    }
    char name[256];
    for (char **e = environ; e && *e; e++)
        if (unknown_variable(*e, name, sizeof name))
            fprintf(stderr, "mpickpt: config: warning: %s is not an mpickpt setting\n", name);
    if (json)
        print_json(rows, n, invalid);
    else
        print_text(rows, n, invalid);
    free(rows);
    return invalid ? EXIT_BAD : EXIT_OK;
}

const cli_command cli_cmd_config = {
    "config", "[--json] [--all]",
    "show the effective MPICKPT_* settings and where each came from",
    "  One row per setting the library and its programs read: its name, its source\n"
    "  (environment, or default) and its value, checked by the parser its reader uses: an\n"
    "  invalid value is marked INVALID with the reason (also on stderr) and the exit code is\n"
    "  1. MPICKPT_* variables that no setting has are listed as possible typos (a warning,\n"
    "  not an error). This is what the environment gives: a program's own options (e.g.\n"
    "  ckpt_saver_options.layout) win where docs/configuration.md says so, and collective\n"
    "  settings are taken from rank 0's environment.\n"
    "  --all    also the variables of the scripts in jobs/ (MPICKPT_BUILD_DIR, ...)\n"
    "  --json   one object: {\"settings\":[{\"name\",\"value\",\"source\",\"valid\",\"error\",\n"
    "           \"default\",\"scope\",\"read_by\",\"meaning\"}],\"unknown\":[names],\n"
    "           \"invalid\",\"ok\"}\n",
    cmd_config};
