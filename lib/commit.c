/* The commit of a checkpoint: data files into place, then the index last. See commit.h. */
#include "commit.h"

#include "fsutil.h"
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int ckpt__commit_move(int dirfd, const char *dir, const ckpt__commit_file *files, size_t n,
                      size_t *done, int replace)
{
    int rc = CKPT_OK;
    *done = 0;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        const ckpt__commit_file *f = &files[i];
        int from = f->from_fd, opened = -1;
        if (f->from_subdir[0]) {
            if ((rc = ckpt__subdir_open(&opened, f->from_fd, f->from_subdir, 0,
                                        f->from_shown ? f->from_shown : dir)) != CKPT_OK)
                break;
            from = opened;
        }
        /* The entry itself moves (nothing is followed). A final name that is taken is not ours
         * to replace (another job's file, or something planted): CKPT_EEXISTS naming it, left as
         * it is. Only a writer that overwrites replaces (its old index went first). */
        if (replace ? renameat(from, f->from_name, dirfd, f->name) != 0
                    : ckpt__rename_noreplace(from, f->from_name, dirfd, f->name) != 0) {
            char shown[4600];
            if (errno == EEXIST) {
                snprintf(shown, sizeof shown, "%s/%s", dir, f->name);
                rc = ckpt__name_taken(dirfd, f->name, shown);
            } else {
                snprintf(shown, sizeof shown, "%s (from a temp dir)", f->name);
                rc = ckpt__errno(errno, "rename into place", shown);
            }
        } else {
            (*done)++;
        }
        ckpt__close(opened);
    }
    return rc;
}

void ckpt__commit_unmove(int dirfd, const ckpt__commit_file *files, size_t done)
{
    for (size_t i = 0; i < done; i++)
        unlinkat(dirfd, files[i].name, 0);
}

int ckpt__commit_index(const ckpt__commit_req *q)
{
    int rc = ckpt__fsync_fd(q->dirfd, q->dir); /* the data files' entries first */
    if (rc == CKPT_OK && q->before_index)
        rc = q->before_index(q->arg);
    /* the commit point (the index was validated by the merge) */
    int renamed = 0;
    if (rc == CKPT_OK)
        rc = ckpt__index_store_merged_at(q->idx, q->dirfd, q->index_name, q->dir, &renamed,
                                         q->replace);
    /* The index's rename may have happened before a later step failed (the directory's fsync):
     * then that index is ours, and it goes before its data files, so no index is ever left
     * without them. An index we did not rename into place is never touched. */
    if (rc != CKPT_OK && renamed) {
        unlinkat(q->dirfd, q->index_name, 0);
        (void)fsync(q->dirfd); /* best effort: the error reported is the first one */
    }
    return rc;
}

int ckpt__commit(const ckpt__commit_req *q)
{
    int rc = CKPT_OK;
    size_t done = 0;
    /* Replacing a checkpoint: un-commit the old one first (its index goes), so no reader ever sees
     * the old index with the new data. */
    if (q->replace && ckpt__exists_at(q->dirfd, q->index_name)) {
        if (unlinkat(q->dirfd, q->index_name, 0) != 0)
            return ckpt__errno(errno, "unlink", q->index_shown);
        if ((rc = ckpt__fsync_fd(q->dirfd, q->dir)) != CKPT_OK)
            return rc;
    }
    rc = ckpt__commit_move(q->dirfd, q->dir, q->files, q->nfiles, &done, q->replace);
    if (rc == CKPT_OK)
        rc = ckpt__commit_index(q);
    if (rc != CKPT_OK)
        ckpt__commit_unmove(q->dirfd, q->files, done);
    return rc;
}
