#!/bin/bash
# A multi-node Slurm on real nodes (tests/cluster/cluster.sh; docs/testing-faults.md, "Real
# nodes"): munged on the machine (its socket is a file every node reaches), slurmctld in node 0,
# one slurmd per node, each node's spool and TmpFS on its own /dev/shm (they die with the node).
#
#   test_cluster_slurm.sh SOURCE_DIR BIN_DIR OUTDIR [requeue|relaunch]
#
# requeue (the default): `sbatch -N 3 -n 6 --requeue` of the generic template (jobs/slurm/mpickpt-run.sbatch) runs the
# demo through mpickpt-run with srun --mpi=pmix, with the cache level and partner copies (nothing
# persisted yet). Once it committed a checkpoint at step 4 or later, node 1 dies (slurmd, its ranks
# and its /dev/shm with it). Slurm marks the node down and requeues the job (NODE_FAIL); a
# replacement node 1 joins (a fresh /dev/shm, a new slurmd); the job's second run (Slurm's
# SLURM_RESTART_COUNT=1) resumes from the newest checkpoint, node 1's files rebuilt from its
# partner's copies, checks every value and finishes: COMPLETED, exit code 0. mpickpt-run may
# relaunch a run once (--max-runs 2), and only after the one crash known here that is not the
# project's: a rank killed by SIGSEGV inside MPI_Init (Open MPI's startup race, below); any other
# crash, or a relaunch without that crash, fails the test.
#
# relaunch: 4 nodes, `sbatch --no-kill -N 4 -n 8 --ntasks-per-node 2` (the allocation survives a node's
# loss), mpickpt-run --nodes 3 -n 6 --max-runs 4 (one run more for Open MPI's startup race, as
# above): the job runs on nodes 0-2, node 3 is a spare. Node 1 dies
# mid-job; the step fails; mpickpt-run finds node 1 down (sinfo) and relaunches inside the
# allocation on nodes 0, 2 and 3 (srun -N 3 --exclude=<node 1>), no requeue, no replacement: the
# cache's newest checkpoint is rebuilt (node 1's files from their partner copies onto the spare,
# now the job's node 2), restored exactly, and the job finishes: COMPLETED, exit code 0,
# Restarts=0.
#
# Exit 77 (skipped) without root, namespaces or the Slurm packages.
set -u
src=$1
bin=$2
out=$3
mode=${4:-requeue}
case $mode in requeue|relaunch) ;; *) echo "unknown case '$mode'" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
C=$here/cluster.sh
"$C" check || exit $?
for t in munged mungekey slurmctld slurmd sbatch squeue scontrol sinfo srun; do
  command -v "$t" >/dev/null || { echo "SKIP: $t is not installed (jobs/deps.sh slurm)"; exit 77; }
done
# test_cluster.sh: another run's nodes have other names
if [ "$mode" = requeue ]; then name=csl; nodes=3; else name=csr; nodes=4; fi
name=$name${MPICKPT_CLUSTER_TAG:-}
rm -rf "$out" && mkdir -p "$out" || exit 1
# Unix socket paths are limited to ~107 bytes: the daemons' files under a short directory
sd=$(mktemp -d /tmp/mpkc-slurm.XXXXXX) || exit 1
ln -s "$sd" "$out/slurm"

stop_all() {
  [ -n "${SLURM_CONF:-}" ] && [ -e "$SLURM_CONF" ] &&
    "$C" exec "$name" 0 scancel --quiet --user root 2>/dev/null
  "$C" down "$name"
  [ -f "$sd/munged.pid" ] && kill "$(cat "$sd/munged.pid")" 2>/dev/null
  sleep 0.2
  rm -f "$out/slurm" && cp -r "$sd/log" "$out/slurm-log" 2>/dev/null
  rm -rf "$sd"
}
trap stop_all EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- job output ($log):" >&2; tail -40 "$log" >&2 2>/dev/null
  echo "--- slurmctld:" >&2; tail -15 "$sd/log/slurmctld.log" >&2 2>/dev/null
  echo "--- slurmd of ${name}n0:" >&2; tail -15 "$sd/log/slurmd-${name}n0.log" >&2 2>/dev/null
  crash_report >&2
  exit 1
}
# A process of the job that crashed: the stack of its crashing thread from its core, and the
# kernel's line. Open MPI's own report of a call through a NULL pointer shows no stack (it stops
# at the signal frame); gdb on the core does (docs/testing-faults.md, "A crash inside MPI_Init").
crash_report() {
  local c exe found=0
  for c in "$out"/core*; do
    [ -f "$c" ] || continue
    found=1
    exe=$(file -b "$c" 2>/dev/null | sed -n "s/.*execfn: '\([^']*\)'.*/\1/p")
    [ -x "$exe" ] || exe=$bin/mpickpt-demo
    echo "--- core $c of $exe:"
    command -v gdb >/dev/null || { echo "(gdb is not installed: no stack)"; continue; }
    gdb -batch -nx -ex 'info threads' -ex 'bt 30' "$exe" "$c" 2>&1 |
      grep -v '^\[New LWP\|^warning: \(Unexpected size\|Can.t open file\)\|^$' | tail -60
    init_crash "$c" && echo "(Open MPI's startup race, not the project's: docs/testing-faults.md," \
      "\"A crash inside MPI_Init\")"
  done
  if [ $found = 0 ] && grep -Eq 'Segmentation fault|signal 11|Process received signal' "$log" 2>/dev/null; then
    echo "--- a process crashed but left no core in $out (core_pattern" \
      "'$(cat /proc/sys/kernel/core_pattern 2>/dev/null)', ulimit -c $(ulimit -c))"
  fi
  # the kernel's "segfault at ADDR ip IP sp SP" lines since this test started (when readable)
  dmesg 2>/dev/null | awk -v t0="$t0" '/segfault at|traps:/ { t = $0; sub(/^\[ */, "", t);
    if (t + 0 >= t0) print "kernel: " $0 }'
}
# 0 when core $1 is the one crash known here that is not the project's (docs/testing-faults.md,
# "A crash inside MPI_Init"): a call through a NULL pointer (frame 0 at address 0) made by Open
# MPI's TCP BTL inside MPI_Init, no frame of the library's. Rank 0, still in MPI_Init's modex fence
# (its PML had registered no receive callback yet), was handed an MPI message of a rank that had
# already left MPI_Init; Open MPI 4.1.4, PMIx 4.2, Slurm 22.05 mpi/pmix_v4, on a loaded machine.
init_crash() {
  command -v gdb >/dev/null || return 1
  gdb -batch -nx -ex 'bt 16' "$bin/mpickpt-demo" "$1" 2>/dev/null | awk '
    /^#0 +0x0+ in \?\? \(\)/ { nil = 1 }
    /^#1 .* from .*mca_btl_tcp\.so/ { tcp = 1 }
    / in ompi_mpi_init \(/ { init = 1 }
    / in ckpt_/ { ours = 1 }
    END { exit !(nil && tcp && init && !ours) }'
}
# Runs that died of SIGSEGV (srun's status 139) and that mpickpt-run relaunched: each must have
# died of that crash (every core left in $out has its stack); their number in $crashes. The test
# goes on with every value still checked.
init_crashes() {
  local c
  crashes=$(grep -c '^mpickpt-run: run [0-9]*: srun exited with status 139$' "$log")
  if [ "$crashes" -gt 0 ]; then
    ls "$out"/core* >/dev/null 2>&1 || fail "a run died of SIGSEGV and left no core to tell why"
    for c in "$out"/core*; do
      init_crash "$c" || fail "a run died of SIGSEGV, not of Open MPI's startup race"
    done
    echo "note: $crashes run(s) died inside MPI_Init (Open MPI's startup race," \
      "docs/testing-faults.md) and mpickpt-run relaunched them"
  fi
}
t0=$(cut -d' ' -f1 /proc/uptime)
# Cores of crashed processes: the job runs in $out (sbatch --chdir below: nsenter into a node's
# mount namespace starts in /), where the kernel's usual core_pattern `core` puts them, and Slurm
# propagates the limit to the job's tasks, requeued runs included.
ulimit -c unlimited 2>/dev/null || true
on() { "$C" exec "$name" 0 "$@"; } # Slurm's commands, from node 0 (the controller's network)
wait_for() { # TIMEOUT-S WHAT COMMAND...
  local end=$((SECONDS + $1)) what=$2
  shift 2
  while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.3; done
  fail "timed out after ${end}s waiting for: $what"
}

"$C" up "$name" $nodes || exit 1
sub=$(cat /run/mpickpt-cluster/$name/subnet)
mkdir -p "$sd/etc" "$sd/munge" "$sd/state" "$sd/log" && chmod 755 "$sd" "$sd/munge"
mungekey --create --keyfile="$sd/munge/munge.key" || fail "mungekey"
chmod 600 "$sd/munge/munge.key"
setsid munged -F --key-file="$sd/munge/munge.key" --socket="$sd/munge/munge.socket.2" \
  --pid-file="$sd/munge/munged.pid" --log-file="$sd/log/munged.log" \
  --seed-file="$sd/munge/munged.seed" </dev/null >/dev/null 2>&1 &
echo $! > "$sd/munged.pid"
disown
wait_for 10 "munged's socket" test -S "$sd/munge/munge.socket.2"

export SLURM_CONF=$sd/etc/slurm.conf
{
  cat <<EOF
ClusterName=mpkc
SlurmctldHost=${name}n0($sub.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sd/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$sd/state
SlurmdSpoolDir=/dev/shm/slurmspool
TmpFS=/dev/shm/slurmtmp
SlurmctldPidFile=$sd/slurmctld-daemon.pid
SlurmdPidFile=$sd/slurmd-%n.pid
SlurmctldLogFile=$sd/log/slurmctld.log
SlurmdLogFile=$sd/log/slurmd-%n.log
SlurmdTimeout=10
Include $src/jobs/slurm/private-slurm.conf
EOF
  for i in $(seq 0 $((nodes - 1))); do
    echo "NodeName=${name}n$i NodeAddr=$sub.$((i + 1)) CPUs=2 RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=cl Nodes=${name}n[0-$((nodes - 1))] Default=YES MaxTime=INFINITE State=UP"
} > "$SLURM_CONF"

slurmd_on() { # I: node I's slurmd (its TmpFS on the node's own /dev/shm)
  "$C" exec "$name" "$1" mkdir -p /dev/shm/slurmtmp /dev/shm/slurmspool ||
    fail "node $1: TmpFS and spool"
  setsid "$C" exec "$name" "$1" slurmd -D -N "${name}n$1" -f "$SLURM_CONF" \
    </dev/null >> "$sd/log/slurmd-$1.out" 2>&1 &
  disown
}
node_state() { on sinfo -h -n "${name}n$1" -o %t 2>/dev/null; }
all_idle() { [ "$(on sinfo -h -o %t 2>/dev/null | sort -u)" = idle ]; }

setsid "$C" exec "$name" 0 slurmctld -D -f "$SLURM_CONF" </dev/null >> "$sd/log/slurmctld.out" 2>&1 &
disown
for i in $(seq 0 $((nodes - 1))); do slurmd_on "$i"; done
log=$out/job.out
wait_for 60 "$nodes idle nodes" all_idle

dir=$out/ckpt
export OMPI_MCA_mpi_yield_when_idle=1 MPICKPT_RUN=$bin/mpickpt-run
if [ "$mode" = requeue ]; then
  alloc=(-N 3 -n 6) runopts=(--max-runs 2)
else
  alloc=(--no-kill -N 4 -n 8 --ntasks-per-node 2) runopts=(--nodes 3 -n 6 --max-runs 4)
fi
job=$(on sbatch --parsable --chdir "$out" "${alloc[@]}" -o "$log" "$src/jobs/slurm/mpickpt-run.sbatch" \
  --dir "$dir" "${runopts[@]}" -- "$bin/mpickpt-demo" --dir "$dir" --mb 1 --epochs 2 --steps-per-epoch 10 \
  --ckpt-every 2 --step-sleep 300 --cache-dir /dev/shm/mpkc/ck --redundancy partner \
  --persist-every 100 --cache-keep 3) || fail "sbatch"
job=${job%%;*}
echo "submitted job $job (output: $log)"
job_field() { on scontrol show job "$job" 2>/dev/null | grep -o "$1=[^ ]*" | head -1 | cut -d= -f2; }
saved_step() { sed -n 's/^checkpoint prefix=.* epoch=[0-9]* step=\([0-9]*\) .*/\1/p' "$log" | tail -1; }
far_enough() { [ "$(saved_step)" -ge 4 ] 2>/dev/null; }
wait_for 120 "a checkpoint at step 4 or later" far_enough
step=$(saved_step)
grep -q "^sbatch\[$job\]: start SLURM_RESTART_COUNT=0 on ${name}n0 ntasks=" "$log" ||
  fail "the first run did not start on ${name}n0"

echo "node 1 dies (last checkpoint printed: step $step)"
"$C" kill "$name" 1 || fail "kill node 1"
if [ "$mode" = relaunch ]; then
  finished() { case "$(job_field JobState)" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) true ;; *) false ;; esac; }
  wait_for 240 "job $job finished" finished
  echo "job: $(job_field JobState), Restarts=$(job_field Restarts), node 1: $(node_state 1)"
  grep '^mpickpt-run:' "$log" | sed 's/^/  /'
  [ "$(job_field JobState)" = COMPLETED ] || fail "job state $(job_field JobState), want COMPLETED"
  [ "$(job_field ExitCode)" = 0:0 ] || fail "exit code $(job_field ExitCode), want 0:0"
  [ "$(job_field Restarts)" = 0 ] || fail "the job was requeued (Restarts=$(job_field Restarts))"
  grep -q "^mpickpt-run: node(s) ${name}n1 of the allocation down (${name}n1=[a-z_*+]*): relaunching on 3 of the 3 node(s) still up (srun -N 3 --exclude=${name}n1)\$" "$log" ||
    fail "mpickpt-run did not relaunch without node 1"
  # run k excludes node 1: run 2, or 3 after a run that died inside MPI_Init (init_crashes)
  init_crashes
  k=$((2 + crashes))
  grep -q "^mpickpt-run: run $k of 4 (MPICKPT_RUN_ATTEMPT=$k): srun --mpi=pmix -n 6 -N 3 --exclude=${name}n1 " "$log" ||
    fail "run $k was not srun without node 1"
  # the newest checkpoint before run k, and what run k resumed from (the cache, rebuilt)
  step=$(sed "/MPICKPT_RUN_ATTEMPT=$k/q" "$log" |
         sed -n 's/^checkpoint prefix=.* epoch=[0-9]* step=\([0-9]*\) .*/\1/p' | tail -1)
  grep -Eq "host ${name}n3\] info: node 2: [0-9]+ files of ckpt-[0-9]+ rebuilt" "$log" ||
    fail "the spare node's cache (the job's node 2) not rebuilt"
  got=$(sed -n 's|^resumed epoch=[0-9]* step=\([0-9]*\) from=/dev/shm/mpkc/ck/[^ ]*/ckpt-[0-9]*$|\1|p' "$log")
  [ "$got" = "$step" ] || [ "$got" = $((step + 2)) ] ||
    fail "run 2 resumed at step '${got}' from the cache, want $step (or $((step + 2)))"
  grep -Eq "^verified every restored value at step $got: .* of ranks 0-5\$" "$log" ||
    fail "restored values not verified"
  grep -q '^done epoch=1 step=20$' "$log" || fail "run 2 did not finish"
  echo "ok: node 1 lost under Slurm; mpickpt-run relaunched on the 3 nodes still up (the spare among them), resumed at step $got, exactly"
  exit 0
fi
requeued() { [ "$(job_field Restarts)" -ge 1 ] 2>/dev/null; }
wait_for 90 "the job requeued after node 1's failure" requeued
echo "node 1: $(node_state 1); job: $(job_field JobState), Restarts=$(job_field Restarts)"
# the first run's newest printed checkpoint: the run may have committed one more (every 2 steps)
# between the kill and the line (the step sleeps 0.3 s)
step=$(sed '/SLURM_RESTART_COUNT=1/q' "$log" |
       sed -n 's/^checkpoint prefix=.* epoch=[0-9]* step=\([0-9]*\) .*/\1/p' | tail -1)

"$C" replace "$name" 1 || fail "replace node 1"
slurmd_on 1
wait_for 60 "node 1 back" sh -c "case \"\$($C exec $name 0 sinfo -h -n ${name}n1 -o %t)\" in idle|alloc|mix) true;; *) false;; esac"
sleep 2
on scontrol update JobId="$job" StartTime=now 2>/dev/null
finished() { case "$(job_field JobState)" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) true ;; *) false ;; esac; }
wait_for 240 "job $job finished" finished

[ "$(job_field JobState)" = COMPLETED ] || fail "job state $(job_field JobState), want COMPLETED"
[ "$(job_field ExitCode)" = 0:0 ] || fail "exit code $(job_field ExitCode), want 0:0"
grep -q "^sbatch\[$job\]: start SLURM_RESTART_COUNT=1 " "$log" || fail "no second run"
grep -Eq "host ${name}n1\] info: node 1: [0-9]+ files of ckpt-[0-9]+ rebuilt" "$log" ||
  fail "node 1's cache not rebuilt from its partner"
got=$(sed -n 's|^resumed epoch=[0-9]* step=\([0-9]*\) from=/dev/shm/mpkc/ck/[^ ]*/ckpt-[0-9]*$|\1|p' "$log")
[ "$got" = "$step" ] || [ "$got" = $((step + 2)) ] ||
  fail "the second run resumed at step '${got}' from the cache, want $step (or $((step + 2)))"
grep -Eq "^verified every restored value at step $got: .* of ranks 0-5\$" "$log" ||
  fail "restored values not verified"
step=$got
grep -q '^done epoch=1 step=20$' "$log" || fail "the second run did not finish"
# a relaunch (--max-runs 2) only after a run that died inside MPI_Init (init_crashes)
init_crashes
[ "$(grep -c '^mpickpt-run: run 2 of 2 ' "$log")" = "$crashes" ] ||
  fail "mpickpt-run relaunched a run that did not die inside MPI_Init"
echo "ok: node 1 lost under Slurm; requeued, resumed at step $step on a replacement node, exactly"
