/*
 * The C side of the Fortran module `mpickpt` (mpi/fortran/mpickpt.f90, docs/fortran.md): plain C
 * functions that the module calls through `bind(C)` interfaces. They take what Fortran can pass
 * portably (a Fortran MPI handle as MPI_Fint, NUL-terminated strings, int64 arrays, C pointers)
 * and translate it to the C API:
 *   - the communicator: MPI_Comm_f2c;
 *   - array layout: a Fortran array a(n1, ..., nR) (column-major) is the C array [nR]...[n1]
 *     (row-major) at the same address, so shapes are reversed and 1-based starts become 0-based;
 *   - contiguity: the module passes the address of a's first element and, for every dimension of
 *     extent > 1, of the element one step along it; a registration keeps a pointer to the whole
 *     array, so anything but a contiguous array (a strided section) is refused here with a message
 *     in Fortran terms (the C check would name C dimensions).
 * Every function returns a ckpt_status and leaves the detail for ckpt__f_error_message(): the C
 * library's ckpt_error_last(), or an error found here (f_error). Collective where the C function it
 * calls is. The symbols are hidden: only the module's procedures are public. Public C API only (the
 * library's internal functions are not exported, docs/building.md).
 */
#include "mpickpt.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The last error found here, on this thread. Recording one clears the C library's
 * (ckpt_error_clear), so that ckpt__f_error_message() shows the C library's error when it has one
 * (a C call failed since) and this one otherwise: the last error either way. */
static _Thread_local char f_message[2048];

/* Records an error of the Fortran layer; returns `code`. */
static int f_error(int code, const char *fmt, ...) CKPT_PRINTF(2, 3);
static int f_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f_message, sizeof f_message, fmt, ap); /* the arguments may be the C library's */
    va_end(ap);
    ckpt_error_clear(); /* kept: the Fortran layer's message replaces the C one (f_message) */
    return code;
}

/* Prefixes the C library's current error (or the text of `code`) with `fmt`, as an error of the
 * Fortran layer; returns `code`. */
static int f_error_wrap(int code, const char *fmt, ...) CKPT_PRINTF(2, 3);
static int f_error_wrap(int code, const char *fmt, ...)
{
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    const ckpt_error *e = ckpt_error_last();
    return f_error(code, "%s: %s", prefix, e && e->message ? e->message : ckpt_strerror(code));
}

/* Registration kinds, the module's KIND_* parameters: ckpt_saver_add (the whole array, or with
 * global_shape and start a block of a global array), ckpt_saver_add_replicated (the same value on
 * every rank, or with per_rank each rank's own). */
enum { F_ADD = 0, F_REPLICATED = 1, F_PER_RANK = 2 };

int ckpt__f_saver_create(ckpt_saver **out, MPI_Fint fcomm, int async);
int ckpt__f_saver_add(ckpt_saver *s, const char *name, int dtype, int kind, int ndims,
                      const int64_t *fshape, int64_t esize, const void *first,
                      const void *const *steps, int has_global, const int64_t *fglobal,
                      int has_start, const int64_t *fstart);
int ckpt__f_manager_create(ckpt_manager **out, ckpt_saver *s, const char *dir, int max_to_keep,
                           const char *name, int has_name, int strict);
int ckpt__f_manager_save(ckpt_manager *m, int64_t epoch, int64_t step, int end_of_epoch, int force,
                         char *out, int64_t out_size);
int ckpt__f_manager_restore(ckpt_manager *m, int *restored, int64_t *epoch, int64_t *step,
                            char *prefix, int64_t prefix_size);
int ckpt__f_manager_latest(const ckpt_manager *m, char *out, int64_t out_size);
int64_t ckpt__f_error_message(char *buf, int64_t size);
int64_t ckpt__f_strerror(int code, char *buf, int64_t size);
int ckpt__f_error_reason(void);
int ckpt__f_error_errno(void);
int ckpt__f_error_set(int code, const char *msg);

int ckpt__f_saver_create(ckpt_saver **out, MPI_Fint fcomm, int async)
{
    *out = NULL;
    int init = 0;
    MPI_Initialized(&init);
    if (!init)
        return f_error(CKPT_EMPI, "ckpt_saver_create: MPI is not initialized (call "
                                  "MPI_Init first)");
    ckpt_saver_options opts = CKPT_SAVER_OPTIONS_INIT;
    opts.async = async != 0;
    return ckpt_saver_create(out, MPI_Comm_f2c(fcomm), &opts);
}

/* Copies `s` into the Fortran buffer `buf` of `size` bytes, padded with blanks; returns the
 * length of `s` (the caller allocates that much and calls again when it was cut). */
static int64_t to_fortran(char *buf, int64_t size, const char *s)
{
    size_t n = strlen(s);
    if (buf && size > 0) {
        size_t m = n < (size_t)size ? n : (size_t)size;
        memcpy(buf, s, m);
        memset(buf + m, ' ', (size_t)size - m);
    }
    return (int64_t)n;
}

int ckpt__f_saver_add(ckpt_saver *s, const char *name, int dtype, int kind, int ndims,
                      const int64_t *fshape, int64_t esize, const void *first,
                      const void *const *steps, int has_global, const int64_t *fglobal,
                      int has_start, const int64_t *fstart)
{
    if (!s)
        return f_error(CKPT_EINVAL, "tensor '%s': the saver was not created (or was freed)", name);
    if (ndims < 1 || ndims > CKPT_MAX_DIMS)
        return f_error(CKPT_EINVAL, "tensor '%s': rank %d is out of range", name, ndims);
    /* Contiguity, from the addresses of a's elements: the step along dimension d (Fortran order)
     * must be the product of the extents before it. */
    int64_t stride = esize;
    for (int d = 0; d < ndims; d++) {
        if (fshape[d] > 1 && first) {
            intptr_t step = (intptr_t)steps[d] - (intptr_t)first;
            if (step != (intptr_t)stride)
                return f_error(CKPT_EINVAL,
                               "tensor '%s': the array is not contiguous in dimension %d (a "
                               "strided section?): register a contiguous array with the "
                               "TARGET attribute",
                               name, d + 1);
        }
        if (__builtin_mul_overflow(stride, fshape[d] > 0 ? fshape[d] : 1, &stride))
            return f_error(CKPT_EINVAL, "tensor '%s': the array is too large", name);
    }
    ckpt_shape local;
    int64_t dims[CKPT_MAX_DIMS];
    for (int d = 0; d < ndims; d++)
        dims[d] = fshape[ndims - 1 - d];
    int rc = ckpt_shape_init(&local, ndims, dims);
    if (rc != CKPT_OK)
        return f_error_wrap(rc, "tensor '%s'", name);
    void *data = (void *)(uintptr_t)first; /* the restore writes into the caller's array */

    switch (kind) {
    case F_ADD:
        if (!has_global && !has_start)
            return ckpt_saver_add_full(s, name, (ckpt_dtype)dtype, &local, data);
        break; /* a block of a global array */
    case F_REPLICATED:
        return ckpt_saver_add_replicated(s, name, (ckpt_dtype)dtype, &local, data,
                                         CKPT_REPLICA_PRIMARY);
    case F_PER_RANK:
        return ckpt_saver_add_replicated(s, name, (ckpt_dtype)dtype, &local, data,
                                         CKPT_REPLICA_PER_COMPONENT);
    default:
        return f_error(CKPT_EINVAL, "tensor '%s': unknown registration kind %d", name, kind);
    }
    /* A block of a global array: both global_shape and start, each with one entry per dimension
     * of the array, the block inside the global array. Checked here so that the message speaks
     * of Fortran dimensions and 1-based indices. */
    if (!has_global || !has_start)
        return f_error(CKPT_EINVAL,
                       "tensor '%s': give both global_shape and start (a block of a global "
                       "array) or neither (the whole array)",
                       name);
    if (has_global != ndims || has_start != ndims)
        return f_error(CKPT_EINVAL,
                       "tensor '%s': global_shape has %d and start %d entries, the array has "
                       "rank %d",
                       name, has_global, has_start, ndims);
    int64_t cstart[CKPT_MAX_DIMS], ccount[CKPT_MAX_DIMS];
    for (int d = 0; d < ndims; d++) {
        int64_t end;
        if (fglobal[d] < 0 || fstart[d] < 1 ||
            __builtin_add_overflow(fstart[d] - 1, fshape[d], &end) || end > fglobal[d])
            return f_error(CKPT_EINVAL,
                           "tensor '%s': in dimension %d the block of extent %lld at start "
                           "%lld (1-based) does not fit in global_shape %lld",
                           name, d + 1, (long long)fshape[d], (long long)fstart[d],
                           (long long)fglobal[d]);
        int c = ndims - 1 - d;
        dims[c] = fglobal[d];
        cstart[c] = fstart[d] - 1;
        ccount[c] = fshape[d];
    }
    ckpt_shape global;
    ckpt_slice slice;
    if ((rc = ckpt_shape_init(&global, ndims, dims)) != CKPT_OK ||
        (rc = ckpt_slice_init(&slice, ndims, cstart, ccount)) != CKPT_OK)
        return f_error_wrap(rc, "tensor '%s'", name);
    return ckpt_saver_add_slice(s, name, (ckpt_dtype)dtype, &global, &slice, data);
}

int ckpt__f_manager_create(ckpt_manager **out, ckpt_saver *s, const char *dir, int max_to_keep,
                           const char *name, int has_name, int strict)
{
    *out = NULL;
    if (!s)
        return f_error(CKPT_EINVAL, "ckpt_manager_create: the saver was not created");
    ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
    /* strict=.true.: every checkpoint entry nobody registered and every registered one the
     * checkpoint lacks fail the restore (options version 4); by default the module's restores
     * stay as before strict restores (issue 30): version 3 */
    opts.strict_restore = strict != 0;
    if (!strict)
        opts.version = 3;
    opts.max_to_keep = max_to_keep;
    opts.name = has_name ? name : NULL;
    return ckpt_manager_create(out, s, dir, &opts);
}

int ckpt__f_manager_save(ckpt_manager *m, int64_t epoch, int64_t step, int end_of_epoch, int force,
                         char *out, int64_t out_size)
{
    if (!m)
        return f_error(CKPT_EINVAL, "ckpt_manager_save: the manager was not created");
    ckpt_manager_save_info info = {epoch, step, end_of_epoch != 0, force != 0};
    char name[4096];
    int rc = ckpt_manager_save(m, &info, name, sizeof name);
    to_fortran(out, out_size, rc == CKPT_OK ? name : "");
    return rc;
}

int ckpt__f_manager_restore(ckpt_manager *m, int *restored, int64_t *epoch, int64_t *step,
                            char *prefix, int64_t prefix_size)
{
    *restored = 0;
    *epoch = *step = 0;
    to_fortran(prefix, prefix_size, "");
    if (!m)
        return f_error(CKPT_EINVAL,
                       "ckpt_manager_restore_or_initialize: the manager was not created");
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_latest(&r, m);
    if (rc == CKPT_OK && r.restored) {
        *restored = 1;
        *epoch = r.epoch;
        *step = r.step;
        to_fortran(prefix, prefix_size, r.prefix);
    }
    return rc;
}

int ckpt__f_manager_latest(const ckpt_manager *m, char *out, int64_t out_size)
{
    to_fortran(out, out_size, "");
    if (!m)
        return f_error(CKPT_EINVAL, "ckpt_manager_latest: the manager was not created");
    char path[4096];
    int rc = ckpt_manager_latest(m, path, sizeof path);
    if (rc == CKPT_OK)
        to_fortran(out, out_size, path);
    return rc;
}

int64_t ckpt__f_error_message(char *buf, int64_t size)
{
    const ckpt_error *e = ckpt_error_last();
    return to_fortran(buf, size, e && e->message ? e->message : f_message);
}

/* The C library's reason and errno of the last error; an error of the Fortran layer (f_error
 * cleared the C one) has neither. */
int ckpt__f_error_reason(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e ? e->reason : CKPT_REASON_NONE;
}

int ckpt__f_error_errno(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e ? e->sys_errno : 0;
}

int64_t ckpt__f_strerror(int code, char *buf, int64_t size)
{
    return to_fortran(buf, size, ckpt_strerror(code));
}

/* An error found on the Fortran side, for ckpt_error_message(). */
int ckpt__f_error_set(int code, const char *msg)
{
    return f_error(code, "%s", msg);
}
