/*
 * The halt request (`mpickpt halt DIR`, like SCR's scr_halt): a small text file CKPT__HALT_FILE in
 * the state file's directory asking the job to take a checkpoint and stop at the next step boundary
 * once its time has come. Written atomically through lib/fsutil.h, read as untrusted input (regular
 * file only, no link followed, never blocking, at most CKPT__HALT_MAX_BYTES). No MPI: the CLI, the
 * launcher (mpickpt-run) and the library's step-boundary check (mpi/preempt.c) share it.
 *
 * The format, one `key=value` per line after a fixed first line:
 *   mpickpt halt request v1
 *   after=<seconds since the epoch>      the request is due once now >= after (required)
 *   requested=<seconds since the epoch>  when it was made (optional, informative)
 * Anything else (another first line, an unknown or repeated key, a value that is not a decimal
 * integer in 0..10^12, a NUL byte) is CKPT_ECORRUPT with the reason.
 */
#ifndef MPICKPT_HALT_H
#define MPICKPT_HALT_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#define CKPT__HALT_MAX_BYTES 4096
#define CKPT__HALT_MAGIC "mpickpt halt request v1"

typedef struct ckpt__halt {
    int64_t after;     /* due once now >= after (seconds since the epoch) */
    int64_t requested; /* when it was made; -1: not recorded */
} ckpt__halt;

/* Parses the bytes of a halt file; `shown` names it in messages. */
int ckpt__halt_parse(ckpt__halt *out, const uint8_t *buf, size_t len, const char *shown);

/* The file's text for `h` into out (NUL-terminated); *len its length. */
int ckpt__halt_format(char *out, size_t size, size_t *len, const ckpt__halt *h);

/* 1 when `h` is due at time `now`. */
int ckpt__halt_due(const ckpt__halt *h, double now);

/* Reads the halt request of directory dirfd (`shown` in messages): CKPT_OK, CKPT_ENOTFOUND when
 * there is none, CKPT_ECORRUPT when it is not a regular file, too large or malformed. */
int ckpt__halt_read_at(ckpt__halt *out, int dirfd, const char *shown);

/*
 * The directory whose halt request (and state file) counts for checkpoint directory `dir`:
 * `dir`/chief when that exists (a training state's), else `dir`. A chief that is not a real
 * directory (a link, a file) is CKPT_ECORRUPT. *exists (may be NULL) says whether the chosen
 * directory exists (a job that has not started yet has none: not an error).
 */
int ckpt__halt_dir(char *out, size_t size, const char *dir, int *exists);

/*
 * The request that counts for checkpoint directory `dir`: the one in `dir`/chief when that is a
 * directory, else the one in `dir` itself (a training state watches both: a request made before
 * its chief/ existed lands in `dir`). *where (may be NULL) receives the directory it was found in.
 * CKPT_ENOTFOUND when there is none (or no `dir` yet); other errors as ckpt__halt_read_at.
 */
int ckpt__halt_find(ckpt__halt *out, char *where, size_t size, const char *dir);

/* Reads, writes (atomically, replacing any request) and removes the request in directory `dir`
 * itself (the result of ckpt__halt_dir). Removal takes any non-directory entry of that name (a
 * planted link or FIFO is removed, never followed); *removed says whether there was one. */
int ckpt__halt_read(ckpt__halt *out, const char *dir);
int ckpt__halt_write(const char *dir, const ckpt__halt *h);
int ckpt__halt_clear(const char *dir, int *removed);

#endif
