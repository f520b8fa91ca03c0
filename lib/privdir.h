/*
 * Private directories: the node-local cache directories of the storage levels (docs/levels.md),
 * which usually sit in a parent that every user of the node can write (/dev/shm, /tmp, a local
 * SSD). docs/security.md "Node-local caches" states the rules; in short, a directory this module
 * hands out
 *   - was reached component by component without following a link anyone else could have made
 *     (a link is followed only when root or this user owns it, and never as the last component);
 *   - has only ancestors that root or this user own and that others cannot write, or can write
 *     only with the sticky bit (/dev/shm, /tmp): nobody else can rename it away or put another
 *     directory in its place;
 *   - is a directory this user owns that neither its group nor others can write (created 0700);
 *   - is then held open: everything below it is reached from the descriptor, never by its path.
 * No MPI.
 */
#ifndef MPICKPT_PRIVDIR_H
#define MPICKPT_PRIVDIR_H

#include "internal.h"

#include <stddef.h>
#include <sys/stat.h>

/* Opens `path` (absolute, or relative to the working directory) as a private directory, creating
 * the components that are missing with mode 0700. On success *fd is the held descriptor. A
 * directory that fails a check is CKPT_EINVAL naming the path, what failed, its owner and mode;
 * nothing in it has been read, created or removed then (components made on the way stay: they are
 * this user's empty directories). When `avoid` is not NULL, reaching that directory (device and
 * inode; `avoid_shown` in messages) on the way is CKPT_EINVAL too, before anything is made below
 * it: the cache may not be it or inside it. */
int ckpt__private_dir_open(int *fd, const char *path, const struct stat *avoid,
                           const char *avoid_shown);

/* Entry `name` of the private directory `parentfd`, created 0700 when missing, with the same
 * checks (`shown` names the parent in messages). */
int ckpt__private_subdir_open(int *fd, int parentfd, const char *name, const char *shown);

/* 1 when the directory open as `fd` is the directory `top` (device and inode) or lies below it
 * (its chain of ".." reaches `top`), else 0; -1 when it cannot be walked (errno set). */
int ckpt__dir_within(int fd, const struct stat *top);

#endif
