/*
 * One job per checkpoint directory (lib/dirlock.h, docs/operations.md "One job per directory").
 *
 *   mpirun -np N test_dirlock first  DIR SYNC     the job holding DIR
 *   mpirun -np N test_dirlock second DIR SYNC     a second job while `first` runs: refused
 *   mpirun -np N test_dirlock waiter DIR SYNC     a requeued job that waits for `first` to end
 *   mpirun -np N test_dirlock planted OUTDIR      links, FIFOs and directories planted as the lock
 *
 * first, second and waiter are one test, run in this order by tests/scripts/test_dirlock_jobs.py
 * (two mpirun jobs at once, on the same number of ranks N):
 *  - first: a manager on DIR saves steps 11 and 12, writes SYNC/first.ready ("HOST PID" of its
 *    rank 0, the lock's holder) and waits for SYNC/go; then saves 13 and 14 and checks that DIR
 *    lists exactly its own ckpt-1..4 and that each restores its values exactly, on every rank.
 *  - second (started while first waits): ckpt_manager_create is CKPT_EBUSY on every rank, with one
 *    message naming DIR and the holder's host and pid, at once (lock_wait_seconds < 0 ignores
 *    MPICKPT_LOCK_WAIT). Before the lock, it was created, restored first's checkpoint and saved
 *    its own step 901 into DIR (the damage the lock prevents: first's saves 13 and 14 then had
 *    the wrong numbers, or were deleted by second's retention).
 *  - waiter (started while first waits; the driver touches SYNC/go once its rank 0 logged that it
 *    waits): with lock_wait_seconds it is created once first has freed its manager, restores
 *    first's last checkpoint (step 14, which first saved after the waiter started waiting)
 *    exactly, and saves ckpt-5.
 * planted: a FIFO, a symbolic link (to a file outside, which must stay unchanged), a directory and
 * a hard link planted as DIR/lock (and as DIR/chief/lock for a training state) make creation
 * CKPT_ECORRUPT on every rank naming the lock and what it is, without blocking (the watchdog
 * would trip); with the plant removed the same creation succeeds.
 * Against the code before the lock existed, second and planted create their managers and fail.
 */
#include "mpi_check.h"

#include "coll.h"
#include "model.h"
#include "mpickpt.h"
#include "mpickpt/manager.h"
#include "state_copy.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_size;

static ckpt_saver *new_saver(tm_model *m)
{
    ckpt_saver *s = new_saver_on(MPI_COMM_WORLD, CKPT_LAYOUT_PER_RANK, 0, 0);
    CHECK_OK(tm_init(m, g_size, g_rank, g_size, 0));
    register_or_die(m, s);
    return s;
}

static int create_manager(ckpt_manager **mg, ckpt_saver *s, const char *dir, double wait)
{
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    o.max_to_keep = 0; /* keep all: every save of `first` is checked at the end */
    o.lock_wait_seconds = wait;
    *mg = NULL;
    return ckpt_manager_create(mg, s, dir, &o);
}

/* A save of the model at `step` that must be <dir>/ckpt-<counter>. */
static void save_step(ckpt_manager *mg, tm_model *m, int64_t step, int64_t counter,
                      const char *what)
{
    tm_fill(m, step);
    ckpt_manager_save_info si = {0, step, 0, 1};
    char out[4400] = "", want[64];
    if (!coll(ckpt_manager_save(mg, &si, out, sizeof out), CKPT_OK, what))
        return;
    snprintf(want, sizeof want, "/ckpt-%" PRId64, counter);
    CHECK_MSG(ends_with(out, want), "%s: saved %s, expected ...%s", what, out, want);
}

/* Rank 0 writes `text` to path atomically (the driver polls for it). */
static void put_file(const char *path, const char *text)
{
    if (g_rank != 0)
        return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    CHECK_MSG(f && fputs(text, f) >= 0 && fclose(f) == 0 && rename(tmp, path) == 0,
              "cannot write %s", path);
}

/* Rank 0 waits for `path` to exist (sleeps of 20 ms), then every rank goes on. Collective. */
static void wait_for(const char *path)
{
    int ok = 1;
    if (g_rank == 0) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        while (access(path, F_OK) != 0)
            nanosleep(&ts, NULL);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
}

static void role_first(const char *dir, const char *sync)
{
    check_watchdog_s = 600; /* it waits for the driver */
    check_case(1, "first: the job holding %s", dir);
    tm_model m;
    ckpt_saver *s = new_saver(&m);
    ckpt_manager *mg = NULL;
    if (!coll(create_manager(&mg, s, dir, -1), CKPT_OK, "first: ckpt_manager_create")) {
        ckpt_saver_free(s);
        return;
    }
    save_step(mg, &m, 11, 1, "first: save 11");
    save_step(mg, &m, 12, 2, "first: save 12");
    char path[4200], text[512], host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(text, sizeof text, "%s %ld\n", host, (long)getpid());
    snprintf(path, sizeof path, "%s/first.ready", sync);
    put_file(path, text);
    snprintf(path, sizeof path, "%s/go", sync);
    wait_for(path);
    check_case(1, "first: saves after the other jobs started");
    save_step(mg, &m, 13, 3, "first: save 13");
    save_step(mg, &m, 14, 4, "first: save 14");
    /* exactly its own checkpoints, each with its values */
    const ckpt_state *st = test_manager_state(mg);
    CHECK_MSG(st && st->num_entries == 4, "first: %zu checkpoints listed, expected 4",
              st ? st->num_entries : 0);
    for (size_t i = 0; st && i < st->num_entries && i < 4; i++) {
        char want[32], prefix[4400], what[64];
        snprintf(want, sizeof want, "ckpt-%zu", i + 1);
        CHECK_MSG(strcmp(st->entries[i].prefix, want) == 0 && st->entries[i].step == 11 + (int)i,
                  "first: entry %zu is %s at step %" PRId64 ", expected %s at step %zu", i,
                  st->entries[i].prefix, st->entries[i].step, want, 11 + i);
        snprintf(prefix, sizeof prefix, "%s/%s", dir, want);
        snprintf(what, sizeof what, "first: restore %s", want);
        restore_check(s, &m, prefix, 11 + (int64_t)i, CKPT_LAYOUT_PER_RANK, NULL, what);
    }
    ckpt_manager_free(mg); /* releases the directory: the waiter goes on */
    ckpt_saver_free(s);
}

static void role_second(const char *dir, const char *sync)
{
    check_case(1, "second: a job on %s while first holds it", dir);
    char path[4200], host[256] = "", line[512] = "";
    long pid = 0;
    snprintf(path, sizeof path, "%s/first.ready", sync);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f && fgets(line, sizeof line, f) && sscanf(line, "%255s %ld", host, &pid) == 2,
              "cannot read %s", path);
    if (f)
        fclose(f);
    tm_model m;
    ckpt_saver *s = new_saver(&m);
    ckpt_manager *mg = NULL;
    setenv("MPICKPT_LOCK_WAIT", "600", 1); /* lock_wait_seconds < 0 wins: no wait */
    int rc = create_manager(&mg, s, dir, -1);
    if (coll(rc, CKPT_EBUSY, "second: ckpt_manager_create") && g_rank == 0) {
        char want_host[300], want_pid[64];
        snprintf(want_host, sizeof want_host, "host %s", host);
        snprintf(want_pid, sizeof want_pid, "pid %ld", pid);
        CHECK_MSG(strstr(g_msg, dir) != NULL, "second: the message does not name %s: %s", dir,
                  g_msg);
        CHECK_MSG(strstr(g_msg, want_host) && strstr(g_msg, want_pid),
                  "second: the message does not name the holder (%s, %s): %s", want_host, want_pid,
                  g_msg);
        CHECK_MSG(strstr(g_msg, "since ") != NULL, "second: no start time in: %s", g_msg);
        CHECK_MSG(strstr(g_msg, "mpickpt halt") && strstr(g_msg, "MPICKPT_LOCK_WAIT"),
                  "second: no way out in: %s", g_msg);
    }
    CHECK(mg == NULL || rc == CKPT_OK);
    if (rc == CKPT_OK && mg) {
        /* what a second job did before the lock: it goes on in the directory */
        ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
        ckpt_manager_restore_latest(&r, mg);
        save_step(mg, &m, 901, 3, "second (unlocked): its own save");
        ckpt_manager_free(mg);
    }
    ckpt_saver_free(s);
}

static void role_waiter(const char *dir)
{
    check_watchdog_s = 600;
    check_case(1, "waiter: a job that waits for %s", dir);
    tm_model m;
    ckpt_saver *s = new_saver(&m);
    ckpt_manager *mg = NULL;
    if (!coll(create_manager(&mg, s, dir, 300), CKPT_OK, "waiter: ckpt_manager_create")) {
        ckpt_saver_free(s);
        return;
    }
    check_case(1, "waiter: restores what first saved last");
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    tm_zero(&m);
    if (coll(ckpt_manager_restore_latest(&r, mg), CKPT_OK, "waiter: restore")) {
        CHECK_MSG(r.restored && ends_with(r.prefix, "/ckpt-4") && r.step == 14,
                  "waiter: restored %d %s at step %" PRId64 ", expected ckpt-4 at step 14",
                  r.restored, r.prefix, r.step);
        check_values(&m, 14, TM_RESTORED, "waiter: the values of first's last save");
    }
    save_step(mg, &m, 15, 5, "waiter: its own save");
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
}

/* ---- planted ---- */

/* Rank 0 replaces `path` by `kind` ("fifo", "symlink" to `target`, "dir", "hardlink" to target,
 * or "" to remove it). Collective (barrier). */
static void plant(const char *path, const char *kind, const char *target)
{
    if (g_rank == 0) {
        unlink(path);
        rmdir(path);
        int ok = 1;
        if (!strcmp(kind, "fifo"))
            ok = mkfifo(path, 0600) == 0;
        else if (!strcmp(kind, "symlink"))
            ok = symlink(target, path) == 0;
        else if (!strcmp(kind, "dir"))
            ok = mkdir(path, 0700) == 0;
        else if (!strcmp(kind, "hardlink"))
            ok = link(target, path) == 0;
        CHECK_MSG(ok, "cannot plant %s as %s", kind, path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static int victim_intact(const char *path)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return strcmp(buf, "victim's own data\n") == 0;
}

static void role_planted(const char *out)
{
    check_watchdog_s = 120; /* a lock opened as a FIFO without O_NONBLOCK would block here */
    char dir[4096], work[4096], chief[4200], lock[4300], clock[4400], victim[4200];
    snprintf(dir, sizeof dir, "%s/mgr", out);
    snprintf(work, sizeof work, "%s/work", out);
    snprintf(chief, sizeof chief, "%s/chief", work);
    snprintf(lock, sizeof lock, "%s/lock", dir);
    snprintf(clock, sizeof clock, "%s/lock", chief);
    snprintf(victim, sizeof victim, "%s/victim", out);
    make_dir(dir);
    make_dir(chief);
    if (g_rank == 0) {
        FILE *f = fopen(victim, "w");
        CHECK(f && fputs("victim's own data\n", f) >= 0 && fclose(f) == 0);
    }
    tm_model m;
    ckpt_saver *s = new_saver(&m);
    static const struct {
        const char *kind, *shown;
    } plants[] = {{"fifo", "a FIFO"},
                  {"symlink", "a symbolic link"},
                  {"dir", "a directory"},
                  {"hardlink", "hard links"}};
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        for (int training = 0; training < 2; training++) {
            check_case(1, "planted: %s as the lock of %s", plants[i].kind,
                       training ? "a training state" : "a manager");
            const char *path = training ? clock : lock;
            plant(path, plants[i].kind, victim);
            char what[128];
            snprintf(what, sizeof what, "planted %s: %s", plants[i].kind,
                     training ? "ckpt_training_create" : "ckpt_manager_create");
            ckpt_manager *mg = NULL;
            ckpt_training *t = NULL;
            int rc = training ? ckpt_training_create(&t, s, work, NULL)
                              : create_manager(&mg, s, dir, -1);
            if (coll(rc, CKPT_ECORRUPT, what) && g_rank == 0)
                CHECK_MSG(strstr(g_msg, training ? clock : lock) && strstr(g_msg, plants[i].shown),
                          "%s: the message does not name %s and '%s': %s", what, path,
                          plants[i].shown, g_msg);
            CHECK(mg == NULL && t == NULL);
            ckpt_manager_free(mg);
            ckpt_training_free(t);
            if (g_rank == 0) {
                struct stat st;
                CHECK_MSG(victim_intact(victim), "%s: the victim file changed", what);
                CHECK_MSG(lstat(path, &st) == 0, "%s: the plant is gone", what);
            }
            plant(path, "", NULL);
        }
    }
    check_case(1, "planted: removed, the same creations succeed");
    ckpt_manager *mg = NULL;
    ckpt_training *t = NULL;
    coll(create_manager(&mg, s, dir, -1), CKPT_OK, "planted: removed: ckpt_manager_create");
    coll(ckpt_training_create(&t, s, work, NULL), CKPT_OK,
         "planted: removed: ckpt_training_create");
    if (mg)
        save_step(mg, &m, 7, 1, "planted: removed: a save");
    ckpt_training_free(t);
    ckpt_manager_free(mg);
    ckpt_saver_free(s);
}

int main(int argc, char **argv)
{
    check_mpi_init(&argc, &argv, &g_rank, &g_size);
    const char *role = argc > 1 ? argv[1] : "";
    int ok = (argc == 4 &&
              (!strcmp(role, "first") || !strcmp(role, "second") || !strcmp(role, "waiter"))) ||
             (argc == 3 && !strcmp(role, "planted"));
    if (!ok) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_dirlock first|second|waiter DIR SYNC | planted OUTDIR\n");
        MPI_Finalize();
        return 2;
    }
    if (!strcmp(role, "first"))
        role_first(argv[2], argv[3]);
    else if (!strcmp(role, "second"))
        role_second(argv[2], argv[3]);
    else if (!strcmp(role, "waiter"))
        role_waiter(argv[2]);
    else
        role_planted(argv[2]);
    alarm(0);
    char name[64];
    snprintf(name, sizeof name, "test_dirlock %s", role);
    return check_mpi_done(name);
}
