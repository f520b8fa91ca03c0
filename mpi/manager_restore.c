/*
 * The manager's restores (mpi/manager_internal.h): the newest restorable checkpoint with fallback
 * past damaged ones (ckpt_manager_restore_latest), a chosen one (at a step or a save counter),
 * their deprecated wrappers, the strict comparison of names, and why nothing could be restored.
 */
#include "manager_internal.h"

#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"

#include <stdio.h>
#include <string.h>

/* What restore_or_initialize tells after restoring `prefix` (out->prefix: the manager's copy). */
static int restored(ckpt_manager *m, ckpt_manager_restore_result *out, const char *prefix,
                    const ckpt_restore_info *info)
{
    out->restored = 1;
    snprintf(m->restored_prefix, sizeof m->restored_prefix, "%s", prefix);
    out->prefix = m->restored_prefix;
    out->save_counter = info->save_counter;
    out->epoch = info->epoch;
    out->step = info->step;
    out->end_of_epoch = info->end_of_epoch;
    out->world_size = info->world_size;
    m->have_last = 1;
    m->last_step = info->step;
    return CKPT_OK;
}

/* The restore reached past the pinned checkpoint: an error on every rank (the same state and
 * control everywhere), never a silent start from an older one or from scratch. */
static int pin_error(const ckpt_manager *m, int pin_listed)
{
    return ckpt__restart_pin_error(&m->ctl, m->dir, pin_listed);
}

/*
 * Restores entry `e` from `levels` (ckpt__mgr_candidate()'s): the cache copy first (rebuilt from
 * partners when a node lost its files), then the persistent copy. A failure sets *damaged: 1 when
 * the checkpoint could not be made whole or read (damaged, incomplete, gone from the caches), which
 * restore_or_initialize falls back past (`fallback`: its warnings say so); 0 when what was
 * registered does not match a valid checkpoint, an error for every caller. Collective.
 */
static int restore_entry(ckpt_manager *m, const ckpt_state_entry *e, unsigned levels,
                         int fallback, ckpt_manager_restore_result *out, int *damaged)
{
    ckpt_restore_options ropts = CKPT_RESTORE_OPTIONS_INIT;
    ropts.skip_missing_per_rank = m->opts.skip_missing_per_rank;
    int strict = m->opts.strict_restore && !m->lenient; /* lenient: restore_vote */
    ropts.strict = strict;
    if (m->legacy_restore && !strict)
        ropts.strict = CKPT_RESTORE_NO_COMPARE; /* as before strict restores */
    ckpt_name_list_free(m->miss);
    ckpt_name_list_free(m->unexp);
    m->miss = m->unexp = NULL;
    ropts.missing = &m->miss;
    ropts.unexpected = &m->unexp;
    ckpt_restore_info info;
    char prefix[4400];
    int rc;
    *damaged = 0;
    /* A cache copy that cannot be made whole, or not on this job's shape, is not an error: the
     * persistent copy is next (or, for restore_or_initialize, an older checkpoint). */
    if (levels & CKPT_LEVEL_CACHE) {
        int unavailable = 1;
        ropts.level = CKPT_LEVEL_CACHE;
        ropts.unavailable = &unavailable;
        rc = ckpt_saver_restore(m->saver, e->prefix, &ropts, &info);
        ropts.level = CKPT_LEVEL_PERSISTENT;
        ropts.unavailable = NULL;
        if (rc == CKPT_OK) {
            snprintf(prefix, sizeof prefix, "%s/%s", ckpt_saver_cache_dir(m->saver),
                     e->prefix);
            return restored(m, out, prefix, &info);
        }
        /* The copy was whole and read: what was registered does not match it (as with the
         * directory, only damage found while reading falls through) */
        if (!unavailable && rc != CKPT_ECORRUPT)
            return rc;
        *damaged = 1;
        if (m->rank == 0 && (fallback || (levels & CKPT_LEVEL_PERSISTENT)))
            ckpt__log(CKPT_LOG_WARN, "checkpoint %s cannot be restored from the cache: %s; %s",
                      e->prefix, ckpt_error_last()->message,
                      (levels & CKPT_LEVEL_PERSISTENT) ? "trying its copy in the persistent "
                                                         "directory"
                                                       : "trying an older one");
        if (!(levels & CKPT_LEVEL_PERSISTENT))
            return rc;
        /* the cache's attempt may have listed names already: the persistent one lists again */
        ckpt_name_list_free(m->miss);
        ckpt_name_list_free(m->unexp);
        m->miss = m->unexp = NULL;
    }
    /* (fits: dir < 4096 bytes, a prefix < 256; the saver's restore adopts the chief's) */
    (void)ckpt__path(prefix, sizeof prefix, "%s/%s", m->dir, e->prefix);
    /* The saver's chief opens the candidate (index, sizes of its data files) before anything is
     * read. A damaged checkpoint (corrupt, of a future version, its index gone) is told apart from
     * a registration that does not match by the agreed status and, for CKPT_ENOTFOUND, its
     * reason: no checkpoint there (damaged) or a registered tensor it lacks (the registration).
     * The chief opened it once more before the reason existed (issue 31). */
    rc = ckpt_saver_restore(m->saver, prefix, &ropts, &info);
    if (rc == CKPT_OK)
        return restored(m, out, prefix, &info);
    *damaged = rc == CKPT_ECORRUPT || rc == CKPT_EVERSION ||
               (rc == CKPT_ENOTFOUND &&
                ckpt__error_reason(rc) == CKPT_REASON_NO_CHECKPOINT);
    if (*damaged && fallback && m->rank == 0)
        ckpt__log(CKPT_LOG_WARN, "skipping checkpoint %s: %s; trying an older one", prefix,
                  ckpt_error_last() ? ckpt_error_last()->message : ckpt_strerror(rc));
    return rc;
}

void ckpt_manager_set_strict(ckpt_manager *m, int strict)
{
    if (m)
        m->opts.strict_restore = strict != 0;
}

void ckpt_manager_restore_names(const ckpt_manager *m, const ckpt_name_list **missing,
                                const ckpt_name_list **unexpected)
{
    if (missing)
        *missing = m ? m->miss : NULL;
    if (unexpected)
        *unexpected = m ? m->unexp : NULL;
}

/* A restore's result before it starts: CKPT_EINVAL (nothing written) for a version this library
 * does not know, else emptied (the version kept, the prefix ""). Local. */
static int result_start(ckpt_manager_restore_result *out, ckpt_manager *m, const char *fn)
{
    if (!out || !m)
        return ckpt__error(CKPT_EINVAL, "%s: NULL argument", fn);
    if (out->version < 1 || out->version > CKPT_MANAGER_RESTORE_RESULT_VERSION)
        return ckpt__error(CKPT_EINVAL,
                           "%s: unknown ckpt_manager_restore_result version %u (this library "
                           "knows 1..%d)",
                           fn, out->version, CKPT_MANAGER_RESTORE_RESULT_VERSION);
    unsigned int version = out->version;
    memset(out, 0, sizeof *out);
    out->version = version;
    m->restored_prefix[0] = '\0';
    out->prefix = m->restored_prefix;
    return CKPT_OK;
}

/* The deprecated result (ckpt_manager_restored) of a restore, as before: the prefix cut. */
void ckpt__mgr_result_legacy(ckpt_manager_restored *out, const ckpt_manager_restore_result *r)
{
    memset(out, 0, sizeof *out);
    out->restored = r->restored;
    snprintf(out->prefix, sizeof out->prefix, "%s", r->prefix ? r->prefix : "");
    out->save_counter = r->save_counter;
    out->epoch = r->epoch;
    out->step = r->step;
    out->end_of_epoch = r->end_of_epoch;
    out->world_size = r->world_size;
    out->skipped = r->skipped;
}

/* The newest restorable checkpoint, after restore_vote (ckpt_manager_restore_latest). */
static int restore_latest(ckpt_manager_restore_result *out, ckpt_manager *m)
{
    int rc;
    /* A save in flight first: its commit may be the newest checkpoint (its failure, if any, is
     * reported by the next save, sync or close). */
    ckpt_saver_wait(m->saver);
    const ckpt_state *st = m->state;
    /* A pin (`mpickpt pin`): the pinned checkpoint is the restart point unless a newer one,
     * committed after the pin was set, can be restored; the restore never goes past it. */
    int pin_listed = 0;
    for (size_t k = 0; k < st->num_entries; k++)
        pin_listed |= ckpt__mgr_rs_of(m, &st->entries[k]) == CKPT__RS_PINNED;
    for (size_t k = st->num_entries; k-- > 0;) {
        const ckpt_state_entry *e = &st->entries[k];
        unsigned lv;
        int c = ckpt__mgr_candidate(m, e, &lv);
        if (c == NOT_DROPPED || c == NOT_ASIDE) {
            if (m->rank == 0)
                ckpt__log(CKPT_LOG_INFO, "not restoring %s/%s: %s", m->dir, e->prefix,
                          c == NOT_DROPPED ? "dropped" : "set aside by a pin");
            continue;
        }
        if (c == CKPT_RESTART_BEHIND_PIN)
            return pin_error(m, pin_listed);
        if (c == NOT_LEVEL)
            continue; /* only in a cache this manager does not use */
        int damaged = 0;
        rc = restore_entry(m, e, lv, 1, out, &damaged);
        if (rc == CKPT_OK || !damaged)
            return rc;
        out->skipped++;
    }
    if (m->ctl.pinned) { /* the pinned one was not even reached: nothing at or above it */
        return pin_error(m, pin_listed);
    }
    if (m->rank == 0 && out->skipped)
        ckpt__log(CKPT_LOG_WARN, "no valid checkpoint in %s (%d damaged); starting fresh", m->dir,
                  out->skipped);
    ckpt_error_clear(); /* kept: the damaged candidates' errors, its own (logged above); a public
                         * collective that returns CKPT_OK with nothing restored */
    return CKPT_OK;
}

/* Deprecated wrapper (docs/api.md "Deprecated"): ckpt_manager_restore_latest() */
int ckpt_manager_restore_or_initialize(ckpt_manager *m, ckpt_manager_restored *out)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_latest(&r, m);
    ckpt__mgr_result_legacy(out, &r);
    return rc;
}

/* Why `e` (ckpt__mgr_candidate() gave `why` < 0) cannot be restored, and what to do:
 * CKPT_ENOTFOUND. The same on every rank (the same state and control everywhere). */
static int refuse(const ckpt_manager *m, const ckpt_state_entry *e, int why)
{
    if (why == NOT_DROPPED)
        return ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND,
                           "%s/%s (step %lld) is dropped (%s/%s): take the drop back with "
                           "`mpickpt drop --undo %s %s` or restore another checkpoint",
                           m->dir, e->prefix, (long long)e->step, m->dir, CKPT__RESTART_FILE,
                           m->dir, e->prefix), CKPT_REASON_PINNED);
    if (why == NOT_ASIDE)
        return ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND,
                           "%s/%s (step %lld) is set aside by the pin of %s (%s/%s): clear the "
                           "pin (`mpickpt pin --clear %s`) or pin it (`mpickpt pin %s %s`)",
                           m->dir, e->prefix, (long long)e->step, m->ctl.pin, m->dir,
                           CKPT__RESTART_FILE, m->dir, m->dir, e->prefix), CKPT_REASON_PINNED);
    return ckpt__error_set_reason(
        ckpt__error(CKPT_ENOTFOUND,
                    "%s/%s (step %lld) is only in the nodes' cache directories and this "
                    "manager has no cache level: create it with the cache_dir "
                    "(MPICKPT_CACHE_DIR) that saved it",
                    m->dir, e->prefix, (long long)e->step),
        CKPT_REASON_NO_CHECKPOINT);
}

/* No checkpoint with that step (save counter): CKPT_ENOTFOUND naming the restorable ones. */
static int not_found(const ckpt_manager *m, int by_counter, int64_t value)
{
    char list[600] = "";
    size_t n = 0, len = 0;
    const ckpt_state *st = m->state;
    for (size_t i = 0; i < st->num_entries; i++) {
        unsigned lv;
        const ckpt_state_entry *e = &st->entries[i];
        if (ckpt__mgr_candidate(m, e, &lv) < 0)
            continue;
        if (len + 40 < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld", n ? ", " : "",
                                    (long long)(by_counter ? e->save_counter : e->step));
        else if (len + 5 < sizeof list && list[len - 1] != '.')
            len += (size_t)snprintf(list + len, sizeof list - len, ", ...");
        n++;
    }
    return ckpt__error_set_reason(
        ckpt__error(CKPT_ENOTFOUND, "%s lists no checkpoint of %s %lld (restorable: %s)", m->dir,
                    by_counter ? "save counter" : "step", (long long)value, n ? list : "none"),
        CKPT_REASON_NO_CHECKPOINT);
}

/* ckpt_manager_restore_at_step/_counter, after restore_vote (every rank asked for the same
 * `value`): the newest entry with that step (save counter) that a restore may use, else an error
 * naming why; never another checkpoint. Collective. */
static int restore_chosen(ckpt_manager_restore_result *out, ckpt_manager *m, int by_counter,
                          int64_t value)
{
    int rc;
    ckpt_saver_wait(m->saver); /* a save in flight may commit the one asked for */
    /* decided from the shared state and control: the same on every rank */
    const ckpt_state *st = m->state;
    const ckpt_state_entry *e = NULL, *refused = NULL;
    unsigned lv = 0;
    int why = 0;
    for (size_t k = st->num_entries; !e && k-- > 0;) {
        const ckpt_state_entry *x = &st->entries[k];
        unsigned l;
        int c;
        if ((by_counter ? x->save_counter : x->step) != value)
            continue;
        if ((c = ckpt__mgr_candidate(m, x, &l)) >= 0) {
            e = x;
            lv = l;
        } else if (!refused) {
            refused = x;
            why = c;
        }
    }
    if (!e)
        return refused ? refuse(m, refused, why) : not_found(m, by_counter, value);
    int damaged = 0;
    rc = restore_entry(m, e, lv, 0, out, &damaged);
    if (rc != CKPT_OK && damaged)
        ckpt__error_wrap(rc, "checkpoint %s (step %lld) cannot be restored (no other is restored "
                             "in its place)",
                         e->prefix, (long long)e->step);
    return rc;
}

/* The restore's first agreement, with the caller's options: one MPI_Allreduce (the minimum of
 * int64s) of this rank's status, whether it asks for leniency, and each value every rank must
 * pass alike with its complement (which, value, the check's halves: alike where the minimum of
 * the complements is the complement of the minimum). A failed status is agreed (ckpt_mpi_agree:
 * a second call only then); values that differ are an error made alike on every rank. Sets
 * m->lenient on every rank. Collective. */
static int restore_vote(ckpt_manager *m, int local, const ckpt_manager_restore_options *o)
{
    int64_t which = o ? o->which : CKPT_MANAGER_RESTORE_LATEST;
    int64_t value = o && which != CKPT_MANAGER_RESTORE_LATEST ? o->value : 0;
    uint64_t check = o ? o->check : 0;
    int64_t hi = (int64_t)(check >> 32), lo = (int64_t)(check & 0xffffffffu);
    int64_t v[10] = { local, o && o->lenient ? -1 : 0, which, ~which, value, ~value, hi, ~hi,
                      lo, ~lo };
    int64_t r[10];
    m->lenient = 0;
    if (MPI_Allreduce(v, r, 10, MPI_INT64_T, MPI_MIN, m->comm) != MPI_SUCCESS)
        return ckpt_mpi_agree(m->comm,
                              ckpt__error(CKPT_EMPI, "MPI_Allreduce of the restore's vote failed"));
    if (r[0] != CKPT_OK)
        return ckpt_mpi_agree(m->comm, local);
    int rc = CKPT_OK;
    if (r[2] != ~r[3])
        rc = ckpt__error(CKPT_EINVAL, "the ranks asked for different restores "
                                      "(ckpt_manager_restore_options.which from %lld to %lld)",
                         (long long)r[2], (long long)~r[3]);
    else if (r[4] != ~r[5])
        rc = ckpt__error(CKPT_EINVAL, "the ranks asked to restore different checkpoints, from "
                                      "%s %lld to %s %lld",
                         which == CKPT_MANAGER_RESTORE_COUNTER ? "save counter" : "step",
                         (long long)r[4],
                         which == CKPT_MANAGER_RESTORE_COUNTER ? "save counter" : "step",
                         (long long)~r[5]);
    else if (r[6] != ~r[7] || r[8] != ~r[9])
        rc = ckpt__error_set_reason(
            ckpt__error(CKPT_EMISMATCH, "the ranks passed different "
                                        "ckpt_manager_restore_options.check values; nothing was "
                                        "restored"),
            CKPT_REASON_CHECK);
    if (rc != CKPT_OK) {
        ckpt__error_mark_agreed(); /* the same message on every rank: no rank prefix */
        return rc;
    }
    m->lenient = r[1] < 0;
    return CKPT_OK;
}

int ckpt__mgr_restore_ex(ckpt_manager_restore_result *out, ckpt_manager *m,
                         const ckpt_manager_restore_options *o, const char *fn, int latest_only)
{
    /* Agreed before anything else (restore_vote): a version (or NULL result) refused on some
     * ranks only would otherwise leave the others in the restore's collectives for good. The one
     * collective the manager adds to the saver's restore (docs/scaling.md). */
    int rc = result_start(out, m, fn);
    if (!m)
        return rc; /* no communicator to agree on: the caller's bug, on this rank */
    int open = ckpt__mgr_saver_open(m, fn);
    if (open != CKPT_OK)
        return open; /* nor once the saver is closed (everywhere: its close is collective) */
    int which = o ? o->which : CKPT_MANAGER_RESTORE_LATEST;
    int top = latest_only ? CKPT_MANAGER_RESTORE_LATEST : CKPT_MANAGER_RESTORE_COUNTER;
    if (rc == CKPT_OK && o && o->version != CKPT_MANAGER_RESTORE_OPTIONS_VERSION)
        rc = ckpt__error(CKPT_EINVAL, "rank %d: %s: ckpt_manager_restore_options version %u, "
                                      "expected %d",
                         m->rank, fn, o->version, CKPT_MANAGER_RESTORE_OPTIONS_VERSION);
    else if (rc == CKPT_OK && (which < CKPT_MANAGER_RESTORE_LATEST || which > top))
        rc = ckpt__error(CKPT_EINVAL, "rank %d: %s: ckpt_manager_restore_options.which %d is not "
                                      "a restore it makes",
                         m->rank, fn, which);
    else if (rc == CKPT_OK && o)
        rc = ckpt__mgr_caller_error(m, o->error, "ckpt_manager_restore_options");
    rc = restore_vote(m, rc, rc == CKPT_OK ? o : NULL);
    if (rc != CKPT_OK)
        return rc;
    if (which == CKPT_MANAGER_RESTORE_LATEST)
        rc = restore_latest(out, m);
    else
        rc = restore_chosen(out, m, which == CKPT_MANAGER_RESTORE_COUNTER, o->value);
    m->lenient = 0;
    return rc;
}

int ckpt_manager_restore_ex(ckpt_manager_restore_result *out, ckpt_manager *m,
                            const ckpt_manager_restore_options *opts)
{
    return ckpt__mgr_restore_ex(out, m, opts, "ckpt_manager_restore_ex", 0);
}

int ckpt_manager_restore_latest(ckpt_manager_restore_result *out, ckpt_manager *m)
{
    return ckpt__mgr_restore_ex(out, m, NULL, "ckpt_manager_restore_latest", 0);
}

static int restore_at(ckpt_manager_restore_result *out, ckpt_manager *m, int by_counter,
                      int64_t value)
{
    ckpt_manager_restore_options o = CKPT_MANAGER_RESTORE_OPTIONS_INIT;
    o.which = by_counter ? CKPT_MANAGER_RESTORE_COUNTER : CKPT_MANAGER_RESTORE_STEP;
    o.value = value;
    return ckpt__mgr_restore_ex(out, m, &o,
                                by_counter ? "ckpt_manager_restore_at_counter"
                                           : "ckpt_manager_restore_at_step",
                                0);
}

int ckpt_manager_restore_at_step(ckpt_manager_restore_result *out, ckpt_manager *m, int64_t step)
{
    return restore_at(out, m, 0, step);
}

int ckpt_manager_restore_at_counter(ckpt_manager_restore_result *out, ckpt_manager *m,
                                    int64_t save_counter)
{
    return restore_at(out, m, 1, save_counter);
}

/* Deprecated wrappers (docs/api.md "Deprecated"): ckpt_manager_restore_at_step(), _at_counter() */
int ckpt_manager_restore_step(ckpt_manager_restored *out, ckpt_manager *m, int64_t step)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_at_step(&r, m, step);
    ckpt__mgr_result_legacy(out, &r);
    return rc;
}

int ckpt_manager_restore_counter(ckpt_manager_restored *out, ckpt_manager *m,
                                 int64_t save_counter)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_at_counter(&r, m, save_counter);
    ckpt__mgr_result_legacy(out, &r);
    return rc;
}
