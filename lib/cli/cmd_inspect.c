/* mpickpt inspect: a checkpoint's header, tensors and pieces (text or JSON), then a metadata
 * check of every piece's dataset. */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

/* The whole index as one JSON document (format in the tool's documentation). */
static int inspect_json(const cli_command *cmd, const ckpt_reader *r)
{
    const ckpt_header *h = ckpt_reader_header(r);
    ckpt__json_writer w;
    ckpt__json_init(&w, stdout);
    ckpt__json_object_begin(&w);
    ckpt__json_kuint(&w, "format_version", h->format_version);
    ckpt__json_kint(&w, "world_size", h->world_size);
    ckpt__json_kstring(&w, "layout", ckpt_layout_name(h->layout));
    ckpt__json_kint(&w, "save_counter", h->save_counter);
    ckpt__json_kint(&w, "epoch", h->epoch);
    ckpt__json_kint(&w, "step", h->step);
    ckpt__json_key(&w, "timestamp");
    ckpt__json_real(&w, h->timestamp);
    ckpt__json_kstring(&w, "producer", h->producer ? h->producer : "");
    ckpt__json_key(&w, "tensors");
    ckpt__json_array_begin(&w);
    size_t n = ckpt_reader_num_tensors(r);
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info t;
        int rc = ckpt_reader_tensor(&t, r, i);
        if (rc != CKPT_OK)
            return cli_lib_error(cmd, rc);
        ckpt__json_object_begin(&w);
        ckpt__json_kstring(&w, "name", t.name);
        ckpt__json_kstring(&w, "dtype", ckpt_dtype_name(t.dtype));
        ckpt__json_key(&w, "shape");
        cli_json_dims(&w, t.shape.ndims, t.shape.dims);
        ckpt__json_kstring(&w, "kind", ckpt_kind_name(t.kind));
        ckpt__json_key(&w, "pieces");
        ckpt__json_array_begin(&w);
        for (size_t j = 0; j < t.num_pieces; j++) {
            ckpt_piece_info p;
            if ((rc = ckpt_reader_piece(&p, r, i, j)) != CKPT_OK)
                return cli_lib_error(cmd, rc);
            ckpt__json_object_begin(&w);
            ckpt__json_key(&w, "start");
            cli_json_dims(&w, p.slice.ndims, p.slice.start);
            ckpt__json_key(&w, "count");
            cli_json_dims(&w, p.slice.ndims, p.slice.count);
            ckpt__json_kint(&w, "rank", p.rank);
            ckpt__json_kstring(&w, "file", p.file);
            ckpt__json_kstring(&w, "dataset", p.dataset);
            ckpt__json_key(&w, "dataset_start");
            cli_json_dims(&w, p.dataset_slice.ndims, p.dataset_slice.start);
            ckpt__json_kuint(&w, "bytes", p.bytes);
            ckpt__json_kuint(&w, "crc32c", p.crc32c);
            int packed = 0;
            uint64_t pack_offset = 0;
            if ((rc = ckpt_reader_piece_packing(&packed, &pack_offset, r, i, j)) != CKPT_OK)
                return cli_lib_error(cmd, rc);
            ckpt__json_kbool(&w, "packed", packed);
            ckpt__json_kuint(&w, "pack_offset", pack_offset);
            ckpt__json_object_end(&w);
        }
        ckpt__json_array_end(&w);
        ckpt__json_object_end(&w);
    }
    ckpt__json_array_end(&w);
    ckpt__json_object_end(&w);
    fputc('\n', stdout);
    return EXIT_OK;
}

/* The header lines of `mpickpt inspect PREFIX` (text). */
static void print_summary(const char *prefix, const ckpt_header *h, size_t n, size_t all_pieces,
                          uint64_t all_bytes)
{
    printf("checkpoint    ");
    cli_text_name(stdout, prefix);
    printf("\nformat        %" PRIu32 " (%s)\n", h->format_version, h->producer ? h->producer : "");
    printf("written at    ");
    struct tm tm;
    char when[64];
    /* Range check first: converting a NaN or huge double to time_t is undefined. */
    time_t secs = isfinite(h->timestamp) && fabs(h->timestamp) < 1e15 ? (time_t)h->timestamp : 0;
    if (secs && gmtime_r(&secs, &tm) &&
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm) > 0)
        printf("%s (%.6f)\n", when, h->timestamp);
    else
        printf("%.17g\n", h->timestamp);
    printf("world size    %" PRId32 " (%s files, %s-endian data)\n", h->world_size,
           ckpt_layout_name(h->layout), h->little_endian ? "little" : "big");
    printf("save counter  %" PRId64 "\n", h->save_counter);
    printf("epoch         %" PRId64 "\n", h->epoch);
    printf("step          %" PRId64 "\n", h->step);
    printf("tensors       %zu (%zu pieces, %" PRIu64 " bytes)\n", n, all_pieces, all_bytes);
}

/* Header lines, then one table row per tensor. Names wider than the cap overflow their row
 * rather than widening the whole table. */
static int inspect_text(const cli_command *cmd, const ckpt_reader *r, const char *prefix)
{
    enum { NAME_CAP = 60 };
    const ckpt_header *h = ckpt_reader_header(r);
    size_t n = ckpt_reader_num_tensors(r);
    size_t all_pieces = 0;
    uint64_t all_bytes = 0;
    int name_w = 4;
    int shape_w = 5;
    char shape[CLI_DIMS_BUF];
    /* two passes over the tensors: the totals and the columns' widths, then the rows */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            print_summary(prefix, h, n, all_pieces, all_bytes);
            if (n == 0)
                return EXIT_OK;
            printf("\n%-*s  %-8s  %-*s  %-11s  %6s  %s\n", name_w, "NAME", "DTYPE", shape_w,
                   "SHAPE", "KIND", "PIECES", "BYTES");
        }
        for (size_t i = 0; i < n; i++) {
            ckpt_tensor_info t;
            size_t pieces;
            uint64_t bytes;
            int rc = cli_tensor_row(r, i, &t, &pieces, &bytes);
            if (rc != CKPT_OK)
                return cli_lib_error(cmd, rc);
            cli_format_dims(shape, sizeof shape, t.shape.ndims, t.shape.dims);
            if (pass == 0) {
                all_pieces += pieces;
                all_bytes += bytes;
                int tw = cli_text_width(t.name);
                name_w = tw > name_w ? (tw < NAME_CAP ? tw : NAME_CAP) : name_w;
                shape_w = (int)strlen(shape) > shape_w ? (int)strlen(shape) : shape_w;
                continue;
            }
            cli_text_name(stdout, t.name);
            int pad = name_w - cli_text_width(t.name);
            printf("%*s  %-8s  %-*s  %-11s  %6zu  %" PRIu64 "\n", pad > 0 ? pad : 0, "",
                   ckpt_dtype_name(t.dtype), shape_w, shape, ckpt_kind_name(t.kind), pieces,
                   bytes);
        }
    }
    return EXIT_OK;
}

typedef struct inspect_state {
    const cli_command *cmd;
    size_t bad; /* pieces reported bad */
} inspect_state;

/* ckpt_verify_cb of ckpt_reader_check(): one stderr line per bad piece. */
static int inspect_report(const char *tensor, size_t piece, const char *file, int code,
                          const char *message, void *payload)
{
    inspect_state *st = payload;
    st->bad++;
    fprintf(stderr, "mpickpt: %s: tensor \"", st->cmd->name);
    cli_text_name(stderr, tensor);
    fprintf(stderr, "\" piece %zu (%s): %s\n", piece, file ? file : "?",
            message && message[0] ? message : ckpt_strerror(code));
    return 0;
}

static int cmd_inspect(const cli_command *cmd, int argc, char **argv)
{
    int json = 0, nops = 0;
    const cli_option opts[] = {{"--json", &json, NULL}};
    const cli_spec spec = {opts, 1, 1, 1, "missing PREFIX", "expected one PREFIX", 0};
    int rc = cli_parse(cmd, &spec, argc, argv, &nops);
    if (rc != CLI_GO)
        return rc;

    /* Show the index even when a data file is damaged (that is when one wants to look), then
     * report the damage and exit 1. */
    ckpt_reader *r = NULL;
    if ((rc = cli_open(cmd, argv[0], &r, 1)) != 0)
        return rc;
    rc = json ? inspect_json(cmd, r) : inspect_text(cmd, r, argv[0]);
    ckpt_reader_free(r);
    r = NULL;
    if (rc == EXIT_OK && (rc = cli_open(cmd, argv[0], &r, 0)) == 0) {
        /* Metadata only (no values read): each piece's dataset is found and stored the way the
         * format writes it, e.g. not in external storage that points outside the checkpoint. */
        inspect_state st = {cmd, 0};
        int crc = ckpt_reader_check(r, inspect_report, &st);
        if (crc != CKPT_OK)
            rc = st.bad ? EXIT_BAD : cli_lib_error(cmd, crc);
        ckpt_reader_free(r);
    }
    return rc;
}

const cli_command cli_cmd_inspect = {
    "inspect", "[--json] PREFIX", "show a checkpoint's header, tensors and pieces",
    "  --json   print one JSON document: the header, then every tensor with its pieces\n"
    "           (slice, writing rank, data file, HDF5 dataset, bytes, CRC-32C, and for a\n"
    "           packed piece its byte offset in the dataset)\n",
    cmd_inspect};
