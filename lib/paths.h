/*
 * Paths: the single owner of the names mpickpt gives to what it writes in a checkpoint directory
 * (docs/design.md §3), and of the in-flight directories of a save. Not installed. No MPI.
 *
 * Contract:
 *   <dir>/<base>.index                 the commit point of checkpoint <dir>/<base>
 *   <dir>/<base>.data-RRRRR-of-NNNNN   rank R's data file (per-rank layout), or 00000-of-00001
 *                                      (shared layout, single-process writer), or node R's of N
 *                                      nodes (per-node layout: made in the in-flight directory
 *                                      of the node's leader, its lowest rank, and written by
 *                                      every rank of the node)
 *   <dir>/<base>.<id>_temp/            the chief's in-flight directory (every rank's, shared
 *                                      layout); <id> is the save's id: 16 hex digits, random,
 *                                      chosen by the chief and broadcast with the prefix
 *   <work>/workertemp_<r>.<id>/        rank r's in-flight directory (per-rank and per-node
 *                                      layouts, r > 0); <work> is the parent of <dir> when <dir>
 *                                      is named chief/, else <dir> itself
 *   .reserve-<r>, .pad-<r>             space reservation and HDF5 metadata room inside a temp dir
 *   <name>.tmp-<16 hex>                a file being written atomically (ckpt__temp_name)
 *   <dir>/halt                         a halt request (`mpickpt halt`, lib/halt.h), next to the
 *                                      state file; kept by gc, removed by `mpickpt halt --clear`
 *   <dir>/lock                         the lock of the directory (lib/dirlock.h), next to the
 *                                      state file: a writer (manager, training state, `mpickpt
 *                                      gc|pin|drop`) flocks it for its lifetime; never removed
 *                                      (delete_backup excepted, by its holder)
 *   <dir>/identity                     the directory's identity (lib/identity.h), next to the
 *                                      state file, made when a cache level is first set up;
 *                                      names its caches' subdirectories mpickpt-<identity>
 * In-flight names are unique to one save: two jobs saving the same checkpoint into one directory
 * never share one, so neither removes or writes into the other's. Each is created with an
 * exclusive mkdir by the rank that owns it and removed whole when its save ends; what stands
 * under such a name before it is made is not ours (CKPT_EEXISTS). Final names are taken with a
 * rename that never replaces (lib/commit.c), unless a writer asked to overwrite.
 * Older versions (and gc still recognises their debris): <dir>/<base>_temp/ and
 * <work>/workertemp_<r>/, the same names for every save.
 * The saver, the single-process writer, the manager and gc use these functions to make or
 * recognise those names (the "<prefix>.index" of a prefix is composed where a prefix is opened).
 */
#ifndef MPICKPT_PATHS_H
#define MPICKPT_PATHS_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* The directory name of the training-state layout's chief (docs/design.md §3). */
#define CKPT__CHIEF_DIR "chief"
/* The manager's state file in a checkpoint directory (TensorFlow's name). */
#define CKPT__STATE_FILE "checkpoint"
/* A halt request in the state file's directory (lib/halt.h). */
#define CKPT__HALT_FILE "halt"
/* The lock of the directory, next to the state file (lib/dirlock.h). */
#define CKPT__LOCK_FILE "lock"

/* 1 when s ends with suffix. */
int ckpt__ends_with(const char *s, const char *suffix);

/* The names and directories of one save of checkpoint `prefix` by rank `rank` of `size`. */
typedef struct ckpt__save_names {
    char prefix[4096];
    char dir[4096];         /* the checkpoint's directory */
    char work[4096];        /* where workertemp_<r> live (ckpt__work_dir) */
    char base[256];         /* the checkpoint's name in dir */
    char index_name[300];   /* <base>.index */
    char save_id[20];       /* 16 hex digits: this save's in-flight names */
    char temp_name[256];    /* <base>.<id>_temp, in dir */
    char chief_temp[4400];  /* <prefix>.<id>_temp, for messages */
    char worker_temp[64];   /* workertemp_<rank>.<id>, in work */
    char my_temp[4400];     /* this rank's in-flight directory, for messages */
    char data_name[320];    /* final name of this rank's data file, or of the shared file */
    char my_file[4700];     /* that file while in flight, for messages */
    char reserve_name[64];  /* .reserve-<rank> in the in-flight directory */
    char pad_name[64];      /* .pad-<rank> in the in-flight directory */
    int shared;             /* one data file for every rank (the chief's temp dir holds it) */
    int node_leader;        /* per-node layout: the rank whose in-flight directory holds this
                             * rank's node file (ckpt__save_names_node), else -1 */
    char node_temp[4400];   /* that directory, for messages */
} ckpt__save_names;

/* Fills `n` for the save of id `save_id` (every rank of a collective save passes the chief's;
 * ckpt__random_u64). CKPT_EINVAL when the prefix's file name part is not 1..200 safe bytes. */
int ckpt__save_names_init(ckpt__save_names *n, const char *prefix, int rank, int size,
                          int shared, uint64_t save_id);

/* Per-node layout: this rank's data file becomes its node's, <base>.data-<node>-of-<nnodes>, in the
 * in-flight directory of rank `leader` (<base>.<id>_temp when that is rank 0, else
 * workertemp_<leader>.<id>): data_name (what every rank of the node records), my_file, node_leader
 * and node_temp are set. CKPT_EINVAL unless 0 <= node < nnodes and leader >= 0. */
int ckpt__save_names_node(ckpt__save_names *n, int node, int nnodes, int leader);
/* Opens the node leader's in-flight directory (ckpt__save_names_node), which the leader made:
 * never created here, a link refused. */
int ckpt__node_temp_open(const ckpt__save_names *n, int dirfd, int workfd, int *fd);

/* <work> of a checkpoint directory: its parent when it is named chief, else itself. */
int ckpt__work_dir(char *out, size_t size, const char *dir);

/* "<base>.data-<r>-of-<n>" (five digits at least). */
int ckpt__data_name(char *out, size_t size, const char *base, int r, int n);
/* 1 when `name` is "<b>.data-RRRRR-of-NNNNN" with R < N; <b> copied to out. */
int ckpt__data_file_base(char *out, size_t size, const char *name);
/* Rank R of "<base>.data-RRRRR-of-NNNNN" when that is exactly `name` (ckpt__data_file_base) and
 * N == size, else -1. */
int ckpt__data_name_rank(const char *name, const char *base, int size);
/* File number K of "<base>.data-K-of-N" (K < N, at most five digits each) when that is exactly
 * `name`, with N in *of; else -1: a node cache's data file, from a job of any shape. */
int ckpt__data_name_number(const char *name, const char *base, int *of);

/* "workertemp_<rank>.<save_id>" */
void ckpt__worker_temp_name(char *out, size_t size, int rank, const char *save_id);
/* 1 when `name` is workertemp_<digits>.<16 hex digits>, or workertemp_<digits> (older versions) */
int ckpt__is_worker_temp_name(const char *name);
/* 1 when `name` may be inside an in-flight directory of ours: a data file, the single-process
 * writer's part-00000-of-00001 (older versions), .reserve-<r> or .pad-<r>. */
int ckpt__is_temp_content_name(const char *name);

/*
 * The in-flight directories of a save. dirfd/workfd are the checkpoint's directory and <work>
 * (ckpt__ckptdir_open), tempfd this rank's in-flight directory once opened.
 *  ckpt__temp_fresh: the chief's checks before a save: no index of that name (CKPT_EEXISTS unless
 *    `replace`), then <base>.<id>_temp made (exclusive: anything under that name is CKPT_EEXISTS)
 *    and opened into *tempfd. Nothing else is removed: leftovers of crashed saves are gc's.
 *  ckpt__temp_open: this rank's in-flight directory: workertemp_<r>.<id> made (exclusive), or
 *    the chief's <base>.<id>_temp opened (rank 0, shared layout; made by ckpt__temp_fresh);
 *    links refused.
 *  ckpt__temp_cleanup: removes the in-flight directory this rank made (the chief's and
 *    workertemp_<r>.<id>, whole), or, shared layout, only its reservation in the chief's.
 */
int ckpt__temp_fresh(const ckpt__save_names *n, int dirfd, int *tempfd, int replace);
int ckpt__temp_open(const ckpt__save_names *n, int rank, int dirfd, int workfd, int *tempfd);
void ckpt__temp_cleanup(const ckpt__save_names *n, int rank, int dirfd, int workfd, int tempfd);

/* How many taken counters in a row a manager's save moves past (ckpt__counter_free). */
#define CKPT__COUNTER_SKIP_MAX 100

/*
 * The first counter N >= *next such that no entry of any of the `n` directories dirfds[i] (shown
 * as shown[i]) is named <stem>-<N> or starts with <stem>-<N>. or <stem>-<N>_ (an index, a data
 * file, an in-flight directory, a temp file: anything, of any file type, found by listing, never
 * followed or opened). Each counter passed over is a warning naming what took it. *next is set;
 * CKPT_EEXISTS naming the first when CKPT__COUNTER_SKIP_MAX in a row are taken. Local (the
 * manager's chief, lib-side so that tests reach it without MPI).
 */
int ckpt__counter_free(int64_t *next, const int *dirfds, const char *const *shown, size_t n,
                       const char *stem);

#endif
