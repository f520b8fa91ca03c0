/* Names no other job can take (issue 29): in-flight names unique to the save, a commit that never
 * replaces a final name it did not create, a manager counter that moves past a taken name.
 *
 * usage: test_names OUTDIR CASE LAYOUT     (LAYOUT: per-rank | per-node | shared)
 *
 *   planted   a manager (no cache) saves ckpt-1; then something is planted under ckpt-2's names
 *             (ckpt-2.index as a regular file, a FIFO, a symbolic link, a directory; a data file
 *             name holding text; an old-style ckpt-2_temp/ and a new-style ckpt-2.<id>_temp/ that
 *             hold someone's file): the next save warns naming ckpt-2 and commits as ckpt-3, the
 *             planted entry is exactly as it was, the save after is ckpt-4, and restores give each
 *             saved step's values. Two taken counters in a row are both skipped. Past the bound
 *             (CKPT__COUNTER_SKIP_MAX taken in a row) the save is CKPT_EEXISTS on every rank,
 *             nothing written; one freed, the save takes it.
 *   plain     a plain saver (no manager): a FIFO planted under the last data file's final name of
 *             the next save -> CKPT_EEXISTS on every rank naming it, no index, the FIFO untouched,
 *             nothing of the save left (no data file in place, no in-flight directory); a link
 *             under a data file's name likewise (never replaced); a planted index is refused
 *             before anything is written; a numbered save (ckpt_saver_save) whose name is taken
 *             fails, and the next numbered save moves past it.
 *   two       two savers of the same prefix in one directory at once (the job split into two
 *             sub-communicators, each with a plain ckpt_saver; one rank: two async savers over
 *             MPI_COMM_SELF), each job with its own values, several rounds with each split (halves;
 *             rank 0 alone against the rest, whose data file names differ, so only the index
 *             collides): at most one job commits, the other gets CKPT_EEXISTS, the committed
 *             checkpoint restores exactly its job's values, and nothing of either job is left in
 *             flight.
 *   cache     a manager with a cache level (per-rank, per-node): ckpt-2.index planted as a FIFO in
 *             the chief's node cache and ckpt-3.index as a file in the persistent directory: the
 *             save commits as ckpt-4 (drained: persist_every 2), the directory's planted entry
 *             untouched (the cache's sweep removes the other: another finding of issue 29), the
 *             next save is ckpt-5, restores give the saved values. With two nodes or more,
 *             ckpt-6.index taken on node 1 (whose cache the chief does not look at) fails that
 *             save with CKPT_EEXISTS at its commit, untouched, and the next save moves past it.
 *
 * Every status is compared over the ranks of its communicator. No duration is compared.
 */
#include "mpi_check.h"
#include "coll.h"
#include "logcap.h"
#include "mpickpt.h"
#include "state_copy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_rank, g_size;
static const char *g_out;
static ckpt_layout g_layout;
static const char *g_layout_name;

#define SKIP_MAX 100 /* CKPT__COUNTER_SKIP_MAX (lib/paths.h) */

/* 1 on every rank when `ok` holds on every rank. */
/* ---- warnings of rank 0 (logcap.h) ---------------------------------------------------------- */

/* 1 when a captured warning holds every NULL-terminated word. */
static int warned(const char *w1, const char *w2)
{
    for (int i = 0; i < g_nlogs; i++)
        if (contains_ci(g_logs[i], w1) && (!w2 || contains_ci(g_logs[i], w2)))
            return 1;
    return 0;
}

/* ---- planting (rank 0), and checking it is untouched --------------------------------------- */

typedef enum { P_FILE, P_FIFO, P_LINK, P_DIR, P_DIR_WITH_FILE } plant_kind;

static const char *const kind_names[] = { "a regular file", "a FIFO", "a symbolic link",
                                          "a directory", "a directory holding a file" };

#define PLANT_TEXT "someone else's bytes\n"

/* Rank 0 plants `kind` at `path` (a link points to `target`); collective. */
static void plant(const char *path, plant_kind kind, const char *target)
{
    if (g_rank == 0) {
        int ok = 0;
        char p[4600];
        FILE *f;
        switch (kind) {
        case P_FILE:
            f = fopen(path, "w");
            ok = f && fputs(PLANT_TEXT, f) >= 0 && fclose(f) == 0;
            break;
        case P_FIFO: ok = mkfifo(path, 0644) == 0; break;
        case P_LINK: ok = symlink(target, path) == 0; break;
        case P_DIR: ok = mkdir(path, 0755) == 0; break;
        case P_DIR_WITH_FILE:
            snprintf(p, sizeof p, "%s/notes.txt", path);
            ok = mkdir(path, 0755) == 0 && (f = fopen(p, "w")) != NULL &&
                 fputs(PLANT_TEXT, f) >= 0 && fclose(f) == 0;
            break;
        }
        CHECK_MSG(ok, "cannot plant %s at %s: %s", kind_names[kind], path, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* 1 on every rank when `path` is still exactly what plant() made (rank 0 looks). */
static int untouched(const char *path, plant_kind kind, const char *target)
{
    int ok = 1;
    if (g_rank == 0) {
        struct stat st;
        char buf[256] = "", p[4600];
        ssize_t n;
        FILE *f;
        ok = lstat(path, &st) == 0;
        switch (kind) {
        case P_FILE:
            ok = ok && S_ISREG(st.st_mode) && (f = fopen(path, "r")) != NULL;
            if (ok) {
                n = (ssize_t)fread(buf, 1, sizeof buf - 1, f);
                fclose(f);
                buf[n > 0 ? n : 0] = '\0';
                ok = strcmp(buf, PLANT_TEXT) == 0;
            }
            break;
        case P_FIFO: ok = ok && S_ISFIFO(st.st_mode); break;
        case P_LINK:
            ok = ok && S_ISLNK(st.st_mode) && (n = readlink(path, buf, sizeof buf - 1)) > 0;
            if (ok) {
                buf[n] = '\0';
                ok = strcmp(buf, target) == 0;
            }
            break;
        case P_DIR:
        case P_DIR_WITH_FILE: {
            ok = ok && S_ISDIR(st.st_mode);
            DIR *d = ok ? opendir(path) : NULL;
            int entries = 0;
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL)
                entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
            if (d)
                closedir(d);
            ok = ok && entries == (kind == P_DIR ? 0 : 1);
            if (ok && kind == P_DIR_WITH_FILE) {
                snprintf(p, sizeof p, "%s/notes.txt", path);
                ok = (f = fopen(p, "r")) != NULL;
                if (ok) {
                    n = (ssize_t)fread(buf, 1, sizeof buf - 1, f);
                    fclose(f);
                    buf[n > 0 ? n : 0] = '\0';
                    ok = strcmp(buf, PLANT_TEXT) == 0;
                }
            }
            break;
        }
        }
        CHECK_MSG(ok, "%s (%s) was changed or removed", path, kind_names[kind]);
    }
    return all_true(ok);
}

/* Rank 0 removes what plant() made; collective. */
static void unplant(const char *path, plant_kind kind)
{
    if (g_rank == 0) {
        char p[4600];
        snprintf(p, sizeof p, "%s/notes.txt", path);
        if (kind == P_DIR_WITH_FILE)
            unlink(p);
        if (kind == P_DIR || kind == P_DIR_WITH_FILE)
            rmdir(path);
        else
            unlink(path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- the model ---------------------------------------------------------------------------- */

static void model_on(tm_model *m, ckpt_saver *s, MPI_Comm comm)
{
    int n = 1, r = 0;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &r);
    if (tm_init(m, n, r, 0, 0) != CKPT_OK || tm_register(m, s) != CKPT_OK) {
        fprintf(stderr, "[rank %d] cannot set up the model\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static ckpt_manager *manager(ckpt_saver *s, const char *dir, const char *cache_pat)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = 0; /* keep all: every counter stays checkable */
    o.cache_dir = cache_pat;
    o.persist_every = 2;
    o.cache_max_to_keep = 2;
    ckpt_manager *mg = NULL;
    if (!coll(ckpt_manager_create(&mg, s, dir, &o), CKPT_OK, "ckpt_manager_create") || !mg)
        MPI_Abort(MPI_COMM_WORLD, 2);
    return mg;
}

/* A manager save of `step`: the status `expected`; on success the name it returns ends in
 * "/ckpt-<counter>" on every rank. */
static int mgr_save(ckpt_manager *mg, tm_model *m, int64_t step, int expected, int64_t counter,
                    const char *what)
{
    tm_fill(m, step);
    ckpt_manager_save_info si = { 0, step, 0, 1 };
    char out[4400] = "", want[64];
    int ok = coll(ckpt_manager_save(mg, &si, out, sizeof out), expected, what);
    if (ok && expected == CKPT_OK) {
        snprintf(want, sizeof want, "/ckpt-%lld", (long long)counter);
        CHECK_MSG(ends_with(out, want), "%s: saved as %s, want ...%s", what, out, want);
        ok = all_true(ends_with(out, want));
    }
    return ok;
}

/* The state lists exactly the counters `want[0..n)` in order (every rank's copy). */
static void expect_listed(ckpt_manager *mg, const int64_t *want, size_t n, const char *what)
{
    const ckpt_state *st = test_manager_state(mg);
    int ok = st && st->num_entries == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = st->entries[i].save_counter == want[i];
    CHECK_MSG(ok, "%s: the state lists %zu entries (the last %s), not the %zu expected", what,
              st ? st->num_entries : 0,
              st && st->num_entries ? st->entries[st->num_entries - 1].prefix : "-", n);
}

/* restore_or_initialize gives counter/step with every value right. */
static void mgr_restore(ckpt_manager *mg, tm_model *m, int64_t counter, int64_t step,
                        const char *what)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_sentinel(m);
    if (coll(ckpt_manager_restore_latest(&r, mg), CKPT_OK, what)) {
        CHECK_MSG(r.restored && r.save_counter == counter && r.step == step,
                  "%s: restored %d counter %lld step %lld, want counter %lld step %lld", what,
                  r.restored, (long long)r.save_counter, (long long)r.step, (long long)counter,
                  (long long)step);
        check_values(m, step, TM_RESTORED, what);
    }
}

/* The saver restores <dir>/ckpt-<counter> with the values of `step`. */
static void saver_restore(ckpt_saver *s, tm_model *m, const char *dir, int64_t counter,
                          int64_t step, const char *what)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/ckpt-%lld", dir, (long long)counter);
    tm_sentinel(m);
    if (coll(ckpt_saver_restore(s, p, NULL, NULL), CKPT_OK, what))
        check_values(m, step, TM_RESTORED, what);
}

/* ======================================================================================== */
/* planted: the manager's counter moves past taken names                                     */

static void planted_one(const char *label, const char *entry, plant_kind kind)
{
    char dir[2400], p[2800], target[2800], what[512];
    snprintf(dir, sizeof dir, "%s/planted_%s", g_out, label);
    snprintf(target, sizeof target, "%s/elsewhere", g_out);
    make_dir(dir);
    check_case(1, "planted %s: %s is %s", g_layout_name, entry, kind_names[kind]);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, g_layout, 0, 0);
    tm_model m;
    model_on(&m, s, MPI_COMM_WORLD);
    ckpt_manager *mg = manager(s, dir, NULL);
    mgr_save(mg, &m, 10, CKPT_OK, 1, "ckpt-1");
    snprintf(p, sizeof p, "%s/%s", dir, entry);
    plant(p, kind, target);
    g_nlogs = 0;
    snprintf(what, sizeof what, "the save past %s", entry);
    mgr_save(mg, &m, 20, CKPT_OK, 3, what);
    CHECK_MSG(g_rank != 0 || warned("ckpt-2", entry), "%s: no warning names ckpt-2 and %s",
              what, entry);
    untouched(p, kind, target);
    mgr_save(mg, &m, 30, CKPT_OK, 4, "the save after");
    const int64_t listed[] = { 1, 3, 4 };
    expect_listed(mg, listed, 3, what);
    untouched(p, kind, target);
    ckpt_manager_free(mg);
    /* a new manager (a restart) restores the newest and numbers past it */
    mg = manager(s, dir, NULL);
    mgr_restore(mg, &m, 4, 30, "restore the newest after the skip");
    saver_restore(s, &m, dir, 3, 20, "restore ckpt-3");
    mgr_save(mg, &m, 40, CKPT_OK, 5, "a save after the restart");
    untouched(p, kind, target);
    ckpt_manager_free(mg);
    unplant(p, kind);
    ckpt_saver_free(s);
    tm_free(&m);
}

static void case_planted(void)
{
    static const plant_kind kinds[] = { P_FILE, P_FIFO, P_LINK, P_DIR };
    static const char *const labels[] = { "file", "fifo", "link", "dir" };
    char label[64], entry[128];
    for (size_t i = 0; i < 4; i++) {
        snprintf(label, sizeof label, "index_%s", labels[i]);
        planted_one(label, "ckpt-2.index", kinds[i]);
    }
    /* a data file name of some shape (not an HDF5 file: gc leaves it) */
    snprintf(entry, sizeof entry, "ckpt-2.data-00001-of-00003");
    planted_one("data_file", entry, P_FILE);
    planted_one("data_fifo", "ckpt-2.data-00000-of-00001", P_FIFO);
    /* in-flight directories of the old and the new naming that hold someone's file */
    planted_one("temp_old", "ckpt-2_temp", P_DIR_WITH_FILE);
    planted_one("temp_new", "ckpt-2.0123456789abcdef_temp", P_DIR_WITH_FILE);

    /* two taken in a row, then past the bound */
    char dir[2400], p[2800];
    snprintf(dir, sizeof dir, "%s/planted_many", g_out);
    make_dir(dir);
    check_case(1, "planted %s: two counters in a row, then %d", g_layout_name, SKIP_MAX);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, g_layout, 0, 0);
    tm_model m;
    model_on(&m, s, MPI_COMM_WORLD);
    ckpt_manager *mg = manager(s, dir, NULL);
    mgr_save(mg, &m, 10, CKPT_OK, 1, "ckpt-1");
    snprintf(p, sizeof p, "%s/ckpt-2.index", dir);
    plant(p, P_FIFO, NULL);
    snprintf(p, sizeof p, "%s/ckpt-3_temp", dir);
    plant(p, P_DIR_WITH_FILE, NULL);
    g_nlogs = 0;
    mgr_save(mg, &m, 20, CKPT_OK, 4, "past ckpt-2 and ckpt-3");
    CHECK_MSG(g_rank != 0 || (warned("ckpt-2", NULL) && warned("ckpt-3", NULL)),
              "no warnings name ckpt-2 and ckpt-3");
    /* ckpt-5 .. ckpt-(4 + SKIP_MAX) taken: a clear error, nothing written */
    for (int k = 5; k < 5 + SKIP_MAX; k++) {
        snprintf(p, sizeof p, "%s/ckpt-%d.index", dir, k);
        if (g_rank == 0)
            CHECK_MSG(mkfifo(p, 0644) == 0, "mkfifo %s: %s", p, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (mgr_save(mg, &m, 30, CKPT_EEXISTS, 0, "every counter within the bound taken"))
        CHECK_MSG(strstr(g_msg, "ckpt-5") && strstr(g_msg, dir),
                  "the error does not name ckpt-5 and the directory: %s", g_msg);
    const int64_t two[] = { 1, 4 };
    expect_listed(mg, two, 2, "after the refused save");
    /* one freed within the bound: taken */
    snprintf(p, sizeof p, "%s/ckpt-%d.index", dir, 4 + SKIP_MAX);
    unplant(p, P_FIFO);
    mgr_save(mg, &m, 40, CKPT_OK, 4 + SKIP_MAX, "one counter freed");
    mgr_restore(mg, &m, 4 + SKIP_MAX, 40, "restore past the taken counters");
    saver_restore(s, &m, dir, 4, 20, "restore ckpt-4");
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
    tm_free(&m);
}

/* ======================================================================================== */
/* plain: a plain saver's commit never replaces a name it did not create                     */

static void case_plain(void)
{
    char dir[2400], prefix[2600], p[2800], target[2800], name[512], what[512];
    snprintf(dir, sizeof dir, "%s/plain", g_out);
    snprintf(target, sizeof target, "%s/elsewhere", g_out);
    make_dir(dir);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, g_layout, 0, 0);
    tm_model m;
    model_on(&m, s, MPI_COMM_WORLD);
    ckpt_save_info info = { 0, 1, 0 };
    int nfiles = tm_data_files(g_layout, g_size);
    static const plant_kind kinds[] = { P_FIFO, P_LINK, P_FILE };
    for (int i = 0; i < 3; i++) {
        check_case(1, "plain %s: the last data file's name is %s", g_layout_name,
                   kind_names[kinds[i]]);
        snprintf(prefix, sizeof prefix, "%s/ck%d", dir, i);
        snprintf(name, sizeof name, "ck%d.data-%05d-of-%05d", i, nfiles - 1, nfiles);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        plant(p, kinds[i], target);
        tm_fill(&m, 1);
        snprintf(what, sizeof what, "save with %s planted", name);
        if (coll(ckpt_saver_write(s, prefix, &info), CKPT_EEXISTS, what))
            CHECK_MSG(strstr(g_msg, name), "the error does not name %s: %s", name, g_msg);
        CHECK_MSG(all_true(!index_exists(prefix)), "%s was committed", prefix);
        untouched(p, kinds[i], target);
        const char *const allow[] = { name, NULL };
        check_dir_clean(dir, allow, what); /* no other data file, no in-flight directory */
        /* gone, the same save commits */
        unplant(p, kinds[i]);
        coll(ckpt_saver_write(s, prefix, &info), CKPT_OK, "the save once the name is free");
        tm_sentinel(&m);
        if (coll(ckpt_saver_restore(s, prefix, NULL, NULL), CKPT_OK, "restore"))
            check_values(&m, 1, TM_RESTORED, "restore");
    }
    check_case(1, "plain %s: a planted index", g_layout_name);
    snprintf(prefix, sizeof prefix, "%s/ckx", dir);
    snprintf(p, sizeof p, "%s.index", prefix);
    plant(p, P_FIFO, NULL);
    if (coll(ckpt_saver_write(s, prefix, &info), CKPT_EEXISTS, "save over a planted index"))
        CHECK_MSG(strstr(g_msg, "ckx.index"), "the error does not name ckx.index: %s", g_msg);
    untouched(p, P_FIFO, NULL);
    const char *const allow[] = { "ckx.index", NULL };
    check_dir_clean(dir, allow, "after the refused save");
    unplant(p, P_FIFO);

    /* numbered saves (ckpt_saver_save): a number whose data file name is taken fails at the
     * commit, and the next numbered save moves past it */
    check_case(1, "plain %s: a numbered save past a taken name", g_layout_name);
    snprintf(prefix, sizeof prefix, "%s/ckn", dir);
    snprintf(name, sizeof name, "ckn-1.data-%05d-of-%05d", nfiles - 1, nfiles);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    plant(p, P_FIFO, NULL);
    char out[4400] = "", want[4400];
    tm_fill(&m, 7);
    coll(ckpt_saver_save(s, prefix, &info, out, sizeof out), CKPT_EEXISTS, "ckn-1, name taken");
    coll(ckpt_saver_save(s, prefix, &info, out, sizeof out), CKPT_OK, "the next, past ckn-1");
    snprintf(want, sizeof want, "%s-2", prefix);
    CHECK_MSG(strcmp(out, want) == 0, "saved as %s, want %s", out, want);
    untouched(p, P_FIFO, NULL);
    tm_sentinel(&m);
    if (coll(ckpt_saver_restore(s, want, NULL, NULL), CKPT_OK, "restore ckn-2"))
        check_values(&m, 7, TM_RESTORED, "restore ckn-2");
    unplant(p, P_FIFO);
    ckpt_saver_free(s);
    tm_free(&m);
}

/* ======================================================================================== */
/* two: two jobs save the same prefix into one directory at once                             */

#define ROUNDS 4

typedef struct job {
    int group;     /* 0 or 1 */
    MPI_Comm comm;
    ckpt_saver *s;
    tm_model m;
} job;

/* This rank's jobs: one of the two groups (np >= 2), or both (np = 1: two async savers). */
static int make_jobs(job *jobs, int split)
{
    if (g_size == 1) {
        for (int g = 0; g < 2; g++) {
            jobs[g].group = g;
            MPI_Comm_dup(MPI_COMM_SELF, &jobs[g].comm);
            jobs[g].s = new_saver_on(jobs[g].comm, g_layout, 1, 0);
            model_on(&jobs[g].m, jobs[g].s, jobs[g].comm);
        }
        return 2;
    }
    /* split 0: halves (the same shape: the data file names collide too); split 1: rank 0 alone
     * against the rest (different names: only the index collides) */
    int g = split == 0 ? g_rank % 2 : g_rank == 0 ? 0 : 1;
    jobs[0].group = g;
    MPI_Comm_split(MPI_COMM_WORLD, g, g_rank, &jobs[0].comm);
    jobs[0].s = new_saver_on(jobs[0].comm, g_layout, 0, 0);
    model_on(&jobs[0].m, jobs[0].s, jobs[0].comm);
    return 1;
}

static void free_jobs(job *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        ckpt_saver_free(jobs[i].s);
        tm_free(&jobs[i].m);
        MPI_Comm_free(&jobs[i].comm);
    }
}

static int64_t step_of(int group, int round)
{
    return 100 * (group + 1) + round;
}

static void case_two(void)
{
    char dir[2400], prefix[2600], what[512];
    snprintf(dir, sizeof dir, "%s/two", g_out);
    make_dir(dir);
    int commits = 0, refusals = 0;
    for (int split = 0; split < 2; split++) {
        job jobs[2];
        int nj = make_jobs(jobs, split);
        for (int round = 0; round < ROUNDS; round++) {
            check_case(1, "two %s: split %d round %d", g_layout_name, split, round);
            snprintf(prefix, sizeof prefix, "%s/ckpt-%d", dir, split * ROUNDS + round + 1);
            int rc[2] = { CKPT_OK, CKPT_OK };
            for (int i = 0; i < nj; i++)
                tm_fill(&jobs[i].m, step_of(jobs[i].group, round));
            MPI_Barrier(MPI_COMM_WORLD); /* both jobs start together */
            for (int i = 0; i < nj; i++) {
                ckpt_save_info info = { 0, step_of(jobs[i].group, round), 0 };
                rc[i] = ckpt_saver_write(jobs[i].s, prefix, &info);
            }
            for (int i = 0; i < nj; i++) /* async (one rank): the outcome of the background part */
                if (rc[i] == CKPT_OK && g_size == 1)
                    rc[i] = ckpt_saver_sync(jobs[i].s);
            /* each job's status is the same on all its ranks, and OK or CKPT_EEXISTS */
            int st[2] = { INT_MAX, INT_MAX }, all[2];
            for (int i = 0; i < nj; i++) {
                snprintf(what, sizeof what, "job %d's save of %s", jobs[i].group, prefix);
                coll_on(jobs[i].comm, rc[i], COLL_ANY, what);
                CHECK_MSG(rc[i] == CKPT_OK || rc[i] == CKPT_EEXISTS,
                          "%s: %s, want CKPT_OK or CKPT_EEXISTS", what, ckpt_strerror(rc[i]));
                st[jobs[i].group] = rc[i];
            }
            MPI_Allreduce(st, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            int ok0 = all[0] == CKPT_OK, ok1 = all[1] == CKPT_OK;
            CHECK_MSG(!(ok0 && ok1), "%s: both jobs committed", prefix);
            commits += ok0 || ok1;
            refusals += !ok0 + !ok1;
            CHECK_MSG(all_true(index_exists(prefix) == (ok0 || ok1)),
                      "%s: an index exists: %d, a job committed: %d", prefix,
                      index_exists(prefix), ok0 || ok1);
            /* the winner's checkpoint holds the winner's values, read back */
            for (int i = 0; i < nj; i++) {
                if (all[jobs[i].group] != CKPT_OK)
                    continue;
                int64_t want = step_of(jobs[i].group, round);
                ckpt_reader *r = NULL;
                int hrc = ckpt_reader_open(&r, prefix);
                CHECK_MSG(hrc == CKPT_OK && ckpt_reader_header(r)->step == want,
                          "%s: the index says step %lld, job %d saved %lld", prefix,
                          r ? (long long)ckpt_reader_header(r)->step : -1LL, jobs[i].group,
                          (long long)want);
                ckpt_reader_free(r);
                tm_sentinel(&jobs[i].m);
                snprintf(what, sizeof what, "job %d restores %s", jobs[i].group, prefix);
                int r2 = ckpt_saver_restore(jobs[i].s, prefix, NULL, NULL);
                if (coll_on(jobs[i].comm, r2, CKPT_OK, what))
                    check_model(&jobs[i].m, want, TM_RESTORED, what);
            }
            check_dir_clean(dir, NULL, "after both saves");
        }
        free_jobs(jobs, nj);
    }
    if (g_rank == 0)
        printf("  two %s: %d of %d rounds committed by one job, %d refusals\n", g_layout_name,
               commits, 2 * ROUNDS, refusals);
}

/* ======================================================================================== */
/* Node `node`'s cache of checkpoint directory `dir` under `cache` (the pattern CACHE/%n):
 * CACHE/<node>/mpickpt-<the identity in dir/identity> (docs/levels.md "Whose cache it is"). */
static void node_cache(char *out, size_t size, const char *cache, int node, const char *dir)
{
    char p[2800], id[128] = "";
    snprintf(p, sizeof p, "%s/identity", dir);
    FILE *f = fopen(p, "r");
    CHECK_MSG(f && fscanf(f, "mpickpt-identity %64s", id) == 1, "no identity in %s", p);
    if (f)
        fclose(f);
    snprintf(out, size, "%s/%d/mpickpt-%s", cache, node, id);
}

/* cache: the counter moves past names taken in the chief's node cache and in the directory  */

static void case_cache(void)
{
    char dir[2400], cache[2400], pat[2600], p[2800], q[2800], nc[2800];
    snprintf(dir, sizeof dir, "%s/cache_dir", g_out);
    snprintf(cache, sizeof cache, "%s/cache", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    make_dir(dir);
    make_dir(cache);
    check_case(1, "cache %s: names taken in the node cache and in the directory", g_layout_name);
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, g_layout, 0, 0);
    tm_model m;
    model_on(&m, s, MPI_COMM_WORLD);
    ckpt_manager *mg = manager(s, dir, pat);
    mgr_save(mg, &m, 10, CKPT_OK, 1, "ckpt-1 (cache)");
    node_cache(nc, sizeof nc, cache, 0, dir);
    snprintf(p, sizeof p, "%s/ckpt-2.index", nc);
    plant(p, P_FIFO, NULL);
    snprintf(q, sizeof q, "%s/ckpt-3.index", dir);
    plant(q, P_FILE, NULL);
    g_nlogs = 0;
    mgr_save(mg, &m, 20, CKPT_OK, 4, "the save past ckpt-2 and ckpt-3");
    CHECK_MSG(g_rank != 0 || (warned("ckpt-2", cache) && warned("ckpt-3", dir)),
              "no warnings name ckpt-2 in the cache and ckpt-3 in the directory");
    /* (the entry planted in the cache is not asserted: in this directory's own subdirectory of
     * the cache, which only its user can write, the sweep after the commit removes every
     * <name>-<N>.* it does not keep) */
    untouched(q, P_FILE, NULL);
    snprintf(q, sizeof q, "%s/ckpt-4", dir); /* persist_every 2: drained */
    CHECK_MSG(all_true(index_exists(q)), "ckpt-4 was not drained to %s", dir);
    mgr_save(mg, &m, 30, CKPT_OK, 5, "the save after");
    int rpn = tm_ranks_per_node(), nnodes = rpn > 0 ? (g_size + rpn - 1) / rpn : 1;
    int64_t newest = 5, newest_step = 30;
    if (nnodes >= 2) {
        /* ckpt-6.index taken on node 1, whose cache the chief does not look at: node 1's index
         * copy cannot take its name, the save fails with CKPT_EEXISTS on every rank naming it,
         * the entry untouched; the next save moves past ckpt-6 */
        check_case(1, "cache %s: ckpt-6.index taken on node 1", g_layout_name);
        node_cache(nc, sizeof nc, cache, 1, dir);
        snprintf(p, sizeof p, "%s/ckpt-6.index", nc);
        plant(p, P_FIFO, NULL);
        if (mgr_save(mg, &m, 40, CKPT_EEXISTS, 0, "a save whose index copy's name is taken"))
            CHECK_MSG(strstr(g_msg, "ckpt-6.index"), "the error does not name it: %s", g_msg);
        untouched(p, P_FIFO, NULL);
        mgr_save(mg, &m, 50, CKPT_OK, 7, "the next save, past ckpt-6");
        newest = 7;
        newest_step = 50;
    }
    ckpt_manager_free(mg);
    mg = manager(s, dir, pat);
    mgr_restore(mg, &m, newest, newest_step, "restore the newest");
    saver_restore(s, &m, dir, 4, 20, "restore ckpt-4 from the directory");
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
    tm_free(&m);
}

int main(int argc, char **argv)
{
    check_watchdog_s = 120;
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    unsetenv("MPICKPT_FAULT");
    if (argc != 4) {
        if (g_rank == 0)
            fprintf(stderr, "usage: %s OUTDIR planted|plain|two|cache LAYOUT\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    g_out = argv[1];
    g_layout_name = argv[3];
    g_layout = tm_layout(argv[3]);
    if (g_rank == 0) /* the chief warns */
        ckpt_log_set(logcap_cb, CKPT_LOG_WARN, NULL);
    make_dir(g_out);
    if (strcmp(argv[2], "planted") == 0)
        case_planted();
    else if (strcmp(argv[2], "plain") == 0)
        case_plain();
    else if (strcmp(argv[2], "two") == 0)
        case_two();
    else if (strcmp(argv[2], "cache") == 0)
        case_cache();
    else
        CHECK_MSG(0, "unknown case %s", argv[2]);
    return check_mpi_done("test_names");
}
