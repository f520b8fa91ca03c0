/*
 * Harness smoke test: N ranks create one dataset collectively with parallel HDF5 (MPI-IO driver),
 * each writes its block of rows with a collective transfer, the file is closed and reopened, and
 * every rank reads the WHOLE dataset back and checks every value. Proves that the MPI launcher,
 * the MPI-IO driver and the file system work together here.
 *
 * Usage: smoke_phdf5 OUTDIR [ROWS_PER_RANK] [COLS]
 */
#include "mpi_check.h"
#include "mpickpt.h"

#include <errno.h>
#include <hdf5.h>
#include <string.h>
#include <sys/stat.h>

static double value_at(hsize_t row, hsize_t col)
{
    return (double)row * 1000.0 + (double)col + 0.25;
}

int main(int argc, char **argv)
{
    int rank, size;
    check_mpi_init(&argc, &argv, &rank, &size);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: %s OUTDIR [ROWS_PER_RANK] [COLS]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *dir = argv[1];
    hsize_t rows_per_rank = argc > 2 ? (hsize_t)strtoull(argv[2], NULL, 10) : 1024;
    hsize_t cols = argc > 3 ? (hsize_t)strtoull(argv[3], NULL, 10) : 64;
    if (rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
    MPI_Barrier(MPI_COMM_WORLD);

    char path[4096];
    snprintf(path, sizeof path, "%s/smoke.h5", dir);
    hsize_t dims[2] = { rows_per_rank * (hsize_t)size, cols };

    /* ---- write: collective create, each rank its own hyperslab ---- */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK_MSG(file >= 0, "H5Fcreate %s failed", path);
    hid_t fspace = H5Screate_simple(2, dims, NULL);
    hid_t dset = H5Dcreate2(file, "/values", H5T_NATIVE_DOUBLE, fspace, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT);
    CHECK(dset >= 0);

    hsize_t start[2] = { rows_per_rank * (hsize_t)rank, 0 }, count[2] = { rows_per_rank, cols };
    double *mine = malloc(sizeof(double) * rows_per_rank * cols);
    for (hsize_t r = 0; r < rows_per_rank; r++)
        for (hsize_t c = 0; c < cols; c++)
            mine[r * cols + c] = value_at(start[0] + r, c);
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t mspace = H5Screate_simple(2, count, NULL);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    CHECK(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, mine) >= 0);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(dset);
    CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0); /* MPI_File_sync on every rank */
    CHECK(H5Fclose(file) >= 0);
    free(mine);

    /* ---- read back: every rank reads the whole dataset and checks every value ---- */
    file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK_MSG(file >= 0, "H5Fopen %s failed", path);
    dset = H5Dopen2(file, "/values", H5P_DEFAULT);
    fspace = H5Dget_space(dset);
    hsize_t got[2] = { 0, 0 };
    CHECK_EQ_INT(H5Sget_simple_extent_dims(fspace, got, NULL), 2);
    CHECK_EQ_INT(got[0], dims[0]);
    CHECK_EQ_INT(got[1], dims[1]);
    double *all = malloc(sizeof(double) * dims[0] * dims[1]);
    CHECK(H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, dxpl, all) >= 0);
    long bad = 0;
    for (hsize_t r = 0; r < dims[0]; r++)
        for (hsize_t c = 0; c < dims[1]; c++)
            if (all[r * cols + c] != value_at(r, c) && bad++ < 5)
                fprintf(stderr, "[rank %d] value (%llu,%llu) = %g, expected %g\n", rank,
                        (unsigned long long)r, (unsigned long long)c, all[r * cols + c],
                        value_at(r, c));
    CHECK_MSG(bad == 0, "%ld wrong values", bad);
    free(all);
    H5Sclose(fspace);
    H5Dclose(dset);
    H5Pclose(dxpl);
    H5Fclose(file);
    H5Pclose(fapl);

    /* The library's agreement collective must report that every rank passed. */
    CHECK_OK(ckpt_mpi_agree(MPI_COMM_WORLD, check_failures ? CKPT_EIO : CKPT_OK));
    return check_mpi_done("smoke_phdf5");
}
