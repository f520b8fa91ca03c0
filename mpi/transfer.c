/*
 * Byte transfers of any size (the index fragments of a save, a restore's wants and shares).
 * MPI counts are `int`: a gatherv of more than 2 GiB overflows them (ADIOS2 met it at 56k ranks).
 * Here every size is 64-bit and a transfer larger than `chunk` bytes (1 GiB, or
 * MPICKPT_MPI_CHUNK_BYTES decided by rank 0: tests make it tiny to run the chunked paths) is
 * carried in chunks: point-to-point for a gather, repeated broadcasts for a broadcast.
 *
 * Contract of ckpt__gather_bytes(): one gather of {status, length} at the root, one broadcast of
 * the root's verdict, then the bytes (one MPI_Gatherv when they fit, else every rank's bytes
 * point-to-point in chunks). When any rank's status is not CKPT_OK, or the root cannot hold the
 * total, every rank returns the same error through ckpt_mpi_agree() (the failing rank's message),
 * with nothing transferred: the verdict replaces a separate agreement.
 * ckpt__gather_bytes_quiet() is the same gather without that agreement (a flag instead), for the
 * hierarchical merge's two steps, whose ranks meet again only at the save's pre-commit vote.
 */
#include "mpi_internal.h"

#include "mpickpt/collective.h"

#include <stdlib.h>
#include <string.h>

/* Tags of the chunked point-to-point transfers: one communicator never has two in flight. */
#define TAG_GATHER 0x6d70

static int chunk_count(uint64_t len, uint64_t chunk, uint64_t off)
{
    uint64_t n = len - off < chunk ? len - off : chunk;
    return (int)n;
}

int ckpt__bcast_bytes(MPI_Comm comm, int root, void *buf, uint64_t len, uint64_t chunk)
{
    for (uint64_t off = 0; off < len; off += chunk)
        if (MPI_Bcast((uint8_t *)buf + off, chunk_count(len, chunk, off), MPI_BYTE, root, comm) !=
            MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Bcast of %llu bytes failed",
                               (unsigned long long)len);
    return CKPT_OK;
}

int ckpt__send_bytes(MPI_Comm comm, int dest, int tag, const void *buf, uint64_t len,
                     uint64_t chunk)
{
    for (uint64_t off = 0; off < len; off += chunk)
        if (MPI_Send((const uint8_t *)buf + off, chunk_count(len, chunk, off), MPI_BYTE, dest, tag,
                     comm) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Send of %llu bytes to rank %d failed",
                               (unsigned long long)len, dest);
    return CKPT_OK;
}

int ckpt__recv_bytes(MPI_Comm comm, int src, int tag, void *buf, uint64_t len, uint64_t chunk)
{
    for (uint64_t off = 0; off < len; off += chunk)
        if (MPI_Recv((uint8_t *)buf + off, chunk_count(len, chunk, off), MPI_BYTE, src, tag, comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Recv of %llu bytes from rank %d failed",
                               (unsigned long long)len, src);
    return CKPT_OK;
}

int ckpt__isend_bytes(MPI_Comm comm, int peer, int tag, const void *buf, uint64_t len,
                      uint64_t chunk, MPI_Request *reqs, size_t *q, const char *what)
{
    for (uint64_t off = 0; off < len; off += chunk)
        if (MPI_Isend((const uint8_t *)buf + off, chunk_count(len, chunk, off), MPI_BYTE, peer,
                      tag, comm, &reqs[(*q)++]) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Isend %s failed", what);
    return CKPT_OK;
}

int ckpt__irecv_bytes(MPI_Comm comm, int peer, int tag, void *buf, uint64_t len, uint64_t chunk,
                      MPI_Request *reqs, size_t *q, const char *what)
{
    for (uint64_t off = 0; off < len; off += chunk)
        if (MPI_Irecv((uint8_t *)buf + off, chunk_count(len, chunk, off), MPI_BYTE, peer, tag,
                      comm, &reqs[(*q)++]) != MPI_SUCCESS)
            return ckpt__error(CKPT_EMPI, "MPI_Irecv %s failed", what);
    return CKPT_OK;
}

/* The gather of both flavours: `failed` NULL agrees on a failure (ckpt__gather_bytes), else
 * sets *failed and returns this rank's own new error only (ckpt__gather_bytes_quiet). */
static int gather_core(MPI_Comm comm, int root, int local, const void *buf, uint64_t len,
                       uint64_t chunk, int64_t *scratch, uint8_t **all, uint64_t **offs,
                       int *failed)
{
    int status = local;
    *all = NULL;
    *offs = NULL;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (chunk == 0 || chunk > INT32_MAX)
        chunk = CKPT__MPI_CHUNK_DEFAULT;
    int64_t mine[2] = { local, local == CKPT_OK ? (int64_t)len : 0 };
    /* {code, failing rank, 1 = point-to-point} */
    int64_t verdict[3] = { CKPT_OK, -1, 0 };
    uint8_t *data = NULL;
    uint64_t *off = NULL;
    if (MPI_Gather(mine, 2, MPI_INT64_T, scratch, 2, MPI_INT64_T, root, comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Gather of statuses failed");
    if (rank == root) {
        uint64_t total = 0, largest = 0;
        for (int r = 0; r < size && verdict[0] == CKPT_OK; r++)
            if (scratch[2 * r] != CKPT_OK)
                verdict[0] = scratch[2 * r], verdict[1] = r;
        if (verdict[0] == CKPT_OK && local != CKPT_OK)
            verdict[0] = local, verdict[1] = rank;
        if (verdict[0] == CKPT_OK) {
            off = malloc(((size_t)size + 1) * sizeof *off);
            for (int r = 0; off && r < size; r++) {
                uint64_t n = (uint64_t)scratch[2 * r + 1];
                off[r] = total;
                total += n;
                largest = n > largest ? n : largest;
            }
            if (off)
                off[size] = total;
            if (!off || !(data = malloc(total ? (size_t)total : 1))) {
                local = ckpt__error(CKPT_ENOMEM, "rank %d: cannot hold %llu gathered bytes",
                                    rank, (unsigned long long)total);
                verdict[0] = local, verdict[1] = rank;
            }
            verdict[2] = total > chunk || largest > INT32_MAX;
        }
    }
    if (MPI_Bcast(verdict, 3, MPI_INT64_T, root, comm) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the gather's verdict failed");
    if (verdict[0] != CKPT_OK) {
        free(data);
        free(off);
        if (failed) { /* quiet: the caller's vote carries the failing rank's message */
            *failed = 1;
            return local == status ? CKPT_OK : local;
        }
        /* every rank is here: the failing rank's own message for everybody */
        int rc = ckpt_mpi_agree(comm, local);
        return rc != CKPT_OK ? rc : ckpt__error((int)verdict[0], "rank %d failed",
                                                (int)verdict[1]);
    }
    int rc = CKPT_OK;
    if (!verdict[2]) {
        /* the counts fit: scratch is reused for them (2 x int64 per rank >= 2 x int) */
        int *counts = (int *)scratch, *displs = counts + size;
        if (rank == root)
            for (int r = 0; r < size; r++) {
                counts[r] = (int)(off[r + 1] - off[r]);
                displs[r] = (int)off[r];
            }
        if (MPI_Gatherv(buf, (int)mine[1], MPI_BYTE, data, counts, displs, MPI_BYTE, root,
                        comm) != MPI_SUCCESS)
            rc = ckpt__error(CKPT_EMPI, "MPI_Gatherv of %llu bytes failed",
                             (unsigned long long)(off ? off[size] : len));
    } else if (rank != root) {
        rc = ckpt__send_bytes(comm, root, TAG_GATHER, buf, (uint64_t)mine[1], chunk);
    } else {
        for (int r = 0; r < size && rc == CKPT_OK; r++) {
            if (r == root && off[r + 1] > off[r])
                memcpy(data + off[r], buf, (size_t)(off[r + 1] - off[r]));
            else
                rc = ckpt__recv_bytes(comm, r, TAG_GATHER, data + off[r], off[r + 1] - off[r],
                                      chunk);
        }
    }
    if (rc != CKPT_OK || rank != root) {
        free(data);
        free(off);
        return rc;
    }
    *all = data;
    *offs = off;
    return CKPT_OK;
}

int ckpt__gather_bytes(MPI_Comm comm, int root, int local, const void *buf, uint64_t len,
                       uint64_t chunk, int64_t *scratch, uint8_t **all, uint64_t **offs)
{
    return gather_core(comm, root, local, buf, len, chunk, scratch, all, offs, NULL);
}

int ckpt__gather_bytes_quiet(MPI_Comm comm, int root, int status, const void *buf, uint64_t len,
                             uint64_t chunk, int64_t *scratch, uint8_t **all, uint64_t **offs,
                             int *failed)
{
    *failed = 0;
    return gather_core(comm, root, status, buf, len, chunk, scratch, all, offs, failed);
}
