/* The commit of a checkpoint: data files into place, then the index last. See commit.h. */
#include "commit.h"

#include "fsutil.h"
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

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
    for (size_t i = 0; i < q->nfiles && rc == CKPT_OK; i++) {
        const ckpt__commit_file *f = &q->files[i];
        /* renameat moves the entry itself: a link planted under the target name is replaced */
        if (renameat(f->from_fd, f->from_name, q->dirfd, f->name) != 0) {
            char shown[4600];
            snprintf(shown, sizeof shown, "%s/%s (from a temp dir)", q->dir, f->name);
            rc = ckpt__errno(errno, "rename into place", shown);
        } else {
            done++;
        }
    }
    if (rc == CKPT_OK)
        rc = ckpt__fsync_fd(q->dirfd, q->dir);
    if (rc == CKPT_OK && q->before_index)
        rc = q->before_index(q->arg);
    /* the commit point (the index was validated by the merge) */
    int stored = 0;
    if (rc == CKPT_OK) {
        rc = ckpt__index_store_merged_at(q->idx, q->dirfd, q->index_name, q->dir);
        stored = 1;
    }
    if (rc != CKPT_OK) {
        /* The index's rename may have happened before a later step failed (the directory's
         * fsync): an index of this name is ours now (none existed, or `replace` removed it), and
         * it goes before its data files, so no index is ever left without them. */
        if (stored && ckpt__exists_at(q->dirfd, q->index_name)) {
            unlinkat(q->dirfd, q->index_name, 0);
            (void)fsync(q->dirfd); /* best effort: the error reported is the first one */
        }
        for (size_t i = 0; i < done; i++)
            unlinkat(q->dirfd, q->files[i].name, 0);
    }
    return rc;
}
