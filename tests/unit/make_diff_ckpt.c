/* Writes checkpoints that differ from one another in known ways, for `mpickpt diff` in
 * tests/scripts/test_cli_manage.sh (keep the expectations there in sync).
 *
 *   make_diff_ckpt PREFIX VARIANT [--counter N]
 *
 * Variant "base" (i is the row-major flat index; pieces tile the tensor):
 *   w/matrix [64,100] float64   i * 0.25, as 16 pieces of 4 rows (3200 bytes each)
 *   w/cube [2,3,1000] float32   i, as 12 pieces [1,1,500] (2000 bytes each)
 *   w/vec [10000] float64       i - 5000.5, as 100 pieces of 100 elements (800 bytes each)
 *   w/parts [6,4] int16         i - 12, as 3 pieces of 2 rows
 *   w/scalar [] float64         2.5
 *   w/empty [0,3] float32       no elements
 *   w/special [4] float32       NaN, 1, -0.0, +Inf
 *   only/base [2] int8          {1, 2}
 * "relayout": the same data stored differently: w/matrix and w/parts whole, w/vec as 10
 *   pieces of 1000 elements.
 * "values": like base, except w/matrix at flat 250, 5000, 6399 (+1), w/cube at 1, 2999, 3000,
 *   5999 (+1), w/vec at 4999 and 5000 (+1), w/scalar 3.5, w/special[2] +0.0 instead of -0.0.
 * "schema": like base, except w/parts has shape [4,6] (same values), w/scalar is float32, and
 *   only/base is replaced by only/other [3] int8.
 */
#include "mpickpt/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ckpt_writer *writer;

static void must(int rc, const char *what)
{
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        fprintf(stderr, "make_diff_ckpt: %s: %s\n", what, e ? e->message : ckpt_strerror(rc));
        ckpt_writer_free(writer);
        exit(1);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "make_diff_ckpt: out of memory\n");
        exit(1);
    }
    return p;
}

/* Adds a tensor whose row-major contents are `all`, as pieces of `piece` elements per dimension
 * (piece == NULL: whole). */
static void add_tensor(const char *name, ckpt_dtype dtype, int ndims, const int64_t *dims,
                       const int64_t *piece, const void *all)
{
    ckpt_shape shape;
    must(ckpt_shape_init(&shape, ndims, dims), name);
    if (!piece) {
        must(ckpt_writer_add(writer, name, dtype, &shape, NULL, all), name);
        return;
    }
    ckpt_slice full;
    ckpt_slice_full(&full, &shape);
    size_t esize = ckpt_dtype_size(dtype);
    int64_t start[CKPT_MAX_DIMS] = {0};
    for (;;) {
        int64_t count[CKPT_MAX_DIMS];
        for (int d = 0; d < ndims; d++)
            count[d] = dims[d] - start[d] < piece[d] ? dims[d] - start[d] : piece[d];
        ckpt_slice s;
        int64_t n;
        must(ckpt_slice_init(&s, ndims, start, count), name);
        must(ckpt_slice_num_elements(&n, &s), name);
        void *buf = xmalloc((size_t)n * esize);
        must(ckpt_slice_copy(buf, &s, all, &full, &s, esize), name);
        must(ckpt_writer_add(writer, name, dtype, &shape, &s, buf), name);
        free(buf);
        int d = ndims - 1;
        for (; d >= 0; d--) {
            start[d] += piece[d];
            if (start[d] < dims[d])
                break;
            start[d] = 0;
        }
        if (d < 0)
            break;
    }
}

int main(int argc, char **argv)
{
    ckpt_writer_options opts = CKPT_WRITER_OPTIONS_INIT;
    const char *variant = argc >= 3 ? argv[2] : "";
    int base = !strcmp(variant, "base"), relayout = !strcmp(variant, "relayout");
    int values = !strcmp(variant, "values"), schema = !strcmp(variant, "schema");
    if (argc == 5 && strcmp(argv[3], "--counter") == 0)
        opts.save_counter = strtoll(argv[4], NULL, 10);
    else if (argc != 3)
        base = relayout = values = schema = 0;
    if (!(base || relayout || values || schema)) {
        fprintf(stderr, "usage: make_diff_ckpt PREFIX base|relayout|values|schema "
                        "[--counter N]\n");
        return 2;
    }
    must(ckpt_writer_open(&writer, argv[1], &opts), argv[1]);

    double *m = xmalloc(6400 * sizeof *m);
    for (int i = 0; i < 6400; i++)
        m[i] = i * 0.25;
    float *c = xmalloc(6000 * sizeof *c);
    for (int i = 0; i < 6000; i++)
        c[i] = (float)i;
    double *v = xmalloc(10000 * sizeof *v);
    for (int i = 0; i < 10000; i++)
        v[i] = i - 5000.5;
    int16_t p[24];
    for (int i = 0; i < 24; i++)
        p[i] = (int16_t)(i - 12);
    double scalar = 2.5;
    float special[4] = {NAN, 1.0f, -0.0f, INFINITY};
    if (values) {
        m[250] += 1, m[5000] += 1, m[6399] += 1;
        c[1] += 1, c[2999] += 1, c[3000] += 1, c[5999] += 1;
        v[4999] += 1, v[5000] += 1;
        scalar = 3.5;
        special[2] = 0.0f;
    }

    int64_t dm[] = {64, 100}, pm[] = {4, 100};
    add_tensor("w/matrix", CKPT_FLOAT64, 2, dm, relayout ? NULL : pm, m);
    int64_t dc[] = {2, 3, 1000}, pc[] = {1, 1, 500};
    add_tensor("w/cube", CKPT_FLOAT32, 3, dc, pc, c);
    int64_t dv[] = {10000}, pv[] = {100}, pv2[] = {1000};
    add_tensor("w/vec", CKPT_FLOAT64, 1, dv, relayout ? pv2 : pv, v);
    int64_t dp[] = {6, 4}, dp2[] = {4, 6}, pp[] = {2, 4};
    if (schema)
        add_tensor("w/parts", CKPT_INT16, 2, dp2, NULL, p);
    else
        add_tensor("w/parts", CKPT_INT16, 2, dp, relayout ? NULL : pp, p);
    float fscalar = (float)scalar;
    if (schema)
        add_tensor("w/scalar", CKPT_FLOAT32, 0, NULL, NULL, &fscalar);
    else
        add_tensor("w/scalar", CKPT_FLOAT64, 0, NULL, NULL, &scalar);
    int64_t de[] = {0, 3};
    add_tensor("w/empty", CKPT_FLOAT32, 2, de, NULL, special);
    int64_t ds[] = {4};
    add_tensor("w/special", CKPT_FLOAT32, 1, ds, NULL, special);
    int8_t ob[2] = {1, 2}, oo[3] = {1, 2, 3};
    int64_t d2[] = {2}, d3[] = {3};
    if (schema)
        add_tensor("only/other", CKPT_INT8, 1, d3, NULL, oo);
    else
        add_tensor("only/base", CKPT_INT8, 1, d2, NULL, ob);

    must(ckpt_writer_commit(writer), "commit");
    ckpt_writer_free(writer);
    free(m);
    free(c);
    free(v);
    return 0;
}
