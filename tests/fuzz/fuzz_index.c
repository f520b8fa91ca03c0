/*
 * libFuzzer target for the index container, the index/fragment parser and validator, the merge of
 * per-rank fragments, and the slice-spec parser and formatter.
 *
 * The first input byte selects a mode (byte % MODE_COUNT); the rest is the mode's input:
 *   0  MODE_CONTAINER  the bytes are a whole .index file: container_open -> unpack -> validate
 *   1  MODE_PAYLOAD    the bytes are a raw protobuf Index payload: unpack -> validate
 *   2  MODE_WRAPPED    the bytes are wrapped into a valid container (header + CRC-32C), then as 0
 *   3  MODE_MERGE      1-3 raw protobuf Fragments (see split_fragments) -> unpack -> merge, and
 *                      the same as a leader's partial merge of all but the last, then the chief's
 *   4  MODE_SLICE      a slice-spec string (see fuzz_slice): parse, format, parse again
 *   5  MODE_JSON       a JSON document (lib/json_read.c, the record of plain values): parse; what
 *                      parses is written back (both forms) and must parse again
 * Every path must return without crashing, leaking or hitting undefined behaviour.
 * Built by tests/fuzz/build_fuzzer.sh; run by tests/fuzz/run_fuzz.sh.
 */
#include "index.h"
#include "json.h"
#include "mpickpt/crc32c.h"
#include "mpickpt/slice.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_CONTAINER, MODE_PAYLOAD, MODE_WRAPPED, MODE_MERGE, MODE_SLICE, MODE_JSON, MODE_COUNT };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * Independent check of what ckpt__index_validate() accepted: for every tensor small enough to
 * enumerate, the pieces cover each element exactly once (no gap, no overlap) and lie in the shape.
 */
#define ORACLE_MAX_ELEMS 65536

static void check_coverage(const Mpickpt__Index *idx)
{
    for (size_t i = 0; i < idx->n_tensors; i++) {
        const Mpickpt__Tensor *t = idx->tensors[i];
        ckpt_shape shape;
        int64_t total;
        FUZZ_ASSERT(t->n_shape <= CKPT_MAX_DIMS);
        FUZZ_ASSERT(ckpt_shape_init(&shape, (int)t->n_shape, t->shape) == CKPT_OK);
        FUZZ_ASSERT(ckpt_shape_num_elements(&total, &shape) == CKPT_OK);
        /* An accepted tensor's byte count must be exact: no product may wrap around. */
        uint64_t bytes;
        FUZZ_ASSERT(!__builtin_mul_overflow((uint64_t)total,
                                            (uint64_t)ckpt_dtype_size((ckpt_dtype)t->dtype),
                                            &bytes));
        if (total > ORACLE_MAX_ELEMS)
            continue;
        uint8_t *hits = calloc((size_t)(total ? total : 1), 1);
        if (!hits)
            return;
        for (size_t j = 0; j < t->n_pieces; j++) {
            ckpt_slice s;
            int64_t n;
            FUZZ_ASSERT(ckpt__piece_slice(&s, t->pieces[j], shape.ndims) == CKPT_OK);
            FUZZ_ASSERT(ckpt_slice_validate(&s, &shape) == CKPT_OK);
            FUZZ_ASSERT(ckpt_slice_num_elements(&n, &s) == CKPT_OK && n <= total);
            /* Walk the slice's elements in row-major order with an n-d counter. */
            int64_t pos[CKPT_MAX_DIMS] = { 0 };
            for (int64_t e = 0; e < n; e++) {
                int64_t off = 0;
                for (int d = 0; d < shape.ndims; d++)
                    off = off * shape.dims[d] + s.start[d] + pos[d];
                FUZZ_ASSERT(off >= 0 && off < total);
                FUZZ_ASSERT(hits[off] == 0); /* overlap the validator missed */
                hits[off] = 1;
                for (int d = shape.ndims - 1; d >= 0; d--) {
                    if (++pos[d] < s.count[d])
                        break;
                    pos[d] = 0;
                }
            }
        }
        for (int64_t e = 0; e < total; e++)
            FUZZ_ASSERT(hits[e] == 1); /* gap the validator missed */
        free(hits);
    }
}

/*
 * 1 when any message of the tree kept unknown fields. protobuf-c 1.4 accepts a field number 0
 * written as an over-long varint (0x80 0x00) as an unknown field but re-packs it as the tag byte
 * 0x00, which its own unpacker rejects: such an index does not survive a pack/unpack round trip,
 * through no fault of mpickpt (which never re-packs an index it loaded).
 */
static int has_unknown(const Mpickpt__Index *idx)
{
    if (idx->base.n_unknown_fields || (idx->header && idx->header->base.n_unknown_fields))
        return 1;
    for (size_t i = 0; i < idx->n_files; i++)
        if (idx->files[i]->base.n_unknown_fields)
            return 1;
    for (size_t i = 0; i < idx->n_tensors; i++) {
        if (idx->tensors[i]->base.n_unknown_fields)
            return 1;
        for (size_t j = 0; j < idx->tensors[i]->n_pieces; j++)
            if (idx->tensors[i]->pieces[j]->base.n_unknown_fields)
                return 1;
    }
    return 0;
}

/* Unpacks and validates an Index payload; a validated index must also pack back. */
static void fuzz_payload(const uint8_t *payload, size_t plen)
{
    Mpickpt__Index *idx = mpickpt__index__unpack(NULL, plen, payload);
    if (!idx)
        return;
    int rc = ckpt__index_validate(idx, CKPT_ECORRUPT, "fuzz");
    FUZZ_ASSERT(rc == CKPT_OK || rc == CKPT_ECORRUPT || rc == CKPT_EVERSION ||
                rc == CKPT_ENOMEM);
    if (rc == CKPT_OK) {
        check_coverage(idx);
        /* A valid index survives a pack/open/unpack/validate round trip. */
        uint8_t *buf = NULL;
        size_t len = 0;
        if (ckpt__container_pack(&buf, &len, CKPT__MAGIC_INDEX, &idx->base) == CKPT_OK) {
            const uint8_t *p2;
            size_t n2;
            FUZZ_ASSERT(ckpt__container_open(&p2, &n2, buf, len, CKPT__MAGIC_INDEX, "fuzz") ==
                        CKPT_OK);
            Mpickpt__Index *again = mpickpt__index__unpack(NULL, n2, p2);
            FUZZ_ASSERT(again != NULL || has_unknown(idx));
            if (again) {
                FUZZ_ASSERT(ckpt__index_validate(again, CKPT_ECORRUPT, "fuzz") == CKPT_OK);
                FUZZ_ASSERT(again->n_tensors == idx->n_tensors && again->n_files == idx->n_files);
                mpickpt__index__free_unpacked(again, NULL);
            }
            free(buf);
        }
    }
    mpickpt__index__free_unpacked(idx, NULL);
}

static void fuzz_container(const uint8_t *buf, size_t len)
{
    const uint8_t *payload = NULL;
    size_t plen = 0;
    int rc = ckpt__container_open(&payload, &plen, buf, len, CKPT__MAGIC_INDEX, "fuzz");
    FUZZ_ASSERT(rc == CKPT_OK || rc == CKPT_ECORRUPT || rc == CKPT_EVERSION);
    if (rc != CKPT_OK)
        return;
    FUZZ_ASSERT(payload == buf + CKPT__CONTAINER_HEAD);
    FUZZ_ASSERT(plen == len - CKPT__CONTAINER_HEAD - CKPT__CONTAINER_TAIL);
    fuzz_payload(payload, plen);
}

/* Wraps the bytes into a container with a correct header and CRC, so the parser gets exercised
 * through container_open. */
static void fuzz_wrapped(const uint8_t *data, size_t size)
{
    size_t len = CKPT__CONTAINER_HEAD + size + CKPT__CONTAINER_TAIL;
    uint8_t *buf = malloc(len);
    if (!buf)
        return;
    memcpy(buf, CKPT__MAGIC_INDEX, 8);
    put32(buf + 8, CKPT__CONTAINER_VERSION);
    put32(buf + 12, 0);
    put64(buf + 16, (uint64_t)size);
    if (size)
        memcpy(buf + CKPT__CONTAINER_HEAD, data, size);
    put32(buf + CKPT__CONTAINER_HEAD + size, ckpt_crc32c(buf, CKPT__CONTAINER_HEAD + size));
    const uint8_t *payload = NULL;
    size_t plen = 0;
    FUZZ_ASSERT(ckpt__container_open(&payload, &plen, buf, len, CKPT__MAGIC_INDEX, "fuzz") ==
                CKPT_OK);
    FUZZ_ASSERT(plen == size);
    fuzz_payload(payload, plen);
    free(buf);
}

static uint8_t *pack_index(size_t *len, const Mpickpt__Index *idx)
{
    *len = mpickpt__index__get_packed_size(idx);
    uint8_t *b = malloc(*len ? *len : 1);
    FUZZ_ASSERT(b && mpickpt__index__pack(idx, b) == *len);
    return b;
}

/*
 * The hierarchical merge (lib/merge.h): a leader's ckpt__fragment_merge of the first n - 1
 * fragments, packed and unpacked as it travels, then the chief's merge of it and the last fragment,
 * must fail exactly when the flat merge failed (flat == NULL) and otherwise give its bytes.
 */
static void check_hierarchical(Mpickpt__Fragment **frags, size_t n, Mpickpt__Header *hdr,
                               const Mpickpt__Index *flat)
{
    Mpickpt__Fragment part;
    int rc = ckpt__fragment_merge(&part, frags, n - 1);
    FUZZ_ASSERT(rc == CKPT_OK || rc == CKPT_EMISMATCH || rc == CKPT_EINVAL || rc == CKPT_ENOMEM);
    if (rc != CKPT_OK) {
        FUZZ_ASSERT(!flat || rc == CKPT_ENOMEM);
        ckpt__fragment_merged_free(&part);
        return;
    }
    size_t plen = mpickpt__fragment__get_packed_size(&part);
    uint8_t *pb = malloc(plen ? plen : 1);
    FUZZ_ASSERT(pb && mpickpt__fragment__pack(&part, pb) == plen);
    ckpt__fragment_merged_free(&part);
    Mpickpt__Fragment *two[2] = { mpickpt__fragment__unpack(NULL, plen, pb), frags[n - 1] };
    free(pb);
    if (!two[0]) {
        /* protobuf-c keeps an unknown field whose tag was written in two bytes as field number
         * 0, then packs it in one byte, which it refuses to read: the result does not survive the
         * trip. The flat merge carries the same field into the index, which must not survive a
         * pack and unpack either. (The saver's fragments hold no unknown fields.) */
        if (flat) {
            size_t a;
            uint8_t *x = pack_index(&a, flat);
            Mpickpt__Index *back = mpickpt__index__unpack(NULL, a, x);
            FUZZ_ASSERT(back == NULL);
            free(x);
        }
        return;
    }
    Mpickpt__Index out;
    mpickpt__index__init(&out);
    out.header = hdr;
    rc = ckpt__index_merge(&out, two, 2);
    FUZZ_ASSERT((rc == CKPT_OK) == (flat != NULL) || rc == CKPT_ENOMEM);
    if (rc == CKPT_OK && flat) {
        size_t a, b;
        uint8_t *x = pack_index(&a, flat), *y = pack_index(&b, &out);
        FUZZ_ASSERT(a == b && memcmp(x, y, a) == 0);
        free(x);
        free(y);
    }
    ckpt__index_merged_free(&out);
    mpickpt__fragment__free_unpacked(two[0], NULL);
}

/*
 * Fragments: byte 0 gives the count (1 + b % 3); each fragment but the last is preceded by a
 * 2-byte little-endian length (clamped to what is left); the last takes the rest.
 */
static void fuzz_merge(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    size_t nfrag = 1 + (size_t)(data[0] % 3);
    data++;
    size--;
    Mpickpt__Fragment *frags[3] = { NULL, NULL, NULL };
    size_t got = 0;
    for (size_t f = 0; f < nfrag; f++) {
        size_t n = size;
        if (f + 1 < nfrag) {
            if (size < 2)
                break;
            n = (size_t)data[0] | (size_t)data[1] << 8;
            data += 2;
            size -= 2;
            if (n > size)
                n = size;
        }
        frags[got] = mpickpt__fragment__unpack(NULL, n, data);
        if (!frags[got])
            goto out;
        got++;
        data += n;
        size -= n;
    }
    if (got == 0)
        goto out;

    Mpickpt__Header hdr;
    mpickpt__header__init(&hdr);
    hdr.format_version = CKPT_FORMAT_VERSION;
    hdr.endianness = MPICKPT__ENDIANNESS__LITTLE;
    hdr.world_size = 4;
    hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    Mpickpt__Index out;
    mpickpt__index__init(&out);
    out.header = &hdr;
    int rc = ckpt__index_merge(&out, frags, got);
    FUZZ_ASSERT(rc == CKPT_OK || rc == CKPT_EMISMATCH || rc == CKPT_EINVAL || rc == CKPT_ENOMEM);
    if (rc == CKPT_OK) {
        /* What merge accepted is a valid index, sorted by name, every piece kept. */
        FUZZ_ASSERT(ckpt__index_validate(&out, CKPT_EMISMATCH, "fuzz") == CKPT_OK);
        check_coverage(&out);
        size_t np_in = 0, np_out = 0, nf_in = 0;
        for (size_t f = 0; f < got; f++) {
            nf_in += frags[f]->n_files;
            for (size_t i = 0; i < frags[f]->n_tensors; i++)
                np_in += frags[f]->tensors[i]->n_pieces;
        }
        for (size_t i = 0; i < out.n_tensors; i++)
            np_out += out.tensors[i]->n_pieces;
        FUZZ_ASSERT(np_in == np_out && nf_in == out.n_files);
    }
    if (got >= 2)
        check_hierarchical(frags, got, &hdr, rc == CKPT_OK ? &out : NULL);
    ckpt__index_merged_free(&out);
out:
    for (size_t f = 0; f < got; f++)
        mpickpt__fragment__free_unpacked(frags[f], NULL);
}

/* Formats (shape, slice), parses the result again and requires the same shape and slice. Also
 * formats into every too-small buffer size around the needed length. */
static void roundtrip(const ckpt_shape *shape, const ckpt_slice *slice)
{
    char buf[2048];
    FUZZ_ASSERT(ckpt_slice_spec_format(buf, sizeof buf, shape, slice) == CKPT_OK);
    size_t need = strlen(buf) + 1;
    FUZZ_ASSERT(need < sizeof buf);
    if (shape->ndims == 0) {
        FUZZ_ASSERT(buf[0] == '\0'); /* scalars have no spec */
        return;
    }
    ckpt_shape sh2;
    ckpt_slice sl2;
    FUZZ_ASSERT(ckpt_slice_spec_parse(&sh2, &sl2, buf) == CKPT_OK);
    FUZZ_ASSERT(ckpt_shape_equal(shape, &sh2));
    FUZZ_ASSERT(ckpt_slice_equal(slice, &sl2));
    /* The formatter is canonical: formatting what it produced again gives the same string. */
    char buf2[2048];
    FUZZ_ASSERT(ckpt_slice_spec_format(buf2, sizeof buf2, &sh2, &sl2) == CKPT_OK);
    FUZZ_ASSERT(strcmp(buf, buf2) == 0);
    /* Too small by one byte must fail cleanly and leave an empty string. */
    char small[2048];
    memset(small, 'x', sizeof small);
    FUZZ_ASSERT(ckpt_slice_spec_format(small, need - 1, shape, slice) == CKPT_EINVAL);
    FUZZ_ASSERT(need - 1 == 0 || small[0] == '\0');
    FUZZ_ASSERT(small[need - 1] == 'x'); /* nothing written past the given size */
    /* The extents part alone parses against the shape to the same slice. */
    const char *ext = buf;
    for (int d = 0; d < shape->ndims; d++)
        ext = strchr(ext, ' ') + 1;
    ckpt_slice sl3;
    FUZZ_ASSERT(ckpt_slice_parse_extent(&sl3, shape, ext) == CKPT_OK);
    FUZZ_ASSERT(ckpt_slice_equal(slice, &sl3));
}

/*
 * Slice strings: the text up to the first '\n' is a full spec; when there is a '\n', the rest is an
 * extents string parsed against the spec's shape (or a fixed 4x10 shape when the spec failed).
 */
/* Writes a parsed value back and parses the text again: it must read. */
static void json_again(const ckpt__jv *v, int python)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FUZZ_ASSERT(f != NULL);
    ckpt__json_writer w;
    ckpt__json_init(&w, f);
    ckpt__json_value(&w, v, python);
    FUZZ_ASSERT(fclose(f) == 0);
    ckpt__json_doc *d = NULL;
    char err[256];
    FUZZ_ASSERT(ckpt__json_parse(&d, text, len, err, sizeof err) == CKPT_OK);
    ckpt__json_doc_free(d);
    free(text);
}

static void fuzz_json(const uint8_t *data, size_t size)
{
    ckpt__json_doc *d = NULL;
    char err[256];
    int rc = ckpt__json_parse(&d, (const char *)data, size, err, sizeof err);
    FUZZ_ASSERT((rc == CKPT_OK) == (d != NULL));
    if (rc != CKPT_OK) {
        FUZZ_ASSERT(rc == CKPT_ECORRUPT || rc == CKPT_ENOMEM);
        FUZZ_ASSERT(strlen(err) > 0);
        return;
    }
    json_again(ckpt__json_doc_root(d), 1);
    json_again(ckpt__json_doc_root(d), 0);
    ckpt__json_doc_free(d);
}

static void fuzz_slice(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return;
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    char *ext = memchr(s, '\n', size);
    if (ext)
        *ext++ = '\0';

    ckpt_shape shape;
    ckpt_slice slice;
    int rc = ckpt_slice_spec_parse(&shape, &slice, s);
    FUZZ_ASSERT(rc == CKPT_OK || rc == CKPT_EINVAL);
    if (rc == CKPT_OK) {
        FUZZ_ASSERT(shape.ndims >= 1 && shape.ndims <= CKPT_MAX_DIMS);
        FUZZ_ASSERT(ckpt_slice_validate(&slice, &shape) == CKPT_OK);
        roundtrip(&shape, &slice);
    } else {
        int64_t dims[2] = { 4, 10 };
        FUZZ_ASSERT(ckpt_shape_init(&shape, 2, dims) == CKPT_OK);
    }
    if (ext) {
        ckpt_slice sl;
        rc = ckpt_slice_parse_extent(&sl, &shape, ext);
        FUZZ_ASSERT(rc == CKPT_OK || rc == CKPT_EINVAL);
        if (rc == CKPT_OK) {
            FUZZ_ASSERT(ckpt_slice_validate(&sl, &shape) == CKPT_OK);
            roundtrip(&shape, &sl);
        }
        /* A scalar shape takes only the empty extents string. */
        ckpt_shape scalar;
        FUZZ_ASSERT(ckpt_shape_init(&scalar, 0, NULL) == CKPT_OK);
        rc = ckpt_slice_parse_extent(&sl, &scalar, ext);
        FUZZ_ASSERT((rc == CKPT_OK) == (ext[0] == '\0'));
        if (rc == CKPT_OK)
            roundtrip(&scalar, &sl);
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] % MODE_COUNT;
    data++;
    size--;
    switch (mode) {
    case MODE_CONTAINER: fuzz_container(data, size); break;
    case MODE_PAYLOAD: fuzz_payload(data, size); break;
    case MODE_WRAPPED: fuzz_wrapped(data, size); break;
    case MODE_MERGE: fuzz_merge(data, size); break;
    case MODE_SLICE: fuzz_slice(data, size); break;
    case MODE_JSON: fuzz_json(data, size); break;
    }
    return 0;
}
