/* mpickpt dump: the values of one tensor, or of a block of it (--slice), as text or JSON. */
#include "cli.h"

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
        ckpt__json_key(&w, "name");
        ckpt__json_string(&w, name);
        ckpt__json_key(&w, "dtype");
        ckpt__json_string(&w, ckpt_dtype_name(dtype));
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

static int cmd_dump(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const char *spec = NULL;
    const cli_option opts[] = {{"--json", &json, NULL}, {"--slice", NULL, &spec}};
    const cli_spec args = {opts, 2, 2, 2, "expected PREFIX and NAME", "too many arguments", 0};
    int rc = cli_parse(cmd, &args, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    ckpt_reader *r = NULL;
    if ((rc = cli_open(cmd, argv[0], &r, 0)) != 0)
        return rc;
    rc = dump_tensor(cmd, r, argv[1], spec, json);
    ckpt_reader_free(r);
    return rc;
}

const cli_command cli_cmd_dump = {
    "dump", "[--json] [--slice SPEC] PREFIX NAME", "print the values of one tensor",
    "  --slice SPEC  only a sub-block: extents \"0,2:-\" (start,length or - per dimension)\n"
    "                or a full TensorFlow slice spec \"4 10 0,2:-\" (shape must match)\n"
    "  --json        {\"name\",\"dtype\",\"shape\",\"values\"} with values flattened row-major;\n"
    "                NaN and infinities as the strings \"NaN\", \"Infinity\", \"-Infinity\"\n",
    cmd_dump};
