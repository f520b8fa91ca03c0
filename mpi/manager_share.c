/*
 * The manager's shared view (mpi/manager_internal.h): the one rule of what a restore may use
 * (candidate, over lib/restart.h), the chief's state and restart control broadcast to every rank
 * (share_state, share_control, vote_control), and committed checkpoints the state does not list
 * adopted into it (adopt_unlisted, adopt_drained).
 */
#include "manager_internal.h"

#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"

#include <stdlib.h>
#include <string.h>

/* What the restart control makes of entry `e` (CKPT__RS_*). */
int ckpt__mgr_rs_of(const ckpt_manager *m, const ckpt_state_entry *e)
{
    return ckpt__restart_status(&m->ctl, e->prefix, e->save_counter);
}

/* An entry's levels (0: written before levels existed, so persistent). */
unsigned ckpt__mgr_levels_of(const ckpt_state_entry *e)
{
    return e->levels ? e->levels : CKPT_LEVEL_PERSISTENT;
}
/*
 * The one rule of which checkpoint a restore may use (lib/restart.h ckpt__restart_candidate),
 * for restore_or_initialize, the chosen restore, the restorable list and latest: *levels are the
 * levels this manager restores `e` from (a manager without a cache level reads only the
 * persistent directory). Needs the state and the control stable: under the lock, or with no save
 * in flight.
 */
int ckpt__mgr_candidate(const ckpt_manager *m, const ckpt_state_entry *e, unsigned *levels)
{
    return ckpt__restart_candidate(&m->ctl, e,
                                   m->cache ? CKPT_LEVEL_CACHE | CKPT_LEVEL_PERSISTENT
                                            : CKPT_LEVEL_PERSISTENT,
                                   levels);
}

/* The index of the entry restore_or_initialize tries first (the newest it may start from: never
 * one behind the pin), st->num_entries when there is none. */
size_t ckpt__mgr_start_of(const ckpt_manager *m, const ckpt_state *st)
{
    unsigned lv;
    for (size_t i = st->num_entries; i-- > 0;) {
        int c = ckpt__mgr_candidate(m, &st->entries[i], &lv);
        if (c == CKPT_RESTART_NORMAL || c == CKPT_RESTART_PINNED)
            return i;
    }
    return st->num_entries;
}

/* Broadcasts a byte buffer from the chief (size first). Collective; *buf is malloc'd on others. */
int ckpt__mgr_bcast_bytes(ckpt_manager *m, MPI_Comm comm, uint8_t **buf, size_t *len, int local)
{
    int rc = ckpt_mpi_agree(comm, local);
    if (rc != CKPT_OK)
        return rc;
    uint64_t n = *len;
    if (MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast failed");
    if (n > INT32_MAX)
        local = ckpt__error(CKPT_EINVAL, "state of %llu bytes is too large", (unsigned long long)n);
    if (m->rank != 0 && local == CKPT_OK) {
        *buf = malloc(n ? n : 1);
        if (!*buf)
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        *len = (size_t)n;
    }
    if ((rc = ckpt_mpi_agree(comm, local)) != CKPT_OK)
        return rc;
    if (MPI_Bcast(*buf, (int)n, MPI_BYTE, 0, comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast failed");
    return ckpt_mpi_agree(comm, local);
}

/* Every rank adopts the chief's state (`local` is the chief's status in producing it). */
int ckpt__mgr_share_state(ckpt_manager *m, MPI_Comm comm, int local)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (m->rank == 0 && local == CKPT_OK)
        local = ckpt__state_pack(&buf, &len, m->state, 0);
    int rc = ckpt__mgr_bcast_bytes(m, comm, &buf, &len, local);
    if (rc == CKPT_OK && m->rank != 0) {
        ckpt_state *st = NULL;
        local = ckpt__state_unpack(&st, buf, len, "broadcast state");
        if (local == CKPT_OK) {
            pthread_mutex_lock(&m->lock);
            ckpt_state_free(m->state);
            m->state = st;
            pthread_mutex_unlock(&m->lock);
        }
        rc = ckpt_mpi_agree(comm, local);
    } else if (rc == CKPT_OK) {
        rc = ckpt_mpi_agree(comm, CKPT_OK);
    }
    free(buf);
    return rc;
}

/*
 * At creation every rank adopts rank 0's reading of the restart control; a control file that
 * cannot be read is an error on every rank: restoring past what an operator pinned or dropped
 * would be worse than not starting. (Before a save it is a warning and the control read before
 * stays, a running job does not fail because of it: ckpt__mgr_vote_control.) Collective.
 */
int ckpt__mgr_share_control(ckpt_manager *m)
{
    ckpt__restart c;
    memset(&c, 0, sizeof c);
    int local = CKPT_OK;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (m->rank == 0) {
        local = ckpt__restart_read(&c, m->dir);
        if (local == CKPT_OK)
            local = ckpt__restart_format((char **)&buf, &len, &c);
    }
    int rc = ckpt__mgr_bcast_bytes(m, m->comm, &buf, &len, local);
    if (rc == CKPT_OK) {
        local = ckpt__restart_parse(&c, (const char *)buf, len, "the broadcast restart control");
        rc = ckpt_mpi_agree(m->comm, local);
    }
    free(buf);
    if (rc != CKPT_OK) {
        ckpt__restart_clear(&c);
        return rc;
    }
    if (m->rank == 0 && (c.pinned || c.num_drops))
        ckpt__log(CKPT_LOG_WARN, "%s/%s: %s%s%s%zu checkpoint(s) dropped", m->dir,
                  CKPT__RESTART_FILE, c.pinned ? "pinned " : "", c.pinned ? c.pin : "",
                  c.pinned ? " (newer ones listed when it was pinned are set aside), " : "",
                  c.num_drops);
    pthread_mutex_lock(&m->lock);
    ckpt__restart_clear(&m->ctl);
    m->ctl = c;
    pthread_mutex_unlock(&m->lock);
    return CKPT_OK;
}

/* 1 when `msg` starts by naming a rank ("rank R: ", "rank R (host H): "). */
static int names_rank(const char *msg)
{
    if (strncmp(msg, "rank ", 5) != 0)
        return 0;
    const char *p = msg + 5, *d = p;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > d && (strncmp(p, ": ", 2) == 0 || strncmp(p, " (host ", 7) == 0);
}

int ckpt__mgr_caller_error(const ckpt_manager *m, const ckpt_error *e, const char *what)
{
    if (!e || e->code == CKPT_OK)
        return CKPT_OK;
    if (e->code > 0)
        return ckpt__error(CKPT_EINVAL, "rank %d: %s.error's code %d is positive", m->rank, what,
                           e->code);
    const char *msg = e->message && e->message[0] ? e->message : ckpt_strerror(e->code);
    int rc = ckpt__error(e->code, "%s", msg);
    ckpt__error_set_errno(rc, e->sys_errno);
    ckpt__error_set_reason(rc, e->reason);
    if (names_rank(msg)) /* the caller named its rank: the agreement passes it on as it is */
        ckpt__error_mark_agreed();
    return rc;
}

/*
 * Before a save: every rank joins one MPI_Allreduce (a bitwise OR of bytes the others leave zero)
 * that brings it the chief's reading of the restart control, the rest after it when it is long.
 * A control that cannot be read there is a warning: the one read before stays. Returns this
 * rank's status, not agreed (the caller's save agrees it); on failure the control read before
 * stays on that rank. Needs no save in flight (its hook reads the control).
 * The same allreduce carries the caller's vote (ckpt_manager_save_options): `caller` in, this
 * rank's (failed: 1 when the caller gave an error here; check), out, every rank's OR of them and
 * the OR of ~check (the checks are alike where `check & not_check` is 0). It is valid on return
 * whatever the status, unless the allreduce itself failed (then left as it came in).
 */
int ckpt__mgr_vote_control(ckpt_manager *m, ckpt__mgr_caller_vote *caller)
{
    struct {
        int64_t status;
        uint64_t len;
        uint64_t failed, check, not_check;
        char text[2048];
    } msg;
    memset(&msg, 0, sizeof msg);
    msg.failed = caller->failed;
    msg.check = caller->check;
    msg.not_check = ~caller->check;
    char *buf = NULL;
    size_t len = 0;
    int local = CKPT_OK;
    if (m->rank == 0) {
        ckpt__restart c;
        memset(&c, 0, sizeof c);
        local = ckpt__restart_read(&c, m->dir);
        if (local != CKPT_OK) {
            ckpt__log(CKPT_LOG_WARN, "%s; the restart control read before stays in effect",
                      ckpt_error_last()->message);
            ckpt_error_clear();
            local = ckpt__restart_format(&buf, &len, &m->ctl);
        } else {
            local = ckpt__restart_format(&buf, &len, &c);
        }
        ckpt__restart_clear(&c);
        msg.status = local;
        msg.len = local == CKPT_OK ? len : 0;
        if (local == CKPT_OK && len <= sizeof msg.text)
            memcpy(msg.text, buf, len);
    }
    if (MPI_Allreduce(MPI_IN_PLACE, &msg, (int)sizeof msg, MPI_BYTE, MPI_BOR, m->comm) !=
        MPI_SUCCESS) {
        free(buf);
        return ckpt__error(CKPT_EMPI, "MPI_Allreduce of the restart control failed");
    }
    caller->failed = msg.failed;
    caller->check = msg.check;
    caller->not_check = msg.not_check;
    if (msg.status != CKPT_OK) { /* the chief's failure: it reports it (its save's broadcast) */
        free(buf);
        return m->rank == 0 ? local : CKPT_OK;
    }
    if (msg.len > sizeof msg.text) { /* the long control, from the chief, in pieces */
        if (m->rank != 0 && !(buf = malloc(msg.len)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        for (uint64_t off = 0; off < msg.len; off += sizeof msg.text) {
            uint64_t n = msg.len - off < sizeof msg.text ? msg.len - off : sizeof msg.text;
            /* a rank without room still joins, into the scratch */
            if (MPI_Bcast(buf ? buf + off : msg.text, (int)n, MPI_BYTE, 0, m->comm) !=
                    MPI_SUCCESS &&
                local == CKPT_OK)
                local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the restart control failed");
        }
        if (local != CKPT_OK) {
            free(buf);
            return local;
        }
    }
    ckpt__restart c;
    memset(&c, 0, sizeof c);
    local = ckpt__restart_parse(&c, msg.len > sizeof msg.text ? buf : msg.text, (size_t)msg.len,
                                "the broadcast restart control");
    free(buf);
    if (local != CKPT_OK)
        return local;
    pthread_mutex_lock(&m->lock);
    ckpt__restart_clear(&m->ctl);
    m->ctl = c;
    pthread_mutex_unlock(&m->lock);
    return CKPT_OK;
}

/*
 * The chief's state file may lag the directory: a chief that died after writing an index but
 * before updating the state file leaves a committed checkpoint that is not listed. Such
 * checkpoints, newer than everything listed, are adopted (appended in counter order), so the
 * resume point is the newest committed checkpoint and its number is never reused. `dir` is the
 * persistent directory, or the chief's node's cache directory (`level` CKPT_LEVEL_CACHE: the
 * chief's index there is the cache level's commit point), which the sweep would otherwise empty.
 */
int ckpt__mgr_adopt_unlisted(ckpt_manager *m, const char *dir, const char *shown, unsigned level)
{
    ckpt_state *scan = NULL;
    int64_t listed = m->state->save_counter;
    for (size_t i = 0; i < m->state->num_entries; i++)
        if (m->state->entries[i].save_counter > listed)
            listed = m->state->entries[i].save_counter;
    /* Only "<name>-<N>.index" with N past the listed ones is read: a valid state file makes the
     * start cost independent of whatever else lies in the directory. */
    int rc = ckpt__state_scan_newer(&scan, dir, m->name, listed);
    for (size_t i = 0; rc == CKPT_OK && i < scan->num_entries; i++) {
        ckpt_state_entry *e = &scan->entries[i];
        if (e->save_counter <= listed)
            continue;
        e->levels = level;
        rc = ckpt_state_append(m->state, e);
        if (rc == CKPT_OK)
            ckpt__log(CKPT_LOG_WARN, "adopted committed checkpoint %s/%s, which the state file did "
                                     "not list yet",
                      shown, e->prefix);
    }
    ckpt_state_free(scan);
    return rc;
}

/*
 * The chief: a checkpoint the state lists in the cache only whose drain committed (its index in
 * the persistent directory, the cache's bytes, its data files there in full) before the state
 * was written — a crash in between — is listed in the persistent directory too. Drained again,
 * its committed copy would be replaced file by file, and a failure then would tear it.
 */
int ckpt__mgr_adopt_drained(ckpt_manager *m)
{
    const char *cdir = ckpt_saver_cache_held_path(m->saver);
    for (size_t i = 0; i < m->state->num_entries; i++) {
        ckpt_state_entry *e = &m->state->entries[i];
        if (ckpt__mgr_levels_of(e) != CKPT_LEVEL_CACHE)
            continue;
        char a[4400], b[4400];
        uint8_t *x = NULL, *y = NULL;
        const uint8_t *px, *py;
        size_t lx = 0, ly = 0;
        ckpt_reader *r = NULL;
        int same = ckpt__path(a, sizeof a, "%s/%s.index", m->dir, e->prefix) == CKPT_OK &&
                   ckpt__path(b, sizeof b, "%s/%s.index", cdir, e->prefix) == CKPT_OK &&
                   ckpt__index_read(&x, &px, &lx, a) == CKPT_OK &&
                   ckpt__index_read(&y, &py, &ly, b) == CKPT_OK && lx == ly &&
                   memcmp(x, y, lx) == 0 &&
                   ckpt__path(a, sizeof a, "%s/%s", m->dir, e->prefix) == CKPT_OK &&
                   ckpt_reader_open(&r, a) == CKPT_OK;
        ckpt_reader_free(r);
        free(x);
        free(y);
        ckpt_error_clear(); /* not drained (or not whole): the drain is redone */
        if (same) {
            e->levels |= CKPT_LEVEL_PERSISTENT;
            ckpt__log(CKPT_LOG_WARN, "adopted %s/%s, drained before the state file listed it",
                      m->dir, e->prefix);
        }
    }
    return CKPT_OK;
}
