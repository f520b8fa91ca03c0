/* mpickpt diff: compares the tensors of two checkpoints (names, dtypes, shapes, then the values a
 * block at a time) and their headers. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { DIFF_DTYPE, DIFF_SHAPE, DIFF_VALUES };

/* Out of memory in the tool itself (no library error is recorded); not a ckpt_status. */
enum { DIFF_ENOMEM = -1000 };

static const char *const diff_reason_names[] = {"dtype", "shape", "values"};

/* A tensor in both checkpoints that differs. */
typedef struct diff_change {
    const char *name; /* lives as long as reader A */
    int reason;
    ckpt_tensor_info a, b;
    uint64_t differing; /* DIFF_VALUES: elements whose bytes differ */
    int64_t first;      /* DIFF_VALUES: flat row-major index of the first */
} diff_change;

typedef struct diff_result {
    const char **only_a, **only_b;
    size_t n_only_a, n_only_b;
    diff_change *changed;
    size_t n_changed;
} diff_result;

static int push_name(const char ***list, size_t *n, const char *name)
{
    if (cli_grow(list, *n, sizeof **list) != 0)
        return -1;
    (*list)[(*n)++] = name;
    return 0;
}

static int push_change(diff_result *res, const diff_change *c)
{
    if (cli_grow(&res->changed, res->n_changed, sizeof *res->changed) != 0)
        return -1;
    res->changed[res->n_changed++] = *c;
    return 0;
}

/* Bytes of the largest stored piece of tensor i. */
static uint64_t largest_piece(const ckpt_reader *r, size_t i, size_t num_pieces)
{
    uint64_t most = 0;
    for (size_t j = 0; j < num_pieces; j++) {
        ckpt_piece_info p;
        if (ckpt_reader_piece(&p, r, i, j) == CKPT_OK && p.bytes > most)
            most = p.bytes;
    }
    return most;
}

/*
 * Compares the values of a tensor that has the same dtype and shape in both checkpoints, a block
 * at a time: each block is a slice that is contiguous in row-major order (single indices in the
 * outer dimensions, a run of one dimension, the inner dimensions whole), so its elements are the
 * flat range [base, base + count). A block holds about block_bytes, but never less than the
 * largest stored piece of the tensor: the reader reads (and checksums) every piece a slice
 * overlaps whole, so smaller blocks would only re-read the same pieces.
 * Returns a ckpt_status (the library's error is set) or DIFF_ENOMEM.
 */
static int diff_values(ckpt_reader *ra, ckpt_reader *rb, size_t ia, size_t ib,
                       const ckpt_tensor_info *t, uint64_t block_bytes, uint64_t *differing,
                       int64_t *first)
{
    *differing = 0;
    *first = -1;
    int64_t n;
    int rc = ckpt_shape_num_elements(&n, &t->shape);
    if (rc != CKPT_OK || n == 0)
        return rc;
    size_t esize = ckpt_dtype_size(t->dtype);
    ckpt_tensor_info tb;
    if ((rc = ckpt_reader_tensor(&tb, rb, ib)) != CKPT_OK)
        return rc;
    uint64_t block = block_bytes;
    uint64_t pa = largest_piece(ra, ia, t->num_pieces), pb = largest_piece(rb, ib, tb.num_pieces);
    block = pa > block ? pa : block;
    block = pb > block ? pb : block;
    int64_t block_elems = (int64_t)(block / esize > (uint64_t)INT64_MAX ? INT64_MAX :
                                                                          block / esize);
    if (block_elems < 1)
        block_elems = 1;

    /* k: the dimension split into runs; inner: elements of one index of k. */
    int nd = t->shape.ndims;
    const int64_t *dims = t->shape.dims;
    int k = nd > 0 ? nd - 1 : 0;
    int64_t inner = 1;
    while (k > 0 && dims[k] <= block_elems / inner) {
        inner *= dims[k];
        k--;
    }
    int64_t run = nd > 0 ? block_elems / inner : 1;
    if (nd > 0 && run > dims[k])
        run = dims[k];
    if (run < 1)
        run = 1;
    if ((uint64_t)(run * inner) > SIZE_MAX / esize)
        return DIFF_ENOMEM;
    size_t cap = (size_t)(run * inner) * esize;
    unsigned char *ba = malloc(cap), *bb = malloc(cap);
    if (!ba || !bb) {
        free(ba);
        free(bb);
        return DIFF_ENOMEM;
    }

    int64_t coords[CKPT_MAX_DIMS] = {0}; /* indices of dimensions < k, and the run start at k */
    int64_t base = 0;                    /* flat index of the block's first element */
    for (;;) {
        ckpt_slice s;
        int64_t start[CKPT_MAX_DIMS], count[CKPT_MAX_DIMS];
        int64_t len = nd > 0 ? (dims[k] - coords[k] < run ? dims[k] - coords[k] : run) : 1;
        for (int d = 0; d < nd; d++) {
            start[d] = d <= k ? coords[d] : 0;
            count[d] = d < k ? 1 : d == k ? len : dims[d];
        }
        size_t bytes = (size_t)(len * inner) * esize;
        rc = nd > 0 ? ckpt_slice_init(&s, nd, start, count) : CKPT_OK;
        if (rc == CKPT_OK)
            rc = ckpt_reader_read(ra, t->name, t->dtype, nd > 0 ? &s : NULL, ba, bytes);
        if (rc == CKPT_OK)
            rc = ckpt_reader_read(rb, t->name, t->dtype, nd > 0 ? &s : NULL, bb, bytes);
        if (rc != CKPT_OK)
            break;
        if (memcmp(ba, bb, bytes) != 0) {
            for (int64_t e = 0; e < len * inner; e++) {
                if (memcmp(ba + (size_t)e * esize, bb + (size_t)e * esize, esize) != 0) {
                    if (*differing == 0)
                        *first = base + e;
                    (*differing)++;
                }
            }
        }
        base += len * inner;
        /* Next block: advance the run, then the outer indices like an odometer. */
        if (nd == 0)
            break;
        coords[k] += len;
        int d = k;
        while (d > 0 && coords[d] >= dims[d]) {
            coords[d] = 0;
            coords[--d]++;
        }
        if (coords[0] >= dims[0])
            break;
    }
    free(ba);
    free(bb);
    return rc;
}

static void tensor_side_json(ckpt__json_writer *w, const char *key, const ckpt_tensor_info *t)
{
    ckpt__json_key(w, key);
    ckpt__json_object_begin(w);
    ckpt__json_kstring(w, "dtype", ckpt_dtype_name(t->dtype));
    ckpt__json_key(w, "shape");
    cli_json_dims(w, t->shape.ndims, t->shape.dims);
    ckpt__json_object_end(w);
}

/* Header fields compared by diff. */
typedef struct diff_header_field {
    const char *name;
    int64_t a, b;
    const char *sa, *sb; /* layout names; NULL for numbers */
} diff_header_field;

static size_t diff_header(const ckpt_header *a, const ckpt_header *b, diff_header_field *out)
{
    size_t n = 0;
#define DIFF_FIELD(f)                                                                           \
    if (a->f != b->f)                                                                           \
        out[n++] = (diff_header_field){#f, (int64_t)a->f, (int64_t)b->f, NULL, NULL};
    DIFF_FIELD(save_counter)
    DIFF_FIELD(epoch)
    DIFF_FIELD(step)
    DIFF_FIELD(world_size)
#undef DIFF_FIELD
    if (a->layout != b->layout)
        out[n++] = (diff_header_field){"layout", a->layout, b->layout, ckpt_layout_name(a->layout),
                                       ckpt_layout_name(b->layout)};
    return n;
}

static void diff_print_json(const diff_result *res, const diff_header_field *hf, size_t nh,
                            int identical)
{
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_kbool(&w, "identical", identical);
    ckpt__json_key(&w, "only_in_a");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < res->n_only_a; i++)
        ckpt__json_string(&w, res->only_a[i]);
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "only_in_b");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < res->n_only_b; i++)
        ckpt__json_string(&w, res->only_b[i]);
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "changed");
    ckpt__json_array_begin(&w);
    for (size_t i = 0; i < res->n_changed; i++) {
        const diff_change *c = &res->changed[i];
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "name", c->name);
        ckpt__json_kstring(&w, "reason", diff_reason_names[c->reason]);
        ckpt__json_key(&w, "differing_elements");
        if (c->reason == DIFF_VALUES)
            ckpt__json_uint(&w, c->differing);
        else
            ckpt__json_null(&w);
        ckpt__json_key(&w, "first_index");
        if (c->reason == DIFF_VALUES)
            ckpt__json_int(&w, c->first);
        else
            ckpt__json_null(&w);
        tensor_side_json(&w, "a", &c->a);
        tensor_side_json(&w, "b", &c->b);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "header");
    ckpt__json_object_begin(&w);
    for (size_t i = 0; i < nh; i++) {
        ckpt__json_key(&w, hf[i].name);
        ckpt__json_object_begin(&w);
        ckpt__json_key(&w, "a");
        if (hf[i].sa)
            ckpt__json_string(&w, hf[i].sa);
        else
            ckpt__json_int(&w, hf[i].a);
        ckpt__json_key(&w, "b");
        if (hf[i].sb)
            ckpt__json_string(&w, hf[i].sb);
        else
            ckpt__json_int(&w, hf[i].b);
        ckpt__json_object_end(&w);
    }
    ckpt__json_object_end(&w);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
}

static void tensor_text(FILE *out, const ckpt_tensor_info *t)
{
    char shape[CLI_DIMS_BUF];
    cli_format_dims(shape, sizeof shape, t->shape.ndims, t->shape.dims);
    fprintf(out, "%s %s", ckpt_dtype_name(t->dtype), shape);
}

static void diff_print_text(const char *a, const char *b, const ckpt_reader *ra,
                            const ckpt_reader *rb, const diff_result *res,
                            const diff_header_field *hf, size_t nh, int identical)
{
    printf("A: ");
    cli_text_name(stdout, a);
    printf("\nB: ");
    cli_text_name(stdout, b);
    fputc('\n', stdout);
    for (size_t i = 0; i < nh; i++) {
        printf("header %s: ", hf[i].name);
        if (hf[i].sa)
            printf("%s (A) vs %s (B)\n", hf[i].sa, hf[i].sb);
        else
            printf("%" PRId64 " (A) vs %" PRId64 " (B)\n", hf[i].a, hf[i].b);
    }
    for (int side = 0; side < 2; side++) {
        const ckpt_reader *r = side ? rb : ra;
        const char **names = side ? res->only_b : res->only_a;
        size_t n = side ? res->n_only_b : res->n_only_a;
        for (size_t i = 0; i < n; i++) {
            ckpt_tensor_info t;
            size_t idx;
            printf("only in %c: ", side ? 'B' : 'A');
            cli_text_name(stdout, names[i]);
            if (ckpt_reader_find(&idx, r, names[i]) == CKPT_OK &&
                ckpt_reader_tensor(&t, r, idx) == CKPT_OK) {
                printf(" (");
                tensor_text(stdout, &t);
                printf(")");
            }
            fputc('\n', stdout);
        }
    }
    for (size_t i = 0; i < res->n_changed; i++) {
        const diff_change *c = &res->changed[i];
        printf("%s differ: ", diff_reason_names[c->reason]);
        cli_text_name(stdout, c->name);
        if (c->reason == DIFF_VALUES) {
            int64_t n = 0;
            ckpt_shape_num_elements(&n, &c->a.shape);
            printf(": %" PRIu64 " of %" PRId64 " elements, the first at flat index %" PRId64 "\n",
                   c->differing, n, c->first);
        } else {
            printf(": ");
            tensor_text(stdout, &c->a);
            printf(" (A) vs ");
            tensor_text(stdout, &c->b);
            printf(" (B)\n");
        }
    }
    if (identical)
        printf("identical data (%zu tensors%s)\n", ckpt_reader_num_tensors(ra),
               nh ? "; the headers differ" : "");
    else
        printf("data differ: %zu only in A, %zu only in B, %zu changed\n", res->n_only_a,
               res->n_only_b, res->n_changed);
}

/* Parses a byte count: digits with an optional K, M or G suffix (powers of 1024). */
static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    if (!(s[0] >= '0' && s[0] <= '9'))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*end != '\0' || v == 0 || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* Walks both tensor lists (sorted by name) and fills res. Returns a ckpt_status or
 * DIFF_ENOMEM. */
static int diff_tensors(ckpt_reader *ra, ckpt_reader *rb, uint64_t block_bytes, diff_result *res)
{
    size_t na = ckpt_reader_num_tensors(ra), nb = ckpt_reader_num_tensors(rb);
    size_t i = 0, j = 0;
    int rc = CKPT_OK;
    while (rc == CKPT_OK && (i < na || j < nb)) {
        ckpt_tensor_info ta, tb;
        if (i < na && (rc = ckpt_reader_tensor(&ta, ra, i)) != CKPT_OK)
            break;
        if (j < nb && (rc = ckpt_reader_tensor(&tb, rb, j)) != CKPT_OK)
            break;
        int cmp = i >= na ? 1 : j >= nb ? -1 : strcmp(ta.name, tb.name);
        if (cmp < 0) {
            if (push_name(&res->only_a, &res->n_only_a, ta.name) != 0)
                rc = DIFF_ENOMEM;
            i++;
            continue;
        }
        if (cmp > 0) {
            if (push_name(&res->only_b, &res->n_only_b, tb.name) != 0)
                rc = DIFF_ENOMEM;
            j++;
            continue;
        }
        diff_change c = {ta.name, DIFF_VALUES, ta, tb, 0, -1};
        if (ta.dtype != tb.dtype)
            c.reason = DIFF_DTYPE;
        else if (!ckpt_shape_equal(&ta.shape, &tb.shape))
            c.reason = DIFF_SHAPE;
        else
            rc = diff_values(ra, rb, i, j, &ta, block_bytes, &c.differing, &c.first);
        if (rc == CKPT_OK && (c.reason != DIFF_VALUES || c.differing > 0) &&
            push_change(res, &c) != 0)
            rc = DIFF_ENOMEM;
        i++;
        j++;
    }
    return rc;
}

static int cmd_diff(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const char *block_arg = NULL;
    const cli_option opts[] = {{"--json", &json, NULL}, {"--block-bytes", NULL, &block_arg}};
    const cli_spec spec = {opts, 2, 2, 2, "expected two PREFIXes, A and B", "too many arguments",
                           0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    uint64_t block_bytes = UINT64_C(64) << 20;
    if (block_arg && parse_bytes(block_arg, &block_bytes) != 0)
        return cli_usage_error(cmd, "bad --block-bytes '%s' (a positive byte count, e.g. 4096, "
                                    "512K, 64M)", block_arg);

    ckpt_reader *ra = NULL, *rb = NULL;
    if ((rc = cli_open(cmd, argv[0], &ra, 0)) != 0)
        return rc;
    if ((rc = cli_open(cmd, argv[1], &rb, 0)) != 0) {
        ckpt_reader_free(ra);
        return rc;
    }
    diff_result res = {NULL, NULL, 0, 0, NULL, 0};
    diff_header_field hf[8];
    size_t nh = diff_header(ckpt_reader_header(ra), ckpt_reader_header(rb), hf);
    int lrc = diff_tensors(ra, rb, block_bytes, &res);
    if (lrc == DIFF_ENOMEM) {
        rc = cli_oom(cmd);
    } else if (lrc != CKPT_OK) {
        rc = cli_lib_error(cmd, lrc);
    } else {
        int identical = res.n_only_a == 0 && res.n_only_b == 0 && res.n_changed == 0;
        if (json)
            diff_print_json(&res, hf, nh, identical);
        else
            diff_print_text(argv[0], argv[1], ra, rb, &res, hf, nh, identical);
        rc = identical ? EXIT_OK : EXIT_BAD;
    }
    free(res.only_a);
    free(res.only_b);
    free(res.changed);
    ckpt_reader_free(ra);
    ckpt_reader_free(rb);
    return rc;
}

const cli_command cli_cmd_diff = {
    "diff", "[--json] [--block-bytes N] A B", "compare the tensors of two checkpoints",
    "  Reports tensors only in A or only in B, tensors whose dtype or shape differ, and for the\n"
    "  others the number of elements whose bytes differ and the first differing flat\n"
    "  (row-major) index. Header differences (save counter, epoch, step, world size, layout)\n"
    "  are shown but are not a data difference. Exits 0 when the data are identical, 1 when\n"
    "  they differ or a checkpoint cannot be read.\n"
    "  --block-bytes N  compare about N bytes of a tensor at a time (default 64M; suffixes\n"
    "                   K, M, G); never less than the tensor's largest stored piece, which\n"
    "                   the library reads whole\n"
    "  --json   {\"identical\",\"only_in_a\",\"only_in_b\",\"changed\":[{\"name\",\"reason\",\n"
    "           \"differing_elements\",\"first_index\"}],\"header\":{FIELD:{\"a\",\"b\"}}}\n",
    cmd_diff};
