/* Internal: the index's on-disk container, load and store (lib/index.c). Also brings in the other
 * modules of the index, so that one include serves their users: validation (validate.h), the
 * chief's merge (merge.h) and a writer's fragment (fragment.h). */
#ifndef MPICKPT_INDEX_H
#define MPICKPT_INDEX_H

#include "fragment.h"
#include "fsutil.h"
#include "internal.h"
#include "merge.h"
#include "mpickpt.pb-c.h"
#include "mpickpt/checkpoint.h"
#include "mpickpt/slice.h"
#include "validate.h"

#include <stdint.h>

/* Container: magic[8] | u32 LE format version | u32 LE flags (0) | u64 LE payload length |
 * payload (protobuf) | u32 LE CRC-32C of everything before it. See docs/format.md. */
#define CKPT__MAGIC_INDEX "MPCKIDX\x01"
#define CKPT__MAGIC_STATE "MPCKSTA\x01"
#define CKPT__CONTAINER_HEAD 24u
#define CKPT__CONTAINER_TAIL 4u
/* Version of the container (magic, version, length, payload, crc32c): unchanged since format 1.
 * What the payload may hold is versioned by Header.format_version (CKPT_FORMAT_VERSION). */
#define CKPT__CONTAINER_VERSION 1u

/* Block size of the per-block checksums the saver records for pieces larger than one block. */
#define CKPT__CRC_BLOCK ((size_t)1 << 20)

/* Format version an index needs: 2 when any piece is packed or has block checksums (format 2's
 * additions), else 1, so that such checkpoints stay readable by format-1 readers. */
uint32_t ckpt__index_format_version(const Mpickpt__Index *idx);
/* Upper bound on an index or state file we agree to load (a sanity limit, not a format one). */
#define CKPT__MAX_INDEX_BYTES ((size_t)1 << 32)
/* The same for a state file: a few hundred bytes per checkpoint it lists. */
#define CKPT__MAX_STATE_BYTES ((size_t)64 << 20)

/* Packs `msg` into a malloc'd container. */
int ckpt__container_pack(uint8_t **out, size_t *len, const char magic[8],
                         const ProtobufCMessage *msg);

/* Checks a container (magic, version, length, CRC) and points *payload into `buf`.
 * CKPT_EVERSION for a newer format version; CKPT_ECORRUPT otherwise; messages name `path`. */
int ckpt__container_open(const uint8_t **payload, size_t *plen, const uint8_t *buf, size_t len,
                         const char magic[8], const char *path);

/* Reads, checks, unpacks and validates an index file. Free with mpickpt__index__free_unpacked. */
int ckpt__index_load(Mpickpt__Index **out, const char *path);

/* Reads an index file and checks its container: *payload (inside *buf, which the caller frees)
 * holds the protobuf message, *plen bytes. Errors as ckpt__index_load's. */
int ckpt__index_read(uint8_t **buf, const uint8_t **payload, size_t *plen, const char *path);
/* The same for entry `name` of directory dirfd; `dir` names that directory in messages. */
int ckpt__index_read_at(uint8_t **buf, const uint8_t **payload, size_t *plen, int dirfd,
                        const char *name, const char *dir);

/* Unpacks an index payload with `alloc` (NULL: malloc) and, with `validate`, validates it;
 * messages name `path`. */
int ckpt__index_parse(Mpickpt__Index **out, const uint8_t *payload, size_t plen, const char *path,
                      ProtobufCAllocator *alloc, int validate);

/* Validates and writes an index durably (temp name, fsync, rename, fsync dir). */
int ckpt__index_store(const Mpickpt__Index *idx, const char *path);

/* The same for an index that ckpt__index_merge() just validated (its header set afterwards only
 * changes the timestamp): skips the second validation, which costs as much as the merge. */
int ckpt__index_store_merged(const Mpickpt__Index *idx, const char *path);
/* The same into entry `name` of directory dirfd (`shown` names the directory in messages);
 * *renamed as ckpt__write_file_atomic_at()'s. Without `replace`, an existing `name` (of any kind)
 * is CKPT_EEXISTS and stays as it is (ckpt__write_file_new_at). */
int ckpt__index_store_merged_at(const Mpickpt__Index *idx, int dirfd, const char *name,
                                const char *shown, int *renamed, int replace);

/* Fills a slice from a piece's (start, count) arrays; CKPT_ECORRUPT when lengths differ from nd. */
int ckpt__piece_slice(ckpt_slice *out, const Mpickpt__Piece *p, int nd);
int ckpt__piece_dataset_slice(ckpt_slice *out, const Mpickpt__Piece *p, int nd);

/* The state file's payload, with (container = 1) or without the on-disk container; the MPI layer
 * broadcasts the bare payload. */
struct ckpt_state;
int ckpt__state_pack(uint8_t **out, size_t *len, const struct ckpt_state *st, int container);
int ckpt__state_unpack(struct ckpt_state **out, const uint8_t *buf, size_t len, const char *what);
/* Writes `<dir>/checkpoint` atomically (temp name, fsync, rename, fsync dir): the manager's chief
 * (and the tests' fixtures); CKPT_EINVAL, nothing written, for a state a reader would refuse.
 * The deprecated public ckpt_state_write() wraps it. */
int ckpt__state_write(const struct ckpt_state *st, const char *dir);

/* The committed checkpoints "<name>-<N>.index" of dir with N > after (and a header that says N),
 * as state entries sorted by counter: the checkpoints a manager committed after what its state
 * file lists. No other index of the directory is opened. */
int ckpt__state_scan_newer(struct ckpt_state **out, const char *dir, const char *name,
                           int64_t after);

/* ckpt_gc() without the directory's lock (its caller, the manager or a cache, holds it); with
 * refuse_foreign 0, a directory that is not recognisably a checkpoint directory is left alone
 * quietly (CKPT_OK, nothing removed) instead of being an error. */
int ckpt__gc(const char *dir, int dry_run, void (*cb)(const char *path, const char *why,
                                                      void *payload),
             void *payload, size_t *removed, int refuse_foreign);

/* ckpt_gc() with the lock of the directory whose state file it serves (lib/dirlock.h: dir's own,
 * or its chief/'s when dir is a training state's work directory) held while it removes anything,
 * waiting up to lock_wait seconds for it (CKPT_EBUSY naming the holder then); dry_run takes no
 * lock. */
int ckpt__gc_locked(const char *dir, int dry_run, void (*cb)(const char *path, const char *why,
                                                             void *payload),
                    void *payload, size_t *removed, double lock_wait);

/* delete_backup of a training-state directory <work>: every checkpoint, the state file, metrics
 * and garbage of <work>/chief, the workertemp_<r> of <work>, then chief/ and <work> themselves
 * unless something mpickpt did not write is left in them (a warning, not an error). */
int ckpt__remove_backup_dir(const char *work);

/* For the MPI restore: a reader over an index payload (ckpt__index_read) that the chief read, or
 * a rank's share of it (lib/share.h). With `check` CKPT__READER_CHECK_ALL, validates it and
 * checks its data files as ckpt_reader_open() does; with CKPT__READER_CHECK_INDEX validates the
 * index only (the cache level: the files are on several nodes); with 0 trusts it (the other
 * ranks: the chief's check is agreed). The payload is not kept. Its reads take a piece's recorded
 * file offset when the index has one (Piece.file_offset): a pread of the data file opened by
 * descriptor, no HDF5, the CRC-32C checking every byte; how the dataset is stored is then not
 * looked at (ckpt_reader_verify and ckpt_reader_check still go through HDF5). */
enum { CKPT__READER_CHECK_INDEX = 1, CKPT__READER_CHECK_ALL = 2 };
int ckpt__reader_open_payload(ckpt_reader **out, const char *prefix, const uint8_t *payload,
                              size_t plen, int check);
/* The cache level's restore: data files missing from the reader's directory are opened from
 * `dirfd` instead (sparse copies of the byte ranges fetched from other nodes); the reader owns
 * the descriptor. */
void ckpt__reader_set_fetched(ckpt_reader *r, int dirfd);

/* The cooperative restore (mpi/restore_coop.c): piece j of tensor ti of the reader's index read
 * whole, once, chunk by chunk into bufs[0], bufs[1], bufs[0], ... (`chunk` bytes each, a multiple
 * of the piece's row); each chunk is handed to cb(arg, bytes, offset in the piece, length) as soon
 * as it is read (the callback may still be sending the previous chunk from the other buffer: it
 * must be done with a buffer when it returns from the chunk after it). Returns
 * CKPT_OK only when every byte matched the piece's CRC-32C (checked at the end: the chunks handed
 * out before a mismatch are not to be trusted); *delivered counts the chunks handed out. */
int ckpt__reader_piece_stream(ckpt_reader *r, size_t ti, size_t j, void *bufs[2], uint64_t chunk,
                              void (*cb)(void *arg, const void *bytes, uint64_t off, uint64_t len),
                              void *arg, uint64_t *delivered);
const Mpickpt__Index *ckpt__reader_index(const ckpt_reader *r);

#endif
