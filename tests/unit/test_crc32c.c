/* Unit test of CRC-32C: known vectors, hardware vs portable paths, extend, masking, throughput. */
#include "check.h"
#include "crc32c_internal.h"
#include "internal.h"
#include "mpickpt/crc32c.h"

#include <string.h>
#include <time.h>

/* Deterministic xorshift64 so failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(rng() >> 56);
}

/* Bit-at-a-time reference, independent of every table. */
static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_vectors(void)
{
    unsigned char buf[32];
    CHECK_EQ_INT(ckpt_crc32c("123456789", 9), 0xE3069283u);
    CHECK_EQ_INT(ckpt__crc32c_portable(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_INT(ckpt_crc32c("", 0), 0);
    CHECK_EQ_INT(ckpt_crc32c(NULL, 0), 0);
    CHECK_EQ_INT(ckpt_crc32c_extend(0x12345678u, NULL, 0), 0x12345678u);
    memset(buf, 0, sizeof buf);
    CHECK_EQ_INT(ckpt_crc32c(buf, sizeof buf), 0x8A9136AAu);
    CHECK_EQ_INT(ckpt__crc32c_portable(0, buf, sizeof buf), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    CHECK_EQ_INT(ckpt_crc32c(buf, sizeof buf), 0x62A8AB43u);
    CHECK_EQ_INT(ckpt__crc32c_portable(0, buf, sizeof buf), 0x62A8AB43u);
    /* RFC 3720 B.4: ascending and descending bytes 0..31. */
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    CHECK_EQ_INT(ckpt_crc32c(buf, sizeof buf), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    CHECK_EQ_INT(ckpt_crc32c(buf, sizeof buf), 0x113FDB5Cu);
#if CKPT__CRC32C_HAVE_HW
    if (ckpt_crc32c_hw()) {
        CHECK_EQ_INT(ckpt__crc32c_hw_extend(0, "123456789", 9), 0xE3069283u);
        CHECK_EQ_INT(ckpt__crc32c_hw_single(0, "123456789", 9), 0xE3069283u);
    }
#endif
}

/* Every implementation equals the bitwise reference at every length 0..1100 and offset 0..15,
 * starting from zero and from a non-zero CRC. */
static void test_paths_agree(void)
{
    enum { MAXLEN = 1100, MAXOFF = 16 };
    static unsigned char buf[MAXLEN + MAXOFF + 8];
    fill_random(buf, sizeof buf);
    int bad = 0;
    for (size_t off = 0; off < MAXOFF; off++) {
        for (size_t len = 0; len <= MAXLEN; len++) {
            const unsigned char *p = buf + off;
            uint32_t seed = (uint32_t)rng();
            uint32_t ref = crc_bitwise(0, p, len), ref_seed = crc_bitwise(seed, p, len);
            uint32_t got[5] = {ckpt__crc32c_portable(0, p, len), ckpt_crc32c(p, len), 0, 0, 0};
            uint32_t got_seed = ckpt__crc32c_portable(seed, p, len);
            int n = 2;
#if CKPT__CRC32C_HAVE_HW
            if (ckpt_crc32c_hw()) {
                got[n++] = ckpt__crc32c_hw_extend(0, p, len);
                got[n++] = ckpt__crc32c_hw_single(0, p, len);
                if (ckpt__crc32c_hw_extend(seed, p, len) != ref_seed)
                    got_seed = ~ref_seed;
            }
            if (ckpt__crc32c_have_fold()) {
                got[n++] = ckpt__crc32c_fold_extend(0, p, len);
                if (ckpt__crc32c_fold_extend(seed, p, len) != ref_seed)
                    got_seed = ~ref_seed;
            }
#endif
            for (int i = 0; i < n; i++)
                if (got[i] != ref && bad++ < 10)
                    CHECK_MSG(0, "impl %d off %zu len %zu: %08x != %08x", i, off, len,
                              (unsigned)got[i], (unsigned)ref);
            if (got_seed != ref_seed && bad++ < 10)
                CHECK_MSG(0, "seeded crc off %zu len %zu differs", off, len);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static int have_fold(void)
{
#if CKPT__CRC32C_HAVE_HW
    return ckpt__crc32c_have_fold();
#else
    return 0;
#endif
}

/* Lengths around the three-stream block boundaries (3 * 256 and 3 * 8192 bytes) and the folding
 * path's (256-byte steps, then 64- and 16-byte tails). */
static void test_large(void)
{
    static const size_t lens[] = {255,   256,   257,   271,   319,   320,   335,   511,   512,
                                  527,   767,   768,   769,   775,   776,   1535,  1536,  24575,
                                  24576, 24577, 24583, 25343, 25344, 49152, 49159, 99999, 262144};
    size_t maxlen = 262144 + 16;
    unsigned char *buf = malloc(maxlen);
    CHECK(buf != NULL);
    if (!buf)
        return;
    fill_random(buf, maxlen);
    for (size_t i = 0; i < CKPT__ARRAY_LEN(lens); i++) {
        for (size_t off = 0; off < 16; off += 3) {
            uint32_t ref = crc_bitwise(0, buf + off, lens[i]);
            CHECK_EQ_INT(ckpt__crc32c_portable(0, buf + off, lens[i]), ref);
            CHECK_EQ_INT(ckpt_crc32c(buf + off, lens[i]), ref);
#if CKPT__CRC32C_HAVE_HW
            if (have_fold())
                CHECK_EQ_INT(ckpt__crc32c_fold_extend(0, buf + off, lens[i]), ref);
#endif
        }
    }
    free(buf);
}

/* extend() split at every point equals the one-shot CRC, for every implementation. */
static void test_extend_split(void)
{
    enum { N = 2000 };
    static unsigned char buf[N];
    fill_random(buf, N);
    uint32_t whole = ckpt_crc32c(buf, N);
    CHECK_EQ_INT(whole, crc_bitwise(0, buf, N));
    int bad = 0;
    for (size_t cut = 0; cut <= N; cut++) {
        uint32_t a = ckpt_crc32c_extend(ckpt_crc32c_extend(0, buf, cut), buf + cut, N - cut);
        uint32_t b = ckpt__crc32c_portable(ckpt__crc32c_portable(0, buf, cut), buf + cut, N - cut);
        if ((a != whole || b != whole) && bad++ < 10)
            CHECK_MSG(0, "split at %zu: %08x %08x != %08x", cut, (unsigned)a, (unsigned)b,
                      (unsigned)whole);
    }
    CHECK_EQ_INT(bad, 0);
    /* Three pieces. */
    uint32_t c = ckpt_crc32c_extend(0, buf, 100);
    c = ckpt_crc32c_extend(c, buf + 100, 1000);
    c = ckpt_crc32c_extend(c, buf + 1100, N - 1100);
    CHECK_EQ_INT(c, whole);
}

/* combine(crc(A), crc(B), len(B)) == crc(A|B); block CRCs are those of the blocks, and the
 * combined whole is the one-shot CRC. */
static void test_combine_blocks(void)
{
    enum { N = 5000 };
    static unsigned char buf[N];
    fill_random(buf, N);
    uint32_t whole = ckpt_crc32c(buf, N);
    int bad = 0;
    for (size_t cut = 0; cut <= N; cut += 7) {
        uint32_t c = ckpt__crc32c_combine(ckpt_crc32c(buf, cut), ckpt_crc32c(buf + cut, N - cut),
                                          N - cut);
        if (c != whole && bad++ < 5)
            CHECK_MSG(0, "combine at %zu: %08x != %08x", cut, (unsigned)c, (unsigned)whole);
    }
    CHECK_EQ_INT(bad, 0);
    uint32_t blocks[N];
    static const size_t sizes[] = {1, 3, 64, 1000, 4999, 5000, 8192};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(sizes); i++) {
        size_t bs = sizes[i], nb = (N + bs - 1) / bs;
        CHECK_EQ_INT(ckpt__crc32c_blocks(buf, N, bs, blocks), whole);
        for (size_t b = 0; b < nb; b++) {
            size_t n = N - b * bs < bs ? N - b * bs : bs;
            if (blocks[b] != ckpt_crc32c(buf + b * bs, n) && bad++ < 5)
                CHECK_MSG(0, "block %zu of %zu bytes differs", b, bs);
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_mask(void)
{
    uint32_t crc = ckpt_crc32c("foo", 3);
    /* TensorFlow's crc32c_test MaskTest relations. */
    CHECK(crc != ckpt_crc32c_mask(crc));
    CHECK(crc != ckpt_crc32c_mask(ckpt_crc32c_mask(crc)));
    CHECK_EQ_INT(ckpt_crc32c_unmask(ckpt_crc32c_mask(crc)), crc);
    CHECK_EQ_INT(ckpt_crc32c_unmask(ckpt_crc32c_unmask(ckpt_crc32c_mask(ckpt_crc32c_mask(crc)))),
                 crc);
    /* The definition: rotate right 15, add 0xa282ead8. */
    CHECK_EQ_INT(ckpt_crc32c_mask(0), 0xa282ead8u);
    CHECK_EQ_INT(ckpt_crc32c_mask(0x00008000u), 0xa282ead9u);
    CHECK_EQ_INT(ckpt_crc32c_mask(0xE3069283u),
                 (uint32_t)(((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u));
    for (int i = 0; i < 10000; i++) {
        uint32_t v = (uint32_t)rng();
        if (ckpt_crc32c_unmask(ckpt_crc32c_mask(v)) != v ||
            ckpt_crc32c_mask(ckpt_crc32c_unmask(v)) != v) {
            CHECK_MSG(0, "mask round trip of %08x", (unsigned)v);
            break;
        }
    }
}

/* Prints the throughput of ckpt_crc32c and memcpy over 64 MiB (informational, never fails). */
static void bench(void)
{
    size_t n = (size_t)64 << 20;
    unsigned char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        printf("crc32c: benchmark skipped (no memory)\n");
        return;
    }
    fill_random(a, 4096);
    for (size_t i = 4096; i < n; i += 4096)
        memcpy(a + i, a, 4096);
    memcpy(b, a, n); /* warm both buffers (page faults) */
    volatile uint32_t sink = ckpt_crc32c(a, n);
    double best_crc = 1e30, best_cpy = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_sec();
        sink ^= ckpt_crc32c(a, n);
        double t1 = now_sec();
        memcpy(b, a, n);
        double t2 = now_sec();
        if (t1 - t0 < best_crc)
            best_crc = t1 - t0;
        if (t2 - t1 < best_cpy)
            best_cpy = t2 - t1;
        a[r] ^= b[n - 1 - (size_t)r]; /* keep memcpy observable */
    }
    (void)sink;
    printf("crc32c: %.1f GB/s (memcpy %.1f GB/s, hw=%d, fold=%d)\n", (double)n / best_crc * 1e-9,
           (double)n / best_cpy * 1e-9, ckpt_crc32c_hw(), have_fold());
    free(a);
    free(b);
}

int main(void)
{
    test_vectors();
    test_paths_agree();
    test_large();
    test_extend_split();
    test_combine_blocks();
    test_mask();
    bench();
    return CHECK_DONE();
}
