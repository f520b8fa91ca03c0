/*
 * The identity of a checkpoint directory (docs/levels.md "Whose cache it is"): 128 random bits
 * made once, by the manager's chief under the directory's lock, in the file `identity` next to
 * the state file. Each node's cache of the directory's checkpoints lives in the subdirectory
 * "mpickpt-<identity>" of the node's cache directory, so a job adopts, restores, sweeps and drains
 * only cache copies of its own directory; another directory's (another job's) are never touched.
 * The file records the directory's inode too: read in a directory of another inode (a copy, a
 * restore from a backup) it is replaced by a new identity, with a warning, so a copy never adopts
 * the original's cache copies. No MPI.
 */
#ifndef MPICKPT_IDENTITY_H
#define MPICKPT_IDENTITY_H

#include "internal.h"

#include <stddef.h>

#define CKPT__IDENTITY_FILE "identity"
/* Hex digits of an identity. */
#define CKPT__IDENTITY_HEX 32
/* The prefix of a node cache's subdirectory for one checkpoint directory. */
#define CKPT__CACHE_SUBDIR_PREFIX "mpickpt-"

/* The identity of the checkpoint directory open as `dirfd` into out (hex, NUL-terminated): read
 * from its `identity` file ("mpickpt-identity <hex> dir <inode>
"; a file without the inode part,
 * as written by hand, is taken as it is), or, when there is none or it names another inode and
 * `create`, made and written durably (temp file, fsync, rename). CKPT_ENOTFOUND when missing (or
 * another directory's) and not `create`; a file that is not a regular file of the expected form
 * is CKPT_ECORRUPT naming it (remove it: the directory then gets a new identity, and its old cache
 * copies are no longer adopted). */
int ckpt__identity_get(char out[CKPT__IDENTITY_HEX + 1], int dirfd, const char *shown,
                       int create);

/* 1 when `name` is "mpickpt-<identity>" (any identity). */
int ckpt__is_cache_subdir(const char *name);

#endif
