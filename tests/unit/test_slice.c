/* Unit test of shapes, slices, slice-spec strings and the n-d slice copy. */
#include "check.h"
#include "internal.h"
#include "mpickpt/slice.h"

#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd(int64_t n) /* uniform-ish in [0, n) */
{
    return n > 0 ? (int64_t)(rng() % (uint64_t)n) : 0;
}

static ckpt_shape mkshape(int n, const int64_t *dims)
{
    ckpt_shape s;
    int rc = ckpt_shape_init(&s, n, dims);
    CHECK_OK(rc);
    return s;
}
static ckpt_slice mkslice(int n, const int64_t *start, const int64_t *count)
{
    ckpt_slice s;
    int rc = ckpt_slice_init(&s, n, start, count);
    CHECK_OK(rc);
    return s;
}

/* The last error message contains `part`. */
static int msg_has(const char *part)
{
    const ckpt_error *e = ckpt_error_last();
    return e && strstr(e->message, part) != NULL;
}

/* Parses a copy of `spec` in a buffer of exactly its size, so that ASan flags any read past the
 * NUL. */
static int parse(ckpt_shape *shape, ckpt_slice *slice, const char *spec)
{
    size_t n = strlen(spec) + 1;
    char *copy = malloc(n);
    if (!copy)
        return CKPT_ENOMEM;
    memcpy(copy, spec, n);
    ckpt_error_clear();
    int rc = ckpt_slice_spec_parse(shape, slice, copy);
    free(copy);
    return rc;
}

static void test_init_validate(void)
{
    ckpt_shape sh;
    ckpt_slice sl;
    int64_t dims[CKPT_MAX_DIMS + 1] = {4, 10, 0};
    int64_t neg[2] = {4, -1};
    CHECK_OK(ckpt_shape_init(&sh, 0, NULL));
    CHECK_EQ_INT(sh.ndims, 0);
    CHECK_OK(ckpt_shape_init(&sh, 3, dims));
    CHECK_EQ_INT(sh.ndims, 3);
    CHECK_EQ_INT(sh.dims[1], 10);
    CHECK_RC(ckpt_shape_init(&sh, -1, dims), CKPT_EINVAL);
    CHECK_RC(ckpt_shape_init(&sh, CKPT_MAX_DIMS + 1, dims), CKPT_EINVAL);
    CHECK_OK(ckpt_shape_init(&sh, CKPT_MAX_DIMS, dims));
    CHECK_RC(ckpt_shape_init(&sh, 2, neg), CKPT_EINVAL);
    CHECK(msg_has("dim 1"));
    CHECK_RC(ckpt_shape_init(&sh, 2, NULL), CKPT_EINVAL);

    int64_t st[2] = {1, 2}, ct[2] = {3, 4};
    CHECK_OK(ckpt_slice_init(&sl, 2, st, ct));
    CHECK_EQ_INT(sl.start[1], 2);
    CHECK_EQ_INT(sl.count[1], 4);
    CHECK_OK(ckpt_slice_init(&sl, 0, NULL, NULL));
    CHECK_RC(ckpt_slice_init(&sl, 2, neg, ct), CKPT_EINVAL);
    CHECK(msg_has("dim 1"));
    CHECK_RC(ckpt_slice_init(&sl, 2, st, neg), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_init(&sl, 17, st, ct), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_init(&sl, -1, st, ct), CKPT_EINVAL);
    int64_t big_s[1] = {INT64_MAX}, big_c[1] = {1};
    CHECK_RC(ckpt_slice_init(&sl, 1, big_s, big_c), CKPT_EINVAL); /* end overflows */

    /* validate */
    int64_t d2[2] = {4, 10};
    sh = mkshape(2, d2);
    ckpt_slice full;
    ckpt_slice_full(&full, &sh);
    CHECK_OK(ckpt_slice_validate(&full, &sh));
    CHECK(ckpt_slice_is_full(&full, &sh));
    int64_t s1[2] = {2, 0}, c1[2] = {2, 10};
    sl = mkslice(2, s1, c1);
    CHECK_OK(ckpt_slice_validate(&sl, &sh));
    CHECK(!ckpt_slice_is_full(&sl, &sh));
    int64_t s2[2] = {3, 0}, c2[2] = {1, 11};
    sl = mkslice(2, s2, c2);
    CHECK_RC(ckpt_slice_validate(&sl, &sh), CKPT_EINVAL);
    CHECK(msg_has("dim 1"));
    int64_t s3[2] = {4, 0}, c3[2] = {1, 1};
    sl = mkslice(2, s3, c3);
    CHECK_RC(ckpt_slice_validate(&sl, &sh), CKPT_EINVAL);
    CHECK(msg_has("dim 0"));
    int64_t s4[2] = {4, 10}, c4[2] = {0, 0}; /* empty slice at the very end is inside */
    sl = mkslice(2, s4, c4);
    CHECK_OK(ckpt_slice_validate(&sl, &sh));
    int64_t s5[1] = {0}, c5[1] = {4};
    sl = mkslice(1, s5, c5);
    CHECK_RC(ckpt_slice_validate(&sl, &sh), CKPT_EINVAL); /* rank mismatch */
    /* Hand-filled garbage is rejected, not trusted. */
    sl = full;
    sl.start[0] = INT64_MAX;
    CHECK_RC(ckpt_slice_validate(&sl, &sh), CKPT_EINVAL);
    sl = full;
    sl.count[1] = -1;
    CHECK_RC(ckpt_slice_validate(&sl, &sh), CKPT_EINVAL);
    sl = full;
    sl.ndims = 99;
    CHECK_RC(ckpt_slice_validate(&sl, &sh), CKPT_EINVAL);
    ckpt_shape badsh = sh;
    badsh.ndims = -3;
    CHECK_RC(ckpt_slice_validate(&full, &badsh), CKPT_EINVAL);

    /* Scalars. */
    ckpt_shape scalar = mkshape(0, NULL);
    ckpt_slice_full(&sl, &scalar);
    CHECK_EQ_INT(sl.ndims, 0);
    CHECK_OK(ckpt_slice_validate(&sl, &scalar));
    CHECK(ckpt_slice_is_full(&sl, &scalar));

    /* equal */
    ckpt_shape sh2 = mkshape(2, d2), sh3 = mkshape(1, d2);
    CHECK(ckpt_shape_equal(&sh, &sh2));
    CHECK(!ckpt_shape_equal(&sh, &sh3));
    sh2.dims[1] = 11;
    CHECK(!ckpt_shape_equal(&sh, &sh2));
    ckpt_slice a = mkslice(2, s1, c1), b = mkslice(2, s1, c1);
    CHECK(ckpt_slice_equal(&a, &b));
    b.count[0] = 1;
    CHECK(!ckpt_slice_equal(&a, &b));
    b = mkslice(1, s1, c1);
    CHECK(!ckpt_slice_equal(&a, &b));
}

static void test_num_elements(void)
{
    int64_t n = -1;
    ckpt_shape scalar = mkshape(0, NULL);
    CHECK_OK(ckpt_shape_num_elements(&n, &scalar));
    CHECK_EQ_INT(n, 1);
    int64_t d[3] = {4, 10, 3};
    ckpt_shape sh = mkshape(3, d);
    CHECK_OK(ckpt_shape_num_elements(&n, &sh));
    CHECK_EQ_INT(n, 120);
    int64_t dz[3] = {4, 0, 3};
    sh = mkshape(3, dz);
    CHECK_OK(ckpt_shape_num_elements(&n, &sh));
    CHECK_EQ_INT(n, 0);
    int64_t dbig[3] = {INT64_MAX, INT64_MAX, 0}; /* zero wins even though the rest overflows */
    sh = mkshape(3, dbig);
    CHECK_OK(ckpt_shape_num_elements(&n, &sh));
    CHECK_EQ_INT(n, 0);
    int64_t dov[2] = {(int64_t)1 << 32, (int64_t)1 << 31};
    sh = mkshape(2, dov);
    CHECK_RC(ckpt_shape_num_elements(&n, &sh), CKPT_EINVAL);
    int64_t dmax[2] = {(int64_t)1 << 31, ((int64_t)1 << 32) - 1};
    sh = mkshape(2, dmax);
    CHECK_OK(ckpt_shape_num_elements(&n, &sh));
    CHECK_EQ_INT(n, INT64_MAX - (((int64_t)1 << 31) - 1)); /* 2^63 - 2^31 */

    ckpt_slice sl;
    CHECK_OK(ckpt_slice_init(&sl, 0, NULL, NULL));
    CHECK_OK(ckpt_slice_num_elements(&n, &sl));
    CHECK_EQ_INT(n, 1);
    int64_t st[3] = {1, 2, 3}, ct[3] = {2, 3, 4};
    sl = mkslice(3, st, ct);
    CHECK_OK(ckpt_slice_num_elements(&n, &sl));
    CHECK_EQ_INT(n, 24);
    ct[1] = 0;
    sl = mkslice(3, st, ct);
    CHECK_OK(ckpt_slice_num_elements(&n, &sl));
    CHECK_EQ_INT(n, 0);
    int64_t z[2] = {0, 0};
    sl = mkslice(2, z, dov);
    CHECK_RC(ckpt_slice_num_elements(&n, &sl), CKPT_EINVAL);
}

static void test_intersect(void)
{
    ckpt_slice out;
    /* Overlap: [0,4)x[0,10) and [2,6)x[5,15) -> [2,4)x[5,10). */
    int64_t sa[2] = {0, 0}, ca[2] = {4, 10}, sb[2] = {2, 5}, cb[2] = {4, 10};
    ckpt_slice a = mkslice(2, sa, ca), b = mkslice(2, sb, cb);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &a, &b), 1);
    CHECK_EQ_INT(out.ndims, 2);
    CHECK(out.start[0] == 2 && out.count[0] == 2 && out.start[1] == 5 && out.count[1] == 5);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &b, &a), 1); /* symmetric */
    CHECK(out.start[0] == 2 && out.count[0] == 2 && out.start[1] == 5 && out.count[1] == 5);
    /* Containment. */
    int64_t sc[2] = {1, 1}, cc[2] = {1, 1};
    ckpt_slice c = mkslice(2, sc, cc);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &a, &c), 1);
    CHECK(ckpt_slice_equal(&out, &c));
    /* Touching: [0,4) and [4,8) in dim 0 share no element. */
    int64_t st[2] = {4, 0};
    ckpt_slice t = mkslice(2, st, ca);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &a, &t), 0);
    CHECK(out.count[0] == 0);
    /* Disjoint. */
    int64_t sd[2] = {10, 20}, cd[2] = {1, 1};
    ckpt_slice d = mkslice(2, sd, cd);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &a, &d), 0);
    CHECK(out.count[0] == 0 || out.count[1] == 0);
    /* Empty input. */
    int64_t ce[2] = {0, 10};
    ckpt_slice e = mkslice(2, sa, ce);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &e, &a), 0);
    /* Rank 0. */
    ckpt_slice s0, s1;
    CHECK_OK(ckpt_slice_init(&s0, 0, NULL, NULL));
    CHECK_OK(ckpt_slice_init(&s1, 0, NULL, NULL));
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &s0, &s1), 1);
    CHECK_EQ_INT(out.ndims, 0);
    /* Rank mismatch. */
    ckpt_slice r1 = mkslice(1, sa, ca);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &a, &r1), -1);
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &s0, &r1), -1);
    /* Huge hand-filled extents do not overflow. */
    ckpt_slice h = a;
    h.count[0] = INT64_MAX;
    h.count[1] = INT64_MAX;
    CHECK_EQ_INT(ckpt_slice_intersect(&out, &h, &b), 1);
    CHECK(ckpt_slice_equal(&out, &b));
}

/* Parses `spec`, expects success, formats it back and compares with `canon`. */
static void roundtrip(const char *spec, const char *canon, int ndims)
{
    ckpt_shape sh;
    ckpt_slice sl, sl2;
    ckpt_shape sh2;
    char buf[1024];
    int rc = parse(&sh, &sl, spec);
    CHECK_MSG(rc == CKPT_OK, "parse \"%s\" failed: %s", spec,
              ckpt_error_last() ? ckpt_error_last()->message : "?");
    if (rc != CKPT_OK)
        return;
    CHECK_EQ_INT(sh.ndims, ndims);
    CHECK_EQ_INT(sl.ndims, ndims);
    CHECK_OK(ckpt_slice_spec_format(buf, sizeof buf, &sh, &sl));
    CHECK_MSG(strcmp(buf, canon) == 0, "format of \"%s\" is \"%s\", expected \"%s\"", spec, buf,
              canon);
    CHECK_OK(parse(&sh2, &sl2, buf));
    CHECK(ckpt_shape_equal(&sh, &sh2));
    CHECK(ckpt_slice_equal(&sl, &sl2));
}

static void test_spec(void)
{
    ckpt_shape sh;
    ckpt_slice sl;
    CHECK_OK(parse(&sh, &sl, "4 10 0,2:-"));
    CHECK(sh.ndims == 2 && sh.dims[0] == 4 && sh.dims[1] == 10);
    CHECK(sl.ndims == 2 && sl.start[0] == 0 && sl.count[0] == 2 && sl.start[1] == 0 &&
          sl.count[1] == 10);
    CHECK_OK(parse(&sh, &sl, "2 3 4 1,1:-:0,4"));
    CHECK(sh.ndims == 3 && sh.dims[2] == 4);
    CHECK(sl.start[0] == 1 && sl.count[0] == 1 && sl.count[1] == 3 && sl.count[2] == 4);

    roundtrip("4 10 0,2:-", "4 10 0,2:-", 2);
    roundtrip("10 -", "10 -", 1);
    roundtrip("2 3 4 1,1:-:0,4", "2 3 4 1,1:-:-", 3); /* a whole dim formats as "-" */
    roundtrip("0 -", "0 -", 1);
    roundtrip("0 0,0", "0 -", 1);
    roundtrip("5 7 5,0:3,4", "5 7 5,0:3,4", 2);
    roundtrip("007 1,6", "7 1,6", 1);
    roundtrip("9223372036854775807 9223372036854775806,1",
              "9223372036854775807 "
              "9223372036854775806,1",
              1);
    /* 16 dims is the maximum. */
    char spec16[256] = "", canon16[256] = "";
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        strcat(spec16, "2 ");
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        strcat(spec16, d + 1 < CKPT_MAX_DIMS ? "1,1:" : "0,2");
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        strcat(canon16, "2 ");
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        strcat(canon16, d + 1 < CKPT_MAX_DIMS ? "1,1:" : "-");
    roundtrip(spec16, canon16, CKPT_MAX_DIMS);

    /* 17 dims. */
    char spec17[256] = "";
    for (int d = 0; d < CKPT_MAX_DIMS + 1; d++)
        strcat(spec17, "2 ");
    for (int d = 0; d < CKPT_MAX_DIMS + 1; d++)
        strcat(spec17, d < CKPT_MAX_DIMS ? "-:" : "-");
    CHECK_RC(parse(&sh, &sl, spec17), CKPT_EINVAL);
    CHECK(msg_has("more than 16 dims"));

    static const struct {
        const char *spec, *msg; /* msg: part of the expected error message */
    } bad[] = {
        {"", "empty"},
        {" ", "trailing space"},
        {"4", "shape dims"},
        {"-", "shape dims"},
        {"4 10", "extent 0"},
        {"4 10 0,2", "1 extents"},
        {"4 10 0,5:-", "dim 0"},
        {"4 10 -:0,11", "dim 1"},
        {"4 10 3,2:-", "dim 0"},
        {"-1 0,1", "token 0"},
        {"+1 0,1", "token 0"},
        {"4 a,1", "extent 0"},
        {"4 0,1:", "more extents"},
        {"4 0,1:-", "more extents"},
        {"4 0,-1", "extent 0"},
        {"4 -1,1", "extent 0"},
        {"4 0,1,", "trailing"},
        {"4 0,1x", "trailing"},
        {"4 --", "trailing"},
        {"4 ,1", "extent 0"},
        {"4 0,", "extent 0"},
        {"4 0", "extent 0"},
        {"4 :", "extent 0"},
        {"99999999999999999999 -", "INT64_MAX"},
        {"9223372036854775808 -", "INT64_MAX"},
        {"10 0,99999999999999999999", "INT64_MAX"},
        {"10 99999999999999999999,1", "INT64_MAX"},
        {"9223372036854775807 9223372036854775807,1", "dim 0"},
        {"4 10 0,2:- ", "trailing space"},
        {"4 10 0,2:-  ", "trailing space"},
        {" 4 10 0,2:-", "token 0"},
        {"4  10 0,2:-", "token 1"},
        {"4 10  0,2:-", "token 2"},
        {"4\t10 0,2:-", "token 0"},
        {"4 10 0,2\t:-", "extent 0"},
        {"4x 0,1", "token 0"},
        {"4 10 0,2:-\n", "trailing"},
        {"4 10 0, 2:-", "token 2"},
        {"4 10 0,2 -", "token 2"},
        {"  4 -", "token 0"},
        {"4 - -", "token 1"},
    };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        sl.ndims = 5;
        int rc = parse(&sh, &sl, bad[i].spec);
        CHECK_MSG(rc == CKPT_EINVAL, "\"%s\" parsed with rc %d", bad[i].spec, rc);
        const ckpt_error *e = ckpt_error_last();
        CHECK_MSG(e && strstr(e->message, bad[i].msg), "\"%s\": message \"%s\" lacks \"%s\"",
                  bad[i].spec, e ? e->message : "(none)", bad[i].msg);
        CHECK_MSG(sh.ndims == 0 && sl.ndims == 0, "\"%s\": outputs not cleared", bad[i].spec);
    }
    CHECK_RC(ckpt_slice_spec_parse(&sh, &sl, NULL), CKPT_EINVAL);

    /* A long hostile string: messages stay bounded, nothing is read past the NUL. */
    char longspec[5000];
    memset(longspec, '1', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = '\0';
    CHECK_RC(parse(&sh, &sl, longspec), CKPT_EINVAL);
    for (size_t i = 1; i + 1 < sizeof longspec; i += 2)
        longspec[i] = ' ';
    CHECK_RC(parse(&sh, &sl, longspec), CKPT_EINVAL);
}

/* Random strings over the spec alphabet: never crash; anything accepted must round-trip. */
static void test_spec_fuzz(void)
{
    static const char alphabet[] = "0123456789 ,:-- ::,,0123a";
    char s[64], buf[1100];
    int accepted = 0;
    for (int iter = 0; iter < 200000; iter++) {
        size_t n = (size_t)rnd(24);
        for (size_t i = 0; i < n; i++)
            s[i] = alphabet[rnd((int64_t)sizeof alphabet - 1)];
        s[n] = '\0';
        ckpt_shape sh, sh2;
        ckpt_slice sl, sl2;
        if (parse(&sh, &sl, s) != CKPT_OK) {
            const ckpt_error *e = ckpt_error_last();
            if (!e || e->code != CKPT_EINVAL || !e->message[0]) {
                CHECK_MSG(0, "\"%s\": error without message", s);
                break;
            }
            continue;
        }
        accepted++;
        if (ckpt_slice_validate(&sl, &sh) != CKPT_OK ||
            ckpt_slice_spec_format(buf, sizeof buf, &sh, &sl) != CKPT_OK ||
            parse(&sh2, &sl2, buf) != CKPT_OK || !ckpt_shape_equal(&sh, &sh2) ||
            !ckpt_slice_equal(&sl, &sl2)) {
            CHECK_MSG(0, "\"%s\" accepted but does not round-trip", s);
            break;
        }
    }
    CHECK(accepted > 0);
}

static void test_parse_extent(void)
{
    ckpt_slice sl;
    int64_t d[2] = {4, 10};
    ckpt_shape sh = mkshape(2, d), scalar = mkshape(0, NULL);
    CHECK_OK(ckpt_slice_parse_extent(&sl, &sh, "0,2:-"));
    CHECK(sl.ndims == 2 && sl.start[0] == 0 && sl.count[0] == 2 && sl.count[1] == 10);
    CHECK_OK(ckpt_slice_parse_extent(&sl, &sh, "-:3,7"));
    CHECK(sl.count[0] == 4 && sl.start[1] == 3 && sl.count[1] == 7);
    sl.ndims = 3;
    CHECK_OK(ckpt_slice_parse_extent(&sl, &scalar, ""));
    CHECK_EQ_INT(sl.ndims, 0);
    CHECK_RC(ckpt_slice_parse_extent(&sl, &scalar, "-"), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_parse_extent(&sl, &sh, ""), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_parse_extent(&sl, &sh, "-"), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_parse_extent(&sl, &sh, "-:-:-"), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_parse_extent(&sl, &sh, "-:3,8"), CKPT_EINVAL);
    CHECK(msg_has("dim 1"));
    CHECK_RC(ckpt_slice_parse_extent(&sl, &sh, "4 10 0,2:-"), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_parse_extent(&sl, &sh, NULL), CKPT_EINVAL);
    ckpt_shape bad = sh;
    bad.dims[0] = -4;
    CHECK_RC(ckpt_slice_parse_extent(&sl, &bad, "-:-"), CKPT_EINVAL);
}

static void test_format(void)
{
    int64_t d[2] = {4, 10}, st[2] = {0, 0}, ct[2] = {2, 10};
    ckpt_shape sh = mkshape(2, d);
    ckpt_slice sl = mkslice(2, st, ct);
    char buf[64];
    CHECK_OK(ckpt_slice_spec_format(buf, sizeof buf, &sh, &sl));
    CHECK(strcmp(buf, "4 10 0,2:-") == 0);
    /* Needs 11 bytes with the NUL. */
    memset(buf, 'x', sizeof buf);
    CHECK_RC(ckpt_slice_spec_format(buf, 10, &sh, &sl), CKPT_EINVAL);
    CHECK(buf[0] == '\0' && buf[10] == 'x');
    CHECK(msg_has("11 bytes"));
    CHECK_OK(ckpt_slice_spec_format(buf, 11, &sh, &sl));
    CHECK(strcmp(buf, "4 10 0,2:-") == 0);
    CHECK_RC(ckpt_slice_spec_format(buf, 0, &sh, &sl), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_spec_format(NULL, 64, &sh, &sl), CKPT_EINVAL);
    /* Slice outside the shape. */
    sl.count[1] = 11;
    CHECK_RC(ckpt_slice_spec_format(buf, sizeof buf, &sh, &sl), CKPT_EINVAL);
    CHECK(buf[0] == '\0');
    /* Rank 0 formats as the empty string (TensorFlow writes no spec for scalars). */
    ckpt_shape scalar = mkshape(0, NULL);
    ckpt_slice s0;
    ckpt_slice_full(&s0, &scalar);
    CHECK_OK(ckpt_slice_spec_format(buf, sizeof buf, &scalar, &s0));
    CHECK(buf[0] == '\0');
    /* Largest possible spec fits the formatter. */
    ckpt_shape big;
    ckpt_slice bs;
    int64_t bd[CKPT_MAX_DIMS], bst[CKPT_MAX_DIMS], bct[CKPT_MAX_DIMS];
    for (int i = 0; i < CKPT_MAX_DIMS; i++) {
        bd[i] = INT64_MAX;
        bst[i] = INT64_MAX / 2 + 1000000000000000000;
        bct[i] = 1000000000000000001;
    }
    big = mkshape(CKPT_MAX_DIMS, bd);
    bs = mkslice(CKPT_MAX_DIMS, bst, bct);
    char huge[2048];
    CHECK_OK(ckpt_slice_spec_format(huge, sizeof huge, &big, &bs));
    ckpt_shape big2;
    ckpt_slice bs2;
    CHECK_OK(parse(&big2, &bs2, huge));
    CHECK(ckpt_shape_equal(&big, &big2) && ckpt_slice_equal(&bs, &bs2));
}

/* ---- slice copy ---- */

/* Byte b of the element at global linear index g. */
static unsigned char elem_byte(int64_t g, size_t b)
{
    return (unsigned char)((uint64_t)g * 2654435761u + b * 131 + 7);
}

/* Global linear index of element `i` (row-major within slice s) of the tensor of shape `sh`. */
static int64_t global_index(const ckpt_shape *sh, const ckpt_slice *s, int64_t i, int64_t *coord)
{
    for (int d = s->ndims - 1; d >= 0; d--) {
        coord[d] = s->start[d] + i % s->count[d];
        i /= s->count[d];
    }
    int64_t g = 0;
    for (int d = 0; d < s->ndims; d++)
        g = g * sh->dims[d] + coord[d];
    return g;
}

static int in_slice(const ckpt_slice *s, const int64_t *coord)
{
    for (int d = 0; d < s->ndims; d++)
        if (coord[d] < s->start[d] || coord[d] >= s->start[d] + s->count[d])
            return 0;
    return 1;
}

/* Fills a buffer of slice s with the global pattern (or with 0xEE when `pattern` is 0). */
static void fill_slice(unsigned char *buf, const ckpt_shape *sh, const ckpt_slice *s, size_t esz,
                       int pattern)
{
    int64_t n, coord[CKPT_MAX_DIMS];
    CHECK_OK(ckpt_slice_num_elements(&n, s));
    for (int64_t i = 0; i < n; i++) {
        int64_t g = global_index(sh, s, i, coord);
        for (size_t b = 0; b < esz; b++)
            buf[(size_t)i * esz + b] = pattern ? elem_byte(g, b) : 0xEE;
    }
}

/* Every element of dst: the global pattern inside `region`, untouched (0xEE) elsewhere. Returns
 * the number of wrong elements. */
static int64_t verify_slice(const unsigned char *buf, const ckpt_shape *sh, const ckpt_slice *s,
                            const ckpt_slice *region, size_t esz)
{
    int64_t n, coord[CKPT_MAX_DIMS], wrong = 0;
    CHECK_OK(ckpt_slice_num_elements(&n, s));
    for (int64_t i = 0; i < n; i++) {
        int64_t g = global_index(sh, s, i, coord);
        int in = in_slice(region, coord);
        for (size_t b = 0; b < esz; b++) {
            if (buf[(size_t)i * esz + b] != (in ? elem_byte(g, b) : 0xEE)) {
                wrong++;
                break;
            }
        }
    }
    return wrong;
}

/* Copies `region` from a buffer of `src` to one of `dst` and checks every destination element. */
static void copy_case(const ckpt_shape *sh, const ckpt_slice *dst, const ckpt_slice *src,
                      const ckpt_slice *region, size_t esz)
{
    int64_t nd, ns;
    CHECK_OK(ckpt_slice_num_elements(&nd, dst));
    CHECK_OK(ckpt_slice_num_elements(&ns, src));
    unsigned char *db = malloc((size_t)nd * esz + 1), *sb = malloc((size_t)ns * esz + 1);
    CHECK(db && sb);
    if (db && sb) {
        fill_slice(sb, sh, src, esz, 1);
        fill_slice(db, sh, dst, esz, 0);
        CHECK_OK(ckpt_slice_copy(db, dst, sb, src, region, esz));
        int64_t wrong = verify_slice(db, sh, dst, region, esz);
        CHECK_MSG(wrong == 0, "%" PRId64 " wrong elements (rank %d, esz %zu)", wrong, region->ndims,
                  esz);
    }
    free(db);
    free(sb);
}

static void test_copy(void)
{
    /* 3-d tensor 7x9x11: two differently sliced buffers and their intersection. */
    int64_t d[3] = {7, 9, 11};
    ckpt_shape sh = mkshape(3, d);
    int64_t ss[3] = {1, 2, 0}, sc[3] = {5, 6, 11};
    int64_t ds[3] = {2, 0, 3}, dc[3] = {4, 9, 8};
    ckpt_slice src = mkslice(3, ss, sc), dst = mkslice(3, ds, dc), region;
    CHECK_EQ_INT(ckpt_slice_intersect(&region, &src, &dst), 1);
    CHECK(region.start[0] == 2 && region.count[0] == 4 && region.start[1] == 2 &&
          region.count[1] == 6 && region.start[2] == 3 && region.count[2] == 8);
    copy_case(&sh, &dst, &src, &region, 4);
    copy_case(&sh, &dst, &src, &region, 1);
    copy_case(&sh, &dst, &src, &region, 3);
    copy_case(&sh, &src, &dst, &region, 8); /* the other way */
    /* A smaller sub-block of the intersection. */
    int64_t rs[3] = {3, 4, 5}, rn[3] = {2, 1, 3};
    ckpt_slice sub = mkslice(3, rs, rn);
    copy_case(&sh, &dst, &src, &sub, 4);

    /* Row blocks: contiguous in both buffers (one memcpy path) and into the full tensor. */
    ckpt_slice full;
    ckpt_slice_full(&full, &sh);
    int64_t rbs[3] = {2, 0, 0}, rbc[3] = {3, 9, 11};
    ckpt_slice rows = mkslice(3, rbs, rbc);
    copy_case(&sh, &full, &rows, &rows, 4);
    copy_case(&sh, &rows, &full, &rows, 2);
    copy_case(&sh, &full, &full, &full, 8);
    int64_t pbs[3] = {2, 3, 0}, pbc[3] = {3, 4, 11}; /* partial middle dim, full last */
    ckpt_slice part = mkslice(3, pbs, pbc);
    copy_case(&sh, &full, &part, &part, 4);
    copy_case(&sh, &rows, &full, &part, 4);

    /* Rank 0: one element. */
    ckpt_shape scalar = mkshape(0, NULL);
    ckpt_slice s0;
    ckpt_slice_full(&s0, &scalar);
    double x = 3.25, y = 0;
    CHECK_OK(ckpt_slice_copy(&y, &s0, &x, &s0, &s0, sizeof x));
    CHECK(y == 3.25);

    /* Zero-element region: no-op even with no buffers. */
    int64_t zs[3] = {2, 2, 3}, zc[3] = {4, 0, 8};
    ckpt_slice zero = mkslice(3, zs, zc);
    CHECK_OK(ckpt_slice_copy(NULL, &dst, NULL, &src, &zero, 4));
    /* Zero-size tensor dim. */
    int64_t zd[2] = {0, 5};
    ckpt_shape zsh = mkshape(2, zd);
    ckpt_slice zfull;
    ckpt_slice_full(&zfull, &zsh);
    unsigned char one = 0;
    CHECK_OK(ckpt_slice_copy(&one, &zfull, &one, &zfull, &zfull, 1));

    /* Region outside one of the buffers. */
    unsigned char *a = calloc(1000, 8), *b = calloc(1000, 8);
    CHECK_RC(ckpt_slice_copy(a, &dst, b, &src, &full, 4), CKPT_EINVAL);
    CHECK(msg_has("outside the destination"));
    int64_t os[3] = {1, 2, 3}, oc[3] = {2, 2, 2}; /* inside src, row 1 is outside dst */
    ckpt_slice outside = mkslice(3, os, oc);
    CHECK_RC(ckpt_slice_copy(a, &dst, b, &src, &outside, 4), CKPT_EINVAL);
    CHECK(msg_has("dim 0"));
    CHECK_RC(ckpt_slice_copy(a, &src, b, &dst, &outside, 4), CKPT_EINVAL);
    CHECK(msg_has("source"));
    /* Rank mismatch, bad element size, NULL buffers. */
    CHECK_RC(ckpt_slice_copy(a, &dst, b, &src, &s0, 4), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_copy(a, &dst, b, &src, &region, 0), CKPT_EINVAL);
    CHECK_RC(ckpt_slice_copy(NULL, &dst, b, &src, &region, 4), CKPT_EINVAL);
    /* A buffer whose byte size overflows size_t. */
    int64_t hs[3] = {0, 0, 0}, hc[3] = {INT64_MAX / 2, INT64_MAX / 2, 4}, hr[3] = {1, 1, 1};
    ckpt_slice huge = mkslice(3, hs, hc), tiny = mkslice(3, hs, hr);
    CHECK_RC(ckpt_slice_copy(a, &tiny, b, &huge, &tiny, 4), CKPT_EINVAL);
    free(a);
    free(b);
}

/* Random shapes, slices and regions of rank 1..5 against the reference. */
static void test_copy_random(void)
{
    for (int iter = 0; iter < 3000; iter++) {
        int n = 1 + (int)rnd(5);
        int64_t dims[CKPT_MAX_DIMS];
        ckpt_slice a, b, r;
        memset(&r, 0, sizeof r);
        a.ndims = b.ndims = r.ndims = n;
        for (int d = 0; d < n; d++) {
            dims[d] = 1 + rnd(6);
            for (ckpt_slice *s = &a; s; s = s == &a ? &b : NULL) {
                /* Often the whole dim, so that the contiguous merge is exercised. */
                if (rnd(3) == 0) {
                    s->start[d] = 0;
                    s->count[d] = dims[d];
                } else {
                    s->start[d] = rnd(dims[d]);
                    s->count[d] = 1 + rnd(dims[d] - s->start[d]);
                }
            }
        }
        ckpt_shape sh = mkshape(n, dims);
        if (ckpt_slice_intersect(&r, &a, &b) != 1)
            continue;
        if (rnd(2)) { /* shrink to a random sub-box */
            for (int d = 0; d < n; d++) {
                int64_t off = rnd(r.count[d]);
                r.start[d] += off;
                r.count[d] = 1 + rnd(r.count[d] - off);
            }
        }
        size_t esz = (size_t)1 << rnd(4);
        copy_case(&sh, &a, &b, &r, esz);
        if (check_failures)
            break;
    }
}

int main(void)
{
    test_init_validate();
    test_num_elements();
    test_intersect();
    test_spec();
    test_spec_fuzz();
    test_parse_extent();
    test_format();
    test_copy();
    test_copy_random();
    return CHECK_DONE();
}
