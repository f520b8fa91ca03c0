/* mpickpt import-tf: a TensorFlow tensor bundle in, an mpickpt checkpoint out
 * (ckpt_import_tf(), docs/interop.md). */
#include "cli.h"
#include "interop/interop.h" /* lib/interop/interop.h: ckpt__tf_resolve_prefix */

#include "mpickpt/interop.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct import_report {
    int json;
    /* --json: the skipped tensors are gathered for the "skipped" array */
    char **skipped_names, **skipped_dtypes, **skipped_reasons;
    size_t nskipped;
    int oom;
} import_report;

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void on_item(const ckpt_interop_item *item, void *payload)
{
    import_report *rep = payload;
    if (item->skipped) {
        fprintf(stderr, "mpickpt: import-tf: skipped \"");
        cli_text_name(stderr, item->name);
        fprintf(stderr, "\": %s\n", item->reason);
        if (!rep->json)
            return;
        size_t n = rep->nskipped + 1;
        if (cli_grow(&rep->skipped_names, n - 1, sizeof *rep->skipped_names) != 0 ||
            cli_grow(&rep->skipped_dtypes, n - 1, sizeof *rep->skipped_dtypes) != 0 ||
            cli_grow(&rep->skipped_reasons, n - 1, sizeof *rep->skipped_reasons) != 0) {
            rep->oom = 1;
            return;
        }
        char **a = rep->skipped_names, **b = rep->skipped_dtypes, **c = rep->skipped_reasons;
        a[n - 1] = dup_or_null(item->name);
        b[n - 1] = dup_or_null(item->dtype);
        c[n - 1] = dup_or_null(item->reason);
        rep->nskipped = n;
        if (!a[n - 1] || !b[n - 1] || !c[n - 1])
            rep->oom = 1;
        return;
    }
    if (rep->json)
        return;
    char dims[CLI_DIMS_BUF];
    cli_format_dims(dims, sizeof dims, item->shape.ndims, item->shape.dims);
    cli_text_name(stdout, item->name);
    printf("  %s %s %" PRIu64 " bytes\n", item->dtype, dims, item->bytes);
}

/* A non-negative integer option value. */
static int parse_count(const cli_command *cmd, const char *opt, const char *s, int64_t *out)
{
    if (!s)
        return 0;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return cli_usage_error(cmd, "%s wants a non-negative integer, not '%s'", opt, s);
    *out = v;
    return 0;
}

static int run_import(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0, json = 0, force = 0, skip = 0;
    const char *counter = NULL, *epoch = NULL, *step = NULL;
    const cli_option opts[] = {
        {"--json", &json, NULL},         {"--force", &force, NULL},
        {"--skip-unsupported", &skip, NULL}, {"--counter", NULL, &counter},
        {"--epoch", NULL, &epoch},       {"--step", NULL, &step},
    };
    const cli_spec spec = {opts, sizeof opts / sizeof opts[0], 2, 2,
                           "expected TF_PREFIX and OUT_PREFIX", "expected TF_PREFIX and OUT_PREFIX",
                           0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    ckpt_import_options io = CKPT_IMPORT_OPTIONS_INIT;
    if ((rc = parse_count(cmd, "--counter", counter, &io.save_counter)) != 0 ||
        (rc = parse_count(cmd, "--epoch", epoch, &io.epoch)) != 0 ||
        (rc = parse_count(cmd, "--step", step, &io.step)) != 0)
        return rc;
    char *in = cli_prefix(argv[0]);
    char *out = cli_prefix(argv[1]);
    if (!in || !out) {
        free(in);
        free(out);
        return cli_oom(cmd);
    }
    import_report rep;
    memset(&rep, 0, sizeof rep);
    rep.json = json;
    io.skip_unsupported = skip;
    io.overwrite = force;
    io.progress = on_item;
    io.payload = &rep;
    ckpt_interop_totals totals;
    char bundle[4400]; /* what a directory operand resolves to, read once, imported and shown */
    int lrc = ckpt__tf_resolve_prefix(bundle, sizeof bundle, in);
    if (lrc == CKPT_OK)
        lrc = ckpt_import_tf(bundle, out, &io, &totals);
    if (lrc != CKPT_OK) {
        rc = cli_lib_error(cmd, lrc);
    } else if (rep.oom) {
        rc = cli_oom(cmd);
    } else if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "input", in);
        ckpt__json_kstring(&w, "bundle", bundle);
        ckpt__json_kstring(&w, "output", out);
        ckpt__json_kstring(&w, "format", "tf");
        ckpt__json_kuint(&w, "tensors", totals.tensors);
        ckpt__json_kuint(&w, "bytes", totals.bytes);
        ckpt__json_key(&w, "files");
        ckpt__json_array_begin(&w);
        int files_oom = cli_json_prefix_files(&w, out);
        ckpt__json_array_end(&w);
        ckpt__json_key(&w, "skipped");
        ckpt__json_array_begin(&w);
        for (size_t i = 0; i < rep.nskipped; i++) {
            ckpt__json_object_begin(&w);
            ckpt__json_kstring(&w, "name", rep.skipped_names[i]);
            ckpt__json_kstring(&w, "dtype", rep.skipped_dtypes[i]);
            ckpt__json_kstring(&w, "reason", rep.skipped_reasons[i]);
            ckpt__json_object_end(&w);
        }
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
        rc = files_oom ? cli_oom(cmd) : EXIT_OK;
    } else {
        printf("imported %zu tensors (%" PRIu64 " bytes", totals.tensors, totals.bytes);
        if (totals.skipped)
            printf(", %zu skipped", totals.skipped);
        printf(") from ");
        cli_text_name(stdout, bundle);
        printf(" into ");
        cli_text_name(stdout, out);
        putchar('\n');
        rc = EXIT_OK;
    }
    for (size_t i = 0; i < rep.nskipped; i++) {
        free(rep.skipped_names[i]);
        free(rep.skipped_dtypes[i]);
        free(rep.skipped_reasons[i]);
    }
    free(rep.skipped_names);
    free(rep.skipped_dtypes);
    free(rep.skipped_reasons);
    free(in);
    free(out);
    return rc;
}

const cli_command cli_cmd_import_tf = {
    "import-tf",
    "[--skip-unsupported] [--force] [--counter N] [--epoch E] [--step S] [--json] TF_PREFIX "
    "OUT_PREFIX",
    "import a TensorFlow checkpoint (tensor bundle) as an mpickpt checkpoint",
    "Reads TF_PREFIX.index and its TF_PREFIX.data-NNNNN-of-NNNNN shards, checking every block\n"
    "and tensor checksum, and writes the checkpoint OUT_PREFIX (its directory must exist).\n"
    "TF_PREFIX may be a directory: its TensorFlow `checkpoint` file names the checkpoint (the\n"
    "newest), which is looked up in that directory.\n"
    "Keys are kept as tensor names; partitioned (sliced) variables become partitioned tensors.\n"
    "  --skip-unsupported  leave out tensors of dtypes mpickpt lacks (strings, complex, ...)\n"
    "                      instead of failing; each is named on stderr\n"
    "  --force             replace an existing checkpoint at OUT_PREFIX\n"
    "  --counter N, --epoch E, --step S   the header's save counter, epoch and step (0)\n"
    "  --json              one JSON document: input, output, format, tensors, bytes, files,\n"
    "                      skipped [{name, dtype, reason}]\n",
    run_import,
};
