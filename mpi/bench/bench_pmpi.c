/* mpickpt-bench: counts MPI calls through the MPI profiling interface (linked into mpickpt-bench
 * only, never into the library). Each MPI_X below counts the call, by the shared object it came
 * from (libmpickpt's ckpt_mpi_agree, the rest of libmpickpt, HDF5, the benchmark itself, anything
 * else), and calls PMPI_X.
 *
 * Why it sees the library's calls: the library is linked into the executable (the static
 * mpickpt_internal, mpi/CMakeLists.txt), so its calls of MPI_X bind to the definitions below at
 * link time; libhdf5 calls MPI_X through its PLT, and the dynamic linker binds it to the first
 * definition in lookup order, the executable's, provided the executable exports it: GNU ld does
 * for a symbol that a linked shared library (libmpi.so) also defines, and mpickpt-bench is linked
 * with ENABLE_EXPORTS (-rdynamic) so that it does not depend on the link line. The library's code
 * lies between __start_mpickpt_text and __stop_mpickpt_text (mpi/bench/bench_text.ld); a call from
 * a shared libmpickpt*.so counts as the library's too. The collectives scenario checks that calls
 * from libmpickpt were counted (bench_scale.c).
 *
 * Counting is off outside a window (pmpi_begin .. pmpi_end): a wrapper then costs one relaxed
 * atomic load. Inside it, counters are atomic: an async save's writer thread counts too. */
#include "bench.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* name, kind: C collective (blocking or not, communicator and file management included), P
 * point-to-point (probes included), I independent file I/O, W completion (wait/test). */
#define PMPI_FUNCS(X)                                                                              \
    X(Allreduce, C) X(Iallreduce, C) X(Reduce, C) X(Bcast, C) X(Ibcast, C) X(Gather, C)           \
    X(Gatherv, C) X(Igatherv, C) X(Allgather, C) X(Allgatherv, C) X(Iallgatherv, C) X(Scatter, C) \
    X(Scatterv, C) X(Alltoall, C) X(Alltoallv, C) X(Ialltoallv, C) X(Alltoallw, C)                \
    X(Reduce_scatter, C) X(Reduce_scatter_block, C) X(Scan, C) X(Exscan, C) X(Barrier, C)         \
    X(Ibarrier, C) X(Comm_split, C) X(Comm_split_type, C) X(Comm_dup, C) X(Comm_create, C)        \
    X(Comm_free, C) X(File_open, C) X(File_close, C) X(File_sync, C) X(File_set_size, C)          \
    X(File_set_view, C) X(File_set_atomicity, C) X(File_preallocate, C) X(File_write_at_all, C)   \
    X(File_read_at_all, C) X(File_write_all, C) X(File_read_all, C) X(Send, P) X(Recv, P)         \
    X(Isend, P) X(Irecv, P) X(Ssend, P) X(Sendrecv, P) X(Probe, P) X(Iprobe, P) X(Mprobe, P)      \
    X(Improbe, P) X(Mrecv, P) X(Imrecv, P) X(File_write_at, I) X(File_read_at, I)                 \
    X(File_get_size, I) X(Wait, W) X(Waitall, W) X(Waitany, W) X(Test, W) X(Testall, W)

#define X_ENUM(name, kind) F_##name,
enum { PMPI_FUNCS(X_ENUM) NFUNC };
#define X_NAME(name, kind) "MPI_" #name,
static const char *const g_names[NFUNC] = { PMPI_FUNCS(X_NAME) };
#define X_KIND(name, kind) PMPI_KIND_##kind,
enum { PMPI_KIND_C = PMPI_COLL, PMPI_KIND_P = PMPI_P2P, PMPI_KIND_I = PMPI_IO,
       PMPI_KIND_W = PMPI_WAIT };
static const int g_kinds[NFUNC] = { PMPI_FUNCS(X_KIND) };

static atomic_int g_on;
static const char g_anchor = 0; /* an address inside the executable */
/* the library's code in this executable (mpi/bench/bench_text.ld); weak: NULL when not linked so */
extern const char __start_mpickpt_text[] __attribute__((weak, visibility("hidden")));
extern const char __stop_mpickpt_text[] __attribute__((weak, visibility("hidden")));
static atomic_long g_count[NFUNC][PMPI_NCALLER];

/* The caller of a wrapper, by its return address (a few dozen call sites: a table under a lock):
 * the library's code (mpickpt_text in this executable, or a libmpickpt*.so) or the object it lies
 * in, and for the library whether it is ckpt_mpi_agree (exported, so dladdr1 finds its symbol and
 * size). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const void *ra;
    int caller;
} g_seen[512];
static int g_nseen;

static int classify_uncached(const void *ra)
{
    Dl_info info, self;
    const ElfW(Sym) *sym = NULL;
    if (!ra || !dladdr1(ra, &info, (void **)&sym, RTLD_DL_SYMENT))
        return PMPI_CALLER_OTHER;
    const char *n = info.dli_fname ? info.dli_fname : "";
    const char *slash = strrchr(n, '/');
    const char *base = slash ? slash + 1 : n;
    const char *p = ra;
    int in_text = __start_mpickpt_text && p >= __start_mpickpt_text && p < __stop_mpickpt_text;
    if (in_text || !strncmp(base, "libmpickpt", 10)) {
        if (info.dli_sname && !strcmp(info.dli_sname, "ckpt_mpi_agree") && sym &&
            (const char *)ra < (const char *)info.dli_saddr + sym->st_size)
            return PMPI_CALLER_AGREE;
        return PMPI_CALLER_MPICKPT;
    }
    if (strstr(base, "hdf5"))
        return PMPI_CALLER_HDF5;
    if (dladdr(&g_anchor, &self) && self.dli_fbase == info.dli_fbase)
        return PMPI_CALLER_BENCH;
    return PMPI_CALLER_OTHER;
}

static int classify(const void *ra)
{
    pthread_mutex_lock(&g_lock);
    int i = 0;
    for (; i < g_nseen; i++)
        if (g_seen[i].ra == ra)
            break;
    int c;
    if (i < g_nseen) {
        c = g_seen[i].caller;
    } else {
        c = classify_uncached(ra);
        if (g_nseen < (int)(sizeof g_seen / sizeof g_seen[0])) {
            g_seen[g_nseen].ra = ra;
            g_seen[g_nseen].caller = c;
            g_nseen++;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return c;
}

/* Call sites (pmpi_sites(1), for --verbose): each collective call's stack, as offsets into
 * libmpickpt of its innermost frames there (addr2line -f -i -e LIB OFFSET names them). */
#define SITE_FRAMES 5
static atomic_int g_sites_on;
static struct {
    int func, nframes;
    uintptr_t off[SITE_FRAMES];
    long n;
} g_site[256];
static int g_nsite;
static char g_lib_path[512];

static void count_site(int f)
{
    void *bt[24];
    int n = backtrace(bt, 24);
    uintptr_t off[SITE_FRAMES];
    int k = 0;
    for (int i = 0; i < n && k < SITE_FRAMES; i++) {
        Dl_info info;
        if (!dladdr(bt[i], &info) || !info.dli_fname)
            continue;
        const char *slash = strrchr(info.dli_fname, '/');
        if (strncmp(slash ? slash + 1 : info.dli_fname, "libmpickpt", 10) != 0)
            continue;
        if (!g_lib_path[0])
            snprintf(g_lib_path, sizeof g_lib_path, "%s", info.dli_fname);
        /* a return address: the call is the instruction before it */
        off[k++] = (uintptr_t)bt[i] - (uintptr_t)info.dli_fbase - 1;
    }
    pthread_mutex_lock(&g_lock);
    int s = 0;
    for (; s < g_nsite; s++)
        if (g_site[s].func == f && g_site[s].nframes == k &&
            !memcmp(g_site[s].off, off, (size_t)k * sizeof *off))
            break;
    if (s == g_nsite && g_nsite < (int)(sizeof g_site / sizeof g_site[0])) {
        g_site[s].func = f;
        g_site[s].nframes = k;
        memcpy(g_site[s].off, off, (size_t)k * sizeof *off);
        g_site[s].n = 0;
        g_nsite++;
    }
    if (s < g_nsite)
        g_site[s].n++;
    pthread_mutex_unlock(&g_lock);
}

static void count(int f, const void *ra)
{
    if (!atomic_load_explicit(&g_on, memory_order_relaxed))
        return;
    atomic_fetch_add_explicit(&g_count[f][classify(ra)], 1, memory_order_relaxed);
    if (atomic_load_explicit(&g_sites_on, memory_order_relaxed) && g_kinds[f] == PMPI_COLL)
        count_site(f);
}

void pmpi_sites(int on)
{
    atomic_store(&g_sites_on, on);
}

void pmpi_sites_print(void)
{
    pthread_mutex_lock(&g_lock);
    printf("    call sites (this rank; offsets in %s, innermost first):\n",
           g_lib_path[0] ? g_lib_path : "libmpickpt");
    for (int s = 0; s < g_nsite; s++) {
        printf("    %3ld %-16s", g_site[s].n, g_names[g_site[s].func]);
        for (int k = 0; k < g_site[s].nframes; k++)
            printf(" %#lx", (unsigned long)g_site[s].off[k]);
        printf("\n");
    }
    pthread_mutex_unlock(&g_lock);
    fflush(stdout);
}

int pmpi_nfunc(void)
{
    return NFUNC;
}

const char *pmpi_func_name(int f)
{
    return g_names[f];
}

int pmpi_func_kind(int f)
{
    return g_kinds[f];
}

void pmpi_begin(void)
{
    pthread_mutex_lock(&g_lock);
    g_nsite = 0;
    pthread_mutex_unlock(&g_lock);
    for (int f = 0; f < NFUNC; f++)
        for (int c = 0; c < PMPI_NCALLER; c++)
            atomic_store(&g_count[f][c], 0);
    atomic_store(&g_on, 1);
}

void pmpi_end(long *out)
{
    atomic_store(&g_on, 0);
    for (int f = 0; f < NFUNC; f++)
        for (int c = 0; c < PMPI_NCALLER; c++)
            out[f * PMPI_NCALLER + c] = atomic_load(&g_count[f][c]);
}

/* ---- the wrappers: MPI_X(params) { count; return PMPI_X(args); } ---------------------------- */

#define WRAP(name, params, args)                                                                   \
    int MPI_##name params                                                                          \
    {                                                                                              \
        count(F_##name, __builtin_return_address(0));                                              \
        return PMPI_##name args;                                                                   \
    }

typedef MPI_Datatype DT;

WRAP(Allreduce, (const void *s, void *r, int n, DT t, MPI_Op op, MPI_Comm c), (s, r, n, t, op, c))
WRAP(Iallreduce, (const void *s, void *r, int n, DT t, MPI_Op op, MPI_Comm c, MPI_Request *q),
     (s, r, n, t, op, c, q))
WRAP(Reduce, (const void *s, void *r, int n, DT t, MPI_Op op, int root, MPI_Comm c),
     (s, r, n, t, op, root, c))
WRAP(Bcast, (void *b, int n, DT t, int root, MPI_Comm c), (b, n, t, root, c))
WRAP(Ibcast, (void *b, int n, DT t, int root, MPI_Comm c, MPI_Request *q), (b, n, t, root, c, q))
WRAP(Gather, (const void *s, int sn, DT st, void *r, int rn, DT rt, int root, MPI_Comm c),
     (s, sn, st, r, rn, rt, root, c))
WRAP(Gatherv,
     (const void *s, int sn, DT st, void *r, const int rn[], const int d[], DT rt, int root,
      MPI_Comm c),
     (s, sn, st, r, rn, d, rt, root, c))
WRAP(Igatherv,
     (const void *s, int sn, DT st, void *r, const int rn[], const int d[], DT rt, int root,
      MPI_Comm c, MPI_Request *q),
     (s, sn, st, r, rn, d, rt, root, c, q))
WRAP(Allgather, (const void *s, int sn, DT st, void *r, int rn, DT rt, MPI_Comm c),
     (s, sn, st, r, rn, rt, c))
WRAP(Allgatherv,
     (const void *s, int sn, DT st, void *r, const int rn[], const int d[], DT rt, MPI_Comm c),
     (s, sn, st, r, rn, d, rt, c))
WRAP(Iallgatherv,
     (const void *s, int sn, DT st, void *r, const int rn[], const int d[], DT rt, MPI_Comm c,
      MPI_Request *q),
     (s, sn, st, r, rn, d, rt, c, q))
WRAP(Scatter, (const void *s, int sn, DT st, void *r, int rn, DT rt, int root, MPI_Comm c),
     (s, sn, st, r, rn, rt, root, c))
WRAP(Scatterv,
     (const void *s, const int sn[], const int d[], DT st, void *r, int rn, DT rt, int root,
      MPI_Comm c),
     (s, sn, d, st, r, rn, rt, root, c))
WRAP(Alltoall, (const void *s, int sn, DT st, void *r, int rn, DT rt, MPI_Comm c),
     (s, sn, st, r, rn, rt, c))
WRAP(Alltoallv,
     (const void *s, const int sn[], const int sd[], DT st, void *r, const int rn[],
      const int rd[], DT rt, MPI_Comm c),
     (s, sn, sd, st, r, rn, rd, rt, c))
WRAP(Ialltoallv,
     (const void *s, const int sn[], const int sd[], DT st, void *r, const int rn[],
      const int rd[], DT rt, MPI_Comm c, MPI_Request *q),
     (s, sn, sd, st, r, rn, rd, rt, c, q))
WRAP(Alltoallw,
     (const void *s, const int sn[], const int sd[], const DT st[], void *r, const int rn[],
      const int rd[], const DT rt[], MPI_Comm c),
     (s, sn, sd, st, r, rn, rd, rt, c))
WRAP(Reduce_scatter, (const void *s, void *r, const int rn[], DT t, MPI_Op op, MPI_Comm c),
     (s, r, rn, t, op, c))
WRAP(Reduce_scatter_block, (const void *s, void *r, int rn, DT t, MPI_Op op, MPI_Comm c),
     (s, r, rn, t, op, c))
WRAP(Scan, (const void *s, void *r, int n, DT t, MPI_Op op, MPI_Comm c), (s, r, n, t, op, c))
WRAP(Exscan, (const void *s, void *r, int n, DT t, MPI_Op op, MPI_Comm c), (s, r, n, t, op, c))
WRAP(Barrier, (MPI_Comm c), (c))
WRAP(Ibarrier, (MPI_Comm c, MPI_Request *q), (c, q))
WRAP(Comm_split, (MPI_Comm c, int color, int key, MPI_Comm *nc), (c, color, key, nc))
WRAP(Comm_split_type, (MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm *nc),
     (c, type, key, info, nc))
WRAP(Comm_dup, (MPI_Comm c, MPI_Comm *nc), (c, nc))
WRAP(Comm_create, (MPI_Comm c, MPI_Group g, MPI_Comm *nc), (c, g, nc))
WRAP(Comm_free, (MPI_Comm * c), (c))
WRAP(File_open, (MPI_Comm c, const char *name, int mode, MPI_Info info, MPI_File *fh),
     (c, name, mode, info, fh))
WRAP(File_close, (MPI_File * fh), (fh))
WRAP(File_sync, (MPI_File fh), (fh))
WRAP(File_set_size, (MPI_File fh, MPI_Offset n), (fh, n))
WRAP(File_set_view,
     (MPI_File fh, MPI_Offset disp, DT et, DT ft, const char *rep, MPI_Info info),
     (fh, disp, et, ft, rep, info))
WRAP(File_set_atomicity, (MPI_File fh, int flag), (fh, flag))
WRAP(File_preallocate, (MPI_File fh, MPI_Offset n), (fh, n))
WRAP(File_write_at_all, (MPI_File fh, MPI_Offset o, const void *b, int n, DT t, MPI_Status *st),
     (fh, o, b, n, t, st))
WRAP(File_read_at_all, (MPI_File fh, MPI_Offset o, void *b, int n, DT t, MPI_Status *st),
     (fh, o, b, n, t, st))
WRAP(File_write_all, (MPI_File fh, const void *b, int n, DT t, MPI_Status *st), (fh, b, n, t, st))
WRAP(File_read_all, (MPI_File fh, void *b, int n, DT t, MPI_Status *st), (fh, b, n, t, st))
WRAP(Send, (const void *b, int n, DT t, int dest, int tag, MPI_Comm c), (b, n, t, dest, tag, c))
WRAP(Recv, (void *b, int n, DT t, int src, int tag, MPI_Comm c, MPI_Status *st),
     (b, n, t, src, tag, c, st))
WRAP(Isend, (const void *b, int n, DT t, int dest, int tag, MPI_Comm c, MPI_Request *q),
     (b, n, t, dest, tag, c, q))
WRAP(Irecv, (void *b, int n, DT t, int src, int tag, MPI_Comm c, MPI_Request *q),
     (b, n, t, src, tag, c, q))
WRAP(Ssend, (const void *b, int n, DT t, int dest, int tag, MPI_Comm c), (b, n, t, dest, tag, c))
WRAP(Sendrecv,
     (const void *s, int sn, DT st, int dest, int stag, void *r, int rn, DT rt, int src, int rtag,
      MPI_Comm c, MPI_Status *status),
     (s, sn, st, dest, stag, r, rn, rt, src, rtag, c, status))
WRAP(Probe, (int src, int tag, MPI_Comm c, MPI_Status *st), (src, tag, c, st))
WRAP(Iprobe, (int src, int tag, MPI_Comm c, int *flag, MPI_Status *st), (src, tag, c, flag, st))
WRAP(Mprobe, (int src, int tag, MPI_Comm c, MPI_Message *m, MPI_Status *st), (src, tag, c, m, st))
WRAP(Improbe, (int src, int tag, MPI_Comm c, int *flag, MPI_Message *m, MPI_Status *st),
     (src, tag, c, flag, m, st))
WRAP(Mrecv, (void *b, int n, DT t, MPI_Message *m, MPI_Status *st), (b, n, t, m, st))
WRAP(Imrecv, (void *b, int n, DT t, MPI_Message *m, MPI_Request *q), (b, n, t, m, q))
WRAP(File_write_at, (MPI_File fh, MPI_Offset o, const void *b, int n, DT t, MPI_Status *st),
     (fh, o, b, n, t, st))
WRAP(File_read_at, (MPI_File fh, MPI_Offset o, void *b, int n, DT t, MPI_Status *st),
     (fh, o, b, n, t, st))
WRAP(File_get_size, (MPI_File fh, MPI_Offset * n), (fh, n))
WRAP(Wait, (MPI_Request * q, MPI_Status *st), (q, st))
WRAP(Waitall, (int n, MPI_Request q[], MPI_Status *st), (n, q, st))
WRAP(Waitany, (int n, MPI_Request q[], int *idx, MPI_Status *st), (n, q, idx, st))
WRAP(Test, (MPI_Request * q, int *flag, MPI_Status *st), (q, flag, st))
WRAP(Testall, (int n, MPI_Request q[], int *flag, MPI_Status st[]), (n, q, flag, st))
