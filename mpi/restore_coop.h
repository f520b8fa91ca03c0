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

/* The list's items (restore_coop.c): per piece {id, reader, members, bytes, rows}, then per
 * member {rank, first row, end row, node}. */
#define COOP_ITEM_HEAD 5
#define COOP_MEMBER 4

/* A rank's list, opened (restore_coop_run.c). *out is set whenever the rank can take part in the
 * transfers (its items and chunk buffers held), even when the index that comes with them could
 * not be opened (`no_index`, an injected fault, or its own failure: the status returned): such a
 * rank reads nothing, copies nothing, and passes on what it receives with a failed status where
 * it is a piece's reader. *out NULL only when its items or buffers cannot be had.
 * run: its pieces read or received, copied into its registrations, passed on; returns this
 * rank's status (a reader's failure received as its own). Every rank whose share said `active`
 * and that has a list runs it, whatever its own status. */
typedef struct ckpt__coop ckpt__coop;
int ckpt__coop_open(ckpt__coop **out, const char *prefix, const uint8_t *bytes, size_t len,
                    int no_index);
int ckpt__coop_run(ckpt_saver *s, ckpt__coop *c);
void ckpt__coop_free(ckpt__coop *c);

/* Bytes this process sent to ranks of other nodes in the transfers (a counter for tests). */
extern uint64_t ckpt__coop_cross_node_bytes;

#endif
