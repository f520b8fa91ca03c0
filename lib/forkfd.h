/*
 * Descriptors closed in children made by fork(): one registry for the process, kept by a
 * pthread_atfork handler. A child shares its parent's open file descriptions; for some that
 * matters beyond the child's own use: a flock lock (lib/dirlock.c: a data-loader worker outliving
 * a killed job would keep the directory locked) or a file held open across its unlink (lib/reaper.c:
 * the child never runs the reaper's thread, so its copies would keep the blocks allocated). The
 * child closes its copies of every registered descriptor at once; the parent's stay open.
 * Not installed. No MPI.
 */
#ifndef MPICKPT_FORKFD_H
#define MPICKPT_FORKFD_H

#include <stddef.h>

/* Registers fds[0..n). Returns 0 (and registers none) when the registry cannot grow: the caller
 * decides (close them now, or keep them unregistered). */
int ckpt__forkfd_add(const int *fds, size_t n);

/* Unregisters fd and closes it, both under the registry's lock (a fork never copies a descriptor
 * being closed, and never finds a registered number that is already another file's). */
void ckpt__forkfd_close(int fd);

#endif
