/*
 * Storage levels (docs/levels.md, docs/design.md §9): the pure parts, no MPI, no I/O.
 *
 *   cache directory   a node-local directory per node, from a pattern: "%n" is the node's index
 *                     (0 .. nodes-1, as mpi/save_node.c numbers nodes: by their lowest rank),
 *                     "%%" a percent sign; any other "%" is an error, so a typo never writes
 *                     every node's data into one directory.
 *   partners          with redundancy `partner`, each node's files are copied to its partner
 *                     node, chosen so that the two are in different failure groups (a node is
 *                     its own group unless the user names groups, e.g. racks). Nodes are put in
 *                     a ring where neighbours are in different groups wherever that is possible
 *                     (sorted by group, largest first, into the even then the odd positions),
 *                     (without groups, node order: k's partner is k + 1, the last's is 0),
 *                     and a node's partner is the next node in the ring of another group: when
 *                     no group holds more than half of the nodes, every node holds exactly one
 *                     other node's copies (the map is a permutation), like SCR's PARTNER and
 *                     FTI's L2; otherwise some nodes hold several.
 */
#ifndef MPICKPT_LEVELS_H
#define MPICKPT_LEVELS_H

#include "internal.h"

#include <stddef.h>

/* The cache directory of node `node` from `pattern` into out[size]. CKPT_EINVAL for an empty
 * pattern, an unknown "%" sequence, or a result that does not fit. */
int ckpt__cache_dir(char *out, size_t size, const char *pattern, int node);

/* partner[k] = node k's partner (nnodes >= 2), in a group other than k's; groups[k] is node k's
 * failure group (any int; NULL: each node its own group). CKPT_EINVAL when nnodes < 2 or every
 * node is in one group (no partner could survive the loss of that group); CKPT_ENOMEM. */
int ckpt__partner_nodes(int *partner, const int *groups, int nnodes);

#endif
