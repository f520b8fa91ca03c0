/* Minimal assertion helpers for mpickpt tests. A failed CHECK prints where and why (with the
 * rank when MPI is running), counts the failure and continues; tests end with CHECK_DONE(). */
#ifndef MPICKPT_TESTS_CHECK_H
#define MPICKPT_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static int check_count;
static int check_rank = -1;

#define CHECK_FAIL_(...)                                                                       \
    do {                                                                                       \
        check_failures++;                                                                      \
        if (check_rank >= 0)                                                                   \
            fprintf(stderr, "[rank %d] ", check_rank);                                         \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                        \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fputc('\n', stderr);                                                                   \
    } while (0)

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        check_count++;                                                                         \
        if (!(cond))                                                                           \
            CHECK_FAIL_("CHECK(%s) failed", #cond);                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        check_count++;                                                                         \
        if (!(cond))                                                                           \
            CHECK_FAIL_(__VA_ARGS__);                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                     \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        check_count++;                                                                         \
        if (a_ != b_)                                                                          \
            CHECK_FAIL_("%s == %s failed: %lld != %lld", #a, #b, a_, b_);                      \
    } while (0)

/* Checks a status and prints ckpt_error_last() when it is not the expected one. */
#define CHECK_RC(rc, expected)                                                                 \
    do {                                                                                       \
        int rc_ = (rc);                                                                        \
        check_count++;                                                                         \
        if (rc_ != (expected)) {                                                               \
            const ckpt_error *e_ = ckpt_error_last();                                          \
            CHECK_FAIL_("%s returned %d (%s), expected %d: %s", #rc, rc_, ckpt_strerror(rc_),  \
                        (int)(expected), e_ ? e_->message : "(no message)");                   \
        }                                                                                      \
    } while (0)

#define CHECK_OK(rc) CHECK_RC(rc, CKPT_OK)

/* Ends a non-MPI test: prints a summary and returns the exit code. */
#define CHECK_DONE()                                                                           \
    (printf("%d checks, %d failed\n", check_count, check_failures), check_failures ? 1 : 0)

#endif
