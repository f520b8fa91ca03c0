/*
 * Plan: what a rank registered and the pieces it stores at a save (docs/design.md §4.1), as plain C
 * structs. No MPI. Not installed.
 *
 * Contract:
 *  - ckpt__regs_add() checks what can be checked on one rank (name UTF-8 and unique among this
 *    rank's stored names, dtype, shape, slice inside the shape, data present) and appends.
 *  - ckpt__plan_pieces() applies the sharding policy: every registration except blobs and
 *    replicated tensors whose primary is another rank becomes pieces of at most max_shard_bytes
 *    (<= 0: one piece per registration), never empty unless the registration is.
 *  - ckpt__piece_bytes() gives a piece's bytes contiguously, from the source buffer when they are
 *    contiguous there, else copied into a scratch buffer the caller keeps.
 *  - The protobuf message is made only where the plan leaves the rank: ckpt__plan_fragment() for
 *    the allgather that checks every rank's registrations (mpi/save_protocol.c), and
 *    ckpt__plan_check_replicated() on the merged result.
 */
#ifndef MPICKPT_PLAN_H
#define MPICKPT_PLAN_H

#include "internal.h"
#include "mpickpt.pb-c.h"
#include "mpickpt/saver.h"
#include "mpickpt/slice.h"

#include <stddef.h>
#include <stdint.h>

/* One registration. */
typedef struct ckpt__reg {
    char *name;   /* as registered */
    char *stored; /* name in the checkpoint (components and blobs get a per-rank suffix) */
    ckpt_dtype dtype;
    ckpt_shape shape;
    ckpt_slice slice; /* what this rank holds (whole shape except for partitioned) */
    ckpt_kind kind;
    void *data;
    ckpt_blob_callbacks cb;
    void *payload;
} ckpt__reg;

typedef struct ckpt__regs {
    ckpt__reg *v;
    size_t n, cap;
    /* every stored name (a partitioned tensor's at its first slice): an open-addressing table
     * of index + 1, so a registration is checked in O(1) */
    size_t *names;
    size_t names_cap, names_n;
} ckpt__regs;

/* One piece this rank stores at a save: a box of one registration. */
typedef struct ckpt__piece {
    size_t reg;
    ckpt_slice slice;
} ckpt__piece;

typedef struct ckpt__pieces {
    ckpt__piece *v;
    size_t n;
} ckpt__pieces;

/* Appends a registration (strings copied); `rank` names this rank in messages. */
int ckpt__regs_add(ckpt__regs *regs, int rank, const char *name, const char *stored,
                   ckpt_dtype dtype, const ckpt_shape *shape, const ckpt_slice *slice,
                   ckpt_kind kind, void *data);
void ckpt__regs_clear(ckpt__regs *regs);
void ckpt__regs_free(ckpt__regs *regs);

/* The rank that writes each replicated registration's one copy: *out[i] for registration i, -1
 * for the other kinds (*out malloc'd; NULL when there is no replicated one). The replicated
 * tensors, largest first and then by stored name, go each to the rank with the fewest bytes so far
 * (then the lowest rank): the writes are balanced (the most loaded rank writes at most the mean
 * plus one tensor), and every rank that registered the same replicated tensors, in any order,
 * computes the same writers (ranks that registered different ones fail the save's checks). */
int ckpt__replica_writers(const ckpt__regs *regs, int size, int **out);

/* The pieces rank `rank` of `size` stores for `regs` (replaces *out's contents). */
int ckpt__plan_pieces(ckpt__pieces *out, const ckpt__regs *regs, int rank, int size,
                      int64_t max_shard_bytes);
void ckpt__pieces_free(ckpt__pieces *p);

/* Bytes of piece p of `regs`. */
size_t ckpt__piece_len(const ckpt__regs *regs, const ckpt__piece *p);

/* A growable buffer kept across saves (the copies of non-contiguous pieces). */
typedef struct ckpt__scratch {
    void *buf;
    size_t size;
} ckpt__scratch;

/* Piece p's bytes, contiguous: a pointer into `src` (the registration's buffer, or its snapshot)
 * or into `scratch`. */
int ckpt__piece_bytes(const ckpt__reg *g, const void *src, const ckpt__piece *p,
                      ckpt__scratch *scratch, const void **out, size_t *len);

/* This rank's registrations (blobs excepted) as a fragment for the plan's allgather: one tensor
 * entry per registration with the pieces this rank stores for it (none for a replicated tensor
 * whose primary is another rank: the entry still proves registration). Free with
 * ckpt__fragment_free_built(). */
int ckpt__plan_fragment(Mpickpt__Fragment *f, const ckpt__regs *regs, const ckpt__pieces *pieces,
                        int rank);

/* Every rank registered each replicated tensor of the merged plan (dtype and shape are checked by
 * the merge): CKPT_EMISMATCH naming the tensor otherwise. */
int ckpt__plan_check_replicated(const Mpickpt__Index *plan, Mpickpt__Fragment *const *frags,
                                size_t nfrags, int size);

#endif
