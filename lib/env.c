/*
 * Strict parsing of the MPICKPT_* environment variables, and the table of them all
 * (ckpt__settings[]: `mpickpt config`; docs/configuration.md lists the same). A value
 * that does not parse is an error naming the variable and the value, never silently ignored: a
 * typo in a batch script must not quietly change how a job checkpoints. An unset or empty
 * variable means the default.
 */
#include "env.h"

#include "levels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int ckpt__env_bool(int *out, const char *name, int dflt)
{
    static const char *const yes[] = { "1", "true", "yes", "on" };
    static const char *const no[] = { "0", "false", "no", "off" };
    const char *v = env_value(name);
    *out = dflt;
    if (!v)
        return CKPT_OK;
    for (size_t i = 0; i < CKPT__ARRAY_LEN(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = 1;
            return CKPT_OK;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = 0;
            return CKPT_OK;
        }
    }
    return ckpt__error(CKPT_EINVAL, "%s='%.100s' is not a boolean (use 1 or 0)", name, v);
}

int ckpt__parse_int64(int64_t *out, const char *s, int64_t lo, int64_t hi)
{
    /* strtoll alone would take " 3", "+3" and "3\n": a value that is not what was meant to be
     * typed is refused, not read as something close to it */
    const char *d = s[0] == '-' ? s + 1 : s;
    if (*d < '0' || *d > '9')
        return -1;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || *end || n < lo || n > hi)
        return -1;
    *out = (int64_t)n;
    return 0;
}

int ckpt__env_int64(int64_t *out, const char *name, int64_t lo, int64_t hi, int64_t dflt)
{
    const char *v = env_value(name);
    *out = dflt;
    if (!v)
        return CKPT_OK;
    int64_t n;
    if (ckpt__parse_int64(&n, v, lo, hi) != 0)
        return ckpt__error(CKPT_EINVAL, "%s='%.100s' is not an integer in %lld..%lld (digits only, "
                                        "no spaces or signs)",
                           name, v, (long long)lo, (long long)hi);
    *out = n;
    return CKPT_OK;
}

int ckpt__env_choice(int *out, const char *name, const char *const *words, const int *values,
                     size_t n, int dflt)
{
    const char *v = env_value(name);
    *out = dflt;
    if (!v)
        return CKPT_OK;
    char list[256] = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v, words[i]) == 0) {
            *out = values[i];
            return CKPT_OK;
        }
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", words[i]);
    }
    return ckpt__error(CKPT_EINVAL, "%s='%.100s' is not one of: %s", name, v, list);
}

static const char *const log_words[] = { "error", "warn", "warning", "info", "debug" };
static const int log_values[] = { CKPT_LOG_ERROR, CKPT_LOG_WARN, CKPT_LOG_WARN, CKPT_LOG_INFO,
                                  CKPT_LOG_DEBUG };

int ckpt__log_level_parse(int *out)
{
    const char *v = env_value("MPICKPT_LOG");
    *out = CKPT_LOG_WARN;
    for (size_t i = 0; v && i < CKPT__ARRAY_LEN(log_words); i++)
        if (strcmp(v, log_words[i]) == 0) {
            *out = log_values[i];
            return 0;
        }
    return v ? -1 : 0;
}

int ckpt__env_log_level(int *out)
{
    return ckpt__env_choice(out, "MPICKPT_LOG", log_words, log_values, CKPT__ARRAY_LEN(log_words),
                            CKPT_LOG_WARN);
}

/* Parses MPICKPT_FAULT strictly: "<rank>:<step>" or "<rank>:<step>:kill|hold", step one of the
 * protocol's. CKPT_OK with *target = -1 when unset; *mode 0 (fail), 1 (kill) or 2 (hold). */
int ckpt__fault_spec(int *target, char *step, size_t step_size, int *mode)
{
    /* "node": the per-node layout's node file (mpi/save_node.c); "node-merge": a leader's merge
     * of its node's fragments (the hierarchical merge, mpi/save_protocol.c); "partner": a rank
     * before it sends its partner copies (the cache level, mpi/save_levels.c); "drain": a rank
     * as a drain to the persistent directory starts (mpi/cache_drain.c); "fetch": a rank as
     * if its buffers for a cache restore's fetch could not be allocated (mpi/restore_cache.c);
     * "rebuild": a node leader as if it could not map the files it sends in a rebuild
     * (mpi/cache_rebuild.c); "share": a restoring rank (not the chief) as if its share of the
     * index could not be held, "coop": a rank as if the index of its list of forwarded pieces
     * could not be opened, "coop-list" and "coop-buf": a rank as if its list, or its chunk
     * buffers, could not be allocated, "coop-send": a rank's sends of forwarded chunks fail at
     * the first try, "share-send": the chief's send of that rank's share fails after it went
     * (the cooperative restore, mpi/restore.c); "mgr-hook" (hold only): a
     * manager's commit hook, held running until the manager is freed (mpi/manager_life.c); no
     * effect where they do not run */
    static const char *const steps[] = { "plan",    "write", "agree",   "merge", "commit",
                                         "node",    "node-merge", "partner", "drain", "fetch",
                                         "rebuild", "share", "coop",    "coop-list",
                                         "coop-buf", "coop-send", "share-send",
                                         "mgr-hook" };
    const char *spec = getenv("MPICKPT_FAULT");
    *target = -1;
    *mode = 0;
    step[0] = '\0';
    if (!spec || !*spec)
        return CKPT_OK;
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':'), *end = NULL;
    int ok = n > 0 && (size_t)n < sizeof buf && colon && colon != buf;
    long t = -1;
    if (ok) {
        *colon = '\0';
        errno = 0;
        t = strtol(buf, &end, 10);
        ok = !errno && *end == '\0' && t >= 0 && t <= 0x7fffffffL && buf[0] != '-' &&
             buf[0] != '+' && buf[0] != ' ';
    }
    char *what = ok ? colon + 1 : NULL, *how = what ? strchr(what, ':') : NULL;
    if (how) {
        *how++ = '\0';
        ok = strcmp(how, "kill") == 0 || strcmp(how, "hold") == 0;
    }
    int known = 0;
    for (size_t i = 0; ok && i < CKPT__ARRAY_LEN(steps); i++)
        known |= strcmp(what, steps[i]) == 0;
    if (!ok || !known)
        return ckpt__error(CKPT_EINVAL,
                           "MPICKPT_FAULT='%.100s' is not <rank>:<step>[:kill|:hold] with a step "
                           "among plan, write, agree, merge, commit, node, node-merge, partner, drain, "
                           "fetch, rebuild, share, coop, coop-list, coop-buf, coop-send, "
                           "share-send",
                           spec);
    *target = (int)t;
    *mode = !how ? 0 : strcmp(how, "kill") == 0 ? 1 : 2;
    snprintf(step, step_size, "%s", what);
    return CKPT_OK;
}

/* ---- the table ------------------------------------------------------------------------------ */

static const char *const w_layout[] = { "per-rank", "shared", "per-node", NULL };
static const char *const w_hier[] = { "auto", "0", "1", "off", "on", NULL };
static const char *const w_redundancy[] = { "none", "partner", NULL };
static const char *const w_check_replicas[] = { "first", "every", "off", NULL };
static const char *const w_replica_mismatch[] = { "error", "warn", NULL };
static const char *const w_retention[] = { "background", "inline", NULL };
static const char *const w_log[] = { "error", "warn", "warning", "info", "debug", NULL };

#define COLLECTIVE "collective (rank 0 decides)"
#define LOCAL "local (every rank)"

const ckpt__setting ckpt__settings[] = {
    { .name = "MPICKPT_LAYOUT", .kind = CKPT__SETTING_CHOICE, .words = w_layout,
      .dflt = "per-node", .scope = COLLECTIVE, .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "data files: one per rank, one shared (MPI-IO) or one per node; unset: "
                 "per-node, but per-rank when every rank is on one node and "
                 "MPICKPT_RANKS_PER_NODE is unset; ckpt_saver_options.layout wins",
      .library = 1 },
    { .name = "MPICKPT_ASYNC", .kind = CKPT__SETTING_BOOL, .dflt = "0", .scope = COLLECTIVE,
      .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "asynchronous saves even when the options leave them off", .library = 1 },
    { .name = "MPICKPT_RESERVE", .kind = CKPT__SETTING_BOOL, .dflt = "1", .scope = COLLECTIVE,
      .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "reserve each rank's bytes with fallocate before a save", .library = 1 },
    { .name = "MPICKPT_HIER_MERGE", .kind = CKPT__SETTING_CHOICE, .words = w_hier,
      .dflt = "auto", .scope = COLLECTIVE, .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "per-node layout: node leaders merge their ranks' index fragments",
      .library = 1 },
    { .name = "MPICKPT_CHECK_REPLICAS", .kind = CKPT__SETTING_CHOICE, .words = w_check_replicas,
      .dflt = "first", .scope = COLLECTIVE, .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "compare every rank's copy of each replicated tensor (CRC-32C) at the first "
                 "save of a plan, at every save, or never; ckpt_saver_options.check_replicas wins",
      .library = 1 },
    { .name = "MPICKPT_REPLICA_MISMATCH", .kind = CKPT__SETTING_CHOICE,
      .words = w_replica_mismatch, .dflt = "error", .scope = COLLECTIVE,
      .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "replicated copies that differ: an error naming tensors and ranks, or a warning "
                 "(the writing rank's copy is saved); ckpt_saver_options.replica_mismatch wins",
      .library = 1 },
    { .name = "MPICKPT_PACK_BYTES", .kind = CKPT__SETTING_INT, .lo = 0, .hi = (int64_t)1 << 40,
      .dflt = "1048576", .scope = COLLECTIVE, .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "pieces up to this size are packed into one dataset per rank (0: never); "
                 "pack_max_bytes wins",
      .library = 1 },
    { .name = "MPICKPT_RANKS_PER_NODE", .kind = CKPT__SETTING_INT, .lo = 1, .hi = INT32_MAX,
      .dflt = "(unset: the ranks that share memory)", .scope = COLLECTIVE,
      .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "nodes of k consecutive ranks (simulated nodes for tests and benchmarks)",
      .library = 1 },
    { .name = "MPICKPT_MPI_CHUNK_BYTES", .kind = CKPT__SETTING_INT, .lo = 1,
      .hi = (int64_t)1 << 30, .dflt = "1073741824", .scope = COLLECTIVE,
      .read_by = "ckpt_saver_create (mpi/saver.c)",
      .meaning = "largest single MPI transfer of fragments, requests and shares", .library = 1 },
    { .name = "MPICKPT_RESTORE_COOPERATIVE", .kind = CKPT__SETTING_BOOL, .dflt = "1",
      .scope = COLLECTIVE, .read_by = "every restore (mpi/restore.c, rank 0)",
      .meaning = "a stored piece several ranks restore (a replicated tensor, an N->M reshard) "
                 "is read by one of them and forwarded over MPI; 0: every rank reads all it needs",
      .library = 1 },
    { .name = "MPICKPT_LOG", .kind = CKPT__SETTING_CHOICE, .words = w_log,
      .dflt = "warn (mpickpt-demo and Python: info)", .scope = LOCAL,
      .read_by = "the default log sink (lib/log.c); checked by ckpt_saver_create",
      .meaning = "level of the library's messages on stderr; info adds the summary lines",
      .library = 1 },
    { .name = "MPICKPT_FAULT", .kind = CKPT__SETTING_FAULT, .dflt = "(unset: no fault)",
      .scope = LOCAL, .read_by = "every save (mpi/fault.c); checked by ckpt_saver_create",
      .meaning = "fault injection for tests and drills: <rank>:<step>[:kill|:hold]",
      .library = 1 },
    { .name = "MPICKPT_DEADLINE", .kind = CKPT__SETTING_TIME,
      .dflt = "(unset: SLURM_JOB_END_TIME, else none)", .scope = LOCAL,
      .read_by = "ckpt_preempt_set_deadline(-1, ...) (mpi/preempt.c), "
                 "mpickpt.preemption.install",
      .meaning = "preemption deadline, seconds since the epoch", .library = 1 },
    { .name = "MPICKPT_CACHE_DIR", .kind = CKPT__SETTING_PATTERN,
      .dflt = "(unset: no cache level)", .scope = COLLECTIVE,
      .read_by = "ckpt_manager_create (mpi/manager.c)",
      .meaning = "node-local cache directory pattern (%n: the node); cache_dir wins",
      .library = 1 },
    { .name = "MPICKPT_REDUNDANCY", .kind = CKPT__SETTING_CHOICE, .words = w_redundancy,
      .dflt = "none", .scope = COLLECTIVE, .read_by = "ckpt_manager_create (mpi/manager.c)",
      .meaning = "cache level: also copy each node's files to a partner node; redundancy wins",
      .library = 1 },
    { .name = "MPICKPT_PERSIST_EVERY", .kind = CKPT__SETTING_INT, .lo = 1, .hi = INT32_MAX,
      .dflt = "10", .scope = COLLECTIVE, .read_by = "ckpt_manager_create (mpi/manager.c)",
      .meaning = "cache level: every K-th checkpoint also goes to the persistent directory",
      .library = 1 },
    { .name = "MPICKPT_CACHE_KEEP", .kind = CKPT__SETTING_INT, .lo = 1, .hi = INT32_MAX,
      .dflt = "2", .scope = COLLECTIVE, .read_by = "ckpt_manager_create (mpi/manager.c)",
      .meaning = "cache level: checkpoints kept in the cache", .library = 1 },
    { .name = "MPICKPT_FAILURE_GROUP", .kind = CKPT__SETTING_TEXT,
      .dflt = "(unset: none)", .scope = LOCAL, .read_by = "ckpt_manager_create (mpi/manager.c)",
      .meaning = "this node's failure group (a rack): partners are in another",
      .library = 1 },
    { .name = "MPICKPT_LOCK_WAIT", .kind = CKPT__SETTING_INT, .lo = 0, .hi = 31536000,
      .dflt = "0", .scope = COLLECTIVE,
      .read_by = "ckpt_manager_create, ckpt_training_create (mpi/manager.c), ckpt_gc, "
                 "mpickpt gc|pin|drop",
      .meaning = "seconds a writer waits for a checkpoint directory another job holds (0: fail "
                 "at once); lock_wait_seconds and --wait win",
      .library = 1 },
    { .name = "MPICKPT_RETENTION", .kind = CKPT__SETTING_CHOICE, .words = w_retention,
      .dflt = "background", .scope = COLLECTIVE,
      .read_by = "ckpt_manager_create, ckpt_training_create (mpi/manager.c)",
      .meaning = "retention's deleted files: their blocks freed by a background thread of the "
                 "chief (each held open across its unlink) or inside the save",
      .library = 1 },
    { .name = "MPICKPT_RUNS", .kind = CKPT__SETTING_INT, .lo = 1, .hi = 1000000, .dflt = "1",
      .scope = LOCAL, .read_by = "mpickpt-run (lib/cli/run.c); --max-runs wins",
      .meaning = "runs of the job mpickpt-run makes inside one allocation (1: no relaunch after a "
                 "crash), like SCR_RUNS",
      .library = 1 },
    { .name = "MPICKPT_RUN_ATTEMPT", .kind = CKPT__SETTING_INT, .lo = 1, .hi = 1000000,
      .dflt = "(set by mpickpt-run)", .scope = LOCAL,
      .read_by = "set by mpickpt-run for the job it runs (for the job's logs)",
      .meaning = "which run of mpickpt-run this is: 1, then 2 for the first relaunch, ...",
      .library = 1 },
    { .name = "MPICKPT_DEMO_TAMPER", .kind = CKPT__SETTING_INT, .lo = 0, .hi = INT32_MAX,
      .dflt = "(unset)", .scope = LOCAL, .read_by = "mpickpt-demo (tests only)",
      .meaning = "that rank changes a restored value, to prove the demo's check catches it",
      .library = 1 },
    { .name = "MPICKPT_BUILD_DIR", .kind = CKPT__SETTING_TEXT, .dflt = "build",
      .scope = "script", .read_by = "jobs/*.sh, jobs/slurm/*.sbatch",
      .meaning = "the build whose programs the scripts run", .library = 0 },
    { .name = "MPICKPT_RUN", .kind = CKPT__SETTING_TEXT,
      .dflt = "(mpickpt-run on PATH, else build/bin/mpickpt-run)", .scope = "script",
      .read_by = "jobs/slurm/mpickpt-run.sbatch",
      .meaning = "the mpickpt-run the batch template execs", .library = 0 },
    { .name = "MPICKPT_RESTART_COUNT", .kind = CKPT__SETTING_TEXT, .dflt = "(set by the script)",
      .scope = "script", .read_by = "set by jobs/run-mpirun.sh for the job",
      .meaning = "which launch this is (0, 1, ...), like SLURM_RESTART_COUNT", .library = 0 },
    { .name = "MPICKPT_SLURM_OWNER_PID", .kind = CKPT__SETTING_TEXT, .dflt = "(unset)",
      .scope = "script", .read_by = "jobs/slurm/local-slurm.sh",
      .meaning = "stop the local Slurm when this process ends", .library = 0 },
    { .name = "MPICKPT_SLURM_WATCHER", .kind = CKPT__SETTING_TEXT, .dflt = "(internal)",
      .scope = "script", .read_by = "jobs/slurm/local-slurm.sh (its watcher process)",
      .meaning = "internal: marks the watcher of MPICKPT_SLURM_OWNER_PID", .library = 0 },
    { .name = "MPICKPT_ROOT", .kind = CKPT__SETTING_TEXT, .dflt = "(internal)",
      .scope = "script", .read_by = "jobs/drill.sh -> jobs/lib/drill.py",
      .meaning = "internal: the source tree, passed to the drills", .library = 0 },
    { .name = "MPICKPT_CLI", .kind = CKPT__SETTING_TEXT, .dflt = "(internal)",
      .scope = "script", .read_by = "jobs/drill.sh -> jobs/lib/drill.py; the CLI tests",
      .meaning = "internal: the mpickpt tool to run", .library = 0 },
    { .name = "MPICKPT_DEMO", .kind = CKPT__SETTING_TEXT, .dflt = "(internal)",
      .scope = "script", .read_by = "jobs/drill.sh -> jobs/lib/drill.py",
      .meaning = "internal: the mpickpt-demo to run", .library = 0 },
    { .name = "MPICKPT_DRILL_MOUNTS", .kind = CKPT__SETTING_TEXT, .dflt = "(internal)",
      .scope = "script", .read_by = "jobs/drill.sh -> jobs/lib/drill.py",
      .meaning = "internal: where the drills record their tmpfs mounts", .library = 0 },
};
const size_t ckpt__num_settings = sizeof ckpt__settings / sizeof ckpt__settings[0];

/* The same rule as mpi/preempt.c's deadline parser: a positive finite number, trailing blanks
 * allowed. */
static int check_time(const char *name, const char *v)
{
    char *end = NULL;
    errno = 0;
    double t = strtod(v, &end);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n'))
        end++;
    if (errno || end == v || *end || !isfinite(t) || t <= 0)
        return ckpt__error(CKPT_EINVAL,
                           "%s='%.100s' is not a time in seconds since the epoch (e.g. `date +%%s`)",
                           name, v);
    return CKPT_OK;
}

int ckpt__setting_check(const ckpt__setting *s, const char **value)
{
    *value = env_value(s->name);
    if (!*value)
        return CKPT_OK;
    int b, target, mode;
    int64_t n;
    char buf[4096], step[16];
    switch (s->kind) {
    case CKPT__SETTING_BOOL:
        return ckpt__env_bool(&b, s->name, 0);
    case CKPT__SETTING_INT:
        return ckpt__env_int64(&n, s->name, s->lo, s->hi, 0);
    case CKPT__SETTING_CHOICE: {
        int values[16];
        size_t k = 0;
        for (; s->words[k] && k < CKPT__ARRAY_LEN(values); k++)
            values[k] = (int)k;
        return ckpt__env_choice(&b, s->name, s->words, values, k, 0);
    }
    case CKPT__SETTING_TIME:
        return check_time(s->name, *value);
    case CKPT__SETTING_PATTERN: {
        int rc = ckpt__cache_dir(buf, sizeof buf, *value, 0);
        if (rc == CKPT_OK)
            return rc;
        const ckpt_error *err = ckpt_error_last(); /* copied: ckpt__error() replaces it */
        char why[512];
        snprintf(why, sizeof why, "%s", err && err->message ? err->message : "bad pattern");
        return ckpt__error(rc, "%s='%.100s': %s", s->name, *value, why);
    }
    case CKPT__SETTING_FAULT:
        return ckpt__fault_spec(&target, step, sizeof step, &mode);
    default:
        return CKPT_OK;
    }
}
