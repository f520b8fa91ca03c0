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

/* A rank's list, held (restore_coop_run.c). ckpt__coop_new: its items, its trees' arrays and its
 * two chunk buffers allocated (MPICKPT_FAULT "<rank>:coop-buf": as if the buffers could not be
 * had); *out NULL when they cannot be. That is settled before any transfer (ckpt__coop_settle).
 * ckpt__coop_index: the index that comes with the list opened; when it cannot be (`no_index`, an
 * injected fault, or the rank's own failure: the status returned) the rank still takes part: it
 * reads nothing, copies nothing, and passes on what it receives with a failed status where it is
 * a piece's reader.
 * run: its pieces read or received, copied into its registrations, passed on; returns this
 * rank's status (a reader's failure received as its own). Every rank whose share said `active`
 * and that has a list runs it, whatever its own status, once the settle said every rank can. */
typedef struct ckpt__coop ckpt__coop;
int ckpt__coop_new(ckpt__coop **out, const uint8_t *bytes, size_t len, int rank);
int ckpt__coop_index(ckpt__coop *c, const char *prefix, const uint8_t *bytes, int no_index);
int ckpt__coop_run(ckpt_saver *s, ckpt__coop *c);
void ckpt__coop_free(ckpt__coop *c);

/* Whether every rank can take part (point-to-point, through the chief; every rank whose share
 * said `active`): `mine` is this rank's status of ckpt__coop_new (or of its list, or the chief's
 * sends of the shares). Returns CKPT_OK, else the lowest failing rank's failure (the chief's
 * first) with its message on every rank, the same text everywhere: then no rank runs its list.
 * Collective over point-to-point messages only. */
int ckpt__coop_settle(ckpt_saver *s, int mine);

/* Bytes this process sent to ranks of other nodes in the transfers (a counter for tests). */
extern uint64_t ckpt__coop_cross_node_bytes;

#endif
