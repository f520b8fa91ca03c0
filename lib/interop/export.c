/* ckpt_export(): the formats' names, the dispatch to each format's writer (lib/interop/interop.h),
 * and what the writers share: output files written whole or not at all, reading a tensor whole,
 * reporting it. docs/interop.md describes the formats. */
#include "interop.h"

#include "fsutil.h"

#include "mpickpt/dtype.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const format_names[] = {"invalid", "tf", "hdf5", "safetensors"};

const char *ckpt_export_format_name(ckpt_export_format format)
{
    if ((int)format <= 0 || (size_t)format >= sizeof format_names / sizeof format_names[0])
        return format_names[0];
    return format_names[format];
}

int ckpt_export_format_from_name(ckpt_export_format *out, const char *name)
{
    *out = CKPT_EXPORT_INVALID;
    for (size_t i = 1; name && i < sizeof format_names / sizeof format_names[0]; i++)
        if (strcmp(name, format_names[i]) == 0) {
            *out = (ckpt_export_format)i;
            return CKPT_OK;
        }
    return ckpt__error(CKPT_EINVAL, "unknown export format '%s' (tf, hdf5 or safetensors)",
                       name ? name : "(null)");
}

/* ---- output files ---- */

int ckpt__outfile_open(ckpt__outfile *o, const char *path, int overwrite)
{
    memset(o, 0, sizeof *o);
    o->dirfd = -1;
    o->fd = -1;
    if (!path || !*path)
        return ckpt__error(CKPT_EINVAL, "an empty output path to export to");
    int rc = ckpt__split_path(o->dir, sizeof o->dir, o->base, sizeof o->base, path);
    if (rc != CKPT_OK)
        return rc;
    if (!ckpt__safe_filename(o->base))
        return ckpt__error(CKPT_EINVAL, "export to '%s': it does not name a file", path);
    snprintf(o->shown, sizeof o->shown, "%s", path);
    if ((rc = ckpt__dir_open(&o->dirfd, o->dir)) != CKPT_OK)
        return rc;
    struct stat st;
    if (fstatat(o->dirfd, o->base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!overwrite)
            rc = ckpt__error(CKPT_EEXISTS,
                             "%s exists (replace it with --force, in Python overwrite=True)",
                             path);
        else if (!S_ISREG(st.st_mode))
            rc = ckpt__error(CKPT_ECORRUPT, "refusing to replace %s: it is %s", path,
                             ckpt__file_kind(st.st_mode));
        if (rc != CKPT_OK)
            goto fail;
    } else if (errno != ENOENT) {
        rc = ckpt__errno(errno, "stat", path);
        goto fail;
    }
    if ((rc = ckpt__temp_name(o->tmp, sizeof o->tmp, o->base)) != CKPT_OK)
        goto fail;
    if ((rc = ckpt__file_create(&o->fd, o->dirfd, o->tmp, O_RDWR, o->dir)) != CKPT_OK)
        goto fail;
    return CKPT_OK;
fail:
    ckpt__close(o->dirfd);
    o->dirfd = -1;
    o->tmp[0] = '\0';
    return rc;
}

int ckpt__outfile_commit(ckpt__outfile *o)
{
    if (fsync(o->fd) != 0)
        return ckpt__errno(errno, "fsync", o->shown);
    int fd = o->fd;
    o->fd = -1;
    if (close(fd) != 0)
        return ckpt__errno(errno, "close", o->shown);
    /* renameat replaces the entry (a link planted meanwhile included) without following it */
    if (renameat(o->dirfd, o->tmp, o->dirfd, o->base) != 0)
        return ckpt__errno(errno, "rename to", o->shown);
    o->renamed = 1;
    return ckpt__fsync_fd(o->dirfd, o->dir);
}

void ckpt__outfile_discard(ckpt__outfile *o)
{
    if (o->dirfd >= 0 && o->tmp[0])
        unlinkat(o->dirfd, o->renamed ? o->base : o->tmp, 0);
    o->tmp[0] = '\0';
    ckpt__outfile_close(o);
}

void ckpt__outfile_close(ckpt__outfile *o)
{
    ckpt__close(o->fd);
    o->fd = -1;
    ckpt__close(o->dirfd);
    o->dirfd = -1;
}

/* ---- what the writers share ---- */

int ckpt__export_tensor(ckpt_reader *r, const ckpt__export_sel *sel, size_t k,
                        ckpt_tensor_info *info)
{
    int rc = ckpt_reader_tensor(info, r, sel->index[k]);
    if (rc == CKPT_OK)
        info->name = sel->name[k];
    return rc;
}

int ckpt__export_read(ckpt_reader *r, const ckpt__export_sel *sel, size_t k,
                      ckpt_tensor_info *info, void **data, size_t *bytes)
{
    *data = NULL;
    *bytes = 0;
    int rc = ckpt_reader_tensor(info, r, sel->index[k]);
    if (rc != CKPT_OK)
        return rc;
    int64_t n = 0;
    if ((rc = ckpt_shape_num_elements(&n, &info->shape)) != CKPT_OK)
        return rc;
    size_t esize = ckpt_dtype_size(info->dtype);
    if (n < 0 || esize == 0 || (uint64_t)n > SIZE_MAX / esize)
        return ckpt__error(CKPT_ECORRUPT, "tensor '%s': %lld elements do not fit in memory",
                           info->name, (long long)n);
    size_t size = (size_t)n * esize;
    void *buf = malloc(size ? size : 1);
    if (!buf)
        return ckpt__error(CKPT_ENOMEM, "tensor '%s': cannot allocate %zu bytes", info->name,
                           size);
    if ((rc = ckpt_reader_read(r, info->name, info->dtype, NULL, buf, size)) != CKPT_OK) {
        free(buf);
        return rc;
    }
    info->name = sel->name[k];
    *data = buf;
    *bytes = size;
    return CKPT_OK;
}

/* ---- the selection: --only, --strip-prefix, aliases ---- */

static void sel_free(ckpt__export_sel *sel)
{
    for (size_t k = 0; sel->name && k < sel->n; k++)
        free(sel->name[k]);
    free(sel->name);
    free(sel->index);
    free(sel->aliases_json);
    memset(sel, 0, sizeof *sel);
}

/* 1 when `name` is selected by the prefixes (all names without any; never an internal one with). */
static int selected(const char *name, const char *const *only, size_t num_only)
{
    if (num_only == 0)
        return 1;
    if (ckpt__is_internal_name(name))
        return 0;
    for (size_t i = 0; i < num_only; i++)
        if (strncmp(name, only[i], strlen(only[i])) == 0)
            return 1;
    return 0;
}

/* `name` with `strip` removed (malloc'd), or NULL after recording why. */
static char *strip_name(const char *name, const char *strip, const char *what,
                        const char *prefix)
{
    size_t sl = strip ? strlen(strip) : 0;
    if (sl && (strncmp(name, strip, sl) != 0 || name[sl] == '\0')) {
        ckpt__error(CKPT_EINVAL,
                    "export of %s: %s '%s' %s --strip-prefix '%s' (select with --only what "
                    "shares it)",
                    prefix, what, name,
                    strncmp(name, strip, sl) ? "does not start with" : "is all of", strip);
        return NULL;
    }
    char *out = strdup(name + sl);
    if (!out)
        ckpt__error(CKPT_ENOMEM, "out of memory for the export");
    return out;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The aliases of the records (rank 0's first; each name once) whose alias and target are both
 * selected and whose target is written: sel->aliases_json. */
static int sel_aliases(ckpt__export_sel *sel, ckpt_reader *r, const char *prefix,
                       const ckpt_export_options *o)
{
    ckpt__records recs;
    int rc = ckpt__records_load(&recs, r, prefix);
    if (rc != CKPT_OK)
        return rc; /* names the checkpoint and the record */
    char **sorted = NULL, *json = NULL;
    size_t json_len = 0;
    FILE *mem = NULL;
    size_t total = 0;
    for (size_t k = 0; k < recs.n; k++)
        total += recs.r[k].aliases ? recs.r[k].aliases->n : 0;
    if (total == 0)
        goto out;
    /* the written names, sorted, to find the targets */
    sorted = malloc(sel->n * sizeof *sorted + 1);
    mem = open_memstream(&json, &json_len);
    if (!sorted || !mem) {
        rc = ckpt__error(CKPT_ENOMEM, "export of %s: out of memory", prefix);
        goto out;
    }
    memcpy(sorted, sel->name, sel->n * sizeof *sorted);
    qsort(sorted, sel->n, sizeof *sorted, by_name);
    ckpt__json_writer w;
    ckpt__json_init(&w, mem);
    ckpt__json_object_begin(&w);
    for (size_t k = 0; k < recs.n && rc == CKPT_OK; k++) {
        const ckpt__jv *al = recs.r[k].aliases;
        for (size_t i = 0; al && i < al->n && rc == CKPT_OK; i++) {
            const char *alias = al->keys[i];
            const char *of = ckpt__jv_get(&al->items[i], "of")->text;
            int dup = 0; /* a replicated alias is in every rank's record */
            for (size_t j = 0; j < k && !dup; j++)
                dup = ckpt__jv_get(recs.r[j].aliases, alias) != NULL;
            if (dup || strlen(alias) != al->key_lens[i] ||
                !selected(alias, o->only, o->num_only) || !selected(of, o->only, o->num_only))
                continue;
            char *a = strip_name(alias, o->strip_prefix, "alias", prefix);
            char *t = a ? strip_name(of, o->strip_prefix, "the target of an alias", prefix) : NULL;
            if (!a || !t) {
                rc = ckpt_error_last() ? ckpt_error_last()->code : CKPT_EINVAL;
            } else if (bsearch(&a, sorted, sel->n, sizeof *sorted, by_name)) {
                rc = ckpt__error(CKPT_ECORRUPT,
                                 "export of %s: '%s' is both a tensor and an alias (of '%s') in "
                                 "its record of plain values",
                                 prefix, alias, of);
            } else if (bsearch(&t, sorted, sel->n, sizeof *sorted, by_name)) {
                ckpt__json_key(&w, a);
                ckpt__json_string(&w, t);
                sel->num_aliases++;
            }
            free(a);
            free(t);
        }
    }
    ckpt__json_object_end(&w);
out:
    if (mem && (fclose(mem) != 0) && rc == CKPT_OK)
        rc = ckpt__error(CKPT_ENOMEM, "out of memory for the export");
    if (rc == CKPT_OK && sel->num_aliases) {
        sel->aliases_json = json;
        json = NULL;
    }
    free(json);
    free(sorted);
    ckpt__records_free(&recs);
    return rc;
}

static int sel_build(ckpt__export_sel *sel, ckpt_reader *r, const char *prefix,
                     const ckpt_export_options *o)
{
    memset(sel, 0, sizeof *sel);
    for (size_t i = 0; i < o->num_only; i++)
        if (!o->only[i] || !o->only[i][0])
            return ckpt__error(CKPT_EINVAL, "export of %s: an empty --only prefix (every name "
                                            "starts with it; leave --only out to export "
                                            "everything)",
                               prefix);
    size_t n = ckpt_reader_num_tensors(r);
    sel->index = malloc((n ? n : 1) * sizeof *sel->index);
    sel->name = calloc(n ? n : 1, sizeof *sel->name);
    if (!sel->index || !sel->name) {
        sel_free(sel);
        return ckpt__error(CKPT_ENOMEM, "out of memory for the export");
    }
    int rc = CKPT_OK;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        ckpt_tensor_info t;
        if ((rc = ckpt_reader_tensor(&t, r, i)) != CKPT_OK)
            break;
        if (!selected(t.name, o->only, o->num_only))
            continue;
        char *name = strip_name(t.name, o->strip_prefix, "tensor", prefix);
        if (!name) {
            rc = ckpt_error_last()->code;
            break;
        }
        sel->index[sel->n] = i;
        sel->name[sel->n++] = name;
    }
    if (rc == CKPT_OK && sel->n == 0 && o->num_only > 0) {
        char list[1024] = "";
        size_t used = 0;
        for (size_t i = 0; i < o->num_only && used < sizeof list; i++) {
            int w = snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", o->only[i]);
            used += w > 0 ? (size_t)w : 0;
        }
        rc = ckpt__error(CKPT_ENOTFOUND, "export of %s: no tensor's name starts with %s%s", prefix,
                         o->num_only > 1 ? "any of " : "", list);
        ckpt__error_set_reason(rc, CKPT_REASON_NO_TENSOR);
    }
    if (rc == CKPT_OK) {
        rc = sel_aliases(sel, r, prefix, o);
        /* An export of everything read no record before aliases existed: a record it cannot
         * read (damaged, a newer version) costs the aliases' metadata there, not the export. */
        if (rc != CKPT_OK && rc != CKPT_ENOMEM && o->num_only == 0 && !o->strip_prefix) {
            ckpt__log(CKPT_LOG_WARN, "%s; exported without the aliases' metadata",
                      ckpt_error_last()->message);
            rc = CKPT_OK;
        }
    }
    if (rc != CKPT_OK)
        sel_free(sel);
    return rc;
}

void ckpt__export_report(const ckpt_export_options *opts, ckpt_interop_totals *totals,
                         const ckpt_tensor_info *info, uint64_t bytes)
{
    totals->tensors++;
    totals->bytes += bytes;
    if (!opts->progress)
        return;
    ckpt_interop_item item;
    memset(&item, 0, sizeof item);
    item.name = info->name;
    item.dtype = ckpt_dtype_name(info->dtype);
    item.shape = info->shape;
    item.bytes = bytes;
    opts->progress(&item, opts->payload);
}

int ckpt_export(const char *prefix, const char *out, const ckpt_export_options *opts,
                ckpt_interop_totals *totals)
{
    ckpt_interop_totals local;
    if (!totals)
        totals = &local;
    memset(totals, 0, sizeof *totals);
    if (!prefix || !out || !opts)
        return ckpt__error(CKPT_EINVAL, "ckpt_export: NULL argument");
    if (opts->version != 1 && opts->version != CKPT_EXPORT_OPTIONS_VERSION)
        return ckpt__error(CKPT_EINVAL, "ckpt_export: options version %u, expected 1 or %u",
                           opts->version, CKPT_EXPORT_OPTIONS_VERSION);
    /* a version-1 caller's struct ends before the filters */
    ckpt_export_options o;
    memset(&o, 0, sizeof o);
    if (opts->version == 1)
        memcpy(&o, opts, offsetof(ckpt_export_options, only));
    else
        o = *opts;
    if (o.num_only && !o.only)
        return ckpt__error(CKPT_EINVAL, "ckpt_export: num_only %zu with only NULL", o.num_only);
    if (o.strip_prefix && !o.strip_prefix[0])
        o.strip_prefix = NULL;
    ckpt_reader *r = NULL;
    int rc = ckpt_reader_open(&r, prefix);
    if (rc != CKPT_OK)
        return rc;
    ckpt__export_sel sel;
    if ((rc = sel_build(&sel, r, prefix, &o)) != CKPT_OK) {
        ckpt_reader_free(r);
        return rc;
    }
    switch (o.format) {
    case CKPT_EXPORT_TF:
        rc = ckpt__export_tf(r, &sel, out, &o, totals);
        break;
    case CKPT_EXPORT_HDF5:
        rc = ckpt__export_hdf5(r, &sel, prefix, out, &o, totals);
        break;
    case CKPT_EXPORT_SAFETENSORS:
        rc = ckpt__export_safetensors(r, &sel, out, &o, totals);
        break;
    default:
        rc = ckpt__error(CKPT_EINVAL, "ckpt_export: unknown format %d", (int)o.format);
        break;
    }
    sel_free(&sel);
    ckpt_reader_free(r);
    return rc;
}
