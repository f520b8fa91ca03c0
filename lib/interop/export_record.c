/* The Python package's record of plain values, read back by `mpickpt dump` and by ckpt_export()
 * (its aliases): each rank's JSON document in the blob tensor `__mpickpt__/json/rank_<r>`,
 * versions 1 and 2 (docs/python.md; lib/interop/interop.h ckpt__records_load). */
#include "interop.h"

#include "mpickpt/dtype.h"

#include <stdlib.h>
#include <string.h>

#define RECORD_PREFIX "__mpickpt__/json/rank_"
#define RECORD_MAX_VERSION 2

/* The rank of a record tensor's name, or -1 when `name` is not one. */
static int record_rank(const char *name)
{
    size_t n = strlen(RECORD_PREFIX);
    if (strncmp(name, RECORD_PREFIX, n) != 0)
        return -1;
    const char *d = name + n;
    if (!*d || strlen(d) > 9 || (d[0] == '0' && d[1]))
        return -1;
    int r = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return -1;
        r = r * 10 + (*d - '0');
    }
    return r;
}

static int by_rank(const void *a, const void *b)
{
    int x = ((const ckpt__record *)a)->rank, y = ((const ckpt__record *)b)->rank;
    return (x > y) - (x < y);
}

/* Reads and checks one record. */
static int load_one(ckpt__record *rec, ckpt_reader *r, const ckpt_tensor_info *t,
                    const char *shown)
{
    int64_t n = 0;
    int rc = ckpt_shape_num_elements(&n, &t->shape);
    if (rc != CKPT_OK)
        return rc;
    if (t->dtype != CKPT_UINT8 || t->shape.ndims != 1)
        return ckpt__error(CKPT_ECORRUPT,
                           "checkpoint %s, record %s: a %s tensor of %d dimension(s), expected "
                           "1-d uint8 (JSON bytes)",
                           shown, t->name, ckpt_dtype_name(t->dtype), t->shape.ndims);
    if ((uint64_t)n > ((uint64_t)1 << 31))
        return ckpt__error(CKPT_ECORRUPT, "checkpoint %s, record %s: %lld bytes, more than a "
                                          "record of plain values can be",
                           shown, t->name, (long long)n);
    char *buf = malloc((size_t)n + 1);
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "checkpoint %s, record %s: out of memory", shown,
                           t->name);
    rc = ckpt_reader_read(r, t->name, CKPT_UINT8, NULL, buf, (size_t)n);
    if (rc != CKPT_OK) {
        free(buf);
        return ckpt__error_wrap(rc, "checkpoint %s, record %s", shown, t->name);
    }
    char why[512];
    rc = ckpt__json_parse(&rec->doc, buf, (size_t)n, why, sizeof why);
    free(buf);
    if (rc != CKPT_OK)
        return ckpt__error(rc, "checkpoint %s, record %s: %s", shown, t->name, why);
    const ckpt__jv *root = ckpt__json_doc_root(rec->doc);
    const ckpt__jv *v = ckpt__jv_get(root, "mpickpt_json");
    if (root->kind != CKPT__JV_OBJECT || !v || v->kind != CKPT__JV_NUMBER || !v->is_int ||
        v->len > 6)
        return ckpt__error(CKPT_ECORRUPT,
                           "checkpoint %s, record %s: not a record of plain values (no integer "
                           "\"mpickpt_json\" in an object)",
                           shown, t->name);
    rec->version = atoi(v->text);
    if (rec->version < 1)
        return ckpt__error(CKPT_ECORRUPT, "checkpoint %s, record %s: record version %s", shown,
                           t->name, v->text);
    if (rec->version > RECORD_MAX_VERSION)
        return ckpt__error(CKPT_EVERSION,
                           "checkpoint %s, record %s: record version %d; this mpickpt reads "
                           "versions 1 to %d (upgrade it)",
                           shown, t->name, rec->version, RECORD_MAX_VERSION);
    static const char *const parts[] = {"replicated", "per_rank", "aliases"};
    const ckpt__jv **slots[] = {&rec->replicated, &rec->per_rank, &rec->aliases};
    for (int i = 0; i < 3; i++) {
        const ckpt__jv *p = ckpt__jv_get(root, parts[i]);
        if (p && p->kind != CKPT__JV_OBJECT)
            return ckpt__error(CKPT_ECORRUPT, "checkpoint %s, record %s: \"%s\" is not an object",
                               shown, t->name, parts[i]);
        *slots[i] = p;
    }
    if (rec->aliases)
        for (size_t i = 0; i < rec->aliases->n; i++) {
            const ckpt__jv *of = ckpt__jv_get(&rec->aliases->items[i], "of");
            if (!of || of->kind != CKPT__JV_STRING)
                return ckpt__error(CKPT_ECORRUPT,
                                   "checkpoint %s, record %s: alias '%s' has no string \"of\"",
                                   shown, t->name, rec->aliases->keys[i]);
        }
    return CKPT_OK;
}

int ckpt__records_load(ckpt__records *out, ckpt_reader *r, const char *shown)
{
    memset(out, 0, sizeof *out);
    size_t n = ckpt_reader_num_tensors(r), count = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        if (ckpt_reader_tensor(&t, r, i) == CKPT_OK && record_rank(t.name) >= 0)
            count++;
    }
    if (count == 0)
        return CKPT_OK;
    out->r = calloc(count, sizeof *out->r);
    if (!out->r)
        return ckpt__error(CKPT_ENOMEM, "checkpoint %s: out of memory for its records", shown);
    int rc = CKPT_OK;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        ckpt_tensor_info t;
        if ((rc = ckpt_reader_tensor(&t, r, i)) != CKPT_OK)
            break;
        int rank = record_rank(t.name);
        if (rank < 0)
            continue;
        ckpt__record *rec = &out->r[out->n++];
        rec->rank = rank;
        snprintf(rec->name, sizeof rec->name, "%s", t.name);
        rc = load_one(rec, r, &t, shown);
    }
    if (rc != CKPT_OK) {
        ckpt__records_free(out);
        return rc;
    }
    if (out->n > 1) /* qsort of no array (NULL) is undefined */
        qsort(out->r, out->n, sizeof *out->r, by_rank);
    return CKPT_OK;
}

void ckpt__records_free(ckpt__records *recs)
{
    for (size_t i = 0; recs->r && i < recs->n; i++)
        ckpt__json_doc_free(recs->r[i].doc);
    free(recs->r);
    memset(recs, 0, sizeof *recs);
}

int ckpt__is_internal_name(const char *name)
{
    return strncmp(name, "__mpickpt__/", 12) == 0;
}
