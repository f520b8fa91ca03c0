/*
 * The checkpoint manager's state, shared by its modules (not installed):
 *   manager.c          create and free, the accessors, the save, its commit hooks, retention
 *   manager_share.c    the rule of what a restore may use (candidate), the chief's state and
 *                      restart control broadcast to every rank, committed checkpoints adopted
 *   manager_levels.c   the cache level's policy: settings, sweep, retention, drain
 *   manager_restore.c  the restores (latest, at a step or counter) and their reports
 *   training.c         the worker training state over a manager
 */
#ifndef MPICKPT_MANAGER_INTERNAL_H
#define MPICKPT_MANAGER_INTERNAL_H

#include "mpickpt/manager.h"

#include "dirlock.h"
#include "internal.h"
#include "reaper.h"
#include "restart.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct ckpt_manager {
    ckpt_saver *saver;
    MPI_Comm comm;
    int rank;
    char dir[4096]; /* the chief's path, adopted by every rank */
    char name[200];
    ckpt_manager_options opts;
    ckpt_state *state; /* the chief's view, identical on every rank */
    /* The step of the last save this job made or restored from: min_step_interval counts from it
     * (after falling back past a damaged latest, from the checkpoint actually restored). */
    int have_last;
    int64_t last_step;
    /* In async mode the writer thread updates the state after each commit (the commit hook);
     * the lock keeps the application's reads of it consistent. */
    pthread_mutex_t lock;
    ckpt_manager_save_info pending; /* what the save in flight records */
    /* The cache level (docs/levels.md): rank 0's settings, the same on every rank. */
    int cache;
    int64_t persist_every, cache_keep;
    char drain_pending[256]; /* a failed drain, tried again at the next save */
    int pending_persist;     /* the save in flight also goes to `dir` (drained after its commit) */
    /* The restart control (`mpickpt pin`/`drop`, lib/restart.h): rank 0's reading of
     * <dir>/restart, the same on every rank; read at creation and before each save. */
    ckpt__restart ctl;
    ckpt__dirlock *dirlock; /* rank 0: the lock of `dir` (lib/dirlock.h), held until free */
    /* the last restore's comparison of names (strict restores), or NULL */
    ckpt_name_list *miss, *unexp;
    int legacy_restore; /* NULL options or version < 4: not strict means restore options v1 */
    int lenient;        /* this restore is not strict (ckpt_manager_restore_options.lenient) */
    /* rank 0: the blocks of retention's deleted files, freed in the background (lib/reaper.h)
     * unless MPICKPT_RETENTION=inline; waited for by the next batch, the next save's sweep, a
     * removal of the directory and the free */
    ckpt__reaper reaper;
    int retention_inline;
    /* the last restore's prefix, where ckpt_manager_restore_result.prefix points */
    char restored_prefix[4400];
    /* The saver's lifetime (manager.c, told by ckpt_saver_on_close): open; closed (`saver` is
     * NULL); or closed with a save left running (its close timed out: `saver` stays allocated
     * but unused, the save may still call the commit hooks through `guard`). */
    enum { CKPT__SAVER_OPEN, CKPT__SAVER_CLOSED, CKPT__SAVER_LEFT_RUNNING } saver_state;
    int on_close;                  /* the close callback is registered with the saver */
    struct ckpt__mgr_guard *guard; /* the commit hooks' payload (manager.c) */
};

/* Why no restore may use an entry (ckpt__mgr_candidate() < 0). */
enum { NOT_DROPPED = CKPT__CAND_DROPPED, NOT_ASIDE = CKPT__CAND_ASIDE, NOT_LEVEL = CKPT__CAND_LEVEL };
_Static_assert((int)CKPT__CAND_NORMAL == (int)CKPT_RESTART_NORMAL &&
                   (int)CKPT__CAND_PINNED == (int)CKPT_RESTART_PINNED &&
                   (int)CKPT__CAND_BEHIND_PIN == (int)CKPT_RESTART_BEHIND_PIN,
               "lib/restart.h's candidates are ckpt_restart_status values");

/* manager_share.c */
int ckpt__mgr_rs_of(const ckpt_manager *m, const ckpt_state_entry *e);
unsigned ckpt__mgr_levels_of(const ckpt_state_entry *e);
int ckpt__mgr_candidate(const ckpt_manager *m, const ckpt_state_entry *e, unsigned *levels);
size_t ckpt__mgr_start_of(const ckpt_manager *m, const ckpt_state *st);
int ckpt__mgr_bcast_bytes(ckpt_manager *m, MPI_Comm comm, uint8_t **buf, size_t *len, int local);
int ckpt__mgr_share_state(ckpt_manager *m, MPI_Comm comm, int local);
int ckpt__mgr_share_control(ckpt_manager *m);
/* what the caller of a save asks every rank to agree on (ckpt_manager_save_options), carried by
 * the control's vote: in, this rank's; out, every rank's bitwise OR (not_check: of ~check) */
typedef struct ckpt__mgr_caller_vote {
    uint64_t failed, check, not_check;
} ckpt__mgr_caller_vote;
int ckpt__mgr_vote_control(ckpt_manager *m, ckpt__mgr_caller_vote *caller);
/* A caller's error on this rank (ckpt_manager_save_options.error, _restore_options.error; `what`
 * names the struct) raised as this rank's error (its code, message, errno, reason); CKPT_OK for
 * none (NULL or CKPT_OK), CKPT_EINVAL for a positive code. Local. */
int ckpt__mgr_caller_error(const ckpt_manager *m, const ckpt_error *e, const char *what);
int ckpt__mgr_adopt_unlisted(ckpt_manager *m, const char *dir, const char *shown, unsigned level);
int ckpt__mgr_adopt_drained(ckpt_manager *m);

/* manager.c */
int ckpt__mgr_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                     const ckpt_manager_options *opts, int levels_from_env);
size_t ckpt__mgr_opts_size(unsigned version);
int ckpt__mgr_take_dirlock(ckpt_manager *m, int dirfd);
/* What ckpt_manager_free releases, once no save can call the manager any more. */
void ckpt__mgr_release(ckpt_manager *m);
int ckpt__mgr_apply_retention(ckpt_manager *m);
void ckpt__mgr_new_entry(ckpt_state_entry *e, const char *prefix, int64_t counter,
                         const ckpt_manager_save_info *info, unsigned levels);

/* manager_levels.c */
int ckpt__mgr_levels_setup(ckpt_manager *m, int from_env);
int ckpt__mgr_sweep_cache(ckpt_manager *m, MPI_Comm comm);
void ckpt__mgr_cache_retention(ckpt_manager *m);
int ckpt__mgr_cache_bytes(uint64_t *bytes, const char *prefix);
int ckpt__mgr_cache_committed(ckpt_manager *m, MPI_Comm comm, const char *prefix,
                              int64_t counter);
int ckpt__mgr_drain(ckpt_manager *m, MPI_Comm comm, const char *name);
int ckpt__mgr_drain_pending(ckpt_manager *m);

/* manager_life.c: the manager's lifetime over its saver (the saver's public close callbacks) */
/* At create: the hooks' guard made, the close callback registered. Local status. */
int ckpt__mgr_watch_saver(ckpt_manager *m);
/* CKPT_OK while the saver is open; else CKPT_EINVAL naming `fn`: its saver was closed. Local
 * (a close is collective: every rank gives the same answer). */
int ckpt__mgr_saver_open(const ckpt_manager *m, const char *fn);
/* At free: the save in flight waited for and the callback withdrawn, or, after a timed-out
 * close, the hooks withdrawn. 1: a hook runs now and releases the manager when it returns. */
int ckpt__mgr_unwatch_saver(ckpt_manager *m);
/* A save's hooks (their payload: the manager) through the guard, before the save. */
void ckpt__mgr_guard_hooks(ckpt_manager *m, ckpt_commit_hooks *h);
void ckpt__mgr_guard_free(struct ckpt__mgr_guard *g);

/* manager_restore.c */
void ckpt__mgr_result_legacy(ckpt_manager_restored *out, const ckpt_manager_restore_result *r);
/* ckpt_manager_restore_ex() named `fn` in its errors; latest_only: `which` other than
 * CKPT_MANAGER_RESTORE_LATEST is CKPT_EINVAL on every rank (a training state's restore). */
int ckpt__mgr_restore_ex(ckpt_manager_restore_result *out, ckpt_manager *m,
                         const ckpt_manager_restore_options *o, const char *fn, int latest_only);

#endif
