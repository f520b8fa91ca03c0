/*
 * Writes one small checkpoint at exactly PREFIX with the collective saver (sync mode): a test then
 * controls every byte of the name the chief logs in metrics.jsonl
 * (tests/scripts/test_cli_hostile.py uses quotes, backslashes and bytes that are not UTF-8).
 * Run as: mpirun -np N write_prefix PREFIX
 * Prints "wrote PREFIX on N ranks" on rank 0 and exits 0, or prints the library's error and
 * exits 1.
 */
#include <mpickpt.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: write_prefix PREFIX\n");
        MPI_Finalize();
        return 2;
    }
    int64_t dim = 4, row[1] = {rank}, one[1] = {1};
    int64_t dims[1] = {size};
    float v = (float)rank, bias[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    ckpt_shape shape, bshape;
    ckpt_slice mine;
    ckpt_shape_init(&shape, 1, dims);
    ckpt_shape_init(&bshape, 1, &dim);
    ckpt_slice_init(&mine, 1, row, one);

    ckpt_saver *saver = NULL;
    int rc = ckpt_saver_create(&saver, MPI_COMM_WORLD, NULL); /* collective */
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_slice(saver, "v", CKPT_FLOAT32, &shape, &mine, &v);
    if (rc == CKPT_OK)
        rc = ckpt_saver_add_replicated(saver, "b", CKPT_FLOAT32, &bshape, bias,
                                       CKPT_REPLICA_PRIMARY);
    ckpt_save_info info = {.epoch = 1, .step = 7};
    if (rc == CKPT_OK)
        rc = ckpt_saver_write(saver, argv[1], &info); /* collective */
    if (rc != CKPT_OK)
        fprintf(stderr, "rank %d: %s: %s\n", rank, ckpt_strerror(rc), ckpt_error_last()->message);
    else if (rank == 0)
        printf("wrote %s on %d ranks\n", argv[1], size);
    ckpt_saver_free(saver); /* collective */
    MPI_Finalize();
    return rc == CKPT_OK ? 0 : 1;
}
