/* The test model of the MPI tests (test_saver, test_saver_fault, test_manager, test_async,
 * test_hostile_mpi): one small "training model" whose every element value is a deterministic
 * function of (tensor id, global flat index, step) and never of the rank count, so that a job of N
 * ranks and a job of M ranks agree on what a checkpoint must hold:
 *
 *   float32/float64:  (id * 1000 + flat) * 0.5 + step      (exact for these sizes and steps)
 *   int64:            -(id * 1000000 + flat * 1000 + step)
 *   "rng" component c, element j (uint64): 2^63 + c * 1000000 + j * 1000 + step
 *   "big" (uint32):   a hash of (flat, step)                  (tm_big_value)
 *   blob "loader" of rank r: tm_blob_text(r, step), "loader rank=<r> step=<step> " and step % 8
 *                     'x' (no NUL): its length changes with the step, so that a plan cannot fix
 *                     the size of a blob
 *
 * tests/scripts/test_shared_h5py.py recomputes the same formulas in Python: keep them in sync.
 *
 * What rank r of a job of n ranks registers (tm_register):
 *   "w"            float32 [37, 5]  partitioned by rows: rows [r*37/n, (r+1)*37/n) (uneven)
 *   "w_cols"       int64   [4, 9]   partitioned by columns: cols [r*9/n, (r+1)*9/n)
 *   "full_r<k>"    float64 [3, 4]   full, for every k < n_full with k % n == r (n_full = n when
 *                                   writing: rank r owns full_r<r>; a reader passes the writer's
 *                                   rank count, so the full tensors are spread over its ranks;
 *                                   n_full = 0: none)
 *   "bias"         float32 [7]      replicated, primary
 *   "rng"          uint64  [2]      replicated per component: component r holds f(r)
 *   "loader"       blob             bytes encode (rank, step)
 *   "global_step"  int64   scalar   replicated, primary
 *   "empty"        float32 [0, 3]   full, on rank 0
 *   "big"          uint32  [G, 256] partitioned by rows, when the model has G > 0 rows of it (a row
 *                                   is 1 KiB: G = KiB per rank * n for a job of that size)
 *
 * The model's functions never CHECK (check.h counts per translation unit): tm_check returns the
 * number of wrong values and prints the first few; coll.h turns that into checks. */
#ifndef MPICKPT_TESTS_MODEL_H
#define MPICKPT_TESTS_MODEL_H

#include "mpickpt/saver.h"

#include <stddef.h>
#include <stdint.h>

#define TM_W_ROWS 37
#define TM_W_COLS 5
#define TM_WC_ROWS 4
#define TM_WC_COLS 9
#define TM_FULL_ROWS 3
#define TM_FULL_COLS 4
#define TM_FULL_ELEMS (TM_FULL_ROWS * TM_FULL_COLS)
#define TM_MAX_FULL 16 /* full tensors one rank may hold */
#define TM_BIAS_LEN 7
#define TM_RNG_LEN 2
#define TM_BIG_COLS 256 /* uint32: 1 KiB per row of "big" */

#define TM_ID_W 1
#define TM_ID_W_COLS 2
#define TM_ID_BIAS 3
#define TM_ID_GLOBAL_STEP 5
#define TM_ID_FULL0 100 /* full_r<k> has id 100 + k */

#define TM_BLOB_MAX 64                    /* longest blob text, NUL included */
#define TM_EXTRA_NAME "not_in_checkpoint" /* the tensor of TM_REG_EXTRA_NAME */

double tm_float_value(int id, int64_t flat, int64_t step);
int64_t tm_int_value(int id, int64_t flat, int64_t step);
uint64_t tm_rng_value(int component, int64_t j, int64_t step);
uint32_t tm_big_value(int64_t flat, int64_t step);
/* The blob of rank `rank` at `step` into buf[n]; returns its length (without the NUL). */
size_t tm_blob_text(char *buf, size_t n, int rank, int64_t step);

/* Rows (or columns) [*start, *start + *count) of a dimension of `total` split over n ranks. */
void tm_part(int64_t total, int n, int r, int64_t *start, int64_t *count);
ckpt_shape tm_shape(int ndims, int64_t d0, int64_t d1);
ckpt_slice tm_slice2(int64_t s0, int64_t s1, int64_t c0, int64_t c1);

typedef struct tm_model {
    int n, r, n_full;
    int64_t step; /* of the last tm_fill (encoded in the blob at save) */

    int64_t w_row0, w_nrows;
    float w[TM_W_ROWS * TM_W_COLS];   /* [w_nrows, 5] */
    double wd[TM_W_ROWS * TM_W_COLS]; /* "w" as float64 (TM_REG_W_FLOAT64) */
    int64_t c_col0, c_ncols;
    int64_t w_cols[TM_WC_ROWS * TM_WC_COLS]; /* [4, c_ncols] */

    int nfull;
    int full_k[TM_MAX_FULL]; /* the k of full_r<k> */
    double full[TM_MAX_FULL][TM_FULL_ELEMS];
    char full_name[TM_MAX_FULL][32];

    float bias[TM_BIAS_LEN];
    uint64_t rng[TM_RNG_LEN];
    int64_t global_step;
    float empty[1];   /* never read or written: [0, 3] has no element */
    int64_t extra[2]; /* TM_REG_EXTRA_NAME */

    int64_t big_rows_total, big_row0, big_rows;
    uint32_t *big; /* [big_rows, 256]; NULL without "big" */

    uint64_t rng_clobber; /* what tm_zero / tm_sentinel left in "rng" */

    /* blob "loader" */
    char blob_out[TM_BLOB_MAX]; /* the bytes handed out by the last save callback */
    int blob_calls;             /* restore callback calls since tm_zero / tm_sentinel */
    int blob_malformed;         /* calls with bytes it could not parse */
    int blob_early;             /* calls before the tensors held the blob's step */
    int blob_last_early;        /* the last call was one of them */
    int blob_rank;              /* decoded from the last call (-1: none, or malformed) */
    int64_t blob_step;
} tm_model;

/* Rank r of n; full tensors of n_full writer ranks (0: none); `big_rows` global rows of "big" (0:
 * none). CKPT_EINVAL when this rank would hold more than TM_MAX_FULL full tensors, CKPT_ENOMEM.
 * Needs no tm_free when big_rows is 0. */
int tm_init(tm_model *m, int n, int r, int n_full, int64_t big_rows);
void tm_free(tm_model *m);

typedef enum tm_variant {
    TM_REG_OK,
    TM_REG_W_FLOAT64,  /* "w" registered as float64 */
    TM_REG_W_SHAPE,    /* "w" with one more global row (nobody holds it) */
    TM_REG_EXTRA_NAME, /* TM_EXTRA_NAME, int64 [2], on the last rank: a tensor no checkpoint has */
} tm_variant;

/* Registers everything this rank holds with `s` (tm_register_variant: with a mismatch). Local.
 * Returns the first failing status (printed). */
int tm_register(tm_model *m, ckpt_saver *s);
int tm_register_variant(tm_model *m, ckpt_saver *s, tm_variant v);
/* tm_init + tm_register (no "big"). */
int tm_setup(tm_model *m, ckpt_saver *s, int n, int r, int n_full);

/* Every buffer gets the values of `step`. */
void tm_fill(tm_model *m, int64_t step);
/* Every buffer zeroed (tm_zero) or set to a sentinel byte pattern (tm_sentinel, which no value
 * of the model has), and the restore callback's record forgotten. */
void tm_zero(tm_model *m);
void tm_sentinel(tm_model *m);

/* The blob callbacks tm_register registers (payload: the model). tm_blob_save hands out
 * m->blob_out, rewritten with m->step. */
int tm_blob_save(const void **data, size_t *len, void *payload);
int tm_blob_restore(const void *data, size_t len, void *payload);

/* What tm_check expects of the per-rank state (the "rng" component and the "loader" blob). */
typedef enum tm_expect {
    TM_UNTOUCHED = 0, /* the component holds what tm_zero / tm_sentinel left, no callback call */
    TM_RESTORED = 1,  /* this rank's values of the step; the callback called exactly once */
    TM_RESTORED_LAST = 2, /* the same, but the callback may have been called before (a fallback
                           * past a damaged candidate): its last call counts */
} tm_expect;

/* Checks every element this rank holds against the values of `step`, and the per-rank state as
 * `e` says. Returns the number of mismatches and prints the first few with rank, tensor and index
 * (prefixed by `what`). Local. */
int tm_check(const tm_model *m, int64_t step, tm_expect e, const char *what);

/* The bytes a checkpoint of this model written by n ranks stores (each replicated primary once,
 * components and blobs per rank, full tensors of n_full = n, "big" of `big_rows` rows). */
uint64_t tm_stored_bytes(int n, int64_t big_rows, int64_t step);

/* Flips one byte inside the stored elements of rank `victim`'s piece of tensor `tensor` (of at
 * least two elements of 4 bytes or more) in checkpoint `prefix`: the file offset is H5Dget_offset
 * of the piece's dataset plus the piece's place in it (its pack offset when packed), so the index,
 * the sizes and the HDF5 structure stay valid and only the piece's CRC-32C can tell. The data
 * file's name (relative to the checkpoint's directory) goes to file_out (may be NULL). Local;
 * returns CKPT_OK. */
int tm_flip_piece_byte(const char *prefix, const char *tensor, int victim, char *file_out,
                       size_t file_size);

/* Layouts of the tests: "shared", "per-rank" or "per-node" (CKPT_LAYOUT_UNKNOWN otherwise). The
 * per-node tests run on one machine with nodes of MPICKPT_RANKS_PER_NODE=k ranks (ranks
 * [j*k, (j+1)*k) form node j); without the variable all ranks share one node. */
ckpt_layout tm_layout(const char *name);
/* Ranks per node of the per-node layout in this environment (0: every rank on one node). */
int tm_ranks_per_node(void);
/* How many data files a checkpoint of `layout` written by n ranks has, and which one holds the
 * pieces of rank r (per-rank: r; per-node: its node; shared: 0). */
int tm_data_files(ckpt_layout layout, int n);
int tm_data_file_of(ckpt_layout layout, int n, int r);
/* "<base>.data-<file>-of-<files>" of rank r's pieces, for `layout` and n writer ranks. */
void tm_data_file_name(char *out, size_t size, const char *base, ckpt_layout layout, int n,
                       int r);

#endif
