/*
 * The collective saver's state, shared by its modules (not installed):
 *   saver.c          create (settings decided by rank 0), registration, close and its callbacks
 *   save_protocol.c  the save protocol (docs/design.md §4): prefix, plan, write, agree, merge,
 *                    commit
 *   save_gather.c    its gathers of fragments: the plan's, every rank's record at the chief
 *                    (one step or through the node leaders)
 *   target_dir.c     the persistent directory as a storage target (target.h); the node cache's
 *                    is in save_levels.c, over the cache level's set-up in cache_dir.c
 *   save_shared.c    the shared-layout writer (one file through MPI-IO)
 *   save_node.c      the per-node layout: nodes, and a node's file written by its ranks
 *   save_async.c     sync and async saves: jobs, the writer thread, snapshots, waiting
 *   restore.c        the collective restore: the share exchange and the restore's phases;
 *                    restore_names.c strict restores' comparison of names, restore_coop.c the
 *                    cooperative restore (its transfers: restore_coop_run.c), restore_cache.c
 *                    the node cache's restore side (open_restore, fetch: target.h)
 * The MPI-free phases are in lib/: plan.c (registrations, sharding), shard.c (a rank's data
 * file, packing, reservation), nodefile.c (a node's data file), record.c (what was written, as a fragment), commit.c, paths.c.
 */
#ifndef MPICKPT_SAVER_INTERNAL_H
#define MPICKPT_SAVER_INTERNAL_H

#include "mpickpt/saver.h"

#include "arena.h"
#include "metrics.h"
#include "mpi_internal.h"
#include "paths.h"
#include "plan.h"
#include "record.h"
#include "shard.h"
#include "target.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct save_job save_job;

struct ckpt_saver {
    MPI_Comm comm;
    /* async mode: a writer thread with its own communicator runs one save at a time */
    int async;
    MPI_Comm async_comm;
    save_job *job; /* the save in flight, or NULL */
    int job_done;  /* guarded by lock */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int abandon; /* set by a close that timed out: the save in flight must not commit */
    int pending_rc;     /* a background failure seen by restore, reported by the next call */
    char pending_msg[2048];
    void **snap; /* snapshot buffers, one per registration, reused */
    size_t *snap_cap;
    size_t snap_n;
    double last_save_start;
    ckpt_save_metrics last_metrics; /* guarded by lock */
    int have_metrics;
    char *metrics_prefix; /* the prefix ckpt_saver_metrics_get() last handed out */
    int rank, size;
    ckpt_saver_options opts;
    ckpt_layout layout;
    ckpt__regs regs;
    int dirty; /* registrations changed since the plan was made */
    /* The plan: every rank's registrations (without blobs), merged and validated. */
    int have_plan;
    Mpickpt__Fragment **plan_frags; /* unpacked into plan_arena, freed with it */
    ckpt__arena *plan_arena;
    size_t plan_nfrags;
    Mpickpt__Index plan;
    /* Pieces this rank stores, derived from its registrations and the sharding policy. */
    ckpt__pieces pieces;
    ckpt__shard_bufs bufs; /* scratch and pack staging, kept across saves */
    int64_t counter;
    int64_t prepared_counter; /* the counter of the save prepared last (the chief's) */
    /* The close callbacks (ckpt_saver_on_close), called by the close in reverse order. */
    struct ckpt__on_close {
        ckpt_saver_close_fn fn;
        void *payload;
    } *on_close;
    size_t n_on_close;
    int reserve; /* the up-front space reservation (MPICKPT_RESERVE), decided by rank 0 */
    uint64_t chunk;          /* largest MPI transfer (MPICKPT_MPI_CHUNK_BYTES), decided by rank 0 */
    int64_t *gather_scratch; /* rank 0: 2 x size, for ckpt__gather_bytes */
    /* Per-node layout (save_node.c), made at create: this rank's node and its communicator
     * (and the writer thread's duplicate), every node's leader (its lowest rank) by node index,
     * every rank's node, and on a leader its members' ranks and the gather's buffer. */
    int64_t ranks_per_node; /* MPICKPT_RANKS_PER_NODE, decided by rank 0; 0: shared memory */
    MPI_Comm node_comm, node_async_comm;
    int node, nnodes, node_rank, node_size;
    int *node_leaders;  /* [nnodes] */
    int *node_of;       /* [size]: every rank's node index (the cooperative restore's plan);
                         * other layouts: ckpt__save_node_map, NULL when all share one node */
    int one_node;       /* the default layout found every rank on one node */
    int *node_ranks;    /* leader: [node_size] */
    int64_t *node_hdrs; /* leader: the gather of its ranks' headers (save_node.c); also the
                         * scratch of the node's gather of fragments (HD_N >= 2 per rank) */
    /* The hierarchical merge (save_protocol.c), when there are several nodes and some node has
     * several ranks: the leaders' communicator (MPI_COMM_NULL elsewhere; the chief is its rank 0)
     * and the writer thread's duplicate. hier_wanted: MPICKPT_HIER_MERGE, decided by rank 0:
     * -1 (auto: nodes that share memory, not MPICKPT_RANKS_PER_NODE's simulated ones), 0 (the
     * one-step merge at the chief), 1 (any nodes). */
    int hier_wanted, hier_merge, leaders_made;
    MPI_Comm leader_comm, leader_async_comm;
    /* The cache level (cache_dir.c, save_levels.c; docs/levels.md), opened with
     * ckpt_saver_cache_open (saver_cache.c), by a manager or any caller. */
    struct {
        int on;
        int redundancy;  /* CKPT__REDUNDANCY_* */
        /* This checkpoint directory's part of this node's cache directory,
         * <pattern's directory>/mpickpt-<identity> (lib/identity.h): held open (fd) since the
         * manager set the level up, and reached only through it; `at` names it for functions that
         * take a path (/proc/self/fd/<fd>, lib/fsutil.h ckpt__fd_path), `dir` in messages. */
        int fd;
        char at[64];
        char dir[4096];
        char persistent[4096]; /* the persistent directory: the metrics of cache saves go there */
        char pattern[4096];    /* what the directory was made from, to make it again (reopen) */
        char identity[40];
        /* the node leader's lock of the directory (ckpt__cache_lock: a manager's), or NULL */
        struct ckpt__dirlock *lock;
        double lock_wait;
        int partner;     /* the rank that holds this rank's partner copies; -1: none */
        int *from;       /* the ranks whose copies this rank holds */
        int nfrom;
        int *node_of;    /* [size] every rank's node */
        int *pnode;      /* [nnodes] every node's partner node (partner redundancy), else NULL */
        int tmpfs;       /* this node's directory is on tmpfs: saves there are not reserved */
        uint8_t *rbuf;   /* the partner copies' receive buffer, kept across saves */
    } cache;
};

/*
 * Where a save goes. Every file is reached by descriptor (lib/fsutil.h): dirfd is the checkpoint's
 * directory, workfd the directory holding workertemp_<r>, tempfd this rank's in-flight directory
 * (lib/paths.h). Names are kept for messages only.
 */
typedef struct save_ctx {
    ckpt__save_names n;
    int dirfd, workfd, tempfd;
    ckpt__record rec;       /* what this rank wrote */
    MPI_Comm comm;          /* the saver's (sync) or its writer thread's (async) communicator */
    const void **src;       /* per registration: where its bytes are read from */
    const void **blob_data; /* blobs produced by the registered savers for this save */
    size_t *blob_len;
    const ckpt__target_ops *target; /* where the save writes (target.h) */
} save_ctx;

/* A save: prepared on the caller's thread, written inline (sync) or by the writer thread. */
struct save_job {
    ckpt_saver *s;
    save_ctx c;
    ckpt_save_info info;
    int64_t counter;
    /* the commit hook (saver.h, ckpt_commit_hooks): its halves (each may be NULL) and their
     * payload */
    int (*prep)(const char *prefix, int64_t counter, ckpt_commit_vote *v, void *payload);
    int (*hook)(MPI_Comm comm, const char *prefix, int64_t counter, const ckpt_commit_vote *v,
                void *payload);
    void *hook_payload;
    double t_start, t_block; /* caller's clock: start of save, time it blocked */
    double since_prev;       /* from the previous save's start to this one's */
    double t_write, t_agree, t_merge, t_commit;
    double write_median;     /* the chief: the median over ranks of t_write, when have_median */
    int have_median;
    uint64_t bytes;          /* this rank's stored bytes */
    int opened;              /* in-flight directories opened and reservation agreed at prepare */
    int result;
    char message[2048];      /* the writer thread's error message */
    int sys_errno, reason;   /* and its ckpt_error.sys_errno and .reason (the error is per thread) */
};

/* save_summary.c: the summary lines (docs/operations.md) and the per-rank times they report */
uint64_t ckpt__index_bytes(const Mpickpt__Index *idx); /* the sum of its pieces' bytes */
/* out's write times: every fragment's, concatenated (a node leader's merge); CKPT_ENOMEM leaves
 * none. Free with ckpt__fragment_times_free. */
int ckpt__fragment_times_concat(Mpickpt__Fragment *out, Mpickpt__Fragment *const *frags, size_t n);
void ckpt__fragment_times_free(Mpickpt__Fragment *f);
/* The chief: j->write_median from the fragments' write times (each rank's exactly once). */
void ckpt__save_write_median(save_job *j, Mpickpt__Fragment *const *frags, size_t n);
/* times[i] with this rank into vals[i] for a vote's MAX, and back (ckpt__maxloc_encode). */
void ckpt__summary_encode(double *vals, const double *times, int n, int rank);
void ckpt__summary_decode(double *times, int *ranks, const double *vals, int n);
/* The chief's info line of a committed save (m: its metrics), every rank's debug line. */
void ckpt__save_log_summary(const save_job *j, const ckpt__metrics_record *m);
/* The chief's info line of a restore; times/ranks: the maxima of the phases index and read and
 * who had them; every rank's debug line with its own. */
void ckpt__restore_log_summary(const ckpt_saver *s, const char *prefix, uint64_t bytes,
                               int written_by, double seconds, const double *times,
                               const int *ranks, double mine_index, double mine_read);

/* save_protocol.c */
int ckpt__save_bcast_prefix(ckpt_saver *s, const char *prefix, char *out, size_t size,
                            uint64_t *save_id, int64_t *counter);
int ckpt__save_prepare(ckpt_saver *s, const char *prefix, const ckpt_save_info *info,
                       int64_t counter, const ckpt__target_ops *t, int local, save_job **out);
int ckpt__save_run(save_job *j);
void ckpt__save_job_free(save_job *j);
void ckpt__save_free_plan(ckpt_saver *s);
/* this rank's shard input for the save of context c */
void ckpt__save_shard_input(const ckpt_saver *s, const save_ctx *c, ckpt__shard_input *in);

/* save_gather.c: fragments gathered (see there); free them with ckpt__free_frags. */
void ckpt__free_frags(Mpickpt__Fragment **f, ckpt__arena *arena);
int ckpt__allgather_fragments(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
                              Mpickpt__Fragment ***out, ckpt__arena **arena);
int ckpt__gather_packed(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
                        int *chief, Mpickpt__Fragment ***out, ckpt__arena **arena);
int ckpt__gather_fragments(ckpt_saver *s, save_ctx *c, double write_s, int *local, int *skip,
                           Mpickpt__Fragment ***out, size_t *nout, ckpt__arena **arena);

/* replica_check.c: every rank's copy of each replicated tensor compared (CRC-32C) in the save's
 * second vote. init (local, before the first vote): on when the check may run (several ranks,
 * check_replicas not off); crcs (local, once the plan is made) when it is due this save; vote:
 * the second vote with the check folded in (collective; the same status everywhere). */
typedef struct ckpt__replica_check {
    int on, due;
    size_t *reg; /* the replicated registrations, sorted by stored name when due */
    size_t n;
    double *buf; /* the vote's in and out: {-status, crc, -crc per tensor} */
} ckpt__replica_check;
int ckpt__replica_check_init(const ckpt_saver *s, ckpt__replica_check *c);
void ckpt__replica_check_crcs(const ckpt_saver *s, ckpt__replica_check *c);
int ckpt__replica_vote(ckpt_saver *s, ckpt__replica_check *c, int local);
void ckpt__replica_check_free(ckpt__replica_check *c);

/* save_shared.c: the shared layout's write, collective over c->comm */
int ckpt__save_write_shared(ckpt_saver *s, save_ctx *c);

/* save_node.c: the nodes (at create; freed at close) and the per-node layout's write, collective
 * over the node of c->comm */
int ckpt__save_node_init(ckpt_saver *s);
int ckpt__save_node_map(ckpt_saver *s);
void ckpt__save_node_free(ckpt_saver *s);
/* the leaders' communicator (and its async twin), when it does not exist yet; collective */
int ckpt__save_node_leaders(ckpt_saver *s);
int ckpt__save_write_node(ckpt_saver *s, save_ctx *c);

/* cache_dir.c: a descriptor of this node's cache directory (a duplicate of the held one, for
 * the caller to close). */
int ckpt__cache_dirfd(const ckpt_saver *s, int *fd);
/* cache_dir.c: when this node's cache directory was removed since it was opened (a node's cache
 * wiped; its st_nlink is 0), it is made and checked again and the new one held. Local. */
int ckpt__cache_reopen(ckpt_saver *s);
/* save_levels.c: receives `bytes` from rank `src` (`tag` on `comm`, chunks of at most `chunk`
 * through `buf`) into a new temp file of dirfd, fsynced and renamed to `name`, replacing what
 * stood there (a rebuilt file fills in a name its node lacked: `what`; partner copies take a name
 * only when it is free). While *local is not CKPT_OK the bytes are received and dropped, so the
 * messages match; the file's outcome is *local's, an MPI failure the return value. (The node
 * cache's storage target, ckpt__target_cache, is there too: target.h.) */
int ckpt__cache_recv_file(ckpt_saver *s, MPI_Comm comm, int src, int tag, int dirfd,
                          const char *name, uint64_t bytes, uint8_t *buf, uint64_t chunk,
                          int *local, const char *what);

/* restore_cache.c: the node cache's restore side (ckpt__target_cache's open_restore, fetch and
 * fetch_done, target.h): the checkpoint named in this node's cache directory and rebuilt; the
 * pieces of this rank's share that other nodes hold, fetched into its scratch directory for
 * reader *r (see there); *scratch_fd for ckpt__cache_fetch_done() to remove it. Collective over
 * s->comm whatever `local` says. */
int ckpt__cache_restore_open(ckpt_saver *s, char *prefix, size_t size, char *name, size_t nsize);
int ckpt__cache_fetch(ckpt_saver *s, ckpt_reader **r, const char *prefix, const char *name,
                      int *local, int *scratch_fd);
void ckpt__cache_fetch_done(const ckpt_saver *s, int dirfd);
/* restore.c: the chief's own share of the index (its wants), replacing its reader *r of the
 * whole index (opened on `prefix`). Local. */
int ckpt__restore_own_share(ckpt_saver *s, const char *prefix, ckpt_reader **r);
/* cache_rebuild.c: checkpoint `name` in the cache made whole again before a restore (see there).
 * Collective over s->comm. */
int ckpt__cache_rebuild(ckpt_saver *s, const char *name);

/* save_async.c */
int ckpt__save_snapshot(ckpt_saver *s, save_job *j);
int ckpt__save_start(ckpt_saver *s, save_job *j);
int ckpt__save_wait(ckpt_saver *s, double timeout);
int ckpt__save_take_pending(ckpt_saver *s);

#endif
