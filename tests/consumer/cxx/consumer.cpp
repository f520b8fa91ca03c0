// A C++ program built against the installed mpickpt (tests/scripts/install_consumer.sh): every
// rank saves its block of a vector through a manager, then a second saver restores it into other
// buffers; every value is checked on every rank.
//   mpirun -np N consumer_cxx DIR
#include <mpickpt.h>

#include <cstdio>
#include <vector>

static int fail(int rank, const char *what, int rc)
{
    const ckpt_error *e = ckpt_error_last();
    std::printf("rank %d: FAIL: %s: %s (%s)\n", rank, what, ckpt_strerror(rc),
                e && e->message ? e->message : "");
    return 1;
}

int main(int argc, char **argv)
{
    int provided = 0, rank = 0, size = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int bad = argc != 2;
    const char *dir = argc == 2 ? argv[1] : "";
    const int64_t n = 6, gdim = n * size, start = n * rank;
    std::vector<double> mine(n), back(n, -1.0);
    for (int64_t i = 0; i < n; i++)
        mine[i] = rank * 100 + i + 0.5;
    ckpt_shape shape;
    ckpt_slice slice;
    ckpt_shape_init(&shape, 1, &gdim);
    ckpt_slice_init(&slice, 1, &start, &n);

    for (int pass = 0; pass < 2 && !bad; pass++) {
        ckpt_saver *s = nullptr;
        ckpt_manager *m = nullptr;
        int rc = ckpt_saver_create(&s, MPI_COMM_WORLD, nullptr);
        if (rc == CKPT_OK)
            rc = ckpt_saver_add_slice(s, "w", CKPT_FLOAT64, &shape, &slice,
                                      pass == 0 ? mine.data() : back.data());
        if (rc == CKPT_OK)
            rc = ckpt_manager_create(&m, s, dir, nullptr);
        if (rc == CKPT_OK && pass == 0) {
            ckpt_manager_save_info info = {1, 7, 0, 0};
            if ((rc = ckpt_manager_save(m, &info, nullptr, 0)) != CKPT_OK)
                bad += fail(rank, "save", rc);
        } else if (rc == CKPT_OK) {
            ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
            if ((rc = ckpt_manager_restore_latest(&r, m)) != CKPT_OK)
                bad += fail(rank, "restore", rc);
            else if (!r.restored || r.epoch != 1 || r.step != 7 || back != mine)
                bad += fail(rank, "restored values", CKPT_OK);
        } else {
            bad += fail(rank, "create", rc);
        }
        ckpt_manager_free(m);
        ckpt_saver_free(s);
    }
    int total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf("consumer_cxx: mpickpt %s, saved and restored on %d ranks: %s\n",
                    ckpt_version(), size, total ? "FAILED" : "ok");
    MPI_Finalize();
    return total != 0;
}
