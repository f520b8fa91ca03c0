/* Issue 12, "files that lie": data files whose datasets are not what mpickpt writes.
 *
 *   test_hostile_h5 [--only KIND...]     runs the tests (of those kinds) in $MPICKPT_TEST_DIR
 *   test_hostile_h5 --make DIR KIND...   writes DIR/<KIND>/ck, for test_hostile_cli.sh
 *
 * A valid checkpoint is written with ckpt_writer_*; then, for every kind of tests/hostile_h5.h,
 * a copy of it has its dataset /tensors/w replaced (external storage in /etc/passwd or in a FIFO,
 * soft and external links, virtual datasets, chunked/deflated/compact layouts, a group, the
 * /tensors group itself a link), and its index rewritten so that the data file's size and w's
 * CRC-32C match what HDF5 would now return. Reading w (whole, and a sub-slice), verifying and
 * checking the checkpoint must each fail with CKPT_ECORRUPT naming the data file, the dataset and
 * what was found, without blocking on a FIFO and without a byte of /etc/passwd reaching the
 * caller's buffer; the other tensors still read. A hang is caught by the test's CTest TIMEOUT. */
#include "check.h"
#include "fsutil.h"
#include "hostile_h5.h"
#include "mpickpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_NAME "ck.data-00000-of-00001"
#define W_ROWS 4
#define W_COLS 4
#define SENTINEL 0xA5

static char dir[4096];
static char fifo[4200];
static uint8_t *secret; /* /etc/passwd as it was when the test started */
static size_t secret_len;

static const char *last_msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e ? e->message : "";
}

static int32_t w_value(int i)
{
    return (int32_t)(i * 1000 + 1);
}

/* The checkpoint every variant starts from: w int32 [4,4] (the target), a scalar, an empty
 * tensor, and k float32 [4,2] in two row pieces (datasets /tensors/k#0_0 and /tensors/k#2_0). */
static int write_base(const char *prefix)
{
    ckpt_writer *w = NULL;
    int rc = ckpt_writer_open(&w, prefix, NULL);
    int64_t dw[2] = {W_ROWS, W_COLS}, de[2] = {3, 0}, dk[2] = {4, 2};
    ckpt_shape sw, ss, se, sk;
    ckpt_shape_init(&sw, 2, dw);
    ckpt_shape_init(&ss, 0, NULL);
    ckpt_shape_init(&se, 2, de);
    ckpt_shape_init(&sk, 2, dk);
    int32_t wv[W_ROWS * W_COLS];
    for (int i = 0; i < W_ROWS * W_COLS; i++)
        wv[i] = w_value(i);
    double pi = 3.25;
    float none = 0, kv[8];
    if (rc == CKPT_OK)
        rc = ckpt_writer_add(w, "w", CKPT_INT32, &sw, NULL, wv);
    if (rc == CKPT_OK)
        rc = ckpt_writer_add(w, "s", CKPT_FLOAT64, &ss, NULL, &pi);
    if (rc == CKPT_OK)
        rc = ckpt_writer_add(w, "e", CKPT_FLOAT32, &se, NULL, &none);
    for (int p = 0; p < 2 && rc == CKPT_OK; p++) {
        int64_t st[2] = {2 * p, 0}, ct[2] = {2, 2};
        ckpt_slice sl;
        ckpt_slice_init(&sl, 2, st, ct);
        for (int i = 0; i < 4; i++)
            kv[i] = (float)(4 * p + i) + 0.5f;
        rc = ckpt_writer_add(w, "k", CKPT_FLOAT32, &sk, &sl, kv);
    }
    if (rc == CKPT_OK)
        rc = ckpt_writer_commit(w);
    ckpt_writer_free(w);
    return rc;
}

/* Reads every tensor but w and checks its values. */
static void check_others(ckpt_reader *r, const char *what)
{
    double s = 0;
    float e = 0, k[8];
    CHECK_OK(ckpt_reader_read(r, "s", CKPT_FLOAT64, NULL, &s, sizeof s));
    CHECK_MSG(s == 3.25, "%s: s = %g", what, s);
    CHECK_OK(ckpt_reader_read(r, "e", CKPT_FLOAT32, NULL, &e, 0));
    CHECK_OK(ckpt_reader_read(r, "k", CKPT_FLOAT32, NULL, k, sizeof k));
    for (int i = 0; i < 8; i++)
        CHECK_MSG(k[i] == (float)i + 0.5f, "%s: k[%d] = %g", what, i, (double)k[i]);
}

/* A copy of the base checkpoint `base` (a prefix) as DIR/<name>/ck, rewritten as `kind` says. */
static int make_variant(char *prefix, size_t size, const char *root, const char *base,
                        hostile_kind kind)
{
    char vdir[4300], src[4400], dst[4400], data[4400];
    snprintf(vdir, sizeof vdir, "%s/%s", root, hostile_names[kind]);
    snprintf(prefix, size, "%s/ck", vdir);
    if (ckpt__rmtree(vdir) != CKPT_OK || ckpt__mkdir_p(vdir, 0755) != CKPT_OK)
        return -1;
    snprintf(src, sizeof src, "%s.index", base);
    snprintf(dst, sizeof dst, "%s.index", prefix);
    if (hostile_copy_file(src, dst) != 0)
        return -1;
    snprintf(src, sizeof src, "%s.%s", base, "data-00000-of-00001");
    snprintf(data, sizeof data, "%s/%s", vdir, DATA_NAME);
    if (hostile_copy_file(src, data) != 0)
        return -1;
    uint8_t *bytes;
    size_t n;
    if (hostile_apply(data, "/tensors/w", kind, fifo, &bytes, &n) != 0)
        return -1;
    int rc = hostile_fix_index(dst, DATA_NAME, data, "/tensors/w", bytes, n);
    free(bytes);
    return rc;
}

typedef struct verify_seen {
    int bad;
    int w_bad;
    char w_msg[2048];
} verify_seen;

static int on_bad(const char *tensor, size_t piece, const char *file, int code, const char *message,
                  void *payload)
{
    verify_seen *v = payload;
    (void)piece;
    (void)file;
    v->bad++;
    if (strcmp(tensor, "w") == 0 && code == CKPT_ECORRUPT) {
        v->w_bad++;
        snprintf(v->w_msg, sizeof v->w_msg, "%s", message);
    }
    return 0;
}

/* The message of a refused hostile dataset names the file, the dataset (or its group) and what
 * was found. */
static void check_message(const char *msg, hostile_kind kind, const char *what)
{
    const char *where = hostile_is_group_kind(kind) ? "/tensors" : "/tensors/w";
    CHECK_MSG(strstr(msg, DATA_NAME) && strstr(msg, where) && strstr(msg, hostile_found[kind]),
              "%s: %s: message should name %s, %s and say '%s': %s", hostile_names[kind], what,
              DATA_NAME, where, hostile_found[kind], msg);
}

static int all_sentinel(const void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((const uint8_t *)buf)[i] != SENTINEL)
            return 0;
    return 1;
}

static void test_kind(const char *base, hostile_kind kind)
{
    char prefix[4400];
    printf("-- %s\n", hostile_names[kind]);
    fflush(stdout); /* a hang shows which variant it was */
    CHECK_MSG(make_variant(prefix, sizeof prefix, dir, base, kind) == 0, "%s: cannot make it",
              hostile_names[kind]);

    ckpt_reader *r = NULL;
    /* Sizes and CRCs agree with the index: open succeeds, only reading can tell. */
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (!r)
        return;
    int32_t buf[W_ROWS * W_COLS];
    memset(buf, SENTINEL, sizeof buf);
    CHECK_RC(ckpt_reader_read(r, "w", CKPT_INT32, NULL, buf, sizeof buf), CKPT_ECORRUPT);
    check_message(last_msg(), kind, "read");
    CHECK_MSG(all_sentinel(buf, sizeof buf), "%s: read wrote into the caller's buffer",
              hostile_names[kind]);
    CHECK(!hostile_holds_secret(buf, sizeof buf, secret, secret_len, 8));

    /* A sub-slice (rows 1-2): the piece would go through the reader's scratch buffer. */
    int64_t st[2] = {1, 0}, ct[2] = {2, W_COLS};
    ckpt_slice sub;
    ckpt_slice_init(&sub, 2, st, ct);
    memset(buf, SENTINEL, sizeof buf);
    CHECK_RC(ckpt_reader_read(r, "w", CKPT_INT32, &sub, buf, 2 * W_COLS * sizeof(int32_t)),
             CKPT_ECORRUPT);
    check_message(last_msg(), kind, "sub-slice read");
    CHECK(all_sentinel(buf, sizeof buf));

    /* The other tensors live in datasets that are still what the format writes. */
    if (!hostile_is_group_kind(kind))
        check_others(r, hostile_names[kind]);

    verify_seen v = {0, 0, ""};
    CHECK_RC(ckpt_reader_verify(r, on_bad, &v), CKPT_ECORRUPT);
    CHECK_EQ_INT(v.w_bad, 1);
    check_message(v.w_msg, kind, "verify");
    /* every piece of the file is bad when /tensors itself is a link; only w's otherwise */
    CHECK_EQ_INT(v.bad, hostile_is_group_kind(kind) ? 5 : 1);

    verify_seen c = {0, 0, ""};
    CHECK_RC(ckpt_reader_check(r, on_bad, &c), CKPT_ECORRUPT);
    CHECK_EQ_INT(c.w_bad, 1);
    check_message(c.w_msg, kind, "check");
    ckpt_reader_free(r);

    /* A fresh reader whose first call is verify (nothing cached from the reads above). */
    r = NULL;
    CHECK_OK(ckpt_reader_open(&r, prefix));
    if (r) {
        verify_seen v2 = {0, 0, ""};
        CHECK_RC(ckpt_reader_verify(r, on_bad, &v2), CKPT_ECORRUPT);
        check_message(v2.w_msg, kind, "verify of a fresh reader");
        ckpt_reader_free(r);
    }
}

/* The base checkpoint reads, verifies and checks: scalar, zero-element and partitioned
 * datasets are what the format writes. */
static void test_base(const char *base)
{
    ckpt_reader *r = NULL;
    CHECK_OK(ckpt_reader_open(&r, base));
    if (!r)
        return;
    int32_t buf[W_ROWS * W_COLS];
    CHECK_OK(ckpt_reader_read(r, "w", CKPT_INT32, NULL, buf, sizeof buf));
    for (int i = 0; i < W_ROWS * W_COLS; i++)
        CHECK_EQ_INT(buf[i], w_value(i));
    check_others(r, "base");
    CHECK_OK(ckpt_reader_verify(r, NULL, NULL));
    CHECK_OK(ckpt_reader_check(r, NULL, NULL));
    ckpt_reader_free(r);
}

static int make_fifo(const char *root)
{
    snprintf(fifo, sizeof fifo, "%s/fifo", root);
    if (mkfifo(fifo, 0600) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkfifo %s: %s\n", fifo, strerror(errno));
        return -1;
    }
    return 0;
}

/* --make DIR KIND...: the base checkpoint DIR/base/ck and the variants DIR/<KIND>/ck. */
static int make_mode(int argc, char **argv)
{
    char base[4300], prefix[4400];
    const char *root = argv[2];
    snprintf(base, sizeof base, "%s/base/ck", root);
    snprintf(prefix, sizeof prefix, "%s/base", root);
    if (ckpt__mkdir_p(prefix, 0755) != CKPT_OK || make_fifo(root) != 0 ||
        write_base(base) != CKPT_OK) {
        fprintf(stderr, "test_hostile_h5: cannot write %s: %s\n", base, last_msg());
        return 1;
    }
    for (int i = 3; i < argc; i++) {
        hostile_kind k;
        if (hostile_kind_from_name(&k, argv[i]) != 0) {
            fprintf(stderr, "test_hostile_h5: unknown kind %s\n", argv[i]);
            return 2;
        }
        if (make_variant(prefix, sizeof prefix, root, base, k) != 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--make") == 0)
        return make_mode(argc, argv);
    int only[H_COUNT] = {0}, any_only = 0;
    for (int i = 2; argc >= 2 && strcmp(argv[1], "--only") == 0 && i < argc; i++) {
        hostile_kind k;
        if (hostile_kind_from_name(&k, argv[i]) != 0)
            argc = -1;
        else
            only[k] = any_only = 1;
    }
    if (argc != 1 && !any_only) {
        fprintf(stderr, "usage: test_hostile_h5 [--only KIND...] | --make DIR KIND...\n");
        return 2;
    }
    const char *env = getenv("MPICKPT_TEST_DIR");
    snprintf(dir, sizeof dir, "%s", env ? env : "/tmp/mpickpt_test_hostile_h5");
    ckpt__rmtree(dir);
    CHECK_OK(ckpt__mkdir_p(dir, 0755));
    secret = hostile_slurp(HOSTILE_SECRET, &secret_len);
    CHECK(secret && secret_len >= W_ROWS * W_COLS * sizeof(int32_t));
    CHECK(make_fifo(dir) == 0);

    char base[4200], bdir[4200];
    snprintf(bdir, sizeof bdir, "%s/base", dir);
    snprintf(base, sizeof base, "%s/ck", bdir);
    CHECK_OK(ckpt__mkdir_p(bdir, 0755));
    CHECK_OK(write_base(base));
    test_base(base);
    for (int k = 0; k < H_COUNT && secret; k++)
        if (!any_only || only[k])
            test_kind(base, (hostile_kind)k);

    /* Nothing here may ever have written through external storage. */
    size_t now_len = 0;
    uint8_t *now = hostile_slurp(HOSTILE_SECRET, &now_len);
    CHECK_MSG(now && now_len == secret_len && memcmp(now, secret, now_len) == 0,
              "%s changed during the test", HOSTILE_SECRET);
    free(now);
    free(secret);
    return CHECK_DONE();
}
