/*
 * The worked example of docs/api.md, compiled and run as a test: every rank owns a block of rows
 * of a weight matrix, the job saves, clobbers its state, restores on the same ranks, and checks.
 * Run as: mpirun -np N example_api DIR
 */
#include <mpickpt.h>

#include <stdio.h>
#include <stdlib.h>

#define ROWS 10
#define COLS 4

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *dir = argc > 1 ? argv[1] : ".";

    /* This rank's rows of a ROWS x COLS float32 matrix (uneven split when size does not divide). */
    int64_t r0 = (int64_t)rank * ROWS / size, r1 = (int64_t)(rank + 1) * ROWS / size;
    float *w = malloc(sizeof(float) * (size_t)((r1 - r0) * COLS + 1));
    for (int64_t i = 0; i < (r1 - r0) * COLS; i++)
        w[i] = (float)(r0 * COLS + i);
    float bias[COLS] = { 0.5f, 1.5f, 2.5f, 3.5f }; /* the same on every rank */

    int64_t dims[2] = { ROWS, COLS }, start[2] = { r0, 0 }, count[2] = { r1 - r0, COLS };
    int64_t bdim = COLS;
    ckpt_shape shape, bshape;
    ckpt_slice mine;
    ckpt_shape_init(&shape, 2, dims);
    ckpt_shape_init(&bshape, 1, &bdim);
    ckpt_slice_init(&mine, 2, start, count);

    ckpt_saver *saver = NULL;
    int rc = ckpt_saver_create(&saver, MPI_COMM_WORLD, NULL); /* collective */
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_slice(saver, "model/w", CKPT_FLOAT32, &shape, &mine, w);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_replicated(saver, "model/b", CKPT_FLOAT32, &bshape, bias,
                                       CKPT_REPLICA_PRIMARY);
    /* Registration is local; a failure on one rank shows up at the first collective. */
    char prefix[4096], written[4096];
    snprintf(prefix, sizeof prefix, "%s/ckpt", dir);
    ckpt_save_info info = { .epoch = 3, .step = 300 };
    if (rc == CKPT_OK)
        rc = ckpt_saver_save(saver, prefix, &info, written, sizeof written); /* -> <dir>/ckpt-1 */

    for (int64_t i = 0; i < (r1 - r0) * COLS; i++) /* lose the state */
        w[i] = -1;
    bias[0] = -1;

    ckpt_restore_info got;
    if (rc == CKPT_OK)
        rc = ckpt_saver_restore(saver, written, NULL, &got); /* collective */
    int bad = rc != CKPT_OK || bias[0] != 0.5f || got.epoch != 3 || got.step != 300;
    for (int64_t i = 0; rc == CKPT_OK && i < (r1 - r0) * COLS; i++)
        bad |= w[i] != (float)(r0 * COLS + i);
    if (rc != CKPT_OK) /* the same code and message on every rank */
        fprintf(stderr, "rank %d: %s: %s\n", rank, ckpt_strerror(rc), ckpt_error_last()->message);
    else if (rank == 0)
        printf("saved and restored %s (epoch %lld, step %lld) on %d ranks: %s\n", written,
               (long long)got.epoch, (long long)got.step, size, bad ? "WRONG VALUES" : "ok");
    ckpt_saver_free(saver); /* collective */
    free(w);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
