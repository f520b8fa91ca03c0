/* Node-local caches that others can write to, and two jobs on one cache pattern (docs/security.md
 * "Node-local caches", docs/levels.md "Whose cache it is"). Nodes simulated with
 * MPICKPT_RANKS_PER_NODE=K (ctest sets it); "another user" is uid 65534 (nobody), whom this test,
 * run as root, makes the owner of what it plants (the cases that need it are skipped otherwise).
 *
 *   test_cache_owner OUTDIR LAYOUT      LAYOUT: per-rank or per-node
 *
 * Cases (every status the same code and message on every rank, coll()):
 *   link        a node's cache directory planted as a link to the job's persistent directory: the
 *               manager's creation is refused naming the link; the committed checkpoints there
 *               are all still there and the newest restores exactly
 *   same        the cache directory the persistent directory itself, inside it, or above it (a
 *               one-word typo): refused naming which; nothing of the directory is lost
 *   training    the same for a training state: chief/ keeps its checkpoints
 *   foreign     node cache directories made by another user (mode 0777) holding a checkpoint of
 *               this directory's identity (its values differ): refused naming the owner and mode,
 *               the planted files untouched, the job's own values restored from the persistent
 *               directory; a directory of this user that others can write (0777), a parent of
 *               another user's, a parent others can write without the sticky bit: refused; a
 *               sticky one (as /dev/shm): accepted
 *   private     everything a cache save creates in the cache is private (no group or other bits)
 *   two-jobs    two managers on two directories with one cache pattern, saving in turn: each
 *               restores its own newest values (never the other's newer counter), neither's
 *               retention removes the other's copies, a user's file named like a checkpoint in
 *               the node's cache directory survives every sweep, and the metrics of cache saves
 *               are in each persistent directory's metrics.jsonl, none in the caches
 *   copy        a copy of a checkpoint directory (its identity file names the original's inode)
 *               gets an identity of its own: its job starts beside the original's and restores
 *               nothing of its caches; two directories given one identity by hand cannot use the
 *               node caches at once (CKPT_EBUSY naming the holder's pid), one after the other can
 */

#include "mpi_check.h"
#include "cache_util.h"
#include "coll.h"
#include "mpickpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define begin_case(...) check_case(1, __VA_ARGS__)
#define OTHER_UID 65534

static int g_rank, g_size, g_k, g_nnodes;
static const char *g_out;
static ckpt_layout g_layout;

/* A manager on `dir`; with a cache of pattern `pat` when not NULL (partner copies on two nodes or
 * more, every 2nd drained, the cache keeps 2, the directory keeps all). Its status, agreed. */
static int new_manager(ckpt_manager **mg, ckpt_saver *s, const char *dir, const char *pat,
                       int training, ckpt_training **t)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = 0;
    if (pat) {
        o.cache_dir = pat;
        o.redundancy = g_nnodes >= 2 ? CKPT_REDUNDANCY_PARTNER : CKPT_REDUNDANCY_NONE;
        o.persist_every = 2;
        o.cache_max_to_keep = 2;
    }
    *mg = NULL;
    if (!training)
        return ckpt_manager_create(mg, s, dir, &o);
    int rc = ckpt_training_create(t, s, dir, &o);
    if (rc == CKPT_OK)
        *mg = ckpt_training_manager(*t);
    return rc;
}

/* Saves the model at steps first, first + 10, ... (n saves). */
static int save_steps(ckpt_manager *mg, ckpt_saver *s, tm_model *m, int64_t first, int n)
{
    for (int i = 0; i < n; i++) {
        int64_t step = first + 10 * i;
        tm_fill(m, step);
        ckpt_manager_save_info info = { 0, step, 0, 1 };
        int rc = ckpt_manager_save(mg, &info, NULL, 0);
        if (rc == CKPT_OK)
            rc = ckpt_saver_sync(s);
        if (rc != CKPT_OK)
            return rc;
    }
    return CKPT_OK;
}

/* The newest checkpoint of `dir` (no cache) restores exactly the values of `step`. */
static void expect_restore(ckpt_saver *s, tm_model *m, const char *dir, const char *pat,
                           int64_t step, const char *what)
{
    ckpt_manager *mg = NULL;
    if (!coll(new_manager(&mg, s, dir, pat, 0, NULL), CKPT_OK, what))
        return;
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(m);
    if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, what)) {
        CHECK_MSG(res.restored && res.step == step, "%s: restored %d step %lld, want step %lld",
                  what, res.restored, (long long)res.step, (long long)step);
        check_values(m, step, TM_RESTORED, what);
    }
    ckpt_manager_free(mg);
}

/* Rank 0: `dir` holds n checkpoints (their indexes), as many as were saved there. */
static void expect_indexes(const char *dir, int n, const char *what)
{
    if (g_rank != 0)
        return;
    DIR *d = opendir(dir);
    int have = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        have += ends_with(de->d_name, ".index");
    if (d)
        closedir(d);
    CHECK_MSG(have == n, "%s: %s holds %d checkpoints, want %d", what, dir, have, n);
}

/* ---- link, same, training ---------------------------------------------------------------- */

static void test_link_same(ckpt_saver *s, tm_model *m)
{
    char dir[4200], cache[4200], pat[4300], what[300], p[4400];
    snprintf(dir, sizeof dir, "%s/link-run", g_out);
    snprintf(cache, sizeof cache, "%s/link-cache", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    begin_case("link: checkpoints of %s", dir);
    ckpt_manager *mg = NULL;
    if (!coll(new_manager(&mg, s, dir, NULL, 0, NULL), CKPT_OK, "a manager without a cache") ||
        !coll(save_steps(mg, s, m, 10, 3), CKPT_OK, "3 saves"))
        return;
    ckpt_manager_free(mg);
    make_dir(cache);
    if (g_rank == 0) {
        for (int k = 0; k < g_nnodes; k++) {
            node_base_dir(p, sizeof p, cache, k);
            CHECK_MSG(symlink(dir, p) == 0, "symlink %s", p);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(what, sizeof what, "link: every node's cache directory a link to %s", dir);
    begin_case("%s", what);
    if (coll(new_manager(&mg, s, dir, pat, 0, NULL), CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "symbolic link") != NULL, "%s: message: %s", what, g_msg);
    ckpt_manager_free(mg);
    expect_indexes(dir, 3, what);
    expect_restore(s, m, dir, NULL, 30, what);

    /* the persistent directory itself (one node), inside it, above it */
    static const char *const how[] = { "same", "inside", "above" };
    for (int c = 0; c < 3; c++) {
        char d2[4300], pat2[4400];
        if (c == 0 && g_nnodes > 1)
            continue; /* simulated nodes need %n: "inside" covers the typo there */
        if (c == 2) {
            snprintf(d2, sizeof d2, "%s/up/0/run", g_out);
            snprintf(pat2, sizeof pat2, "%s/up/%%n", g_out);
        } else {
            snprintf(d2, sizeof d2, "%s", dir);
            snprintf(pat2, sizeof pat2, c == 0 ? "%s" : "%s/%%n", dir);
        }
        if (c == 2) {
            if (!coll(new_manager(&mg, s, d2, NULL, 0, NULL), CKPT_OK, "above: a manager") ||
                !coll(save_steps(mg, s, m, 10, 3), CKPT_OK, "above: 3 saves"))
                return;
            ckpt_manager_free(mg);
        }
        snprintf(what, sizeof what, "%s: the cache directory %s, the directory %s", how[c], pat2,
                 d2);
        begin_case("%s", what);
        if (coll(new_manager(&mg, s, d2, pat2, 0, NULL), CKPT_EINVAL, what))
            CHECK_MSG(strstr(g_msg, "persistent directory") != NULL &&
                          strstr(g_msg, c == 0 ? "same as" : how[c]) != NULL,
                      "%s: message: %s", what, g_msg);
        ckpt_manager_free(mg);
        expect_indexes(d2, 3, what);
        expect_restore(s, m, d2, NULL, 30, what);
    }

    /* a training state: its chief/ as the cache, or a link to it */
    char work[4200], chief[4300];
    snprintf(work, sizeof work, "%s/train", g_out);
    snprintf(chief, sizeof chief, "%s/chief", work);
    begin_case("training: three backups in %s", work);
    ckpt_training *t = NULL;
    if (!coll(new_manager(&mg, s, work, NULL, 1, &t), CKPT_OK, "a training state") ||
        !coll(save_steps(mg, s, m, 10, 3), CKPT_OK, "3 backups"))
        return;
    ckpt_training_free(t);
    snprintf(pat, sizeof pat, g_nnodes > 1 ? "%s/%%n" : "%s", chief);
    snprintf(what, sizeof what, "training: the cache directory %s", pat);
    begin_case("%s", what);
    if (coll(new_manager(&mg, s, work, pat, 1, &t), CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "persistent directory") != NULL, "%s: message: %s", what, g_msg);
    ckpt_training_free(t);
    t = NULL;
    expect_indexes(chief, 3, what);
}

/* ---- foreign ------------------------------------------------------------------------------ */

/* Rank 0: copies regular file `from` to `to` (mode 0644), owner `uid`. */
static void copy_as(const char *from, const char *to, uid_t uid)
{
    unsigned char *b = NULL;
    long n = slurp(from, &b);
    int fd = open(to, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK_MSG(n >= 0 && fd >= 0 && write(fd, b, (size_t)n) == n, "copy %s to %s", from, to);
    if (fd >= 0) {
        CHECK_MSG(fchown(fd, uid, uid) == 0, "chown %s", to);
        close(fd);
    }
    free(b);
}

/* Rank 0: a copy of the tree `from` (one level: a directory of files) at `to`, every entry owned by
 * `uid`, directories of mode `mode`. */
static void copy_tree_as(const char *from, const char *to, uid_t uid, mode_t mode)
{
    CHECK_MSG(mkdir(to, mode) == 0 && chmod(to, mode) == 0 && chown(to, uid, uid) == 0,
              "mkdir %s", to);
    DIR *d = opendir(from);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char a[4400], b[4400];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat st;
        if (de->d_name[0] != '.' && lstat(a, &st) == 0 && S_ISREG(st.st_mode))
            copy_as(a, b, uid);
    }
    if (d)
        closedir(d);
}

/* Rank 0: number of entries in `dir` (-1 when it cannot be read). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static void test_foreign(ckpt_saver *s, tm_model *m)
{
    char dir[4200], other[4200], cache[4200], pat[4300], ocache[4200], opat[4300], what[300];
    snprintf(dir, sizeof dir, "%s/foreign-run", g_out);
    snprintf(cache, sizeof cache, "%s/foreign-cache", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    snprintf(other, sizeof other, "%s/foreign-other", g_out);
    snprintf(ocache, sizeof ocache, "%s/foreign-ocache", g_out);
    snprintf(opat, sizeof opat, "%s/%%n", ocache);
    if (geteuid() != 0) {
        if (g_rank == 0)
            printf("SKIP foreign: needs root to stand for another user\n");
        return;
    }
    /* this job: three persistent checkpoints (steps 10, 20, 30); another "job" with this
     * directory's identity (the identity file copied: the worst case) saves steps 500.. to its
     * caches, which are then handed to the other user and put where this job's caches go */
    begin_case("foreign: the checkpoints");
    ckpt_manager *mg = NULL;
    if (!coll(new_manager(&mg, s, dir, NULL, 0, NULL), CKPT_OK, "a manager") ||
        !coll(save_steps(mg, s, m, 10, 3), CKPT_OK, "3 saves"))
        return;
    ckpt_manager_free(mg);
    make_dir(other);
    if (g_rank == 0) {
        char a[4400], b[4400];
        snprintf(b, sizeof b, "%s/identity", other);
        snprintf(a, sizeof a, "%s/identity", dir);
        /* the directory has no identity until a cache is asked for: make one */
        if (!exists(a)) {
            int fd = open(a, O_WRONLY | O_CREAT | O_EXCL, 0644);
            static const char id[] = "mpickpt-identity 00112233445566778899aabbccddeeff\n";
            CHECK_MSG(fd >= 0 && write(fd, id, sizeof id - 1) == (ssize_t)sizeof id - 1,
                      "write %s", a);
            if (fd >= 0)
                close(fd);
        }
        copy_as(a, b, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!coll(new_manager(&mg, s, other, opat, 0, NULL), CKPT_OK, "the other job") ||
        !coll(save_steps(mg, s, m, 500, 2), CKPT_OK, "the other job's 2 saves"))
        return;
    ckpt_manager_free(mg);
    make_dir(cache);
    if (g_rank == 0) {
        for (int k = 0; k < g_nnodes; k++) {
            char from[4400], to[4400], sub[4500];
            node_dir(from, sizeof from, ocache, k);
            node_base_dir(to, sizeof to, cache, k);
            CHECK_MSG(mkdir(to, 0777) == 0 && chmod(to, 0777) == 0 &&
                          chown(to, OTHER_UID, OTHER_UID) == 0,
                      "mkdir %s", to);
            snprintf(sub, sizeof sub, "%s/%s", to, strrchr(from, '/') + 1);
            copy_tree_as(from, sub, OTHER_UID, 0777);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int planted[64] = { 0 };
    if (g_rank == 0)
        for (int k = 0; k < g_nnodes && k < 64; k++) {
            char nd[4400];
            node_dir(nd, sizeof nd, cache, k);
            planted[k] = entries(nd);
        }
    snprintf(what, sizeof what, "foreign: node caches made by uid %d, mode 0777", OTHER_UID);
    begin_case("%s", what);
    if (coll(new_manager(&mg, s, dir, pat, 0, NULL), CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "uid 65534") != NULL && strstr(g_msg, "0777") != NULL,
                  "%s: message: %s", what, g_msg);
    ckpt_manager_free(mg);
    if (g_rank == 0)
        for (int k = 0; k < g_nnodes && k < 64; k++) {
            char nd[4400];
            node_dir(nd, sizeof nd, cache, k);
            CHECK_MSG(entries(nd) == planted[k] && planted[k] > 0,
                      "%s: node %d's planted cache holds %d entries, had %d", what, k,
                      entries(nd), planted[k]);
        }
    expect_restore(s, m, dir, NULL, 30, what);

    /* this user's, but others can write it */
    if (g_rank == 0)
        for (int k = 0; k < g_nnodes; k++) {
            char nd[4400];
            node_base_dir(nd, sizeof nd, cache, k);
            CHECK_MSG(chown(nd, 0, 0) == 0, "chown %s", nd);
        }
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(what, sizeof what, "foreign: node caches of this user, mode 0777");
    begin_case("%s", what);
    if (coll(new_manager(&mg, s, dir, pat, 0, NULL), CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "other users can write") != NULL, "%s: message: %s", what,
                  g_msg);
    ckpt_manager_free(mg);

    /* a parent of another user's (they could rename the cache away), a parent others can
     * write without the sticky bit, then one with it (as /dev/shm): the last is fine */
    static const struct { uid_t uid; mode_t mode; int ok; const char *msg; } parents[] = {
        { OTHER_UID, 0755, 0, "belongs to uid 65534" },
        { 0, 0777, 0, "without the sticky bit" },
        { 0, 01777, 1, "" },
    };
    for (size_t i = 0; i < sizeof parents / sizeof parents[0]; i++) {
        char parent[4300], ppat[4400];
        snprintf(parent, sizeof parent, "%s/parent-%zu", g_out, i);
        snprintf(ppat, sizeof ppat, "%s/c/%%n", parent);
        if (g_rank == 0) {
            char c[4400];
            snprintf(c, sizeof c, "%s/c", parent);
            CHECK_MSG(mkdir(parent, 0755) == 0 && chmod(parent, parents[i].mode) == 0 &&
                          chown(parent, parents[i].uid, parents[i].uid) == 0 &&
                          mkdir(c, 0700) == 0,
                      "mkdir %s", c);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        snprintf(what, sizeof what, "foreign: a parent of uid %u, mode %04o", parents[i].uid,
                 (unsigned)parents[i].mode);
        begin_case("%s", what);
        int rc = new_manager(&mg, s, dir, ppat, 0, NULL);
        if (coll(rc, parents[i].ok ? CKPT_OK : CKPT_EINVAL, what) && !parents[i].ok)
            CHECK_MSG(strstr(g_msg, parents[i].msg) != NULL, "%s: message: %s", what, g_msg);
        if (rc == CKPT_OK) {
            ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
            tm_zero(m);
            if (coll(ckpt_manager_restore_latest(&res, mg), CKPT_OK, what)) {
                CHECK_MSG(res.restored && res.step == 30, "%s: restored step %lld", what,
                          (long long)res.step);
                check_values(m, 30, TM_RESTORED, what);
            }
        }
        ckpt_manager_free(mg);
        mg = NULL;
    }
}

/* ---- private, two-jobs -------------------------------------------------------------------- */

/* Rank 0: every entry below `dir` (one level of subdirectories) has no group or other bits. */
static void expect_private(const char *dir, const char *what)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "%s: opendir %s", what, dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (lstat(p, &st) != 0)
            continue;
        n++;
        CHECK_MSG(!(st.st_mode & 077), "%s: %s has mode %04o", what, p,
                  (unsigned)(st.st_mode & 07777));
        if (S_ISDIR(st.st_mode))
            expect_private(p, what);
    }
    if (d)
        closedir(d);
}

/* Rank 0: lines of `dir`/metrics.jsonl (-1: no file). */
static int metrics_lines(const char *dir)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static void test_two_jobs(ckpt_saver *s, ckpt_saver *s2, tm_model *m, tm_model *m2)
{
    char d1[4200], d2[4200], cache[4200], pat[4300], what[300], user[4400];
    snprintf(d1, sizeof d1, "%s/job-a", g_out);
    snprintf(d2, sizeof d2, "%s/job-b", g_out);
    snprintf(cache, sizeof cache, "%s/shared-cache", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    begin_case("two-jobs: %s and %s on the cache %s", d1, d2, pat);
    ckpt_manager *a = NULL, *b = NULL;
    if (!coll(new_manager(&a, s, d1, pat, 0, NULL), CKPT_OK, "job a") ||
        !coll(new_manager(&b, s2, d2, pat, 0, NULL), CKPT_OK, "job b"))
        goto out;
    /* a user's own file in node 0's cache directory, named like a checkpoint's */
    node_base_dir(user, sizeof user, cache, 0);
    strncat(user, "/ckpt-1.data-00000-of-00001", sizeof user - strlen(user) - 1);
    if (g_rank == 0) {
        int fd = open(user, O_WRONLY | O_CREAT | O_EXCL, 0600);
        CHECK_MSG(fd >= 0 && write(fd, "mine", 4) == 4, "write %s", user);
        if (fd >= 0)
            close(fd);
    }
    /* in turn: a at 10, b at 100, 110, 120 (b's cache keeps 2 and drops its ckpt-1), a at 20 */
    if (!coll(save_steps(a, s, m, 10, 1), CKPT_OK, "a saves step 10") ||
        !coll(save_steps(b, s2, m2, 100, 3), CKPT_OK, "b saves steps 100..120") ||
        !coll(save_steps(a, s, m, 20, 1), CKPT_OK, "a saves step 20"))
        goto out;
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        for (int k = 0; k < g_nnodes; k++) {
            char nd[4400];
            node_base_dir(nd, sizeof nd, cache, k);
            CHECK_MSG(entries(nd) == (k == 0 ? 3 : 2), "two-jobs: node %d's cache holds %d "
                      "entries, want %d (two jobs' subdirectories%s)", k, entries(nd),
                      k == 0 ? 3 : 2, k == 0 ? " and the user's file" : "");
            expect_private(nd, "two-jobs: private");
            char p[4500];
            snprintf(p, sizeof p, "%s/metrics.jsonl", nd);
            CHECK_MSG(!exists(p), "two-jobs: %s exists", p);
        }
        CHECK_MSG(metrics_lines(d1) == 2 && metrics_lines(d2) == 3,
                  "two-jobs: metrics lines %d in %s (want 2), %d in %s (want 3)",
                  metrics_lines(d1), d1, metrics_lines(d2), d2);
        CHECK_MSG(exists(user), "two-jobs: the user's %s was removed", user);
    }
    ckpt_manager_free(a);
    ckpt_manager_free(b);
    a = b = NULL;
    /* new managers: each restores its own newest from the cache (b's counter 3 is newer than
     * a's 2: a must not take it) */
    snprintf(what, sizeof what, "two-jobs: job a restores");
    begin_case("%s", what);
    ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
    if (coll(new_manager(&a, s, d1, pat, 0, NULL), CKPT_OK, what)) {
        tm_zero(m);
        if (coll(ckpt_manager_restore_latest(&res, a), CKPT_OK, what)) {
            CHECK_MSG(res.restored && res.step == 20 && strstr(res.prefix, cache) == res.prefix,
                      "%s: restored %d step %lld from %s", what, res.restored,
                      (long long)res.step, res.prefix);
            check_values(m, 20, TM_RESTORED, what);
        }
    }
    snprintf(what, sizeof what, "two-jobs: job b restores");
    begin_case("%s", what);
    if (coll(new_manager(&b, s2, d2, pat, 0, NULL), CKPT_OK, what)) {
        tm_zero(m2);
        if (coll(ckpt_manager_restore_latest(&res, b), CKPT_OK, what)) {
            CHECK_MSG(res.restored && res.step == 120, "%s: restored %d step %lld", what,
                      res.restored, (long long)res.step);
            check_values(m2, 120, TM_RESTORED, what);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0)
        CHECK_MSG(exists(user), "two-jobs: the user's %s was removed", user);
out:
    ckpt_manager_free(a);
    ckpt_manager_free(b);
}

/* ---- copy -------------------------------------------------------------------------------- */

/* Rank 0: `dir`/identity holds `text` (created). */
static void write_identity(const char *dir, const char *text)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/identity", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK_MSG(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write %s", p);
    if (fd >= 0)
        close(fd);
}

static void test_copy(ckpt_saver *s, ckpt_saver *s2, tm_model *m)
{
    char d1[4200], d2[4200], d3[4200], d4[4200], pat[4300], what[300];
    snprintf(d1, sizeof d1, "%s/copy-a", g_out);
    snprintf(d2, sizeof d2, "%s/copy-b", g_out);
    snprintf(d3, sizeof d3, "%s/copy-c", g_out);
    snprintf(d4, sizeof d4, "%s/copy-d", g_out);
    snprintf(pat, sizeof pat, "%s/copy-cache/%%n", g_out);
    begin_case("copy: %s, then its copy %s, on the cache %s", d1, d2, pat);
    ckpt_manager *a = NULL, *b = NULL;
    if (!coll(new_manager(&a, s, d1, pat, 0, NULL), CKPT_OK, "the original's job") ||
        !coll(save_steps(a, s, m, 10, 1), CKPT_OK, "a save"))
        goto out;
    make_dir(d2);
    if (g_rank == 0) { /* cp -a of the directory, as far as the identity goes */
        char from[4400];
        snprintf(from, sizeof from, "%s/identity", d1);
        unsigned char *buf = NULL;
        char text[512];
        long n = slurp(from, &buf);
        CHECK_MSG(n > 0 && n < (long)sizeof text, "read %s", from);
        if (n > 0 && n < (long)sizeof text) {
            memcpy(text, buf, (size_t)n);
            text[n] = '\0';
            write_identity(d2, text);
        }
        free(buf);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* the copy's identity names another directory's inode: it gets its own, and its job neither
     * restores nor waits for the original's cache copies */
    snprintf(what, sizeof what, "copy: a job on a copy while the original's runs");
    begin_case("%s", what);
    if (coll(new_manager(&b, s2, d2, pat, 0, NULL), CKPT_OK, what)) {
        ckpt_manager_restore_result res = CKPT_MANAGER_RESTORE_RESULT_INIT;
        if (coll(ckpt_manager_restore_latest(&res, b), CKPT_OK, what))
            CHECK_MSG(!res.restored, "%s: the copy restored %s", what, res.prefix);
        if (g_rank == 0) {
            char p1[4400], p2[4400];
            unsigned char *x = NULL, *y = NULL;
            snprintf(p1, sizeof p1, "%s/identity", d1);
            snprintf(p2, sizeof p2, "%s/identity", d2);
            long nx = slurp(p1, &x), ny = slurp(p2, &y);
            CHECK_MSG(nx > 40 && ny > 40 && memcmp(x, y, 40) != 0,
                      "%s: the copy kept the identity", what);
            free(x);
            free(y);
        }
    }
    ckpt_manager_free(b);
    b = NULL;
    /* two directories given one identity by hand (no inode recorded): one job at a time may use
     * its node caches (CKPT_EBUSY naming the holder's pid), the other once it is gone */
    static const char id[] = "mpickpt-identity 0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f\n";
    make_dir(d3);
    make_dir(d4);
    if (g_rank == 0) {
        write_identity(d3, id);
        write_identity(d4, id);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ckpt_manager_free(a);
    a = NULL;
    snprintf(what, sizeof what, "copy: two directories of one identity at once");
    begin_case("%s", what);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    MPI_Bcast(pid, sizeof pid, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!coll(new_manager(&a, s, d3, pat, 0, NULL), CKPT_OK, "the first of one identity"))
        goto out;
    if (coll(new_manager(&b, s2, d4, pat, 0, NULL), CKPT_EBUSY, what))
        CHECK_MSG(strstr(g_msg, "mpickpt-0f0f") != NULL && strstr(g_msg, pid) != NULL,
                  "%s: message: %s", what, g_msg);
    ckpt_manager_free(b);
    b = NULL;
    ckpt_manager_free(a);
    a = NULL;
    snprintf(what, sizeof what, "copy: the second of one identity once the first is gone");
    begin_case("%s", what);
    coll(new_manager(&b, s2, d4, pat, 0, NULL), CKPT_OK, what);
out:
    ckpt_manager_free(a);
    ckpt_manager_free(b);
}

int main(int argc, char **argv)
{
    if (!cache_test_start(&argc, &argv, "test_cache_owner", &g_rank, &g_size, &g_out, &g_layout,
                          &g_k, &g_nnodes))
        return 2;
    make_dir(g_out);
    ckpt_saver *s = cache_new_saver(g_layout), *s2 = cache_new_saver(g_layout);
    tm_model m, m2;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    CHECK_OK(tm_init(&m2, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    register_or_die(&m2, s2);
    test_link_same(s, &m);
    test_foreign(s, &m);
    test_two_jobs(s, s2, &m, &m2);
    test_copy(s, s2, &m);
    ckpt_saver_free(s);
    ckpt_saver_free(s2);
    tm_free(&m);
    tm_free(&m2);
    return check_mpi_done("test_cache_owner");
}
