/* lib/interop/sstable.c and lib/interop/tfbundle.c, the TensorFlow bundle's parts without files:
 * - OrderedCode slice keys against the examples of TensorFlow's ordered_code.cc and by hand;
 * - tables written and scanned back (block sizes from tiny to TensorFlow's, restart intervals 1,
 *   2 and 16, stored and Snappy blocks, empty values, long shared prefixes, 0x00/0xff bytes);
 * - every single-byte change of a table either fails the scan or leaves the entries unchanged
 *   (footer padding is unused), every truncation fails, and nothing reads out of bounds (ASan);
 * - the dtype table both ways. */
#include "check.h"
#include "interop/sstable.h"
#include "interop/tfbundle.h"

#include "mpickpt/common.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv {
    uint8_t key[64];
    size_t klen;
    uint8_t value[600];
    size_t vlen;
} kv;

typedef struct scan_state {
    kv *got;
    size_t n, cap;
} scan_state;

static int scan_cb(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                   void *payload)
{
    scan_state *st = payload;
    if (st->n == st->cap || klen > sizeof st->got[0].key || vlen > sizeof st->got[0].value)
        return CKPT_ECORRUPT; /* more or longer entries than written */
    kv *e = &st->got[st->n++];
    memcpy(e->key, key, klen);
    e->klen = klen;
    memcpy(e->value, value, vlen);
    e->vlen = vlen;
    return CKPT_OK;
}

static int same_entries(const kv *a, size_t na, const kv *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (a[i].klen != b[i].klen || a[i].vlen != b[i].vlen ||
            memcmp(a[i].key, b[i].key, a[i].klen) || memcmp(a[i].value, b[i].value, a[i].vlen))
            return 0;
    return 1;
}

/* n sorted keys with shared prefixes, 0x00 and 0xff bytes, and values of varied length
 * (compressible: runs of one byte). */
static void make_entries(kv *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof e[i]);
        /* "layer/%04zu/" + a tail that varies: sorted because the number leads */
        int len = snprintf((char *)e[i].key, sizeof e[i].key, "layer/%04zu/w", i);
        e[i].klen = (size_t)len;
        if (i % 7 == 3) { /* bytes the format must carry as they are */
            e[i].key[e[i].klen++] = 0xff;
            e[i].key[e[i].klen++] = 0x00;
        }
        e[i].vlen = (i * 37) % 500;
        for (size_t j = 0; j < e[i].vlen; j++)
            e[i].value[j] = (uint8_t)(j % 11 < 8 ? 'a' + i % 3 : j);
    }
}

static uint8_t *build(const kv *e, size_t n, size_t block, int interval, int snappy, size_t *len)
{
    ckpt__sst_writer *w = NULL;
    uint8_t *out = NULL;
    CHECK_OK(ckpt__sst_writer_new(&w, block, interval, snappy));
    if (!w)
        return NULL;
    for (size_t i = 0; i < n; i++)
        CHECK_OK(ckpt__sst_add(w, e[i].key, e[i].klen, e[i].value, e[i].vlen));
    CHECK_OK(ckpt__sst_finish(w, &out, len));
    ckpt__sst_writer_free(w);
    return out;
}

static void test_round_trips(void)
{
    enum { N = 300 };
    kv *e = malloc(N * sizeof *e), *got = malloc((N + 1) * sizeof *got);
    make_entries(e, N);
    const size_t blocks[] = {1, 64, 700, 4096, 262144};
    const int intervals[] = {1, 2, 16};
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
        for (size_t r = 0; r < 3; r++)
            for (int snappy = 0; snappy < 2; snappy++) {
                size_t len = 0;
                uint8_t *t = build(e, N, blocks[b], intervals[r], snappy, &len);
                scan_state st = {got, 0, N + 1};
                CHECK_OK(ckpt__sst_scan(t, len, "table", scan_cb, &st));
                CHECK_MSG(same_entries(e, N, got, st.n),
                          "block %zu interval %d snappy %d: entries differ", blocks[b],
                          intervals[r], snappy);
                free(t);
            }
    /* Snappy pays on these values: the compressed table is smaller */
    size_t plain = 0, packed = 0;
    uint8_t *a = build(e, N, 4096, 16, 0, &plain), *b2 = build(e, N, 4096, 16, 1, &packed);
    CHECK_MSG(packed < plain, "snappy table %zu bytes, stored %zu", packed, plain);
    free(a);
    free(b2);
    /* keys must strictly increase */
    ckpt__sst_writer *w = NULL;
    CHECK_OK(ckpt__sst_writer_new(&w, 0, 0, 0));
    CHECK_OK(ckpt__sst_add(w, (const uint8_t *)"b", 1, (const uint8_t *)"", 0));
    CHECK_RC(ckpt__sst_add(w, (const uint8_t *)"a", 1, (const uint8_t *)"", 0), CKPT_EINVAL);
    ckpt__sst_writer_free(w);
    /* an empty table scans to nothing */
    size_t len = 0;
    uint8_t *t = build(e, 0, 0, 0, 0, &len);
    scan_state st = {got, 0, N + 1};
    CHECK_OK(ckpt__sst_scan(t, len, "empty", scan_cb, &st));
    CHECK_EQ_INT(st.n, 0);
    free(t);
    free(e);
    free(got);
}

/* Each byte changed (two ways) and each truncation of a small multi-block table. */
static void test_damage(int snappy)
{
    enum { N = 40 };
    kv *e = malloc(N * sizeof *e), *got = malloc((N + 1) * sizeof *got);
    make_entries(e, N);
    size_t len = 0;
    uint8_t *t = build(e, N, 300, 4, snappy, &len);
    uint8_t *copy = malloc(len);
    size_t failed = 0, unchanged = 0, wrong = 0;
    for (size_t i = 0; i < len; i++)
        for (int x = 0; x < 2; x++) {
            memcpy(copy, t, len);
            copy[i] ^= x ? 0xff : 0x01;
            scan_state st = {got, 0, N + 1};
            int rc = ckpt__sst_scan(copy, len, "damaged", scan_cb, &st);
            if (rc != CKPT_OK) {
                failed++;
                CHECK_MSG(rc == CKPT_ECORRUPT, "byte %zu: status %d, not CKPT_ECORRUPT", i, rc);
            } else if (same_entries(e, N, got, st.n)) {
                unchanged++;
                /* only the footer's padding may change unseen */
                CHECK_MSG(i >= len - CKPT__SST_FOOTER_SIZE && i < len - 8,
                          "byte %zu (of %zu) changed without effect outside the footer padding",
                          i, len);
            } else {
                wrong++;
                CHECK_MSG(0, "byte %zu changed: the scan passed with other entries", i);
            }
        }
    CHECK(failed > 0 && wrong == 0);
    for (size_t cut = 0; cut < len; cut++) {
        scan_state st = {got, 0, N + 1};
        CHECK_RC(ckpt__sst_scan(t, cut, "truncated", scan_cb, &st), CKPT_ECORRUPT);
    }
    free(copy);
    free(t);
    free(e);
    free(got);
}

static void check_key(const char *name, int ndims, const int64_t *start, const int64_t *length,
                      const char *want, size_t want_len)
{
    uint8_t *k = NULL;
    size_t len = 0;
    CHECK_OK(ckpt__tf_slice_key(&k, &len, name, ndims, start, length));
    CHECK_MSG(k && len == want_len && memcmp(k, want, want_len) == 0,
              "slice key of '%s': %zu bytes, expected %zu", name, len, want_len);
    free(k);
}

static void test_slice_keys(void)
{
    /* 0, "w", rank 1, start 0, length -1 (a full dimension): 00 | 77 00 01 | 01 01 | 80 | 7f */
    int64_t s1[] = {0}, l1[] = {-1};
    check_key("w", 1, s1, l1, "\x00" "w\x00\x01" "\x01\x01" "\x80" "\x7f", 8);
    /* ordered_code.cc's examples: 0x424242 -> f0 42 42 42, -0x800 -> 38 00; and the edges of
     * one and two bytes: 63 -> bf, 64 -> c0 40, -64 -> 40, -65 -> 3f bf */
    int64_t s2[] = {0x424242, 63, -64}, l2[] = {-0x800, 64, -65};
    check_key("w", 3, s2, l2,
              "\x00" "w\x00\x01" "\x01\x03" "\xf0\x42\x42\x42" "\x38\x00" "\xbf" "\xc0\x40"
              "\x40" "\x3f\xbf",
              18);
    /* a 0xff byte in the name is written ff 00; rank 0 is the single byte 00 */
    check_key("a\xff", 0, NULL, NULL, "\x00" "a\xff\x00" "\x00\x01" "\x00", 7);
    /* the longest lengths: 2^62 takes 10 bytes (ff c0 40 00 ..), INT64_MIN too (00 3f 80 ..) */
    int64_t s3[] = {(int64_t)1 << 62}, l3[] = {INT64_MIN};
    check_key("", 1, s3, l3,
              "\x00" "\x00\x01" "\x01\x01"
              "\xff\xc0\x40\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x3f\x80\x00\x00\x00\x00\x00\x00\x00",
              25);
}

static void test_dtypes(void)
{
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++) {
        int tf = ckpt__tf_dtype_from_ckpt((ckpt_dtype)d);
        CHECK_MSG(tf > 0 && ckpt__tf_dtype_to_ckpt(tf) == (ckpt_dtype)d, "dtype %d", d);
    }
    char buf[32];
    CHECK(strcmp(ckpt__tf_dtype_name(7, buf, sizeof buf), "DT_STRING") == 0);
    CHECK(strcmp(ckpt__tf_dtype_name(99, buf, sizeof buf), "unknown dtype 99") == 0);
    CHECK(ckpt__tf_dtype_to_ckpt(7) == CKPT_DTYPE_INVALID);
    CHECK(ckpt__tf_dtype_to_ckpt(8) == CKPT_DTYPE_INVALID);
    CHECK(ckpt__tf_dtype_to_ckpt(CKPT__TF_DT_HALF) == CKPT_FLOAT16);
    CHECK(ckpt__tf_dtype_to_ckpt(CKPT__TF_DT_BFLOAT16) == CKPT_BFLOAT16);
}

int main(void)
{
    test_slice_keys();
    test_dtypes();
    test_round_trips();
    test_damage(0);
    test_damage(1);
    return CHECK_DONE();
}
