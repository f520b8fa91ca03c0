/* mpickpt dump: the values of one tensor, or of a block of it (--slice), as text or JSON; the
 * plain values of the Python package's record (all of them, or one by name). */
#include "cli.h"

#include "interop/interop.h" /* lib/interop/interop.h: the records of plain values */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* IEEE 754 binary16 -> binary32, exact for every input: subnormals are renormalized, infinities
 * and NaNs keep their sign (and NaN payload bits). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* 0.mant * 2^-14: shift the leading one up to the implicit bit, one exponent each. */
        uint32_t e = 127 - 14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 is the upper half of a binary32, so widening is exact for all inputs. */
static float bfloat16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* One element, widened to a type printf can show exactly. */
typedef struct value {
    enum { VAL_INT, VAL_UINT, VAL_FLOAT, VAL_BOOL } kind;
    int digits; /* significant digits of a float: enough to round-trip its source type */
    int64_t i;
    uint64_t u;
    double d;
} value;

/* Loads element p of a dense buffer (memcpy: the buffer has no alignment guarantee per type). */
static value load_value(ckpt_dtype dtype, const unsigned char *p)
{
    value v = {VAL_INT, 9, 0, 0, 0.0};
    switch (dtype) {
    case CKPT_FLOAT16:
    case CKPT_BFLOAT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v.kind = VAL_FLOAT;
        v.d = dtype == CKPT_FLOAT16 ? half_to_float(x) : bfloat16_to_float(x);
        break;
    }
    case CKPT_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        v.kind = VAL_FLOAT;
        v.d = x;
        break;
    }
    case CKPT_FLOAT64:
        memcpy(&v.d, p, 8);
        v.kind = VAL_FLOAT;
        v.digits = 17;
        break;
    case CKPT_INT8: { int8_t x; memcpy(&x, p, 1); v.i = x; break; }
    case CKPT_INT16: { int16_t x; memcpy(&x, p, 2); v.i = x; break; }
    case CKPT_INT32: { int32_t x; memcpy(&x, p, 4); v.i = x; break; }
    case CKPT_INT64: memcpy(&v.i, p, 8); break;
    case CKPT_UINT8: v.kind = VAL_UINT; v.u = p[0]; break;
    case CKPT_UINT16: { uint16_t x; memcpy(&x, p, 2); v.kind = VAL_UINT; v.u = x; break; }
    case CKPT_UINT32: { uint32_t x; memcpy(&x, p, 4); v.kind = VAL_UINT; v.u = x; break; }
    case CKPT_UINT64: memcpy(&v.u, p, 8); v.kind = VAL_UINT; break;
    case CKPT_BOOL: v.kind = VAL_BOOL; v.i = p[0] != 0; break;
    default: break;
    }
    return v;
}

static void value_json(ckpt__json_writer *w, value v)
{
    switch (v.kind) {
    case VAL_INT: ckpt__json_int(w, v.i); break;
    case VAL_UINT: ckpt__json_uint(w, v.u); break;
    case VAL_BOOL: ckpt__json_bool(w, (int)v.i); break;
    case VAL_FLOAT: ckpt__json_double(w, v.d, v.digits); break;
    }
}

static void value_text(FILE *out, value v)
{
    switch (v.kind) {
    case VAL_INT: fprintf(out, "%" PRId64, v.i); break;
    case VAL_UINT: fprintf(out, "%" PRIu64, v.u); break;
    case VAL_BOOL: fputs(v.i ? "true" : "false", out); break;
    case VAL_FLOAT:
        if (isnan(v.d))
            fputs("nan", out);
        else if (isinf(v.d))
            fputs(v.d > 0 ? "inf" : "-inf", out);
        else
            fprintf(out, "%.*g", v.digits, v.d);
        break;
    }
}

/* One bound of a start:stop slice: empty (the default), or a decimal integer, negative counting
 * from the end as in Python; clamped to [0, dim] as Python clamps. Returns 0, or -1 when it is not
 * an integer. */
static int slice_bound(int64_t *out, const char *s, size_t len, int64_t dim, int64_t dflt)
{
    if (len == 0) {
        *out = dflt;
        return 0;
    }
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-' || s[0] == '+') {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == len)
        return -1;
    int64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (v > (INT64_MAX - 9) / 10)
            v = INT64_MAX / 2; /* clamped below anyway */
        else
            v = v * 10 + (s[i] - '0');
    }
    if (neg)
        v = v > dim ? 0 : dim - v;
    *out = v > dim ? dim : v;
    return 0;
}

/* --slice "start:stop" per axis, axes separated by ',' ("0:4", "1:3,:", ":-1"), as Python and
 * NumPy slice: open ends, negative bounds from the end, clamped, no step; axes not given are
 * whole. Every part must hold exactly one ':' (so no spec is both this and an extent spec, whose
 * first part is "-" or "start,length"). Returns 0, or -1 after recording why (CKPT_EINVAL). */
static int python_slice(ckpt_slice *slice, const ckpt_shape *shape, const char *spec)
{
    ckpt_slice_full(slice, shape);
    int axis = 0;
    for (const char *p = spec;; axis++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!colon || memchr(colon + 1, ':', len - (size_t)(colon + 1 - p)))
            return ckpt__error(CKPT_EINVAL,
                               "axis %d: '%.*s' is not start:stop (a step is not supported)",
                               axis, (int)len, p);
        if (axis >= shape->ndims)
            return ckpt__error(CKPT_EINVAL, "%d axes given, the tensor has %d", axis + 1,
                               shape->ndims);
        int64_t dim = shape->dims[axis], a, b;
        if (slice_bound(&a, p, (size_t)(colon - p), dim, 0) != 0 ||
            slice_bound(&b, colon + 1, len - (size_t)(colon + 1 - p), dim, dim) != 0)
            return ckpt__error(CKPT_EINVAL, "axis %d: '%.*s': bounds are integers", axis,
                               (int)len, p);
        slice->start[axis] = a;
        slice->count[axis] = b > a ? b - a : 0;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

/* 1 when every ','-separated part of spec holds a ':' (a start:stop spec, not extents). */
static int looks_python(const char *spec)
{
    for (const char *p = spec;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!memchr(p, ':', len))
            return 0;
        if (!end)
            return 1;
        p = end + 1;
    }
}

/* Parses --slice against the tensor's shape: a full TensorFlow spec (it has a space between the
 * shape and the extents; the shape must be the tensor's) or only the extents. Returns 0 or
 * EXIT_USAGE after printing why. */
static int dump_parse_slice(const cli_command *cmd, const char *spec, const ckpt_shape *shape,
                            ckpt_slice *slice)
{
    int rc;
    if (strchr(spec, ' ')) {
        ckpt_shape spec_shape;
        rc = ckpt_slice_spec_parse(&spec_shape, slice, spec);
        if (rc == CKPT_OK && !ckpt_shape_equal(&spec_shape, shape)) {
            char want[CLI_DIMS_BUF], got[CLI_DIMS_BUF];
            cli_format_dims(want, sizeof want, shape->ndims, shape->dims);
            cli_format_dims(got, sizeof got, spec_shape.ndims, spec_shape.dims);
            fprintf(stderr, "mpickpt: %s: --slice '%s' is for shape %s, the tensor's is %s\n",
                    cmd->name, spec, got, want);
            return EXIT_USAGE;
        }
    } else {
        rc = ckpt_slice_parse_extent(slice, shape, spec);
        if (rc != CKPT_OK && looks_python(spec) && python_slice(slice, shape, spec) == 0) {
            ckpt_error_clear(); /* kept: the extent parse's own error; the fallback parsed it */
            rc = CKPT_OK;
        }
    }
    if (rc != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        fprintf(stderr, "mpickpt: %s: bad --slice '%s': %s\n", cmd->name, spec,
                e && e->message ? e->message : ckpt_strerror(rc));
        return EXIT_USAGE;
    }
    return 0;
}

/* Prints the dumped values: JSON, or a header line then one line per innermost row. */
static void dump_print(int json, const char *name, ckpt_dtype dtype, const ckpt_slice *slice,
                       const char *spec_text, const unsigned char *buf, int64_t count)
{
    size_t esize = ckpt_dtype_size(dtype);
    if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "name", name);
        ckpt__json_kstring(&w, "dtype", ckpt_dtype_name(dtype));
        ckpt__json_key(&w, "shape");
        cli_json_dims(&w, slice->ndims, slice->count);
        ckpt__json_key(&w, "values");
        ckpt__json_array_begin(&w);
        for (int64_t k = 0; k < count; k++)
            value_json(&w, load_value(dtype, buf + (size_t)k * esize));
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
        return;
    }
    char shape[CLI_DIMS_BUF];
    cli_format_dims(shape, sizeof shape, slice->ndims, slice->count);
    cli_text_name(stdout, name);
    printf(": %s %s", ckpt_dtype_name(dtype), shape);
    if (spec_text)
        printf(" (slice \"%s\")", spec_text);
    fputc('\n', stdout);
    int64_t row = slice->ndims ? slice->count[slice->ndims - 1] : 1;
    for (int64_t k = 0; k < count; k++) {
        value_text(stdout, load_value(dtype, buf + (size_t)k * esize));
        fputc((k + 1) % row == 0 ? '\n' : ' ', stdout);
    }
}

/* Reads tensor `name` (or the block `spec` selects) and prints it. Returns the exit code. */
static int dump_tensor(const cli_command *cmd, ckpt_reader *r, const char *name, const char *spec,
                       int json)
{
    size_t index;
    ckpt_tensor_info t;
    ckpt_slice slice;
    int64_t count;
    char spec_text[1024]; /* 16 dims of "N " plus "start,length:" fit */
    int rc;
    if ((rc = ckpt_reader_find(&index, r, name)) != CKPT_OK ||
        (rc = ckpt_reader_tensor(&t, r, index)) != CKPT_OK)
        return cli_lib_error(cmd, rc);
    if (spec) {
        if ((rc = dump_parse_slice(cmd, spec, &t.shape, &slice)) != 0)
            return rc;
        if (ckpt_slice_spec_format(spec_text, sizeof spec_text, &t.shape, &slice) != CKPT_OK)
            snprintf(spec_text, sizeof spec_text, "%s", spec);
    } else {
        ckpt_slice_full(&slice, &t.shape);
    }
    if ((rc = ckpt_slice_num_elements(&count, &slice)) != CKPT_OK)
        return cli_lib_error(cmd, rc);
    size_t esize = ckpt_dtype_size(t.dtype);
    if (esize == 0 || (uint64_t)count > SIZE_MAX / esize) {
        fprintf(stderr, "mpickpt: %s: tensor \"%s\" (%s) cannot be held in memory\n", cmd->name,
                name, ckpt_dtype_name(t.dtype));
        return EXIT_BAD;
    }
    size_t bytes = (size_t)count * esize;
    unsigned char *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        fprintf(stderr, "mpickpt: %s: out of memory for %zu bytes\n", cmd->name, bytes);
        return EXIT_BAD;
    }
    rc = ckpt_reader_read(r, name, t.dtype, spec ? &slice : NULL, buf, bytes);
    if (rc == CKPT_OK)
        dump_print(json, name, t.dtype, &slice, spec ? spec_text : NULL, buf, count);
    else
        cli_lib_error(cmd, rc);
    free(buf);
    return rc == CKPT_OK ? EXIT_OK : EXIT_BAD;
}

/* ---- plain values (the Python package's record, lib/interop/interop.h ckpt__records_load) ---- */

/* A read value as text: compact JSON as Python's json writes it (NaN, Infinity as such). */
static void value_line(const ckpt__jv *v)
{
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_value(&w, v, 1);
}

static int key_is(const ckpt__jv *obj, size_t i, const char *name)
{
    return obj->key_lens[i] == strlen(name) && memcmp(obj->keys[i], name, obj->key_lens[i]) == 0;
}

/* The replicated values (rank 0's record), then each rank's own, then the aliases; or only those
 * named `name`. Returns the number of values shown. */
static size_t values_text(const ckpt__records *recs, const char *name)
{
    size_t shown = 0;
    const ckpt__record *r0 = recs->n && recs->r[0].rank == 0 ? &recs->r[0] : NULL;
    if (r0 && r0->replicated)
        for (size_t i = 0; i < r0->replicated->n; i++) {
            if (name && !key_is(r0->replicated, i, name))
                continue;
            cli_text_name(stdout, r0->replicated->keys[i]);
            fputs(" = ", stdout);
            value_line(&r0->replicated->items[i]);
            fputc('\n', stdout);
            shown++;
        }
    for (size_t k = 0; k < recs->n; k++) {
        const ckpt__jv *pr = recs->r[k].per_rank;
        for (size_t i = 0; pr && i < pr->n; i++) {
            if (name && !key_is(pr, i, name))
                continue;
            printf("[rank %d] ", recs->r[k].rank);
            cli_text_name(stdout, pr->keys[i]);
            fputs(" = ", stdout);
            value_line(&pr->items[i]);
            fputc('\n', stdout);
            shown++;
        }
    }
    for (size_t k = 0; k < recs->n; k++) {
        const ckpt__jv *al = recs->r[k].aliases;
        for (size_t i = 0; al && i < al->n; i++) {
            if ((name && !key_is(al, i, name)) || (k > 0 && r0 && r0->aliases &&
                                                   ckpt__jv_get(r0->aliases, al->keys[i])))
                continue; /* a replicated alias is in every record: shown once, from rank 0 */
            if (k > 0 || !r0)
                printf("[rank %d] ", recs->r[k].rank);
            cli_text_name(stdout, al->keys[i]);
            fputs(" -> alias of ", stdout);
            cli_text_name(stdout, ckpt__jv_get(&al->items[i], "of")->text);
            fputc('\n', stdout);
            shown++;
        }
    }
    return shown;
}

/* {"prefix","records","versions","replicated":{NAME:VALUE},"per_rank":[{"rank","values"}],
 *  "aliases":{NAME:TARGET}} (per-rank aliases under "per_rank_aliases": [{"rank","aliases"}]);
 * with a name, only it: {"prefix","name","value"} or {"prefix","name","per_rank":[{"rank",
 * "value"}]} or {"prefix","name","alias_of"}. Returns the number of values found. */
static size_t values_json(const ckpt__records *recs, const char *prefix, const char *name)
{
    const ckpt__record *r0 = recs->n && recs->r[0].rank == 0 ? &recs->r[0] : NULL;
    size_t found = 0;
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    if (name) {
        const ckpt__jv *rep = r0 ? ckpt__jv_get(r0->replicated, name) : NULL;
        const ckpt__jv *al = r0 ? ckpt__jv_get(r0->aliases, name) : NULL;
        size_t per = 0;
        for (size_t k = 0; k < recs->n; k++)
            per += ckpt__jv_get(recs->r[k].per_rank, name) != NULL;
        if (!rep && !al && !per)
            return 0;
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "prefix", prefix);
        ckpt__json_kstring(&w, "name", name);
        if (rep) {
            ckpt__json_key(&w, "value");
            ckpt__json_value(&w, rep, 0);
        } else if (al) {
            ckpt__json_kstring(&w, "alias_of", ckpt__jv_get(al, "of")->text);
        } else {
            ckpt__json_key(&w, "per_rank");
            ckpt__json_array_begin(&w);
            for (size_t k = 0; k < recs->n; k++) {
                const ckpt__jv *v = ckpt__jv_get(recs->r[k].per_rank, name);
                if (!v)
                    continue;
                ckpt__json_object_begin(&w);
                ckpt__json_kint(&w, "rank", recs->r[k].rank);
                ckpt__json_key(&w, "value");
                ckpt__json_value(&w, v, 0);
                ckpt__json_object_end(&w);
            }
            ckpt__json_array_end(&w);
        }
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
        return 1;
    }
    ckpt__json_object_begin(&w);
    ckpt__json_kstring(&w, "prefix", prefix);
    ckpt__json_key(&w, "records");
    ckpt__json_array_begin(&w);
    for (size_t k = 0; k < recs->n; k++) {
        ckpt__json_object_begin(&w);
        ckpt__json_kint(&w, "rank", recs->r[k].rank);
        ckpt__json_kint(&w, "version", recs->r[k].version);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "replicated");
    ckpt__json_object_begin(&w);
    for (size_t i = 0; r0 && r0->replicated && i < r0->replicated->n; i++) {
        ckpt__json_key_n(&w, r0->replicated->keys[i], r0->replicated->key_lens[i]);
        ckpt__json_value(&w, &r0->replicated->items[i], 0);
        found++;
    }
    ckpt__json_object_end(&w);
    ckpt__json_key(&w, "per_rank");
    ckpt__json_array_begin(&w);
    for (size_t k = 0; k < recs->n; k++) {
        const ckpt__jv *pr = recs->r[k].per_rank;
        if (!pr || pr->n == 0)
            continue;
        ckpt__json_object_begin(&w);
        ckpt__json_kint(&w, "rank", recs->r[k].rank);
        ckpt__json_key(&w, "values");
        ckpt__json_value(&w, pr, 0);
        ckpt__json_object_end(&w);
        found += pr->n;
    }
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "aliases");
    ckpt__json_object_begin(&w);
    for (size_t i = 0; r0 && r0->aliases && i < r0->aliases->n; i++) {
        ckpt__json_key_n(&w, r0->aliases->keys[i], r0->aliases->key_lens[i]);
        ckpt__json_string(&w, ckpt__jv_get(&r0->aliases->items[i], "of")->text);
    }
    ckpt__json_object_end(&w);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
    return found;
}

/* Shows the record's plain values (all, or `name`'s). *missing: 1 when `name` is none of them. */
static int dump_values(const cli_command *cmd, ckpt_reader *r, const char *prefix,
                       const char *name, int json, int *missing)
{
    ckpt__records recs;
    int rc = ckpt__records_load(&recs, r, prefix);
    *missing = 0;
    if (rc != CKPT_OK)
        return cli_lib_error(cmd, rc);
    size_t n = json ? values_json(&recs, prefix, name) : values_text(&recs, name);
    if (name && n == 0)
        *missing = 1;
    else if (!name && !json && n == 0)
        printf("no plain values in %s (it has no record of them: __mpickpt__/json/rank_<r>)\n",
               prefix);
    ckpt__records_free(&recs);
    return EXIT_OK;
}

static int cmd_dump(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const char *spec = NULL;
    const cli_option opts[] = {{"--json", &json, NULL}, {"--slice", NULL, &spec}};
    const cli_spec args = {opts, 2, 1, 2, "expected PREFIX [NAME]", "too many arguments", 0};
    int rc = cli_parse(cmd, &args, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    if (nops == 1 && spec)
        return cli_usage_error(cmd, "--slice needs a tensor NAME");
    ckpt_reader *r = NULL;
    if ((rc = cli_open(cmd, argv[0], &r, 0)) != 0)
        return rc;
    char *prefix = cli_prefix(argv[0]);
    if (!prefix) {
        ckpt_reader_free(r);
        return cli_oom(cmd);
    }
    size_t index;
    if (nops == 1) {
        int missing;
        rc = dump_values(cmd, r, prefix, NULL, json, &missing);
    } else if (spec || ckpt_reader_find(&index, r, argv[1]) == CKPT_OK) {
        rc = dump_tensor(cmd, r, argv[1], spec, json);
    } else {
        /* not a tensor: a plain value of the record? */
        int missing = 0;
        ckpt_error_clear(); /* kept: the lookup's own "no tensor" before the fallback */
        rc = dump_values(cmd, r, prefix, argv[1], json, &missing);
        if (rc == EXIT_OK && missing) {
            fprintf(stderr, "mpickpt: %s: ", cmd->name);
            cli_text_name(stderr, prefix);
            fputs(" has no tensor and no plain value named \"", stderr);
            cli_text_name(stderr, argv[1]);
            fputs("\"\n", stderr);
            rc = EXIT_BAD;
        }
    }
    free(prefix);
    ckpt_reader_free(r);
    return rc;
}

const cli_command cli_cmd_dump = {
    "dump", "[--json] [--slice SPEC] PREFIX [NAME]",
    "print the values of one tensor, or the plain values of the Python package's record",
    "  NAME          a tensor: its values; a plain value (or alias) of the record: its value\n"
    "                (per-rank ones per rank); without NAME: every plain value, replicated\n"
    "                ones as `name = value` (rank 0's record), per-rank ones as\n"
    "                `[rank R] name = value`, aliases as `name -> alias of target`\n"
    "                (values as Python's json writes them: NaN, Infinity, big integers whole)\n"
    "  --slice SPEC  only a sub-block of a tensor: start:stop per axis, axes separated by ','\n"
    "                (\"0:4\", \"1:3,:\", \"-2:\"; open ends, negative from the end, clamped,\n"
    "                as in Python); extents \"0,2:-\" (start,length or - per dimension);\n"
    "                or a full TensorFlow slice spec \"4 10 0,2:-\" (shape must match)\n"
    "  --json        a tensor: {\"name\",\"dtype\",\"shape\",\"values\"} with values flattened\n"
    "                row-major; NaN and infinities as the strings \"NaN\", \"Infinity\",\n"
    "                \"-Infinity\". Plain values: "
    "{\"prefix\",\"records\":[{\"rank\",\"version\"}],\n"
    "                \"replicated\":{},\"per_rank\":[{\"rank\",\"values\"}],\"aliases\":{}};\n"
    "                one: {\"prefix\",\"name\",\"value\"|\"per_rank\"|\"alias_of\"}\n",
    cmd_dump};
