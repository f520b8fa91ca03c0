/* Internal helpers of the MPI layer. */
#ifndef MPICKPT_MPI_INTERNAL_H
#define MPICKPT_MPI_INTERNAL_H

#include "internal.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>

/* Maps an MPI error code to CKPT_EMPI with MPI's own text; returns CKPT_EMPI. */
int ckpt__mpi_error(int mpi_rc, const char *what);

#include "fault.h" /* MPICKPT_FAULT: ckpt__fault, ckpt__fault_hold */

/* Byte transfers of any size (mpi/transfer.c): 64-bit lengths, carried in chunks of at most
 * `chunk` bytes (CKPT__MPI_CHUNK_DEFAULT, or MPICKPT_MPI_CHUNK_BYTES decided by rank 0). */
#define CKPT__MPI_CHUNK_DEFAULT ((uint64_t)1 << 30)
int ckpt__bcast_bytes(MPI_Comm comm, int root, void *buf, uint64_t len, uint64_t chunk);
int ckpt__send_bytes(MPI_Comm comm, int dest, int tag, const void *buf, uint64_t len,
                     uint64_t chunk);
int ckpt__recv_bytes(MPI_Comm comm, int src, int tag, void *buf, uint64_t len, uint64_t chunk);
/* The nonblocking sends (receives) of `len` bytes at `buf` to (from) rank `peer`, one per chunk:
 * their requests go to reqs[*q], reqs[*q + 1], ..., *q advanced past each post. Stops at a post
 * that fails (its slot counted): CKPT_EMPI, "MPI_Isend <what> failed" ("MPI_Irecv ..."). */
int ckpt__isend_bytes(MPI_Comm comm, int peer, int tag, const void *buf, uint64_t len,
                      uint64_t chunk, MPI_Request *reqs, size_t *q, const char *what);
int ckpt__irecv_bytes(MPI_Comm comm, int peer, int tag, void *buf, uint64_t len, uint64_t chunk,
                      MPI_Request *reqs, size_t *q, const char *what);
/* Gathers every rank's `len` bytes of `buf` at `root`: on the root *all holds them end to end
 * and *offs (size + 1 entries) where rank r's start; free both. `local` is this rank's status
 * (a failed rank contributes nothing); `scratch` holds 2 x size int64 on the root (unused
 * elsewhere). Collective; the same status on every rank, agreed (transfer.c). */
int ckpt__gather_bytes(MPI_Comm comm, int root, int local, const void *buf, uint64_t len,
                       uint64_t chunk, int64_t *scratch, uint8_t **all, uint64_t **offs);
/* The same gather without the agreement: when some rank's `status` is not CKPT_OK (or the root
 * cannot hold the total), nothing is transferred, *failed is set on every rank and each returns
 * only an error of its own made here (the root's out of memory, an MPI failure), else CKPT_OK: a
 * later vote carries the failing rank's message. For the two steps of a hierarchical merge,
 * where the ranks of one communicator do not all meet the next. */
int ckpt__gather_bytes_quiet(MPI_Comm comm, int root, int status, const void *buf, uint64_t len,
                             uint64_t chunk, int64_t *scratch, uint8_t **all, uint64_t **offs,
                             int *failed);

/* One collective for a status and some maxima: every rank passes its status and `n` values; on
 * return vals[] hold the maxima over ranks. When any status is not CKPT_OK, every rank returns the
 * same error (the failing rank's message, through ckpt_mpi_agree). At most 16 values. */
int ckpt__mpi_vote(MPI_Comm comm, int local, double *vals, int n);

/* The cache level's internals, for the library's own use (the public API over them is
 * include/mpickpt/saver.h's ckpt_saver_cache_*, in saver_cache.c; the manager calls only that). */
struct ckpt_saver;
/* The cache level (docs/levels.md, mpi/cache_dir.c): nodes, this node's cache directory from
 * `pattern` (%n: the node), checked and held open (lib/privdir.h), and in it the subdirectory of
 * the checkpoint directory whose identity is `identity` (lib/identity.h); partners when
 * `redundancy` is CKPT__REDUNDANCY_PARTNER, in failure groups named by `group` (NULL: every node
 * its own). `persistent` (NULL: none) is the checkpoint directory: the cache may be neither it nor
 * inside or above it, and the metrics of cache saves go there. Collective; freed with the saver. */
enum { CKPT__REDUNDANCY_NONE = 0, CKPT__REDUNDANCY_PARTNER = 1 };
int ckpt__saver_cache_init(struct ckpt_saver *s, const char *pattern, int redundancy,
                           const char *group, const char *identity, const char *persistent);
void ckpt__saver_cache_free(struct ckpt_saver *s);
/* Each node's leader takes the lock (lib/dirlock.h) of its node's cache directory of this
 * checkpoint directory, waiting up to `wait_seconds`, and holds it until the cache level is freed
 * (ckpt__saver_cache_free): one job per node cache, as per checkpoint directory. Collective. */
int ckpt__cache_lock(struct ckpt_saver *s, double wait_seconds);
/* Restores checkpoint `name` from the cache level (each rank's node's directory; pieces other
 * nodes hold fetched over MPI): ckpt_saver_restore's contract otherwise. `*unavailable` (may be
 * NULL), the same on every rank: 1 when it failed before reading the registered values (the
 * cache's copy cannot be made whole or used on this job's shape), 0 when the copy was whole and
 * what was registered did not match or read well. Collective. */
struct ckpt_restore_options;
struct ckpt_restore_info;
int ckpt__saver_restore_cache(struct ckpt_saver *s, const char *name,
                              const struct ckpt_restore_options *opts,
                              struct ckpt_restore_info *info, int *unavailable);
/* A checkpoint in the node cache of another shape than this job's, which ckpt__cache_drain does
 * not drain: each rank (per-node: each node's leader) copies its own data file, named for this
 * job, and the writer's files are not those. */
typedef struct ckpt__drain_shape {
    int other;              /* 1: of another shape, nothing done; 0: drained, or failed */
    int of, per_node;       /* the writer's count of data files (ranks, or nodes) and layout */
    int job_of, job_per_node; /* this job's */
} ckpt__drain_shape;
/* Copies checkpoint `name` from the cache level into directory `dir` and commits it there with
 * the cache's index (mpi/cache_drain.c); when the chief's copy of its index names files of
 * another shape than this job's, nothing is done and *shape (may be NULL) says so on every rank:
 * CKPT_OK. Collective over `comm`. */
int ckpt__cache_drain(struct ckpt_saver *s, MPI_Comm comm, const char *name, const char *dir,
                      ckpt__drain_shape *shape);
/* The node leaders remove what crashed or failed saves left in their node's cache directory
 * (ckpt__gc: temp directories, workertemp_<r>, data files of no index). Local; call it where
 * no save is in flight on any rank. */
int ckpt__cache_gc(struct ckpt_saver *s);
/* The cache level is set up on this saver (ckpt__saver_cache_init). Local. */
int ckpt__saver_has_cache(const struct ckpt_saver *s);
/* This rank's node's cache directory of this checkpoint directory ("" without a cache level),
 * as a path that reaches the held directory whatever happens to its name (/proc/self/fd/<n>):
 * for the library's own opens. Local. */
const char *ckpt__saver_cache_dir(const struct ckpt_saver *s);
/* The same by its name, for messages and for what the caller is told (paths returned by the
 * manager). Local. */
const char *ckpt__saver_cache_shown(const struct ckpt_saver *s);
/* Node leaders remove from their node's cache directory every checkpoint named <stem>-<N> that
 * `keep` (sorted counters, n of them) does not list: index first, then its other files, and the
 * in-flight directory of a crashed save. Collective over `comm`. */
int ckpt__cache_sweep(struct ckpt_saver *s, MPI_Comm comm, const char *stem, const int64_t *keep,
                      size_t n);
/* A save to the cache level (ckpt__saver_cache_init first): ckpt_saver_write_ex() with `name`
 * the checkpoint's name, which each rank puts in its node's cache directory, whatever the
 * options' level (the public way: ckpt_save_options.level = CKPT_LEVEL_CACHE). */
struct ckpt_save_info;
struct ckpt_save_options;
int ckpt__saver_save_cache(struct ckpt_saver *s, const char *name,
                           const struct ckpt_save_info *info, const struct ckpt_save_options *opts);

#endif
