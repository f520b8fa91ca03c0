/*
 * Commit: making a checkpoint visible, atomically (docs/design.md §4.5). One implementation for the
 * single-process writer (lib/checkpoint.c) and the collective saver's chief (mpi/save_protocol.c).
 * Not installed. No MPI.
 *
 * Contract of ckpt__commit(): every data file is renamed from its in-flight directory into the
 * checkpoint's directory with a rename that never replaces (ckpt__rename_noreplace): a final name
 * that is taken, by anything (another job's file, a planted link, FIFO or directory), is
 * CKPT_EEXISTS naming it and is left exactly as it is. Then the directory is fsynced, the optional
 * fault point runs, and the index — already merged and validated — is written durably under
 * <base>.index (temp name, fsync, rename that never replaces, fsync directory): that rename is the
 * commit point, and an index name taken by then is CKPT_EEXISTS too. On any failure the data
 * files renamed so far (this commit's own) are removed again, so no data file is left without its
 * index, and an index whose rename happened before a later step failed (the directory's fsync) is
 * removed first, so no index is left without its data; nothing this commit did not put in place
 * is touched. With `replace` (the writer's overwrite) an existing index is removed (and the
 * directory fsynced) before any data file moves, so no reader sees the old index with new data,
 * and the renames replace.
 * The in-flight directories are the caller's to remove (ckpt__temp_cleanup).
 */
#ifndef MPICKPT_COMMIT_H
#define MPICKPT_COMMIT_H

#include "internal.h"
#include "mpickpt.pb-c.h"

#include <stddef.h>

/* A data file to move: entry from_name of directory from_fd (or of its subdirectory from_subdir,
 * when that is not empty: opened by descriptor for this file only, so a commit of thousands of
 * ranks' files holds one directory open at a time) becomes `name` in the checkpoint's directory. */
typedef struct ckpt__commit_file {
    int from_fd;
    char from_subdir[32];
    const char *from_shown; /* from_fd's path, for messages */
    const char *from_name;
    const char *name;
} ckpt__commit_file;

typedef struct ckpt__commit_req {
    int dirfd;                 /* the checkpoint's directory */
    const char *dir;           /* ... for messages */
    const char *index_name;    /* <base>.index */
    const char *index_shown;   /* the index's path, for messages */
    const Mpickpt__Index *idx; /* merged and validated */
    const ckpt__commit_file *files;
    size_t nfiles;
    int replace;               /* an index of that name may exist: it is replaced (and so are
                                * data files of the same names) */
    /* Runs after the data files are in place, before the index is written (fault injection: tests
     * and drills crash or fail here); NULL: none. */
    int (*before_index)(void *arg);
    void *arg;
} ckpt__commit_req;

int ckpt__commit(const ckpt__commit_req *req);

/*
 * The commit in its parts, for a commit whose data files are moved by their owners in parallel
 * (the collective saver: each rank moves the files it wrote, then the chief writes the index):
 *   ckpt__commit_move    renames files[0..n) into dirfd (as above: never replacing unless
 *                        `replace`); *done counts those moved
 *   ckpt__commit_unmove  removes the first `done` of them again (a save that is not committed)
 *   ckpt__commit_index   fsyncs the directory (every data file's entry), runs before_index, writes
 *                        the index durably; on failure an index it renamed into place is removed
 *                        (data files are the movers' to remove). req->files are not used.
 */
int ckpt__commit_move(int dirfd, const char *dir, const ckpt__commit_file *files, size_t n,
                      size_t *done, int replace);
void ckpt__commit_unmove(int dirfd, const ckpt__commit_file *files, size_t done);
int ckpt__commit_index(const ckpt__commit_req *req);

#endif
