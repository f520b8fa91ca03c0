/* mpickpt-merge-bench: times the chief's side of a save's merge step for R ranks, without MPI.
 *
 * Every simulated rank builds its index fragment with ckpt__fragment_add() (the way the saver
 * does) and packs it, as it would before MPI_Gatherv; the packed fragments are laid end to end in
 * one buffer, as the chief receives them. Then, timed: unpacking every fragment, ckpt__index_merge
 * (which validates the result), and packing the merged index into its container
 * (ckpt__container_pack: length, payload, CRC-32C, what the commit writes). Per rank the pieces
 * are a mix of
 *   partitioned  tensors split by rows across all ranks (every rank holds one piece of each;
 *                uneven splits),
 *   full         tensors owned whole by this rank (e.g. a pipeline stage's or an expert's),
 *   replicated   primaries of replicated tensors, each stored once, by its primary rank,
 * so the merged index holds P + R*(F + Rp) tensors and R*K pieces (K = P + F + Rp per rank).
 *
 *   mpickpt-merge-bench                         the standard sweep (1k, 4k, 16k ranks; up to 1M
 *                                               pieces, 10M with --max-pieces 10485760), each
 *                                               configuration in a child process
 *   mpickpt-merge-bench --ranks R --per-rank K  one configuration
 *   options: --mix P,F,Rp  percentages of a rank's K pieces (default 50,25,25)
 *            --repeat N    best of N timed runs (default 1); --max-pieces N limits the sweep
 *            --hier K      every configuration twice, each in its own process: flat, then
 *                          hierarchical with nodes of K consecutive ranks: each node's leader
 *                          unpacks its node's fragments, merges them (ckpt__fragment_merge) and
 *                          packs the result; the chief gathers those and merges them as above
 *                          (the leaders run one after the other here; leader_s is the slowest
 *                          node's, what the chief waits for on a cluster; critical_s adds it to
 *                          the chief's total). index_crc32c must equal the flat run's.
 *            --json        one JSON line per configuration instead of the table
 *            --malloc      unpack the fragments with malloc instead of the arena (lib/arena.h)
 *                          that the saver uses, to measure the two side by side (--arena,
 *                          the default, is still accepted)
 *
 * Times are wall clock (best of the repeats by total); *_cpu_s are the CPU times of the same
 * phases (minimum over the repeats), which a machine shared with other jobs disturbs less.
 * Memory: peak_mb is the process's ru_maxrss (so one configuration per process), chief_peak_mb
 * the chief's own peak (VmHWM reset before its phase, less the simulated senders' bytes; its
 * receive buffer is freed once unpacked, as in the saver); the heap in use (mallinfo2) after each
 * phase is reported as heap_mb (its maximum). Links only libmpickpt_core and uses its internal
 * API (lib/index.h). Exit 0, 1 when a merge fails, 2 on a usage error. */
#include "arena.h"
#include "index.h"

#include "mpickpt/checkpoint.h"
#include "mpickpt/crc32c.h"
#include "mpickpt/dtype.h"
#include "mpickpt/slice.h"

#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_config {
    size_t ranks;
    size_t per_rank;
    unsigned mix[3]; /* partitioned, full, replicated: percentages of per_rank */
    int repeat;
    int arena;       /* unpack into an arena, as the saver does (0: malloc, see --malloc) */
    size_t hier;     /* 0: flat; K: nodes of K ranks, leaders merge, the chief merges theirs */
} bench_config;

typedef struct bench_result {
    size_t tensors, pieces;
    size_t np, nf, nr;     /* per rank */
    double build_s;        /* simulated ranks: build + pack every fragment (not in total) */
    double unpack_s, merge_s, pack_s, total_s;
    /* CPU time (CLOCK_PROCESS_CPUTIME_ID) of the same phases, minimum over the repeats: less
     * sensitive than the wall times to a machine shared with other jobs */
    double unpack_cpu_s, merge_cpu_s, pack_cpu_s, cpu_s;
    double revalidate_s;   /* ckpt__index_validate again, as ckpt__index_store does at commit */
    double free_s;         /* freeing the merged index and the unpacked fragments */
    double gathered_mb;    /* packed fragments, as the chief receives them */
    double index_mb;       /* packed merged index */
    double heap_mb;        /* largest heap in use after a phase (mallinfo2) */
    uint32_t index_crc;    /* CRC-32C of the packed merged index: equal before and after a change
                            * to the merge means the same index, byte for byte */
    double peak_mb;        /* ru_maxrss */
    double chief_peak_mb;  /* the chief's peak resident memory: VmHWM from a reset just before
                            * its phase, less the simulated senders' copy of the gathered bytes
                            * (the ranks' fragments, which only the leaders hold with --hier,
                            * are freed before the reset) */
    int chief_peak_ok;     /* the reset worked (else chief_peak_mb is the process's peak) */
    /* --hier: the leaders (each: unpack its node's fragments, merge, pack the result) */
    size_t nodes;
    double leader_s, leader_cpu_s; /* the slowest node's (best of the repeats) */
    double leader_mean_s;          /* mean over the nodes */
    double leader_gathered_mb;     /* the largest node's packed fragments */
} bench_result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double heap_mb(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double)(mi.uordblks + mi.hblkhd) / (1024.0 * 1024.0);
}

static double maxrss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

/* "/tensors/<name with '/' as %2F>[#s0_s1...]", the saver's dataset path of a piece. */
static void dataset_path(char *out, size_t size, const char *name, const ckpt_slice *part)
{
    size_t pos = (size_t)snprintf(out, size, "/tensors/");
    for (const char *p = name; *p && pos + 4 < size; p++) {
        if (*p == '/') {
            memcpy(out + pos, "%2F", 3);
            pos += 3;
        } else {
            out[pos++] = *p;
        }
    }
    out[pos] = '\0';
    for (int d = 0; part && d < part->ndims && pos < size; d++)
        pos += (size_t)snprintf(out + pos, size - pos, "%c%" PRId64, d ? '_' : '#',
                                part->start[d]);
}

static void die_ckpt(const char *what, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    fprintf(stderr, "mpickpt-merge-bench: %s: %s\n", what,
            e && e->message && e->message[0] ? e->message : ckpt_strerror(rc));
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "mpickpt-merge-bench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Builds rank r's fragment (pieces in a registration-like interleaved order). */
static void build_fragment(Mpickpt__Fragment *f, const bench_config *c, const bench_result *res,
                           size_t r)
{
    size_t cap = 0;
    uint64_t file_bytes = 0;
    char name[256], file[64], dset[512];
    int rc;
    mpickpt__fragment__init(f);
    f->rank = (int32_t)r;
    snprintf(file, sizeof file, "ckpt-1.data-%05zu-of-%05zu", r, c->ranks);
    size_t ip = 0, ifl = 0, ir = 0;
    for (size_t k = 0; k < c->per_rank; k++) {
        ckpt_shape shape;
        ckpt_slice slice, dslice;
        ckpt_kind kind;
        int partial = 0;
        /* round robin over the three kinds while each has pieces left */
        size_t which = k % 3;
        for (int tries = 0; tries < 3; tries++, which = (which + 1) % 3)
            if ((which == 0 && ip < res->np) || (which == 1 && ifl < res->nf) ||
                (which == 2 && ir < res->nr))
                break;
        if (which == 0) {
            /* partitioned: rows split unevenly over all ranks (2 or 3 rows each) */
            size_t i = ip++;
            int64_t rows = (int64_t)(2 * c->ranks + i % 3), cols = 64;
            int64_t dims[2] = {rows, cols};
            int64_t r0 = (int64_t)r * rows / (int64_t)c->ranks;
            int64_t r1 = (int64_t)(r + 1) * rows / (int64_t)c->ranks;
            int64_t st[2] = {r0, 0}, ct[2] = {r1 - r0, cols};
            snprintf(name, sizeof name, "model/transformer/block_%04zu/mlp/dense_%zu/kernel", i / 4,
                     i % 4);
            ckpt_shape_init(&shape, 2, dims);
            ckpt_slice_init(&slice, 2, st, ct);
            kind = CKPT_KIND_PARTITIONED;
            partial = 1;
        } else if (which == 1) {
            size_t i = ifl++;
            int64_t dims[2] = {64, 64};
            snprintf(name, sizeof name, "model/experts/rank_%05zu/expert_%03zu/kernel", r, i);
            ckpt_shape_init(&shape, 2, dims);
            ckpt_slice_full(&slice, &shape);
            kind = CKPT_KIND_FULL;
        } else {
            size_t i = ir++;
            int64_t dims[1] = {256};
            /* replicated tensor number g of R*nr; its primary is rank g % R, i.e. this rank */
            size_t g = i * c->ranks + r;
            snprintf(name, sizeof name, "model/transformer/norm_%07zu/layer_norm/gamma", g);
            ckpt_shape_init(&shape, 1, dims);
            ckpt_slice_full(&slice, &shape);
            kind = CKPT_KIND_REPLICATED;
        }
        dslice = slice;
        for (int d = 0; d < dslice.ndims; d++)
            dslice.start[d] = 0;
        int64_t n = 0;
        ckpt_slice_num_elements(&n, &slice);
        dataset_path(dset, sizeof dset, name, partial ? &slice : NULL);
        uint64_t bytes = (uint64_t)n * 4u;
        file_bytes += bytes;
        rc = ckpt__fragment_add(f, &cap, name, CKPT_FLOAT32, &shape, kind, &slice, file, dset,
                                &dslice, bytes, (uint32_t)(k * 2654435761u));
        if (rc != CKPT_OK)
            die_ckpt("ckpt__fragment_add", rc);
    }
    if ((rc = ckpt__fragment_add_file(f, file, file_bytes + 4096)) != CKPT_OK)
        die_ckpt("ckpt__fragment_add_file", rc);
}

/* Packed fragments end to end, as a receiver gets them from a gatherv. */
typedef struct gathered {
    uint8_t *buf;
    size_t used, cap;
    size_t *lens, *displs;
    size_t n, ncap;
} gathered;

static void gathered_add(gathered *g, const Mpickpt__Fragment *f)
{
    size_t len = mpickpt__fragment__get_packed_size(f);
    if (!g->buf) {
        g->cap = (size_t)1 << 20;
        g->buf = xmalloc(g->cap);
    }
    while (g->used + len > g->cap) {
        g->cap *= 2;
        uint8_t *grown = realloc(g->buf, g->cap);
        if (!grown) {
            fprintf(stderr, "mpickpt-merge-bench: out of memory\n");
            exit(1);
        }
        g->buf = grown;
    }
    if (g->n == g->ncap) {
        g->ncap = g->ncap ? 2 * g->ncap : 1024;
        g->lens = realloc(g->lens, g->ncap * sizeof *g->lens);
        g->displs = realloc(g->displs, g->ncap * sizeof *g->displs);
        if (!g->lens || !g->displs) {
            fprintf(stderr, "mpickpt-merge-bench: out of memory\n");
            exit(1);
        }
    }
    mpickpt__fragment__pack(f, g->buf + g->used);
    g->lens[g->n] = len;
    g->displs[g->n++] = g->used;
    g->used += len;
}

static void gathered_free(gathered *g)
{
    free(g->buf);
    free(g->lens);
    free(g->displs);
    memset(g, 0, sizeof *g);
}

/* Unpacks fragments [from, from + n) of g into frags (into the arena, or with malloc when NULL);
 * fragment i gets rank rank0 + i * step, as the receiver knows its senders. */
static void unpack_range(Mpickpt__Fragment **frags, const gathered *g, size_t from, size_t n,
                         ckpt__arena *arena, size_t rank0, size_t step)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = from + i;
        frags[i] = mpickpt__fragment__unpack(arena ? ckpt__arena_allocator(arena) : NULL,
                                             g->lens[k], g->buf + g->displs[k]);
        if (!frags[i]) {
            fprintf(stderr, "mpickpt-merge-bench: fragment %zu does not parse\n", k);
            exit(1);
        }
        frags[i]->rank = (int32_t)(rank0 + i * step);
    }
}

static void free_frags(Mpickpt__Fragment **frags, size_t n, ckpt__arena *arena)
{
    if (arena)
        ckpt__arena_free(arena);
    else
        for (size_t i = 0; i < n; i++)
            mpickpt__fragment__free_unpacked(frags[i], NULL);
}

static ckpt__arena *new_arena(const bench_config *c)
{
    ckpt__arena *arena = c->arena ? ckpt__arena_new() : NULL;
    if (c->arena && !arena) {
        fprintf(stderr, "mpickpt-merge-bench: out of memory\n");
        exit(1);
    }
    return arena;
}

/* The process's peak resident memory since the last reset_peak(), in MB (VmHWM). */
static double hwm_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb / 1024.0;
}

/* Starts the peak over from the memory in use now (Linux >= 4.0: clear_refs 5), after giving
 * back what malloc holds free; 0 when the kernel refused (then hwm_mb() is the process's peak). */
static int reset_peak(void)
{
    malloc_trim(0);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/*
 * The node leaders of the hierarchical mode, one after the other (on a cluster they run at the same
 * time): each unpacks its node's K fragments, merges them (ckpt__fragment_merge) and packs the
 * result, which goes into *nodes for the chief. Times are per node; the slowest node is what the
 * chief waits for.
 */
static void run_leaders(gathered *nodes, const bench_config *c, const gathered *ranks,
                        bench_result *res)
{
    size_t K = c->hier, nn = (c->ranks + K - 1) / K;
    Mpickpt__Fragment **frags = xmalloc(K * sizeof *frags);
    res->nodes = nn;
    for (int rep = 0; rep < c->repeat; rep++) {
        double wmax = 0, cmax = 0, wsum = 0, inmax = 0;
        gathered_free(nodes);
        for (size_t k = 0; k < nn; k++) {
            size_t r0 = k * K, n = c->ranks - r0 < K ? c->ranks - r0 : K;
            ckpt__arena *arena = new_arena(c);
            double c0 = cpu_now_s(), t0 = now_s();
            unpack_range(frags, ranks, r0, n, arena, r0, 1);
            Mpickpt__Fragment part;
            int rc = ckpt__fragment_merge(&part, frags, n);
            if (rc != CKPT_OK)
                die_ckpt("ckpt__fragment_merge", rc);
            gathered_add(nodes, &part);
            double w = now_s() - t0, cpu = cpu_now_s() - c0;
            ckpt__fragment_merged_free(&part);
            free_frags(frags, n, arena);
            double in = (double)(ranks->displs[r0 + n - 1] + ranks->lens[r0 + n - 1] -
                                 ranks->displs[r0]);
            wsum += w;
            wmax = w > wmax ? w : wmax;
            cmax = cpu > cmax ? cpu : cmax;
            inmax = in > inmax ? in : inmax;
        }
        if (rep == 0 || wmax < res->leader_s) {
            res->leader_s = wmax;
            res->leader_mean_s = wsum / (double)nn;
        }
        if (rep == 0 || cmax < res->leader_cpu_s)
            res->leader_cpu_s = cmax;
        res->leader_gathered_mb = inmax / (1024.0 * 1024.0);
    }
    free(frags);
}

static void run_config(const bench_config *c, bench_result *res)
{
    memset(res, 0, sizeof *res);
    size_t k = c->per_rank;
    res->np = k * c->mix[0] / 100;
    res->nf = k * c->mix[1] / 100;
    if (res->np + res->nf > k)
        res->nf = k - res->np;
    res->nr = k - res->np - res->nf;
    res->pieces = c->ranks * k;
    res->tensors = res->np + c->ranks * (res->nf + res->nr);

    /* The ranks' side: build and pack; the chief (flat) or each leader (--hier) gets the packed
     * bytes end to end. */
    double t = now_s();
    gathered ranks = { 0 }, nodes = { 0 };
    for (size_t r = 0; r < c->ranks; r++) {
        Mpickpt__Fragment f;
        build_fragment(&f, c, res, r);
        gathered_add(&ranks, &f);
        ckpt__fragment_free_built(&f);
    }
    res->build_s = now_s() - t;

    /* What the chief receives: every rank's fragment, or every node's merge. Its memory is
     * counted from here (the ranks' fragments, which in the hierarchical mode only the leaders
     * hold, are freed first). */
    const gathered *in = &ranks;
    size_t step = 1;
    if (c->hier) {
        run_leaders(&nodes, c, &ranks, res);
        gathered_free(&ranks);
        in = &nodes;
        step = c->hier;
    }
    res->gathered_mb = (double)in->used / (1024.0 * 1024.0);
    res->chief_peak_ok = reset_peak();

    Mpickpt__Fragment **frags = xmalloc(in->n * sizeof *frags);
    for (int rep = 0; rep < c->repeat; rep++) {
        /* the chief's receive buffer, freed once unpacked as gather_fragments does (the pristine
         * bytes stay for the next repeat: their size is taken off chief_peak_mb) */
        gathered recv = *in;
        recv.buf = xmalloc(in->used);
        memcpy(recv.buf, in->buf, in->used);
        ckpt__arena *arena = new_arena(c);
        double c0 = cpu_now_s();
        double t0 = now_s();
        unpack_range(frags, &recv, 0, in->n, arena, 0, step);
        free(recv.buf);
        double t1 = now_s(), c1 = cpu_now_s();
        double h = heap_mb();

        Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
        Mpickpt__Index idx = MPICKPT__INDEX__INIT;
        hdr.format_version = CKPT_FORMAT_VERSION;
        hdr.endianness = MPICKPT__ENDIANNESS__LITTLE;
        hdr.world_size = (int32_t)c->ranks;
        hdr.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
        hdr.save_counter = 1;
        hdr.producer = "mpickpt-merge-bench";
        idx.header = &hdr;
        int rc = ckpt__index_merge(&idx, frags, in->n);
        if (rc != CKPT_OK)
            die_ckpt("ckpt__index_merge", rc);
        double t2 = now_s(), c2 = cpu_now_s();
        h = heap_mb() > h ? heap_mb() : h;
        if (idx.n_tensors != res->tensors) {
            fprintf(stderr, "mpickpt-merge-bench: merged %zu tensors, expected %zu\n",
                    idx.n_tensors, res->tensors);
            exit(1);
        }

        /* packed into its file's container (length, CRC-32C), as the chief's commit does */
        uint8_t *cbuf;
        size_t clen;
        if ((rc = ckpt__container_pack(&cbuf, &clen, CKPT__MAGIC_INDEX, &idx.base)) != CKPT_OK)
            die_ckpt("ckpt__container_pack", rc);
        const uint8_t *ibuf = cbuf + CKPT__CONTAINER_HEAD;
        size_t ilen = clen - CKPT__CONTAINER_HEAD - CKPT__CONTAINER_TAIL;
        double t3 = now_s();
        double c3 = cpu_now_s();
        h = heap_mb() > h ? heap_mb() : h;

        if ((rc = ckpt__index_validate(&idx, CKPT_EMISMATCH, "revalidate")) != CKPT_OK)
            die_ckpt("ckpt__index_validate", rc);
        double t4 = now_s();

        res->index_crc = ckpt_crc32c(ibuf, ilen); /* of the payload: the index message */
        free(cbuf);
        ckpt__index_merged_free(&idx);
        free_frags(frags, in->n, arena);
        double t5 = now_s();

        double total = t3 - t0;
        if (rep == 0 || total < res->total_s) {
            res->unpack_s = t1 - t0;
            res->merge_s = t2 - t1;
            res->pack_s = t3 - t2;
            res->total_s = total;
            res->revalidate_s = t4 - t3;
            res->free_s = t5 - t4;
        }
        double cpu[4] = {c1 - c0, c2 - c1, c3 - c2, c3 - c0};
        double *best[4] = {&res->unpack_cpu_s, &res->merge_cpu_s, &res->pack_cpu_s, &res->cpu_s};
        for (int i = 0; i < 4; i++)
            if (rep == 0 || cpu[i] < *best[i])
                *best[i] = cpu[i];
        res->index_mb = (double)ilen / (1024.0 * 1024.0);
        res->heap_mb = h > res->heap_mb ? h : res->heap_mb;
    }
    res->chief_peak_mb = hwm_mb() - (double)in->used / (1024.0 * 1024.0);
    free(frags);
    gathered_free(&ranks);
    gathered_free(&nodes);
    res->peak_mb = maxrss_mb();
}

static void print_json(const bench_config *c, const bench_result *r)
{
    printf("{\"ranks\":%zu,\"tensors\":%zu,\"pieces\":%zu,\"unpack_s\":%.6f,\"merge_s\":%.6f,"
           "\"pack_s\":%.6f,\"total_s\":%.6f,\"peak_mb\":%.1f,\"unpack_cpu_s\":%.6f,"
           "\"merge_cpu_s\":%.6f,\"pack_cpu_s\":%.6f,\"cpu_s\":%.6f,\"per_rank\":%zu,"
           "\"mix\":[%zu,%zu,%zu],\"revalidate_s\":%.6f,\"free_s\":%.6f,\"build_s\":%.6f,"
           "\"gathered_mb\":%.2f,\"index_mb\":%.2f,\"heap_mb\":%.1f,\"repeat\":%d,"
           "\"arena\":%s,\"index_crc32c\":\"%08x\",\"chief_peak_mb\":%.1f,\"hier\":%zu,"
           "\"nodes\":%zu,\"leader_s\":%.6f,\"leader_cpu_s\":%.6f,\"leader_mean_s\":%.6f,"
           "\"leader_gathered_mb\":%.2f,\"critical_s\":%.6f,\"chief_peak_reset\":%s}\n",
           c->ranks, r->tensors, r->pieces, r->unpack_s, r->merge_s, r->pack_s, r->total_s,
           r->peak_mb, r->unpack_cpu_s, r->merge_cpu_s, r->pack_cpu_s, r->cpu_s, c->per_rank,
           r->np, r->nf, r->nr, r->revalidate_s, r->free_s, r->build_s,
           r->gathered_mb, r->index_mb, r->heap_mb, c->repeat, c->arena ? "true" : "false",
           r->index_crc, r->chief_peak_mb, c->hier, r->nodes, r->leader_s, r->leader_cpu_s,
           r->leader_mean_s, r->leader_gathered_mb, r->leader_s + r->total_s,
           r->chief_peak_ok ? "true" : "false");
}

static void print_header(void)
{
    printf("%39s | %-35s | %-35s | %-17s | %-35s | %s\n", "", "chief: wall seconds",
           "chief: CPU seconds", "wall seconds", "MB", "slowest leader (--hier)");
    printf("%6s %6s %6s %8s %9s | %8s %8s %8s %8s | %8s %8s %8s %8s | %8s %8s | %8s %8s %8s "
           "%8s | %8s %8s %8s\n",
           "ranks", "per_rk", "hier", "tensors", "pieces", "unpack", "merge", "pack", "total",
           "unpack", "merge", "pack", "total", "revalid", "free", "gathered", "index", "peak",
           "chief", "wall", "CPU", "MB in");
}

static void print_row(const bench_config *c, const bench_result *r)
{
    printf("%6zu %6zu %6zu %8zu %9zu | %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f %8.3f | %8.3f "
           "%8.3f | %8.1f %8.1f %8.1f %8.1f | %8.3f %8.3f %8.1f\n",
           c->ranks, c->per_rank, c->hier, r->tensors, r->pieces, r->unpack_s, r->merge_s,
           r->pack_s, r->total_s, r->unpack_cpu_s, r->merge_cpu_s, r->pack_cpu_s, r->cpu_s,
           r->revalidate_s, r->free_s, r->gathered_mb, r->index_mb, r->peak_mb, r->chief_peak_mb,
           r->leader_s, r->leader_cpu_s, r->leader_gathered_mb);
}

/* One configuration in a child process, so that its ru_maxrss is its own. */
static int run_child(const bench_config *c, int json)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("mpickpt-merge-bench: fork");
        return 1;
    }
    if (pid == 0) {
        bench_result r;
        run_config(c, &r);
        if (json)
            print_json(c, &r);
        else
            print_row(c, &r);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "mpickpt-merge-bench: configuration %zu ranks x %zu failed\n", c->ranks,
                c->per_rank);
        return 1;
    }
    return 0;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || v == 0 || s[0] == '-')
        return -1;
    *out = (size_t)v;
    return 0;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "mpickpt-merge-bench: %s\n"
            "usage: mpickpt-merge-bench [--json] [--malloc] [--repeat N] [--mix P,F,R] "
            "[--max-pieces N]\n"
            "       mpickpt-merge-bench [--json] [--malloc] [--repeat N] [--mix P,F,R] "
            "--ranks R --per-rank K\n"
            "       with --hier K: each configuration flat, then in nodes of K ranks\n",
            why);
    return 2;
}

int main(int argc, char **argv)
{
    bench_config c = {0, 0, {50, 25, 25}, 1, 1, 0};
    size_t max_pieces = (size_t)1 << 21, v, hier = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--arena") == 0 || strcmp(a, "--malloc") == 0) {
            c.arena = strcmp(a, "--arena") == 0;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage("checkpoint merge benchmark");
            return 0;
        }
        if (!val)
            return usage("missing value or unknown option");
        i++;
        if (strcmp(a, "--ranks") == 0 && parse_size(val, &c.ranks) == 0 && c.ranks <= INT32_MAX)
            continue;
        if (strcmp(a, "--per-rank") == 0 && parse_size(val, &c.per_rank) == 0)
            continue;
        if (strcmp(a, "--max-pieces") == 0 && parse_size(val, &max_pieces) == 0)
            continue;
        if (strcmp(a, "--hier") == 0 && parse_size(val, &hier) == 0)
            continue;
        if (strcmp(a, "--repeat") == 0 && parse_size(val, &v) == 0 && v <= 100) {
            c.repeat = (int)v;
            continue;
        }
        if (strcmp(a, "--mix") == 0 &&
            sscanf(val, "%u,%u,%u", &c.mix[0], &c.mix[1], &c.mix[2]) == 3 &&
            c.mix[0] + c.mix[1] + c.mix[2] == 100)
            continue;
        return usage("bad option or value (--mix: three percentages adding up to 100)");
    }
    if ((c.ranks == 0) != (c.per_rank == 0))
        return usage("--ranks and --per-rank go together");

    if (c.ranks && !hier) {
        bench_result r;
        run_config(&c, &r);
        if (json) {
            print_json(&c, &r);
        } else {
            print_header();
            print_row(&c, &r);
        }
        return 0;
    }

    /* The standard sweep: 64k, 256k and 1M pieces at 1k, 4k and 16k ranks; 10M (16k ranks x 640)
     * with --max-pieces 10485760 or more (about 10 GB). With --hier, each flat then hierarchical,
     * in a process of its own (its peak memory is its own). */
    static const size_t sweep[][2] = {
        {1024, 64}, {1024, 256}, {1024, 1000},
        {4096, 16}, {4096, 64}, {4096, 256},
        {16384, 4}, {16384, 16}, {16384, 64}, {16384, 640},
    };
    size_t one[1][2] = { { c.ranks, c.per_rank } };
    const size_t(*list)[2] = c.ranks ? (const size_t(*)[2])one : sweep;
    size_t nlist = c.ranks ? 1 : sizeof sweep / sizeof sweep[0];
    int rc = 0;
    if (!json)
        print_header();
    for (size_t i = 0; i < nlist; i++) {
        c.ranks = list[i][0];
        c.per_rank = list[i][1];
        if (nlist > 1 && c.ranks * c.per_rank > max_pieces)
            continue;
        c.hier = 0;
        rc |= run_child(&c, json);
        if (hier) {
            c.hier = hier;
            rc |= run_child(&c, json);
        }
    }
    return rc;
}
