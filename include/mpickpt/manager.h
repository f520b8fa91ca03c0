/**
 * @file mpickpt/manager.h
 * @brief Checkpoint manager (numbered checkpoints, state file, retention, restore-or-initialize)
 * and the worker training state (chief/ + workertemp_<rank>, epoch broadcast). MPI layer.
 */
#ifndef MPICKPT_MANAGER_H
#define MPICKPT_MANAGER_H

#include "saver.h"
#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_manager ckpt_manager;

/* ckpt_redundancy, the cache level's redundancy: saver.h (ckpt_cache_options). */

/** Options of ckpt_manager_create(). Initialize with CKPT_MANAGER_OPTIONS_INIT. */
typedef struct ckpt_manager_options {
    unsigned int version;       /**< CKPT_MANAGER_OPTIONS_VERSION (1 and 2 are still accepted) */
    int max_to_keep;            /**< newest checkpoints kept (default 5); <= 0 keeps all */
    double keep_every_n_hours;  /**< also keep one checkpoint per this many hours (0: off) */
    int64_t min_step_interval;  /**< skip a save less than this many steps after the last (0: off) */
    const char *name;           /**< checkpoint name stem (default "ckpt": ckpt-1, ckpt-2, ...) */
    /** Restores: 1 leaves per-rank data (components, blobs) of ranks the writer did not have
     *  untouched (resuming on more ranks); 0 makes that an error. See ckpt_restore_options. */
    int skip_missing_per_rank;
    /* ---- version 2: storage levels (docs/levels.md) ---- */
    /** Node-local cache directory ("%n": the node's index, "%%": "%"), e.g. "/dev/shm/ckpt".
     *  NULL: MPICKPT_CACHE_DIR, and when that is unset too, no cache level (every checkpoint
     *  goes to `dir`, as in version 1). With a cache, checkpoints go to the cache and every
     *  persist_every-th also to `dir`; restores take the newest that is whole somewhere. */
    const char *cache_dir;
    int redundancy;             /**< ckpt_redundancy */
    int persist_every;          /**< 0: MPICKPT_PERSIST_EVERY, else 10; 1: every checkpoint */
    int cache_max_to_keep;      /**< newest checkpoints the cache keeps; 0: MPICKPT_CACHE_KEEP,
                                 *   else 2 (max_to_keep stays the persistent directory's) */
    const char *failure_group;  /**< this node's failure group (a rack): partners are in another;
                                 *   NULL: MPICKPT_FAILURE_GROUP, else every node its own */
    /* ---- version 3: one job per directory (docs/operations.md) ---- */
    /** How long creation waits for the directory when another job holds its lock (a requeued
     *  job overlapping the old one's end), in seconds; 0: MPICKPT_LOCK_WAIT, else no wait;
     *  < 0: no wait. A directory still held then is CKPT_EBUSY naming the holder. */
    double lock_wait_seconds;
    /* ---- version 4: strict restores ---- */
    /** 1 (CKPT_MANAGER_OPTIONS_INIT): restores are strict (ckpt_restore_options.strict): a
     *  registered name the checkpoint lacks or a checkpoint entry nobody registered is
     *  CKPT_EMISMATCH on every rank, one message listing them all; 0: what matches is restored
     *  and ckpt_manager_restore_names() lists the rest. NULL options and versions 1-3 restore as
     *  before (a missing name is CKPT_ENOTFOUND, entries nobody registered are ignored). Changed
     *  later with ckpt_manager_set_strict(). */
    int strict_restore;
} ckpt_manager_options;

#define CKPT_MANAGER_OPTIONS_VERSION 4
#define CKPT_MANAGER_OPTIONS_INIT                                                                 \
    { CKPT_MANAGER_OPTIONS_VERSION, 5, 0.0, 0, NULL, 0, NULL, CKPT_REDUNDANCY_DEFAULT, 0, 0, NULL, \
      0.0, 1 }

/** What a save records and how it is retained. */
typedef struct ckpt_manager_save_info {
    int64_t epoch;
    int64_t step;
    int end_of_epoch; /**< 1: taken after `epoch` finished; 0: mid-epoch at `step` */
    int force;        /**< 1: ignore min_step_interval */
} ckpt_manager_save_info;

/**
 * A manager of numbered checkpoints in @p dir (created if missing) using @p saver (borrowed; its
 * registrations are what gets saved; closed first, every call that needs it returns CKPT_EINVAL
 * saying so, and ckpt_manager_free() remains). The chief takes the directory's lock (`DIR/lock`,
 * flock; held until ckpt_manager_free() or the process's end) before it reads the state file (or,
 * when it is missing or damaged, scans the directory) and broadcasts it, so every rank has the
 * same view. A directory another job (or another manager of this process) holds is CKPT_EBUSY on every
 * rank, naming the holder's host, pid and start, unless it is freed within
 * `lock_wait_seconds`. Collective over the saver's communicator.
 */
CKPT_EXTERN int ckpt_manager_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                                    const ckpt_manager_options *opts);

/**
 * Frees the manager (not the saver) and releases the directory's lock. The saver may be closed
 * before or after (the manager is told by ckpt_saver_on_close()). With the saver open, a save in
 * flight (async mode) is waited for first, so that its commit is recorded in the state file and
 * retention runs. If the saver was closed with this manager's save still running
 * (ckpt_saver_close() timed out), the save's calls back into the manager are withdrawn; when one
 * is running at that moment, this returns at once and the manager (with the directory's lock) is
 * released by the save's thread when the call returns. NULL is a no-op. Local.
 */
CKPT_EXTERN void ckpt_manager_free(ckpt_manager *m);

/**
 * Saves `<dir>/<name>-<N>` (N = highest counter ever committed + 1), then the chief updates the
 * state file atomically and applies retention (deleting a checkpoint's index before its data,
 * never the latest). Garbage from earlier crashed saves is removed first by the chief.
 * When skipped by min_step_interval, returns CKPT_OK and @p out (if not NULL) is "".
 * Collective.
 */
CKPT_EXTERN int ckpt_manager_save(ckpt_manager *m, const ckpt_manager_save_info *info, char *out,
                                  size_t out_size);

/**
 * Options of ckpt_manager_save_ex(): what a layer above the manager (a language binding, a
 * framework) needs its ranks to agree on before a save, carried by the save's own first
 * collective call instead of one of the caller's. Initialize with CKPT_MANAGER_SAVE_OPTIONS_INIT.
 */
typedef struct ckpt_manager_save_options {
    unsigned int version; /**< CKPT_MANAGER_SAVE_OPTIONS_VERSION */
    /** The caller's failure on this rank (NULL, or a code of CKPT_OK: none): its code (a
     *  negative ckpt_status), message, errno and reason, as ckpt_error_last() would hold them
     *  (version 1 reads those four fields only). When some rank gives one, nothing is written
     *  and every rank returns the code and message ckpt_mpi_agree() chooses among those ranks'
     *  errors (the most negative code, then the lowest rank; the message prefixed with
     *  "rank R (host H): ", unless it starts by naming a rank: "rank R: ..." is passed on as it
     *  is). Copied by the call. */
    const ckpt_error *error;
    /** A value every rank must pass alike: a digest of what the caller requires to be the same
     *  everywhere (names, a layout). When no rank gives an error and two ranks' values differ,
     *  nothing is written and every rank returns CKPT_EMISMATCH with ckpt_error.reason
     *  CKPT_REASON_CHECK (so the caller can look into it). 0 on every rank: no check. */
    uint64_t check;
} ckpt_manager_save_options;

#define CKPT_MANAGER_SAVE_OPTIONS_VERSION 1
#define CKPT_MANAGER_SAVE_OPTIONS_INIT { CKPT_MANAGER_SAVE_OPTIONS_VERSION, NULL, 0 }

/**
 * ckpt_manager_save() with options (NULL: none), out-parameters first: the caller's error and
 * check (ckpt_manager_save_options) ride the save's first collective call, so a layer above
 * adds none of its own. A save skipped by min_step_interval makes no collective call: it checks
 * neither and drops a caller's error (CKPT_OK on every rank). An unknown options version on any
 * rank is CKPT_EINVAL on every rank, nothing written.
 * Collective.
 */
CKPT_EXTERN int ckpt_manager_save_ex(char *out, size_t out_size, ckpt_manager *m,
                                     const ckpt_manager_save_info *info,
                                     const ckpt_manager_save_options *opts);

/** Full path of the latest checkpoint into @p out ("" when none): the newest a restore would start
 *  from (pins, drops and levels followed: ckpt_manager_restorable()'s `start`). Local
 *  (synchronized view). */
CKPT_EXTERN int ckpt_manager_latest(const ckpt_manager *m, char *out, size_t out_size);

/**
 * Deprecated (removed after 0.3): ckpt_manager_state_copy() or ckpt_manager_restorable(). The
 * kept checkpoints, oldest first. Valid until the next manager call, and only while no async
 * save is in flight (its commit replaces the state). Local.
 */
CKPT_EXTERN const ckpt_state *ckpt_manager_state(const ckpt_manager *m)
    CKPT_DEPRECATED("racy with an async commit: use ckpt_manager_state_copy()");

/**
 * A copy of the kept checkpoints, oldest first, taken under the lock that an async save's commit
 * holds while it updates them: safe while a save is in flight. Free it with ckpt_state_free().
 * Local.
 */
CKPT_EXTERN int ckpt_manager_state_copy(ckpt_state **out, const ckpt_manager *m);

/** Result of the deprecated ckpt_manager_restore_or_initialize(), _restore_step(),
 *  _restore_counter() and ckpt_training_restored() (fixed prefix buffer, no version): use
 *  ckpt_manager_restore_result. */
typedef struct ckpt_manager_restored {
    int restored;        /**< 1: restored from `prefix`; 0: nothing valid, caller initializes */
    char prefix[4096];
    int64_t save_counter;
    int64_t epoch;
    int64_t step;
    int end_of_epoch;
    int32_t world_size;  /**< ranks that wrote it */
    int skipped;         /**< damaged or incomplete checkpoints skipped (each logged as a warning) */
} ckpt_manager_restored;

/** Result of a manager's restore (ckpt_manager_restore_latest(), _restore_at_step(),
 *  _restore_at_counter(), ckpt_training_restore_result()). The caller sets `version`
 *  (CKPT_MANAGER_RESTORE_RESULT_INIT); later versions append fields. */
typedef struct ckpt_manager_restore_result {
    unsigned int version; /**< in: CKPT_MANAGER_RESTORE_RESULT_VERSION */
    int restored;         /**< 1: restored from `prefix`; 0: nothing valid, caller initializes */
    /** The restored checkpoint's full path ("" when restored = 0), owned by the manager (the
     *  training state): valid until its next restore or its free. */
    const char *prefix;
    int64_t save_counter;
    int64_t epoch;
    int64_t step;
    int end_of_epoch;
    int32_t world_size; /**< ranks that wrote it */
    int skipped;        /**< damaged or incomplete checkpoints skipped (each logged as a warning) */
} ckpt_manager_restore_result;

#define CKPT_MANAGER_RESTORE_RESULT_VERSION 1
#define CKPT_MANAGER_RESTORE_RESULT_INIT                                                          \
    { CKPT_MANAGER_RESTORE_RESULT_VERSION, 0, NULL, 0, 0, 0, 0, 0, 0 }

/**
 * Restores the newest valid checkpoint (restore-or-initialize): candidates are the state file's
 * entries newest first (or the scanned directory). A candidate that is damaged or incomplete
 * (missing index or data, a failed checksum) is skipped with a warning naming it and the cause,
 * and the next older one is tried — never silently, never a torn one. A mismatch between the
 * registrations and a valid checkpoint is an error, not a reason to fall back. When nothing valid
 * exists, returns CKPT_OK with restored = 0. Epoch and step come from what the chief read,
 * identical on every rank.
 * The restart control (`mpickpt pin`/`drop`, docs/operations.md) is followed: dropped checkpoints
 * and those a pin set aside are not candidates, and a pinned checkpoint that cannot be restored
 * (with nothing restorable newer than the pin) is CKPT_ENOTFOUND naming it on every rank, never a
 * fall back past it. The candidates are those ckpt_manager_restorable() lists, from its `start`
 * down, never one behind the pin. out->version 0 or newer than this library's (or a NULL out) is
 * CKPT_EINVAL on every rank, agreed before anything else: one rank's is every rank's error.
 * Collective.
 */
CKPT_EXTERN int ckpt_manager_restore_latest(ckpt_manager_restore_result *out, ckpt_manager *m);

/** Deprecated (removed after 0.3): ckpt_manager_restore_latest(). The same restore, the prefix
 *  cut to 4095 bytes. Collective. */
CKPT_EXTERN int ckpt_manager_restore_or_initialize(ckpt_manager *m, ckpt_manager_restored *out)
    CKPT_DEPRECATED("use ckpt_manager_restore_latest()");

/** Sets whether this manager's restores are strict (ckpt_manager_options.strict_restore).
 *  Local: call it with the same value on every rank. */
CKPT_EXTERN void ckpt_manager_set_strict(ckpt_manager *m, int strict);

/**
 * The names the last restore of this manager (restore_or_initialize, restore_step,
 * restore_counter, a training state's restore) compared (ckpt_restore_options.missing and
 * .unexpected), the same on every rank; NULL when it compared none (options version < 4, or it
 * failed before). Owned by the manager: valid until its next restore or ckpt_manager_free().
 * Local.
 */
CKPT_EXTERN void ckpt_manager_restore_names(const ckpt_manager *m, const ckpt_name_list **missing,
                                            const ckpt_name_list **unexpected);

/** What the restart control (`mpickpt pin`, docs/operations.md) makes of a restorable checkpoint
 *  (ckpt_manager_restorable_entry.restart). */
typedef enum ckpt_restart_status {
    CKPT_RESTART_NORMAL = 0,    /**< restore_or_initialize may start from it or fall back to it */
    CKPT_RESTART_PINNED = 1,    /**< the pinned checkpoint */
    CKPT_RESTART_BEHIND_PIN = 2 /**< older than the pin: restore_or_initialize never falls back
                                 *   to it; restored only when chosen (ckpt_manager_restore_step) */
} ckpt_restart_status;

/** One checkpoint a restore may use. */
typedef struct ckpt_manager_restorable_entry {
    ckpt_state_entry entry; /**< as the state lists it, but entry.levels holds only the levels
                             *   this manager restores it from (the cache first): never 0 */
    int restart;            /**< ckpt_restart_status */
} ckpt_manager_restorable_entry;

/** The checkpoints a restore may use, oldest first (ckpt_manager_restorable()). */
typedef struct ckpt_manager_restorable_list {
    ckpt_manager_restorable_entry *entries;
    size_t num_entries;
    size_t start; /**< the entry ckpt_manager_restore_or_initialize() tries first (the one
                   *   ckpt_manager_latest() names); num_entries when there is none */
} ckpt_manager_restorable_list;

/**
 * The checkpoints this manager may restore, oldest first: the state's entries that are neither
 * dropped nor set aside by a pin (`mpickpt drop`/`pin`) and that are on a level this manager reads
 * (a checkpoint only in the nodes' caches is not, without a cache level). The same rules decide
 * ckpt_manager_restore_or_initialize(), ckpt_manager_restore_step() and ckpt_manager_latest().
 * Taken under the lock an async save's commit holds: safe while a save is in flight. Free it with
 * ckpt_manager_restorable_free(). Local (every rank has the same view).
 */
CKPT_EXTERN int ckpt_manager_restorable(ckpt_manager_restorable_list **out, const ckpt_manager *m);

/** Frees a list of ckpt_manager_restorable(). NULL is a no-op. Local. */
CKPT_EXTERN void ckpt_manager_restorable_free(ckpt_manager_restorable_list *list);

/**
 * Restores the checkpoint of step @p step (the newest restorable one with that step) under the
 * rules of ckpt_manager_restore_or_initialize(), but never another checkpoint instead:
 * - a checkpoint that is dropped or set aside by a pin, or only in the nodes' caches without a
 *   cache level here, is CKPT_ENOTFOUND naming it, why and what to do (`mpickpt drop --undo`,
 *   `mpickpt pin --clear`); so is a step no checkpoint has (the restorable steps are named);
 * - the level is the manager's choice: the cache copy first (rebuilt from partners when a node
 *   lost its files), then the persistent copy;
 * - a damaged or incomplete checkpoint is an error naming it (CKPT_ECORRUPT, or the code of the
 *   cause), with no fallback to an older one; a registration that does not match a valid
 *   checkpoint is an error as for restore_or_initialize.
 * A checkpoint older than the pin (CKPT_RESTART_BEHIND_PIN) may be chosen. On success
 * out->restored is 1 and out->skipped 0. An out->version this library does not know, on any rank,
 * is CKPT_EINVAL on every rank. Collective (the same status on every rank).
 */
CKPT_EXTERN int ckpt_manager_restore_at_step(ckpt_manager_restore_result *out, ckpt_manager *m,
                                             int64_t step);

/** ckpt_manager_restore_at_step() of the checkpoint with save counter @p save_counter (its
 *  number: ckpt-7 has 7). Collective. */
CKPT_EXTERN int ckpt_manager_restore_at_counter(ckpt_manager_restore_result *out,
                                                ckpt_manager *m, int64_t save_counter);

/** Deprecated (removed after 0.3): ckpt_manager_restore_at_step(). Collective. */
CKPT_EXTERN int ckpt_manager_restore_step(ckpt_manager_restored *out, ckpt_manager *m,
                                          int64_t step)
    CKPT_DEPRECATED("use ckpt_manager_restore_at_step()");

/** Deprecated (removed after 0.3): ckpt_manager_restore_at_counter(). Collective. */
CKPT_EXTERN int ckpt_manager_restore_counter(ckpt_manager_restored *out, ckpt_manager *m,
                                             int64_t save_counter)
    CKPT_DEPRECATED("use ckpt_manager_restore_at_counter()");

/** Which checkpoint ckpt_manager_restore_ex() restores. */
typedef enum ckpt_manager_restore_which {
    CKPT_MANAGER_RESTORE_LATEST = 0,  /**< restore-or-initialize: ckpt_manager_restore_latest() */
    CKPT_MANAGER_RESTORE_STEP = 1,    /**< ckpt_manager_restore_at_step(`value`) */
    CKPT_MANAGER_RESTORE_COUNTER = 2  /**< ckpt_manager_restore_at_counter(`value`) */
} ckpt_manager_restore_which;

/**
 * Options of ckpt_manager_restore_ex(): which checkpoint, and what a layer above the manager
 * needs its ranks to agree on before the restore reads anything, carried by the restore's first
 * collective call. Initialize with CKPT_MANAGER_RESTORE_OPTIONS_INIT.
 */
typedef struct ckpt_manager_restore_options {
    unsigned int version; /**< CKPT_MANAGER_RESTORE_OPTIONS_VERSION */
    int which;            /**< a ckpt_manager_restore_which, the same on every rank */
    /** The step or save counter (`which` STEP, COUNTER), the same on every rank. */
    int64_t value;
    /** The caller's failure on this rank, as ckpt_manager_save_options.error: when some rank
     *  gives one, nothing is read and every rank returns it (agreed). Copied by the call. */
    const ckpt_error *error;
    /** As ckpt_manager_save_options.check: values that differ across ranks (no rank giving an
     *  error) are CKPT_EMISMATCH with reason CKPT_REASON_CHECK on every rank, nothing read. */
    uint64_t check;
    /** 1 on some rank: this restore is not strict on any rank (as ckpt_manager_set_strict(m, 0)
     *  for this call): what matches is restored and the names are listed
     *  (ckpt_manager_restore_names()) for a caller that compares them itself. 0 everywhere: the
     *  manager's setting. */
    int lenient;
} ckpt_manager_restore_options;

#define CKPT_MANAGER_RESTORE_OPTIONS_VERSION 1
#define CKPT_MANAGER_RESTORE_OPTIONS_INIT                                                          \
    { CKPT_MANAGER_RESTORE_OPTIONS_VERSION, CKPT_MANAGER_RESTORE_LATEST, 0, NULL, 0, 0 }

/**
 * The manager's restore with options (NULL: ckpt_manager_restore_latest()): `which` chooses
 * ckpt_manager_restore_latest(), _at_step() or _at_counter() (each restores as documented there),
 * and the caller's error, check and leniency ride the restore's first collective call (one
 * MPI_Allreduce that also compares `which` and `value` across ranks: ranks that differ are
 * CKPT_EINVAL on every rank), so a layer above adds none of its own. An unknown options version or
 * `which` on any rank is CKPT_EINVAL on every rank, nothing read. Collective.
 */
CKPT_EXTERN int ckpt_manager_restore_ex(ckpt_manager_restore_result *out, ckpt_manager *m,
                                        const ckpt_manager_restore_options *opts);

/* ------------------------------------------------------------------------------------------ */
/* Worker training state (TensorFlow's BackupAndRestore)                                       */

typedef struct ckpt_training ckpt_training;

/**
 * Training state under @p dir: committed checkpoints in `<dir>/chief/` (one kept, like the seed's
 * max_to_keep=1, unless @p opts says otherwise), non-chief ranks' in-flight parts in
 * `<dir>/workertemp_<rank>/`, emptied after each backup. Its manager holds the lock of
 * `<dir>/chief/` (ckpt_manager_create) until ckpt_training_free(). Collective.
 */
CKPT_EXTERN int ckpt_training_create(ckpt_training **out, ckpt_saver *saver, const char *dir,
                                     const ckpt_manager_options *opts);

/** Frees it. NULL is a no-op. Local. */
CKPT_EXTERN void ckpt_training_free(ckpt_training *t);

/** Backs up the state at @p epoch / @p step (end_of_epoch: the epoch finished). Collective. */
CKPT_EXTERN int ckpt_training_back_up(ckpt_training *t, int64_t epoch, int64_t step,
                                      int end_of_epoch);

/**
 * Restores the latest backup (falling back past damaged ones) and broadcasts epoch and step from
 * the chief so every rank resumes at the same point whatever its own view of the file system.
 * @p restored is 0 when there was nothing to restore. Collective.
 */
CKPT_EXTERN int ckpt_training_restore(ckpt_training *t, int *restored);

/**
 * The epoch to start from: saved epoch + 1 after an end-of-epoch backup, the saved epoch after a
 * mid-epoch one (then ckpt_training_initial_step() is the saved step + 1), else @p initial.
 * Local; valid after ckpt_training_restore().
 */
CKPT_EXTERN int64_t ckpt_training_initial_epoch(const ckpt_training *t, int64_t initial);

/** The global step to start from: the saved step + 1 after any backup; else @p initial. Local. */
CKPT_EXTERN int64_t ckpt_training_initial_step(const ckpt_training *t, int64_t initial);

/** What ckpt_training_restore() restored (restored = 0 when nothing; out->prefix owned by the
 *  training state, valid until its next restore or its free). CKPT_EINVAL for an unknown
 *  out->version. Local. */
CKPT_EXTERN int ckpt_training_restore_result(ckpt_manager_restore_result *out,
                                             const ckpt_training *t);

/** Deprecated (removed after 0.3): ckpt_training_restore_result(). Local. */
CKPT_EXTERN const ckpt_manager_restored *ckpt_training_restored(const ckpt_training *t)
    CKPT_DEPRECATED("use ckpt_training_restore_result()");

/** ckpt_training_restore() with options (NULL: none), out-parameters first: the caller's error,
 *  check and leniency as in ckpt_manager_restore_ex(), whose `which` must be
 *  CKPT_MANAGER_RESTORE_LATEST (else CKPT_EINVAL on every rank). Collective. */
CKPT_EXTERN int ckpt_training_restore_ex(int *restored, ckpt_training *t,
                                         const ckpt_manager_restore_options *opts);

/** The manager behind the training state (for latest/state/list). */
CKPT_EXTERN ckpt_manager *ckpt_training_manager(ckpt_training *t);

/**
 * Removes the whole backup directory once training finished: all ranks first agree that none is
 * still using it, then the chief removes it. Collective.
 */
CKPT_EXTERN int ckpt_training_delete_backup(ckpt_training *t);

#ifdef __cplusplus
}
#endif
#endif
