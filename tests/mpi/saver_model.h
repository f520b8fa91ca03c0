/* A small "training model" shared by the saver tests. Every element value is a deterministic
 * function of (tensor id, global flat index, step) and never of the rank count, so that a job of
 * N ranks and a job of M ranks agree on what a checkpoint must hold:
 *
 *   float32/float64:  (id * 1000 + flat) * 0.5 + step      (exact for these sizes and steps)
 *   int64:            -(id * 1000000 + flat * 1000 + step)
 *   "rng" component c, element j (uint64): 2^63 + c * 1000000 + j * 1000 + step
 *   blob "loader" of rank r: the bytes "loader rank=<r> step=<step>" (no NUL)
 *
 * tests/scripts/test_shared_h5py.py recomputes the same formulas in Python: keep them in sync.
 *
 * What rank r of a job of n ranks registers (sm_model_setup):
 *   "w"            float32 [37, 5]  partitioned by rows: rows [r*37/n, (r+1)*37/n) (uneven)
 *   "w_cols"       int64   [4, 9]   partitioned by columns: cols [r*9/n, (r+1)*9/n)
 *   "full_r<k>"    float64 [3, 4]   full, for every k < n_full with k % n == r (n_full = n when
 *                                   writing: rank r owns full_r<r>; a reader passes the writer's
 *                                   rank count, so the full tensors are spread over its ranks)
 *   "bias"         float32 [7]      replicated, primary
 *   "rng"          uint64  [2]      replicated per component: component r holds f(r)
 *   "loader"       blob             bytes encode (rank, step)
 *   "global_step"  int64   scalar   replicated, primary
 *   "empty"        float32 [0, 3]   full, on rank 0
 */
#ifndef MPICKPT_TESTS_SAVER_MODEL_H
#define MPICKPT_TESTS_SAVER_MODEL_H

#include "mpickpt/saver.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_W_ROWS 37
#define SM_W_COLS 5
#define SM_WC_ROWS 4
#define SM_WC_COLS 9
#define SM_FULL_ROWS 3
#define SM_FULL_COLS 4
#define SM_FULL_ELEMS (SM_FULL_ROWS * SM_FULL_COLS)
#define SM_BIAS_LEN 7
#define SM_RNG_LEN 2

#define SM_ID_W 1
#define SM_ID_W_COLS 2
#define SM_ID_BIAS 3
#define SM_ID_GLOBAL_STEP 5
#define SM_ID_FULL0 100 /* full_r<k> has id 100 + k */

/* Print at most this many mismatches per check. */
#define SM_MAX_REPORT 5

static inline double sm_float_value(int id, int64_t flat, int64_t step)
{
    return (double)((int64_t)id * 1000 + flat) * 0.5 + (double)step;
}

static inline int64_t sm_int_value(int id, int64_t flat, int64_t step)
{
    return -((int64_t)id * 1000000 + flat * 1000 + step);
}

static inline uint64_t sm_rng_value(int component, int64_t j, int64_t step)
{
    return (UINT64_C(1) << 63) + (uint64_t)component * 1000000u + (uint64_t)j * 1000u +
           (uint64_t)step;
}

/* Rows (or columns) [*start, *start + *count) of a dimension of @p total split over n ranks. */
static inline void sm_part(int64_t total, int n, int r, int64_t *start, int64_t *count)
{
    int64_t b = (int64_t)r * total / n, e = (int64_t)(r + 1) * total / n;
    *start = b;
    *count = e - b;
}

typedef struct sm_model {
    int n, r, n_full;
    int64_t step; /* step of the last sm_fill (encoded in the blob at save) */

    int64_t w_row0, w_nrows;
    float *w; /* [w_nrows, 5] */
    int64_t c_col0, c_ncols;
    int64_t *w_cols; /* [4, c_ncols] */

    int nfull;
    int *full_k;  /* [nfull]: the k of full_r<k> */
    double *full; /* [nfull, 12] */
    char (*full_name)[32];

    float bias[SM_BIAS_LEN];
    uint64_t rng[SM_RNG_LEN];
    int64_t global_step;
    float empty[1]; /* never read or written: [0, 3] has no element */

    /* blob "loader" */
    char blob_out[64];
    size_t blob_len;
    int blob_calls;     /* restore callback calls since sm_zero */
    int blob_malformed; /* restore callback saw bytes it could not parse */
    int blob_rank;      /* decoded from the last restored bytes */
    int64_t blob_step;
    int blob_early; /* callbacks that ran before the tensors held the blob's step */
} sm_model;

static inline int sm_blob_save(const void **data, size_t *len, void *payload)
{
    sm_model *m = (sm_model *)payload;
    int k =
        snprintf(m->blob_out, sizeof m->blob_out, "loader rank=%d step=%" PRId64, m->r, m->step);
    m->blob_len = (size_t)k;
    *data = m->blob_out;
    *len = m->blob_len;
    return CKPT_OK;
}

static inline int sm_blob_restore(const void *data, size_t len, void *payload)
{
    sm_model *m = (sm_model *)payload;
    char buf[64], again[64];
    int rank = -1;
    int64_t step = -1;
    m->blob_calls++;
    if (!data || len == 0 || len >= sizeof buf) {
        m->blob_malformed++;
        return CKPT_ECORRUPT;
    }
    memcpy(buf, data, len);
    buf[len] = '\0';
    if (sscanf(buf, "loader rank=%d step=%" SCNd64, &rank, &step) != 2) {
        m->blob_malformed++;
        return CKPT_ECORRUPT;
    }
    snprintf(again, sizeof again, "loader rank=%d step=%" PRId64, rank, step);
    if (strcmp(again, buf) != 0) {
        m->blob_malformed++;
        return CKPT_ECORRUPT;
    }
    m->blob_rank = rank;
    m->blob_step = step;
    /* "restore runs after the tensors are restored": the replicated tensors (registered after
     * the blob) must already hold the values of the blob's step. */
    if (m->global_step != sm_int_value(SM_ID_GLOBAL_STEP, 0, step) ||
        m->bias[0] != (float)sm_float_value(SM_ID_BIAS, 0, step))
        m->blob_early++;
    return CKPT_OK;
}

/* Allocates the buffers of rank r of n (full tensors of n_full writer ranks). */
static inline int sm_model_init(sm_model *m, int n, int r, int n_full)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->r = r;
    m->n_full = n_full;
    sm_part(SM_W_ROWS, n, r, &m->w_row0, &m->w_nrows);
    sm_part(SM_WC_COLS, n, r, &m->c_col0, &m->c_ncols);
    m->w = (float *)calloc((size_t)(m->w_nrows * SM_W_COLS) + 1, sizeof(float));
    m->w_cols = (int64_t *)calloc((size_t)(SM_WC_ROWS * m->c_ncols) + 1, sizeof(int64_t));
    for (int k = 0; k < n_full; k++)
        if (k % n == r)
            m->nfull++;
    m->full_k = (int *)calloc((size_t)m->nfull + 1, sizeof(int));
    m->full = (double *)calloc((size_t)m->nfull * SM_FULL_ELEMS + 1, sizeof(double));
    m->full_name = (char(*)[32])calloc((size_t)m->nfull + 1, 32);
    if (!m->w || !m->w_cols || !m->full_k || !m->full || !m->full_name)
        return CKPT_ENOMEM;
    int i = 0;
    for (int k = 0; k < n_full; k++)
        if (k % n == r) {
            m->full_k[i] = k;
            snprintf(m->full_name[i], 32, "full_r%d", k);
            i++;
        }
    m->blob_rank = -1;
    m->blob_step = -1;
    return CKPT_OK;
}

static inline void sm_model_free(sm_model *m)
{
    free(m->w);
    free(m->w_cols);
    free(m->full_k);
    free(m->full);
    free(m->full_name);
    memset(m, 0, sizeof *m);
}

static inline ckpt_shape sm_shape(int ndims, int64_t d0, int64_t d1)
{
    ckpt_shape s;
    memset(&s, 0, sizeof s);
    s.ndims = ndims;
    s.dims[0] = d0;
    s.dims[1] = d1;
    return s;
}

static inline ckpt_slice sm_slice2(int64_t s0, int64_t s1, int64_t c0, int64_t c1)
{
    ckpt_slice s;
    memset(&s, 0, sizeof s);
    s.ndims = 2;
    s.start[0] = s0;
    s.start[1] = s1;
    s.count[0] = c0;
    s.count[1] = c1;
    return s;
}

#define SM_TRY_(call)                                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != CKPT_OK) {                                                                      \
            const ckpt_error *e_ = ckpt_error_last();                                              \
            fprintf(stderr, "[rank %d] saver_model: %s failed: %d: %s\n", m->r, #call, rc_,        \
                    e_ ? e_->message : "(no message)");                                            \
            return rc_;                                                                            \
        }                                                                                          \
    } while (0)

/* Registers everything this rank owns with @p s. Local. Returns the first failing status. */
static inline int sm_model_register(sm_model *m, ckpt_saver *s)
{
    ckpt_shape sh = sm_shape(2, SM_W_ROWS, SM_W_COLS);
    ckpt_slice sl = sm_slice2(m->w_row0, 0, m->w_nrows, SM_W_COLS);
    if (m->w_nrows > 0)
        SM_TRY_(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &sh, &sl, m->w));

    sh = sm_shape(2, SM_WC_ROWS, SM_WC_COLS);
    sl = sm_slice2(0, m->c_col0, SM_WC_ROWS, m->c_ncols);
    if (m->c_ncols > 0)
        SM_TRY_(ckpt_saver_add_slice(s, "w_cols", CKPT_INT64, &sh, &sl, m->w_cols));

    sh = sm_shape(2, SM_FULL_ROWS, SM_FULL_COLS);
    for (int i = 0; i < m->nfull; i++)
        SM_TRY_(ckpt_saver_add_full(s, m->full_name[i], CKPT_FLOAT64, &sh,
                                    m->full + (size_t)i * SM_FULL_ELEMS));

    sh = sm_shape(1, SM_BIAS_LEN, 0);
    SM_TRY_(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &sh, m->bias, CKPT_REPLICA_PRIMARY));

    sh = sm_shape(1, SM_RNG_LEN, 0);
    SM_TRY_(
        ckpt_saver_add_replicated(s, "rng", CKPT_UINT64, &sh, m->rng, CKPT_REPLICA_PER_COMPONENT));

    ckpt_blob_callbacks cb = {sm_blob_save, sm_blob_restore};
    SM_TRY_(ckpt_saver_add_blob(s, "loader", &cb, m));

    sh = sm_shape(0, 0, 0);
    SM_TRY_(ckpt_saver_add_replicated(s, "global_step", CKPT_INT64, &sh, &m->global_step,
                                      CKPT_REPLICA_PRIMARY));

    if (m->r == 0) {
        sh = sm_shape(2, 0, 3);
        SM_TRY_(ckpt_saver_add_full(s, "empty", CKPT_FLOAT32, &sh, m->empty));
    }
    return CKPT_OK;
}

/* sm_model_init + sm_model_register. */
static inline int sm_model_setup(sm_model *m, ckpt_saver *s, int n, int r, int n_full)
{
    int rc = sm_model_init(m, n, r, n_full);
    if (rc != CKPT_OK)
        return rc;
    return sm_model_register(m, s);
}

/* Sets every buffer to the values of @p step. */
static inline void sm_fill(sm_model *m, int64_t step)
{
    m->step = step;
    for (int64_t i = 0; i < m->w_nrows; i++)
        for (int64_t j = 0; j < SM_W_COLS; j++)
            m->w[i * SM_W_COLS + j] =
                (float)sm_float_value(SM_ID_W, (m->w_row0 + i) * SM_W_COLS + j, step);
    for (int64_t i = 0; i < SM_WC_ROWS; i++)
        for (int64_t j = 0; j < m->c_ncols; j++)
            m->w_cols[i * m->c_ncols + j] =
                sm_int_value(SM_ID_W_COLS, i * SM_WC_COLS + m->c_col0 + j, step);
    for (int f = 0; f < m->nfull; f++)
        for (int64_t i = 0; i < SM_FULL_ELEMS; i++)
            m->full[(size_t)f * SM_FULL_ELEMS + (size_t)i] =
                sm_float_value(SM_ID_FULL0 + m->full_k[f], i, step);
    for (int64_t i = 0; i < SM_BIAS_LEN; i++)
        m->bias[i] = (float)sm_float_value(SM_ID_BIAS, i, step);
    for (int64_t j = 0; j < SM_RNG_LEN; j++)
        m->rng[j] = sm_rng_value(m->r, j, step);
    m->global_step = sm_int_value(SM_ID_GLOBAL_STEP, 0, step);
}

/* Zeroes every buffer and forgets what the blob callback saw. */
static inline void sm_zero(sm_model *m)
{
    memset(m->w, 0, (size_t)(m->w_nrows * SM_W_COLS) * sizeof(float));
    memset(m->w_cols, 0, (size_t)(SM_WC_ROWS * m->c_ncols) * sizeof(int64_t));
    memset(m->full, 0, (size_t)m->nfull * SM_FULL_ELEMS * sizeof(double));
    memset(m->bias, 0, sizeof m->bias);
    memset(m->rng, 0, sizeof m->rng);
    m->global_step = 0;
    m->blob_calls = 0;
    m->blob_malformed = 0;
    m->blob_rank = -1;
    m->blob_step = -1;
    m->blob_early = 0;
}

/* What sm_check expects of the per-rank state ("rng" component and "loader" blob). */
enum { SM_EXPECT_RESTORED = 1, SM_EXPECT_UNTOUCHED = 0 };

#define SM_MISMATCH_(...)                                                                          \
    do {                                                                                           \
        if (bad++ < SM_MAX_REPORT) {                                                               \
            fprintf(stderr, "[rank %d] %s: ", m->r, what);                                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Checks every element this rank holds against the values of @p step. @p per_rank says whether
 * the "rng" component and the "loader" blob must have been restored (values of this rank at
 * @p step) or left untouched (zero; callback not called). Returns the number of mismatches and
 * prints the first few with rank, tensor and index. */
static inline int sm_check(const sm_model *m, int64_t step, int per_rank, const char *what)
{
    int bad = 0;
    for (int64_t i = 0; i < m->w_nrows; i++)
        for (int64_t j = 0; j < SM_W_COLS; j++) {
            int64_t flat = (m->w_row0 + i) * SM_W_COLS + j;
            float want = (float)sm_float_value(SM_ID_W, flat, step);
            float got = m->w[i * SM_W_COLS + j];
            if (got != want)
                SM_MISMATCH_("w[%" PRId64 ",%" PRId64 "] (flat %" PRId64 ") = %.9g, want %.9g",
                             m->w_row0 + i, j, flat, (double)got, (double)want);
        }
    for (int64_t i = 0; i < SM_WC_ROWS; i++)
        for (int64_t j = 0; j < m->c_ncols; j++) {
            int64_t flat = i * SM_WC_COLS + m->c_col0 + j;
            int64_t want = sm_int_value(SM_ID_W_COLS, flat, step);
            int64_t got = m->w_cols[i * m->c_ncols + j];
            if (got != want)
                SM_MISMATCH_("w_cols[%" PRId64 ",%" PRId64 "] = %" PRId64 ", want %" PRId64, i,
                             m->c_col0 + j, got, want);
        }
    for (int f = 0; f < m->nfull; f++)
        for (int64_t i = 0; i < SM_FULL_ELEMS; i++) {
            double want = sm_float_value(SM_ID_FULL0 + m->full_k[f], i, step);
            double got = m->full[(size_t)f * SM_FULL_ELEMS + (size_t)i];
            if (got != want)
                SM_MISMATCH_("%s[flat %" PRId64 "] = %.17g, want %.17g", m->full_name[f], i, got,
                             want);
        }
    for (int64_t i = 0; i < SM_BIAS_LEN; i++) {
        float want = (float)sm_float_value(SM_ID_BIAS, i, step);
        if (m->bias[i] != want)
            SM_MISMATCH_("bias[%" PRId64 "] = %.9g, want %.9g", i, (double)m->bias[i],
                         (double)want);
    }
    for (int64_t j = 0; j < SM_RNG_LEN; j++) {
        uint64_t want = per_rank ? sm_rng_value(m->r, j, step) : 0;
        if (m->rng[j] != want)
            SM_MISMATCH_("rng[%" PRId64 "] (component %d) = %" PRIu64 ", want %" PRIu64 "%s", j,
                         m->r, m->rng[j], want, per_rank ? "" : " (untouched)");
    }
    {
        int64_t want = sm_int_value(SM_ID_GLOBAL_STEP, 0, step);
        if (m->global_step != want)
            SM_MISMATCH_("global_step = %" PRId64 ", want %" PRId64, m->global_step, want);
    }
    if (m->blob_malformed)
        SM_MISMATCH_("loader: restore callback got malformed bytes %d times", m->blob_malformed);
    if (m->blob_early)
        SM_MISMATCH_("loader: restore callback ran %d time(s) before the tensors were restored "
                     "(global_step/bias did not yet hold the blob's step); saver.h: restore runs "
                     "after the tensors are restored",
                     m->blob_early);
    if (per_rank) {
        if (m->blob_calls != 1 || m->blob_rank != m->r || m->blob_step != step)
            SM_MISMATCH_("loader: restore callback called %d times, last got rank %d step %" PRId64
                         ", want once with rank %d step %" PRId64,
                         m->blob_calls, m->blob_rank, m->blob_step, m->r, step);
    } else if (m->blob_calls != 0) {
        SM_MISMATCH_("loader: restore callback called %d times (rank %d step %" PRId64
                     "), want never (no blob for this rank)",
                     m->blob_calls, m->blob_rank, m->blob_step);
    }
    return bad;
}

#undef SM_TRY_
#undef SM_MISMATCH_

#endif
