/*
 * The worker training state (ckpt_training, mpickpt/manager.h): a manager over a directory, the
 * epoch and step to resume from, and the removal of the backup at the end of training.
 */
#include "manager_internal.h"

#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"
#include "mpickpt/preempt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ckpt_training {
    ckpt_manager *m;
    char dir[4096];
    ckpt_manager_restore_result restored; /* prefix: `prefix` below */
    char prefix[4400];
    ckpt_manager_restored legacy; /* the same for the deprecated ckpt_training_restored() */
};

int ckpt_training_create(ckpt_training **out, ckpt_saver *saver, const char *dir,
                         const ckpt_manager_options *opts)
{
    *out = NULL;
    ckpt_training *t = calloc(1, sizeof *t);
    char chief[4200];
    int local = t ? ckpt__path(t->dir, sizeof t->dir, "%s", dir ? dir : "")
                  : ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        local = ckpt__path(chief, sizeof chief, "%s/" CKPT__CHIEF_DIR, t->dir);
    int rc = ckpt_mpi_agree(ckpt_saver_comm(saver), local);
    if (rc != CKPT_OK) {
        free(t);
        return rc;
    }
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    if (opts && ckpt__mgr_opts_size(opts->version))
        memcpy(&o, opts, ckpt__mgr_opts_size(opts->version));
    else if (opts)
        o.version = opts->version; /* refused by the manager, with its message */
    else {
        o.max_to_keep = 1; /* the seed's BackupAndRestore keeps one */
        o.version = 3;     /* NULL options: restores as before strict restores */
    }
    /* the training state's levels come from its options only, never from MPICKPT_CACHE_DIR */
    rc = ckpt__mgr_create(&t->m, saver, chief, &o, 0);
    if (rc != CKPT_OK) {
        free(t);
        return rc;
    }
    /* The chief's directory is authoritative: <work> is the manager's, minus "/chief". */
    if (ckpt__work_dir(t->dir, sizeof t->dir, t->m->dir) != CKPT_OK)
        ckpt_error_clear(); /* no longer than the manager's own: cannot fail */
    if (ckpt_preempt_watch_dir(t->dir) != CKPT_OK) /* a halt request made before chief/ existed */
        ckpt__log(CKPT_LOG_WARN, "%s", ckpt_error_last()->message);
    *out = t;
    return CKPT_OK;
}

void ckpt_training_free(ckpt_training *t)
{
    if (!t)
        return;
    ckpt_manager_free(t->m);
    free(t);
}

int ckpt_training_restore_result(ckpt_manager_restore_result *out, const ckpt_training *t)
{
    if (!out || !t)
        return ckpt__error(CKPT_EINVAL, "ckpt_training_restore_result: NULL argument");
    if (out->version < 1 || out->version > CKPT_MANAGER_RESTORE_RESULT_VERSION)
        return ckpt__error(CKPT_EINVAL,
                           "ckpt_training_restore_result: unknown ckpt_manager_restore_result "
                           "version %u (this library knows 1..%d)",
                           out->version, CKPT_MANAGER_RESTORE_RESULT_VERSION);
    unsigned int version = out->version;
    *out = t->restored;
    out->version = version;
    out->prefix = t->prefix;
    return CKPT_OK;
}

/* Deprecated wrapper (docs/api.md "Deprecated"): ckpt_training_restore_result() */
const ckpt_manager_restored *ckpt_training_restored(const ckpt_training *t)
{
    return &t->legacy;
}

ckpt_manager *ckpt_training_manager(ckpt_training *t)
{
    return t->m;
}

int ckpt_training_back_up(ckpt_training *t, int64_t epoch, int64_t step, int end_of_epoch)
{
    ckpt_manager_save_info info = { epoch, step, end_of_epoch, 1 };
    return ckpt_manager_save(t->m, &info, NULL, 0);
}

int ckpt_training_restore(ckpt_training *t, int *restored)
{
    return ckpt_training_restore_ex(restored, t, NULL);
}

int ckpt_training_restore_ex(int *restored, ckpt_training *t,
                             const ckpt_manager_restore_options *opts)
{
    /* Epoch and step come from the index the chief read and broadcast, identical everywhere. */
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt__mgr_restore_ex(&r, t->m, opts, "ckpt_training_restore_ex", 1);
    snprintf(t->prefix, sizeof t->prefix, "%s", r.prefix ? r.prefix : "");
    t->restored = r;
    t->restored.prefix = t->prefix;
    ckpt__mgr_result_legacy(&t->legacy, &r);
    if (restored)
        *restored = rc == CKPT_OK && t->restored.restored;
    return rc;
}

/* n + 1, saturated: epoch and step come from an index someone else may have written. */
static int64_t next_of(int64_t n)
{
    return n < INT64_MAX ? n + 1 : INT64_MAX;
}

int64_t ckpt_training_initial_epoch(const ckpt_training *t, int64_t initial)
{
    if (!t->restored.restored)
        return initial;
    return t->restored.end_of_epoch ? next_of(t->restored.epoch) : t->restored.epoch;
}

int64_t ckpt_training_initial_step(const ckpt_training *t, int64_t initial)
{
    return t->restored.restored ? next_of(t->restored.step) : initial;
}

int ckpt_training_delete_backup(ckpt_training *t)
{
    int rc = ckpt__mgr_saver_open(t->m, "ckpt_training_delete_backup");
    if (rc != CKPT_OK)
        return rc;
    /* Everybody is done with the directory (including a save in flight) before the chief
     * removes it. */
    rc = ckpt_saver_sync(t->m->saver);
    rc = ckpt_mpi_agree(t->m->comm, rc);
    if (rc != CKPT_OK)
        return rc;
    if (t->m->rank == 0)
        ckpt__reaper_wait(&t->m->reaper);
    int local = t->m->rank == 0 ? ckpt__remove_backup_dir(t->dir) : CKPT_OK;
    rc = ckpt_mpi_agree(t->m->comm, local);
    if (rc == CKPT_OK && t->m->cache) /* its checkpoints in the nodes' caches too */
        rc = ckpt_saver_cache_sweep(t->m->saver, t->m->comm, t->m->name, NULL, 0);
    if (rc == CKPT_OK) {
        ckpt_state_free(t->m->state);
        t->m->state = NULL;
        rc = ckpt_state_new(&t->m->state);
        memset(&t->restored, 0, sizeof t->restored);
    }
    return rc;
}
