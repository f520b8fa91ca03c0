/*
 * The restart control of a checkpoint directory (docs/operations.md "Choosing the restart
 * point"): `<dir>/restart`, written by `mpickpt pin` and `mpickpt drop` only, read by the manager's
 * chief when it starts (and before each save, for drops). No MPI.
 *
 * A text file, one record per line ('#' starts a comment line):
 *   pin <name> <counter> <through>   the next restore starts from checkpoint <name> (save counter
 *                                    <counter>); the checkpoints with <counter> < save counter <=
 *                                    <through> (the newest one listed when the pin was set) are set
 *                                    aside: never restored, never deleted, until the pin is cleared
 *   drop <name> <counter>            checkpoint <name> is retired: never restored, deleted by the
 *                                    manager's next retention
 * A record applies to the state entry with that name AND that counter only, so a record that
 * outlived its checkpoint matches nothing. At most one pin; a pinned checkpoint is never dropped.
 */
#ifndef MPICKPT_RESTART_H
#define MPICKPT_RESTART_H

#include "internal.h"
#include "mpickpt/state.h"

#include <stddef.h>
#include <stdint.h>

/* The control file's name in the directory of the state file. */
#define CKPT__RESTART_FILE "restart"
/* Larger control files are refused as damaged. */
#define CKPT__RESTART_MAX_BYTES (1u << 20)

typedef struct ckpt__restart_drop {
    char name[256];
    int64_t counter;
} ckpt__restart_drop;

typedef struct ckpt__restart {
    int pinned;          /* a pin record exists */
    char pin[256];
    int64_t pin_counter;
    int64_t pin_through; /* set aside: pin_counter < counter <= pin_through */
    /* Sorted by (counter, name), each once: lookups are binary searches, so a control file of
     * CKPT__RESTART_MAX_BYTES of records is read, checked and consulted in n log n. */
    ckpt__restart_drop *drops;
    size_t num_drops;
    size_t cap_drops; /* allocated slots of drops */
} ckpt__restart;

/* What a state entry is under the control. */
enum {
    CKPT__RS_NORMAL = 0,
    CKPT__RS_PINNED = 1,    /* the pinned checkpoint */
    CKPT__RS_ASIDE = 2,     /* newer than the pin and listed when it was set */
    CKPT__RS_DROPPED = 3    /* dropped (and not the pin) */
};

/* Reads `<dir>/restart` into *c (emptied first). A missing file is an empty control (CKPT_OK);
 * anything but a regular file of at most CKPT__RESTART_MAX_BYTES, or a line that is not a record,
 * is CKPT_ECORRUPT naming the file and the line. The directory is opened with
 * ckpt__ckptdir_open() rules (no links). */
int ckpt__restart_read(ckpt__restart *c, const char *dir);

/* The same from a buffer (`shown` names it in errors). */
int ckpt__restart_parse(ckpt__restart *c, const char *buf, size_t len, const char *shown);

/* Writes `<dir>/restart` atomically; an empty control removes the file. */
int ckpt__restart_write(const ckpt__restart *c, const char *dir);

/* Serializes into a malloc'd NUL-terminated text (for the broadcast and the file); the drops in
 * (counter, name) order. */
int ckpt__restart_format(char **out, size_t *len, const ckpt__restart *c);

/* Frees the drops; the control is empty afterwards. */
void ckpt__restart_clear(ckpt__restart *c);

/* CKPT__RS_* of a checkpoint with this name and counter (a binary search). */
int ckpt__restart_status(const ckpt__restart *c, const char *name, int64_t counter);

/* Adds a drop record in its place (no duplicate); removes one (returns 1 when it existed). */
int ckpt__restart_add_drop(ckpt__restart *c, const char *name, int64_t counter);
int ckpt__restart_remove_drop(ckpt__restart *c, const char *name, int64_t counter);

/* The index of the entry the next restore starts from when nothing fails: the newest that is
 * neither set aside nor dropped; -1 when there is none. */
long ckpt__restart_point(const ckpt__restart *c, const ckpt_state *st);

/* What ckpt__restart_candidate() makes of an entry: >= 0 a restore may use it (the values of
 * ckpt_restart_status, mpickpt/manager.h), < 0 why none may. */
enum {
    CKPT__CAND_NORMAL = 0,     /* restore_or_initialize may start from it or fall back to it */
    CKPT__CAND_PINNED = 1,     /* the pinned checkpoint */
    CKPT__CAND_BEHIND_PIN = 2, /* older than the pin: restored only when chosen */
    CKPT__CAND_DROPPED = -1,
    CKPT__CAND_ASIDE = -2,
    CKPT__CAND_LEVEL = -3      /* on none of the levels the reader uses */
};

/*
 * The one rule of which checkpoint a restore may use (the manager's restores, its restorable
 * list and latest, and `mpickpt.newest`/`open(DIR)` through ckpt_newest_restorable): CKPT__CAND_*
 * of entry e under control c. *levels: e's levels (0 meaning persistent, as written before
 * levels existed) among `readable` (CKPT_LEVEL_* the reader uses).
 */
int ckpt__restart_candidate(const ckpt__restart *c, const ckpt_state_entry *e, unsigned readable,
                            unsigned *levels);

/* The pinned checkpoint is not reachable (behind a damaged or missing newer one, or not
 * listed): CKPT_ENOTFOUND naming the pin and the ways out. */
int ckpt__restart_pin_error(const ckpt__restart *c, const char *dir, int pin_listed);


#endif
