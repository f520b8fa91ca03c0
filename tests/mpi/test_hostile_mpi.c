/* Hostile MPI conditions for the guarantees of issue 12 (docs/design.md §4-§8, §10).
 *
 * usage: test_hostile_mpi OUTDIR CASE [ARG...]
 *
 *   fallback_per_rank sync|async
 *       (N >= 2 ranks) checkpoint A = ckpt-1 written by ranks 0..N-2 (an MPI_Comm_split
 *       sub-communicator) through a manager, then B = ckpt-2 by all N ranks in the same directory
 *       (the manager numbers past A). Every rank registers partitioned tensors, a replicated one,
 *       a per-component replica and a blob whose restore callback records what it got. One byte
 *       of rank 0's rows of "w" is flipped in B's data (at H5Dget_offset: index and sizes stay
 *       valid), every buffer gets a sentinel, and restore_or_initialize (skip_missing_per_rank)
 *       must fall back to A (skipped == 1): A's values everywhere on ranks 0..N-2; on rank N-1 the
 *       component keeps its sentinel and the blob callback is never called (nothing of B); the
 *       tensors hold A's values on every rank.
 *   async_lifetime
 *       (a) MPICKPT_ASYNC=1 in the environment, a program written for sync saves 4 backups
 *       (max_to_keep 2) through ckpt_training_back_up and frees the training state, then the saver,
 *       right after the last one (the demo's order): the state file lists ckpt-4 last, exactly
 *       ckpt-3 and ckpt-4 are on disk, it restores. (b) the same through ckpt_manager_save, the
 *       saver freed first, then the manager. (c) a save in flight whose saver's close timed out
 *       (CKPT_ETIMEDOUT, the saver left allocated as saver.h documents), then the manager freed:
 *       no crash, the abandoned save is not committed, the state still lists the previous one.
 *       ASan turns a use of the freed manager by the writer thread into a failure.
 *   enospc_sync shared|per-rank|per-node reserve|noreserve
 *       a synchronous saver and manager on a small tmpfs (mounted by rank 0 as root; exit 77 when
 *       it cannot): ckpt-1 fits, ckpt-2 does not: CKPT_ENOSPC (or CKPT_EIO saying no space) on
 *       every rank, ckpt-1 stays the latest and restores exactly, no temp files and no space
 *       left held; after a remount with room the next save commits; the process finalizes
 *       cleanly.
 *       noreserve: MPICKPT_RESERVE=0, the full disk is met inside HDF5 / MPI-IO.
 *   settings
 *       bad MPICKPT_* values -> CKPT_EINVAL on every rank naming the variable and the value (also
 *       when only rank 1 has it); divergent valid MPICKPT_LAYOUT / MPICKPT_PACK_BYTES /
 *       MPICKPT_RANKS_PER_NODE -> rank 0's
 *       setting is what the checkpoint shows; ckpt_saver_options differing on one rank ->
 *       CKPT_EMISMATCH on every rank; a valid MPICKPT_FAULT still injects.
 *   dir per-rank|shared|per-node
 *       a checkpoint directory others wrote into, under a collective saver and a manager:
 *       workertemp_1 (N >= 2; per-node: the second node's leader's) and <base>_temp planted as
 *       links to a victim directory -> the save commits in its own in-flight directories (their
 *       names carry the save's id), the links and the victim untouched; links planted under the
 *       data files' final names -> CKPT_EEXISTS naming one on every rank, nothing committed, the
 *       links left as they are; the next numbered save moves past that number and commits with
 *       a link under metrics.jsonl (left, never written through); a FIFO
 *       metrics.jsonl does not block the save; a chief/ that is a link -> ckpt_training_create
 *       fails naming it; a FIFO state file, a FIFO latest index -> the manager rebuilds its list
 *       and falls back (no hang); stray indexes (a FIFO, ".index", garbage, another manager's)
 *       next to a valid state file are not even looked at (no warning), and without one they are
 *       skipped with warnings; a state file listing a checkpoint twice, with a negative counter,
 *       or a counter at INT64_MAX is refused and rebuilt from the indexes: retention never
 *       deletes a listed checkpoint and the next save is numbered past the indexes.
 *   utf8_names
 *       ill-formed UTF-8 tensor names are refused (CKPT_EINVAL naming the name with its bad bytes
 *       escaped as \xHH) at registration or, at the latest, by the first save on every rank;
 *       valid multi-byte names save and restore byte-exact.
 *   messages
 *       (issue 29) what a failed collective says: a replicated tensor registered with shape [3]
 *       on every rank but the last, [4] there -> CKPT_EMISMATCH on every rank showing both shapes
 *       and saying the shapes differ (it read "float64/1-d/replicated" twice); a manager's
 *       restore that fails on the last rank (a name the checkpoint lacks) -> the message names
 *       that rank with its host once: it passed through two agreements and read "rank 0 (host
 *       H): rank 0 (host H): ..." at 1 rank, "rank 0 (host H): rank 1 (host H): ..." at 2.
 *       (issue 30) a save onto a full tmpfs: CKPT_ENOSPC with sys_errno ENOSPC on every rank and
 *       "rank " once in the message (it read "rank 0 (host H): rank 0: no space ..."); a save
 *       into a read-only tmpfs: CKPT_EIO with sys_errno EROFS on every rank (the errno travels
 *       with the agreed message). Rank 0 mounts the tmpfs (root only; skipped otherwise).
 *
 * Every library call's status is compared over the ranks of its communicator (same code and same
 * message everywhere) and with the expected one; every check runs on every rank. No duration is
 * compared with anything: the per-case watchdog (mpi_check.h) and ctest's TIMEOUT only catch hangs.
 */
#include "index.h" /* ckpt__state_pack: a state file no library call would write */
#include "mpi_check.h"
#include "tmpfs.h"
#include "coll.h"
#include "logcap.h"
#include "mpickpt.h"
#include "state_copy.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_size;
static char g_out[2048];

#define begin_case(...) check_case(1, __VA_ARGS__)

/* ---- status checks ---------------------------------------------------------------------- */

/* 1 on every rank when `ok` holds on every rank. */
/* ---- files ---------------------------------------------------------------------------------- */

/* Number of "<stem>-<N>.index" files in `dir` (rank 0's view). */
static int count_indexes(const char *dir, const char *stem)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    size_t sl = strlen(stem);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, stem, sl) == 0 && de->d_name[sl] == '-' &&
            ends_with(de->d_name, ".index"))
            n++;
    closedir(d);
    return n;
}

/* ---- the model (model.h), with `kib` KiB of "big" per rank (0: none) --------------------- */

/* Rank r of n, no full tensors (fallback_per_rank restores a checkpoint of fewer ranks than it
 * registers with). Aborts when out of memory. */
static void model_init(tm_model *m, int n, int r, int64_t big_kib_per_rank)
{
    if (tm_init(m, n, r, 0, big_kib_per_rank * n) != CKPT_OK)
        MPI_Abort(MPI_COMM_WORLD, 3);
}

static ckpt_manager *new_manager(ckpt_saver *s, MPI_Comm comm, const char *dir, int max_to_keep,
                                 int skip_missing)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = max_to_keep;
    o.skip_missing_per_rank = skip_missing;
    ckpt_manager *m = NULL;
    if (!coll_on(comm, ckpt_manager_create(&m, s, dir, &o), CKPT_OK, "ckpt_manager_create") ||
        !m) {
        fprintf(stderr, "[rank %d] cannot create a manager; giving up\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return m;
}

/* ======================================================================================== */
/* 1. fallback_per_rank                                                                      */

static void case_fallback(int async)
{
    const char *mode = async ? "async" : "sync";
    if (g_size < 2) {
        if (g_rank == 0)
            printf("fallback_per_rank needs 2 or more ranks\n");
        CHECK(g_size >= 2);
        return;
    }
    char dir[2200], name[4400], want[2400];
    snprintf(dir, sizeof dir, "%s/train", g_out);
    const int last = g_size - 1, in_a = g_rank < last;

    /* A: ranks 0..N-2 */
    begin_case("fallback_per_rank (%s, %d ranks): ckpt-1 written by ranks 0..%d", mode, g_size,
               last - 1);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, in_a ? 0 : MPI_UNDEFINED, g_rank, &sub);
    if (in_a) {
        tm_model a;
        model_init(&a, g_size - 1, g_rank, 0);
        ckpt_saver *s = new_saver_on(sub, CKPT_LAYOUT_PER_RANK, async, 0);
        int rc = tm_register(&a, s);
        CHECK_OK(rc);
        ckpt_manager *mg = new_manager(s, sub, dir, 0, 0);
        tm_fill(&a, 1);
        ckpt_manager_save_info info = { 1, 1, 1, 1 };
        name[0] = '\0';
        coll_on(sub, ckpt_manager_save(mg, &info, name, sizeof name), CKPT_OK, "save A");
        coll_on(sub, ckpt_saver_sync(s), CKPT_OK, "sync A");
        CHECK_MSG(ends_with(name, "/ckpt-1"), "A saved as \"%s\", want .../ckpt-1", name);
        ckpt_manager_free(mg);
        coll_on(sub, ckpt_saver_close(s), CKPT_OK, "close A");
        tm_free(&a);
        MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* B: all N ranks, same directory and name: the manager numbers past A */
    begin_case("fallback_per_rank (%s): ckpt-2 written by all %d ranks", mode, g_size);
    tm_model m;
    model_init(&m, g_size, g_rank, 0);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_PER_RANK, async, 0);
    register_or_die(&m, s);
    ckpt_manager *mg = new_manager(s, MPI_COMM_WORLD, dir, 0, 1);
    tm_fill(&m, 2);
    ckpt_manager_save_info info = { 2, 2, 1, 1 };
    name[0] = '\0';
    coll(ckpt_manager_save(mg, &info, name, sizeof name), CKPT_OK, "save B");
    coll(ckpt_saver_sync(s), CKPT_OK, "sync B");
    CHECK_MSG(ends_with(name, "/ckpt-2"), "B saved as \"%s\", want .../ckpt-2", name);
    snprintf(want, sizeof want, "%s/ckpt-1", dir);
    CHECK_MSG(index_exists(want), "%s.index is missing", want);
    snprintf(want, sizeof want, "%s/ckpt-2", dir);
    CHECK_MSG(index_exists(want), "%s.index is missing", want);

    /* B fails only while data is read: rank 0's rows of "w" (rank 0 reads them back) */
    begin_case("fallback_per_rank (%s): damage ckpt-2", mode);
    int ok = 1;
    char file[256] = "";
    if (g_rank == 0) {
        int rc = tm_flip_piece_byte(want, "w", 0, file, sizeof file);
        ok = rc == CKPT_OK;
        CHECK_MSG(ok, "cannot flip a byte of rank 0's piece of w in %s (%d)", want, rc);
        if (ok)
            printf("  flipped a byte of rank 0's rows of w in %s\n", file);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) {
        ckpt_manager_free(mg);
        ckpt_saver_free(s);
        tm_free(&m);
        return;
    }

    begin_case("fallback_per_rank (%s): restore falls back to ckpt-1", mode);
    tm_sentinel(&m);
    g_nlogs = 0;
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, "restore_or_initialize")) {
        CHECK_EQ_INT(res.restored, 1);
        CHECK_MSG(ends_with(res.prefix, "/ckpt-1"), "restored \"%s\", want .../ckpt-1",
                  res.prefix);
        CHECK_EQ_INT(res.skipped, 1);
        CHECK_EQ_INT(res.world_size, g_size - 1);
        CHECK_EQ_INT(res.save_counter, 1);
        CHECK_EQ_INT(res.epoch, 1);
        CHECK_EQ_INT(res.step, 1);
    }
    /* ranks 0..N-2: A's values everywhere; rank N-1: A's tensors, its component's sentinel, no
     * callback (A has nothing of it, and nothing of B may be left) */
    check_values(&m, 1, in_a ? TM_RESTORED : TM_UNTOUCHED, "after the fallback to ckpt-1");
    if (g_rank == 0) {
        static const char *const words[] = { "ckpt-2", NULL };
        const char *w = logs_find(words);
        CHECK_MSG(w != NULL, "no warning names the skipped ckpt-2");
        if (w)
            printf("  warning: %s\n", w);
    }
    ckpt_manager_free(mg);
    coll(ckpt_saver_close(s), CKPT_OK, "close B");
    tm_free(&m);
}

/* ======================================================================================== */
/* 2. async_lifetime                                                                         */

/* A saver whose close timed out stays allocated on purpose (its writer thread may still use it);
 * kept reachable with the buffers registered with it, so that LeakSanitizer does not report what
 * the library leaves by design. A manager left allocated is reachable through the saver. */
static ckpt_saver *g_leaked;
static tm_model g_leaked_model;


/* What must be on disk after saves ckpt-1..ckpt-<last> with max_to_keep 2 in `dir`: the state
 * file lists ckpt-<last-1> and ckpt-<last> (the latter as the latest), exactly their indexes are
 * there, nothing else is left. Rank 0 checks; collective. */
static void check_kept_two(const char *dir, int last, const char *what)
{
    if (g_rank == 0) {
        ckpt_state *st = NULL;
        int rc = ckpt_state_read(&st, dir);
        CHECK_MSG(rc == CKPT_OK, "%s: cannot read the state file of %s: %s", what, dir,
                  rc ? ckpt_error_last()->message : "");
        if (rc == CKPT_OK) {
            char a[64], b[64];
            snprintf(a, sizeof a, "ckpt-%d", last - 1);
            snprintf(b, sizeof b, "ckpt-%d", last);
            CHECK_MSG(strcmp(st->latest, b) == 0, "%s: the state file's latest is \"%s\", want %s",
                      what, st->latest, b);
            CHECK_MSG(st->num_entries == 2 && strcmp(st->entries[0].prefix, a) == 0 &&
                          strcmp(st->entries[1].prefix, b) == 0,
                      "%s: the state file lists %zu entries (%s, %s), want %s and %s", what,
                      st->num_entries, st->num_entries > 0 ? st->entries[0].prefix : "-",
                      st->num_entries > 1 ? st->entries[1].prefix : "-", a, b);
        }
        ckpt_state_free(st);
        int n = count_indexes(dir, "ckpt");
        CHECK_MSG(n == 2, "%s: %d checkpoint indexes in %s, want 2 (max_to_keep)", what, n, dir);
        for (int k = 1; k <= last; k++) {
            char p[2600];
            snprintf(p, sizeof p, "%s/ckpt-%d", dir, k);
            CHECK_MSG(index_exists(p) == (k >= last - 1), "%s: %s.index %s", what, p,
                      k >= last - 1 ? "is missing" : "is still there (retention not applied)");
        }
    }
    check_dir_clean(dir, DIR_STATE, what);
}

/* A fresh synchronous saver and manager restore the newest checkpoint of `dir`: `counter`, with
 * the values of `step` (a model with `kib` KiB of "big" per rank). */
static void check_restores(const char *dir, int counter, int64_t step, int64_t kib,
                           const char *what)
{
    tm_model m;
    model_init(&m, g_size, g_rank, kib);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 0, 0);
    register_or_die(&m, s);
    ckpt_manager *mg = new_manager(s, MPI_COMM_WORLD, dir, 0, 0);
    tm_sentinel(&m);
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    char w[600], want[64];
    snprintf(w, sizeof w, "%s: restore", what);
    snprintf(want, sizeof want, "/ckpt-%d", counter);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, w)) {
        CHECK_MSG(res.restored == 1 && ends_with(res.prefix, want) && res.skipped == 0,
                  "%s: restored %d \"%s\" (skipped %d), want %s", w, res.restored, res.prefix,
                  res.skipped, want);
        check_values(&m, step, TM_RESTORED, w);
    }
    ckpt_manager_free(mg);
    coll(ckpt_saver_close(s), CKPT_OK, "close the restorer");
    tm_free(&m);
}

/* Rank 0 counts the lines of `dir`/metrics.jsonl that record an async save. */
static int async_metric_lines(const char *dir)
{
    char p[2600], line[8192];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "\"mode\":\"async\"") != NULL;
    fclose(f);
    return n;
}

/* Prints (rank 0, not a check) whether ckpt-<counter> was still in flight: what the case is
 * about, but a matter of timing. */
static void note_in_flight(const char *dir, int counter, const char *when)
{
    if (g_rank != 0)
        return;
    char p[2600];
    snprintf(p, sizeof p, "%s/ckpt-%d", dir, counter);
    printf("  %s: ckpt-%d %s\n", when, counter,
           index_exists(p) ? "was already committed (the case ran without a save in flight)"
                           : "was still in flight");
    fflush(stdout);
}

static void case_async_lifetime(void)
{
    const int64_t kib = 8 * 1024; /* 8 MiB of "big" per rank: the last save is still being
                                     written when the program frees everything */
    char dir[2200], chief[2300];
    check_watchdog_s = 240;

    /* (a) */
    snprintf(dir, sizeof dir, "%s/a", g_out);
    snprintf(chief, sizeof chief, "%s/chief", dir);
    begin_case("async_lifetime (a): MPICKPT_ASYNC=1, training state freed, then the saver "
               "(%d ranks)", g_size);
    {
        setenv("MPICKPT_ASYNC", "1", 1);
        tm_model m;
        model_init(&m, g_size, g_rank, kib);
        ckpt_saver *s = NULL;
        /* a program written for synchronous saves: no options */
        if (!coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, "(a) create"))
            MPI_Abort(MPI_COMM_WORLD, 2);
        register_or_die(&m, s);
        ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
        o.max_to_keep = 2;
        ckpt_training *t = NULL;
        if (!coll(ckpt_training_create(&t, s, dir, &o), CKPT_OK, "(a) training create"))
            MPI_Abort(MPI_COMM_WORLD, 2);
        for (int e = 1; e <= 4; e++) {
            tm_fill(&m, e);
            char w[64];
            snprintf(w, sizeof w, "(a) back_up %d", e);
            coll(ckpt_training_back_up(t, e, e, 1), CKPT_OK, w);
        }
        note_in_flight(chief, 4, "(a) the training state is freed");
        ckpt_training_free(t);
        ckpt_saver_free(s);
        unsetenv("MPICKPT_ASYNC");
        tm_free(&m);
        MPI_Barrier(MPI_COMM_WORLD);
        check_kept_two(chief, 4, "(a) chief/");
        static const char *const allow_chief[] = { "chief", NULL };
        check_dir_clean(dir, allow_chief, "(a) training dir");
        if (g_rank == 0) {
            int n = async_metric_lines(chief);
            CHECK_MSG(n == 4, "(a) %d async saves in metrics.jsonl, want 4 (MPICKPT_ASYNC=1)", n);
        }
        check_restores(chief, 4, 4, kib, "(a)");
    }

    /* (b) */
    snprintf(dir, sizeof dir, "%s/b", g_out);
    begin_case("async_lifetime (b): the saver freed first, then the manager (%d ranks)", g_size);
    {
        tm_model m;
        model_init(&m, g_size, g_rank, kib);
        ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 1, 0);
        register_or_die(&m, s);
        ckpt_manager *mg = new_manager(s, MPI_COMM_WORLD, dir, 2, 0);
        for (int e = 1; e <= 4; e++) {
            tm_fill(&m, e);
            ckpt_manager_save_info info = { e, e, 1, 1 };
            char w[64];
            snprintf(w, sizeof w, "(b) save %d", e);
            coll(ckpt_manager_save(mg, &info, NULL, 0), CKPT_OK, w);
        }
        note_in_flight(dir, 4, "(b) the saver is freed");
        ckpt_saver_free(s);
        ckpt_manager_free(mg);
        tm_free(&m);
        MPI_Barrier(MPI_COMM_WORLD);
        check_kept_two(dir, 4, "(b)");
        check_restores(dir, 4, 4, kib, "(b)");
    }

    /* (c) */
    snprintf(dir, sizeof dir, "%s/c", g_out);
    begin_case("async_lifetime (c): close times out with a save in flight, then the manager is "
               "freed (%d ranks)", g_size);
    {
        tm_model *m = &g_leaked_model;
        model_init(m, g_size, g_rank, 4 * kib);
        ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 1, 0.001);
        register_or_die(m, s);
        ckpt_manager *mg = new_manager(s, MPI_COMM_WORLD, dir, 2, 0);
        tm_fill(m, 1);
        ckpt_manager_save_info info = { 1, 1, 1, 1 };
        coll(ckpt_manager_save(mg, &info, NULL, 0), CKPT_OK, "(c) save 1");
        coll(ckpt_saver_sync(s), CKPT_OK, "(c) sync 1");
        tm_fill(m, 2);
        info.epoch = info.step = 2;
        long before[MAX_THREADS], started[MAX_THREADS];
        int nbefore = thread_ids(before, MAX_THREADS);
        int rc = ckpt_manager_save(mg, &info, NULL, 0);
        int nstarted = threads_started(started, before, nbefore);
        coll(rc, CKPT_OK, "(c) save 2 (async, 32 MiB per rank)");
        rc = ckpt_saver_close(s);
        if (rc == CKPT_ETIMEDOUT)
            g_leaked = s; /* saver.h: not freed, the writer thread still uses it */
        /* saver.h: CKPT_ETIMEDOUT when the save is still running at the timeout */
        coll(rc, CKPT_ETIMEDOUT, "(c) close with a 1 ms timeout");
        /* the manager whose save is in flight: whatever happens to it, no crash, no use after
         * free (ASan), and it must not commit the abandoned save */
        ckpt_manager_free(mg);
        wait_threads_gone(started, nstarted, "(c)");
        char p[2400];
        snprintf(p, sizeof p, "%s/ckpt-2", dir);
        CHECK_MSG(!index_exists(p), "(c) the abandoned save was committed: %s.index", p);
        if (g_rank == 0) {
            ckpt_state *st = NULL;
            CHECK_OK(ckpt_state_read(&st, dir));
            CHECK_MSG(st && strcmp(st->latest, "ckpt-1") == 0 && st->num_entries == 1,
                      "(c) the state file's latest is \"%s\" (%zu entries), want ckpt-1 alone",
                      st ? st->latest : "", st ? st->num_entries : 0);
            ckpt_state_free(st);
        }
        check_dir_clean(dir, DIR_STATE, "(c) after the abandoned save");
        check_restores(dir, 1, 1, 4 * kib, "(c)");
        if (!g_leaked)
            tm_free(m);
    }
}

/* ======================================================================================== */
/* 3. enospc_sync                                                                            */

static int g_skipped; /* the case could not run here: exit 77 */

static void case_enospc_sync(ckpt_layout layout, const char *layout_name, int reserve)
{
    if (!reserve)
        setenv("MPICKPT_RESERVE", "0", 1); /* decided at ckpt_saver_create */
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/enospc", g_out);
    snprintf(g_mnt, sizeof g_mnt, "%s/mnt", dir);
    make_dir(g_mnt);
    const int64_t kib_per_rank = 2048;
    /* One checkpoint is about 2 MiB per rank: 3.5 MiB per rank holds one (and the reservation of
     * its bytes + 1 MiB + 1/64 per rank, or HDF5's metadata pad), not two. */
    long size_kib = (long)g_size * 3584 + 128;
    begin_case("enospc_sync (%s, %s): mount a %ld KiB tmpfs (%d ranks)", layout_name,
               reserve ? "reservation on" : "MPICKPT_RESERVE=0", size_kib, g_size);
    char cmd[4800], reason[600];
    tmpfs_mount(g_rank, size_kib, reason, sizeof reason);
    if (reason[0]) {
        if (g_rank == 0)
            printf("SKIP enospc_sync: cannot mount a tmpfs: %s\n", reason);
        g_skipped = 1;
        return;
    }

    char ck1[2600], ck2[2600], name[4400];
    snprintf(ck1, sizeof ck1, "%s/ckpt-1", g_mnt);
    snprintf(ck2, sizeof ck2, "%s/ckpt-2", g_mnt);
    tm_model m;
    model_init(&m, g_size, g_rank, kib_per_rank);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, layout, 0, 0);
    register_or_die(&m, s);
    ckpt_manager *mg = new_manager(s, MPI_COMM_WORLD, g_mnt, 0, 0);

    begin_case("enospc_sync: the first checkpoint fits");
    tm_fill(&m, 1);
    ckpt_manager_save_info info = { 1, 1, 1, 1 };
    name[0] = '\0';
    coll(ckpt_manager_save(mg, &info, name, sizeof name), CKPT_OK, "save ckpt-1");
    CHECK_MSG(strcmp(name, ck1) == 0, "saved \"%s\", want \"%s\"", name, ck1);
    CHECK_MSG(index_exists(ck1), "%s.index is missing", ck1);
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t used1 = fs_used(g_mnt);

    /* a collective that one rank skips after its error hangs the others: fail fast */
    check_watchdog_s = 60;
    begin_case("enospc_sync: the second does not fit");
    tm_fill(&m, 2);
    info.epoch = info.step = 2;
    name[0] = '\0';
    int rc = ckpt_manager_save(mg, &info, name, sizeof name);
    int v[2] = { rc, -rc }, r[2];
    MPI_Allreduce(v, r, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int expected = (r[0] == -r[1] && rc == CKPT_EIO) ? CKPT_EIO : CKPT_ENOSPC;
    if (coll(rc, expected, "save ckpt-2 on a full file system")) {
        CHECK_MSG(rc == CKPT_ENOSPC || contains_ci(g_msg, "no space"),
                  "CKPT_EIO without the no-space cause in the message: %s", g_msg);
        if (g_rank == 0 && rc != CKPT_ENOSPC)
            printf("  NOTE: the full disk is reported as %s, not CKPT_ENOSPC\n",
                   ckpt_strerror(rc));
    }
    CHECK_MSG(!index_exists(ck2), "the failed save committed %s", ck2);
    char latest[4400] = "";
    CHECK_OK(ckpt_manager_latest(mg, latest, sizeof latest));
    CHECK_MSG(strcmp(latest, ck1) == 0, "the manager's latest is \"%s\", want \"%s\"", latest,
              ck1);
    CHECK_EQ_INT(ckpt_saver_counter(s), 1);
    if (g_rank == 0) {
        ckpt_state *st = NULL;
        CHECK_OK(ckpt_state_read(&st, g_mnt));
        CHECK_MSG(st && strcmp(st->latest, "ckpt-1") == 0 && st->num_entries == 1,
                  "the state file's latest is \"%s\" (%zu entries), want ckpt-1 alone",
                  st ? st->latest : "", st ? st->num_entries : 0);
        ckpt_state_free(st);
    }
    check_dir_clean(g_mnt, DIR_STATE, "after the failed save");
    if (g_rank == 0) {
        /* the failed save's files are gone, and so must be the space they took (a file unlinked
         * but still open, or a reservation or pad not given back, would hold it) */
        uint64_t used2 = fs_used(g_mnt);
        printf("  tmpfs in use: %llu KiB after ckpt-1, %llu KiB after the failed save\n",
               (unsigned long long)(used1 >> 10), (unsigned long long)(used2 >> 10));
        CHECK_MSG(used2 <= used1 + 64 * 1024,
                  "the failed save still holds %llu KiB of the full file system",
                  (unsigned long long)((used2 - used1) >> 10));
    }
    tm_sentinel(&m);
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, "restore after the failure")) {
        CHECK_MSG(res.restored == 1 && strcmp(res.prefix, ck1) == 0 && res.skipped == 0,
                  "restored %d \"%s\" (skipped %d), want %s", res.restored, res.prefix,
                  res.skipped, ck1);
        check_values(&m, 1, TM_RESTORED, "ckpt-1 after the failed save");
    }

    begin_case("enospc_sync: room again");
    snprintf(cmd, sizeof cmd, "mount -o remount,size=%ldk '%s'", size_kib * 4, g_mnt);
    rc = rank0_system(g_rank, cmd);
    CHECK_MSG(rc == 0, "'%s' failed (%d)", cmd, rc);
    tm_fill(&m, 3);
    info.epoch = info.step = 3;
    name[0] = '\0';
    coll(ckpt_manager_save(mg, &info, name, sizeof name), CKPT_OK, "save with room");
    CHECK_MSG(strcmp(name, ck2) == 0, "saved \"%s\", want \"%s\"", name, ck2);
    CHECK_MSG(index_exists(ck2), "%s.index is missing", ck2);
    check_dir_clean(g_mnt, DIR_STATE, "after the save with room");
    if (g_rank == 0) {
        size_t removed = 99;
        CHECK_OK(ckpt_gc(g_mnt, 1, NULL, NULL, &removed));
        CHECK_MSG(removed == 0, "gc --dry-run would remove %zu path(s)", removed);
    }
    tm_sentinel(&m);
    res = (ckpt_manager_restore_result)CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, "restore ckpt-2")) {
        CHECK_MSG(res.restored == 1 && strcmp(res.prefix, ck2) == 0,
                  "restored %d \"%s\", want %s", res.restored, res.prefix, ck2);
        check_values(&m, 3, TM_RESTORED, "ckpt-2");
    }
    ckpt_manager_free(mg);
    coll(ckpt_saver_close(s), CKPT_OK, "close");
    tm_free(&m);
    unsetenv("MPICKPT_RESERVE");
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        umount_at_exit();
        CHECK_MSG(!is_mounted(g_mnt), "%s is still mounted", g_mnt);
    }
}

/* ======================================================================================== */
/* 4. settings                                                                               */

/* ======================================================================================== */
/* 6. dir: a checkpoint directory others can write to                                        */

/* Rank 0 writes `text` to `path` (a victim's file). */
static void put_text(const char *path, const char *text)
{
    if (g_rank == 0) {
        FILE *f = fopen(path, "w");
        CHECK_MSG(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* 1 when `path` holds exactly `text` (rank 0's view, broadcast). */
static int has_text(const char *path, const char *text)
{
    int ok = 0;
    if (g_rank == 0) {
        char buf[512] = "";
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        ok = f && strcmp(buf, text) == 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok;
}

/* Number of entries of directory `dir` (rank 0's view, broadcast), -1 when it cannot be read. */
static int entries(const char *dir)
{
    int n = -1;
    if (g_rank == 0) {
        DIR *d = opendir(dir);
        if (d) {
            n = 0;
            struct dirent *e;
            while ((e = readdir(d)) != NULL)
                n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
            closedir(d);
        }
    }
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return n;
}

/* Rank 0 runs `fn` on `path` (symlink, mkfifo, unlink); collective. */
static void rank0_link(const char *target, const char *path)
{
    if (g_rank == 0) {
        unlink(path);
        CHECK_MSG(symlink(target, path) == 0, "symlink %s -> %s: %s", path, target, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void rank0_fifo(const char *path)
{
    if (g_rank == 0) {
        unlink(path);
        CHECK_MSG(mkfifo(path, 0644) == 0, "mkfifo %s: %s", path, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void rank0_unlink(const char *path)
{
    if (g_rank == 0)
        CHECK_MSG(unlink(path) == 0 || errno == ENOENT, "unlink %s: %s", path, strerror(errno));
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A manager save of step `step`, expecting `expected`. */
static int mgr_save(ckpt_manager *mg, tm_model *m, int64_t step, int expected, const char *what)
{
    tm_fill(m, step);
    ckpt_manager_save_info si = { 0, step, 0, 1 };
    char out[4400] = "";
    return coll(ckpt_manager_save(mg, &si, out, sizeof out), expected, what);
}

/* Restores the latest through the manager: it must be `counter` with step `step`. */
static void mgr_restore(ckpt_manager *mg, tm_model *m, int64_t counter, int64_t step, int skipped,
                        const char *what)
{
    tm_sentinel(m);
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(ckpt_manager_restore_latest(&r, mg), CKPT_OK, what)) {
        CHECK_MSG(r.restored && r.save_counter == counter && r.step == step && r.skipped == skipped,
                  "%s: restored %d counter %lld step %lld skipped %d, want counter %lld step %lld "
                  "skipped %d",
                  what, r.restored, (long long)r.save_counter, (long long)r.step, r.skipped,
                  (long long)counter, (long long)step, skipped);
        if (r.restored)
            check_values(m, step, TM_RESTORED, what);
    }
}

/* Writes a state file into `dir` with the given entries (counters, prefixes "ckpt-<c>"), listing
 * `latest` as the latest, bypassing the library's checks (as someone else's tool would). */
static void write_raw_state(const char *dir, const int64_t *counters, int n, const char *latest,
                            int64_t save_counter)
{
    if (g_rank == 0) {
        ckpt_state *st = NULL;
        CHECK_OK(ckpt_state_new(&st));
        for (int i = 0; st && i < n; i++) {
            ckpt_state_entry e;
            memset(&e, 0, sizeof e);
            snprintf(e.prefix, sizeof e.prefix, "ckpt-%lld", (long long)counters[i]);
            e.save_counter = counters[i];
            e.step = counters[i] * 10;
            e.timestamp = 1.0e9 + (double)i;
            CHECK_OK(ckpt_state_append(st, &e));
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        if (st) {
            snprintf(st->latest, sizeof st->latest, "%s", latest);
            st->save_counter = save_counter;
            CHECK_OK(ckpt__state_pack(&buf, &len, st, 1));
        }
        char p[4400];
        snprintf(p, sizeof p, "%s/checkpoint", dir);
        FILE *f = fopen(p, "wb");
        CHECK_MSG(f && fwrite(buf, 1, len, f) == len && fclose(f) == 0, "cannot write %s", p);
        free(buf);
        ckpt_state_free(st);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void case_dir(ckpt_layout layout, const char *layout_name)
{
    char dir[2400], victim[2400], vfile[2600], p[2800], q[2800], prefix[2600], what[256];
    snprintf(dir, sizeof dir, "%s/dir_%s", g_out, layout_name);
    snprintf(victim, sizeof victim, "%s/victim_%s", g_out, layout_name);
    snprintf(vfile, sizeof vfile, "%s/victim.txt", victim);
    make_dir(dir);
    make_dir(victim);
    put_text(vfile, "the victim's own bytes\n");
    tm_model m;
    model_init(&m, g_size, g_rank, 4);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, layout, 0, 0);
    register_or_die(&m, s);
    ckpt_save_info info = { 0, 1, 0 };
    snprintf(prefix, sizeof prefix, "%s/ck", dir);

    /* planted workertemp_<r> (the temp dir older versions gave a non-chief rank that makes a
     * data file: rank 1, or per-node the leader of node 1) and <base>_temp (the chief's) as links
     * to a victim directory: a save's in-flight names are its own now (<base>.<id>_temp,
     * workertemp_<r>.<id>, issue 29), so the save commits without touching or following them */
    int rpn = tm_ranks_per_node(), wr = layout == CKPT_LAYOUT_PER_RANK ? 1
                                        : layout == CKPT_LAYOUT_PER_NODE && rpn > 0 ? rpn
                                                                                  : g_size;
    char wt[64], tp[2800];
    snprintf(wt, sizeof wt, "workertemp_%d", wr);
    begin_case("dir %s: %s and ck-1_temp are links to a victim directory", layout_name, wt);
    snprintf(p, sizeof p, "%s/%s", dir, wt);
    if (wr < g_size)
        rank0_link(victim, p);
    snprintf(tp, sizeof tp, "%s-1_temp", prefix);
    rank0_link(victim, tp);
    tm_fill(&m, 1);
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "save next to planted links");
    CHECK_MSG(entries(victim) == 1 && has_text(vfile, "the victim's own bytes\n"),
              "the victim directory changed");
    if (g_rank == 0) {
        char t[2800];
        ssize_t n = readlink(tp, t, sizeof t - 1);
        CHECK_MSG(n > 0 && (size_t)n == strlen(victim) && memcmp(t, victim, (size_t)n) == 0,
                  "%s is no longer the planted link", tp);
        n = wr < g_size ? readlink(p, t, sizeof t - 1) : 0;
        CHECK_MSG(wr >= g_size || (n > 0 && (size_t)n == strlen(victim)),
                  "%s is no longer the planted link", p);
    }
    snprintf(q, sizeof q, "%s-1", prefix);
    tm_sentinel(&m);
    if (coll(ckpt_saver_restore(s, q, NULL, NULL), CKPT_OK, "restore ck-1"))
        check_values(&m, 1, TM_RESTORED, "ck-1");
    if (wr < g_size)
        rank0_unlink(p);
    rank0_unlink(tp);

    /* links under the data files' final names: never replaced nor written through (issue 29:
     * the commit takes only a free name), CKPT_EEXISTS naming one, nothing committed; the next
     * numbered save moves past ck-2 and commits ck-3, with a link under metrics.jsonl (left,
     * never written through) */
    begin_case("dir %s: links planted under the final names", layout_name);
    int nfiles = tm_data_files(layout, g_size);
    for (int r = 0; r < nfiles; r++) {
        snprintf(p, sizeof p, "%s-2.data-%05d-of-%05d", prefix, r, nfiles);
        rank0_link(vfile, p);
    }
    snprintf(q, sizeof q, "%s/metrics.jsonl", dir);
    rank0_link(vfile, q);
    info.step = 2;
    tm_fill(&m, 2);
    if (coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_EEXISTS, "save with planted links"))
        CHECK_MSG(strstr(g_msg, "ck-2.data-") && contains_ci(g_msg, "symbolic link"),
                  "the message does not name a data file as a link: %s", g_msg);
    CHECK_MSG(entries(victim) == 1 && has_text(vfile, "the victim's own bytes\n"),
              "the victim file changed");
    snprintf(p, sizeof p, "%s-2", prefix);
    CHECK_MSG(all_true(!index_exists(p)), "%s was committed", p);
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "the next save, past ck-2");
    CHECK_MSG(entries(victim) == 1 && has_text(vfile, "the victim's own bytes\n"),
              "the victim file changed");
    for (int r = 0; r < nfiles; r++) {
        struct stat st;
        snprintf(p, sizeof p, "%s-2.data-%05d-of-%05d", prefix, r, nfiles);
        CHECK_MSG(g_rank != 0 || (lstat(p, &st) == 0 && S_ISLNK(st.st_mode)),
                  "%s is not the planted link", p);
        rank0_unlink(p);
    }
    snprintf(p, sizeof p, "%s-3", prefix);
    tm_sentinel(&m);
    if (coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_OK, "restore ck-3"))
        check_values(&m, 2, TM_RESTORED, "ck-3");
    /* a FIFO metrics.jsonl: the save does not block on it (the watchdog would fire) */
    rank0_fifo(q);
    info.step = 3;
    tm_fill(&m, 3);
    coll(ckpt_saver_save(s, prefix, &info, NULL, 0), CKPT_OK, "save with a FIFO metrics.jsonl");
    rank0_unlink(q);
    ckpt_saver_free(s);

    /* a chief/ that is a link */
    begin_case("dir %s: chief/ is a link", layout_name);
    snprintf(p, sizeof p, "%s/work", dir);
    make_dir(p);
    snprintf(q, sizeof q, "%s/chief", p);
    rank0_link(victim, q);
    s = new_saver_on(MPI_COMM_WORLD, layout, 0, 0);
    register_or_die(&m, s);
    ckpt_training *t = NULL;
    if (coll(ckpt_training_create(&t, s, p, NULL), CKPT_ECORRUPT, "training state over a linked "
                                                                  "chief/"))
        CHECK_MSG(strstr(g_msg, "chief") && contains_ci(g_msg, "link"),
                  "the message does not name chief as a link: %s", g_msg);
    ckpt_training_free(t);
    CHECK_MSG(entries(victim) == 1, "the victim directory changed");

    /* a manager's directory: FIFO state file, FIFO latest index. Each directory gets a saver of
     * its own: the manager numbers past the saver's counter too. */
    begin_case("dir %s: FIFOs in place of the state file and the latest index", layout_name);
    char md[2600];
    snprintf(md, sizeof md, "%s/mgr", dir);
    ckpt_saver_free(s);
    s = new_saver_on(MPI_COMM_WORLD, layout, 0, 0);
    register_or_die(&m, s);
    ckpt_manager *mg = new_manager(s, MPI_COMM_WORLD, md, 0, 0);
    for (int64_t k = 1; k <= 3; k++)
        mgr_save(mg, &m, k * 10, CKPT_OK, "manager save");
    ckpt_manager_free(mg);
    snprintf(p, sizeof p, "%s/checkpoint", md);
    snprintf(q, sizeof q, "%s/kept-state", md);
    if (g_rank == 0)
        CHECK_MSG(rename(p, q) == 0, "rename %s: %s", p, strerror(errno));
    rank0_fifo(p);
    g_nlogs = 0;
    mg = new_manager(s, MPI_COMM_WORLD, md, 0, 0);
    static const char *const fifo_state[] = { "checkpoint", "FIFO", NULL };
    CHECK_MSG(g_rank != 0 || logs_find(fifo_state), "no warning names the FIFO state file");
    mgr_restore(mg, &m, 3, 30, 0, "restore with a FIFO state file");
    ckpt_manager_free(mg);
    /* the valid state file back (it lists ckpt-3), ckpt-3's index a FIFO */
    if (g_rank == 0)
        CHECK_MSG(unlink(p) == 0 && rename(q, p) == 0, "cannot put the state file back");
    snprintf(q, sizeof q, "%s/ckpt-3.index", md);
    rank0_fifo(q);
    mg = new_manager(s, MPI_COMM_WORLD, md, 0, 0);
    mgr_restore(mg, &m, 2, 20, 1, "restore past a FIFO latest index");
    ckpt_manager_free(mg);
    rank0_unlink(q);

    /* stray indexes next to a valid state file: not looked at */
    begin_case("dir %s: stray indexes", layout_name);
    char sd[2600];
    snprintf(sd, sizeof sd, "%s/stray", dir);
    ckpt_saver_free(s);
    s = new_saver_on(MPI_COMM_WORLD, layout, 0, 0);
    register_or_die(&m, s);
    mg = new_manager(s, MPI_COMM_WORLD, sd, 0, 0);
    mgr_save(mg, &m, 10, CKPT_OK, "stray: ckpt-1");
    mgr_save(mg, &m, 20, CKPT_OK, "stray: ckpt-2");
    ckpt_manager_free(mg);
    snprintf(p, sizeof p, "%s/zz-stray.index", sd);
    rank0_fifo(p);
    snprintf(p, sizeof p, "%s/.index", sd);
    put_text(p, "not an index");
    snprintf(p, sizeof p, "%s/garbage name.index", sd);
    put_text(p, "MPCKIDX\001 and then nothing");
    g_nlogs = 0;
    mg = new_manager(s, MPI_COMM_WORLD, sd, 0, 0);
    CHECK_MSG(g_nlogs == 0, "a valid state file: %d warning(s), the first: %s", g_nlogs,
              g_nlogs ? g_logs[0] : "");
    mgr_restore(mg, &m, 2, 20, 0, "stray: restore with a valid state file");
    mgr_save(mg, &m, 30, CKPT_OK, "stray: ckpt-3");
    ckpt_manager_free(mg);
    snprintf(p, sizeof p, "%s/checkpoint", sd);
    rank0_unlink(p);
    g_nlogs = 0;
    mg = new_manager(s, MPI_COMM_WORLD, sd, 0, 0);
    static const char *const w1[] = { "zz-stray.index", NULL }, *const w2[] = { "/.index", NULL },
                             *const w3[] = { "garbage name.index", NULL };
    CHECK_MSG(g_rank != 0 || (logs_find(w1) && logs_find(w2) && logs_find(w3)),
              "without a state file: a warning per stray index expected (%d warnings)", g_nlogs);
    mgr_restore(mg, &m, 3, 30, 0, "stray: restore without a state file");
    ckpt_manager_free(mg);

    /* state files that lie */
    static const struct {
        const char *name;
        int64_t counters[4];
        int n;
        const char *latest;
        int64_t save_counter;
    } lies[] = {
        { "the latest listed twice", { 1, 2, 2 }, 3, "ckpt-2", 2 },
        { "a negative counter", { -4, 2 }, 2, "ckpt-2", 2 },
        { "a counter at INT64_MAX", { 1, 2 }, 2, "ckpt-2", INT64_MAX },
        { "out of order", { 2, 1 }, 2, "ckpt-1", 2 },
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        begin_case("dir %s: a state file with %s", layout_name, lies[i].name);
        char ld[2600];
        snprintf(ld, sizeof ld, "%s/lie%zu", dir, i);
        ckpt_saver_free(s);
        s = new_saver_on(MPI_COMM_WORLD, layout, 0, 0);
        register_or_die(&m, s);
        mg = new_manager(s, MPI_COMM_WORLD, ld, 2, 0);
        mgr_save(mg, &m, 10, CKPT_OK, "lie: ckpt-1");
        mgr_save(mg, &m, 20, CKPT_OK, "lie: ckpt-2");
        ckpt_manager_free(mg);
        write_raw_state(ld, lies[i].counters, lies[i].n, lies[i].latest, lies[i].save_counter);
        g_nlogs = 0;
        mg = new_manager(s, MPI_COMM_WORLD, ld, 2, 0);
        static const char *const rebuilt[] = { "rebuilt", NULL };
        CHECK_MSG(g_rank != 0 || logs_find(rebuilt), "%s: no warning that the list was rebuilt",
                  lies[i].name);
        snprintf(what, sizeof what, "%s: the save after", lies[i].name);
        mgr_save(mg, &m, 30, CKPT_OK, what);
        /* retention (max_to_keep 2) kept exactly ckpt-2 and ckpt-3, both restorable */
        const ckpt_state *st = test_manager_state(mg);
        CHECK_MSG(st && st->num_entries == 2 && strcmp(st->entries[0].prefix, "ckpt-2") == 0 &&
                      strcmp(st->entries[1].prefix, "ckpt-3") == 0 &&
                      strcmp(st->latest, "ckpt-3") == 0,
                  "%s: the state lists %zu entries, latest %s", lies[i].name,
                  st ? st->num_entries : 0, st ? st->latest : "?");
        CHECK_MSG(all_true(count_indexes(ld, "ckpt") == 2 || g_rank != 0),
                  "%s: %d indexes on disk, want 2", lies[i].name, count_indexes(ld, "ckpt"));
        snprintf(p, sizeof p, "%s/ckpt-2", ld);
        tm_sentinel(&m);
        if (coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_OK, "restore ckpt-2"))
            check_values(&m, 20, TM_RESTORED, "ckpt-2 after retention");
        mgr_restore(mg, &m, 3, 30, 0, what);
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);
    tm_free(&m);
}

static const char *const g_vars[] = { "MPICKPT_LAYOUT",     "MPICKPT_ASYNC", "MPICKPT_RESERVE",
                                      "MPICKPT_PACK_BYTES", "MPICKPT_FAULT", "MPICKPT_LOG",
                                      "MPICKPT_HIER_MERGE", NULL };

static void unset_all(void)
{
    for (const char *const *v = g_vars; *v; v++)
        unsetenv(*v);
}

/* Closes a saver that every rank has (a collective call); a saver only some ranks got (a failed
 * agreement, already reported) is left alone rather than hang the others. */
static void close_if_all(ckpt_saver *s, const char *what)
{
    if (all_true(s != NULL)) {
        char w[600];
        snprintf(w, sizeof w, "%s: close", what);
        coll(ckpt_saver_close(s), CKPT_OK, w);
    }
}

/* `var`=`val` on every rank (only_rank < 0) or on rank `only_rank`: ckpt_saver_create fails with
 * CKPT_EINVAL on every rank, the message naming the variable and the value. */
static void settings_bad(const char *var, const char *val, int only_rank)
{
    char what[512];
    if (only_rank >= 0)
        snprintf(what, sizeof what, "%s='%s' on rank %d only", var, val, only_rank);
    else
        snprintf(what, sizeof what, "%s='%s' on every rank", var, val);
    begin_case("settings: %s (%d ranks)", what, g_size);
    if (only_rank < 0 || g_rank == only_rank)
        setenv(var, val, 1);
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, NULL);
    unsetenv(var);
    if (coll(rc, CKPT_EINVAL, what)) {
        CHECK_MSG(strstr(g_msg, var) != NULL && strstr(g_msg, val) != NULL,
                  "%s: the message does not name the variable and the value: %s", what, g_msg);
        if (only_rank >= 0) {
            char r[32];
            snprintf(r, sizeof r, "rank %d", only_rank);
            CHECK_MSG(strstr(g_msg, r) != NULL, "%s: the message does not name %s: %s", what, r,
                      g_msg);
        }
    }
    CHECK_MSG(rc == CKPT_OK || s == NULL, "%s: a failed create left *out set", what);
    close_if_all(s, what);
}

/* The checkpoint at `prefix`, seen by this rank: its layout and data files, and whether its
 * tensor pieces are packed (1 all, 0 none, -1 mixed). Returns the number of problems. */
static int check_written(const char *prefix, ckpt_layout want_layout, int want_packed,
                         const char *what)
{
    int bad = 0;
    ckpt_reader *rd = NULL;
    int rc = ckpt_reader_open(&rd, prefix);
    CHECK_MSG(rc == CKPT_OK, "%s: ckpt_reader_open(%s): %s", what, prefix,
              rc ? ckpt_error_last()->message : "");
    if (rc != CKPT_OK)
        return 1;
    const ckpt_header *h = ckpt_reader_header(rd);
    if (h->layout != want_layout || h->world_size != g_size) {
        bad++;
        CHECK_MSG(0, "%s: the index says layout %s, %d ranks; want %s (rank 0's), %d", what,
                  ckpt_layout_name(h->layout), (int)h->world_size, ckpt_layout_name(want_layout),
                  g_size);
    }
    /* the data files the layout makes */
    int nfiles = tm_data_files(want_layout, g_size);
    for (int f = 0; f < g_size || f < 2; f++) {
        char p[4400];
        snprintf(p, sizeof p, "%s.data-%05d-of-%05d", prefix, f, nfiles);
        int want = f < nfiles;
        if (exists(p) != want) {
            bad++;
            CHECK_MSG(0, "%s: %s %s", what, p, want ? "is missing" : "exists");
        }
    }
    if (want_layout != CKPT_LAYOUT_PER_RANK && nfiles != g_size) {
        char p[4400];
        snprintf(p, sizeof p, "%s.data-%05d-of-%05d", prefix, 0, g_size);
        if (exists(p)) {
            bad++;
            CHECK_MSG(0, "%s: a per-rank data file exists: %s", what, p);
        }
    }
    if (want_packed >= 0) {
        int packed_n = 0, plain_n = 0;
        for (size_t i = 0; i < ckpt_reader_num_tensors(rd); i++) {
            ckpt_tensor_info t;
            if (ckpt_reader_tensor(&t, rd, i) != CKPT_OK || t.kind == CKPT_KIND_BLOB)
                continue;
            for (size_t j = 0; j < t.num_pieces; j++) {
                int packed = 0;
                uint64_t off = 0;
                if (ckpt_reader_piece_packing(&packed, &off, rd, i, j) == CKPT_OK) {
                    packed_n += packed != 0;
                    plain_n += packed == 0;
                }
            }
        }
        int got = packed_n && plain_n ? -1 : packed_n ? 1 : 0;
        if (got != want_packed) {
            bad++;
            CHECK_MSG(0, "%s: %d pieces packed and %d not; want %s (rank 0's MPICKPT_PACK_BYTES)",
                      what, packed_n, plain_n, want_packed ? "all packed" : "none packed");
        }
    }
    ckpt_reader_free(rd);
    return bad;
}

/* Rank 0 has MPICKPT_<var>=v0 (NULL: unset), rank 1 v1: the save follows rank 0. */
static void settings_divergent(const char *var, const char *v0, const char *v1,
                               ckpt_layout opt_layout, ckpt_layout want_layout, int want_packed,
                               int idx)
{
    char what[512], prefix[2400];
    snprintf(what, sizeof what, "%s divergent: rank 0 %s, rank 1 %s", var, v0 ? v0 : "(unset)",
             v1);
    begin_case("settings: %s (%d ranks)", what, g_size);
    snprintf(prefix, sizeof prefix, "%s/settings/divergent%d", g_out, idx);
    if (g_rank == 0 && v0)
        setenv(var, v0, 1);
    if (g_rank == 1)
        setenv(var, v1, 1);
    g_nlogs = 0;
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = opt_layout;
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, &o);
    unsetenv(var);
    if (!coll(rc, CKPT_OK, what)) {
        close_if_all(s, what);
        return;
    }
    tm_model m;
    model_init(&m, g_size, g_rank, 0);
    register_or_die(&m, s);
    tm_fill(&m, 5);
    ckpt_save_info info = { 5, 5, 1 };
    char w[700];
    snprintf(w, sizeof w, "%s: write", what);
    if (coll(ckpt_saver_write(s, prefix, &info), CKPT_OK, w)) {
        /* nodes of rank 0's MPICKPT_RANKS_PER_NODE: what tm_data_files() reads */
        if (strcmp(var, "MPICKPT_RANKS_PER_NODE") == 0 && v0)
            setenv(var, v0, 1);
        check_written(prefix, want_layout, want_packed, what);
        unsetenv("MPICKPT_RANKS_PER_NODE");
        if (g_rank == 1) {
            static const char *const words[] = { "rank 0", NULL };
            CHECK_MSG(logs_find(words) != NULL,
                      "%s: rank 1 logged no warning that it follows rank 0's setting", what);
        }
        tm_sentinel(&m);
        snprintf(w, sizeof w, "%s: restore", what);
        if (coll(ckpt_saver_restore(s, prefix, NULL, NULL), CKPT_OK, w))
            check_values(&m, 5, TM_RESTORED, w);
    }
    close_if_all(s, what);
    tm_free(&m);
}

/* ckpt_saver_options that differ on the last rank: CKPT_EMISMATCH on every rank. */
static void settings_options_differ(int field)
{
    const char *fname = field == 0 ? "layout" : "max_shard_bytes";
    char what[256];
    snprintf(what, sizeof what, "ckpt_saver_options.%s differs on rank %d", fname, g_size - 1);
    begin_case("settings: %s", what);
    ckpt_saver_options o = CKPT_SAVER_OPTIONS_INIT;
    o.layout = CKPT_LAYOUT_PER_RANK;
    if (g_rank == g_size - 1) {
        if (field == 0)
            o.layout = CKPT_LAYOUT_SHARED;
        else
            o.max_shard_bytes = 4096;
    }
    ckpt_saver *s = NULL;
    int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, &o);
    if (coll(rc, CKPT_EMISMATCH, what))
        CHECK_MSG(strstr(g_msg, fname) != NULL, "%s: the message does not name %s: %s", what,
                  fname, g_msg);
    close_if_all(s, what);
}

static void case_settings(void)
{
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/settings", g_out);
    make_dir(dir);
    /* the nodes of the per-node cases are set below (MPICKPT_RANKS_PER_NODE is left set for the
     * other cases of this program: their per-node runs use it) */
    unsetenv("MPICKPT_RANKS_PER_NODE");
    static const char *const bad[][2] = {
        { "MPICKPT_LAYOUT", "sharde" },   { "MPICKPT_ASYNC", "maybe" },
        { "MPICKPT_RESERVE", "2" },       { "MPICKPT_PACK_BYTES", "12x" },
        { "MPICKPT_PACK_BYTES", "-5" },   { "MPICKPT_FAULT", "1:wrtie" },
        { "MPICKPT_FAULT", "x:write" },   { "MPICKPT_LOG", "verbose" },
        { "MPICKPT_RANKS_PER_NODE", "0" }, { "MPICKPT_RANKS_PER_NODE", "two" },
        { "MPICKPT_LAYOUT", "pernode" },  { "MPICKPT_HIER_MERGE", "yes please" },
        /* integers with anything around them (issue 29: ' 3' was read as 3) */
        { "MPICKPT_PACK_BYTES", " 4096" }, { "MPICKPT_PACK_BYTES", "4096 " },
        { "MPICKPT_PACK_BYTES", "+4096" }, { "MPICKPT_RANKS_PER_NODE", "2\n" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        settings_bad(bad[i][0], bad[i][1], -1);
    if (g_size >= 2) {
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            settings_bad(bad[i][0], bad[i][1], 1);
        /* layout from the environment (options leave it unset) */
        settings_divergent("MPICKPT_LAYOUT", "per-rank", "shared", CKPT_LAYOUT_UNKNOWN,
                           CKPT_LAYOUT_PER_RANK, -1, 1);
        /* rank 0's environment unset: the default layout, per-rank when every rank is on one
         * node, else per-node (issue 30) */
        MPI_Comm nodes;
        int on_node = 0, one_node = 0;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &nodes);
        MPI_Comm_size(nodes, &on_node);
        MPI_Comm_free(&nodes);
        on_node = on_node == g_size;
        MPI_Allreduce(&on_node, &one_node, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        settings_divergent("MPICKPT_LAYOUT", NULL, "shared", CKPT_LAYOUT_UNKNOWN,
                           one_node ? CKPT_LAYOUT_PER_RANK : CKPT_LAYOUT_PER_NODE, -1, 2);
        settings_divergent("MPICKPT_LAYOUT", "shared", "per-rank", CKPT_LAYOUT_UNKNOWN,
                           CKPT_LAYOUT_SHARED, -1, 3);
        /* packing (per-rank layout): rank 0 never packs, rank 1 would, and the other way */
        settings_divergent("MPICKPT_PACK_BYTES", "0", "1048576", CKPT_LAYOUT_PER_RANK,
                           CKPT_LAYOUT_PER_RANK, 0, 4);
        settings_divergent("MPICKPT_PACK_BYTES", "1048576", "0", CKPT_LAYOUT_PER_RANK,
                           CKPT_LAYOUT_PER_RANK, 1, 5);
        /* per-node: the layout, and the nodes (rank 0: nodes of 1 rank; rank 1: of 2) */
        settings_divergent("MPICKPT_LAYOUT", "per-node", "per-rank", CKPT_LAYOUT_UNKNOWN,
                           CKPT_LAYOUT_PER_NODE, -1, 6);
        settings_divergent("MPICKPT_RANKS_PER_NODE", "1", "2", CKPT_LAYOUT_PER_NODE,
                           CKPT_LAYOUT_PER_NODE, -1, 7);
        settings_options_differ(0);
        settings_options_differ(1);
    } else if (g_rank == 0) {
        printf("settings: one rank, no rank 1: the per-rank cases need 2 or more\n");
    }

    /* a valid MPICKPT_FAULT still injects */
    char spec[32], what[128], prefix[2400];
    snprintf(spec, sizeof spec, "%d:write", g_size - 1);
    snprintf(what, sizeof what, "MPICKPT_FAULT=%s still injects", spec);
    snprintf(prefix, sizeof prefix, "%s/fault", dir);
    begin_case("settings: %s", what);
    setenv("MPICKPT_FAULT", spec, 1);
    ckpt_saver *s = NULL;
    if (coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, what)) {
        tm_model m;
        model_init(&m, g_size, g_rank, 0);
        register_or_die(&m, s);
        tm_fill(&m, 1);
        if (coll(ckpt_saver_write(s, prefix, NULL), CKPT_EIO, what))
            CHECK_MSG(strstr(g_msg, "injected fault") != NULL,
                      "%s: the message does not say \"injected fault\": %s", what, g_msg);
        CHECK_MSG(!index_exists(prefix), "%s: %s was committed", what, prefix);
        close_if_all(s, what);
        tm_free(&m);
    }
    unsetenv("MPICKPT_FAULT");
    check_dir_clean(dir, NULL, "settings");
}

/* ======================================================================================== */
/* 5. utf8_names                                                                             */

enum { FN_FULL, FN_SLICE, FN_REPLICATED, FN_COMPONENT, FN_BLOB, FN_N };
static const char *const fn_names[FN_N] = { "ckpt_saver_add_full", "ckpt_saver_add_slice",
                                            "ckpt_saver_add_replicated (primary)",
                                            "ckpt_saver_add_replicated (per component)",
                                            "ckpt_saver_add_blob" };

typedef struct utf8_bufs {
    float full[3];
    float rows[2 * 3]; /* rows [2r, 2r+2) of [2n, 3] */
    float repl[4];
    uint64_t comp[2];
    char blob_out[64];
    int blob_calls;
    char blob_got[64];
} utf8_bufs;

static int u_blob_save(const void **data, size_t *len, void *payload)
{
    utf8_bufs *b = payload;
    int k = snprintf(b->blob_out, sizeof b->blob_out, "blob of rank %d", g_rank);
    *data = b->blob_out;
    *len = (size_t)k;
    return CKPT_OK;
}

static int u_blob_restore(const void *data, size_t len, void *payload)
{
    utf8_bufs *b = payload;
    b->blob_calls++;
    memset(b->blob_got, 0, sizeof b->blob_got);
    memcpy(b->blob_got, data, len < sizeof b->blob_got - 1 ? len : sizeof b->blob_got - 1);
    return CKPT_OK;
}

static void u_fill(utf8_bufs *b, float v)
{
    for (int i = 0; i < 3; i++)
        b->full[i] = v + (float)(g_rank * 10 + i);
    for (int i = 0; i < 6; i++)
        b->rows[i] = v + (float)(g_rank * 6 + i) * 0.5f;
    for (int i = 0; i < 4; i++)
        b->repl[i] = v * 2 + (float)i;
    for (int i = 0; i < 2; i++)
        b->comp[i] = (uint64_t)(v * 1000) + (uint64_t)g_rank * 7 + (uint64_t)i;
}

/* Registers `name` with function `fn` (a per-rank suffix for the full tensor, which every rank
 * owns one of). */
static int u_register(ckpt_saver *s, int fn, const char *name, utf8_bufs *b)
{
    char full_name[512];
    int64_t d3 = 3, d4 = 4, d2 = 2, drows[2] = { 2 * (int64_t)g_size, 3 },
            st[2] = { 2 * (int64_t)g_rank, 0 }, ct[2] = { 2, 3 };
    ckpt_shape sh;
    ckpt_slice sl;
    ckpt_blob_callbacks cb = { u_blob_save, u_blob_restore };
    switch (fn) {
    case FN_FULL:
        snprintf(full_name, sizeof full_name, "%s/full_r%d", name, g_rank);
        ckpt_shape_init(&sh, 1, &d3);
        return ckpt_saver_add_full(s, full_name, CKPT_FLOAT32, &sh, b->full);
    case FN_SLICE:
        ckpt_shape_init(&sh, 2, drows);
        ckpt_slice_init(&sl, 2, st, ct);
        return ckpt_saver_add_slice(s, name, CKPT_FLOAT32, &sh, &sl, b->rows);
    case FN_REPLICATED:
        ckpt_shape_init(&sh, 1, &d4);
        return ckpt_saver_add_replicated(s, name, CKPT_FLOAT32, &sh, b->repl,
                                         CKPT_REPLICA_PRIMARY);
    case FN_COMPONENT:
        ckpt_shape_init(&sh, 1, &d2);
        return ckpt_saver_add_replicated(s, name, CKPT_UINT64, &sh, b->comp,
                                         CKPT_REPLICA_PER_COMPONENT);
    default:
        return ckpt_saver_add_blob(s, name, &cb, b);
    }
}

static void case_utf8_names(void)
{
    /* ill-formed: a stray continuation-less 0xff, an overlong '/', a UTF-16 surrogate */
    static const char *const bad[] = { "w\xff", "\xc0\xaf", "\xed\xa0\x80" };
    static const char *const esc[] = { "w\\xff", "\\xc0\\xaf", "\\xed\\xa0\\x80" };
    char dir[2200], prefix[2400];
    snprintf(dir, sizeof dir, "%s/utf8", g_out);
    make_dir(dir);
    static utf8_bufs b; /* registered with the saver below */
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_UNKNOWN, 0, 0);
    int at_registration = 0, at_save = 0, accepted = 0;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        for (int fn = 0; fn < FN_N; fn++) {
            char what[256];
            snprintf(what, sizeof what, "%s(\"%s\")", fn_names[fn], esc[k]);
            begin_case("utf8_names: %s (%d ranks)", what, g_size);
            ckpt_saver_clear(s);
            u_fill(&b, 1);
            /* something valid next to it, so that a save has data */
            int rc = u_register(s, FN_REPLICATED, "valid", &b);
            CHECK_OK(rc);
            ckpt_error_clear();
            rc = u_register(s, fn, bad[k], &b);
            int v[2] = { rc, -rc }, r[2];
            MPI_Allreduce(v, r, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            CHECK_MSG(r[0] == -r[1], "%s: ranks returned different codes (%d..%d)", what, r[0],
                      -r[1]);
            if (r[0] != -r[1])
                continue; /* every rank: r is agreed */
            if (rc == CKPT_EINVAL) {
                const ckpt_error *e = ckpt_error_last();
                const char *msg = e && e->message ? e->message : "";
                CHECK_MSG(contains_ci(msg, esc[k]),
                          "%s: CKPT_EINVAL, but the message does not name the name escaped "
                          "(%s): %s",
                          what, esc[k], msg);
                at_registration++;
                continue;
            }
            CHECK_MSG(rc == CKPT_OK, "%s: returned %d (%s), want CKPT_EINVAL (or CKPT_OK and "
                      "the first save refusing it)", what, rc, ckpt_strerror(rc));
            if (!all_true(rc == CKPT_OK))
                continue;
            /* registration does not check: the first save must */
            snprintf(prefix, sizeof prefix, "%s/bad%zu_%d", dir, k, fn);
            char w[400];
            snprintf(w, sizeof w, "%s accepted; the first save", what);
            if (coll(ckpt_saver_write(s, prefix, NULL), CKPT_EINVAL, w)) {
                CHECK_MSG(contains_ci(g_msg, esc[k]),
                          "%s: CKPT_EINVAL, but the message does not name the name escaped (%s): "
                          "%s",
                          w, esc[k], g_msg);
                at_save++;
            } else {
                accepted++;
            }
            CHECK_MSG(!index_exists(prefix), "%s: a checkpoint with an ill-formed name was "
                      "committed: %s", w, prefix);
        }
    if (g_rank == 0)
        printf("  ill-formed names refused at registration: %d, by the first save: %d, not "
               "refused: %d (of %d)\n",
               at_registration, at_save, accepted, (int)(sizeof bad / sizeof bad[0]) * FN_N);
    check_dir_clean(dir, NULL, "utf8_names: after the refused names");

    /* valid multi-byte names, byte-exact */
    const char *base = "gr\xc3\xb6\xc3\x9f" "e/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x99\x82";
    char n_rep[256], n_comp[256], n_blob[256];
    snprintf(n_rep, sizeof n_rep, "%s/bias", base);
    snprintf(n_comp, sizeof n_comp, "%s/rng", base);
    snprintf(n_blob, sizeof n_blob, "%s/blob", base);
    begin_case("utf8_names: valid multi-byte names save and restore (%d ranks)", g_size);
    ckpt_saver_clear(s);
    int rc = u_register(s, FN_SLICE, base, &b);
    if (rc == CKPT_OK)
        rc = u_register(s, FN_FULL, base, &b);
    if (rc == CKPT_OK)
        rc = u_register(s, FN_REPLICATED, n_rep, &b);
    if (rc == CKPT_OK)
        rc = u_register(s, FN_COMPONENT, n_comp, &b);
    if (rc == CKPT_OK)
        rc = u_register(s, FN_BLOB, n_blob, &b);
    CHECK_OK(rc);
    snprintf(prefix, sizeof prefix, "%s/good", dir);
    u_fill(&b, 3);
    if (all_true(rc == CKPT_OK) &&
        coll(ckpt_saver_write(s, prefix, NULL), CKPT_OK, "save with multi-byte names")) {
        utf8_bufs want = b;
        memset(&b.full, 0x5A, sizeof b.full);
        memset(&b.rows, 0x5A, sizeof b.rows);
        memset(&b.repl, 0x5A, sizeof b.repl);
        memset(&b.comp, 0x5A, sizeof b.comp);
        b.blob_calls = 0;
        if (coll(ckpt_saver_restore(s, prefix, NULL, NULL), CKPT_OK,
                 "restore with multi-byte names")) {
            CHECK_MSG(memcmp(b.full, want.full, sizeof b.full) == 0, "full tensor differs");
            CHECK_MSG(memcmp(b.rows, want.rows, sizeof b.rows) == 0, "partitioned rows differ");
            CHECK_MSG(memcmp(b.repl, want.repl, sizeof b.repl) == 0, "replicated differs");
            CHECK_MSG(memcmp(b.comp, want.comp, sizeof b.comp) == 0, "component differs");
            char bw[64];
            snprintf(bw, sizeof bw, "blob of rank %d", g_rank);
            CHECK_MSG(b.blob_calls == 1 && strcmp(b.blob_got, bw) == 0,
                      "blob callback called %d time(s) with \"%s\", want once with \"%s\"",
                      b.blob_calls, b.blob_got, bw);
        }
        if (g_rank == 0) {
            /* the index holds the names byte for byte */
            ckpt_reader *rd = NULL;
            CHECK_OK(ckpt_reader_open(&rd, prefix));
            for (int r = 0; rd && r < g_size; r++) {
                char names[5][300];
                int nn = 0;
                snprintf(names[nn++], sizeof names[0], "%s/full_r%d", base, r);
                snprintf(names[nn++], sizeof names[0], "%s/rank_%d", n_blob, r);
                if (r == 0) { /* rank 0's component goes under the plain name */
                    snprintf(names[nn++], sizeof names[0], "%s", base);
                    snprintf(names[nn++], sizeof names[0], "%s", n_rep);
                    snprintf(names[nn++], sizeof names[0], "%s", n_comp);
                } else {
                    snprintf(names[nn++], sizeof names[0], "%s/parallel_component_%d", n_comp, r);
                }
                for (int i = 0; i < nn; i++) {
                    size_t idx;
                    CHECK_MSG(ckpt_reader_find(&idx, rd, names[i]) == CKPT_OK,
                              "the index lacks \"%s\"", names[i]);
                }
            }
            ckpt_reader_free(rd);
        }
    }
    coll(ckpt_saver_close(s), CKPT_OK, "utf8_names: close");
}

/* ======================================================================================== */

/* ======================================================================================== */
/* messages                                                                                  */

/* How often `needle` occurs in `hay`. */
static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void case_messages(void)
{
    char dir[2200], prefix[2400];
    snprintf(dir, sizeof dir, "%s/messages", g_out);
    make_dir(dir);
    int last = g_size - 1;
    static double w[4], x[4];
    int64_t three = 3, four = 4;
    ckpt_shape s3, s4;
    ckpt_shape_init(&s3, 1, &three);
    ckpt_shape_init(&s4, 1, &four);

    /* a shape that differs across ranks: both shapes shown */
    if (g_size >= 2) {
        begin_case("messages: 'w' replicated as [3], and [4] on rank %d", last);
        snprintf(prefix, sizeof prefix, "%s/shape", dir);
        ckpt_saver *s = NULL;
        if (coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, "shape: create")) {
            CHECK_OK(ckpt_saver_add_replicated(s, "w", CKPT_FLOAT64, g_rank == last ? &s4 : &s3,
                                               w, CKPT_REPLICA_PRIMARY));
            if (coll(ckpt_saver_write(s, prefix, NULL), CKPT_EMISMATCH, "shape: a save")) {
                char want[128];
                snprintf(want, sizeof want, "rank %d registered float64 [4] replicated", last);
                CHECK_MSG(strstr(g_msg, "registered float64 [3] replicated but rank") &&
                              strstr(g_msg, want) && strstr(g_msg, "(the shapes differ)"),
                          "shape: the message does not show both shapes: %s", g_msg);
                CHECK_MSG(occurrences(g_msg, " (host ") == 1,
                          "shape: the rank prefix is not there once: %s", g_msg);
            }
            CHECK_MSG(!index_exists(prefix), "shape: %s was committed", prefix);
            close_if_all(s, "shape");
        }
    } else if (g_rank == 0) {
        printf("messages: one rank: no shape can differ across ranks\n");
    }

    /* a restore that fails on the last rank, through the manager (two agreements) */
    begin_case("messages: a restore fails on rank %d: its prefix once", last);
    snprintf(dir, sizeof dir, "%s/messages/twice", g_out);
    make_dir(dir);
    for (int pass = 0; pass < 2; pass++) {
        ckpt_saver *s = NULL;
        if (!coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, "twice: create"))
            break;
        CHECK_OK(ckpt_saver_add_replicated(s, "w", CKPT_FLOAT64, &s3, w, CKPT_REPLICA_PRIMARY));
        if (pass == 1 && g_rank == last) /* a name ckpt-1 lacks, on the last rank only */
            CHECK_OK(ckpt_saver_add_replicated(s, "not_in_ckpt", CKPT_FLOAT64, &s3, x,
                                               CKPT_REPLICA_PRIMARY));
        /* options version 3 (before strict restores): a name the checkpoint lacks is
         * CKPT_ENOTFOUND on the rank that registered it, agreed twice (this case's point);
         * strict, the chief would find it before any rank reads */
        ckpt_manager_options mo = CKPT_MANAGER_OPTIONS_INIT;
        mo.version = 3;
        mo.max_to_keep = 3;
        ckpt_manager *mg = NULL;
        if (!coll(ckpt_manager_create(&mg, s, dir, &mo), CKPT_OK, "twice: the manager") || !mg)
            MPI_Abort(MPI_COMM_WORLD, 2);
        if (pass == 0) {
            ckpt_manager_save_info si = { 0, 1, 0, 0 };
            coll(ckpt_manager_save(mg, &si, NULL, 0), CKPT_OK, "twice: the save");
        } else {
            ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
            int rc = ckpt_manager_restore_latest(&r, mg);
            if (coll(rc, CKPT_ERROR, "twice: the restore")) {
                char want[64];
                snprintf(want, sizeof want, "rank %d (host ", last);
                CHECK_MSG(strncmp(g_msg, want, strlen(want)) == 0 &&
                              occurrences(g_msg, " (host ") == 1 &&
                              strstr(g_msg, "not_in_ckpt") != NULL,
                          "twice: the message does not name rank %d with its host once, first: "
                          "%s", last, g_msg);
            }
        }
        ckpt_manager_free(mg);
        close_if_all(s, "twice");
    }

    /* issue 30: the errno of a full and of a read-only file system on every rank */
    begin_case("messages: errno of a full and a read-only file system on every rank");
    snprintf(g_mnt, sizeof g_mnt, "%s/mnt", dir);
    make_dir(g_mnt);
    char why[512];
    tmpfs_mount(g_rank, 256, why, sizeof why);
    if (why[0]) {
        if (g_rank == 0)
            printf("messages: file-system errors skipped: %s\n", why);
        return;
    }
    static double big[1 << 16]; /* 512 KiB onto 256 KiB */
    int64_t nbig = 1 << 16;
    ckpt_shape sbig;
    ckpt_shape_init(&sbig, 1, &nbig);
    for (int ro = 0; ro < 2; ro++) {
        if (ro) {
            char cmd[2600];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'/* && mount -o remount,ro '%s'", g_mnt, g_mnt);
            if (rank0_system(g_rank, cmd) != 0) {
                CHECK_MSG(0, "could not remount %s read-only", g_mnt);
                break;
            }
        }
        snprintf(prefix, sizeof prefix, "%s/%s", g_mnt, ro ? "ro" : "full");
        ckpt_saver *s = NULL;
        if (!coll(ckpt_saver_create(&s, MPI_COMM_WORLD, NULL), CKPT_OK, "fs: create"))
            break;
        CHECK_OK(ckpt_saver_add_replicated(s, "big", CKPT_FLOAT64, &sbig, big,
                                           CKPT_REPLICA_PRIMARY));
        int rc = ckpt_saver_write(s, prefix, NULL);
        const ckpt_error *e = ckpt_error_last();
        int got = e ? e->sys_errno : -1, want = ro ? EROFS : ENOSPC;
        if (coll(rc, ro ? CKPT_EIO : CKPT_ENOSPC, ro ? "fs: write to read-only" : "fs: full")) {
            CHECK_MSG(got == want, "%s: sys_errno %d, expected %d (%s): %s", prefix, got, want,
                      strerror(want), g_msg);
            CHECK_MSG(occurrences(g_msg, "rank ") == 1 && strncmp(g_msg, "rank ", 5) == 0,
                      "%s: the rank is not named once, first: %s", prefix, g_msg);
        }
        close_if_all(s, "fs");
    }
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    const char *c = argc >= 3 ? argv[2] : "";
    int nargs = argc - 3;
    int ok = (strcmp(c, "fallback_per_rank") == 0 && nargs == 1 &&
              (strcmp(argv[3], "sync") == 0 || strcmp(argv[3], "async") == 0)) ||
             (strcmp(c, "enospc_sync") == 0 && nargs == 2 && tm_layout(argv[3]) &&
              (strcmp(argv[4], "reserve") == 0 || strcmp(argv[4], "noreserve") == 0)) ||
             (strcmp(c, "dir") == 0 && nargs == 1 && tm_layout(argv[3])) ||
             ((strcmp(c, "async_lifetime") == 0 || strcmp(c, "settings") == 0 ||
               strcmp(c, "utf8_names") == 0 || strcmp(c, "messages") == 0) &&
              nargs == 0);
    if (!ok) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_hostile_mpi OUTDIR CASE [ARG...]\n"
                            "  fallback_per_rank sync|async\n  async_lifetime\n"
                            "  enospc_sync shared|per-rank|per-node reserve|noreserve\n"
                            "  settings\n  utf8_names\n  messages\n"
                            "  dir shared|per-rank|per-node\n");
        MPI_Finalize();
        return 2;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        if (g_rank == 0)
            fprintf(stderr, "test_hostile_mpi: MPI granted thread level %d, not "
                            "MPI_THREAD_MULTIPLE\n", provided);
        MPI_Finalize();
        return 1;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    unset_all(); /* only what this test sets */
    ckpt_log_set(logcap_cb, CKPT_LOG_WARN, NULL);
    make_dir(g_out);

    char title[256];
    if (strcmp(c, "fallback_per_rank") == 0) {
        case_fallback(strcmp(argv[3], "async") == 0);
        snprintf(title, sizeof title, "test_hostile_mpi fallback_per_rank %s", argv[3]);
    } else if (strcmp(c, "async_lifetime") == 0) {
        case_async_lifetime();
        snprintf(title, sizeof title, "test_hostile_mpi async_lifetime");
    } else if (strcmp(c, "enospc_sync") == 0) {
        case_enospc_sync(tm_layout(argv[3]), argv[3], strcmp(argv[4], "reserve") == 0);
        snprintf(title, sizeof title, "test_hostile_mpi enospc_sync %s %s", argv[3], argv[4]);
    } else if (strcmp(c, "dir") == 0) {
        case_dir(tm_layout(argv[3]), argv[3]);
        snprintf(title, sizeof title, "test_hostile_mpi dir %s", argv[3]);
    } else if (strcmp(c, "settings") == 0) {
        case_settings();
        snprintf(title, sizeof title, "test_hostile_mpi settings");
    } else if (strcmp(c, "messages") == 0) {
        case_messages();
        snprintf(title, sizeof title, "test_hostile_mpi messages");
    } else {
        case_utf8_names();
        snprintf(title, sizeof title, "test_hostile_mpi utf8_names");
    }
    alarm(0);
    if (g_skipped) {
        MPI_Finalize();
        return 77;
    }
    return check_mpi_done(title);
}
