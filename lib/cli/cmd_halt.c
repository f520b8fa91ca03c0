/* mpickpt halt: asks the job checkpointing into DIR to take a checkpoint and stop at its next
 * step boundary (now, or once --after-seconds have passed), like SCR's scr_halt; --clear removes
 * the request, --show prints it. The request is the file `halt` (lib/halt.h) in the state file's
 * directory: DIR/chief/ for a training state, else DIR. The library's step-boundary check reads it
 * (ckpt_preempt_check, CKPT_PREEMPT_HALT); mpickpt-run neither requeues nor relaunches a job that
 * stopped for it, and starts no run while it is due. */
#include "cli.h"

#include "halt.h" /* lib/halt.h */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "2026-11-25 10:00:00 UTC" */
static void format_time(char *buf, size_t size, int64_t t)
{
    time_t secs = (time_t)t;
    struct tm tm;
    if (!(gmtime_r(&secs, &tm) && strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm) > 0))
        snprintf(buf, size, "%lld", (long long)t);
}

static void print_json(const char *dir, const char *action, const ckpt__halt *h, int present,
                       double now, int removed)
{
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_kstring(&w, "dir", dir);
    ckpt__json_key(&w, "file");
    char *file = cli_path_join(dir, CKPT__HALT_FILE);
    ckpt__json_string(&w, file ? file : "");
    free(file);
    ckpt__json_kstring(&w, "action", action);
    ckpt__json_kbool(&w, "present", present);
    ckpt__json_key(&w, "after");
    if (present)
        ckpt__json_int(&w, h->after);
    else
        ckpt__json_null(&w);
    ckpt__json_key(&w, "requested");
    if (present && h->requested >= 0)
        ckpt__json_int(&w, h->requested);
    else
        ckpt__json_null(&w);
    ckpt__json_kbool(&w, "due", present && ckpt__halt_due(h, now));
    if (!strcmp(action, "clear")) {
        ckpt__json_kbool(&w, "removed", removed);
    }
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
}

static void print_request(const char *dir, const ckpt__halt *h, double now)
{
    char when[64];
    format_time(when, sizeof when, h->after);
    printf("halt request in ");
    cli_text_name(stdout, dir);
    if (ckpt__halt_due(h, now))
        printf(": due since %s: the job checkpoints and stops at its next step boundary\n", when);
    else
        printf(": due at %s (in %lld s): the job checkpoints and stops at its first step "
               "boundary after that\n",
               when, (long long)(h->after - (int64_t)now));
}

static int cmd_halt(const cli_command *cmd, int argc, char **argv)
{
    int clear = 0, show = 0, json = 0, nops = 0;
    const char *after_arg = NULL;
    const cli_option opts[] = {{"--after-seconds", NULL, &after_arg},
                               {"--clear", &clear, NULL},
                               {"--show", &show, NULL},
                               {"--json", &json, NULL}};
    const cli_spec spec = {opts, 4, 1, 1, "missing DIR", "expected one DIR", 1};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (clear + show > 1 || ((clear || show) && after_arg))
        return cli_usage_error(cmd, "--clear, --show and --after-seconds go alone");
    int64_t after_s = 0;
    if (after_arg) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(after_arg, &end, 10);
        if (errno || end == after_arg || *end || v < 0 || v > 1000000000LL)
            return cli_usage_error(cmd, "--after-seconds needs a whole number of seconds in "
                                        "0..1000000000, got '%s'",
                                   after_arg);
        after_s = v;
    }
    char *operand = cli_dir_operand(argv[0]);
    if (!operand)
        return cli_oom(cmd);
    char dir[4200];
    rc = ckpt__halt_dir(dir, sizeof dir, operand, NULL);
    double now = (double)time(NULL);
    ckpt__halt h = {-1, -1};
    if (rc == CKPT_OK && clear) {
        /* DIR/chief's, and DIR's own (made before the job created its chief/) */
        int removed = 0, more = 0;
        rc = ckpt__halt_clear(dir, &removed);
        if (rc == CKPT_OK && strcmp(dir, operand) != 0)
            rc = ckpt__halt_clear(operand, &more);
        free(operand);
        if (rc != CKPT_OK)
            return cli_lib_error(cmd, rc);
        removed |= more;
        if (json) {
            print_json(dir, "clear", &h, 0, now, removed);
        } else {
            printf(removed ? "halt request removed from " : "no halt request in ");
            cli_text_name(stdout, dir);
            fputc('\n', stdout);
        }
        return EXIT_OK;
    }
    if (rc == CKPT_OK && show) {
        char where[4200];
        snprintf(where, sizeof where, "%s", dir);
        rc = ckpt__halt_find(&h, where, sizeof where, operand);
        free(operand);
        if (rc != CKPT_OK && rc != CKPT_ENOTFOUND)
            return cli_lib_error(cmd, rc);
        if (json) {
            print_json(where, "show", &h, rc == CKPT_OK, now, 0);
        } else if (rc == CKPT_OK) {
            print_request(where, &h, now);
        } else {
            printf("no halt request in ");
            cli_text_name(stdout, dir);
            fputc('\n', stdout);
        }
        return EXIT_OK;
    }
    free(operand);
    if (rc != CKPT_OK)
        return cli_lib_error(cmd, rc);
    h.requested = (int64_t)now;
    h.after = (int64_t)now + after_s;
    if ((rc = ckpt__halt_write(dir, &h)) != CKPT_OK)
        return cli_lib_error(cmd, rc);
    if (json) {
        print_json(dir, "set", &h, 1, now, 0);
    } else {
        print_request(dir, &h, now);
        printf("(mpickpt-run then exits 0 without relaunching or requeueing the job; "
               "'mpickpt halt --clear' removes the request)\n");
    }
    return EXIT_OK;
}

const cli_command cli_cmd_halt = {
    "halt", "[--after-seconds S | --clear | --show] [--json] DIR",
    "ask the job to checkpoint and stop at its next step boundary",
    "  Writes a halt request (the file 'halt', atomically) next to DIR's state file (in\n"
    "  DIR/chief/ for a training state). A job whose manager or training state uses DIR\n"
    "  sees it at its next preemption check (ckpt_preempt_check: CKPT_PREEMPT_HALT), takes a\n"
    "  checkpoint and exits 75 as on a preemption; mpickpt-run then exits 0 without\n"
    "  requeueing or relaunching it, and refuses to start a run while the request is due.\n"
    "  The request stays until --clear: clear it before running the job again. Made before\n"
    "  a training state created DIR/chief/, it is written in DIR, which counts too.\n"
    "  --after-seconds S  due S seconds from now (default 0: at once)\n"
    "  --clear            remove the request, from DIR/chief/ and DIR (\"no halt request\"\n"
    "                     when there is none)\n"
    "  --show             print the request that counts, if any, and whether it is due\n"
    "  --json             one JSON object: dir, file, action (set, clear, show), present,\n"
    "                     after and requested (seconds since the epoch, or null), due,\n"
    "                     and for --clear removed\n",
    cmd_halt};
