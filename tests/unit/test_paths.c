/* lib/paths.h without mpirun: the names of one save for several ranks and both layouts (in-flight
 * names carry the save's id), the prefixes refused, the data-file and temp-name recognisers gc and
 * the commit rely on (the old and the new in-flight names), the work directory of a checkpoint
 * directory, the in-flight directories (ckpt__temp_fresh/open/cleanup) among other saves'
 * directories, links and foreign files (never removed, never reused), and the manager's choice of
 * a free counter (ckpt__counter_free). */
#include "phases.h"

#include "paths.h"

#include <errno.h>
#include <fcntl.h>

#define ID 0x0123456789abcdefULL /* a save id, and how names show it */
#define IDS "0123456789abcdef"
#define ID2 0xfedcba9876543210ULL
#define ID2S "fedcba9876543210"

/* ---- names of a save ------------------------------------------------------------------------- */

#define CHECK_STR(a, b)                                                                        \
    CHECK_MSG(strcmp((a), (b)) == 0, "%s is '%s', expected '%s'", #a, (a), (b))

static void check_names(const char *prefix, int rank, int size, int shared, const char *dir,
                        const char *work, const char *base)
{
    ckpt__save_names n;
    char want[8192], temp[4200], data[512];
    CHECK_OK(ckpt__save_names_init(&n, prefix, rank, size, shared, ID));
    CHECK_STR(n.prefix, prefix);
    CHECK_STR(n.dir, dir);
    CHECK_STR(n.work, work);
    CHECK_STR(n.base, base);
    CHECK_STR(n.save_id, IDS);
    CHECK_STR(n.index_name, pathf(want, sizeof want, "%s.index", base));
    CHECK_STR(n.temp_name, pathf(want, sizeof want, "%s." IDS "_temp", base));
    CHECK_STR(n.chief_temp, pathf(temp, sizeof temp, "%s." IDS "_temp", prefix));
    CHECK_STR(n.worker_temp, pathf(want, sizeof want, "workertemp_%d." IDS, rank));
    CHECK_STR(n.reserve_name, pathf(want, sizeof want, ".reserve-%d", rank));
    CHECK_STR(n.pad_name, pathf(want, sizeof want, ".pad-%d", rank));
    CHECK_EQ_INT(n.shared, shared);
    if (shared)
        pathf(data, sizeof data, "%s.data-00000-of-00001", base);
    else
        pathf(data, sizeof data, "%s.data-%05d-of-%05d", base, rank, size);
    CHECK_STR(n.data_name, data);
    /* the chief works in <base>.<id>_temp, the others in <work>/workertemp_<r>.<id> (per-rank
     * layout; in the shared layout my_temp of a non-chief rank is used in no message) */
    if (rank == 0)
        CHECK_STR(n.my_temp, temp);
    else if (!shared)
        CHECK_STR(n.my_temp, pathf(want, sizeof want, "%s/workertemp_%d." IDS, work, rank));
    /* the shared file is in flight in the chief's temp dir whichever rank writes */
    CHECK_STR(n.my_file, pathf(want, sizeof want, "%s/%s", shared ? temp : n.my_temp, data));
    /* another save's names differ in every in-flight name, and only there */
    ckpt__save_names o;
    CHECK_OK(ckpt__save_names_init(&o, prefix, rank, size, shared, ID2));
    CHECK(strcmp(o.temp_name, n.temp_name) != 0 && strcmp(o.worker_temp, n.worker_temp) != 0 &&
          strcmp(o.my_file, n.my_file) != 0);
    CHECK_STR(o.data_name, n.data_name);
    CHECK_STR(o.index_name, n.index_name);
}

static void test_save_names(void)
{
    static const int ranks[] = { 0, 1, 3, 7 };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(ranks); i++) {
        /* the training-state layout: workertemp_<r> live next to chief/ */
        check_names("run/chief/ckpt-3", ranks[i], 8, 0, "run/chief", "run", "ckpt-3");
        check_names("run/chief/ckpt-3", ranks[i], 8, 1, "run/chief", "run", "ckpt-3");
        /* any other directory is its own work directory */
        check_names("/abs/out/model", ranks[i], 8, 0, "/abs/out", "/abs/out", "model");
        check_names("model", ranks[i], 8, 0, ".", ".", "model");
    }
    ckpt__save_names n;
    CHECK_OK(ckpt__save_names_init(&n, "run/chief/ckpt-3", 3, 8, 0, ID));
    CHECK_STR(n.data_name, "ckpt-3.data-00003-of-00008");
    CHECK_STR(n.my_file, "run/workertemp_3." IDS "/ckpt-3.data-00003-of-00008");
    CHECK_OK(ckpt__save_names_init(&n, "run/chief/ckpt-3", 0, 8, 0, ID));
    CHECK_STR(n.my_file, "run/chief/ckpt-3." IDS "_temp/ckpt-3.data-00000-of-00008");
    /* the id is always 16 digits */
    CHECK_OK(ckpt__save_names_init(&n, "run/chief/ckpt-3", 2, 8, 0, 0x2a));
    CHECK_STR(n.worker_temp, "workertemp_2.000000000000002a");
    CHECK_STR(n.temp_name, "ckpt-3.000000000000002a_temp");
    /* per-node: a member's file is in flight in its leader's directory of this save */
    CHECK_OK(ckpt__save_names_init(&n, "run/chief/ckpt-3", 3, 8, 0, ID));
    CHECK_OK(ckpt__save_names_node(&n, 1, 4, 2));
    CHECK_STR(n.node_temp, "run/workertemp_2." IDS);
    CHECK_STR(n.my_file, "run/workertemp_2." IDS "/ckpt-3.data-00001-of-00004");
    CHECK_OK(ckpt__save_names_node(&n, 0, 4, 0));
    CHECK_STR(n.node_temp, "run/chief/ckpt-3." IDS "_temp");
    /* more than 99999 ranks: the numbers grow past five digits */
    CHECK_OK(ckpt__save_names_init(&n, "d/x", 123456, 200000, 0, ID));
    CHECK_STR(n.data_name, "x.data-123456-of-200000");
    /* a directory named chief at the root, and a base that looks like a data file */
    check_names("/chief/a.data-00001-of-00002", 1, 2, 0, "/chief", "/",
                "a.data-00001-of-00002");

    /* the file name part: 1..200 safe bytes */
    char lng[400];
    memcpy(lng, "dir/", 4);
    memset(lng + 4, 'b', 200);
    lng[204] = '\0'; /* "dir/" + 200 bytes */
    CHECK_OK(ckpt__save_names_init(&n, lng, 0, 1, 0, ID));
    CHECK_EQ_INT(strlen(n.base), 200);
    lng[204] = 'b';
    lng[205] = '\0'; /* 201 */
    static const char *const bad[] = { "", "run/", "run/chief/", "/", "..", "run/..", ".",
                                       "run/.", NULL };
    for (int i = 0; bad[i]; i++) {
        ckpt_error_clear();
        CHECK_RC(ckpt__save_names_init(&n, bad[i], 0, 2, 0, ID), CKPT_EINVAL);
        CHECK_MSG(strstr(last_msg(), "1..200"), "'%s': message: %s", bad[i], last_msg());
    }
    CHECK_RC(ckpt__save_names_init(&n, lng, 0, 1, 0, ID), CKPT_EINVAL);
    CHECK_MSG(strstr(last_msg(), "1..200"), "message: %s", last_msg());
    /* a prefix longer than the buffers: refused, never truncated */
    char huge[5000];
    memset(huge, 'a', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    huge[100] = '/';
    CHECK_RC(ckpt__save_names_init(&n, huge, 0, 1, 0, ID), CKPT_EINVAL);
}

static void test_work_dir(void)
{
    static const struct {
        const char *dir, *work;
    } t[] = {
        { "chief", "." },         { "/chief", "/" },        { "a/b/chief", "a/b" },
        { "a/b", "a/b" },         { "/x/chief", "/x" },     { "a/chiefs", "a/chiefs" },
        { "a/mychief", "a/mychief" }, { "chief/a", "chief/a" }, { ".", "." },
    };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(t); i++) {
        char out[64] = "unset";
        CHECK_OK(ckpt__work_dir(out, sizeof out, t[i].dir));
        CHECK_MSG(strcmp(out, t[i].work) == 0, "work dir of '%s' is '%s', expected '%s'",
                  t[i].dir, out, t[i].work);
    }
    char small[4];
    CHECK_RC(ckpt__work_dir(small, sizeof small, "abcd/chief"), CKPT_EINVAL);
}

/* ---- recognisers ----------------------------------------------------------------------------- */

static void test_data_names(void)
{
    char out[64], name[64];
    CHECK_OK(ckpt__data_name(name, sizeof name, "m", 3, 8));
    CHECK_STR(name, "m.data-00003-of-00008");
    CHECK_RC(ckpt__data_name(name, 10, "m", 3, 8), CKPT_EINVAL);

    static const struct {
        const char *name, *base; /* base NULL: not a data file name */
    } t[] = {
        { "ckpt.data-00003-of-00008", "ckpt" },
        { "ckpt.data-00000-of-00001", "ckpt" },
        { "ckpt.data-123456-of-200000", "ckpt" },
        /* names may contain ".data-" themselves: the last one counts */
        { "my.data-set.data-00001-of-00002", "my.data-set" },
        { "x.data-00000-of-00001.data-00001-of-00002", "x.data-00000-of-00001" },
        { "ckpt.data-00008-of-00008", NULL }, /* shard >= count */
        { "ckpt.data-00009-of-00008", NULL },
        { "ckpt.data-0003-of-00008", NULL },  /* fewer than five digits */
        { "ckpt.data-00003-of-0008", NULL },
        { "ckpt.data-3-of-8", NULL },
        { "ckpt.data-00003-of-00008x", NULL },
        { "ckpt.data-00003-of-00008.tmp-0123456789abcdef", NULL },
        { "ckpt.data-00003_of-00008", NULL },
        { "ckpt.data--0003-of-00008", NULL },
        { ".data-00000-of-00001", NULL },     /* no base */
        { "ckpt.index", NULL },
        { "ckpt", NULL },
        { "", NULL },
    };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(t); i++) {
        strcpy(out, "unset");
        int got = ckpt__data_file_base(out, sizeof out, t[i].name);
        CHECK_MSG(got == (t[i].base != NULL), "ckpt__data_file_base('%s') = %d", t[i].name, got);
        if (t[i].base && got)
            CHECK_MSG(strcmp(out, t[i].base) == 0, "base of '%s' is '%s', expected '%s'",
                      t[i].name, out, t[i].base);
        /* what gc takes for a data file is what may sit in a temp dir of ours */
        CHECK_EQ_INT(ckpt__is_temp_content_name(t[i].name), t[i].base != NULL);
    }
    /* the base must fit the caller's buffer (with its NUL) */
    CHECK_EQ_INT(ckpt__data_file_base(out, 4, "ckpt.data-00000-of-00001"), 0);
    CHECK_EQ_INT(ckpt__data_file_base(out, 5, "ckpt.data-00000-of-00001"), 1);
    CHECK_STR(out, "ckpt");

    /* the rank of a data file of a given checkpoint, for the chief's commit */
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00003-of-00008", "ckpt", 8), 3);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00000-of-00008", "ckpt", 8), 0);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00007-of-00008", "ckpt", 8), 7);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00003-of-00008", "ckpt", 3), -1);
    /* N must be the world size: a file of another save size is not this save's */
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00003-of-00008", "ckpt", 4), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00003-of-00008junk", "ckpt", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-3-of-8", "ckpt", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt2.data-00003-of-00008", "ckpt", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00003-of-00008", "ckpt2", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data-00003-of-00008", "ck", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.index", "ckpt", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("ckpt.data--0001-of-00008", "ckpt", 8), -1);
    CHECK_EQ_INT(ckpt__data_name_rank("a.data-b.data-00001-of-00002", "a.data-b", 2), 1);
    CHECK_EQ_INT(ckpt__data_name_rank("a.data-b.data-00001-of-00002", "a", 2), -1);
    /* every name ckpt__data_name makes maps back to its rank */
    for (int r = 0; r < 12; r++) {
        CHECK_OK(ckpt__data_name(name, sizeof name, "m.data-x", r, 12));
        CHECK_EQ_INT(ckpt__data_name_rank(name, "m.data-x", 12), r);
        CHECK_EQ_INT(ckpt__data_file_base(out, sizeof out, name), 1);
        CHECK_STR(out, "m.data-x");
    }
    /* a node cache's data file of a job of any shape: its number and its count */
    int of = -7;
    CHECK_EQ_INT(ckpt__data_name_number("ckpt.data-00003-of-00008", "ckpt", &of), 3);
    CHECK_EQ_INT(of, 8);
    CHECK_EQ_INT(ckpt__data_name_number("ckpt.data-00000-of-00001", "ckpt", &of), 0);
    CHECK_EQ_INT(of, 1);
    CHECK_EQ_INT(ckpt__data_name_number("ckpt.data-3-of-8", "ckpt", &of), 3);
    CHECK_EQ_INT(of, 8);
    of = -7;
    CHECK_EQ_INT(ckpt__data_name_number("ckpt.data-00003-of-00008junk", "ckpt", &of), -1);
    CHECK_EQ_INT(ckpt__data_name_number("ckpt2.data-00003-of-00008", "ckpt", &of), -1);
    CHECK_EQ_INT(ckpt__data_name_number("ckpt.index", "ckpt", &of), -1);
    CHECK_EQ_INT(of, -7);
    CHECK_EQ_INT(ckpt__data_name_number("ckpt.data-00008-of-00008", "ckpt", &of), -1);
}

static void test_temp_names(void)
{
    static const struct {
        const char *name;
        int worker, content;
    } t[] = {
        { "workertemp_3", 1, 0 },
        { "workertemp_0", 1, 0 },
        { "workertemp_123456", 1, 0 },
        { "workertemp_", 0, 0 },
        { "workertemp_3a", 0, 0 },
        { "workertemp_-1", 0, 0 },
        { "workertemp_ 1", 0, 0 },
        { "Workertemp_3", 0, 0 },
        { "xworkertemp_3", 0, 0 },
        { "workertemp_3/", 0, 0 },
        { "workertemp3", 0, 0 },
        /* this version's: workertemp_<r>.<16 lowercase hex digits> */
        { "workertemp_3." IDS, 1, 0 },
        { "workertemp_0.0000000000000000", 1, 0 },
        { "workertemp_123456.ffffffffffffffff", 1, 0 },
        { "workertemp_3.0123456789ABCDEF", 0, 0 },
        { "workertemp_3.0123456789abcde", 0, 0 },
        { "workertemp_3.0123456789abcdef0", 0, 0 },
        { "workertemp_3.0123456789abcdeg", 0, 0 },
        { "workertemp_3.", 0, 0 },
        { "workertemp_." IDS, 0, 0 },
        { "workertemp_3a." IDS, 0, 0 },
        { "workertemp_3." IDS "/", 0, 0 },
        { "workertemp_3." IDS ".x", 0, 0 },
        { "workertemp_3.." IDS, 0, 0 },
        { "part-00000-of-00001", 0, 1 },
        { "part-00001-of-00002", 0, 0 },
        { ".reserve-3", 0, 1 },
        { ".reserve-0", 0, 1 },
        { ".reserve-", 0, 0 },
        { ".reserve-3x", 0, 0 },
        { ".reserve--3", 0, 0 },
        { ".pad-12", 0, 1 },
        { ".pad-", 0, 0 },
        { ".pad-x", 0, 0 },
        { "pad-1", 0, 0 },
        { "m.data-00001-of-00002", 0, 1 },
        { "m.index", 0, 0 },
        { "m.index.tmp-0123456789abcdef", 0, 0 },
        { "notes.txt", 0, 0 },
        { "..", 0, 0 },
        { "", 0, 0 },
    };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(t); i++) {
        CHECK_MSG(ckpt__is_worker_temp_name(t[i].name) == t[i].worker,
                  "ckpt__is_worker_temp_name('%s') != %d", t[i].name, t[i].worker);
        CHECK_MSG(ckpt__is_temp_content_name(t[i].name) == t[i].content,
                  "ckpt__is_temp_content_name('%s') != %d", t[i].name, t[i].content);
    }
    char w[64];
    ckpt__worker_temp_name(w, sizeof w, 42, IDS);
    CHECK_STR(w, "workertemp_42." IDS);
    CHECK_EQ_INT(ckpt__is_worker_temp_name(w), 1);
}

/* ---- in-flight directories ------------------------------------------------------------------- */

/* A victim directory outside the checkpoint directory with one file whose content must survive. */
static void make_victim(char *vdir, size_t size, const char *name)
{
    char p[4400];
    case_dir(vdir, size, name);
    CHECK(put_text(pathf(p, sizeof p, "%s/keep", vdir), "victim") == 0);
}

static int victim_intact(const char *vdir)
{
    char p[4400];
    return count_entries(vdir) == 1 && has_text(pathf(p, sizeof p, "%s/keep", vdir), "victim");
}

static void test_temp_fresh(void)
{
    char d[4200], prefix[4400], p[4400], vdir[4200];
    case_dir(d, sizeof d, "fresh");
    make_victim(vdir, sizeof vdir, "fresh_victim");
    pathf(prefix, sizeof prefix, "%s/ck", d);
    ckpt__save_names n, n2;
    CHECK_OK(ckpt__save_names_init(&n, prefix, 0, 2, 0, ID));
    CHECK_OK(ckpt__save_names_init(&n2, prefix, 0, 2, 0, ID2));
    int dirfd = -1, tempfd = -1, tempfd2 = -1;
    CHECK_OK(ckpt__dir_open(&dirfd, d));

    /* nothing there: a new empty <base>.<id>_temp, and tempfd is that directory */
    CHECK_OK(ckpt__temp_fresh(&n, dirfd, &tempfd, 0));
    CHECK(tempfd >= 0);
    CHECK_EQ_INT(kind_at(n.chief_temp), S_IFDIR);
    CHECK_EQ_INT(count_entries(n.chief_temp), 0);
    int fd = openat(tempfd, "probe", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0);
    ckpt__close(fd);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/probe", n.chief_temp)), S_IFREG);
    ckpt__close(tempfd);

    /* another save of the same prefix (another job's, alive or crashed): its own directory, and
     * the first one's is neither removed nor emptied */
    CHECK(put_text(pathf(p, sizeof p, "%s/%s", n.chief_temp, n.data_name), "job 1's data") == 0);
    CHECK_OK(ckpt__temp_fresh(&n2, dirfd, &tempfd2, 0));
    CHECK(tempfd2 >= 0);
    CHECK_EQ_INT(count_entries(n2.chief_temp), 0);
    CHECK(has_text(p, "job 1's data"));
    CHECK_EQ_INT(count_entries(n.chief_temp), 2);
    ckpt__close(tempfd2);
    /* the same save's name again (it exists): CKPT_EEXISTS naming it, its content untouched */
    tempfd = 123;
    ckpt_error_clear();
    CHECK_RC(ckpt__temp_fresh(&n, dirfd, &tempfd, 0), CKPT_EEXISTS);
    CHECK_EQ_INT(tempfd, -1);
    CHECK_MSG(strstr(last_msg(), n.temp_name) && strstr(last_msg(), "directory"), "message: %s",
              last_msg());
    CHECK(has_text(p, "job 1's data"));
    CHECK_OK(ckpt__rmtree(n.chief_temp));
    CHECK_OK(ckpt__rmtree(n2.chief_temp));

    /* an older version's <base>_temp (with leftovers, or a link to a victim): left as it is */
    CHECK(mkdir(pathf(p, sizeof p, "%s/ck_temp", d), 0755) == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/ck_temp/%s", d, n.data_name), "old") == 0);
    CHECK(symlink(vdir, pathf(p, sizeof p, "%s/ck-2_temp", d)) == 0);
    CHECK_OK(ckpt__temp_fresh(&n, dirfd, &tempfd, 0));
    ckpt__close(tempfd);
    CHECK(has_text(pathf(p, sizeof p, "%s/ck_temp/%s", d, n.data_name), "old"));
    CHECK_OK(ckpt__rmtree(n.chief_temp));
    CHECK_OK(ckpt__rmtree(pathf(p, sizeof p, "%s/ck_temp", d)));
    CHECK(unlink(pathf(p, sizeof p, "%s/ck-2_temp", d)) == 0);

    /* a committed checkpoint of that name: CKPT_EEXISTS unless replace; the index untouched */
    pathf(p, sizeof p, "%s/%s", d, n.index_name);
    CHECK(put_text(p, "committed") == 0);
    tempfd = 123;
    CHECK_RC(ckpt__temp_fresh(&n, dirfd, &tempfd, 0), CKPT_EEXISTS);
    CHECK_EQ_INT(tempfd, -1);
    CHECK_MSG(strstr(last_msg(), "ck.index"), "message: %s", last_msg());
    CHECK(has_text(p, "committed"));
    CHECK_EQ_INT(kind_at(n.chief_temp), 0);
    /* (the commit, not ckpt__temp_fresh, removes the old index when replacing) */
    CHECK_OK(ckpt__temp_fresh(&n, dirfd, &tempfd, 1));
    CHECK(tempfd >= 0);
    CHECK(has_text(p, "committed"));
    ckpt__close(tempfd);
    CHECK(unlink(p) == 0);
    CHECK_OK(ckpt__rmtree(n.chief_temp));

    /* this save's name taken by anything (a link, a file, a FIFO): CKPT_EEXISTS naming it and
     * what it is, nothing followed or removed */
    static const struct {
        const char *what, *kind;
    } bad[] = { { "link to a directory", "symbolic link" },
                { "link to a file", "symbolic link" },
                { "dangling link", "symbolic link" },
                { "file", "regular file" },
                { "fifo", "FIFO" } };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        char target[4400];
        if (i == 0)
            pathf(target, sizeof target, "%s", vdir);
        else if (i == 1)
            pathf(target, sizeof target, "%s/keep", vdir);
        else
            pathf(target, sizeof target, "%s/nowhere", vdir);
        if (i <= 2)
            CHECK(symlink(target, n.chief_temp) == 0);
        else if (i == 3)
            CHECK(put_text(n.chief_temp, "a file") == 0);
        else
            CHECK(mkfifo(n.chief_temp, 0644) == 0);
        unsigned before = kind_at(n.chief_temp);
        tempfd = 77;
        ckpt_error_clear();
        CHECK_RC(ckpt__temp_fresh(&n, dirfd, &tempfd, 0), CKPT_EEXISTS);
        CHECK_EQ_INT(tempfd, -1);
        CHECK_MSG(strstr(last_msg(), bad[i].kind) && strstr(last_msg(), n.temp_name),
                  "%s: message: %s", bad[i].what, last_msg());
        CHECK_MSG(kind_at(n.chief_temp) == before, "%s: the planted entry changed", bad[i].what);
        CHECK_MSG(victim_intact(vdir), "%s: the victim changed", bad[i].what);
        if (i == 3)
            CHECK(has_text(n.chief_temp, "a file"));
        CHECK(unlink(n.chief_temp) == 0);
    }
    ckpt__close(dirfd);
}

/* The work directory run/, the checkpoint directory run/chief. */
static void open_work(const char *d, int *dirfd, int *workfd)
{
    char chief[4400];
    CHECK_OK(ckpt__ckptdir_open(dirfd, workfd, pathf(chief, sizeof chief, "%s/chief", d), 1));
}

static void test_temp_open(void)
{
    char d[4200], prefix[4400], p[4400], vdir[4200];
    case_dir(d, sizeof d, "open/run");
    make_victim(vdir, sizeof vdir, "open_victim");
    pathf(prefix, sizeof prefix, "%s/chief/ck", d);
    int dirfd = -1, workfd = -1, tempfd = -1;
    open_work(d, &dirfd, &workfd);
    ckpt__save_names n3, n0, o3;
    CHECK_OK(ckpt__save_names_init(&n3, prefix, 3, 8, 0, ID));
    CHECK_OK(ckpt__save_names_init(&n0, prefix, 0, 8, 0, ID));
    CHECK_OK(ckpt__save_names_init(&o3, prefix, 3, 8, 0, ID2));
    CHECK_STR(n3.my_temp, pathf(p, sizeof p, "%s/workertemp_3." IDS, d));

    /* rank 3: workertemp_3.<id> in the work directory, created */
    CHECK_OK(ckpt__temp_open(&n3, 3, dirfd, workfd, &tempfd));
    CHECK(tempfd >= 0);
    CHECK_EQ_INT(kind_at(n3.my_temp), S_IFDIR);
    int fd = openat(tempfd, "probe", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0);
    ckpt__close(fd);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/probe", n3.my_temp)), S_IFREG);
    /* already open: kept */
    int before = tempfd;
    CHECK_OK(ckpt__temp_open(&n3, 3, dirfd, workfd, &tempfd));
    CHECK_EQ_INT(tempfd, before);
    ckpt__close(tempfd);
    /* another save's rank 3 (another job) has its own, next to it */
    tempfd = -1;
    CHECK_OK(ckpt__temp_open(&o3, 3, dirfd, workfd, &tempfd));
    CHECK_EQ_INT(count_entries(o3.my_temp), 0);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/probe", n3.my_temp)), S_IFREG);
    ckpt__close(tempfd);
    /* an existing workertemp_3.<id> is never reused: CKPT_EEXISTS, its content kept */
    tempfd = -1;
    ckpt_error_clear();
    CHECK_RC(ckpt__temp_open(&n3, 3, dirfd, workfd, &tempfd), CKPT_EEXISTS);
    CHECK_EQ_INT(tempfd, -1);
    CHECK_MSG(strstr(last_msg(), n3.worker_temp), "message: %s", last_msg());
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/probe", n3.my_temp)), S_IFREG);
    CHECK_OK(ckpt__rmtree(n3.my_temp));
    CHECK_OK(ckpt__rmtree(o3.my_temp));

    /* workertemp_5.<id> a link to a victim directory, or a file: CKPT_EEXISTS, nothing followed;
     * an older version's workertemp_5 that is a link: not used at all */
    ckpt__save_names n5;
    CHECK_OK(ckpt__save_names_init(&n5, prefix, 5, 8, 0, ID));
    CHECK(symlink(vdir, n5.my_temp) == 0);
    tempfd = -1;
    CHECK_RC(ckpt__temp_open(&n5, 5, dirfd, workfd, &tempfd), CKPT_EEXISTS);
    CHECK_EQ_INT(tempfd, -1);
    CHECK_MSG(strstr(last_msg(), "symbolic link") && strstr(last_msg(), n5.worker_temp),
              "message: %s", last_msg());
    CHECK_EQ_INT(kind_at(n5.my_temp), S_IFLNK);
    CHECK(victim_intact(vdir));
    CHECK(unlink(n5.my_temp) == 0);
    CHECK(put_text(n5.my_temp, "a file") == 0);
    CHECK_RC(ckpt__temp_open(&n5, 5, dirfd, workfd, &tempfd), CKPT_EEXISTS);
    CHECK(has_text(n5.my_temp, "a file"));
    CHECK(unlink(n5.my_temp) == 0);
    CHECK(symlink(vdir, pathf(p, sizeof p, "%s/workertemp_5", d)) == 0);
    CHECK_OK(ckpt__temp_open(&n5, 5, dirfd, workfd, &tempfd));
    CHECK(tempfd >= 0);
    ckpt__close(tempfd);
    CHECK_EQ_INT(kind_at(p), S_IFLNK);
    CHECK(victim_intact(vdir));
    CHECK(unlink(p) == 0);
    CHECK_OK(ckpt__rmtree(n5.my_temp));

    /* the chief opens <base>.<id>_temp, made by ckpt__temp_fresh: missing is an error, not
     * created; a link is refused */
    tempfd = -1;
    CHECK_RC(ckpt__temp_open(&n0, 0, dirfd, workfd, &tempfd), CKPT_ENOTFOUND);
    CHECK_EQ_INT(kind_at(n0.chief_temp), 0);
    CHECK(symlink(vdir, n0.chief_temp) == 0);
    CHECK_RC(ckpt__temp_open(&n0, 0, dirfd, workfd, &tempfd), CKPT_ECORRUPT);
    CHECK(victim_intact(vdir));
    CHECK(unlink(n0.chief_temp) == 0);
    CHECK_OK(ckpt__temp_fresh(&n0, dirfd, &tempfd, 0));
    ckpt__close(tempfd);
    tempfd = -1;
    CHECK_OK(ckpt__temp_open(&n0, 0, dirfd, workfd, &tempfd));
    CHECK(tempfd >= 0);
    ckpt__close(tempfd);

    /* shared layout: every rank writes into the chief's <base>.<id>_temp, no workertemp */
    ckpt__save_names s6;
    CHECK_OK(ckpt__save_names_init(&s6, prefix, 6, 8, 1, ID));
    tempfd = -1;
    CHECK_OK(ckpt__temp_open(&s6, 6, dirfd, workfd, &tempfd));
    CHECK(tempfd >= 0);
    fd = openat(tempfd, "probe6", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0);
    ckpt__close(fd);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/probe6", n0.chief_temp)), S_IFREG);
    CHECK_EQ_INT(count_prefixed(d, "workertemp_6"), 0);
    ckpt__close(tempfd);
    ckpt__close(dirfd);
    ckpt__close(workfd);
}

static void test_temp_cleanup(void)
{
    char d[4200], prefix[4400], p[4400], vdir[4200];
    case_dir(d, sizeof d, "cleanup/run");
    make_victim(vdir, sizeof vdir, "cleanup_victim");
    pathf(prefix, sizeof prefix, "%s/chief/ck", d);
    int dirfd = -1, workfd = -1, tempfd = -1, otherfd = -1;
    open_work(d, &dirfd, &workfd);
    ckpt__save_names n3, n0, s3, o3;
    CHECK_OK(ckpt__save_names_init(&n3, prefix, 3, 8, 0, ID));
    CHECK_OK(ckpt__save_names_init(&n0, prefix, 0, 8, 0, ID));
    CHECK_OK(ckpt__save_names_init(&s3, prefix, 3, 8, 1, ID));
    CHECK_OK(ckpt__save_names_init(&o3, prefix, 3, 8, 0, ID2));

    /* a worker: its whole workertemp_3.<id> goes (a link in it as an entry, its target kept);
     * another save's workertemp_3.<id2> and an older version's workertemp_3 stay as they are */
    CHECK_OK(ckpt__temp_open(&o3, 3, dirfd, workfd, &otherfd));
    CHECK(put_text(o3.my_file, "the other job's data") == 0);
    CHECK(mkdir(pathf(p, sizeof p, "%s/workertemp_3", d), 0755) == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/workertemp_3/%s", d, n3.data_name), "old") == 0);
    CHECK_OK(ckpt__temp_open(&n3, 3, dirfd, workfd, &tempfd));
    CHECK(put_text(n3.my_file, "data") == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/%s", n3.my_temp, n3.reserve_name), "r") == 0);
    char q[4400];
    CHECK(symlink(pathf(q, sizeof q, "%s/keep", vdir),
                  pathf(p, sizeof p, "%s/.pad-3", n3.my_temp)) == 0);
    ckpt__temp_cleanup(&n3, 3, dirfd, workfd, tempfd);
    ckpt__close(tempfd);
    CHECK_EQ_INT(kind_at(n3.my_temp), 0);
    CHECK(has_text(o3.my_file, "the other job's data"));
    CHECK(has_text(pathf(p, sizeof p, "%s/workertemp_3/%s", d, n3.data_name), "old"));
    CHECK(victim_intact(vdir));
    ckpt__temp_cleanup(&o3, 3, dirfd, workfd, otherfd);
    ckpt__close(otherfd);
    CHECK_EQ_INT(kind_at(o3.my_temp), 0);

    /* a worker that never made its temp dir (tempfd < 0) removes nothing */
    CHECK(mkdir(n3.my_temp, 0755) == 0);
    CHECK(put_text(n3.my_file, "data") == 0);
    ckpt__temp_cleanup(&n3, 3, dirfd, workfd, -1);
    CHECK(has_text(n3.my_file, "data"));
    CHECK_OK(ckpt__rmtree(n3.my_temp));

    /* the chief: its whole <base>.<id>_temp, but only one this save made (tempfd >= 0) */
    tempfd = -1;
    CHECK_OK(ckpt__temp_fresh(&n0, dirfd, &tempfd, 0));
    CHECK(put_text(n0.my_file, "data0") == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/.pad-0", n0.chief_temp), "pad") == 0);
    ckpt__temp_cleanup(&n0, 0, dirfd, workfd, -1);
    CHECK(has_text(n0.my_file, "data0"));
    ckpt__temp_cleanup(&n0, 0, dirfd, workfd, tempfd);
    ckpt__close(tempfd);
    CHECK_EQ_INT(kind_at(n0.chief_temp), 0);

    /* shared layout, a non-chief rank: only its reservation; the shared file is the chief's */
    tempfd = -1;
    CHECK_OK(ckpt__temp_fresh(&n0, dirfd, &tempfd, 0));
    ckpt__close(tempfd);
    tempfd = -1;
    CHECK_OK(ckpt__temp_open(&s3, 3, dirfd, workfd, &tempfd));
    CHECK(put_text(s3.my_file, "shared") == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/.reserve-3", s3.chief_temp), "r3") == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/.reserve-4", s3.chief_temp), "r4") == 0);
    ckpt__temp_cleanup(&s3, 3, dirfd, workfd, tempfd);
    ckpt__close(tempfd);
    CHECK(has_text(s3.my_file, "shared"));
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/.reserve-3", s3.chief_temp)), 0);
    CHECK(has_text(pathf(p, sizeof p, "%s/.reserve-4", s3.chief_temp), "r4"));
    CHECK_EQ_INT(count_prefixed(d, "workertemp_3."), 0);
    CHECK(victim_intact(vdir));
    ckpt__close(dirfd);
    ckpt__close(workfd);
}

/* ---- the manager's free counter -------------------------------------------------------------- */

#define MAX_WARN 256
static char g_warn[MAX_WARN][512];
static int g_nwarn;

static void warn_capture(ckpt_log_level level, const char *message, void *payload)
{
    (void)payload;
    if (level <= CKPT_LOG_WARN && g_nwarn < MAX_WARN)
        snprintf(g_warn[g_nwarn++], sizeof g_warn[0], "%s", message);
}

static int warned(const char *a, const char *b)
{
    for (int i = 0; i < g_nwarn; i++)
        if (strstr(g_warn[i], a) && (!b || strstr(g_warn[i], b)))
            return 1;
    return 0;
}

static void test_counter_free(void)
{
    char d1[4200], d2[4200], p[4400];
    case_dir(d1, sizeof d1, "counter/dir");
    case_dir(d2, sizeof d2, "counter/cache");
    /* in d1: 5 an index FIFO, 6 an in-flight directory of an older version, 7 a link under a data
     * file's name, 8 free; names that only look alike: 05, 8x, ckptx-8, ckpt8, 80 */
    CHECK(mkfifo(pathf(p, sizeof p, "%s/ckpt-5.index", d1), 0644) == 0);
    CHECK(mkdir(pathf(p, sizeof p, "%s/ckpt-6_temp", d1), 0755) == 0);
    CHECK(symlink("/nowhere", pathf(p, sizeof p, "%s/ckpt-7.data-00002-of-00003", d1)) == 0);
    static const char *const alike[] = { "ckpt-08.index", "ckpt-8x", "ckptx-8.index",
                                         "ckpt8.index",   "ckpt-80.index", "ckpt-" };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(alike); i++)
        CHECK(put_text(pathf(p, sizeof p, "%s/%s", d1, alike[i]), "x") == 0);
    int fds[2] = { -1, -1 };
    CHECK_OK(ckpt__dir_open(&fds[0], d1));
    CHECK_OK(ckpt__dir_open(&fds[1], d2));
    const char *shown[2] = { d1, d2 };
    ckpt_log_set(warn_capture, CKPT_LOG_WARN, NULL);

    int64_t next = 5;
    g_nwarn = 0;
    CHECK_OK(ckpt__counter_free(&next, fds, shown, 1, "ckpt"));
    CHECK_EQ_INT(next, 8);
    CHECK_EQ_INT(g_nwarn, 3);
    CHECK_MSG(warned("ckpt-5.index", "FIFO") && warned("ckpt-6_temp", "directory") &&
                  warned("ckpt-7.data-00002-of-00003", "symbolic link") && warned("ckpt-8", NULL),
              "warnings: %s | %s | %s", g_warn[0], g_warn[1], g_warn[2]);
    /* free: unchanged, no warning */
    next = 8;
    g_nwarn = 0;
    CHECK_OK(ckpt__counter_free(&next, fds, shown, 1, "ckpt"));
    CHECK_EQ_INT(next, 8);
    CHECK_EQ_INT(g_nwarn, 0);
    next = 1;
    CHECK_OK(ckpt__counter_free(&next, fds, shown, 1, "ckpt"));
    CHECK_EQ_INT(next, 1);
    /* a second directory: its names count too (the exact name, a new in-flight directory) */
    CHECK(put_text(pathf(p, sizeof p, "%s/ckpt-8", d2), "x") == 0);
    CHECK(mkdir(pathf(p, sizeof p, "%s/ckpt-9." IDS "_temp", d2), 0755) == 0);
    next = 5;
    g_nwarn = 0;
    CHECK_OK(ckpt__counter_free(&next, fds, shown, 2, "ckpt"));
    CHECK_EQ_INT(next, 10);
    CHECK_EQ_INT(g_nwarn, 5);
    CHECK(warned("ckpt-8 is taken", d2) && warned("ckpt-9." IDS "_temp", d2));
    /* another stem sees none of them */
    next = 5;
    CHECK_OK(ckpt__counter_free(&next, fds, shown, 2, "ck"));
    CHECK_EQ_INT(next, 5);

    /* CKPT__COUNTER_SKIP_MAX taken in a row: CKPT_EEXISTS naming the first, next unchanged */
    for (int k = 100; k < 100 + CKPT__COUNTER_SKIP_MAX; k++)
        CHECK(put_text(pathf(p, sizeof p, "%s/ckpt-%d.index", d1, k), "x") == 0);
    next = 100;
    g_nwarn = 0;
    ckpt_error_clear();
    CHECK_RC(ckpt__counter_free(&next, fds, shown, 2, "ckpt"), CKPT_EEXISTS);
    CHECK_EQ_INT(next, 100);
    CHECK_EQ_INT(g_nwarn, 0);
    CHECK_MSG(strstr(last_msg(), "ckpt-100.index") && strstr(last_msg(), d1), "message: %s",
              last_msg());
    /* one freed: taken, every one before it named */
    CHECK(unlink(pathf(p, sizeof p, "%s/ckpt-%d.index", d1, 99 + CKPT__COUNTER_SKIP_MAX)) == 0);
    CHECK_OK(ckpt__counter_free(&next, fds, shown, 2, "ckpt"));
    CHECK_EQ_INT(next, 99 + CKPT__COUNTER_SKIP_MAX);
    CHECK_EQ_INT(g_nwarn, CKPT__COUNTER_SKIP_MAX - 1);
    ckpt_log_set(NULL, CKPT_LOG_WARN, NULL);
    /* nothing was touched */
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-5.index", d1)), S_IFIFO);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-7.data-00002-of-00003", d1)), S_IFLNK);
    ckpt__close(fds[0]);
    ckpt__close(fds[1]);
}

int main(void)
{
    phases_init("test_paths");
    test_save_names();
    test_work_dir();
    test_data_names();
    test_temp_names();
    test_temp_fresh();
    test_temp_open();
    test_temp_cleanup();
    test_counter_free();
    return CHECK_DONE();
}
