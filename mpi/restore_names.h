/* Strict restores' comparison of names (restore_names.c): the chief's notes while it serves the
 * shares of the index (restore.c), the lists broadcast to every rank, the strict failure's
 * message. Not installed. */
#ifndef MPICKPT_RESTORE_NAMES_H
#define MPICKPT_RESTORE_NAMES_H

#include "saver_internal.h"

#include "mpickpt.pb-c.h"

#include <stddef.h>
#include <stdint.h>

/* The Python package's names (its record of plain values): neither missing nor unexpected when
 * names are compared; the package compares what they hold itself. */
#define CKPT__NAMES_RESERVED "__mpickpt__/"

/* The chief's comparison: which index entries some rank wants (used), and the wanted names the
 * index lacks (missing, strdup'd, unsorted with duplicates until the lists are made). */
typedef struct ckpt__names {
    const Mpickpt__Index *idx;
    uint8_t *used;
    char **miss;
    size_t nmiss, capmiss;
    int rc;
} ckpt__names;

/* The chief: rank wants `w` (build_wants' fragment) noted. */
void ckpt__names_note(ckpt__names *nc, const Mpickpt__Fragment *w);

/* Collective: the chief makes the lists (when `local` is CKPT_OK) and broadcasts them with its
 * status; every rank gets them in *miss and *unexp (NULL in: set only when they arrive) and
 * *mismatch set when `strict` and either list is not empty. `nc` is freed (the chief's; every
 * other rank's is zeroed). Returns `local`, else the failure met here. */
int ckpt__names_share(ckpt_saver *s, int local, ckpt__names *nc, int strict,
                      ckpt_name_list **miss, ckpt_name_list **unexp, int *mismatch);

/* The strict failure's message (the same on every rank: the lists are), CKPT_EMISMATCH. */
int ckpt__names_mismatch_error(const char *prefix, const ckpt_name_list *miss,
                               const ckpt_name_list *unexp);

#endif
