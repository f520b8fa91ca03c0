/* Writes the state file `DIR/checkpoint` for the committed checkpoints in DIR, the way the
 * manager would have, for the CLI tests (tests/scripts/test_cli_manage.sh): ckpt_state_scan()
 * then ckpt__state_write().
 *
 *   make_state DIR [--keep N] [--end-of-epoch]
 *
 *   --keep N          keep only the newest N entries (retention; 0 writes an empty state)
 *   --end-of-epoch    mark every entry as saved at the end of its epoch
 */
#include "index.h"
#include "mpickpt/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(int rc, const char *what)
{
    const ckpt_error *e = ckpt_error_last();
    fprintf(stderr, "make_state: %s: %s\n", what,
            e && e->message && e->message[0] ? e->message : ckpt_strerror(rc));
    return 1;
}

int main(int argc, char **argv)
{
    long keep = -1;
    int end_of_epoch = 0;
    for (int i = 2; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc) {
            keep = strtol(argv[++i], &end, 10);
            if (*argv[i] == '\0' || *end != '\0' || keep < 0)
                argc = 0;
        } else if (strcmp(argv[i], "--end-of-epoch") == 0) {
            end_of_epoch = 1;
        } else {
            argc = 0;
        }
    }
    if (argc < 2) {
        fprintf(stderr, "usage: make_state DIR [--keep N] [--end-of-epoch]\n");
        return 2;
    }
    const char *dir = argv[1];
    ckpt_state *st = NULL;
    int rc = ckpt_state_scan(&st, dir);
    if (rc != CKPT_OK) {
        ckpt_state_free(st);
        return fail(rc, dir);
    }
    while (keep >= 0 && st->num_entries > (size_t)keep)
        ckpt_state_remove(st, 0);
    for (size_t i = 0; i < st->num_entries; i++)
        st->entries[i].end_of_epoch = end_of_epoch;
    if (st->num_entries == 0)
        st->latest[0] = '\0';
    rc = ckpt__state_write(st, dir);
    ckpt_state_free(st);
    return rc == CKPT_OK ? 0 : fail(rc, dir);
}
