/* The cooperative restore (restore_coop.c): pieces several ranks read are read by one and
 * forwarded. Not installed. */
#ifndef MPICKPT_RESTORE_COOP_H
#define MPICKPT_RESTORE_COOP_H

#include "saver_internal.h"

#include "mpickpt.pb-c.h"

#include <stddef.h>
#include <stdint.h>

/* The chief's plan: per rank its share of the index without the pieces a reader forwards to it,
 * and (NULL when none) the list of those pieces; `active`: some piece is forwarded. */
typedef struct ckpt__coop_shares {
    int size, active;
    uint8_t **share;
    size_t *share_len;
    uint8_t **coop;
    size_t *coop_len;
} ckpt__coop_shares;

/* wants[r]: rank r's wants (restore.c's build_wants); node_of[r]: its node. */
int ckpt__coop_plan(const Mpickpt__Index *idx, int size, Mpickpt__Fragment *const *wants,
                    const int *node_of, ckpt__coop_shares *out);
void ckpt__coop_shares_free(ckpt__coop_shares *o);

/* A rank's list, opened (its chunk buffer allocated); run: its pieces read or received, copied
 * into its registrations. Every rank whose share said `active` runs it (with no items: nothing). */
typedef struct ckpt__coop ckpt__coop;
int ckpt__coop_open(ckpt__coop **out, const char *prefix, const uint8_t *bytes, size_t len);
int ckpt__coop_run(ckpt_saver *s, ckpt__coop *c);
void ckpt__coop_free(ckpt__coop *c);

#endif
