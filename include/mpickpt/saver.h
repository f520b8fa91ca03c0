/**
 * @file mpickpt/saver.h
 * @brief Collective save and restore over MPI (libmpickpt).
 *
 * Every rank registers what it owns (pointers to its buffers; nothing is copied at registration),
 * then all ranks call ckpt_saver_save() / ckpt_saver_restore() together. The saver duplicates the
 * caller's communicator; every collective returns the same status on every rank, and
 * ckpt_error_last() names the failing rank, path and cause. Library code never aborts.
 *
 * On disk (see docs/format.md): a checkpoint PREFIX = <dir>/<name> is `<dir>/<name>.index` plus
 * data files `<dir>/<name>.data-%05d-of-%05d`. While a save runs, the chief (rank 0) writes under
 * `<dir>/<name>_temp/` and rank r > 0 under `<work>/workertemp_<r>/`, where <work> is the parent of
 * <dir> when <dir> is named "chief" (the training-state layout) and <dir> itself otherwise.
 */
#ifndef MPICKPT_SAVER_H
#define MPICKPT_SAVER_H

#include "checkpoint.h"
#include "common.h"
#include "dtype.h"
#include "slice.h"
#include "state.h" /* CKPT_LEVEL_PERSISTENT, CKPT_LEVEL_CACHE */

#include "mpi_c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_saver ckpt_saver;

/** Options of ckpt_saver_create(). Initialize with CKPT_SAVER_OPTIONS_INIT. */
typedef struct ckpt_saver_options {
    unsigned int version;    /**< CKPT_SAVER_OPTIONS_VERSION */
    /** CKPT_LAYOUT_UNKNOWN = default (per-node, but per-rank when every rank is on one node and
     *  MPICKPT_RANKS_PER_NODE is unset; MPICKPT_LAYOUT overrides), CKPT_LAYOUT_PER_RANK,
     *  CKPT_LAYOUT_SHARED or CKPT_LAYOUT_PER_NODE (one file per node: MPI_COMM_TYPE_SHARED, or
     *  nodes of MPICKPT_RANKS_PER_NODE ranks) */
    ckpt_layout layout;
    int collective_io;       /**< shared layout: 1 = collective MPI-IO transfers, 0 = independent */
    MPI_Info info;           /**< MPI-IO hints for the shared layout (MPI_INFO_NULL: none) */
    int64_t max_shard_bytes; /**< >0: split every stored piece into pieces of at most this size */
    /** 1: async mode. save() returns once the registered tensors are copied into snapshot
     *  buffers (allocated once, reused); a writer thread with its own communicator writes, agrees,
     *  merges and commits. Needs MPI_THREAD_MULTIPLE. */
    int async;
    double close_timeout_s;  /**< async: how long close waits for a save in flight (0: 600 s) */
    /** Per-rank and per-node layouts: pieces of at most this many bytes are stored back to back
     *  in one uint8 dataset per rank (packed, format 2) instead of a dataset each, whose creation
     *  dominates the save of small tensors. 0: the default, CKPT_PACK_MAX_BYTES_DEFAULT, or the
     *  value of the environment variable MPICKPT_PACK_BYTES; < 0: never pack. (Since options
     *  version 2.) */
    int64_t pack_max_bytes;
    /* ---- version 3: the replica check ---- */
    /** When the copies of replicated tensors (CKPT_REPLICA_PRIMARY) are compared across ranks
     *  (a CRC-32C of each rank's copy, one reduction folded into the save's vote):
     *  CKPT_CHECK_REPLICAS_DEFAULT (MPICKPT_CHECK_REPLICAS, else FIRST), _FIRST (at the first save
     *  of a plan: when registrations changed), _EVERY (every save) or _OFF. */
    int check_replicas;
    /** What a difference is: CKPT_REPLICA_MISMATCH_DEFAULT (MPICKPT_REPLICA_MISMATCH, else ERROR),
     *  _ERROR (CKPT_EMISMATCH on every rank naming the tensors and the ranks whose copy differs;
     *  nothing is written) or _WARN (a warning; the writing rank's copy is saved). */
    int replica_mismatch;
} ckpt_saver_options;

/** ckpt_saver_options.check_replicas */
typedef enum ckpt_check_replicas {
    CKPT_CHECK_REPLICAS_DEFAULT = 0,
    CKPT_CHECK_REPLICAS_FIRST = 1,
    CKPT_CHECK_REPLICAS_EVERY = 2,
    CKPT_CHECK_REPLICAS_OFF = 3
} ckpt_check_replicas;

/** ckpt_saver_options.replica_mismatch */
typedef enum ckpt_replica_mismatch {
    CKPT_REPLICA_MISMATCH_DEFAULT = 0,
    CKPT_REPLICA_MISMATCH_ERROR = 1,
    CKPT_REPLICA_MISMATCH_WARN = 2
} ckpt_replica_mismatch;

/** Default of ckpt_saver_options.pack_max_bytes: 1 MiB, where packing stops paying (see
 *  docs/performance.md). */
#define CKPT_PACK_MAX_BYTES_DEFAULT ((int64_t)1 << 20)

/** Versions 1 (without pack_max_bytes) and 2 (without the replica check's fields: they take
 *  their defaults) are still accepted. */
#define CKPT_SAVER_OPTIONS_VERSION 3
#define CKPT_SAVER_OPTIONS_INIT                                                                    \
    { CKPT_SAVER_OPTIONS_VERSION, CKPT_LAYOUT_UNKNOWN, 0, MPI_INFO_NULL, 0, 0, 0.0, 0,             \
      CKPT_CHECK_REPLICAS_DEFAULT, CKPT_REPLICA_MISMATCH_DEFAULT }

/** How a replicated tensor is stored. */
typedef enum ckpt_replica_mode {
    /** One copy, written by one rank; every rank must register it; any rank count restores it. */
    CKPT_REPLICA_PRIMARY = 0,
    /** Every rank's component: rank 0's under the plain name, rank i's as
     *  `<name>/parallel_component_<i>` (kind component). Rank i restores component i. */
    CKPT_REPLICA_PER_COMPONENT = 1
} ckpt_replica_mode;

/**
 * A registered saver: callbacks that produce and consume opaque bytes per rank (RNG state,
 * data-loader position). save runs on every save before any tensor is written; the bytes it
 * returns must stay valid until the save returns. They are stored as `<name>/rank_<r>` (kind blob,
 * uint8 vector). restore runs after the tensors are restored.
 */
typedef struct ckpt_blob_callbacks {
    int (*save)(const void **data, size_t *len, void *payload);
    int (*restore)(const void *data, size_t len, void *payload);
} ckpt_blob_callbacks;

/**
 * Creates a saver over a duplicate of @p comm (errors on it return instead of aborting).
 * Collective over @p comm. Requires MPI to be initialized.
 */
CKPT_EXTERN int ckpt_saver_create(ckpt_saver **out, MPI_Comm comm, const ckpt_saver_options *opts);

/**
 * Waits for a save in flight (async mode, up to close_timeout_s), reports its failure or one kept
 * from an earlier restore, and frees the saver and its communicators. If the save is still running
 * at the timeout, it logs a warning that the last checkpoint may be incomplete, makes sure it will
 * not commit (the previous checkpoint stays the latest) and returns CKPT_ETIMEDOUT without freeing
 * (the writer thread still uses the saver; the process is expected to exit). Either way it calls
 * the close callbacks (ckpt_saver_on_close()) first. Collective. NULL is a no-op.
 */
CKPT_EXTERN int ckpt_saver_close(ckpt_saver *s);

/** ckpt_saver_close() without the status. Collective. NULL is a no-op. */
CKPT_EXTERN void ckpt_saver_free(ckpt_saver *s);

/**
 * A close callback (ckpt_saver_on_close()). @p save_running 1: ckpt_saver_close() timed out
 * (CKPT_ETIMEDOUT) with a save still running on the saver's writer thread; it will not commit
 * unless it was already committing, its commit hooks (ckpt_commit_hooks) may still run until the
 * process exits, and the saver stays allocated for it (nothing of it may be used, though).
 * 0: no save runs any more, no commit hook will run again, and the saver's memory is released
 * when the callbacks return.
 */
typedef void (*ckpt_saver_close_fn)(int save_running, void *payload);

/**
 * Registers @p fn to be called with @p payload once, when @p s is closed (ckpt_saver_close() or
 * ckpt_saver_free()): on the closing thread, after the save in flight was waited for (or the wait
 * timed out), before anything of the saver is released. An object that borrows the saver learns
 * so that the saver is gone, whichever of the two is closed first (the manager, manager.h, is
 * one). @p fn must not call any function on @p s. Callbacks run in the reverse order of their
 * registration. A borrower that goes away before the saver withdraws its callback
 * (ckpt_saver_on_close_remove()). CKPT_EINVAL when @p s or @p fn is NULL or the pair is already
 * registered; CKPT_ENOMEM. Local.
 */
CKPT_EXTERN int ckpt_saver_on_close(ckpt_saver *s, ckpt_saver_close_fn fn, void *payload);

/** Withdraws the close callback @p fn with @p payload (ckpt_saver_on_close()); CKPT_EINVAL when
 *  that pair is not registered. Local. */
CKPT_EXTERN int ckpt_saver_on_close_remove(ckpt_saver *s, ckpt_saver_close_fn fn, void *payload);

/**
 * Waits for the save in flight (async mode) and returns its result: CKPT_OK when it committed,
 * else its error with the original cause (the same on every rank). A no-op in sync mode.
 * Collective in effect (the save it waits for is).
 */
CKPT_EXTERN int ckpt_saver_sync(ckpt_saver *s);

/**
 * Registers a tensor this rank owns whole (kind full). @p data is read at every save and written
 * at restore; it must stay valid while registered. Local (not collective).
 * Every registration's @p name is a non-empty, valid UTF-8 string of at most 4096 bytes
 * (CKPT_EINVAL otherwise).
 */
CKPT_EXTERN int ckpt_saver_add_full(ckpt_saver *s, const char *name, ckpt_dtype dtype,
                                    const ckpt_shape *shape, void *data);

/**
 * Registers this rank's slice of a partitioned tensor of global shape @p shape; @p data holds the
 * slice dense and row-major. The slices of all ranks must tile the tensor (checked at the first
 * save: duplicates, overlaps and gaps are errors on every rank). A rank may register several slices
 * of one tensor. Local.
 */
CKPT_EXTERN int ckpt_saver_add_slice(ckpt_saver *s, const char *name, ckpt_dtype dtype,
                                     const ckpt_shape *shape, const ckpt_slice *slice, void *data);

/** Registers a replicated tensor (same value on every rank). Local.
 *  CKPT_REPLICA_PRIMARY: one copy is written, by the rank ckpt_saver_primary_rank() names, not
 *  necessarily rank 0: the replicated tensors are dealt to the ranks by size (largest first, then
 *  by name, each to the rank with the fewest bytes so far), so each rank writes about 1/N of the
 *  replicated bytes. Which copy is written matters only if the copies differ: the replica check
 *  (ckpt_saver_options.check_replicas) compares every rank's copy, by default at the first save
 *  of each plan, and makes a difference an error (or a warning). */
CKPT_EXTERN int ckpt_saver_add_replicated(ckpt_saver *s, const char *name, ckpt_dtype dtype,
                                          const ckpt_shape *shape, void *data,
                                          ckpt_replica_mode mode);

/** The rank that writes replicated tensor @p name (CKPT_REPLICA_PRIMARY) of @p s as registered
 *  now (every rank registers the same replicated tensors, so every rank gets the same answer);
 *  -1 when @p name is not a replicated tensor of @p s. Local. */
CKPT_EXTERN int ckpt_saver_primary_rank(const ckpt_saver *s, const char *name);

/** Registers a registered saver under @p name (per-rank opaque bytes). Local. */
CKPT_EXTERN int ckpt_saver_add_blob(ckpt_saver *s, const char *name, const ckpt_blob_callbacks *cb,
                                    void *payload);

/** Removes every registration. Local. */
CKPT_EXTERN void ckpt_saver_clear(ckpt_saver *s);

/** Metadata recorded with a save. */
typedef struct ckpt_save_info {
    int64_t epoch;
    int64_t step;
    int end_of_epoch; /**< 1: saved after `epoch` finished; 0: mid-epoch at `step` */
} ckpt_save_info;

/**
 * Writes a checkpoint at exactly @p prefix (no counter), like TensorFlow's write(); a committed
 * checkpoint is never overwritten (CKPT_EEXISTS if `<prefix>.index` exists).
 * In async mode it returns after the snapshot (see ckpt_saver_options.async); the outcome is
 * reported by the next save, ckpt_saver_sync() or ckpt_saver_close(), on every rank. A save first
 * waits for the one in flight, and fails with that one's error if it failed.
 * Protocol: plan (allgather + validation, cached while registrations do not change), write,
 * agree (one allreduce), merge at the chief (gather of index fragments), commit (data renamed into
 * place, index written last). On any failure on any rank: the same error on every rank, nothing
 * committed, temp files removed, the previous checkpoint untouched.
 * Collective over the saver's communicator. @p info may be NULL (epoch = step = 0).
 */
CKPT_EXTERN int ckpt_saver_write(ckpt_saver *s, const char *prefix, const ckpt_save_info *info);

/**
 * Writes `<prefix>-<N>` with N = counter + 1 and, when it commits, sets the counter to N; a failed
 * save leaves the counter unchanged (the next save reuses N: nothing was committed under it).
 * The name is copied to @p out (may be NULL). The counter starts at 0 (the first save writes
 * `-1`); restore sets it to the restored checkpoint's. A committed checkpoint is never overwritten:
 * if `<prefix>-N` exists (say, after restoring an older one) the save fails with CKPT_EEXISTS on
 * every rank; the manager (manager.h) numbers past every checkpoint it knows. Collective.
 */
CKPT_EXTERN int ckpt_saver_save(ckpt_saver *s, const char *prefix, const ckpt_save_info *info,
                                char *out, size_t out_size);

/** How many values a commit vote carries (ckpt_commit_vote.vals). */
#define CKPT_COMMIT_VOTE_VALS 8

/**
 * What the first half of a commit hook (ckpt_commit_hooks.prepare) tells every rank, carried by
 * the save's commit vote at no collective call of its own. On entry to prepare, `status` is
 * CKPT_OK and every `vals[k]` is -INFINITY. After the vote, the committed half sees on every rank
 * the worst `status` of all ranks (CKPT_OK, since committed runs only when every prepare
 * succeeded) and, for each k, the maximum over ranks of `vals[k]`: a value one rank sets (say the
 * chief, rank 0) while the others leave -INFINITY reaches every rank exactly. Without a prepare
 * (or on a rank whose prepare did not run) every value is -INFINITY.
 */
typedef struct ckpt_commit_vote {
    int status; /**< prepare's status on this rank; after the vote, the worst over ranks */
    double vals[CKPT_COMMIT_VOTE_VALS];
} ckpt_commit_vote;

/**
 * A commit hook in two halves, run by a save given it (ckpt_save_options.hooks): an extension
 * point for what must follow a commit on every rank at no extra collective (the manager,
 * manager.h, keeps its list of checkpoints and its retention this way). Initialize with
 * CKPT_COMMIT_HOOKS_INIT. Either half may be NULL.
 *
 * When and where each half runs: in sync mode on the thread that called the save, before the
 * save returns; in async mode on the saver's writer thread, after the save call returned and
 * before the save in flight is complete (ckpt_saver_sync(), ckpt_saver_wait(), the next save or
 * ckpt_saver_close() return after it). @p prefix is the checkpoint's prefix (the chief's, the
 * same on every rank) and @p counter the save counter it records (ckpt_save_options.counter).
 *
 * - `prepare`, on every rank, after the chief's commit point (the index is written: the
 *   checkpoint is committed on disk) and before the commit vote, which carries what it put in
 *   @p vote to every rank (ckpt_commit_vote). Local: it must make no collective call on any
 *   communicator. A failure (a status other than CKPT_OK, returned or put in vote->status) on any
 *   rank fails the save on every rank with that rank's code and message (ckpt_error_last() of the
 *   hook's thread when it holds that code, say from a failed mpickpt call; else the code's text),
 *   and then: `committed` runs on no rank, ckpt_saver_counter() does not move and
 *   ckpt_saver_last_metrics() keeps the previous save's. The checkpoint's files stay committed
 *   (its commit point came first): a caller that keeps its own record of checkpoints should take
 *   the save's status, not the files, as the outcome.
 * - `committed`, on every rank when the vote agreed that the commit and every prepare succeeded,
 *   with what the vote carried. Collective over @p comm: the saver's communicator in sync mode,
 *   the writer thread's own in async mode (ckpt_saver_comm() is not it then); it may make
 *   collective calls on @p comm only, in the same order on every rank. Its status is the save's
 *   (the save is committed either way): it must return the same status on every rank (agree a
 *   local failure with ckpt_mpi_agree(comm, ...)).
 *
 * Neither half may call a function on the saver that runs the save (save, sync, wait, restore,
 * close, registration): in sync mode that is a re-entrant call, in async mode it waits for the
 * save that is running the hook. In async mode both run concurrently with the caller's thread:
 * what they share with it needs a lock. @p payload (and the struct, which the save copies) must
 * stay valid until the save is complete; when ckpt_saver_close() returns CKPT_ETIMEDOUT, until
 * the process exits (a save that was already committing may still run its hook).
 */
typedef struct ckpt_commit_hooks {
    unsigned int version; /**< CKPT_COMMIT_HOOKS_VERSION */
    int (*prepare)(const char *prefix, int64_t counter, ckpt_commit_vote *vote, void *payload);
    int (*committed)(MPI_Comm comm, const char *prefix, int64_t counter,
                     const ckpt_commit_vote *vote, void *payload);
    void *payload;
} ckpt_commit_hooks;

#define CKPT_COMMIT_HOOKS_VERSION 1
#define CKPT_COMMIT_HOOKS_INIT { CKPT_COMMIT_HOOKS_VERSION, NULL, NULL, NULL }

/** Options of ckpt_saver_write_ex(). Initialize with CKPT_SAVE_OPTIONS_INIT. */
typedef struct ckpt_save_options {
    unsigned int version; /**< CKPT_SAVE_OPTIONS_VERSION */
    /** The save counter the checkpoint records (ckpt_restore_info.save_counter), >= 0; 0: none,
     *  as ckpt_saver_write(). Every rank adopts the chief's. Once the save committed (or failed
     *  with CKPT_EEXISTS at its commit), ckpt_saver_counter() moves up to it. */
    int64_t counter;
    /** The caller's status on this rank (CKPT_OK or a negative ckpt_status), joined to the save's
     *  first collective calls: when it is not CKPT_OK on some rank, nothing is written and every
     *  rank returns that code with that rank's message (ckpt_error_last(), as for prepare), at no
     *  collective call of the caller's own. */
    int status;
    /** The commit hook (NULL: none); copied by the call. */
    const ckpt_commit_hooks *hooks;
    /** Out, may be NULL: set on every rank when the call returns CKPT_OK to the counter the save
     *  records (the chief's; in async mode, before the save is complete). */
    int64_t *counter_out;
    /* ---- version 2: the storage level (version 1 saves to the persistent directory) ---- */
    /** Where the save goes, the same on every rank: CKPT_LEVEL_PERSISTENT (or 0), the prefix's
     *  directory; CKPT_LEVEL_CACHE, the cache level opened with ckpt_saver_cache_open(): the
     *  prefix is then the checkpoint's plain name (no '/'), which each rank's node's cache
     *  directory holds (ckpt_saver_cache_dir()), and the metrics line goes to the cache's
     *  persistent directory. Any other value is CKPT_EINVAL on every rank. */
    unsigned int level;
} ckpt_save_options;

/** Version 1 (without `level`: the persistent directory) is still accepted. */
#define CKPT_SAVE_OPTIONS_VERSION 2
#define CKPT_SAVE_OPTIONS_INIT { CKPT_SAVE_OPTIONS_VERSION, 0, CKPT_OK, NULL, NULL, 0u }

/**
 * ckpt_saver_write() with options: a checkpoint at exactly @p prefix recording
 * @p opts->counter, with a commit hook (ckpt_commit_hooks). @p opts NULL is ckpt_saver_write().
 * An unknown options or hooks version, or a negative counter, on any rank is CKPT_EINVAL on
 * every rank (agreed by the save's first collective, nothing written). Collective.
 */
CKPT_EXTERN int ckpt_saver_write_ex(ckpt_saver *s, const char *prefix, const ckpt_save_info *info,
                                    const ckpt_save_options *opts);

/**
 * Waits for the save in flight (async mode; a no-op in sync mode or with none) without taking
 * its outcome: a failure stays for the next save, ckpt_saver_sync() or ckpt_saver_close() to
 * report, as when a restore waits for it. After it returns, the save's commit hook has run.
 * Local (the save it waits for is collective over the writer threads).
 */
CKPT_EXTERN void ckpt_saver_wait(ckpt_saver *s);

/**
 * The saver's communicator (its duplicate of the one given to ckpt_saver_create()), for the
 * caller's own collective calls between saves on the saver's calling thread (an async save's
 * writer thread uses another). Owned by the saver: do not free it. Local.
 */
CKPT_EXTERN MPI_Comm ckpt_saver_comm(const ckpt_saver *s);

/** Timings of a committed save: the maximum over ranks of each phase, the total bytes.
 *  Deprecated with ckpt_saver_last_metrics() (a fixed prefix buffer, no version): use
 *  ckpt_saver_metrics. */
typedef struct ckpt_save_metrics {
    char prefix[4096];
    int async;
    uint64_t bytes;    /**< stored by all ranks */
    int32_t ranks;
    double blocking_s; /**< time the caller was blocked in save (async: the snapshot) */
    double write_s, agree_s, merge_s, commit_s;
} ckpt_save_metrics;

/** Deprecated (removed after 0.3): ckpt_saver_metrics_get(), whose prefix has no fixed buffer.
 *  The same metrics into @p out, the prefix in its 4096-byte buffer. Local. */
CKPT_EXTERN int ckpt_saver_last_metrics(const ckpt_saver *s, ckpt_save_metrics *out)
    CKPT_DEPRECATED("use ckpt_saver_metrics_get()");

/** Timings of a committed save (ckpt_saver_metrics_get()). The caller sets `version`
 *  (CKPT_SAVER_METRICS_INIT); later versions append fields. */
typedef struct ckpt_saver_metrics {
    unsigned int version; /**< in: CKPT_SAVER_METRICS_VERSION */
    /** The checkpoint's prefix, owned by the saver: valid until the next ckpt_saver_metrics_get()
     *  on this saver or its close (not to be called on one saver from two threads at once). */
    const char *prefix;
    int async;         /**< 1: saved in async mode */
    uint64_t bytes;    /**< stored by all ranks */
    int32_t ranks;
    double blocking_s; /**< time the caller was blocked in save (async: the snapshot) */
    double write_s, agree_s, merge_s, commit_s; /**< the maximum over ranks of each phase */
} ckpt_saver_metrics;

#define CKPT_SAVER_METRICS_VERSION 1
#define CKPT_SAVER_METRICS_INIT                                                                   \
    { CKPT_SAVER_METRICS_VERSION, NULL, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0 }

/**
 * Metrics of the last save that committed (in async mode: known once it completed, e.g. after
 * ckpt_saver_sync() or at the next save). CKPT_ENOTFOUND when none has; CKPT_EINVAL when
 * out->version is 0 or newer than this library's (then nothing else in @p out is written). The
 * chief also appends each save's metrics as one JSON line to `<checkpoint dir>/metrics.jsonl`.
 * Local.
 */
CKPT_EXTERN int ckpt_saver_metrics_get(ckpt_saver_metrics *out, const ckpt_saver *s);

/** Current save counter: the highest of the saves this saver committed or found taken (a save
 *  that failed with CKPT_EEXISTS at its commit: the next numbered save moves past it). Local. */
CKPT_EXTERN int64_t ckpt_saver_counter(const ckpt_saver *s);

/** A list of names (a restore's missing or unexpected entries): sorted, without duplicates. */
typedef struct ckpt_name_list ckpt_name_list;

/** Number of names in @p l (0 for NULL). Local. */
CKPT_EXTERN size_t ckpt_name_list_size(const ckpt_name_list *l);

/** Name @p i of @p l, or NULL when out of range. Local. */
CKPT_EXTERN const char *ckpt_name_list_get(const ckpt_name_list *l, size_t i);

/** Frees @p l. NULL is a no-op. Local. */
CKPT_EXTERN void ckpt_name_list_free(ckpt_name_list *l);

/** Options of ckpt_saver_restore(). Initialize with CKPT_RESTORE_OPTIONS_INIT. */
typedef struct ckpt_restore_options {
    unsigned int version; /**< CKPT_RESTORE_OPTIONS_VERSION */
    /** 1: a per-rank component or blob that the checkpoint lacks for this rank (it was written by
     *  fewer ranks) is skipped (left untouched, restore callback not called); 0: CKPT_ENOTFOUND. */
    int skip_missing_per_rank;
    /* ---- version 2: strict restores (version 1 and NULL options behave as before: a
     *      registered name missing is CKPT_ENOTFOUND, entries nobody registered are ignored) ---- */
    /** Before any data is read, the registered names of every rank are compared with the
     *  checkpoint's. `missing`: registered somewhere, not in the checkpoint (a per-rank component
     *  or blob this rank lacks is not, when skip_missing_per_rank is set); `unexpected`: in the
     *  checkpoint, registered by no rank (except per-rank entries of ranks that do not exist
     *  now). Names under `__mpickpt__/` (the Python package's record of plain values, which the
     *  package compares itself) are neither; registered and absent, they are skipped as a
     *  per-rank entry is under skip_missing_per_rank. 1 (CKPT_RESTORE_OPTIONS_INIT):
     *  either list non-empty is CKPT_EMISMATCH on every rank, one message listing them all
     *  (grouped by prefix when long). 0: what matches is restored, the rest left untouched.
     *  CKPT_RESTORE_NO_COMPARE (since version 3): no comparison, as with version 1 (a
     *  registered name missing is CKPT_ENOTFOUND, entries nobody registered are ignored; the
     *  lists below are set to NULL). */
    int strict;
    /** Out, may be NULL: set on every rank to the lists (the same everywhere; free them with
     *  ckpt_name_list_free()) when the comparison was made, a strict failure included; else to
     *  NULL. */
    ckpt_name_list **missing;
    ckpt_name_list **unexpected;
    /* ---- version 3: the storage level (versions 1 and 2 restore from the prefix's directory) */
    /** Where the checkpoint is read from, the same on every rank: CKPT_LEVEL_PERSISTENT (or 0),
     *  the prefix's directory; CKPT_LEVEL_CACHE, the cache level opened with
     *  ckpt_saver_cache_open(): the prefix is the checkpoint's plain name there, each rank reads
     *  its node's cache directory, pieces other nodes hold are fetched over MPI and a node that
     *  lost its files is rebuilt from its partners first (docs/levels.md). The chief's (rank
     *  0's) decides; any other value there is CKPT_EINVAL on every rank, and a rank whose level
     *  is not the chief's fails the restore with CKPT_EINVAL on every rank before any data is
     *  read. */
    unsigned int level;
    /** Out, may be NULL (versions 3 and later): set on every rank (the same everywhere) when the
     *  restore returns: 1 when it failed before any registered value was read because the
     *  cache's copy cannot be used here (it cannot be made whole: lost nodes without partner
     *  copies, damage; or it is not of this job's shape), so that a caller can try another copy
     *  (the persistent one) or an older checkpoint; 0 otherwise (restored, or the copy was whole
     *  and what was registered did not match it or read well). The status and ckpt_error_last()
     *  are the cause's, as they are at the persistent level. Always 0 at the persistent
     *  level. */
    int *unavailable;
} ckpt_restore_options;

/** ckpt_restore_options.strict (version 3): names not compared, as with options version 1. */
#define CKPT_RESTORE_NO_COMPARE (-1)

/** Versions 1 and 2 (without the level: the prefix's directory) are still accepted. */
#define CKPT_RESTORE_OPTIONS_VERSION 3
#define CKPT_RESTORE_OPTIONS_INIT { CKPT_RESTORE_OPTIONS_VERSION, 0, 1, NULL, NULL, 0u, NULL }

/** What a restore found. */
typedef struct ckpt_restore_info {
    int64_t save_counter;
    int64_t epoch;
    int64_t step;
    int end_of_epoch;
    int32_t world_size; /**< ranks that wrote the checkpoint */
    ckpt_layout layout;
} ckpt_restore_info;

/**
 * Restores every registration from the checkpoint at @p prefix, on any number of ranks: the chief
 * reads and validates the index (and the data files' sizes) and broadcasts it; each rank reads
 * exactly the stored pieces that overlap what it owns now, each checked against its CRC-32C.
 * Options version 1 or NULL: a registered name missing from the checkpoint is CKPT_ENOTFOUND;
 * version 2: see ckpt_restore_options.strict. A dtype or global shape that differs is
 * CKPT_EMISMATCH. Registered savers' restore callbacks run only after every rank
 * restored its tensors. After a failed restore the registered buffers hold unspecified values.
 * Collective. @p opts and @p info may be NULL.
 */
CKPT_EXTERN int ckpt_saver_restore(ckpt_saver *s, const char *prefix,
                                   const ckpt_restore_options *opts, ckpt_restore_info *info);

/* ---- The cache level ------------------------------------------------------------------- */

/** Redundancy of the cache level (docs/levels.md). */
typedef enum ckpt_redundancy {
    CKPT_REDUNDANCY_DEFAULT = 0, /**< the manager: MPICKPT_REDUNDANCY (none|partner), else none;
                                  *   ckpt_saver_cache_open(): none */
    CKPT_REDUNDANCY_NONE = 1,    /**< each node's files on that node only */
    CKPT_REDUNDANCY_PARTNER = 2  /**< each data file also on the partner node (another group) */
} ckpt_redundancy;

/** Options of ckpt_saver_cache_open(). Initialize with CKPT_CACHE_OPTIONS_INIT. */
typedef struct ckpt_cache_options {
    unsigned int version; /**< CKPT_CACHE_OPTIONS_VERSION */
    /** Each node's cache directory (node-local storage: /dev/shm, a local disk), `%n` standing
     *  for the node (required when nodes are simulated with MPICKPT_RANKS_PER_NODE). The chief's
     *  (rank 0's) is every rank's. Required. */
    const char *dir;
    /** A ckpt_redundancy: CKPT_REDUNDANCY_PARTNER needs two nodes (in two failure groups) or
     *  more. The chief's is every rank's. */
    int redundancy;
    /** This node's failure group (a rack: partners are in another); NULL or "": every node its
     *  own. The ranks of one node must name the same. */
    const char *failure_group;
    /** The checkpoint directory whose cache this is (it must exist), the chief's: its identity
     *  (a file it keeps) names its part of each node's cache directory, so two checkpoint
     *  directories never meet in one cache; the cache may be neither it nor inside or above it;
     *  the metrics lines of cache saves go there. Required. */
    const char *persistent;
    /** How long each node's leader waits for the lock of its node's cache directory of this
     *  checkpoint directory (held until ckpt_saver_cache_close(): one job per node cache) when
     *  another job holds it; 0: MPICKPT_LOCK_WAIT (default 0: refused at once, CKPT_EBUSY naming
     *  the holder). The chief's is every rank's. */
    double lock_wait_seconds;
} ckpt_cache_options;

#define CKPT_CACHE_OPTIONS_VERSION 1
#define CKPT_CACHE_OPTIONS_INIT                                                                    \
    { CKPT_CACHE_OPTIONS_VERSION, NULL, CKPT_REDUNDANCY_DEFAULT, NULL, NULL, 0.0 }

/**
 * Opens the cache level of @p s (docs/levels.md): the nodes (MPI_COMM_TYPE_SHARED, or nodes of
 * MPICKPT_RANKS_PER_NODE ranks), this node's cache directory (made private, checked and held
 * open), partners when asked, and each node leader's lock of it. Then ckpt_saver_write_ex() and
 * ckpt_saver_restore() take CKPT_LEVEL_CACHE (ckpt_save_options.level,
 * ckpt_restore_options.level), and ckpt_saver_cache_drain(), _sweep() and _gc() apply. Needs the
 * per-rank or per-node layout. A saver has at most one cache level: CKPT_EINVAL when one is open.
 * An unknown options version or a bad option on any rank is CKPT_EINVAL on every rank.
 * Collective over the saver's communicator; waits for a save in flight first (ckpt_saver_wait()).
 */
CKPT_EXTERN int ckpt_saver_cache_open(ckpt_saver *s, const ckpt_cache_options *opts);

/**
 * Closes the cache level of @p s: waits for a save in flight (ckpt_saver_wait()), then releases
 * the held directory and its lock. The cache's files stay. A no-op without one (or NULL).
 * Local. ckpt_saver_close() closes it too.
 */
CKPT_EXTERN void ckpt_saver_cache_close(ckpt_saver *s);

/**
 * This rank's node's cache directory of the cache's checkpoint directory, by its name (for
 * messages and the paths a caller shows: `<it>/<name>` is a cached checkpoint's prefix); ""
 * exactly when no cache level is open. Owned by the saver, valid until the cache is closed.
 * Local.
 */
CKPT_EXTERN const char *ckpt_saver_cache_dir(const ckpt_saver *s);

/**
 * The same directory as a path that reaches the directory the saver holds open whatever happens
 * to its name meanwhile (`/proc/self/fd/<n>`), for opening or listing what is in it on this rank
 * (say, `<it>/<name>.index` with ckpt_reader_open_index()); never for messages. "" without a
 * cache level. Owned by the saver, valid until the cache is closed. Local.
 */
CKPT_EXTERN const char *ckpt_saver_cache_held_path(const ckpt_saver *s);

/** What ckpt_saver_cache_drain() found (CKPT_CACHE_DRAIN_INFO_INIT). */
typedef struct ckpt_cache_drain_info {
    unsigned int version; /**< in: CKPT_CACHE_DRAIN_INFO_VERSION */
    /** 1: the checkpoint was written by another shape than this job's (another count of ranks or
     *  nodes, another layout: a job restarted over the same caches), whose files this job cannot
     *  drain: nothing was done. 0: drained (the call's status). */
    int other_shape;
    int of;        /**< the writer's count of data files (ranks, or nodes when per_node) */
    int per_node;  /**< 1: the writer's layout was per-node */
    int job_of;    /**< this job's count of data files */
    int job_per_node; /**< 1: this job's layout is per-node */
} ckpt_cache_drain_info;

#define CKPT_CACHE_DRAIN_INFO_VERSION 1
#define CKPT_CACHE_DRAIN_INFO_INIT { CKPT_CACHE_DRAIN_INFO_VERSION, 0, 0, 0, 0, 0 }

/**
 * Copies checkpoint @p name from the cache level into directory @p dir (NULL: the cache's
 * persistent directory) and commits it there, with the save's protocol and the cache's index
 * byte for byte (the two copies are the same checkpoint); a name taken there is CKPT_EEXISTS.
 * When it is of another shape than this job's, nothing is done: CKPT_OK with
 * @p out->other_shape set on every rank. @p out may be NULL; an unknown @p out->version on any
 * rank is CKPT_EINVAL on every rank. Collective over @p comm: MPI_COMM_NULL is the saver's
 * communicator (ckpt_saver_comm()); inside a commit hook's `committed` half, pass its `comm`.
 */
CKPT_EXTERN int ckpt_saver_cache_drain(ckpt_cache_drain_info *out, ckpt_saver *s, MPI_Comm comm,
                                       const char *name, const char *dir);

/**
 * Each node's leader removes from its node's cache directory every checkpoint named
 * `<stem>-<N>` whose N the sorted list @p keep (@p n counters; NULL with 0: none) lacks: index
 * first, then its other files, and the in-flight directory of a crashed save. Collective over
 * @p comm (MPI_COMM_NULL: the saver's; in a commit hook, its `comm`); the same status on every
 * rank. A no-op (CKPT_OK) without a cache level.
 */
CKPT_EXTERN int ckpt_saver_cache_sweep(ckpt_saver *s, MPI_Comm comm, const char *stem,
                                       const int64_t *keep, size_t n);

/**
 * Each node's leader removes what crashed or failed saves left in its node's cache directory
 * (in-flight directories, workertemp_<r>, data files no index names). Local: this rank's status
 * (agree it, ckpt_mpi_agree()); call it where no save is in flight on any rank. A no-op without
 * a cache level.
 */
CKPT_EXTERN int ckpt_saver_cache_gc(ckpt_saver *s);

#ifdef __cplusplus
}
#endif
#endif
