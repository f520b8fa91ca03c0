/* mpickpt pin / mpickpt drop: choosing the restart point of a checkpoint directory. Both edit
 * the restart control next to the state file (lib/restart.h), which the manager's chief reads
 * when a job starts; neither touches a checkpoint or the state file. They edit it under the lock
 * of that directory (lib/dirlock.h): refused while a job holds it (--wait waits), so a change
 * never lands in the middle of a job's run. */
#include "cli.h"

#include "index.h"   /* lib/index.h: ckpt__state_scan_newer */
#include "restart.h" /* lib/restart.h */

#include <stdlib.h>
#include <string.h>

/* The state entry a NAME operand names: "ckpt-4", "DIR/ckpt-4" or "ckpt-4.index" (what list
 * prints and shells complete). -1 when none. */
static long find_entry(const ckpt_state *st, const char *arg)
{
    const char *base = strrchr(arg, '/');
    base = base ? base + 1 : arg;
    size_t n = strlen(base);
    if (n > 6 && strcmp(base + n - 6, ".index") == 0)
        n -= 6;
    for (size_t i = 0; i < st->num_entries; i++)
        if (strlen(st->entries[i].prefix) == n && strncmp(st->entries[i].prefix, base, n) == 0)
            return (long)i;
    return -1;
}

/* The highest save counter the state knows (listed or ever committed). */
static int64_t highest_counter(const ckpt_state *st)
{
    int64_t h = st->save_counter;
    for (size_t i = 0; i < st->num_entries; i++)
        if (st->entries[i].save_counter > h)
            h = st->entries[i].save_counter;
    return h;
}

static void json_names(ckpt__json_writer *w, const ckpt__restart *c, const ckpt_state *st,
                       int status)
{
    ckpt__json_array_begin(w);
    for (size_t i = 0; i < st->num_entries; i++)
        if (ckpt__restart_status(c, st->entries[i].prefix, st->entries[i].save_counter) == status)
            ckpt__json_string(w, st->entries[i].prefix);
    ckpt__json_array_end(w);
}

static void text_names(const ckpt__restart *c, const ckpt_state *st, int status)
{
    int any = 0;
    for (size_t i = 0; i < st->num_entries; i++)
        if (ckpt__restart_status(c, st->entries[i].prefix, st->entries[i].save_counter) ==
            status) {
            fputc(' ', stdout);
            cli_text_name(stdout, st->entries[i].prefix);
            any = 1;
        }
    if (!any)
        fputs(" none", stdout);
    fputc('\n', stdout);
}

/* What the control makes of the directory, in text or JSON:
 *   {"dir","pinned":NAME|null,"set_aside":[NAME],"dropped":[NAME],"restart_from":NAME|null}
 * (drop records whose checkpoint is gone are not shown: they match nothing). */
static void print_restart(const char *dir, const ckpt__restart *c, const ckpt_state *st, int json)
{
    long point = ckpt__restart_point(c, st);
    if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "dir", dir);
        ckpt__json_key(&w, "pinned");
        if (c->pinned)
            ckpt__json_string(&w, c->pin);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "set_aside");
        json_names(&w, c, st, CKPT__RS_ASIDE);
        ckpt__json_key(&w, "dropped");
        json_names(&w, c, st, CKPT__RS_DROPPED);
        ckpt__json_key(&w, "restart_from");
        if (point >= 0)
            ckpt__json_string(&w, st->entries[point].prefix);
        else
            ckpt__json_null(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
        return;
    }
    printf("pinned: ");
    if (c->pinned)
        cli_text_name(stdout, c->pin);
    else
        fputs("none", stdout);
    printf("\nset aside:");
    text_names(c, st, CKPT__RS_ASIDE);
    printf("dropped:");
    text_names(c, st, CKPT__RS_DROPPED);
    printf("restart from: ");
    if (point >= 0)
        cli_text_name(stdout, st->entries[point].prefix);
    else
        fputs("nothing (the next start begins from scratch)", stdout);
    fputc('\n', stdout);
}

/* The restart control of the state directory `dir` into *c. 0 or EXIT_BAD. */
static int load_control(const cli_command *cmd, const char *dir, ckpt__restart *c)
{
    int lrc = ckpt__restart_read(c, dir);
    if (lrc != CKPT_OK)
        return cli_lib_error(cmd, lrc);
    return 0;
}

/* The state directory, its state and its control, for a DIR operand; with `lock`, read under
 * the directory's lock (taken once it is known to be a checkpoint directory, waiting up to `wait`
 * seconds). 0 or EXIT_BAD. */
static int load(const cli_command *cmd, const char *arg, char **dir, ckpt_state **st,
                ckpt__restart *c, ckpt__dirlock **lock, double wait)
{
    *st = NULL;
    memset(c, 0, sizeof *c);
    char *d = cli_dir_operand(arg);
    *dir = d ? cli_state_dir(d) : NULL;
    free(d);
    if (!*dir)
        return cli_oom(cmd);
    /* first whether it is a checkpoint directory at all (no lock file is made in any other), then
     * the state again under the lock */
    int rc = cli_read_state(cmd, *dir, st);
    if (rc != 0 || !lock)
        return rc ? rc : load_control(cmd, *dir, c);
    ckpt_state_free(*st);
    *st = NULL;
    if ((rc = cli_lock_dir(cmd, *dir, wait, lock)) != 0 ||
        (rc = cli_read_state(cmd, *dir, st)) != 0)
        return rc;
    return load_control(cmd, *dir, c);
}

static int save(const cli_command *cmd, const char *dir, const ckpt__restart *c)
{
    int rc = ckpt__restart_write(c, dir);
    return rc == CKPT_OK ? 0 : cli_lib_error(cmd, rc);
}

static int cmd_pin(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, clear = 0, nops = 0;
    const char *wait_arg = NULL;
    const cli_option opts[] = {
        {"--json", &json, NULL}, {"--clear", &clear, NULL}, {"--wait", NULL, &wait_arg}};
    const cli_spec spec = {opts, 3, 1, 2, "missing DIR", "expected DIR and at most one NAME", 1};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (clear && nops > 1)
        return cli_usage_error(cmd, "--clear takes no NAME");
    double wait = 0;
    if ((rc = cli_lock_wait(cmd, wait_arg, &wait)) != 0)
        return rc;
    char *dir = NULL;
    ckpt_state *st = NULL;
    ckpt__restart c;
    ckpt__dirlock *lock = NULL; /* only to write: showing the pin reads, like list */
    rc = load(cmd, argv[0], &dir, &st, &c, clear || nops == 2 ? &lock : NULL, wait);
    if (rc == 0 && clear) {
        c.pinned = 0;
        rc = save(cmd, dir, &c);
    } else if (rc == 0 && nops == 2) {
        long i = find_entry(st, argv[1]);
        if (i < 0) {
            fprintf(stderr, "mpickpt: %s: %s lists no checkpoint '%s' (see mpickpt list)\n",
                    cmd->name, dir, argv[1]);
            rc = EXIT_BAD;
        }
        const ckpt_state_entry *e = i >= 0 ? &st->entries[i] : NULL;
        if (rc == 0 && ckpt__restart_status(&c, e->prefix, e->save_counter) == CKPT__RS_DROPPED) {
            fprintf(stderr, "mpickpt: %s: %s was dropped; undo that first (mpickpt drop --undo %s "
                            "%s)\n", cmd->name, e->prefix, argv[0], e->prefix);
            rc = EXIT_BAD;
        }
        /* Only a checkpoint that reads back whole is pinned (its index, the sizes of its data
         * files); one only in the nodes' caches is checked by the restore itself. */
        if (rc == 0 && (!e->levels || (e->levels & CKPT_LEVEL_PERSISTENT))) {
            char *prefix = cli_path_join(dir, e->prefix);
            ckpt_reader *r = NULL;
            int orc = prefix ? ckpt_reader_open(&r, prefix) : CKPT_ENOMEM;
            ckpt_reader_free(r);
            free(prefix);
            if (orc != CKPT_OK) {
                const ckpt_error *err = ckpt_error_last();
                fprintf(stderr, "mpickpt: %s: cannot pin %s: %s\n", cmd->name, e->prefix,
                        err && err->message && err->message[0] ? err->message
                                                               : ckpt_strerror(orc));
                rc = EXIT_BAD;
            }
        }
        if (rc == 0) {
            c.pinned = 1;
            snprintf(c.pin, sizeof c.pin, "%s", e->prefix);
            c.pin_counter = e->save_counter;
            c.pin_through = highest_counter(st);
            /* and every checkpoint committed after the state file was last written (a chief
             * that died in between): the manager adopts those at its start, and they are newer
             * than the pin too */
            char stem[256];
            snprintf(stem, sizeof stem, "%s", e->prefix);
            char *dash = strrchr(stem, '-');
            if (dash)
                *dash = '\0';
            ckpt_state *newer = NULL;
            if (dash && ckpt__state_scan_newer(&newer, dir, stem, c.pin_through) == CKPT_OK)
                c.pin_through = highest_counter(newer) > c.pin_through ? highest_counter(newer)
                                                                       : c.pin_through;
            ckpt_state_free(newer);
            ckpt_error_clear(); /* kept: the scan's own error (best effort) before the save */
            rc = save(cmd, dir, &c);
        }
    }
    ckpt__dirlock_release(lock);
    if (rc == 0)
        print_restart(dir, &c, st, json);
    ckpt__restart_clear(&c);
    ckpt_state_free(st);
    free(dir);
    return rc;
}

static int cmd_drop(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, undo = 0, nops = 0;
    const char *wait_arg = NULL;
    const cli_option opts[] = {
        {"--json", &json, NULL}, {"--undo", &undo, NULL}, {"--wait", NULL, &wait_arg}};
    const cli_spec spec = {opts, 3, 2, -1, "expected DIR and at least one NAME", NULL, 1};
    double wait;
    int rc = cli_parse_wait(cmd, &spec, argc, argv, &nops, &wait_arg, &wait);
    if (rc != CLI_GO)
        return rc;
    char *dir = NULL;
    ckpt_state *st = NULL;
    ckpt__restart c;
    ckpt__dirlock *lock = NULL;
    rc = load(cmd, argv[0], &dir, &st, &c, &lock, wait);
    /* every NAME checked before anything is written */
    for (int k = 1; rc == 0 && k < nops; k++) {
        long i = find_entry(st, argv[k]);
        if (i < 0) {
            fprintf(stderr, "mpickpt: %s: %s lists no checkpoint '%s' (see mpickpt list)\n",
                    cmd->name, dir, argv[k]);
            rc = EXIT_BAD;
            break;
        }
        const ckpt_state_entry *e = &st->entries[i];
        int s = ckpt__restart_status(&c, e->prefix, e->save_counter);
        if (undo) {
            if (!ckpt__restart_remove_drop(&c, e->prefix, e->save_counter))
                fprintf(stderr, "mpickpt: %s: %s was not dropped\n", cmd->name, e->prefix);
        } else if (s == CKPT__RS_PINNED) {
            fprintf(stderr, "mpickpt: %s: %s is pinned; clear the pin first (mpickpt pin --clear "
                            "%s)\n", cmd->name, e->prefix, argv[0]);
            rc = EXIT_BAD;
        } else {
            int arc = ckpt__restart_add_drop(&c, e->prefix, e->save_counter);
            if (arc != CKPT_OK)
                rc = cli_lib_error(cmd, arc);
        }
    }
    if (rc == 0)
        rc = save(cmd, dir, &c);
    ckpt__dirlock_release(lock);
    if (rc == 0) {
        if (!undo && ckpt__restart_point(&c, st) < 0)
            fprintf(stderr, "mpickpt: %s: warning: no checkpoint of %s is left to restore: the "
                            "next start begins from scratch\n", cmd->name, dir);
        print_restart(dir, &c, st, json);
    }
    ckpt__restart_clear(&c);
    ckpt_state_free(st);
    free(dir);
    return rc;
}

const cli_command cli_cmd_pin = {
    "pin", "[--json] [--clear] [--wait SECONDS] DIR [NAME]",
    "choose the checkpoint the next restore starts from (or show or clear the pin)",
    "  Pins checkpoint NAME (ckpt-4, as `mpickpt list` shows it) of DIR: the next start of a job\n"
    "  in DIR restores it. The checkpoints newer than it that DIR lists now are set aside: never\n"
    "  restored and never deleted by retention while the pin stays. Checkpoints the job commits\n"
    "  after the pin was set are newer than it and restored as usual, so stop the job first\n"
    "  (mpickpt halt, scancel) and pin before it starts again. Only a checkpoint whose index\n"
    "  and data files read back is pinned. --clear removes the pin: what was set aside counts\n"
    "  again (retention, restores). Without NAME or --clear: shows the pin. The pin is kept in\n"
    "  DIR/restart (or DIR/chief/restart); no checkpoint and no state file is changed.\n"
    "  Setting or clearing it is refused while a job holds DIR (its lock; the message names\n"
    "  the job's host and pid): stop the job first. --wait S waits up to S seconds for it\n"
    "  (default: MPICKPT_LOCK_WAIT, else 0).\n"
    "  --json   {\"dir\",\"pinned\":NAME|null,\"set_aside\":[NAME],\"dropped\":[NAME],\n"
    "           \"restart_from\":NAME|null}\n",
    cmd_pin};

const cli_command cli_cmd_drop = {
    "drop", "[--json] [--undo] [--wait SECONDS] DIR NAME...",
    "retire checkpoints: never restored, deleted by the manager's next retention",
    "  Drops the named checkpoints of DIR (like scr_index --drop): a job never restores them\n"
    "  again and the next job's manager deletes them at its first save (the newest one only once\n"
    "  a newer one exists). The pinned checkpoint cannot be dropped. --undo takes a drop back\n"
    "  while the checkpoint still exists. Warns when no checkpoint is left to restore. Kept in\n"
    "  DIR/restart with the pin; --json prints what `mpickpt pin --json` prints. Refused while\n"
    "  a job holds DIR (its lock; the message names the job's host and pid): stop the job\n"
    "  first. --wait S waits up to S seconds for it (default: MPICKPT_LOCK_WAIT, else 0).\n",
    cmd_drop};
