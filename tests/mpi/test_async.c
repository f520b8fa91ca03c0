/* Async checkpointing: the saver's async mode (docs/design.md §7, TensorFlow's
 * async_checkpoint_helper.py).
 *
 * usage: test_async OUTDIR CASE shared|per-rank|per-node [ARG]
 *
 *   snapshot      save returns `<prefix>-N` at once; the buffers (and the blob callback's bytes)
 *                 are overwritten right after it returns; after sync the checkpoint holds the values
 *                 of the time of save, on every rank; snapshot buffers are reused correctly.
 *   fault         MPICKPT_FAULT=<rank>:<write|agree|merge|commit> (rank 0 and size-1): the async
 *                 save returns OK; the failure is reported by the NEXT save (which does not save),
 *                 by sync, or by close -- each path -- with CKPT_EIO and "injected fault" on every
 *                 rank; it is reported once; nothing is committed or left behind; the previous
 *                 checkpoint restores exactly; a failed save does not consume its number.
 *   enospc        a full file system (a small tmpfs mounted by rank 0; skipped with a reason when
 *                 mount is not permitted): the first checkpoint fits, the second does not; the
 *                 error (CKPT_ENOSPC, or CKPT_EIO naming the no-space cause) surfaces at the next
 *                 save on every rank; nothing half-written is visible; the previous checkpoint
 *                 restores; after the file system grows the next save succeeds and gc finds nothing.
 *   enospc_noreserve  the same with MPICKPT_RESERVE=0 (no up-front space reservation): the full
 *                 disk is met inside HDF5 and must still be a clean error on every rank (no hang,
 *                 no crash at MPI_Finalize).
 *   close         (a) close right after an async save waits, commits, returns OK; (b) with
 *                 close_timeout_s = 0.001 and a 64 MiB/rank save in flight, close returns
 *                 CKPT_ETIMEDOUT on every rank and the save is NOT committed (checked once the
 *                 writer thread exited on its own, seen in /proc/self/task). (b) leaks the saver by
 *                 design: it runs last.
 *   close_partial only the last rank has the tiny close timeout: every rank must still return the
 *                 same status and nothing may be committed (leaks the last rank's saver).
 *   back2back     10 saves in a row without sync (async from MPICKPT_ASYNC=1): each returns only
 *                 after the previous one committed (its index exists, its metrics are the last,
 *                 the counter moved, and its data reads back while the next is written); all
 *                 commit with their own values; counters 1..10.
 *   identical     the same model written by an async and by a sync saver: every tensor's bytes are
 *                 identical (ckpt_reader_read) and `mpickpt diff A B` exits 0.
 *   training      training state in async mode, max_to_keep=2: after the final sync the state file
 *                 lists the newest two and retention deleted the rest; restore gives the newest
 *                 exactly; a restore issued while a backup is in flight waits for it.
 *   metrics       ckpt_saver_metrics_get after sync (prefix, bytes, ranks, phases, async);
 *                 metrics.jsonl has one valid JSON line per committed save (checked by
 *                 tests/scripts/check_metrics_jsonl.py in Debian's python3), the last one holding
 *                 the values last_metrics gave;
 *                 training_time_saved_s is the background time beyond blocking_s. No duration is
 *                 compared with another or with a constant (a loaded machine changes them all).
 *   kill_write    (driven by tests/scripts/test_async_kill.sh, ARG = victim rank) commits ckpt-1,
 *                 then the victim is SIGKILLed inside the writer thread of the next async save.
 *   kill_restore  (ARG = the writer's rank count) restore_or_initialize gets ckpt-1 exactly; the
 *                 next save removes the dead job's leftovers.
 *
 * Every library call's status is compared over all ranks (min == max) and with the expected one.
 * A watchdog names the case when a collective does not return. */
#include "mpi_check.h"
#include "tmpfs.h"
#include "coll.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/manager.h"
#include "mpickpt/saver.h"
#include "mpickpt/state.h"
#include "state_copy.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROWS_PER_MIB 1024

static int g_rank, g_size;
static char g_out[2048];
static ckpt_layout g_layout;
static const char *g_layout_name;
/* A saver whose close timed out: it stays allocated on purpose (its writer thread may still use
 * it); kept reachable so that LeakSanitizer does not report what the library leaks by design. */
static ckpt_saver *g_leaked;
static tm_model *g_leaked_model; /* the buffers registered with it */

/* ---- watchdog ---- */

/* The per-case watchdog of mpi_check.h. */
#define begin_case(...) check_case(1, __VA_ARGS__)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the model (model.h), with `kib` KiB of "big" per rank (a row is 1 KiB) ---- */

/* Rank r of n; full tensors of n_full writer ranks; `G` global rows of "big". */
static void am_init(tm_model *m, int n, int r, int n_full, int64_t G)
{
    if (tm_init(m, n, r, n_full, G) != CKPT_OK)
        MPI_Abort(MPI_COMM_WORLD, 3);
}

/* The default model of this job: `kib` KiB of "big" per rank. */
static void am_init_kib(tm_model *m, int kib)
{
    am_init(m, g_size, g_rank, g_size, (int64_t)kib * g_size);
}

/* Overwrites the bytes the blob callback handed out last (they must have been snapshotted). */
static void am_scribble_blob(tm_model *m)
{
    const void *d;
    size_t l;
    tm_blob_save(&d, &l, m); /* rewrites m->blob_out with the current step */
}

/* ---- files ---- */

/* Same truth on every rank: the chief's view, and every rank's own view must agree with it. */
static void check_index(const char *prefix, int want, const char *what)
{
    int have = index_exists(prefix);
    CHECK_MSG(have == want, "%s: %s.index %s", what, prefix,
              want ? "does not exist" : "exists (must not be committed)");
}

static ckpt_saver *new_saver(int async, double close_timeout_s)
{
    return new_saver_on(MPI_COMM_WORLD, g_layout, async, close_timeout_s);
}

/* Zeroes the model, restores `prefix` and checks the values of `step` (coll.h). */
static void restore_check_at(ckpt_saver *s, tm_model *m, const char *prefix, int64_t step,
                             const char *what)
{
    char w[1024];
    snprintf(w, sizeof w, "%s: restore %s", what, prefix);
    restore_check(s, m, prefix, step, g_layout, NULL, w);
}

/* Closes a saver that must close cleanly. */
static void close_ok(ckpt_saver *s, const char *what)
{
    char w[600];
    snprintf(w, sizeof w, "%s: close", what);
    coll(ckpt_saver_close(s), CKPT_OK, w);
}

/* ======================================================================================== */
/* 1. snapshot semantics                                                                     */

static void case_snapshot(void)
{
    char dir[2200], prefix[2300], out[4096], want[2400];
    snprintf(dir, sizeof dir, "%s/snap", g_out);
    snprintf(prefix, sizeof prefix, "%s/ck", dir);
    make_dir(dir);
    tm_model m;
    am_init_kib(&m, 4 * ROWS_PER_MIB); /* 4 MiB per rank */
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);

    for (int round = 1; round <= 2; round++) {
        int64_t step = 2 * round - 1; /* saved: 1, then 3 */
        begin_case("snapshot round %d (%d ranks, %s)", round, g_size, g_layout_name);
        tm_fill(&m, step);
        ckpt_save_info info = { 0, step, 0 };
        out[0] = '\0';
        double t0 = now_s();
        int rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
        double t_ret = now_s() - t0;
        /* immediately: every registered buffer and the blob callback's bytes change */
        tm_fill(&m, step + 1);
        am_scribble_blob(&m);
        snprintf(want, sizeof want, "%s-%d", prefix, round);
        int idx_at_return = index_exists(want);

        coll(rc, CKPT_OK, "async save");
        CHECK_MSG(strcmp(out, want) == 0, "async save returned \"%s\", want \"%s\"", out, want);
        int any_idx = 0;
        MPI_Allreduce(&idx_at_return, &any_idx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (g_rank == 0)
            printf("  save of %s returned after %.4f s; its index %s when it returned\n", out,
                   t_ret, any_idx ? "already existed on some rank" : "did not exist yet");

        coll(ckpt_saver_sync(s), CKPT_OK, "sync after the async save");
        check_index(want, 1, "after sync");
        CHECK_EQ_INT(ckpt_saver_counter(s), round);
        /* the values are those of the time of save, not those written right after it */
        restore_check_at(s, &m, want, step, "snapshot");
        CHECK_EQ_INT(ckpt_saver_counter(s), round);
    }
    begin_case("snapshot: the first checkpoint after the reuse of the buffers");
    snprintf(want, sizeof want, "%s-1", prefix);
    restore_check_at(s, &m, want, 1, "snapshot, ck-1 again");
    close_ok(s, "snapshot");
    check_dir_clean(dir, NULL, "snapshot");
    tm_free(&m);
}

/* ======================================================================================== */
/* 2. background failures                                                                    */

static void case_fault(void)
{
    static const char *const steps[] = { "write", "agree", "merge", "commit" };
    static const char *const paths[] = { "save", "sync", "close" };
    char dir[2200], good[2300];
    snprintf(dir, sizeof dir, "%s/fault", g_out);
    snprintf(good, sizeof good, "%s/good", dir);
    make_dir(dir);
    tm_model m;
    am_init_kib(&m, 64); /* 64 KiB per rank */

    /* The restorer (sync mode) and the good checkpoint, written in async mode. */
    begin_case("fault: good checkpoint (%d ranks, %s)", g_size, g_layout_name);
    ckpt_saver *r = new_saver(0, 0);
    register_or_die(&m, r);
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);
    tm_fill(&m, 1);
    ckpt_save_info info = { 0, 1, 0 };
    coll(ckpt_saver_save(s, good, &info, NULL, 0), CKPT_OK, "save good-1");
    coll(ckpt_saver_sync(s), CKPT_OK, "sync good-1");
    close_ok(s, "good-1");
    snprintf(good, sizeof good, "%s/good-1", dir);
    check_index(good, 1, "good-1");

    int victims[2] = { g_size - 1, 0 };
    int nvictims = g_size > 1 ? 2 : 1;
    int iter = 0;
    for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++)
        for (int vi = 0; vi < nvictims; vi++)
            for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++, iter++) {
                const char *step = steps[si], *path = paths[pi];
                int victim = victims[vi];
                char what[512], fault[64], pfx[2400], name[2500], pfx_b[2400], name_b[2500];
                snprintf(fault, sizeof fault, "%d:%s", victim, step);
                snprintf(what, sizeof what, "MPICKPT_FAULT=%s reported by %s (%d ranks, %s)", fault,
                         path, g_size, g_layout_name);
                begin_case("%s", what);
                snprintf(pfx, sizeof pfx, "%s/f%d", dir, iter);
                snprintf(name, sizeof name, "%s-1", pfx);
                snprintf(pfx_b, sizeof pfx_b, "%s/f%db", dir, iter);
                snprintf(name_b, sizeof name_b, "%s-1", pfx_b);

                s = new_saver(1, 0);
                register_or_die(&m, s);
                tm_fill(&m, 100 + iter);
                ckpt_save_info fi = { 0, 100 + iter, 0 };
                set_fault(fault);
                char out[4096] = "";
                int rc = ckpt_saver_save(s, pfx, &fi, out, sizeof out);
                char w[700];
                snprintf(w, sizeof w, "%s: the async save itself", what);
                coll(rc, CKPT_OK, w);
                CHECK_MSG(strcmp(out, name) == 0, "%s: save returned \"%s\", want \"%s\"", what, out,
                          name);
                tm_fill(&m, 200 + iter); /* training goes on */

                int closed = 0;
                if (strcmp(path, "save") == 0) {
                    snprintf(w, sizeof w, "%s: the next save", what);
                    rc = ckpt_saver_save(s, pfx_b, &fi, out, sizeof out);
                } else if (strcmp(path, "sync") == 0) {
                    snprintf(w, sizeof w, "%s: sync", what);
                    rc = ckpt_saver_sync(s);
                } else {
                    snprintf(w, sizeof w, "%s: close", what);
                    rc = ckpt_saver_close(s);
                    closed = 1;
                }
                /* the background job is over (joined) before the variable changes */
                set_fault(NULL);
                if (coll(rc, CKPT_EIO, w)) {
                    CHECK_MSG(strstr(g_msg, "injected fault") != NULL,
                              "%s: message lacks the original cause \"injected fault\": %s", w,
                              g_msg);
                    CHECK_MSG(mentions_rank(g_msg, victim), "%s: message does not name rank %d: %s",
                              w, victim, g_msg);
                    CHECK_MSG(strstr(g_msg, name) != NULL,
                              "%s: message does not name the checkpoint %s: %s", w, name, g_msg);
                }
                if (!closed) {
                    /* reported once: the next call is clean */
                    snprintf(w, sizeof w, "%s: sync after the report", what);
                    coll(ckpt_saver_sync(s), CKPT_OK, w);
                    CHECK_MSG(ckpt_saver_counter(s) == 0,
                              "%s: counter %" PRId64 " after a failed save, want 0", what,
                              ckpt_saver_counter(s));
                }
                check_index(name, 0, what);
                check_index(name_b, 0, what); /* the reporting save did not save */
                check_dir_clean(dir, NULL, what);

                if (!closed && strcmp(path, "save") == 0) {
                    /* recovery: the same saver saves again, under the number the failure did not use */
                    tm_fill(&m, 300 + iter);
                    ckpt_save_info ri = { 0, 300 + iter, 0 };
                    snprintf(w, sizeof w, "%s: recovery save", what);
                    rc = ckpt_saver_save(s, pfx, &ri, out, sizeof out);
                    coll(rc, CKPT_OK, w);
                    CHECK_MSG(strcmp(out, name) == 0, "%s: recovery saved \"%s\", want \"%s\"", what,
                              out, name);
                    coll(ckpt_saver_sync(s), CKPT_OK, w);
                    check_index(name, 1, w);
                    CHECK_EQ_INT(ckpt_saver_counter(s), 1);
                    restore_check_at(r, &m, name, 300 + iter, w);
                }
                if (!closed)
                    close_ok(s, what);
                /* the previous checkpoint is intact */
                restore_check_at(r, &m, good, 1, what);
            }
    close_ok(r, "fault restorer");
    tm_free(&m);
}

/* ======================================================================================== */
/* 2b. a full file system                                                                    */


/* reserve = 0: MPICKPT_RESERVE=0, the library's up-front space reservation is off and the full
 * disk is met inside HDF5 (as on a file system without fallocate). */
static int g_skipped; /* the case could not run here (no tmpfs): exit 77 */

static void case_enospc(int reserve)
{
    if (!reserve)
        setenv("MPICKPT_RESERVE", "0", 1); /* read by the writer thread; set before any save */
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/enospc", g_out);
    make_dir(dir);
    snprintf(g_mnt, sizeof g_mnt, "%s/mnt", dir);
    make_dir(g_mnt);
    const int kib_per_rank = 2048;
    /* One checkpoint is about size * 2 MiB. 3.5 MiB per rank holds one (and the library's
     * transient reservation of the bytes + 1 MiB + 1/64 per rank), not two, and not the
     * reservation of a second one. */
    long size_kib = (long)g_size * 3584 + 128;
    begin_case("enospc%s: mount a %ld KiB tmpfs (%d ranks, %s)",
               reserve ? "" : " (MPICKPT_RESERVE=0)", size_kib, g_size, g_layout_name);
    char cmd[4800], reason[600];
    tmpfs_mount(g_rank, size_kib, reason, sizeof reason);
    if (reason[0]) {
        if (g_rank == 0)
            printf("SKIP enospc: cannot mount a tmpfs: %s\n", reason);
        g_skipped = 1;
        return;
    }

    char prefix[2400], ck1[2500], ck2[2500], ck3[2500];
    snprintf(prefix, sizeof prefix, "%s/ck", g_mnt);
    snprintf(ck1, sizeof ck1, "%s-1", prefix);
    snprintf(ck2, sizeof ck2, "%s-2", prefix);
    snprintf(ck3, sizeof ck3, "%s-3", prefix);
    tm_model m;
    am_init_kib(&m, kib_per_rank);
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);

    begin_case("enospc: the first checkpoint fits");
    tm_fill(&m, 1);
    ckpt_save_info info = { 0, 1, 0 };
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "enospc: save ck-1");
    coll(ckpt_saver_sync(s), CKPT_OK, "enospc: sync ck-1");
    check_index(ck1, 1, "enospc: ck-1");
    uint64_t used1 = fs_used(g_mnt);

    /* A collective HDF5 call that one rank skips after its error hangs the others: fail fast. */
    check_watchdog_s = 20;
    begin_case("enospc: the second does not");
    tm_fill(&m, 2);
    info.step = 2;
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK,
         "enospc: the async save of ck-2 itself");
    tm_fill(&m, 3);
    info.step = 3;
    int rc = ckpt_saver_save(s, prefix, &info, NULL, 0);
    const ckpt_error *ea = ckpt_error_last();
    int async_errno = ea && ea->code == rc ? ea->sys_errno : -1;
    int mn = rc, mx = rc;
    MPI_Allreduce(&rc, &mn, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&rc, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int expected = (mn == mx && rc == CKPT_EIO) ? CKPT_EIO : CKPT_ENOSPC;
    if (coll(rc, expected, "enospc: the next save reports the full disk")) {
        CHECK_MSG(rc == CKPT_ENOSPC || contains_ci(g_msg, "no space"),
                  "enospc: CKPT_EIO without the no-space cause in the message: %s", g_msg);
        if (g_rank == 0 && rc != CKPT_ENOSPC)
            printf("  NOTE: the full disk is reported as %s, not CKPT_ENOSPC: %s\n",
                   ckpt_strerror(rc), g_msg);
    }
    coll(ckpt_saver_sync(s), CKPT_OK, "enospc: sync after the report");
    check_index(ck2, 0, "enospc: ck-2 failed");
    check_index(ck3, 0, "enospc: the reporting save did not save");
    CHECK_EQ_INT(ckpt_saver_counter(s), 1);
    check_dir_clean(g_mnt, NULL, "enospc: after the failure");
    if (g_rank == 0) {
        /* the failed save's temp files are gone, and so must be the space they took */
        uint64_t used2 = fs_used(g_mnt);
        printf("  tmpfs in use: %" PRIu64 " KiB after ck-1, %" PRIu64 " KiB after the failed save\n",
               used1 >> 10, used2 >> 10);
        CHECK_MSG(used2 <= used1 + 64 * 1024,
                  "enospc: the failed save still holds %" PRIu64 " KiB of the full file system "
                  "after its temp files were removed (an unlinked file kept open?)",
                  (used2 - used1) >> 10);
    }
    restore_check_at(s, &m, ck1, 1, "enospc: the previous checkpoint");

    /* the async report carries the errno a sync save of the same data reports (the writer
     * thread's error is raised again on the caller's: ckpt_error.sys_errno kept) */
    begin_case("enospc: a sync save reports the same errno");
    ckpt_saver *sy = new_saver(0, 0);
    register_or_die(&m, sy);
    char sync_prefix[2400];
    snprintf(sync_prefix, sizeof sync_prefix, "%s/sy", g_mnt);
    int src = ckpt_saver_save(sy, sync_prefix, &info, NULL, 0);
    const ckpt_error *es = ckpt_error_last();
    int sync_errno = es && es->code == src ? es->sys_errno : -1;
    coll(src, rc, "enospc: the sync save fails as the async one did");
    CHECK_MSG(all_true(async_errno == sync_errno && sync_errno == ENOSPC),
              "enospc: rank %d: the async save's error has sys_errno %d, a sync save's %d "
              "(ENOSPC is %d)", g_rank, async_errno, sync_errno, ENOSPC);
    close_ok(sy, "enospc: the sync saver");
    check_dir_clean(g_mnt, NULL, "enospc: after the failed sync save");

    begin_case("enospc: room again");
    snprintf(cmd, sizeof cmd, "mount -o remount,size=%ldk '%s'", size_kib * 4, g_mnt);
    rc = rank0_system(g_rank, cmd);
    CHECK_MSG(rc == 0, "enospc: '%s' failed (%d)", cmd, rc);
    tm_fill(&m, 4);
    info.step = 4;
    char out[4096] = "";
    coll(ckpt_saver_save(s, prefix, &info, out, sizeof out), CKPT_OK, "enospc: save with room");
    CHECK_MSG(strcmp(out, ck2) == 0, "enospc: saved \"%s\", want \"%s\"", out, ck2);
    coll(ckpt_saver_sync(s), CKPT_OK, "enospc: sync with room");
    check_index(ck2, 1, "enospc: ck-2 with room");
    check_dir_clean(g_mnt, NULL, "enospc: after the next successful save");
    if (g_rank == 0) {
        size_t removed = 99;
        CHECK_OK(ckpt_gc(g_mnt, 1, NULL, NULL, &removed));
        CHECK_MSG(removed == 0, "enospc: gc --dry-run would remove %zu path(s)", removed);
    }
    restore_check_at(s, &m, ck2, 4, "enospc: ck-2");
    restore_check_at(s, &m, ck1, 1, "enospc: ck-1 again");
    close_ok(s, "enospc");
    tm_free(&m);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        umount_at_exit();
        CHECK_MSG(!is_mounted(g_mnt), "enospc: %s is still mounted", g_mnt);
    }
}

/* ======================================================================================== */
/* 3. close with a save in flight                                                            */

/* The threads an async save started (its writer thread): the ids that appeared during the call. */
static long g_writer_ids[MAX_THREADS];
static int g_nwriter_ids;

/* Waits (hang guards: 60 s, then wait_threads_gone's) until the writer thread of the save at
 * `prefix` is done on every rank: its temp files are gone (the chief's <prefix>_temp, a worker's
 * file in workertemp_<r>), and the threads the save started (g_writer_ids) have exited
 * (wait_threads_gone, coll.h), so that nothing of the abandoned save runs (or is inside MPI) when
 * the test goes on and finalizes. */
static void wait_writer_done(const char *dir, const char *prefix, const char *what)
{
    char chief_temp[2600], mine[2800];
    snprintf(chief_temp, sizeof chief_temp, "%s_temp", prefix);
    const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
    mine[0] = '\0';
    /* per-node: a node's file is in its leader's (lowest rank's) temp dir */
    int k = tm_ranks_per_node();
    int holds = g_layout == CKPT_LAYOUT_PER_RANK ||
                (g_layout == CKPT_LAYOUT_PER_NODE && k > 0 && g_rank % k == 0);
    if (g_rank > 0 && holds) {
        char name[512];
        tm_data_file_name(name, sizeof name, base, g_layout, g_size, g_rank);
        snprintf(mine, sizeof mine, "%s/workertemp_%d/%s", dir, g_rank, name);
    }
    double t0 = now_s();
    int gone = 0;
    while (now_s() - t0 < 60) {
        gone = !exists(chief_temp) && (!mine[0] || !exists(mine));
        if (gone)
            break;
        sleep_s(0.02);
    }
    CHECK_MSG(gone, "%s: the writer thread's temp files are still there after 60 s (%s%s%s)", what,
              chief_temp, mine[0] ? ", " : "", mine);
    wait_threads_gone(g_writer_ids, g_nwriter_ids, what);
    if (g_rank == 0)
        printf("  writer finished about %.2f s after close returned\n", now_s() - t0);
}

static void case_close(int partial)
{
    char dir[2200], prefix[2300], ck1[2400], q[2400];
    snprintf(dir, sizeof dir, "%s/%s", g_out, partial ? "close_partial" : "close");
    snprintf(prefix, sizeof prefix, "%s/ck", dir);
    snprintf(ck1, sizeof ck1, "%s-1", prefix);
    snprintf(q, sizeof q, "%s/abandoned", dir);
    make_dir(dir);
    tm_model m1;
    am_init_kib(&m1, (partial ? 1 : 16) * ROWS_PER_MIB);

    /* (a) the default timeout: close waits for the save, which commits */
    begin_case("close (a): close right after an async save (%d ranks, %s)", g_size,
               g_layout_name);
    ckpt_saver *a = new_saver(1, 0);
    register_or_die(&m1, a);
    tm_fill(&m1, 1);
    ckpt_save_info info = { 0, 1, 0 };
    coll(ckpt_saver_save(a, prefix, &info, NULL, 0), CKPT_OK, "close (a): async save");
    tm_fill(&m1, 2);
    double t0 = now_s();
    coll(ckpt_saver_close(a), CKPT_OK, "close (a): close waits and commits");
    if (g_rank == 0)
        printf("  close waited %.3f s\n", now_s() - t0);
    check_index(ck1, 1, "close (a)");
    check_dir_clean(dir, NULL, "close (a)");
    ckpt_saver *r = new_saver(0, 0);
    register_or_die(&m1, r);
    restore_check_at(r, &m1, ck1, 1, "close (a)");
    close_ok(r, "close (a) restorer");

    /* (b) a tiny timeout with a big save in flight: ETIMEDOUT, not committed */
    int tiny = partial ? g_rank == g_size - 1 : 1;
    begin_case("close (b): close_timeout_s 0.001 on %s with 64 MiB/rank in flight (%d ranks, %s)",
               partial ? "the last rank only" : "every rank", g_size, g_layout_name);
    static tm_model m2;
    am_init_kib(&m2, 64 * ROWS_PER_MIB);
    ckpt_saver *b = new_saver(1, tiny ? 0.001 : 0);
    register_or_die(&m2, b);
    tm_fill(&m2, 7);
    info.step = 7;
    long before[MAX_THREADS];
    int nbefore = thread_ids(before, MAX_THREADS);
    /* The last rank's writer is held before it writes until its saver gives up on the save
     * (MPICKPT_FAULT ...:hold), so the save is still running when close times out however fast
     * the write or however slow this thread: the outcome does not depend on timing. Set before
     * the save starts its thread, unset once that thread is done. */
    char hold[64];
    snprintf(hold, sizeof hold, "%d:write:hold", g_size - 1);
    setenv("MPICKPT_FAULT", hold, 1);
    int rc = ckpt_saver_write(b, q, &info);
    g_nwriter_ids = threads_started(g_writer_ids, before, nbefore);
    coll(rc, CKPT_OK, "close (b): async write of 'abandoned'");
    CHECK_MSG(g_nwriter_ids == 1, "close (b): the async save started %d threads, expected its "
              "writer thread only", g_nwriter_ids);
    t0 = now_s();
    rc = ckpt_saver_close(b);
    double waited = now_s() - t0; /* printed only: how long it took says nothing on a loaded box */
    char gmsg[4096];
    snprintf(gmsg, sizeof gmsg, "%s",
             rc != CKPT_OK && ckpt_error_last() ? ckpt_error_last()->message : "");
    if (rc == CKPT_ETIMEDOUT) {
        g_leaked = b; /* by design (saver.h): the writer thread still uses it */
        g_leaked_model = &m2;
    }
    /* what every rank got */
    int *all_rc = calloc((size_t)g_size, sizeof *all_rc);
    MPI_Gather(&rc, 1, MPI_INT, all_rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("  close returned after %.4f s on rank 0; per rank:", waited);
        for (int i = 0; i < g_size; i++)
            printf(" %d=%s", i, ckpt_strerror(all_rc[i]));
        printf("\n");
    }
    free(all_rc);
    for (int i = 0; i < g_size; i++) {
        if (i == g_rank && rc != CKPT_OK)
            printf("  [rank %d] close: %s: %s\n", g_rank, ckpt_strerror(rc), gmsg);
        fflush(stdout);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int tiny_min = 0, tiny_max = 0;
    MPI_Allreduce(&tiny, &tiny_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&tiny, &tiny_max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (tiny_min != tiny_max) {
        /* Only some ranks timed out: they return before the outcome exists, so only the code can
         * be the same everywhere (the others get the agreed "closed before it finished"). */
        int mn, mx;
        MPI_Allreduce(&rc, &mn, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&rc, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        CHECK_MSG(mn == mx && rc == CKPT_ETIMEDOUT,
                  "close (b), partial: codes differ or are not ETIMEDOUT (min %d, max %d)", mn, mx);
        CHECK_MSG(contains_ci(gmsg, "not committed") || contains_ci(gmsg, "incomplete"),
                  "close (b), partial: the message does not say it was not committed: %s", gmsg);
    } else if (coll(rc, CKPT_ETIMEDOUT, "close (b): close with the save still running"))
        CHECK_MSG(contains_ci(gmsg, "running") || contains_ci(gmsg, "incomplete") ||
                      contains_ci(gmsg, "timed out") || contains_ci(gmsg, "timeout"),
                  "close (b): the message does not say the save was still running: %s", gmsg);
    /* That close did not wait for the save is what ETIMEDOUT says (checked above), and that the
     * save was abandoned is checked below: it never commits, even after its thread is done. */

    /* The writer thread goes on alone; it must not commit. */
    wait_writer_done(dir, q, "close (b)");
    unsetenv("MPICKPT_FAULT");
    check_index(q, 0, "close (b): a save abandoned at close");
    check_dir_clean(dir, NULL, "close (b): after the writer finished");
    /* the previous checkpoint is still the good one */
    r = new_saver(0, 0);
    register_or_die(&m1, r);
    restore_check_at(r, &m1, ck1, 1, "close (b): the previous checkpoint");
    close_ok(r, "close (b) restorer");
    tm_free(&m1);
    /* m2's buffers are not read any more (snapshot), but the leaked saver keeps pointers to them */
    if (!g_leaked)
        tm_free(&m2);
}

/* ======================================================================================== */
/* 4. back-to-back saves                                                                     */

/* Reads this rank's rows of "big" and "global_step" of checkpoint `prefix` with the
 * single-process reader (while the writer thread may be writing the next one). */
static void read_back(const tm_model *m, const char *prefix, int64_t step, const char *what)
{
    ckpt_reader *rd = NULL;
    int rc = ckpt_reader_open(&rd, prefix);
    CHECK_MSG(rc == CKPT_OK, "%s: ckpt_reader_open(%s): %s", what, prefix,
              rc ? ckpt_error_last()->message : "");
    if (rc != CKPT_OK)
        return;
    size_t n = (size_t)(m->big_rows * TM_BIG_COLS);
    uint32_t *buf = calloc(n + 1, sizeof *buf);
    ckpt_slice sl = tm_slice2(m->big_row0, 0, m->big_rows, TM_BIG_COLS);
    if (buf && m->big_rows > 0) {
        rc = ckpt_reader_read(rd, "big", CKPT_UINT32, &sl, buf, n * sizeof *buf);
        CHECK_MSG(rc == CKPT_OK, "%s: read big of %s: %s", what, prefix,
                  rc ? ckpt_error_last()->message : "");
        int bad = 0;
        for (size_t i = 0; rc == CKPT_OK && i < n; i++) {
            uint32_t want = tm_big_value(m->big_row0 * TM_BIG_COLS + (int64_t)i, step);
            if (buf[i] != want && bad++ < 5)
                fprintf(stderr, "[rank %d] %s: big[flat %" PRId64 "] = %" PRIu32 ", want %" PRIu32
                                " (step %" PRId64 ")\n",
                        g_rank, what, m->big_row0 * TM_BIG_COLS + (int64_t)i, buf[i], want, step);
        }
        CHECK_MSG(bad == 0, "%s: %s holds wrong values", what, prefix);
    }
    int64_t gs = 0;
    rc = ckpt_reader_read(rd, "global_step", CKPT_INT64, NULL, &gs, sizeof gs);
    CHECK_MSG(rc == CKPT_OK && gs == tm_int_value(TM_ID_GLOBAL_STEP, 0, step),
              "%s: global_step of %s = %" PRId64 " (rc %d), want %" PRId64, what, prefix, gs, rc,
              tm_int_value(TM_ID_GLOBAL_STEP, 0, step));
    free(buf);
    ckpt_reader_free(rd);
}

static void case_back2back(void)
{
    char dir[2200], prefix[2300], name[2400], out[4096];
    snprintf(dir, sizeof dir, "%s/b2b", g_out);
    snprintf(prefix, sizeof prefix, "%s/ck", dir);
    make_dir(dir);
    tm_model m;
    am_init_kib(&m, 2 * ROWS_PER_MIB);
    begin_case("back2back: MPICKPT_ASYNC=1 (%d ranks, %s)", g_size, g_layout_name);
    setenv("MPICKPT_ASYNC", "1", 1);
    ckpt_saver *s = new_saver(0, 0); /* async from the environment */
    unsetenv("MPICKPT_ASYNC");
    register_or_die(&m, s);

    double blocked_max = 0;
    for (int k = 1; k <= 10; k++) {
        begin_case("back2back: save %d", k);
        tm_fill(&m, k);
        ckpt_save_info info = { 0, k, 0 };
        out[0] = '\0';
        double t0 = now_s();
        int rc = ckpt_saver_save(s, prefix, &info, out, sizeof out);
        double dt = now_s() - t0;
        if (dt > blocked_max)
            blocked_max = dt;
        /* observed right when save k returned: save k-1 is complete */
        char prev[2400];
        snprintf(prev, sizeof prev, "%s-%d", prefix, k - 1);
        int prev_idx = k == 1 || index_exists(prev);
        ckpt_saver_metrics mt = CKPT_SAVER_METRICS_INIT;
        int mrc = ckpt_saver_metrics_get(&mt, s);
        int64_t counter = ckpt_saver_counter(s);
        tm_fill(&m, 1000 + k); /* changed right away */

        char w[600];
        snprintf(w, sizeof w, "back2back: save %d", k);
        coll(rc, CKPT_OK, w);
        snprintf(name, sizeof name, "%s-%d", prefix, k);
        CHECK_MSG(strcmp(out, name) == 0, "%s returned \"%s\", want \"%s\"", w, out, name);
        CHECK_MSG(prev_idx, "%s returned while %s was not committed: more than one save in flight",
                  w, prev);
        CHECK_MSG(counter == k - 1, "%s: counter %" PRId64 " when it returned, want %d", w, counter,
                  k - 1);
        if (k == 1) {
            CHECK_MSG(mrc == CKPT_ENOTFOUND, "%s: last_metrics %d before any commit", w, mrc);
        } else {
            CHECK_MSG(mrc == CKPT_OK && strcmp(mt.prefix, prev) == 0,
                      "%s: last metrics (rc %d) are of \"%s\", want \"%s\" (the previous save)", w,
                      mrc, mrc == CKPT_OK ? mt.prefix : "", prev);
            CHECK_MSG(mrc != CKPT_OK || mt.async == 1, "%s: metrics say async=%d", w, mt.async);
            /* the previous checkpoint reads back while this one is being written */
            read_back(&m, prev, k - 1, w);
        }
    }
    begin_case("back2back: final sync");
    coll(ckpt_saver_sync(s), CKPT_OK, "back2back: final sync");
    CHECK_EQ_INT(ckpt_saver_counter(s), 10);
    for (int k = 1; k <= 10; k++) {
        snprintf(name, sizeof name, "%s-%d", prefix, k);
        check_index(name, 1, "back2back: after the final sync");
    }
    ckpt_saver_metrics mt = CKPT_SAVER_METRICS_INIT;
    if (ckpt_saver_metrics_get(&mt, s) == CKPT_OK) {
        snprintf(name, sizeof name, "%s-10", prefix);
        CHECK_MSG(strcmp(mt.prefix, name) == 0, "back2back: last metrics of %s", mt.prefix);
    } else {
        CHECK_MSG(0, "back2back: no metrics after the final sync");
    }
    if (g_rank == 0)
        printf("  longest blocking save: %.4f s\n", blocked_max);
    static const int which[] = { 1, 5, 7, 10, 2 };
    for (size_t i = 0; i < sizeof which / sizeof which[0]; i++) {
        snprintf(name, sizeof name, "%s-%d", prefix, which[i]);
        begin_case("back2back: restore %s", name);
        restore_check_at(s, &m, name, which[i], "back2back");
        CHECK_EQ_INT(ckpt_saver_counter(s), which[i]);
    }
    close_ok(s, "back2back");
    check_dir_clean(dir, NULL, "back2back");
    tm_free(&m);
}

/* ======================================================================================== */
/* 5. async and sync write the same bytes                                                    */

static int64_t num_elements(const ckpt_shape *sh)
{
    int64_t n = 1;
    for (int d = 0; d < sh->ndims; d++)
        n *= sh->dims[d];
    return n;
}

/* Rank 0 compares every tensor of A and B byte for byte; returns the number of differences. */
static int compare_checkpoints(const char *a, const char *b)
{
    ckpt_reader *ra = NULL, *rb = NULL;
    int bad = 0;
    if (ckpt_reader_open(&ra, a) != CKPT_OK || ckpt_reader_open(&rb, b) != CKPT_OK) {
        fprintf(stderr, "cannot open %s or %s: %s\n", a, b, ckpt_error_last()->message);
        ckpt_reader_free(ra);
        ckpt_reader_free(rb);
        return 1;
    }
    size_t na = ckpt_reader_num_tensors(ra), nb = ckpt_reader_num_tensors(rb);
    if (na != nb) {
        fprintf(stderr, "identical: %zu tensors in %s, %zu in %s\n", na, a, nb, b);
        bad++;
    }
    for (size_t i = 0; i < na; i++) {
        ckpt_tensor_info ta, tb;
        size_t j;
        ckpt_reader_tensor(&ta, ra, i);
        if (ckpt_reader_find(&j, rb, ta.name) != CKPT_OK) {
            fprintf(stderr, "identical: %s only in %s\n", ta.name, a);
            bad++;
            continue;
        }
        ckpt_reader_tensor(&tb, rb, j);
        if (ta.dtype != tb.dtype || !ckpt_shape_equal(&ta.shape, &tb.shape) || ta.kind != tb.kind) {
            fprintf(stderr, "identical: %s differs in dtype, shape or kind\n", ta.name);
            bad++;
            continue;
        }
        size_t bytes = (size_t)num_elements(&ta.shape) * ckpt_dtype_size(ta.dtype);
        unsigned char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
        int r1 = x ? ckpt_reader_read(ra, ta.name, ta.dtype, NULL, x, bytes) : CKPT_ENOMEM;
        int r2 = y ? ckpt_reader_read(rb, ta.name, ta.dtype, NULL, y, bytes) : CKPT_ENOMEM;
        if (r1 != CKPT_OK || r2 != CKPT_OK) {
            fprintf(stderr, "identical: cannot read %s (%d, %d)\n", ta.name, r1, r2);
            bad++;
        } else if (bytes && memcmp(x, y, bytes) != 0) {
            size_t k = 0;
            while (x[k] == y[k])
                k++;
            fprintf(stderr, "identical: %s differs from byte %zu of %zu\n", ta.name, k, bytes);
            bad++;
        }
        free(x);
        free(y);
    }
    ckpt_reader_free(ra);
    ckpt_reader_free(rb);
    if (bad == 0)
        printf("  %zu tensors byte-identical\n", na);
    return bad;
}

static void case_identical(void)
{
    char dir[2200], a[2300], b[2300];
    snprintf(dir, sizeof dir, "%s/identical", g_out);
    snprintf(a, sizeof a, "%s/async", dir);
    snprintf(b, sizeof b, "%s/sync", dir);
    make_dir(dir);
    tm_model m;
    am_init_kib(&m, 1 * ROWS_PER_MIB + 17);
    begin_case("identical: async write (%d ranks, %s)", g_size, g_layout_name);
    ckpt_saver *sa = new_saver(1, 0), *ss = new_saver(0, 0);
    register_or_die(&m, sa);
    register_or_die(&m, ss);
    tm_fill(&m, 7);
    ckpt_save_info info = { 2, 7, 1 };
    coll(ckpt_saver_write(sa, a, &info), CKPT_OK, "identical: async write");
    coll(ckpt_saver_sync(sa), CKPT_OK, "identical: sync");
    begin_case("identical: sync write");
    coll(ckpt_saver_write(ss, b, &info), CKPT_OK, "identical: sync write");
    check_index(a, 1, "identical");
    check_index(b, 1, "identical");
    begin_case("identical: compare");
    int bad = 0;
    if (g_rank == 0) {
        bad = compare_checkpoints(a, b);
        CHECK_MSG(bad == 0, "identical: %d tensors differ between the async and the sync save", bad);
        const char *bin = getenv("MPICKPT_BINARY_DIR");
        if (bin && *bin) {
            char cmd[7000];
            snprintf(cmd, sizeof cmd, "'%s/bin/mpickpt' diff '%s' '%s' > '%s/diff.txt' 2>&1", bin, a,
                     b, dir);
            int st = system(cmd);
            CHECK_MSG(st == 0, "identical: '%s' exited with status %d (see %s/diff.txt)", cmd, st,
                      dir);
        } else {
            printf("  (MPICKPT_BINARY_DIR not set: mpickpt diff not run)\n");
        }
    }
    restore_check_at(ss, &m, a, 7, "identical: the async one restores");
    close_ok(sa, "identical async");
    close_ok(ss, "identical sync");
    tm_free(&m);
}

/* ======================================================================================== */
/* 6. manager and training state in async mode                                               */

static void check_state(const ckpt_state *st, const int *want, int n, const char *what)
{
    CHECK_MSG(st && (int)st->num_entries == n, "%s: %zu entries, want %d", what,
              st ? st->num_entries : 0, n);
    for (int i = 0; st && i < n && i < (int)st->num_entries; i++) {
        char name[64];
        snprintf(name, sizeof name, "ckpt-%d", want[i]);
        CHECK_MSG(strcmp(st->entries[i].prefix, name) == 0, "%s: entry %d is %s, want %s", what, i,
                  st->entries[i].prefix, name);
        CHECK_MSG(st->entries[i].epoch == want[i], "%s: %s has epoch %" PRId64 ", want %d", what,
                  st->entries[i].prefix, st->entries[i].epoch, want[i]);
    }
    char latest[64];
    snprintf(latest, sizeof latest, "ckpt-%d", want[n - 1]);
    CHECK_MSG(st && strcmp(st->latest, latest) == 0, "%s: latest %s, want %s", what,
              st ? st->latest : "", latest);
}

static void case_training(void)
{
    char dir[2200], chief[2300], name[2400];
    snprintf(dir, sizeof dir, "%s/train", g_out);
    snprintf(chief, sizeof chief, "%s/chief", dir);
    tm_model m;
    am_init_kib(&m, 8 * ROWS_PER_MIB);
    begin_case("training: async backups, max_to_keep=2 (%d ranks, %s)", g_size, g_layout_name);
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = 2;
    ckpt_training *t = NULL;
    if (!coll(ckpt_training_create(&t, s, dir, &o), CKPT_OK, "training: create"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (int e = 1; e <= 5; e++) {
        tm_fill(&m, e);
        char w[128];
        snprintf(w, sizeof w, "training: back_up epoch %d", e);
        coll(ckpt_training_back_up(t, e, e, 1), CKPT_OK, w);
        tm_fill(&m, 100 + e);
    }
    coll(ckpt_saver_sync(s), CKPT_OK, "training: final sync");
    static const int want45[] = { 4, 5 }, want56[] = { 5, 6 };
    check_state(test_manager_state(ckpt_training_manager(t)), want45, 2,
                "training: manager state after the sync");
    ckpt_state *st = NULL;
    CHECK_OK(ckpt_state_read(&st, chief));
    check_state(st, want45, 2, "training: state file after the sync");
    ckpt_state_free(st);
    for (int k = 1; k <= 5; k++) {
        snprintf(name, sizeof name, "%s/ckpt-%d", chief, k);
        check_index(name, k >= 4, "training: retention");
    }
    static const char *const allow_chief[] = { "chief", NULL };
    check_dir_clean(dir, allow_chief, "training: backup dir");
    check_dir_clean(chief, DIR_STATE, "training: chief dir (retention removed the data too)");

    begin_case("training: restore after async backups");
    tm_zero(&m);
    int restored = 0;
    coll(ckpt_training_restore(t, &restored), CKPT_OK, "training: restore");
    CHECK_EQ_INT(restored, 1);
    check_values(&m, 5, TM_RESTORED, "training: restore of epoch 5");
    CHECK_EQ_INT(ckpt_training_initial_epoch(t, 0), 6);
    CHECK_EQ_INT(ckpt_training_initial_step(t, 0), 6);

    begin_case("training: restore while a backup is in flight");
    tm_fill(&m, 6);
    coll(ckpt_training_back_up(t, 6, 6, 1), CKPT_OK, "training: back_up epoch 6");
    tm_zero(&m); /* the snapshot is taken: the buffers may change */
    double t0 = now_s();
    coll(ckpt_training_restore(t, &restored), CKPT_OK, "training: restore with a backup in flight");
    if (g_rank == 0)
        printf("  restore with a backup in flight took %.3f s\n", now_s() - t0);
    CHECK_EQ_INT(restored, 1);
    ckpt_manager_restore_result rsv = CKPT_MANAGER_RESTORE_RESULT_INIT;
    CHECK_OK(ckpt_training_restore_result(&rsv, t));
    const ckpt_manager_restore_result *rs = &rsv;
    CHECK_MSG(ends_with(rs->prefix, "/ckpt-6"), "training: restored %s, want ckpt-6 (the backup "
                                                "in flight)",
              rs->prefix);
    check_values(&m, 6, TM_RESTORED, "training: restore waited for epoch 6");
    CHECK_EQ_INT(ckpt_training_initial_epoch(t, 0), 7);
    coll(ckpt_saver_sync(s), CKPT_OK, "training: sync after the restore");
    check_state(test_manager_state(ckpt_training_manager(t)), want56, 2,
                "training: manager state after epoch 6");
    snprintf(name, sizeof name, "%s/ckpt-4", chief);
    check_index(name, 0, "training: retention of ckpt-4");
    ckpt_training_free(t);
    close_ok(s, "training");

    begin_case("training: a fresh saver and training state restore the newest");
    s = new_saver(1, 0);
    register_or_die(&m, s);
    t = NULL;
    if (!coll(ckpt_training_create(&t, s, dir, &o), CKPT_OK, "training: create again"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    tm_zero(&m);
    coll(ckpt_training_restore(t, &restored), CKPT_OK, "training: restore (fresh)");
    CHECK_EQ_INT(restored, 1);
    check_values(&m, 6, TM_RESTORED, "training: fresh restore of epoch 6");
    check_dir_clean(dir, allow_chief, "training: backup dir at the end");
    ckpt_training_free(t);
    close_ok(s, "training (fresh)");
    tm_free(&m);
}

/* ======================================================================================== */
/* 8. metrics                                                                                */

static void case_metrics(void)
{
    char dir[2200], prefix[2300], name[2400];
    snprintf(dir, sizeof dir, "%s/metrics", g_out);
    snprintf(prefix, sizeof prefix, "%s/ck", dir);
    make_dir(dir);
    tm_model m;
    const int kib = 8 * ROWS_PER_MIB;
    am_init_kib(&m, kib);
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);
    ckpt_saver_metrics mt = CKPT_SAVER_METRICS_INIT;
    begin_case("metrics: none before a commit (%d ranks, %s)", g_size, g_layout_name);
    CHECK_RC(ckpt_saver_metrics_get(&mt, s), CKPT_ENOTFOUND);

    begin_case("metrics: three committed saves and a failed one");
    ckpt_save_info info = { 0, 1, 0 };
    tm_fill(&m, 1);
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "metrics: save 1");
    coll(ckpt_saver_sync(s), CKPT_OK, "metrics: sync 1");
    char fault[32];
    snprintf(fault, sizeof fault, "%d:write", g_size - 1);
    set_fault(fault);
    tm_fill(&m, 2);
    info.step = 2;
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "metrics: failing save");
    coll(ckpt_saver_sync(s), CKPT_EIO, "metrics: sync reports the failure");
    set_fault(NULL);
    if (ckpt_saver_metrics_get(&mt, s) == CKPT_OK) {
        snprintf(name, sizeof name, "%s-1", prefix);
        CHECK_MSG(strcmp(mt.prefix, name) == 0, "metrics: after a failed save the last metrics are "
                                                 "of %s, want %s (the last committed)",
                  mt.prefix, name);
    }
    for (int k = 2; k <= 3; k++) {
        tm_fill(&m, k);
        info.step = k;
        coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "metrics: save");
        coll(ckpt_saver_sync(s), CKPT_OK, "metrics: sync");
    }
    mt = (ckpt_saver_metrics)CKPT_SAVER_METRICS_INIT;
    int rc = ckpt_saver_metrics_get(&mt, s);
    CHECK_OK(rc);
    snprintf(name, sizeof name, "%s-3", prefix);
    CHECK_MSG(strcmp(mt.prefix, name) == 0, "metrics: prefix %s, want %s", mt.prefix, name);
    CHECK_EQ_INT(mt.async, 1);
    CHECK_EQ_INT(mt.ranks, g_size);
    /* what every rank registered, stored once (replicated primaries once, components and blobs
     * per rank) */
    const int64_t rows = (int64_t)kib * g_size; /* of "big" */
    uint64_t want = tm_stored_bytes(g_size, rows, 3); /* the blob's length changes with the step */
    CHECK_MSG(mt.bytes == want, "metrics: bytes %" PRIu64 ", want %" PRIu64, mt.bytes, want);
    double phases[5] = { mt.blocking_s, mt.write_s, mt.agree_s, mt.merge_s, mt.commit_s };
    for (int i = 0; i < 5; i++)
        CHECK_MSG(isfinite(phases[i]) && phases[i] >= 0, "metrics: phase %d = %g, want a finite "
                  "number >= 0", i, phases[i]);
    double bg = mt.write_s + mt.agree_s + mt.merge_s + mt.commit_s;
    if (g_rank == 0)
        printf("  %s: %" PRIu64 " bytes on %d ranks: blocking %.4f s; write %.4f agree %.4f merge "
               "%.4f commit %.4f (background %.4f s)\n",
               mt.prefix, mt.bytes, mt.ranks, mt.blocking_s, mt.write_s, mt.agree_s, mt.merge_s,
               mt.commit_s, bg);
    /* No comparison of blocking_s with the background time: which is longer depends on the load.
     * That an async save does not block for the write is checked by behaviour (snapshot,
     * back2back: the caller changes its buffers while the save is written). */
    /* every rank has the same metrics (maxima over ranks) */
    double mx[6] = { mt.blocking_s, mt.write_s, mt.agree_s, mt.merge_s, mt.commit_s,
                     (double)mt.bytes },
           mn[6];
    double mxx[6];
    MPI_Allreduce(mx, mn, 6, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mx, mxx, 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(mn[i] == mxx[i], "metrics: field %d differs between ranks (%g..%g)", i, mn[i],
                  mxx[i]);

    /* the index agrees with the bytes */
    if (g_rank == 0) {
        ckpt_reader *rd = NULL;
        uint64_t sum = 0;
        if (ckpt_reader_open(&rd, name) == CKPT_OK) {
            for (size_t i = 0; i < ckpt_reader_num_tensors(rd); i++) {
                ckpt_tensor_info ti;
                ckpt_reader_tensor(&ti, rd, i);
                for (size_t j = 0; j < ti.num_pieces; j++) {
                    ckpt_piece_info pi;
                    if (ckpt_reader_piece(&pi, rd, i, j) == CKPT_OK)
                        sum += pi.bytes;
                }
            }
        }
        ckpt_reader_free(rd);
        CHECK_MSG(sum == want, "metrics: the index stores %" PRIu64 " bytes, want %" PRIu64, sum,
                  want);
    }

    /* metrics.jsonl: one line per committed save */
    begin_case("metrics: metrics.jsonl");
    if (g_rank == 0) {
        char jl[2400], cmd[8000];
        snprintf(jl, sizeof jl, "%s/metrics.jsonl", dir);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -B '%s/check_metrics_jsonl.py' '%s' 3 %d %" PRIu64 ",%" PRIu64
                 ",%" PRIu64 " ck-1,ck-2,ck-3 %.6f,%.6f,%.6f,%.6f,%.6f",
                 MPICKPT_TESTS_SCRIPTS, jl, g_size, tm_stored_bytes(g_size, rows, 1),
                 tm_stored_bytes(g_size, rows, 2), want, mt.blocking_s, mt.write_s, mt.agree_s,
                 mt.merge_s, mt.commit_s);
        int st = system(cmd);
        CHECK_MSG(st == 0, "metrics: %s failed (status %d)", cmd, st);
    }
    close_ok(s, "metrics");
    tm_free(&m);
}

/* ======================================================================================== */
/* 7. a rank killed while a background write is in flight (tests/scripts/test_async_kill.sh)  */

static void case_kill_write(int victim)
{
    char dir[2200], name[2400];
    snprintf(dir, sizeof dir, "%s/kill", g_out);
    tm_model m;
    am_init(&m, g_size, g_rank, g_size, (int64_t)ROWS_PER_MIB * g_size);
    begin_case("kill_write: commit ckpt-1 (%d ranks, %s)", g_size, g_layout_name);
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, NULL), CKPT_OK, "kill_write: manager"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    tm_fill(&m, 1);
    ckpt_manager_save_info info = { 1, 1, 1, 1 };
    coll(ckpt_manager_save(mg, &info, name, sizeof name), CKPT_OK, "kill_write: save ckpt-1");
    coll(ckpt_saver_sync(s), CKPT_OK, "kill_write: sync ckpt-1");
    if (g_rank == 0)
        printf("kill_write: committed %s\n", name);

    begin_case("kill_write: rank %d dies in the writer thread", victim);
    char fault[64];
    snprintf(fault, sizeof fault, "%d:write:kill", victim);
    set_fault(fault);
    tm_fill(&m, 2);
    info.epoch = info.step = 2;
    int rc = ckpt_manager_save(mg, &info, name, sizeof name);
    if (rc == CKPT_OK && g_rank == 0)
        printf("kill_write: async save of %s started\n", name);
    fflush(stdout);
    rc = ckpt_saver_sync(s); /* the victim dies; the others never get past this */
    fprintf(stderr, "[rank %d] kill_write: sync returned %d: rank %d was not killed\n", g_rank, rc,
            victim);
    CHECK_MSG(0, "kill_write: the job survived MPICKPT_FAULT=%s", fault);
}

static void case_kill_restore(int nwriter)
{
    char dir[2200], name[2400];
    snprintf(dir, sizeof dir, "%s/kill", g_out);
    tm_model m;
    am_init(&m, g_size, g_rank, nwriter, (int64_t)ROWS_PER_MIB * nwriter);
    begin_case("kill_restore: %d ranks restore what %d ranks left (%s)", g_size, nwriter,
               g_layout_name);
    ckpt_saver *s = new_saver(1, 0);
    register_or_die(&m, s);
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.skip_missing_per_rank = 1;
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, "kill_restore: manager"))
        MPI_Abort(MPI_COMM_WORLD, 2);
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(&m);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, "kill_restore: restore")) {
        CHECK_EQ_INT(res.restored, 1);
        CHECK_MSG(ends_with(res.prefix, "/ckpt-1"), "kill_restore: restored %s, want ckpt-1",
                  res.prefix);
        CHECK_EQ_INT(res.save_counter, 1);
        CHECK_EQ_INT(res.epoch, 1);
        CHECK_EQ_INT(res.step, 1);
        CHECK_EQ_INT(res.world_size, nwriter);
        if (g_rank == 0)
            printf("kill_restore: restored %s (skipped %d)\n", res.prefix, res.skipped);
        check_values(&m, 1, g_rank < nwriter ? TM_RESTORED : TM_UNTOUCHED,
                     "kill_restore: ckpt-1");
    }
    begin_case("kill_restore: the next save removes the leftovers");
    tm_fill(&m, 5);
    ckpt_manager_save_info info = { 5, 5, 1, 1 };
    coll(ckpt_manager_save(mg, &info, name, sizeof name), CKPT_OK, "kill_restore: save");
    coll(ckpt_saver_sync(s), CKPT_OK, "kill_restore: sync");
    CHECK_MSG(ends_with(name, "/ckpt-2"), "kill_restore: saved %s, want ckpt-2", name);
    check_index(name, 1, "kill_restore: ckpt-2");
    check_dir_clean(dir, DIR_STATE, "kill_restore: after the next save");
    tm_zero(&m);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, "kill_restore: restore 2")) {
        CHECK_MSG(ends_with(res.prefix, "/ckpt-2"), "kill_restore: restored %s", res.prefix);
        check_values(&m, 5, TM_RESTORED, "kill_restore: ckpt-2");
    }
    if (g_rank == 0)
        printf("kill_restore: saved and restored %s\n", name);
    ckpt_manager_free(mg);
    close_ok(s, "kill_restore");
    tm_free(&m);
}

/* ======================================================================================== */

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    static const char *const cases[] = { "snapshot", "fault",       "enospc",   "enospc_noreserve", "close",
                                         "close_partial", "back2back", "identical", "training",
                                         "metrics",  "kill_write",  "kill_restore" };
    int known = 0;
    for (size_t i = 0; argc >= 4 && i < sizeof cases / sizeof cases[0]; i++)
        known |= strcmp(argv[2], cases[i]) == 0;
    if (argc < 4 || argc > 5 || !known || tm_layout(argv[3]) == CKPT_LAYOUT_UNKNOWN) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_async OUTDIR CASE shared|per-rank|per-node [ARG]\n  CASE: "
                            "snapshot fault enospc enospc_noreserve close close_partial back2back identical "
                            "training metrics kill_write VICTIM kill_restore NWRITER\n");
        MPI_Finalize();
        return 2;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        if (g_rank == 0)
            fprintf(stderr, "test_async: MPI granted thread level %d, not MPI_THREAD_MULTIPLE\n",
                    provided);
        MPI_Finalize();
        return 1;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    g_layout_name = argv[3];
    g_layout = tm_layout(argv[3]); /* per-node: nodes of MPICKPT_RANKS_PER_NODE ranks */
    const char *c = argv[2];
    int arg = argc == 5 ? atoi(argv[4]) : -1;
    /* only what this test sets */
    unsetenv("MPICKPT_FAULT");
    unsetenv("MPICKPT_ASYNC");
    unsetenv("MPICKPT_LAYOUT");
    unsetenv("MPICKPT_RESERVE");
    if (g_rank == 0) {
        char cmd[2200];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_out);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot create %s\n", g_out);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    if (strcmp(c, "snapshot") == 0)
        case_snapshot();
    else if (strcmp(c, "fault") == 0)
        case_fault();
    else if (strcmp(c, "enospc") == 0)
        case_enospc(1);
    else if (strcmp(c, "enospc_noreserve") == 0)
        case_enospc(0);
    else if (strcmp(c, "close") == 0)
        case_close(0);
    else if (strcmp(c, "close_partial") == 0)
        case_close(1);
    else if (strcmp(c, "back2back") == 0)
        case_back2back();
    else if (strcmp(c, "identical") == 0)
        case_identical();
    else if (strcmp(c, "training") == 0)
        case_training();
    else if (strcmp(c, "metrics") == 0)
        case_metrics();
    else if (strcmp(c, "kill_write") == 0)
        case_kill_write(arg >= 0 && arg < g_size ? arg : g_size - 1);
    else if (strcmp(c, "kill_restore") == 0)
        case_kill_restore(arg > 0 ? arg : g_size);
    alarm(0);
    char title[128];
    snprintf(title, sizeof title, "test_async %s %s", c, g_layout_name);
    int rc = check_mpi_done(title);
    return rc == 0 && g_skipped ? 77 : rc; /* SKIP_RETURN_CODE of the enospc entries */
}
