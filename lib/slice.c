/* Shapes, slices, TensorFlow slice-spec strings and the n-d strided copy between slices. */
#include "mpickpt/slice.h"

#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Longest spec ckpt_slice_spec_format can produce: 16 dims of 19 digits + space, then 16 extents
 * of "start,count" (19 digits each) + separator. */
#define SPEC_MAX_LEN (CKPT_MAX_DIMS * 20 + CKPT_MAX_DIMS * 40 + 1)

/* Longest part of user input quoted in an error message. */
#define QUOTE_MAX 80

/* ---- shapes ---- */

int ckpt_shape_init(ckpt_shape *out, int ndims, const int64_t *dims)
{
    if (!out)
        return ckpt__error(CKPT_EINVAL, "ckpt_shape_init: NULL shape");
    memset(out, 0, sizeof *out);
    if (ndims < 0 || ndims > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_EINVAL, "shape has %d dims (allowed 0..%d)", ndims, CKPT_MAX_DIMS);
    if (ndims > 0 && !dims)
        return ckpt__error(CKPT_EINVAL, "ckpt_shape_init: NULL dims for %d dims", ndims);
    for (int d = 0; d < ndims; d++) {
        if (dims[d] < 0) {
            memset(out, 0, sizeof *out);
            return ckpt__error(CKPT_EINVAL, "shape dim %d is negative (%" PRId64 ")", d, dims[d]);
        }
        out->dims[d] = dims[d];
    }
    out->ndims = ndims;
    return CKPT_OK;
}

/* Checks rank and dims of a shape that may have been filled by hand. */
static int shape_check(const ckpt_shape *shape)
{
    if (!shape)
        return ckpt__error(CKPT_EINVAL, "NULL shape");
    if (shape->ndims < 0 || shape->ndims > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_EINVAL, "shape has %d dims (allowed 0..%d)", shape->ndims,
                           CKPT_MAX_DIMS);
    for (int d = 0; d < shape->ndims; d++)
        if (shape->dims[d] < 0)
            return ckpt__error(CKPT_EINVAL, "shape dim %d is negative (%" PRId64 ")", d,
                               shape->dims[d]);
    return CKPT_OK;
}

/*
 * Product of n non-negative extents into *out. A zero extent makes the product 0 even when the
 * others would overflow. Returns -1 on int64 or size_t overflow, else 0; *out is set on success.
 */
static int product(int64_t *out, int n, const int64_t *v)
{
    for (int d = 0; d < n; d++) {
        if (v[d] == 0) {
            *out = 0;
            return 0;
        }
    }
    int64_t p = 1;
    for (int d = 0; d < n; d++)
        if (__builtin_mul_overflow(p, v[d], &p))
            return -1;
    if ((uint64_t)p > (uint64_t)SIZE_MAX)
        return -1;
    *out = p;
    return 0;
}

int ckpt_shape_num_elements(int64_t *out, const ckpt_shape *shape)
{
    if (!out)
        return ckpt__error(CKPT_EINVAL, "ckpt_shape_num_elements: NULL output");
    int rc = shape_check(shape);
    if (rc != CKPT_OK)
        return rc;
    if (product(out, shape->ndims, shape->dims) != 0)
        return ckpt__error(CKPT_EINVAL, "number of elements of a %d-d shape overflows",
                           shape->ndims);
    return CKPT_OK;
}

int ckpt_shape_equal(const ckpt_shape *a, const ckpt_shape *b)
{
    if (!a || !b || a->ndims != b->ndims || a->ndims < 0 || a->ndims > CKPT_MAX_DIMS)
        return 0;
    for (int d = 0; d < a->ndims; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

/* ---- slices ---- */

/*
 * Checks that a slice is well formed on its own: rank in range, start >= 0, count >= 0 and
 * start + count representable. `what` names the slice in the message.
 */
static int slice_check(const ckpt_slice *s, const char *what)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "NULL %s", what);
    if (s->ndims < 0 || s->ndims > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_EINVAL, "%s has %d dims (allowed 0..%d)", what, s->ndims,
                           CKPT_MAX_DIMS);
    for (int d = 0; d < s->ndims; d++) {
        int64_t end;
        if (s->start[d] < 0 || s->count[d] < 0)
            return ckpt__error(CKPT_EINVAL,
                               "%s dim %d: negative start or count (%" PRId64 ",%" PRId64 ")", what,
                               d, s->start[d], s->count[d]);
        if (__builtin_add_overflow(s->start[d], s->count[d], &end))
            return ckpt__error(CKPT_EINVAL, "%s dim %d: start + count overflows", what, d);
    }
    return CKPT_OK;
}

int ckpt_slice_init(ckpt_slice *out, int ndims, const int64_t *start, const int64_t *count)
{
    if (!out)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_init: NULL slice");
    memset(out, 0, sizeof *out);
    if (ndims < 0 || ndims > CKPT_MAX_DIMS)
        return ckpt__error(CKPT_EINVAL, "slice has %d dims (allowed 0..%d)", ndims, CKPT_MAX_DIMS);
    if (ndims > 0 && (!start || !count))
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_init: NULL start or count for %d dims", ndims);
    out->ndims = ndims;
    for (int d = 0; d < ndims; d++) {
        out->start[d] = start[d];
        out->count[d] = count[d];
    }
    int rc = slice_check(out, "slice");
    if (rc != CKPT_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

void ckpt_slice_full(ckpt_slice *out, const ckpt_shape *shape)
{
    memset(out, 0, sizeof *out);
    int n = shape->ndims;
    if (n < 0 || n > CKPT_MAX_DIMS)
        return; /* garbage shape: leave a rank-0 slice rather than read out of bounds */
    out->ndims = n;
    for (int d = 0; d < n; d++)
        out->count[d] = shape->dims[d];
}

int ckpt_slice_validate(const ckpt_slice *slice, const ckpt_shape *shape)
{
    int rc = shape_check(shape);
    if (rc != CKPT_OK)
        return rc;
    if (!slice)
        return ckpt__error(CKPT_EINVAL, "NULL slice");
    if (slice->ndims != shape->ndims)
        return ckpt__error(CKPT_EINVAL, "slice has %d dims but the shape has %d", slice->ndims,
                           shape->ndims);
    for (int d = 0; d < slice->ndims; d++) {
        int64_t end;
        if (slice->start[d] < 0 || slice->count[d] < 0)
            return ckpt__error(CKPT_EINVAL,
                               "slice dim %d: negative start or count (%" PRId64 ",%" PRId64 ")", d,
                               slice->start[d], slice->count[d]);
        if (__builtin_add_overflow(slice->start[d], slice->count[d], &end) || end > shape->dims[d])
            return ckpt__error(CKPT_EINVAL,
                               "slice dim %d: [%" PRId64 ", %" PRId64 " + %" PRId64
                               ") is outside the dim of size %" PRId64,
                               d, slice->start[d], slice->start[d], slice->count[d],
                               shape->dims[d]);
    }
    return CKPT_OK;
}

int ckpt_slice_num_elements(int64_t *out, const ckpt_slice *slice)
{
    if (!out)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_num_elements: NULL output");
    int rc = slice_check(slice, "slice");
    if (rc != CKPT_OK)
        return rc;
    if (product(out, slice->ndims, slice->count) != 0)
        return ckpt__error(CKPT_EINVAL, "number of elements of a %d-d slice overflows",
                           slice->ndims);
    return CKPT_OK;
}

int ckpt_slice_is_full(const ckpt_slice *slice, const ckpt_shape *shape)
{
    if (!slice || !shape || slice->ndims != shape->ndims || slice->ndims < 0 ||
        slice->ndims > CKPT_MAX_DIMS)
        return 0;
    for (int d = 0; d < slice->ndims; d++)
        if (slice->start[d] != 0 || slice->count[d] != shape->dims[d])
            return 0;
    return 1;
}

int ckpt_slice_equal(const ckpt_slice *a, const ckpt_slice *b)
{
    if (!a || !b || a->ndims != b->ndims || a->ndims < 0 || a->ndims > CKPT_MAX_DIMS)
        return 0;
    for (int d = 0; d < a->ndims; d++)
        if (a->start[d] != b->start[d] || a->count[d] != b->count[d])
            return 0;
    return 1;
}

/* End of [start, start + count), saturated at INT64_MAX for slices filled by hand. */
static int64_t sat_end(int64_t start, int64_t count)
{
    int64_t end;
    if (count < 0)
        return start;
    if (__builtin_add_overflow(start, count, &end))
        return INT64_MAX;
    return end;
}

int ckpt_slice_intersect(ckpt_slice *out, const ckpt_slice *a, const ckpt_slice *b)
{
    if (!out || !a || !b) {
        ckpt__error(CKPT_EINVAL, "ckpt_slice_intersect: NULL argument");
        return -1;
    }
    if (a->ndims != b->ndims || a->ndims < 0 || a->ndims > CKPT_MAX_DIMS) {
        ckpt__error(CKPT_EINVAL, "cannot intersect slices of %d and %d dims", a->ndims, b->ndims);
        return -1;
    }
    int n = a->ndims, nonempty = 1;
    ckpt_slice r;
    memset(&r, 0, sizeof r);
    r.ndims = n;
    for (int d = 0; d < n; d++) {
        int64_t lo = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
        int64_t ea = sat_end(a->start[d], a->count[d]), eb = sat_end(b->start[d], b->count[d]);
        int64_t hi = ea < eb ? ea : eb;
        r.start[d] = lo;
        r.count[d] = 0;
        if (hi > lo && __builtin_sub_overflow(hi, lo, &r.count[d]))
            r.count[d] = INT64_MAX; /* only for hand-filled negative starts */
        if (r.count[d] == 0)
            nonempty = 0;
    }
    *out = r;
    return nonempty;
}

/* ---- slice-spec strings ---- */

/*
 * Parses a non-negative decimal integer (digits only: no sign, no space) at *p and advances *p
 * past the digits. Stops at the first non-digit, so never reads past the NUL.
 * Returns 0, -1 when there is no digit, -2 when the value exceeds INT64_MAX.
 */
static int parse_int(const char **p, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;
    int overflow = 0;
    if (*s < '0' || *s > '9')
        return -1;
    while (*s >= '0' && *s <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
            overflow = 1; /* keep scanning so the caller sees the whole token consumed */
        s++;
    }
    *p = s;
    if (overflow)
        return -2;
    *out = v;
    return 0;
}

/* Length of the token at s, ending at `sep` or NUL, capped at QUOTE_MAX for messages. */
static int token_len(const char *s, char sep)
{
    int n = 0;
    while (s[n] && s[n] != sep && n < QUOTE_MAX)
        n++;
    return n;
}

/*
 * Parses the extents part against a checked shape into *slice and validates it. `ctx` is the
 * whole string named in error messages (the spec, or the extent string itself).
 */
static int parse_extents(ckpt_slice *slice, const ckpt_shape *shape, const char *ext,
                         const char *ctx)
{
    int n = shape->ndims;
    memset(slice, 0, sizeof *slice);
    if (n == 0) {
        if (*ext != '\0')
            return ckpt__error(CKPT_EINVAL,
                               "slice \"%.*s\": extents \"%.*s\" given for a rank-0 shape",
                               QUOTE_MAX, ctx, QUOTE_MAX, ext);
        return CKPT_OK;
    }
    if (*ext == '\0')
        return ckpt__error(CKPT_EINVAL, "slice \"%.*s\": no extents for a %d-d shape", QUOTE_MAX,
                           ctx, n);
    slice->ndims = n;
    const char *p = ext;
    for (int d = 0; d < n; d++) {
        const char *tok = p;
        if (*p == '-') {
            p++;
            slice->start[d] = 0;
            slice->count[d] = shape->dims[d];
        } else {
            int64_t s = 0, l = 0;
            int rs = parse_int(&p, &s);
            int rl = -1;
            if (rs == 0 && *p == ',') {
                p++;
                rl = parse_int(&p, &l);
            }
            if (rs != 0 || rl != 0) {
                const char *why = (rs == -2 || rl == -2) ? "number larger than INT64_MAX"
                                                         : "expected \"start,length\" or \"-\"";
                return ckpt__error(CKPT_EINVAL, "slice \"%.*s\": extent %d \"%.*s\": %s", QUOTE_MAX,
                                   ctx, d, token_len(tok, ':'), tok, why);
            }
            slice->start[d] = s;
            slice->count[d] = l;
        }
        /* After each extent: ':' before the next one, NUL after the last. */
        if (d + 1 < n) {
            if (*p == '\0')
                return ckpt__error(CKPT_EINVAL, "slice \"%.*s\": %d extents for a shape of %d dims",
                                   QUOTE_MAX, ctx, d + 1, n);
            if (*p != ':')
                return ckpt__error(CKPT_EINVAL,
                                   "slice \"%.*s\": extent %d \"%.*s\": unexpected '%c' "
                                   "(expected ':')",
                                   QUOTE_MAX, ctx, d, token_len(tok, ':'), tok, *p);
            p++;
        } else if (*p != '\0') {
            if (*p == ':')
                return ckpt__error(CKPT_EINVAL,
                                   "slice \"%.*s\": more extents than the %d dims of the shape",
                                   QUOTE_MAX, ctx, n);
            return ckpt__error(CKPT_EINVAL,
                               "slice \"%.*s\": extent %d \"%.*s\": trailing garbage \"%.*s\"",
                               QUOTE_MAX, ctx, d, token_len(tok, ':'), tok, QUOTE_MAX, p);
        }
    }
    int rc = ckpt_slice_validate(slice, shape);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "slice \"%.*s\"", QUOTE_MAX, ctx);
    return CKPT_OK;
}

int ckpt_slice_parse_extent(ckpt_slice *slice, const ckpt_shape *shape, const char *extent)
{
    if (!slice || !extent)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_parse_extent: NULL argument");
    memset(slice, 0, sizeof *slice);
    int rc = shape_check(shape);
    if (rc != CKPT_OK)
        return rc;
    rc = parse_extents(slice, shape, extent, extent);
    if (rc != CKPT_OK)
        memset(slice, 0, sizeof *slice);
    return rc;
}

/*
 * Grammar: spec = dim (' ' dim)* ' ' extents, dim = digits. Tokens are split on single spaces; a
 * token ended by ' ' is a shape dim, the token ended by the NUL is the extents. Each token is
 * checked as it is reached, so the rank limit holds before anything is stored out of bounds.
 */
int ckpt_slice_spec_parse(ckpt_shape *shape, ckpt_slice *slice, const char *spec)
{
    if (!shape || !slice || !spec)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_spec_parse: NULL argument");
    memset(shape, 0, sizeof *shape);
    memset(slice, 0, sizeof *slice);
    if (*spec == '\0')
        return ckpt__error(CKPT_EINVAL, "empty slice spec (a rank-0 tensor has no spec)");
    size_t slen = strlen(spec);
    if (spec[slen - 1] == ' ')
        return ckpt__error(CKPT_EINVAL, "slice spec \"%.*s\": trailing space", QUOTE_MAX, spec);
    ckpt_shape sh;
    memset(&sh, 0, sizeof sh);
    const char *p = spec;
    int tok = 0;
    int rc = CKPT_EINVAL;
    for (;; tok++) {
        const char *t = p;
        int len = token_len(t, ' ');
        /* Find the end of the token without the QUOTE_MAX cap. */
        const char *e = t;
        while (*e && *e != ' ')
            e++;
        if (e == t) {
            return ckpt__error(CKPT_EINVAL,
                               "slice spec \"%.*s\": token %d is empty "
                               "(leading, trailing or double space?)",
                               QUOTE_MAX, spec, tok);
        }
        if (*e == '\0') {
            /* Last token: the extents. */
            if (sh.ndims == 0)
                return ckpt__error(CKPT_EINVAL,
                                   "slice spec \"%.*s\": expected shape dims before the extents",
                                   QUOTE_MAX, spec);
            rc = parse_extents(slice, &sh, t, spec);
            break;
        }
        if (sh.ndims == CKPT_MAX_DIMS)
            return ckpt__error(CKPT_EINVAL, "slice spec \"%.*s\": more than %d dims", QUOTE_MAX,
                               spec, CKPT_MAX_DIMS);
        int64_t v = 0;
        int r = parse_int(&p, &v);
        if (r != 0 || p != e)
            return ckpt__error(CKPT_EINVAL, "slice spec \"%.*s\": token %d \"%.*s\": %s", QUOTE_MAX,
                               spec, tok, len, t,
                               r == -2 ? "dim larger than INT64_MAX"
                                       : "dim is not a non-negative integer");
        sh.dims[sh.ndims++] = v;
        p = e + 1; /* skip the single space */
    }
    if (rc != CKPT_OK) {
        memset(slice, 0, sizeof *slice);
        return rc;
    }
    *shape = sh;
    return CKPT_OK;
}

int ckpt_slice_spec_format(char *buf, size_t size, const ckpt_shape *shape, const ckpt_slice *slice)
{
    if (buf && size > 0)
        buf[0] = '\0';
    if (!buf || size == 0)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_spec_format: no buffer");
    int rc = ckpt_slice_validate(slice, shape);
    if (rc != CKPT_OK)
        return rc;
    /* Format into a buffer that always fits, then copy: keeps the size check in one place. */
    char tmp[SPEC_MAX_LEN];
    size_t pos = 0;
    int n = shape->ndims;
    for (int d = 0; d < n; d++)
        pos += (size_t)snprintf(tmp + pos, sizeof tmp - pos, "%" PRId64 " ", shape->dims[d]);
    for (int d = 0; d < n; d++) {
        const char *sep = d + 1 < n ? ":" : "";
        if (slice->start[d] == 0 && slice->count[d] == shape->dims[d])
            pos += (size_t)snprintf(tmp + pos, sizeof tmp - pos, "-%s", sep);
        else
            pos += (size_t)snprintf(tmp + pos, sizeof tmp - pos, "%" PRId64 ",%" PRId64 "%s",
                                    slice->start[d], slice->count[d], sep);
    }
    tmp[pos] = '\0'; /* a rank-0 slice formats as "" (TensorFlow writes no spec for scalars) */
    if (pos + 1 > size)
        return ckpt__error(CKPT_EINVAL, "slice spec \"%s\" needs %zu bytes, buffer has %zu", tmp,
                           pos + 1, size);
    memcpy(buf, tmp, pos + 1);
    return CKPT_OK;
}

/* ---- n-d copy ---- */

/*
 * Checks that the non-empty region lies inside slice `s` (same rank checked by the caller) and
 * computes the byte offset of the region's first element in the dense buffer holding `s` and the
 * byte stride of every dim. Fails when the buffer's size in bytes would overflow size_t.
 */
static int region_layout(size_t *base, size_t *stride, const ckpt_slice *s,
                         const ckpt_slice *region, size_t elem_size, const char *what)
{
    int n = s->ndims;
    for (int d = 0; d < n; d++) {
        int64_t rend = region->start[d] + region->count[d]; /* checked by slice_check */
        int64_t send = s->start[d] + s->count[d];
        if (region->start[d] < s->start[d] || rend > send)
            return ckpt__error(CKPT_EINVAL,
                               "copy region dim %d [%" PRId64 ", %" PRId64
                               ") is outside the %s slice [%" PRId64 ", %" PRId64 ")",
                               d, region->start[d], rend, what, s->start[d], send);
    }
    /* Row-major byte strides; the total (stride of a virtual dim -1) must fit size_t. */
    size_t st = elem_size;
    for (int d = n - 1; d >= 0; d--) {
        stride[d] = st;
        if (__builtin_mul_overflow(st, (uint64_t)s->count[d], &st))
            return ckpt__error(CKPT_EINVAL, "%s slice's size in bytes overflows", what);
    }
    size_t off = 0;
    for (int d = 0; d < n; d++) {
        size_t t;
        if (__builtin_mul_overflow((uint64_t)(region->start[d] - s->start[d]), stride[d], &t) ||
            __builtin_add_overflow(off, t, &off))
            return ckpt__error(CKPT_EINVAL, "%s slice's offset overflows", what);
    }
    *base = off;
    return CKPT_OK;
}

/*
 * Strategy: the trailing dims in which the region spans both buffers whole form one contiguous run
 * in each; those are merged into a single memcpy. The remaining outer dims are walked with an
 * odometer (index array), the innermost of them by a tight loop.
 */
int ckpt_slice_copy(void *dst, const ckpt_slice *dst_slice, const void *src,
                    const ckpt_slice *src_slice, const ckpt_slice *region, size_t elem_size)
{
    int rc;
    if ((rc = slice_check(dst_slice, "destination slice")) != CKPT_OK ||
        (rc = slice_check(src_slice, "source slice")) != CKPT_OK ||
        (rc = slice_check(region, "copy region")) != CKPT_OK)
        return rc;
    if (elem_size == 0)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_copy: element size 0");
    int n = region->ndims;
    if (dst_slice->ndims != n || src_slice->ndims != n)
        return ckpt__error(CKPT_EINVAL,
                           "ckpt_slice_copy: rank mismatch (region %d, destination %d, source %d)",
                           n, dst_slice->ndims, src_slice->ndims);
    for (int d = 0; d < n; d++)
        if (region->count[d] == 0)
            return CKPT_OK; /* nothing to copy, wherever the empty region lies */
    if (!dst || !src)
        return ckpt__error(CKPT_EINVAL, "ckpt_slice_copy: NULL buffer");

    size_t dbase, sbase, dstride[CKPT_MAX_DIMS], sstride[CKPT_MAX_DIMS];
    if ((rc = region_layout(&dbase, dstride, dst_slice, region, elem_size, "destination")) !=
            CKPT_OK ||
        (rc = region_layout(&sbase, sstride, src_slice, region, elem_size, "source")) != CKPT_OK)
        return rc;
    unsigned char *dp = (unsigned char *)dst + dbase;
    const unsigned char *sp = (const unsigned char *)src + sbase;
    if (n == 0) {
        memcpy(dp, sp, elem_size);
        return CKPT_OK;
    }

    /* Merge trailing dims: dims k..n-1 are one run while every dim after k is whole in both. */
    int k = n - 1;
    size_t run = (size_t)region->count[n - 1] * elem_size; /* <= buffer size: no overflow */
    while (k > 0 && region->count[k] == src_slice->count[k] &&
           region->count[k] == dst_slice->count[k]) {
        k--;
        run *= (size_t)region->count[k];
    }
    if (k == 0) {
        memcpy(dp, sp, run);
        return CKPT_OK;
    }

    /* Outer dims 0..k-1; dim k-1 is the tight inner loop, 0..k-2 the odometer. Offsets are kept
     * as integers so that no pointer is ever formed outside the buffers. */
    int inner = k - 1;
    int64_t idx[CKPT_MAX_DIMS] = {0};
    int64_t ni = region->count[inner];
    size_t ds = dstride[inner], ss = sstride[inner];
    size_t doff = 0, soff = 0;
    for (;;) {
        size_t di = doff, si = soff;
        for (int64_t i = 0; i < ni; i++, di += ds, si += ss)
            memcpy(dp + di, sp + si, run);
        int j = inner - 1;
        for (; j >= 0; j--) {
            doff += dstride[j];
            soff += sstride[j];
            if (++idx[j] < region->count[j])
                break;
            /* Wrap: back to the start of dim j (count * stride <= buffer size, no overflow). */
            doff -= (size_t)region->count[j] * dstride[j];
            soff -= (size_t)region->count[j] * sstride[j];
            idx[j] = 0;
        }
        if (j < 0)
            return CKPT_OK;
    }
}
