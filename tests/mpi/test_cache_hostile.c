/* Hostile entries in the cache level's directories (docs/security.md "The cache level",
 * docs/levels.md): nodes simulated with MPICKPT_RANKS_PER_NODE=K (ctest sets it), each node's
 * cache directory OUTDIR/cache-<tag>/<node>. Whoever can write a node's cache directory plants,
 * under a name the library is about to use there, a symbolic link to a victim (a directory
 * OUTDIR/victim outside every cache, holding victim.txt), a FIFO, a directory or a file.
 *
 *   test_cache_hostile OUTDIR LAYOUT      LAYOUT: per-rank or per-node; needs 2 nodes or more
 *
 * Cases (every library call's status the same code and message on every rank, coll(); after
 * each, the victim holds exactly its file with its own bytes; the values read back with the
 * tm_model helpers):
 *   partner   before a save with partner copies, every data file's partner copy name on its
 *             partner node planted: a link, a FIFO or a directory is never replaced (issue 29: a
 *             copy takes only a free name): the save fails with CKPT_EEXISTS on every rank naming
 *             the file, nothing of the save stays, the planted entries are left as they were,
 *             and once they are gone the same save commits with whole copies (regular files,
 *             byte for byte the owner's); the older committed checkpoint restores exactly after
 *             each
 *   index     the same for the index copy's name <name>.index on every non-chief node
 *   temp      the temp names of the partner copy's receive and of the index copy
 *             (<name>.tmp-<16 hex digits>, 64 random bits: this test makes getrandom(2) return
 *             zeros for the one save, so that the names can be planted): a link or a FIFO there
 *             fails the save on every rank (O_EXCL), the planted entry is left as it was, and the
 *             next save of the same name commits once it is gone
 *   fetch     a restore from a cache without redundancy (ranks off node 0 fetch node 0's pieces
 *             into fetch_<rank> of their node's directory) with fetch_<rank> planted as a link to
 *             the victim directory, a FIFO, a file, and a directory holding a link under the name
 *             of the file to fetch: the restore succeeds with the right values and the planted
 *             entry is gone (removed, not followed)
 *   rebuild   node 1's cache emptied, then links (FIFOs, directories) planted under the names the
 *             rebuild copies back (its own data file, the partner copy it holds): links and FIFOs
 *             are replaced by the rebuilt files and the values are right; directories fail the
 *             restore on every rank naming the file, and it succeeds once they are gone. A link
 *             planted under the index's name of a node that lost it (node 1, then node 0, the
 *             chief's) is replaced by the rebuilt index, so the node's copy serves when the other
 *             node is lost next.
 */

#include "mpi_check.h"
#include "cache_util.h"
#include "coll.h"
#include "fsutil.h" /* ckpt__temp_name: the check that getrandom is this program's */
#include "mpi_internal.h"
#include "mpickpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define begin_case(...) check_case(1, __VA_ARGS__)

static int g_rank, g_size, g_k, g_nnodes, g_nfiles;
static const char *g_out;
static ckpt_layout g_layout;
static char g_victim[4096], g_vfile[4200];
static const char VICTIM_TEXT[] = "the victim's own bytes\n";

/* ---- getrandom(2), made predictable on demand ------------------------------------------- */

/* The library's temp names take 64 bits of getrandom(2) (lib/fsutil.c ckpt__temp_name). This
 * program defines getrandom itself (exported: ENABLE_EXPORTS in tests/CMakeLists.txt), so that the
 * library's call lands here: zeros while g_zero_random is set, the kernel's bytes otherwise. */
static volatile int g_zero_random;

ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
    if (g_zero_random) {
        memset(buf, 0, len);
        return (ssize_t)len;
    }
    return (ssize_t)syscall(SYS_getrandom, buf, len, flags);
}

/* ---- nodes, names, files ---------------------------------------------------------------- */

static int node_of(int r)
{
    return r / g_k;
}

/* Data file f of checkpoint `base`, and the node that wrote it. */
static void file_name(char *out, size_t n, const char *base, int f)
{
    snprintf(out, n, "%s.data-%05d-of-%05d", base, f, g_nfiles);
}

static int home_of(int f)
{
    return g_layout == CKPT_LAYOUT_PER_NODE ? f : node_of(f);
}

static void entry(char *out, size_t n, const char *cache, int node, const char *name)
{
    char d[4200];
    node_dir(d, sizeof d, cache, node);
    snprintf(out, n, "%s/%s", d, name);
}

/* Rank 0: the kind of `path` (S_IFREG, S_IFLNK, ...; 0 when missing), not followed. */
static unsigned kind_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? (unsigned)(st.st_mode & S_IFMT) : 0u;
}

/* Rank 0: `a` and `b` are regular files with the same bytes. */
static int same_file(const char *a, const char *b)
{
    unsigned char *x = NULL, *y = NULL;
    long n = slurp(a, &x), m = slurp(b, &y);
    int same = n >= 0 && n == m && memcmp(x, y, (size_t)n) == 0;
    free(x);
    free(y);
    return same;
}

static int rm_below(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return ftw->level == 0 ? 0 : rm_entry(path, st, flag, ftw);
}

/* Rank 0: `path` removed whatever it is (links not followed). */
static void rm_any(const char *path)
{
    if (kind_of(path) == S_IFDIR)
        CHECK_MSG(nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "rm -rf %s", path);
    else if (kind_of(path))
        CHECK_MSG(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
}

/* Rank 0: everything in node k's cache directory removed (the directory stays), as a node whose
 * local disk was wiped. */
static void wipe_node(const char *cache, int k)
{
    char d[4200];
    node_dir(d, sizeof d, cache, k);
    CHECK_MSG(nftw(d, rm_below, 16, FTW_DEPTH | FTW_PHYS) == 0, "emptying %s failed", d);
}

typedef enum { P_LINK, P_FIFO, P_DIR, P_FILE, P_DIR_LINK } plant_kind;
static const char *const KIND_NAME[] = { "a link to the victim", "a FIFO", "a directory", "a file",
                                         "a directory holding a link to the victim" };

/* Rank 0 plants `kind` at `path` (whatever was there removed first). A link points at `target`;
 * P_DIR_LINK is a directory holding a link named `inner` to `target`. */
static void plant(plant_kind kind, const char *path, const char *target, const char *inner)
{
    if (g_rank != 0)
        return;
    rm_any(path);
    int ok = 0;
    char p[4600];
    switch (kind) {
    case P_LINK:
        ok = symlink(target, path) == 0;
        break;
    case P_FIFO:
        ok = mkfifo(path, 0644) == 0;
        break;
    case P_DIR:
        ok = mkdir(path, 0755) == 0;
        break;
    case P_FILE: {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        ok = fd >= 0 && write(fd, "planted\n", 8) == 8;
        if (fd >= 0)
            close(fd);
        break;
    }
    case P_DIR_LINK:
        snprintf(p, sizeof p, "%s/%s", path, inner);
        ok = mkdir(path, 0755) == 0 && symlink(target, p) == 0;
        break;
    }
    CHECK_MSG(ok, "planting %s at %s: %s", KIND_NAME[kind], path, strerror(errno));
}

/* The victim holds exactly victim.txt with its own bytes (rank 0 looks; every rank checks). */
static void victim_untouched(const char *what)
{
    int ok = 1;
    if (g_rank == 0) {
        unsigned char *b = NULL;
        long n = slurp(g_vfile, &b);
        ok = n == (long)strlen(VICTIM_TEXT) && memcmp(b, VICTIM_TEXT, (size_t)n) == 0;
        free(b);
        DIR *d = opendir(g_victim);
        int entries = 0;
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL)
            entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        if (d)
            closedir(d);
        ok &= d != NULL && entries == 1;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK_MSG(ok, "%s: the victim directory %s changed", what, g_victim);
}

/* 1 on every rank when `v` holds on rank 0. */
static int rank0_says(int v)
{
    MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return v;
}

/* Rank 0: no regular file of checkpoint `base` on any node (planted entries of other kinds are
 * the test's own). */
static int nothing_of(const char *cache, const char *base)
{
    if (g_rank != 0)
        return 1;
    char d[4200], p[4600], stem[300];
    snprintf(stem, sizeof stem, "%s.", base);
    int none = 1;
    for (int k = 0; k < g_nnodes; k++) {
        node_dir(d, sizeof d, cache, k);
        DIR *dd = opendir(d);
        struct dirent *de;
        while (dd && (de = readdir(dd)) != NULL) {
            snprintf(p, sizeof p, "%s/%s", d, de->d_name);
            if (strncmp(de->d_name, stem, strlen(stem)) == 0 && kind_of(p) == S_IFREG) {
                CHECK_MSG(0, "node %d still holds %s of the failed save", k, de->d_name);
                none = 0;
            }
        }
        if (dd)
            closedir(dd);
    }
    return none;
}

/* ---- saves and restores ----------------------------------------------------------------- */

static ckpt_saver *new_saver(void)
{
    return cache_new_saver(g_layout);
}

/* A save of the model at `step` to the cache as `base` (its commit included). */
static int save_cache(ckpt_saver *s, tm_model *m, const char *base, int64_t step)
{
    tm_fill(m, step);
    ckpt_save_info info = { .epoch = 0, .step = step };
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    so.counter = step;
    int rc = ckpt__saver_save_cache(s, base, &info, &so);
    return rc == CKPT_OK ? ckpt_saver_sync(s) : rc;
}

/* Restores `base` from the cache into a zeroed model: `expected` on every rank, and on success
 * the values of `step`. Returns 1 when the status was as expected. */
static int restore_cache(ckpt_saver *s, tm_model *m, const char *base, int64_t step, int expected,
                         const char *what)
{
    tm_zero(m);
    ckpt_restore_info ri;
    memset(&ri, 0, sizeof ri);
    int rc = ckpt__saver_restore_cache(s, base, NULL, &ri, NULL);
    int ok = coll(rc, expected, what);
    if (ok && rc == CKPT_OK) {
        check_values(m, step, TM_RESTORED, what);
        CHECK_MSG(ri.step == step, "%s: restore info step %lld, want %lld", what,
                  (long long)ri.step, (long long)step);
    }
    return ok;
}

static void older_restores(ckpt_saver *s, tm_model *m, const char *what)
{
    char w[300];
    snprintf(w, sizeof w, "%s: then the older ck-1 from the cache", what);
    restore_cache(s, m, "ck-1", 11, CKPT_OK, w);
}

/* pnode_of_file[f]: the node other than f's home that holds f's partner copy of ck-1 (rank 0
 * looks after the save, every rank gets it); -1 when none. */
static int g_pnode_of_file[1024];

static void find_partner_copies(const char *cache)
{
    for (int f = 0; f < g_nfiles && f < 1024; f++) {
        int at = -1;
        if (g_rank == 0) {
            char name[300], p[4600];
            file_name(name, sizeof name, "ck-1", f);
            for (int k = 0; k < g_nnodes; k++) {
                entry(p, sizeof p, cache, k, name);
                if (k != home_of(f) && kind_of(p) == S_IFREG)
                    at = k;
            }
            CHECK_MSG(at >= 0, "no partner copy of %s", name);
        }
        MPI_Bcast(&at, 1, MPI_INT, 0, MPI_COMM_WORLD);
        g_pnode_of_file[f] = at;
    }
}

/* Rank 0: every data file of `base` on its partner node is a regular file with its home's bytes,
 * and every non-chief node's index is a regular file with node 0's bytes. */
static int copies_whole(const char *cache, const char *base)
{
    if (g_rank != 0)
        return 1;
    int ok = 1;
    char name[300], a[4600], b[4600];
    for (int f = 0; f < g_nfiles; f++) {
        file_name(name, sizeof name, base, f);
        entry(a, sizeof a, cache, home_of(f), name);
        entry(b, sizeof b, cache, g_pnode_of_file[f], name);
        int same = same_file(a, b);
        CHECK_MSG(same, "%s on node %d is not a regular file with node %d's bytes", name,
                  g_pnode_of_file[f], home_of(f));
        ok &= same;
    }
    snprintf(name, sizeof name, "%s.index", base);
    entry(a, sizeof a, cache, 0, name);
    for (int k = 1; k < g_nnodes; k++) {
        entry(b, sizeof b, cache, k, name);
        int same = same_file(a, b);
        CHECK_MSG(same, "%s on node %d is not a regular file with node 0's bytes", name, k);
        ok &= same;
    }
    return ok;
}

/* ---- the cases ---------------------------------------------------------------------------- */

static int g_counter = 1; /* ck-<n> of the next save */

/* `where`: 0 the partner copies' names, 1 the index copies' names, 2 the partner copies' temp
 * names, 3 the index copies' temp names. Plants `kind` there, saves ck-<n>, and checks. */
static void planted_save(ckpt_saver *s, tm_model *m, const char *cache, int where,
                         plant_kind kind)
{
    static const char *const WHERE[] = { "partner copy names", "index copy names",
                                         "partner copy temp names", "index copy temp names" };
    char base[64], name[300], what[300];
    int n = ++g_counter;
    int64_t step = 10 + n;
    snprintf(base, sizeof base, "ck-%d", n);
    snprintf(what, sizeof what, "%s: %s planted at the %s", base, KIND_NAME[kind], WHERE[where]);
    begin_case("%s", what);
    /* the planted paths (rank 0), each removed afterwards */
    char planted[64][4600];
    int np = 0;
    if (where == 0 || where == 2)
        for (int f = 0; f < g_nfiles && np < 64; f++) {
            file_name(name, sizeof name, base, f);
            if (where == 2)
                strcat(name, ".tmp-0000000000000000");
            entry(planted[np++], sizeof planted[0], cache, g_pnode_of_file[f], name);
        }
    else
        for (int k = 1; k < g_nnodes && np < 64; k++) {
            snprintf(name, sizeof name, "%s.index%s", base, where == 3 ? ".tmp-0000000000000000"
                                                                      : "");
            entry(planted[np++], sizeof planted[0], cache, k, name);
        }
    for (int i = 0; i < np; i++)
        plant(kind, planted[i], g_vfile, NULL);
    MPI_Barrier(MPI_COMM_WORLD);

    g_zero_random = where >= 2;
    int rc = save_cache(s, m, base, step);
    g_zero_random = 0;
    /* a final name is taken only when free (a rename that never replaces), and a planted temp
     * name is never opened (O_EXCL): the save fails on every rank, whatever was planted */
    if (coll(rc, CKPT_EEXISTS, what)) {
        char want[320]; /* the failing rank's file (whichever rank the vote reports) */
        snprintf(want, sizeof want, "%s%s", base, where % 2 ? ".index" : ".data-");
        CHECK_MSG(strstr(g_msg, want) != NULL, "%s: the message does not name a %s...: %s", what,
                  want, g_msg);
    }
    victim_untouched(what);
    CHECK_MSG(rank0_says(nothing_of(cache, base)), "%s: the failed save left files", what);
    if (g_rank == 0) /* the planted entries are left as they were */
        for (int i = 0; i < np; i++)
            CHECK_MSG(kind_of(planted[i]) == (kind == P_LINK   ? S_IFLNK
                                              : kind == P_FIFO ? S_IFIFO
                                                               : S_IFDIR),
                      "%s: %s is no longer what was planted", what, planted[i]);
    if (g_rank == 0)
        for (int i = 0; i < np; i++)
            rm_any(planted[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    /* once they are gone, the same save commits, its copies whole, and restores */
    char w[320];
    snprintf(w, sizeof w, "%s: the same save once they are gone", what);
    g_zero_random = where >= 2;
    rc = save_cache(s, m, base, step);
    g_zero_random = 0;
    if (coll(rc, CKPT_OK, w)) {
        CHECK_MSG(rank0_says(copies_whole(cache, base)), "%s: the copies are not whole", w);
        snprintf(w, sizeof w, "%s: restore it from the cache", what);
        restore_cache(s, m, base, step, CKPT_OK, w);
    }
    older_restores(s, m, what);
}

static void case_saves(ckpt_saver *s, tm_model *m, const char *cache)
{
    static const plant_kind kinds[] = { P_LINK, P_FIFO, P_DIR };
    for (int where = 0; where < 2; where++)
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            planted_save(s, m, cache, where, kinds[i]);
    /* the temp names: predictable only with getrandom forced (the check below says it is) */
    char t[64] = "";
    g_zero_random = 1;
    int rc = ckpt__temp_name(t, sizeof t, "x");
    g_zero_random = 0;
    CHECK_MSG(rc == CKPT_OK && strcmp(t, "x.tmp-0000000000000000") == 0,
              "getrandom is not this program's: the temp name is %s", t);
    if (!all_true(rc == CKPT_OK && strcmp(t, "x.tmp-0000000000000000") == 0))
        return;
    for (int where = 2; where < 4; where++)
        for (size_t i = 0; i < 2; i++) /* a link, a FIFO */
            planted_save(s, m, cache, where, kinds[i]);
}

/* fetch_<rank> planted in every rank's node's directory before a restore from a cache without
 * redundancy: every rank off node 0 fetches node 0's pieces (the replicated tensors) there. */
static void case_fetch(void)
{
    char cache[4200], pat[4300], what[300], p[4600], inner[300];
    snprintf(cache, sizeof cache, "%s/cache-none", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    begin_case("fetch: a cache without redundancy");
    ckpt_saver *s = new_saver();
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    if (!coll(ckpt__saver_cache_init(s, pat, CKPT__REDUNDANCY_NONE, NULL, CACHE_TEST_ID, NULL),
              CKPT_OK, "ckpt__saver_cache_init, no redundancy") ||
        !coll(save_cache(s, &m, "nf-1", 21), CKPT_OK, "save nf-1"))
        goto done;
    file_name(inner, sizeof inner, "nf-1", 0); /* node 0's file, which the others fetch from */
    static const plant_kind kinds[] = { P_LINK, P_FIFO, P_FILE, P_DIR_LINK };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        snprintf(what, sizeof what, "fetch: fetch_<rank> is %s", KIND_NAME[kinds[i]]);
        begin_case("%s", what);
        for (int r = 0; g_rank == 0 && r < g_size; r++) {
            char scratch[64];
            snprintf(scratch, sizeof scratch, "fetch_%d", r);
            entry(p, sizeof p, cache, node_of(r), scratch);
            plant(kinds[i], p, kinds[i] == P_DIR_LINK ? g_vfile : g_victim, inner);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        restore_cache(s, &m, "nf-1", 21, CKPT_OK, what);
        victim_untouched(what);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int r = 0; g_rank == 0 && r < g_size; r++) {
            char scratch[64];
            snprintf(scratch, sizeof scratch, "fetch_%d", r);
            entry(p, sizeof p, cache, node_of(r), scratch);
            /* a rank that fetched removed the planted entry (and its own scratch directory) */
            CHECK_MSG(node_of(r) == 0 || kind_of(p) == 0, "%s: %s is still there", what, p);
            rm_any(p);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
done:
    ckpt_saver_free(s);
    tm_free(&m);
}

/* Node 1's cache emptied, entries planted under the names the rebuild writes there. */
static void case_rebuild(ckpt_saver *s, tm_model *m, const char *cache)
{
    char what[300], own[300], held[300], p[4600], q[4600];
    int fo = -1, fh = -1;
    for (int f = 0; f < g_nfiles; f++) {
        if (fo < 0 && home_of(f) == 1)
            fo = f;
        if (fh < 0 && g_pnode_of_file[f] == 1)
            fh = f;
    }
    CHECK_MSG(fo >= 0 && fh >= 0, "node 1 holds no file of its own (%d) or no copy (%d)", fo, fh);
    if (fo < 0 || fh < 0)
        return;
    file_name(own, sizeof own, "ck-1", fo);
    file_name(held, sizeof held, "ck-1", fh);
    static const plant_kind kinds[] = { P_LINK, P_FIFO, P_DIR };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        snprintf(what, sizeof what, "rebuild: node 1 emptied, %s planted at %s and %s",
                 KIND_NAME[kinds[i]], own, held);
        begin_case("%s", what);
        entry(p, sizeof p, cache, 1, own);
        entry(q, sizeof q, cache, 1, held);
        if (g_rank == 0) {
            wipe_node(cache, 1);
            plant(kinds[i], p, g_vfile, NULL);
            plant(kinds[i], q, g_vfile, NULL);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (kinds[i] == P_DIR) { /* cannot be replaced: the restore fails naming one */
            if (restore_cache(s, m, "ck-1", 11, CKPT_ERROR, what))
                CHECK_MSG(strstr(g_msg, own) || strstr(g_msg, held),
                          "%s: the message names neither %s nor %s: %s", what, own, held, g_msg);
            victim_untouched(what);
            if (g_rank == 0) {
                rm_any(p);
                rm_any(q);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            char w[320];
            snprintf(w, sizeof w, "%s: once they are gone", what);
            restore_cache(s, m, "ck-1", 11, CKPT_OK, w);
        } else {
            restore_cache(s, m, "ck-1", 11, CKPT_OK, what);
        }
        victim_untouched(what);
        CHECK_MSG(rank0_says(copies_whole(cache, "ck-1")), "%s: node 1 was not rebuilt", what);
    }

    /* the index's name: a link, a FIFO or a directory there is no copy of the index. Node 1
     * (not the chief's), then node 0 (the chief reads its node's copy) lose it and get one in its
     * place; each time the other node's copy is the one left. A link or a FIFO is replaced by
     * the rebuilt index; a directory fails the restore naming it, until it is gone */
    static const struct {
        int node;
        plant_kind kind;
    } at_index[] = { { 1, P_LINK }, { 1, P_FIFO }, { 1, P_DIR }, { 0, P_LINK }, { 0, P_FIFO } };
    for (size_t i = 0; i < sizeof at_index / sizeof at_index[0]; i++) {
        int k = at_index[i].node;
        plant_kind kind = at_index[i].kind;
        snprintf(what, sizeof what, "rebuild: node %d emptied, %s planted at ck-1.index", k,
                 KIND_NAME[kind]);
        begin_case("%s", what);
        entry(p, sizeof p, cache, k, "ck-1.index");
        if (g_rank == 0) {
            wipe_node(cache, k);
            plant(kind, p, g_vfile, NULL);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        int expected = kind == P_DIR ? CKPT_ERROR : CKPT_OK;
        if (restore_cache(s, m, "ck-1", 11, expected, what) && expected != CKPT_OK)
            CHECK_MSG(strstr(g_msg, "ck-1.index") != NULL, "%s: the message does not name "
                                                           "ck-1.index: %s",
                      what, g_msg);
        victim_untouched(what);
        if (rank0_says(kind_of(p) != S_IFREG)) { /* left: removed, and node k rebuilt */
            if (g_rank == 0)
                rm_any(p);
            MPI_Barrier(MPI_COMM_WORLD);
            char w[320];
            snprintf(w, sizeof w, "%s: once it is gone", what);
            restore_cache(s, m, "ck-1", 11, CKPT_OK, w);
            CHECK_MSG(kind == P_DIR, "%s: the planted entry was left in place of the index",
                      what);
        }
        CHECK_MSG(rank0_says(copies_whole(cache, "ck-1")), "%s: node %d was not rebuilt", what,
                  k);
    }
}

int main(int argc, char **argv)
{
    if (!cache_test_start(&argc, &argv, "test_cache_hostile", &g_rank, &g_size, &g_out,
                          &g_layout, &g_k, &g_nnodes))
        return 2;
    g_nfiles = tm_data_files(g_layout, g_size);
    CHECK_MSG(g_nnodes >= 2, "needs 2 nodes or more (MPICKPT_RANKS_PER_NODE), has %d", g_nnodes);
    if (g_nnodes < 2)
        return check_mpi_done("test_cache_hostile");
    make_dir(g_out);
    snprintf(g_victim, sizeof g_victim, "%s/victim", g_out);
    snprintf(g_vfile, sizeof g_vfile, "%s/victim.txt", g_victim);
    make_dir(g_victim);
    if (g_rank == 0) {
        FILE *f = fopen(g_vfile, "w");
        CHECK_MSG(f && fputs(VICTIM_TEXT, f) >= 0 && fclose(f) == 0, "cannot write %s", g_vfile);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    char cache[4200], pat[4300];
    snprintf(cache, sizeof cache, "%s/cache-partner", g_out);
    snprintf(pat, sizeof pat, "%s/%%n", cache);
    begin_case("partner: ck-1 saved with partner copies, %d nodes of %d ranks", g_nnodes, g_k);
    ckpt_saver *s = new_saver();
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    if (coll(ckpt__saver_cache_init(s, pat, CKPT__REDUNDANCY_PARTNER, NULL, CACHE_TEST_ID, NULL),
             CKPT_OK, "ckpt__saver_cache_init") &&
        coll(save_cache(s, &m, "ck-1", 11), CKPT_OK, "save ck-1")) {
        find_partner_copies(cache);
        restore_cache(s, &m, "ck-1", 11, CKPT_OK, "restore ck-1 from the cache");
        case_saves(s, &m, cache);
        case_rebuild(s, &m, cache);
    }
    ckpt_saver_free(s);
    tm_free(&m);
    case_fetch();
    return check_mpi_done("test_cache_hostile");
}
