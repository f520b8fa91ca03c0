/* mpickpt gc: removes the debris of crashed or failed saves in DIR and DIR/chief/ (the library's
 * ckpt_gc), printing each path once, under the lock of each directory it cleans (refused while a
 * job holds it; --wait waits). */
#include "cli.h"

#include "index.h" /* lib/index.h: ckpt__gc_locked */
#include "mpickpt/state.h"
#include "strhash.h" /* lib/strhash.h */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gc_report_state {
    int dry_run;
    ckpt__json_writer *json; /* --json: the paths go into its "removed" array */
    char **seen; /* canonical paths reported so far: DIR and DIR/chief share workertemp_* */
    size_t count;
    /* a hash set of seen[] (open addressing: index + 1, 0 empty; at most half full), so that
     * a directory with many removed paths is not checked in quadratic time */
    size_t *slots, nslots;
    int oom;
} gc_report_state;

/* The slot of `path` in the set: where it is, or the empty one where it belongs. */
static size_t seen_slot(const gc_report_state *st, const char *path)
{
    size_t mask = st->nslots - 1, i = (size_t)ckpt__strhash(path, strlen(path)) & mask;
    while (st->slots[i] && strcmp(st->seen[st->slots[i] - 1], path) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Adds `path` (malloc'd, taken) unless seen: 1 added, 0 seen before (freed), -1 out of memory
 * (freed). */
static int seen_add(gc_report_state *st, char *path)
{
    if (2 * (st->count + 1) > st->nslots) {
        size_t n = st->nslots ? 2 * st->nslots : 64;
        size_t *slots = n <= SIZE_MAX / sizeof *slots ? calloc(n, sizeof *slots) : NULL;
        if (!slots) {
            free(path);
            return -1;
        }
        free(st->slots);
        st->slots = slots;
        st->nslots = n;
        for (size_t k = 0; k < st->count; k++)
            st->slots[seen_slot(st, st->seen[k])] = k + 1;
    }
    size_t i = seen_slot(st, path);
    if (st->slots[i]) {
        free(path);
        return 0;
    }
    if (cli_grow(&st->seen, st->count, sizeof *st->seen) != 0) {
        free(path);
        return -1;
    }
    st->seen[st->count++] = path;
    st->slots[i] = st->count;
    return 1;
}

/* The real path of path's parent joined with its base name (the path itself may be gone),
 * or a copy of path when the parent cannot be resolved. malloc'd; NULL when out of memory. */
static char *canonical_path(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 1;
    char *parent = malloc(plen + 1);
    if (!parent)
        return NULL;
    if (slash)
        memcpy(parent, path, plen);
    else
        parent[0] = '.';
    parent[plen] = '\0';
    if (plen == 0) /* "/name" */
        strcpy(parent, "/");
    char *real = realpath(parent, NULL);
    free(parent);
    char *out = real ? cli_path_join(real, slash ? slash + 1 : path) : cli_path_join("", path);
    free(real);
    return out;
}

/* ckpt_gc_cb: one stdout line per path, each path once. */
static void gc_report(const char *path, const char *why, void *payload)
{
    gc_report_state *st = payload;
    char *canon = canonical_path(path);
    if (!canon) {
        st->oom = 1;
        return;
    }
    int added = seen_add(st, canon);
    if (added < 0)
        st->oom = 1;
    if (added <= 0)
        return;
    if (st->json) {
        ckpt__json_object_begin(st->json);
        ckpt__json_kstring(st->json, "path", path);
        ckpt__json_kstring(st->json, "why", why ? why : "");
        ckpt__json_object_end(st->json);
        return;
    }
    printf("%s ", st->dry_run ? "would remove" : "removed");
    cli_text_name(stdout, path);
    if (why && why[0]) {
        printf(" (");
        cli_text_name(stdout, why);
        printf(")");
    }
    fputc('\n', stdout);
}

static int cmd_gc(const cli_command *cmd, int argc, char **argv)
{
    int dry_run = 0, json = 0, nops = 0;
    const char *wait_arg = NULL;
    const cli_option opts[] = {
        {"--dry-run", &dry_run, NULL}, {"--json", &json, NULL}, {"--wait", NULL, &wait_arg}};
    const cli_spec spec = {opts, 3, 1, 1, "missing DIR", "expected one DIR", 1};
    double wait;
    int rc = cli_parse_wait(cmd, &spec, argc, argv, &nops, &wait_arg, &wait);
    if (rc != CLI_GO)
        return rc;
    char *dir = cli_dir_operand(argv[0]);
    char *chief = dir ? cli_path_join(dir, CKPT__CHIEF_DIR) : NULL;
    if (!chief) {
        free(dir);
        return cli_oom(cmd);
    }

    ckpt__json_writer w;
    gc_report_state st = {dry_run, json ? &w : NULL, NULL, 0, NULL, 0, 0};
    if (json) {
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "dir", dir);
        ckpt__json_kbool(&w, "dry_run", dry_run);
        ckpt__json_key(&w, "removed");
        ckpt__json_array_begin(&w);
    }
    rc = ckpt__gc_locked(dir, dry_run, gc_report, &st, NULL, wait);
    if (rc == CKPT_OK && cli_is_dir(chief))
        rc = ckpt__gc_locked(chief, dry_run, gc_report, &st, NULL, wait);
    char error[1024] = "";
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        snprintf(error, sizeof error, "%s", e && e->message[0] ? e->message : ckpt_strerror(rc));
        cli_lib_error(cmd, rc);
    } else if (st.oom) {
        snprintf(error, sizeof error, "out of memory");
        cli_oom(cmd);
    }
    if (json) {
        ckpt__json_array_end(&w);
        ckpt__json_kuint(&w, "count", st.count);
        ckpt__json_kbool(&w, "ok", !error[0]);
        ckpt__json_key(&w, "error");
        if (error[0])
            ckpt__json_string(&w, error);
        else
            ckpt__json_null(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
    } else {
        printf("gc ");
        cli_text_name(stdout, dir);
        printf(": %s %zu path(s)%s\n", dry_run ? "would remove" : "removed", st.count,
               rc != CKPT_OK ? " before failing" : "");
    }
    for (size_t i = 0; i < st.count; i++)
        free(st.seen[i]);
    free(st.seen);
    free(st.slots);
    free(chief);
    free(dir);
    return rc == CKPT_OK && !st.oom ? EXIT_OK : EXIT_BAD;
}

const cli_command cli_cmd_gc = {
    "gc", "[--dry-run] [--json] [--wait SECONDS] DIR",
    "remove the debris of crashed or failed saves",
    "  Removes, in DIR and in DIR/chief/: *_temp/ directories, data files (*.data-*) whose\n"
    "  index does not exist, and temp files (*.tmp-PID); and the non-chief ranks'\n"
    "  workertemp_*/ directories (in DIR, or next to DIR when DIR is a chief/). Committed\n"
    "  checkpoints are never touched. It holds the directory's lock while it removes: a job\n"
    "  using DIR makes it fail, naming the job (host, pid); stop the job first (mpickpt halt).\n"
    "  Prints each path removed and why, then \"gc DIR: removed N path(s)\".\n"
    "  --dry-run  only print what would be removed (\"would remove\"; takes no lock, so with a\n"
    "             job running it also lists that job's in-flight files)\n"
    "  --wait S   wait up to S seconds for a job holding DIR to end (default:\n"
    "             MPICKPT_LOCK_WAIT, else 0)\n"
    "  --json     one object: {\"dir\",\"dry_run\",\"removed\":[{\"path\",\"why\"}],\"count\",\n"
    "             \"ok\",\"error\"} (error: null, or the message also printed on stderr)\n",
    cmd_gc};
