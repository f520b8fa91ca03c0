/* mpickpt export: writes a checkpoint as a TensorFlow bundle, one HDF5 file or one safetensors
 * file (ckpt_export(), include/mpickpt/interop.h, docs/interop.md). */
#include "cli.h"

#include "mpickpt/interop.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The format an OUT name implies: .h5/.hdf5/.he5 hdf5, .safetensors safetensors; else
 * CKPT_EXPORT_INVALID (a TensorFlow bundle's OUT is a prefix, with no suffix of its own). */
static ckpt_export_format format_of_suffix(const char *out)
{
    static const struct {
        const char *suffix;
        ckpt_export_format format;
    } table[] = {{".h5", CKPT_EXPORT_HDF5},
                 {".hdf5", CKPT_EXPORT_HDF5},
                 {".he5", CKPT_EXPORT_HDF5},
                 {".safetensors", CKPT_EXPORT_SAFETENSORS}};
    size_t len = strlen(out);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        size_t sl = strlen(table[i].suffix);
        if (len > sl && strcmp(out + len - sl, table[i].suffix) == 0)
            return table[i].format;
    }
    return CKPT_EXPORT_INVALID;
}

/* ckpt_interop_cb of the text output: one line per tensor as it is written. */
static void export_line(const ckpt_interop_item *item, void *payload)
{
    (void)payload;
    char shape[CLI_DIMS_BUF];
    cli_format_dims(shape, sizeof shape, item->shape.ndims, item->shape.dims);
    cli_text_name(stdout, item->name);
    printf("  %s %s  %" PRIu64 " bytes\n", item->dtype, shape, item->bytes);
}

static int cmd_export(const cli_command *cmd, int argc, char **argv)
{
    int nops = 0, json = 0, force = 0;
    const char *format_name = NULL, *only = NULL, *strip = NULL;
    const char *onlies[64];
    size_t num_only = 0;
    const cli_option opts[] = {{"--format", NULL, &format_name},
                               {"--force", &force, NULL},
                               {"--json", &json, NULL},
                               {"--only", NULL, &only},
                               {"--strip-prefix", NULL, &strip}};
    const cli_spec spec = {opts, 5, 2, 2, "expected PREFIX and OUT", "too many arguments", 0};
    cli_repeatable("--only", onlies, sizeof onlies / sizeof onlies[0], &num_only);
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;
    const char *out = argv[1];

    ckpt_export_options eo = CKPT_EXPORT_OPTIONS_INIT;
    if (format_name) {
        if (ckpt_export_format_from_name(&eo.format, format_name) != CKPT_OK)
            return cli_usage_error(cmd, "unknown --format '%s' (tf, hdf5 or safetensors)",
                                   format_name);
    } else if ((eo.format = format_of_suffix(out)) == CKPT_EXPORT_INVALID) {
        return cli_usage_error(cmd,
                               "cannot tell the format from '%s': give --format tf, hdf5 or "
                               "safetensors (OUT ending in .h5, .hdf5, .he5 or .safetensors "
                               "implies hdf5 or safetensors)",
                               out);
    }
    eo.overwrite = force;
    eo.only = onlies;
    eo.num_only = num_only;
    eo.strip_prefix = strip;
    for (size_t i = 0; i < num_only; i++)
        if (!onlies[i][0])
            return cli_usage_error(cmd, "an empty --only prefix (leave --only out to export "
                                        "every tensor)");
    if (strip && !strip[0])
        return cli_usage_error(cmd, "an empty --strip-prefix");
    if (!json)
        eo.progress = export_line;

    char *prefix = cli_prefix(argv[0]);
    if (!prefix)
        return cli_oom(cmd);
    ckpt_interop_totals totals;
    rc = ckpt_export(prefix, out, &eo, &totals);
    if (rc != CKPT_OK) {
        free(prefix);
        return cli_lib_error(cmd, rc);
    }
    const char *fmt = ckpt_export_format_name(eo.format);
    if (json) {
        ckpt__json_writer w;
        ckpt__json_init(&w, stdout);
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "input", prefix);
        ckpt__json_kstring(&w, "output", out);
        ckpt__json_kstring(&w, "format", fmt);
        ckpt__json_kuint(&w, "tensors", totals.tensors);
        ckpt__json_kuint(&w, "bytes", totals.bytes);
        ckpt__json_key(&w, "files");
        ckpt__json_array_begin(&w);
        if (eo.format == CKPT_EXPORT_TF) {
            if (cli_json_prefix_files(&w, out) != 0) {
                free(prefix);
                return cli_oom(cmd);
            }
        } else {
            ckpt__json_string(&w, out);
        }
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
        fputc('\n', stdout);
    } else {
        printf("exported %zu tensors (%" PRIu64 " bytes) of ", totals.tensors, totals.bytes);
        cli_text_name(stdout, prefix);
        printf(" to ");
        cli_text_name(stdout, out);
        printf(" (%s)\n", fmt);
    }
    free(prefix);
    return EXIT_OK;
}

const cli_command cli_cmd_export = {
    "export",
    "[--format tf|hdf5|safetensors] [--only PREFIX]... [--strip-prefix PREFIX] [--force] "
    "[--json] PREFIX OUT",
    "write a checkpoint as a TensorFlow bundle, one HDF5 file or one safetensors file",
    "  Every tensor is assembled from its pieces (each piece's checksum checked) and written\n"
    "  whole; the output appears whole or not at all (a temp file, fsynced, renamed into place).\n"
    "  --format FORMAT  tf: OUT is a prefix (OUT.index, OUT.data-00000-of-00001);\n"
    "                   hdf5: OUT is a file, a dataset per tensor, groups from '/' in names;\n"
    "                   safetensors: OUT is a file. Without --format, OUT ending in .h5, .hdf5\n"
    "                   or .he5 means hdf5 and .safetensors means safetensors.\n"
    "  --only PREFIX    only the tensors whose names start with PREFIX (repeatable: any of\n"
    "                   them), never mpickpt's own \"__mpickpt__/\" blobs (the record of plain\n"
    "                   values); without --only every tensor is written, blobs included\n"
    "  --strip-prefix PREFIX  removed from every written name; each must start with it\n"
    "                   (\"--only model/ --strip-prefix model/\": a state dict for PyTorch's\n"
    "                   load_state_dict). Tensors the Python package stored once for two names\n"
    "                   (tied weights) are written once, the alias recorded in the metadata:\n"
    "                   safetensors __metadata__ \"mpickpt_aliases\", HDF5 root attribute\n"
    "                   \"mpickpt_aliases\", a JSON object {\"alias\": \"target\"}\n"
    "  --force          replace existing output files (never a link, directory or FIFO)\n"
    "  --json           one object instead of the lines: {\"input\",\"output\",\"format\",\n"
    "                   \"tensors\",\"bytes\",\"files\":[paths written]}\n"
    "  Prints one line per tensor (name, dtype, shape, bytes), then a summary line.\n"
    "  Names HDF5 cannot hold (empty or \".\" components, \"a\" next to \"a/b\") and a tensor\n"
    "  named \"__metadata__\" in safetensors are errors naming the tensors (docs/interop.md).\n",
    cmd_export};
