/* mpickpt list: the committed checkpoints of a directory, from its state file (or DIR/chief's),
 * or found by scanning when the state file is missing or damaged. */
#include "cli.h"

#include "mpickpt/state.h"
#include "restart.h" /* lib/restart.h: pins and drops */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The path of a state-file name: relative names are joined to dir, absolute ones kept. */
static char *state_path(const char *dir, const char *name)
{
    return name[0] == '/' ? cli_path_join("", name) : cli_path_join(dir, name);
}

/* "2025-11-21 12:00:00" (UTC) into buf, or the raw number when the time is not representable. */
static void format_utc(char *buf, size_t size, double timestamp)
{
    struct tm tm;
    /* Range check first: converting a NaN or huge double to time_t is undefined. */
    time_t secs = isfinite(timestamp) && fabs(timestamp) < 1e15 ? (time_t)timestamp : 0;
    if (!(secs && gmtime_r(&secs, &tm) && strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) > 0))
        snprintf(buf, size, "%.17g", timestamp);
}

static const char *const rs_names[] = {NULL, "pinned", "set_aside", "dropped"};
static const char *const rs_text[] = {"", "  (pinned)", "  (set aside)", "  (dropped)"};

static int list_print(const ckpt_state *st, char **paths, const uint64_t *bytes,
                      const char *latest, const ckpt__restart *ctl, int json)
{
    long point = ckpt__restart_point(ctl, st);
    if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "latest");
        if (latest)
            ckpt__json_string(&w, latest);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "restart_from"); /* what the next start restores (pins, drops) */
        if (point >= 0)
            ckpt__json_string(&w, paths[point]);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "checkpoints");
        ckpt__json_array_begin(&w);
        for (size_t i = 0; i < st->num_entries; i++) {
            const ckpt_state_entry *e = &st->entries[i];
            ckpt__json_object_begin(&w);
            ckpt__json_kstring(&w, "prefix", paths[i]);
            ckpt__json_kint(&w, "save_counter", e->save_counter);
            ckpt__json_kint(&w, "epoch", e->epoch);
            ckpt__json_kint(&w, "step", e->step);
            ckpt__json_key(&w, "timestamp");
            ckpt__json_real(&w, e->timestamp);
            ckpt__json_kuint(&w, "bytes", bytes[i]);
            ckpt__json_kbool(&w, "end_of_epoch", e->end_of_epoch != 0);
            ckpt__json_key(&w, "levels"); /* where it is: docs/levels.md */
            ckpt__json_array_begin(&w);
            if (!e->levels || (e->levels & CKPT_LEVEL_PERSISTENT))
                ckpt__json_string(&w, "persistent");
            if (e->levels & CKPT_LEVEL_CACHE)
                ckpt__json_string(&w, "cache");
            ckpt__json_array_end(&w);
            ckpt__json_key(&w, "restart"); /* mpickpt pin/drop: docs/operations.md */
            int rs = ckpt__restart_status(ctl, e->prefix, e->save_counter);
            if (rs_names[rs])
                ckpt__json_string(&w, rs_names[rs]);
            else
                ckpt__json_null(&w);
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
        int tw = cli_text_width(paths[i]);
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
        cli_text_name(stdout, paths[i]);
        int pad = prefix_w - cli_text_width(paths[i]);
        printf("%*s  %7" PRId64 "  %6" PRId64 "  %9" PRId64 "  %-9s  %-19s  %12" PRIu64 "%s%s\n",
               pad > 0 ? pad : 0, "", e->save_counter, e->epoch, e->step,
               e->end_of_epoch ? "epoch end" : "mid-epoch", when, bytes[i],
               is_latest                         ? "  (latest)"
               : e->levels == CKPT_LEVEL_CACHE   ? "  (cache only)"
                                                 : "",
               rs_text[ckpt__restart_status(ctl, e->prefix, e->save_counter)]);
    }
    if (ctl->pinned || ctl->num_drops) {
        printf("restart from: ");
        if (point >= 0)
            cli_text_name(stdout, paths[point]);
        else
            fputs("nothing (the next start begins from scratch)", stdout);
        fputc('\n', stdout);
    }
    if (latest) {
        printf("latest: ");
        cli_text_name(stdout, latest);
        fputc('\n', stdout);
    } else {
        printf("latest: none\n");
    }
    return EXIT_OK;
}

static int cmd_list(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const cli_option opts[] = {{"--json", &json, NULL}};
    const cli_spec spec = {opts, 1, 1, 1, "missing DIR", "expected one DIR", 1};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;

    char *arg = cli_dir_operand(argv[0]);
    char *dir = arg ? cli_state_dir(arg) : NULL;
    ckpt_state *st = NULL;
    char **paths = NULL;
    uint64_t *bytes = NULL;
    char *latest = NULL;
    free(arg);
    if (!dir)
        return cli_oom(cmd);
    if ((rc = cli_read_state(cmd, dir, &st)) != 0)
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
        /* The sizes on disk now; the state file's record when the checkpoint cannot be read,
         * or is only in the nodes' caches (docs/levels.md: not in this directory). */
        bytes[i] = e->bytes;
        if (e->levels == CKPT_LEVEL_CACHE)
            continue;
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
        if (!(latest = cli_path_join("", paths[n - 1])))
            goto oom;
    }
    /* pins and drops (a control file that cannot be read is reported, the listing goes on) */
    ckpt__restart ctl;
    if (ckpt__restart_read(&ctl, dir) != CKPT_OK) {
        const ckpt_error *err = ckpt_error_last();
        fprintf(stderr, "mpickpt: %s: warning: %s\n", cmd->name,
                err && err->message ? err->message : "cannot read the restart control");
        memset(&ctl, 0, sizeof ctl);
    }
    rc = list_print(st, paths, bytes, latest, &ctl, json);
    ckpt__restart_clear(&ctl);
    goto out;
oom:
    rc = cli_oom(cmd);
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

const cli_command cli_cmd_list = {
    "list", "[--json] DIR", "list the committed checkpoints of a directory, oldest first",
    "  Reads DIR/checkpoint (the state file the manager writes); DIR/chief/ is used when DIR\n"
    "  has no state file but DIR/chief/ has one or has checkpoints. A missing or damaged state\n"
    "  file is reported on stderr and the checkpoints (*.index) are listed by scanning.\n"
    "  --json   {\"latest\":PREFIX|null,\"checkpoints\":[{\"prefix\",\"save_counter\",\"epoch\",\n"
    "           \"step\",\"timestamp\",\"bytes\",\"end_of_epoch\",\"levels\",\"restart\"}],\n"
    "           \"restart_from\":PREFIX|null}; restart is \"pinned\", \"set_aside\", \"dropped\" or\n"
    "           null (mpickpt pin, drop); every PREFIX is DIR joined\n"
    "           with the checkpoint's name, usable as given with inspect, verify and dump\n",
    cmd_list};
