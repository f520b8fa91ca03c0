/* The test model of the MPI tests: see model.h. */
#include "model.h"

#include "mpickpt/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TM_MAX_REPORT 5 /* mismatches printed per check */
#define TM_SENTINEL_BYTE 0xA5

double tm_float_value(int id, int64_t flat, int64_t step)
{
    return (double)((int64_t)id * 1000 + flat) * 0.5 + (double)step;
}

int64_t tm_int_value(int id, int64_t flat, int64_t step)
{
    return -((int64_t)id * 1000000 + flat * 1000 + step);
}

uint64_t tm_rng_value(int component, int64_t j, int64_t step)
{
    return (UINT64_C(1) << 63) + (uint64_t)component * 1000000u + (uint64_t)j * 1000u +
           (uint64_t)step;
}

uint32_t tm_big_value(int64_t flat, int64_t step)
{
    uint64_t x = (uint64_t)flat * UINT64_C(0x9E3779B97F4A7C15) +
                 (uint64_t)step * UINT64_C(0xD1B54A32D192ED03);
    x ^= x >> 29;
    return (uint32_t)x ^ (uint32_t)(x >> 32);
}

size_t tm_blob_text(char *buf, size_t n, int rank, int64_t step)
{
    int pad = (int)(((step % 8) + 8) % 8);
    int k = snprintf(buf, n, "loader rank=%d step=%" PRId64 " %.*s", rank, step, pad, "xxxxxxxx");
    return k > 0 ? (size_t)k : 0;
}

void tm_part(int64_t total, int n, int r, int64_t *start, int64_t *count)
{
    int64_t b = (int64_t)r * total / n, e = (int64_t)(r + 1) * total / n;
    *start = b;
    *count = e - b;
}

ckpt_shape tm_shape(int ndims, int64_t d0, int64_t d1)
{
    ckpt_shape s;
    memset(&s, 0, sizeof s);
    s.ndims = ndims;
    s.dims[0] = d0;
    s.dims[1] = d1;
    return s;
}

ckpt_slice tm_slice2(int64_t s0, int64_t s1, int64_t c0, int64_t c1)
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

/* ---- blob callbacks ---- */

int tm_blob_save(const void **data, size_t *len, void *payload)
{
    tm_model *m = (tm_model *)payload;
    *len = tm_blob_text(m->blob_out, sizeof m->blob_out, m->r, m->step);
    *data = m->blob_out;
    return CKPT_OK;
}

/* Records what it got: rank and step when the bytes are exactly a blob of the model, and whether
 * the tensors already held that step ("restore runs after the tensors are restored", saver.h:
 * the replicated tensors, registered after the blob, must hold the values of the blob's step). */
int tm_blob_restore(const void *data, size_t len, void *payload)
{
    tm_model *m = (tm_model *)payload;
    char buf[TM_BLOB_MAX], again[TM_BLOB_MAX];
    int rank = -1;
    int64_t step = -1;
    m->blob_calls++;
    m->blob_rank = -1;
    m->blob_step = -1;
    m->blob_last_early = 0;
    if (!data || len == 0 || len >= sizeof buf) {
        m->blob_malformed++;
        return CKPT_ECORRUPT;
    }
    memcpy(buf, data, len);
    buf[len] = '\0';
    if (sscanf(buf, "loader rank=%d step=%" SCNd64, &rank, &step) != 2 ||
        tm_blob_text(again, sizeof again, rank, step) != len || strcmp(again, buf) != 0) {
        m->blob_malformed++;
        return CKPT_ECORRUPT;
    }
    m->blob_rank = rank;
    m->blob_step = step;
    if (m->global_step != tm_int_value(TM_ID_GLOBAL_STEP, 0, step) ||
        m->bias[0] != (float)tm_float_value(TM_ID_BIAS, 0, step)) {
        m->blob_early++;
        m->blob_last_early = 1;
    }
    return CKPT_OK;
}

/* ---- life ---- */

int tm_init(tm_model *m, int n, int r, int n_full, int64_t big_rows)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->r = r;
    m->n_full = n_full;
    tm_part(TM_W_ROWS, n, r, &m->w_row0, &m->w_nrows);
    tm_part(TM_WC_COLS, n, r, &m->c_col0, &m->c_ncols);
    for (int k = 0; k < n_full; k++)
        if (k % n == r) {
            if (m->nfull == TM_MAX_FULL) {
                fprintf(stderr, "[rank %d] model: more than %d full tensors on one rank\n", r,
                        TM_MAX_FULL);
                return CKPT_EINVAL;
            }
            m->full_k[m->nfull] = k;
            snprintf(m->full_name[m->nfull], sizeof m->full_name[0], "full_r%d", k);
            m->nfull++;
        }
    m->big_rows_total = big_rows;
    if (big_rows > 0) {
        tm_part(big_rows, n, r, &m->big_row0, &m->big_rows);
        m->big = (uint32_t *)calloc((size_t)(m->big_rows * TM_BIG_COLS) + 1, sizeof(uint32_t));
        if (!m->big) {
            fprintf(stderr, "[rank %d] model: out of memory for %" PRId64 " rows of big\n", r,
                    m->big_rows);
            return CKPT_ENOMEM;
        }
    }
    m->blob_rank = -1;
    m->blob_step = -1;
    return CKPT_OK;
}

void tm_free(tm_model *m)
{
    free(m->big);
    memset(m, 0, sizeof *m);
}

/* ---- registration ---- */

#define TM_TRY_(call)                                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != CKPT_OK) {                                                                      \
            const ckpt_error *e_ = ckpt_error_last();                                              \
            fprintf(stderr, "[rank %d] model: %s failed: %d: %s\n", m->r, #call, rc_,              \
                    e_ && e_->message ? e_->message : "(no message)");                             \
            return rc_;                                                                            \
        }                                                                                          \
    } while (0)

int tm_register_variant(tm_model *m, ckpt_saver *s, tm_variant v)
{
    ckpt_shape sh = tm_shape(2, TM_W_ROWS + (v == TM_REG_W_SHAPE ? 1 : 0), TM_W_COLS);
    ckpt_slice sl = tm_slice2(m->w_row0, 0, m->w_nrows, TM_W_COLS);
    if (m->w_nrows > 0 && v == TM_REG_W_FLOAT64)
        TM_TRY_(ckpt_saver_add_slice(s, "w", CKPT_FLOAT64, &sh, &sl, m->wd));
    else if (m->w_nrows > 0)
        TM_TRY_(ckpt_saver_add_slice(s, "w", CKPT_FLOAT32, &sh, &sl, m->w));

    sh = tm_shape(2, TM_WC_ROWS, TM_WC_COLS);
    sl = tm_slice2(0, m->c_col0, TM_WC_ROWS, m->c_ncols);
    if (m->c_ncols > 0)
        TM_TRY_(ckpt_saver_add_slice(s, "w_cols", CKPT_INT64, &sh, &sl, m->w_cols));

    sh = tm_shape(2, TM_FULL_ROWS, TM_FULL_COLS);
    for (int i = 0; i < m->nfull; i++)
        TM_TRY_(ckpt_saver_add_full(s, m->full_name[i], CKPT_FLOAT64, &sh, m->full[i]));

    sh = tm_shape(1, TM_BIAS_LEN, 0);
    TM_TRY_(ckpt_saver_add_replicated(s, "bias", CKPT_FLOAT32, &sh, m->bias, CKPT_REPLICA_PRIMARY));

    sh = tm_shape(1, TM_RNG_LEN, 0);
    TM_TRY_(
        ckpt_saver_add_replicated(s, "rng", CKPT_UINT64, &sh, m->rng, CKPT_REPLICA_PER_COMPONENT));

    ckpt_blob_callbacks cb = {tm_blob_save, tm_blob_restore};
    TM_TRY_(ckpt_saver_add_blob(s, "loader", &cb, m));

    sh = tm_shape(0, 0, 0);
    TM_TRY_(ckpt_saver_add_replicated(s, "global_step", CKPT_INT64, &sh, &m->global_step,
                                      CKPT_REPLICA_PRIMARY));

    if (m->r == 0) {
        sh = tm_shape(2, 0, 3);
        TM_TRY_(ckpt_saver_add_full(s, "empty", CKPT_FLOAT32, &sh, m->empty));
    }

    if (m->big_rows > 0) {
        sh = tm_shape(2, m->big_rows_total, TM_BIG_COLS);
        sl = tm_slice2(m->big_row0, 0, m->big_rows, TM_BIG_COLS);
        TM_TRY_(ckpt_saver_add_slice(s, "big", CKPT_UINT32, &sh, &sl, m->big));
    }

    if (v == TM_REG_EXTRA_NAME && m->r == m->n - 1) {
        sh = tm_shape(1, 2, 0);
        TM_TRY_(ckpt_saver_add_full(s, TM_EXTRA_NAME, CKPT_INT64, &sh, m->extra));
    }
    return CKPT_OK;
}

int tm_register(tm_model *m, ckpt_saver *s)
{
    return tm_register_variant(m, s, TM_REG_OK);
}

int tm_setup(tm_model *m, ckpt_saver *s, int n, int r, int n_full)
{
    int rc = tm_init(m, n, r, n_full, 0);
    return rc != CKPT_OK ? rc : tm_register(m, s);
}

/* ---- values ---- */

void tm_fill(tm_model *m, int64_t step)
{
    m->step = step;
    for (int64_t i = 0; i < m->w_nrows; i++)
        for (int64_t j = 0; j < TM_W_COLS; j++) {
            double v = tm_float_value(TM_ID_W, (m->w_row0 + i) * TM_W_COLS + j, step);
            m->w[i * TM_W_COLS + j] = (float)v;
            m->wd[i * TM_W_COLS + j] = v;
        }
    for (int64_t i = 0; i < TM_WC_ROWS; i++)
        for (int64_t j = 0; j < m->c_ncols; j++)
            m->w_cols[i * m->c_ncols + j] =
                tm_int_value(TM_ID_W_COLS, i * TM_WC_COLS + m->c_col0 + j, step);
    for (int f = 0; f < m->nfull; f++)
        for (int64_t i = 0; i < TM_FULL_ELEMS; i++)
            m->full[f][i] = tm_float_value(TM_ID_FULL0 + m->full_k[f], i, step);
    for (int64_t i = 0; i < TM_BIAS_LEN; i++)
        m->bias[i] = (float)tm_float_value(TM_ID_BIAS, i, step);
    for (int64_t j = 0; j < TM_RNG_LEN; j++)
        m->rng[j] = tm_rng_value(m->r, j, step);
    m->global_step = tm_int_value(TM_ID_GLOBAL_STEP, 0, step);
    for (int64_t i = 0; i < m->big_rows * TM_BIG_COLS; i++)
        m->big[i] = tm_big_value(m->big_row0 * TM_BIG_COLS + i, step);
}

static void clobber(tm_model *m, int byte)
{
    memset(m->w, byte, sizeof m->w);
    memset(m->wd, byte, sizeof m->wd);
    memset(m->w_cols, byte, sizeof m->w_cols);
    memset(m->full, byte, sizeof m->full);
    memset(m->bias, byte, sizeof m->bias);
    memset(m->rng, byte, sizeof m->rng);
    memset(&m->global_step, byte, sizeof m->global_step);
    memset(m->extra, byte, sizeof m->extra);
    if (m->big)
        memset(m->big, byte, (size_t)(m->big_rows * TM_BIG_COLS) * sizeof(uint32_t));
    memcpy(&m->rng_clobber, &m->rng[0], sizeof m->rng_clobber);
    m->blob_calls = 0;
    m->blob_malformed = 0;
    m->blob_early = 0;
    m->blob_last_early = 0;
    m->blob_rank = -1;
    m->blob_step = -1;
}

void tm_zero(tm_model *m)
{
    clobber(m, 0);
}

void tm_sentinel(tm_model *m)
{
    clobber(m, TM_SENTINEL_BYTE);
}

#define TM_MISMATCH_(...)                                                                          \
    do {                                                                                           \
        if (bad++ < TM_MAX_REPORT) {                                                               \
            fprintf(stderr, "[rank %d] %s: ", m->r, what);                                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

int tm_check(const tm_model *m, int64_t step, tm_expect e, const char *what)
{
    int bad = 0;
    for (int64_t i = 0; i < m->w_nrows; i++)
        for (int64_t j = 0; j < TM_W_COLS; j++) {
            int64_t flat = (m->w_row0 + i) * TM_W_COLS + j;
            float want = (float)tm_float_value(TM_ID_W, flat, step);
            float got = m->w[i * TM_W_COLS + j];
            if (got != want)
                TM_MISMATCH_("w[%" PRId64 ",%" PRId64 "] (flat %" PRId64 ") = %.9g, want %.9g",
                             m->w_row0 + i, j, flat, (double)got, (double)want);
        }
    for (int64_t i = 0; i < TM_WC_ROWS; i++)
        for (int64_t j = 0; j < m->c_ncols; j++) {
            int64_t flat = i * TM_WC_COLS + m->c_col0 + j;
            int64_t want = tm_int_value(TM_ID_W_COLS, flat, step);
            int64_t got = m->w_cols[i * m->c_ncols + j];
            if (got != want)
                TM_MISMATCH_("w_cols[%" PRId64 ",%" PRId64 "] = %" PRId64 ", want %" PRId64, i,
                             m->c_col0 + j, got, want);
        }
    for (int f = 0; f < m->nfull; f++)
        for (int64_t i = 0; i < TM_FULL_ELEMS; i++) {
            double want = tm_float_value(TM_ID_FULL0 + m->full_k[f], i, step);
            if (m->full[f][i] != want)
                TM_MISMATCH_("%s[flat %" PRId64 "] = %.17g, want %.17g", m->full_name[f], i,
                             m->full[f][i], want);
        }
    for (int64_t i = 0; i < TM_BIAS_LEN; i++) {
        float want = (float)tm_float_value(TM_ID_BIAS, i, step);
        if (m->bias[i] != want)
            TM_MISMATCH_("bias[%" PRId64 "] = %.9g, want %.9g", i, (double)m->bias[i],
                         (double)want);
    }
    {
        int64_t want = tm_int_value(TM_ID_GLOBAL_STEP, 0, step);
        if (m->global_step != want)
            TM_MISMATCH_("global_step = %" PRId64 ", want %" PRId64, m->global_step, want);
    }
    for (int64_t i = 0; i < m->big_rows * TM_BIG_COLS; i++) {
        int64_t flat = m->big_row0 * TM_BIG_COLS + i;
        uint32_t want = tm_big_value(flat, step);
        if (m->big[i] != want)
            TM_MISMATCH_("big[flat %" PRId64 "] = %" PRIu32 ", want %" PRIu32, flat, m->big[i],
                         want);
    }
    for (int64_t j = 0; j < TM_RNG_LEN; j++) {
        uint64_t want = e != TM_UNTOUCHED ? tm_rng_value(m->r, j, step) : m->rng_clobber;
        if (m->rng[j] != want)
            TM_MISMATCH_("rng[%" PRId64 "] (component %d) = %" PRIu64 ", want %" PRIu64 " (%s)", j,
                         m->r, m->rng[j], want,
                         e != TM_UNTOUCHED ? "restored" : "untouched: no component for this rank");
    }
    char want[TM_BLOB_MAX];
    tm_blob_text(want, sizeof want, m->r, step);
    if (e == TM_RESTORED_LAST) {
        /* a fallback may have called the callback for a candidate it then abandoned */
        if (m->blob_calls < 1 || m->blob_rank != m->r || m->blob_step != step)
            TM_MISMATCH_("loader: restore callback called %d times, last got rank %d step %" PRId64
                         " (-1: none, or malformed bytes), want at least once, the last with "
                         "\"%s\"",
                         m->blob_calls, m->blob_rank, m->blob_step, want);
        if (m->blob_last_early)
            TM_MISMATCH_("loader: the last restore callback ran before the tensors were "
                         "restored (global_step/bias did not yet hold the blob's step); saver.h: "
                         "restore runs after the tensors are restored");
        return bad;
    }
    if (m->blob_malformed)
        TM_MISMATCH_("loader: restore callback got malformed bytes %d times", m->blob_malformed);
    if (m->blob_early)
        TM_MISMATCH_("loader: restore callback ran %d time(s) before the tensors were restored "
                     "(global_step/bias did not yet hold the blob's step); saver.h: restore runs "
                     "after the tensors are restored",
                     m->blob_early);
    if (e == TM_RESTORED) {
        if (m->blob_calls != 1 || m->blob_rank != m->r || m->blob_step != step)
            TM_MISMATCH_("loader: restore callback called %d times, last got rank %d step %" PRId64
                         ", want once with \"%s\"",
                         m->blob_calls, m->blob_rank, m->blob_step, want);
    } else if (m->blob_calls != 0) {
        TM_MISMATCH_("loader: restore callback called %d times (last: rank %d step %" PRId64
                     "), want never: the checkpoint restored has no blob for this rank",
                     m->blob_calls, m->blob_rank, m->blob_step);
    }
    return bad;
}

uint64_t tm_stored_bytes(int n, int64_t big_rows, int64_t step)
{
    uint64_t b = TM_W_ROWS * TM_W_COLS * 4 + TM_WC_ROWS * TM_WC_COLS * 8 +
                 (uint64_t)n * TM_FULL_ELEMS * 8 + TM_BIAS_LEN * 4 + (uint64_t)n * TM_RNG_LEN * 8 +
                 8 + (uint64_t)big_rows * TM_BIG_COLS * 4;
    for (int r = 0; r < n; r++) {
        char blob[TM_BLOB_MAX];
        b += tm_blob_text(blob, sizeof blob, r, step);
    }
    return b;
}

/* ---- damage ---- */

int tm_flip_piece_byte(const char *prefix, const char *tensor, int victim, char *file_out,
                       size_t file_size)
{
    ckpt_reader *rd = NULL;
    int rc = ckpt_reader_open_index(&rd, prefix);
    if (rc != CKPT_OK)
        return rc;
    size_t ti = 0;
    ckpt_tensor_info t;
    ckpt_piece_info pi;
    int found = 0, packed = 0;
    uint64_t pack_off = 0;
    char path[4400] = "", dset[1024] = "";
    ckpt_slice dsl;
    memset(&dsl, 0, sizeof dsl);
    size_t esize = 0;
    if (ckpt_reader_find(&ti, rd, tensor) == CKPT_OK && ckpt_reader_tensor(&t, rd, ti) == CKPT_OK)
        for (size_t j = 0; j < t.num_pieces && !found; j++)
            if (ckpt_reader_piece(&pi, rd, ti, j) == CKPT_OK && pi.rank == victim && pi.bytes > 8 &&
                ckpt_reader_piece_packing(&packed, &pack_off, rd, ti, j) == CKPT_OK) {
                char dir[4096];
                snprintf(dir, sizeof dir, "%s", prefix);
                char *slash = strrchr(dir, '/');
                if (slash)
                    *slash = '\0';
                else
                    snprintf(dir, sizeof dir, ".");
                snprintf(path, sizeof path, "%s/%s", dir, pi.file);
                if (file_out)
                    snprintf(file_out, file_size, "%s", pi.file);
                snprintf(dset, sizeof dset, "%s", pi.dataset);
                dsl = pi.dataset_slice;
                esize = ckpt_dtype_size(t.dtype);
                found = 1;
            }
    ckpt_reader_free(rd);
    if (!found)
        return CKPT_ENOTFOUND;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, dset, H5P_DEFAULT) : H5I_INVALID_HID;
    haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
    if (off != HADDR_UNDEF && packed) {
        off += (haddr_t)pack_off;
    } else if (off != HADDR_UNDEF) {
        /* row-major position of the piece's first element in its dataset */
        hsize_t dims[32];
        hid_t sp = H5Dget_space(d);
        int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
        if (sp >= 0)
            H5Sclose(sp);
        if (nd != dsl.ndims) {
            off = HADDR_UNDEF;
        } else {
            uint64_t flat = 0;
            for (int k = 0; k < nd; k++)
                flat = flat * dims[k] + (uint64_t)dsl.start[k];
            off += (haddr_t)(flat * esize);
        }
    }
    if (d >= 0)
        H5Dclose(d);
    if (f >= 0)
        H5Fclose(f);
    if (off == HADDR_UNDEF)
        return CKPT_ERROR;
    off += (haddr_t)esize + 1; /* inside the piece's second element */
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    if (fd < 0 || pread(fd, &b, 1, (off_t)off) != 1) {
        if (fd >= 0)
            close(fd);
        return CKPT_EIO;
    }
    b ^= 0x21;
    rc = pwrite(fd, &b, 1, (off_t)off) == 1 && fsync(fd) == 0 ? CKPT_OK : CKPT_EIO;
    close(fd);
    return rc;
}

ckpt_layout tm_layout(const char *name)
{
    if (strcmp(name, "shared") == 0)
        return CKPT_LAYOUT_SHARED;
    if (strcmp(name, "per-rank") == 0)
        return CKPT_LAYOUT_PER_RANK;
    if (strcmp(name, "per-node") == 0)
        return CKPT_LAYOUT_PER_NODE;
    return CKPT_LAYOUT_UNKNOWN;
}

int tm_ranks_per_node(void)
{
    const char *v = getenv("MPICKPT_RANKS_PER_NODE");
    return v && *v ? atoi(v) : 0;
}

int tm_data_files(ckpt_layout layout, int n)
{
    if (layout == CKPT_LAYOUT_SHARED)
        return 1;
    if (layout != CKPT_LAYOUT_PER_NODE)
        return n;
    int k = tm_ranks_per_node();
    return k > 0 ? (n + k - 1) / k : 1;
}

int tm_data_file_of(ckpt_layout layout, int n, int r)
{
    (void)n;
    if (layout == CKPT_LAYOUT_SHARED)
        return 0;
    if (layout != CKPT_LAYOUT_PER_NODE)
        return r;
    int k = tm_ranks_per_node();
    return k > 0 ? r / k : 0;
}

void tm_data_file_name(char *out, size_t size, const char *base, ckpt_layout layout, int n, int r)
{
    snprintf(out, size, "%s.data-%05d-of-%05d", base, tm_data_file_of(layout, n, r),
             tm_data_files(layout, n));
}
