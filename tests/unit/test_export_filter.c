/* Unit test of ckpt_export()'s filters (issue 30, include/mpickpt/interop.h): options version 2's
 * only/num_only/strip_prefix select and rename tensors, never the "__mpickpt__/" blobs; an alias
 * of a version-2 record whose alias and target are both written lands in the safetensors
 * metadata "mpickpt_aliases" under the written names (one whose target is not written does
 * not); a version-1 options struct (what a program built against the old header passes) still
 * exports everything; bad filters (empty prefix, nothing selected, a name without the strip
 * prefix) and a record that is not JSON fail before any file is written, naming what is wrong. */
#include "check.h"
#include "fsutil.h"
#include "internal.h"
#include "json.h"
#include "mpickpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[2048];

/* ckpt_export_options as version 1 of the header defined it */
typedef struct v1_options {
    unsigned int version;
    ckpt_export_format format;
    int overwrite;
    ckpt_interop_cb progress;
    void *payload;
} v1_options;

static void make(const char *prefix, const char *record)
{
    ckpt_writer *w = NULL;
    ckpt_writer_options o = CKPT_WRITER_OPTIONS_INIT;
    CHECK_OK(ckpt_writer_open(&w, prefix, &o));
    static const float v[4] = {1, 2, 3, 4};
    int64_t four = 4;
    ckpt_shape s4;
    ckpt_shape_init(&s4, 1, &four);
    static const char *const names[] = {"model/a", "model/b", "opt/x", "other/y"};
    for (int i = 0; i < 4; i++)
        CHECK_OK(ckpt_writer_add(w, names[i], CKPT_FLOAT32, &s4, NULL, v));
    if (record) {
        int64_t n = (int64_t)strlen(record);
        ckpt_shape sr;
        ckpt_shape_init(&sr, 1, &n);
        CHECK_OK(ckpt_writer_add(w, "__mpickpt__/json/rank_0", CKPT_UINT8, &sr, NULL, record));
    }
    CHECK_OK(ckpt_writer_commit(w));
    ckpt_writer_free(w);
}

/* The header of a safetensors file, parsed. */
static ckpt__json_doc *st_header(const char *path)
{
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "open %s", path);
    if (!f)
        return NULL;
    unsigned char len8[8];
    uint64_t n = 0;
    if (fread(len8, 1, 8, f) == 8)
        for (int b = 7; b >= 0; b--)
            n = n << 8 | len8[b];
    char *buf = malloc(n + 1);
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    ckpt__json_doc *d = NULL;
    char err[256];
    CHECK_MSG(got == n && ckpt__json_parse(&d, buf, n, err, sizeof err) == CKPT_OK,
              "%s: header: %s", path, err);
    free(buf);
    return d;
}

/* The names of a safetensors file's tensors, "," joined, and its mpickpt_aliases ("" if none). */
static void st_names(const char *path, char *names, size_t size, char *aliases, size_t asize)
{
    names[0] = aliases[0] = '\0';
    ckpt__json_doc *d = st_header(path);
    if (!d)
        return;
    const ckpt__jv *root = ckpt__json_doc_root(d);
    for (size_t i = 0; i < root->n; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            const ckpt__jv *a = ckpt__jv_get(&root->items[i], "mpickpt_aliases");
            if (a)
                snprintf(aliases, asize, "%s", a->text);
            continue;
        }
        size_t used = strlen(names);
        snprintf(names + used, size - used, "%s%s", used ? "," : "", root->keys[i]);
    }
    ckpt__json_doc_free(d);
}

static char reported[1024];
static void progress(const ckpt_interop_item *item, void *payload)
{
    (void)payload;
    size_t used = strlen(reported);
    snprintf(reported + used, sizeof reported - used, "%s%s", used ? "," : "", item->name);
}

int main(void)
{
    const char *base = getenv("MPICKPT_TEST_DIR");
    snprintf(dir, sizeof dir, "%s", base ? base : "/tmp/mpickpt_test_export_filter");
    ckpt__rmtree(dir);
    CHECK_OK(ckpt__mkdir_p(dir, 0755));
    char p[2200], out[2300], names[1024], aliases[1024];
    snprintf(p, sizeof p, "%s/ck", dir);
    make(p, "{\"mpickpt_json\": 2, \"replicated\": {\"step\": 1}, \"per_rank\": {}, "
            "\"aliases\": {\"model/c\": {\"of\": \"model/a\", \"offset\": 0, \"shape\": [4], "
            "\"strides\": [1], \"dtype\": \"float32\", \"torch\": true}, "
            "\"model/d\": {\"of\": \"opt/x\"}, \"other/z\": {\"of\": \"other/y\"}}}");

    /* version 1: everything, blobs included, as before */
    v1_options o1 = {1, CKPT_EXPORT_SAFETENSORS, 0, NULL, NULL};
    snprintf(out, sizeof out, "%s/v1.safetensors", dir);
    ckpt_interop_totals t;
    CHECK_OK(ckpt_export(p, out, (const ckpt_export_options *)&o1, &t));
    st_names(out, names, sizeof names, aliases, sizeof aliases);
    /* the header lists 4-byte dtypes before 1-byte ones */
    CHECK_MSG(strcmp(names, "model/a,model/b,opt/x,other/y,__mpickpt__/json/rank_0") == 0 &&
                  t.tensors == 5,
              "v1: %s (%zu)", names, t.tensors);
    /* without a filter the aliases whose target is written are recorded too */
    CHECK_MSG(strcmp(aliases, "{\"model/c\":\"model/a\",\"model/d\":\"opt/x\","
                              "\"other/z\":\"other/y\"}") == 0,
              "v1 aliases: %s", aliases);

    /* only model/, stripped */
    ckpt_export_options o = CKPT_EXPORT_OPTIONS_INIT;
    const char *only[] = {"model/", "__mpickpt__/"};
    o.format = CKPT_EXPORT_SAFETENSORS;
    o.only = only;
    o.num_only = 2;
    o.strip_prefix = "model/";
    o.progress = progress;
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    CHECK_OK(ckpt_export(p, out, &o, &t));
    st_names(out, names, sizeof names, aliases, sizeof aliases);
    CHECK_MSG(strcmp(names, "a,b") == 0 && t.tensors == 2, "only model/: %s", names);
    CHECK_MSG(strcmp(reported, "a,b") == 0, "progress reports the written names: %s", reported);
    /* model/d's target opt/x is not written: left out */
    CHECK_MSG(strcmp(aliases, "{\"c\":\"a\"}") == 0, "aliases: %s", aliases);

    /* HDF5 and TF take the same selection */
    o.progress = NULL;
    o.format = CKPT_EXPORT_HDF5;
    snprintf(out, sizeof out, "%s/model.h5", dir);
    CHECK_OK(ckpt_export(p, out, &o, &t));
    CHECK_EQ_INT(t.tensors, 2);
    o.format = CKPT_EXPORT_TF;
    snprintf(out, sizeof out, "%s/model_tf", dir);
    CHECK_OK(ckpt_export(p, out, &o, &t));
    CHECK_EQ_INT(t.tensors, 2);

    /* bad filters: nothing written */
    o.format = CKPT_EXPORT_SAFETENSORS;
    snprintf(out, sizeof out, "%s/bad.safetensors", dir);
    const char *two[] = {"model/", "opt/"};
    o.only = two;
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_EINVAL);
    CHECK(strstr(ckpt_error_last()->message, "'opt/x' does not start with --strip-prefix "
                                             "'model/'") != NULL);
    const char *none[] = {"zzz/"};
    o.only = none;
    o.num_only = 1;
    o.strip_prefix = NULL;
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_ENOTFOUND);
    CHECK(strstr(ckpt_error_last()->message, "no tensor's name starts with 'zzz/'") != NULL);
    const char *blob[] = {"__mpickpt__/"}; /* never selected */
    o.only = blob;
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_ENOTFOUND);
    const char *empty[] = {""};
    o.only = empty;
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_EINVAL);
    const char *model[] = {"model/"};
    o.only = model;
    o.strip_prefix = "model/a"; /* model/a would be empty, model/b does not start with it */
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_EINVAL);
    o.strip_prefix = NULL;
    o.version = 3;
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_EINVAL);
    o.version = CKPT_EXPORT_OPTIONS_VERSION;
    CHECK(access(out, F_OK) != 0);

    /* a record that is not JSON: the export fails naming it */
    snprintf(p, sizeof p, "%s/bad", dir);
    make(p, "{\"mpickpt_json\": 2, \"aliases\": {\"x\": {\"of\": 1}}}");
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_ECORRUPT);
    CHECK(strstr(ckpt_error_last()->message, "record __mpickpt__/json/rank_0: alias 'x' has no "
                                             "string \"of\"") != NULL);
    snprintf(p, sizeof p, "%s/bad2", dir);
    make(p, "{\"mpickpt_json\": 1} {}");
    CHECK_RC(ckpt_export(p, out, &o, &t), CKPT_ECORRUPT);
    CHECK(strstr(ckpt_error_last()->message, "trailing bytes") != NULL &&
          strstr(ckpt_error_last()->message, p) != NULL);
    CHECK(access(out, F_OK) != 0);
    return CHECK_DONE();
}
