#!/usr/bin/env bash
# mpickpt-run without Slurm (mpirun on this machine, 2 ranks), one case per argument:
#
#   MPICKPT_RUN=.../mpickpt-run MPICKPT_DEMO=.../mpickpt-demo MPICKPT_CLI=.../mpickpt \
#     test_run.sh OUTDIR relaunch|noprogress|halt|after|signal|usage
#
#  relaunch    a run that commits ckpt-1 (epoch 0, step 5) then crashes at step 7 (rank 1 aborts;
#              --crash-fresh: only a fresh run crashes) is relaunched (--max-runs 3) from ckpt-1:
#              run 2 resumes at exactly epoch 0 step 5, verifies every value, finishes; exit 0,
#              no third run. Then a command without --dir (sh -c printing MPICKPT_RUN_ATTEMPT on
#              every rank, exit 3), --max-runs 2: both runs, every rank saw its attempt, exit 3.
#  noprogress  a job that always crashes before its first checkpoint, --max-runs 5: stops after
#              2 runs ("run 2 made no progress"), with the job's status.
#  halt        a held job (--hold: waits at its first checkpoint), `mpickpt halt DIR`: it takes
#              its checkpoint and exits at that step boundary (reason=halt), mpickpt-run exits 0
#              without relaunch (--max-runs 3); run again it refuses to start (exit 0, no run);
#              after --clear it resumes from that step and finishes.
#  after       a request due in a day does not stop a job (it finishes, the request stays, not
#              due); `mpickpt halt --after-seconds 2` on a held job stops it once due
#              (reason=halt), exit 0; the request's times differ by exactly 2 s.
#  signal      SIGTERM to mpickpt-run reaches the ranks as SIGUSR1 (mpirun would kill them on a
#              TERM): final checkpoint at the held step (reason=signal), exit 75 (not under
#              Slurm), no relaunch although --max-runs 3.
#  usage       bad options exit 2 with a message; --help names every option; started with SIGCHLD
#              ignored it still sees the job end; under nohup a SIGHUP does not reach the job; a
#              request due in DIR stops it although DIR/chief's is not due.
#  nodes       the relaunch without the allocation's down nodes, with stand-in sinfo and srun on
#              PATH (SLURM_JOB_ID, SLURM_JOB_NODELIST set): --nodes 3 on 5 nodes, one down*, one
#              drained: run 2 is `srun ... -N 3 --exclude=n1,n3`; a later loss accumulates
#              (--exclude=n1,n3,n0, -N 2 with --min-nodes 2); --min-nodes above the nodes up: no
#              relaunch; sinfo failing or no node down: the same line again.
set -uo pipefail
out=${1:?usage: test_run.sh OUTDIR CASE}
case_=${2:?usage: test_run.sh OUTDIR CASE}
: "${MPICKPT_RUN:?}" "${MPICKPT_DEMO:?}" "${MPICKPT_CLI:?}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_odls_base_sigkill_timeout=0
# Not under Slurm, whatever runs this test; no deadline; no default number of runs.
unset SLURM_JOB_ID SLURM_STEP_ID SLURM_RESTART_COUNT MPICKPT_DEADLINE SLURM_JOB_END_TIME MPICKPT_RUNS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ulimit -c 0
rm -rf "$out"
mkdir -p "$out"
dir=$out/train
demo_args=(--dir "$dir" --epochs 2 --steps-per-epoch 10 --ckpt-every 5 --keep 0 --mb 1)
failures=0
checks=0
check() { # STATUS MESSAGE
  checks=$((checks + 1))
  if [ "$1" -ne 0 ]; then
    failures=$((failures + 1))
    echo "FAIL: $2" >&2
  fi
}
has() { grep -qE -- "$1" "$2"; }
count() { grep -cE -- "$1" "$2"; }
# The demo's crash lines (stdout) can land inside a line of Open MPI's backtrace of the killed
# rank (stderr, the same log): counted where they stand, not as whole lines.
crashes() { grep -oE -- "crash rank=$1 step=$2([^0-9]|\$)" "$3" | wc -l; }
wait_for() { # SECONDS FILE REGEX: 0 once FILE has a line matching REGEX
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt $end ]; do
    grep -qE -- "$3" "$2" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "FAIL: timed out after $1 s waiting for /$3/ in $2" >&2
  return 1
}
show() { echo "== $1"; sed 's/^/   /' "$1"; }
run_bg() { # LOG ARGS...: mpickpt-run in the background; pid in $bg
  local log=$1
  shift
  "$MPICKPT_RUN" "$@" >"$log" 2>&1 </dev/null &
  bg=$!
}
latest() { # epoch step of the latest checkpoint of $dir (per mpickpt list --json)
  "$MPICKPT_CLI" list --json "$dir/chief" | /usr/bin/python3 -B "$here/latest_ckpt.py" epoch step
}

case "$case_" in
relaunch)
  log=$out/relaunch.log
  "$MPICKPT_RUN" --dir "$dir" --max-runs 3 -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" \
    --crash-rank 1 --crash-step 7 --crash-fresh >"$log" 2>&1 </dev/null
  rc=$?
  show "$log"
  check "$rc" "mpickpt-run exited $rc, expected 0"
  check "$(has '^mpickpt-run: run 1 of 3 \(MPICKPT_RUN_ATTEMPT=1\): mpirun -np 2 ' "$log"; echo $?)" "no run 1 of 3"
  check "$([ "$(crashes 1 7 "$log")" -ge 1 ]; echo $?)" "run 1 did not crash at step 7"
  check "$(has '^mpickpt-run: relaunching after the crash \(run 2 of 3\) from the newest checkpoint: ckpt-1 \(save 1, epoch 0, step 5\)$' "$log"; echo $?)" \
    "no relaunch from ckpt-1 (epoch 0, step 5)"
  check "$(has "^resumed epoch=0 step=5 from=$dir/chief/ckpt-1\$" "$log"; echo $?)" "run 2 did not resume at epoch 0 step 5"
  check "$(has '^verified every restored value at step 5:' "$log"; echo $?)" "run 2 did not verify"
  check "$(has '^done epoch=1 step=20$' "$log"; echo $?)" "no done epoch=1 step=20"
  check "$(has '^mpickpt-run: run 2: mpirun exited with status 0$' "$log"; echo $?)" "run 2 did not exit 0"
  check "$(has '^mpickpt-run: the job finished$' "$log"; echo $?)" "no 'the job finished'"
  check "$([ "$(count 'run 3 of' "$log")" = 0 ]; echo $?)" "a third run"
  check "$([ "$(crashes '[0-9]+' '[0-9]+' "$log")" = 1 ]; echo $?)" "crashed more than once"
  check "$([ "$(latest)" = "1 20" ]; echo $?)" "latest checkpoint '$(latest)', expected epoch 1 step 20"

  # No --dir: every crash counts as progress; MPICKPT_RUN_ATTEMPT reaches every rank.
  log=$out/attempts.log
  # Every rank records its attempt, waits for the other's (a barrier through files: the first
  # rank to exit 3 makes mpirun kill the other), then exits 3.
  mkdir -p "$out/seen"
  # shellcheck disable=SC2016 # expanded by the ranks' shell
  MPICKPT_SEEN=$out/seen "$MPICKPT_RUN" --max-runs 2 -n 2 -- sh -c \
    'a=$MPICKPT_RUN_ATTEMPT; echo "attempt=$a rank=$OMPI_COMM_WORLD_RANK";
     : >"$MPICKPT_SEEN/$a-$OMPI_COMM_WORLD_RANK";
     while [ "$(ls "$MPICKPT_SEEN" | grep -c "^$a-")" -lt 2 ]; do sleep 0.05; done; exit 3' \
    >"$log" 2>&1 </dev/null
  rc=$?
  show "$log"
  check "$([ $rc = 3 ]; echo $?)" "without --dir: exit $rc, expected the job's 3"
  for a in 1 2; do
    for r in 0 1; do
      check "$(has "^attempt=$a rank=$r\$" "$log"; echo $?)" "rank $r did not see MPICKPT_RUN_ATTEMPT=$a"
    done
  done
  check "$(has '^mpickpt-run: warning: no --dir: progress cannot be checked' "$log"; echo $?)" "no warning about the missing --dir"
  check "$(has '^mpickpt-run: giving up after 2 runs \(--max-runs 2\)$' "$log"; echo $?)" "no 'giving up after 2 runs'"
  ;;
noprogress)
  log=$out/noprogress.log
  "$MPICKPT_RUN" --dir "$dir" --max-runs 5 -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" \
    --crash-rank 1 --crash-step 2 >"$log" 2>&1 </dev/null
  rc=$?
  show "$log"
  st=$(sed -nE 's/^mpickpt-run: run 2: mpirun exited with status ([0-9]+)$/\1/p' "$log")
  check "$([ -n "$st" ] && [ "$st" != 0 ] && [ "$rc" = "$st" ]; echo $?)" "exit $rc, expected run 2's non-zero status '$st'"
  check "$([ "$(crashes 1 2 "$log")" = 2 ]; echo $?)" "not exactly 2 crashes"
  check "$([ "$(count '^mpickpt-run: run [0-9] of 5 ' "$log")" = 2 ]; echo $?)" "not exactly 2 runs"
  check "$(has '^mpickpt-run: run 2 made no progress \(the newest checkpoint is still none yet \(the job starts fresh\)\): not relaunching \(2 of 5 runs used\)$' "$log"; echo $?)" \
    "no 'run 2 made no progress' message"
  ;;
halt)
  log=$out/halt1.log
  run_bg "$log" --dir "$dir" --max-runs 3 -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" --hold
  wait_for 60 "$log" '^checkpoint prefix=\S+ epoch=0 step=5 '
  "$MPICKPT_CLI" halt "$dir" >"$out/halt.out"
  check $? "mpickpt halt $dir"
  show "$out/halt.out"
  check "$(has "^halt request in $dir/chief: due since " "$out/halt.out"; echo $?)" "mpickpt halt: no 'due since' line"
  wait "$bg"
  rc=$?
  show "$log"
  check "$rc" "mpickpt-run exited $rc after the halt, expected 0"
  check "$(has '^preempted epoch=0 step=5 reason=halt$' "$log"; echo $?)" "no 'preempted epoch=0 step=5 reason=halt'"
  check "$(has '^mpickpt-run: run 1: mpirun exited with status 75$' "$log"; echo $?)" "the job did not exit 75"
  check "$(has "^mpickpt-run: halted by the request in $dir/chief: exit 0, no requeue, no relaunch" "$log"; echo $?)" "no 'halted by the request'"
  check "$([ "$(count 'run 2 of' "$log")" = 0 ]; echo $?)" "relaunched after a halt"
  check "$([ "$(latest)" = "0 5" ]; echo $?)" "latest checkpoint '$(latest)', expected epoch 0 step 5"
  # While the request is due, nothing starts.
  log=$out/halt2.log
  "$MPICKPT_RUN" --dir "$dir" -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" >"$log" 2>&1 </dev/null
  rc=$?
  show "$log"
  check "$rc" "mpickpt-run with a due halt request exited $rc, expected 0"
  check "$(has "^mpickpt-run: a halt request is due in $dir/chief: not starting the job \(exit 0\); remove it with 'mpickpt halt $dir --clear'\$" "$log"; echo $?)" \
    "no refusal naming 'mpickpt halt DIR --clear'"
  check "$([ "$(count 'run 1 of|^resumed|^fresh' "$log")" = 0 ]; echo $?)" "a run started despite the halt request"
  # Cleared: the job resumes where it stopped and finishes.
  "$MPICKPT_CLI" halt --clear --json "$dir" >"$out/clear.json"
  check $? "mpickpt halt --clear"
  check "$(has '"action":"clear","present":false,.*"removed":true' "$out/clear.json"; echo $?)" "--clear --json: $(cat "$out/clear.json")"
  log=$out/halt3.log
  "$MPICKPT_RUN" --dir "$dir" -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" >"$log" 2>&1 </dev/null
  rc=$?
  show "$log"
  check "$rc" "the run after --clear exited $rc"
  check "$(has "^resumed epoch=0 step=5 from=$dir/chief/ckpt-1\$" "$log"; echo $?)" "no resume at epoch 0 step 5 after --clear"
  check "$(has '^verified every restored value at step 5:' "$log"; echo $?)" "not verified after --clear"
  check "$(has '^done epoch=1 step=20$' "$log"; echo $?)" "no done after --clear"
  ;;
after)
  mkdir -p "$dir"
  "$MPICKPT_CLI" halt --after-seconds 86400 --json "$dir" >"$out/day.json"
  check $? "mpickpt halt --after-seconds 86400"
  log=$out/after1.log
  "$MPICKPT_RUN" --dir "$dir" -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" >"$log" 2>&1 </dev/null
  rc=$?
  show "$log"
  check "$rc" "a job with a request due in a day exited $rc"
  check "$(has '^done epoch=1 step=20$' "$log"; echo $?)" "a request due in a day stopped the job"
  check "$(has 'reason=halt' "$log"; [ $? = 1 ]; echo $?)" "a request due in a day stopped the job"
  "$MPICKPT_CLI" halt --show --json "$dir" >"$out/show.json"
  check "$(has '"present":true,.*"due":false' "$out/show.json"; echo $?)" "--show: $(cat "$out/show.json")"
  "$MPICKPT_CLI" halt --clear "$dir" >/dev/null
  rm -rf "$dir"
  # Due in 2 s, on a job held at its first checkpoint.
  log=$out/after2.log
  run_bg "$log" --dir "$dir" --max-runs 3 -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" --hold
  wait_for 60 "$log" '^checkpoint prefix=\S+ epoch=0 step=5 '
  "$MPICKPT_CLI" halt --after-seconds 2 --json "$dir" >"$out/two.json"
  check $? "mpickpt halt --after-seconds 2"
  check "$(/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["after"] - j["requested"] == 2 and j["present"] else 1)' "$out/two.json"; echo $?)" \
    "--after-seconds 2: $(cat "$out/two.json")"
  wait "$bg"
  rc=$?
  show "$log"
  check "$rc" "mpickpt-run exited $rc after the halt due in 2 s"
  check "$(has '^preempted epoch=0 step=5 reason=halt$' "$log"; echo $?)" "no 'preempted ... reason=halt'"
  check "$(has '^mpickpt-run: halted by the request' "$log"; echo $?)" "no 'halted by the request'"
  ;;
signal)
  log=$out/signal.log
  run_bg "$log" --dir "$dir" --max-runs 3 -n 2 -- "$MPICKPT_DEMO" "${demo_args[@]}" --hold
  wait_for 60 "$log" '^checkpoint prefix=\S+ epoch=0 step=5 '
  kill -TERM "$bg"
  wait "$bg"
  rc=$?
  show "$log"
  check "$([ $rc = 75 ]; echo $?)" "mpickpt-run exited $rc after SIGTERM, expected 75"
  check "$(has '^mpickpt-run: got SIGTERM: forwarding SIGUSR1 to the job \(process group [0-9]+\)$' "$log"; echo $?)" "SIGTERM not forwarded as SIGUSR1"
  check "$(has '^preempted epoch=0 step=5 reason=signal$' "$log"; echo $?)" "no 'preempted epoch=0 step=5 reason=signal'"
  check "$(has '^mpickpt-run: the job was preempted \(exit 75\) and checkpointed: run it again to resume \(not under Slurm\)$' "$log"; echo $?)" "no 'preempted ... not under Slurm'"
  check "$([ "$(count 'run 2 of' "$log")" = 0 ]; echo $?)" "relaunched after SIGTERM"
  check "$([ "$(latest)" = "0 5" ]; echo $?)" "latest checkpoint '$(latest)', expected epoch 0 step 5"
  ;;
usage)
  for bad in "--max-runs 0 true" "--max-runs x true" "--launcher pbs true" "--requeue sometimes true" \
    "--term-signal KILL true" "--np 0 true" "--dir" "" "--launcher none -n 2 true" "--bogus true" \
    "--nodes 0 true" "--min-nodes x true" "--launcher mpirun --nodes 2 true" "-N"; do
    # shellcheck disable=SC2086 # a list of arguments
    "$MPICKPT_RUN" $bad >"$out/usage.out" 2>&1
    rc=$?
    check "$([ $rc = 2 ]; echo $?)" "mpickpt-run $bad: exit $rc, expected 2"
    check "$(has '^mpickpt-run: .*' "$out/usage.out"; echo $?)" "mpickpt-run $bad: no message"
  done
  MPICKPT_RUNS=zero "$MPICKPT_RUN" true >"$out/usage.out" 2>&1
  check "$([ $? = 2 ] && has 'MPICKPT_RUNS' "$out/usage.out"; echo $?)" "MPICKPT_RUNS=zero not refused"
  "$MPICKPT_RUN" --help >"$out/help.out"
  check $? "--help"
  for opt in --dir --launcher --np --launcher-arg --max-runs --requeue --max-requeues --term-signal \
    --nodes --min-nodes --no-kill \
    MPICKPT_RUNS MPICKPT_RUN_ATTEMPT 'mpickpt halt'; do
    check "$(has "$opt" "$out/help.out"; echo $?)" "--help does not mention $opt"
  done
  "$MPICKPT_RUN" --launcher none -- /nonexistent/program >"$out/missing.out" 2>&1
  rc=$?
  check "$([ $rc = 127 ] && has "cannot run '/nonexistent/program'" "$out/missing.out"; echo $?)" \
    "a missing command: exit $rc, $(cat "$out/missing.out")"
  # A request due in DIR (made before DIR/chief existed) stops the launcher even when chief/ holds
  # one not due yet: the job honours both, so a requeue would only halt again.
  hd=$out/halt-both
  mkdir -p "$hd"
  "$MPICKPT_CLI" halt "$hd" >/dev/null
  mkdir "$hd/chief"
  "$MPICKPT_CLI" halt --after-seconds 86400 "$hd" >/dev/null
  check "$([ -f "$hd/halt" ] && [ -f "$hd/chief/halt" ]; echo $?)" "halt-both: expected $hd/halt and $hd/chief/halt"
  "$MPICKPT_RUN" --dir "$hd" --launcher none -- sh -c 'echo job-ran' >"$out/halt-both.out" 2>&1
  rc=$?
  check "$([ $rc = 0 ] && ! has '^job-ran$' "$out/halt-both.out" && has "a halt request is due in $hd: not starting" "$out/halt-both.out"; echo $?)" \
    "halt-both: exit $rc, $(cat "$out/halt-both.out")"
  # Started with SIGCHLD ignored (the kernel would reap the job unseen): it still ends.
  timeout -s KILL 30 /usr/bin/python3 -c 'import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.execv(sys.argv[1], sys.argv[1:])' "$MPICKPT_RUN" --launcher none -- sh -c 'exit 3' \
    >"$out/sigchld.out" 2>&1
  rc=$?
  check "$([ $rc = 3 ]; echo $?)" "SIGCHLD ignored: exit $rc, expected 3: $(cat "$out/sigchld.out")"
  # Under nohup (SIGHUP ignored), a hangup is neither taken nor forwarded: the job goes on.
  timeout -s KILL 30 nohup "$MPICKPT_RUN" --launcher none -- \
    sh -c 'kill -HUP "$PPID"; sleep 0.3; echo job-done' >"$out/nohup.out" 2>&1
  rc=$?
  check "$([ $rc = 0 ] && has '^job-done$' "$out/nohup.out" && ! has 'SIGHUP' "$out/nohup.out"; echo $?)" \
    "nohup: exit $rc, $(cat "$out/nohup.out")"
  # MPICKPT_RUNS is the default of --max-runs; --launcher none runs the command as is.
  MPICKPT_RUNS=2 "$MPICKPT_RUN" --launcher none -- sh -c 'exit 4' >"$out/runs.out" 2>&1
  rc=$?
  check "$([ $rc = 4 ] && [ "$(count 'run [12] of 2 ' "$out/runs.out")" = 2 ]; echo $?)" \
    "MPICKPT_RUNS=2: exit $rc, $(cat "$out/runs.out")"
  ;;
nodes)
  # stand-ins on PATH: sinfo prints $out/states (n2 twice: two partitions; `fail` in it: sinfo
  # fails), n0 reported not responding from its second call on when $out/n0-dies exists; srun
  # logs its arguments and fails while $out/fail-runs is above 0
  fake=$out/bin
  mkdir -p "$fake"
  printf '%s\n' '#!/bin/sh' 'echo "$*" >> "$OUT/sinfo.args"' \
    'grep -qx fail "$OUT/states" && exit 1' \
    'if [ -e "$OUT/n0-dies" ] && [ -e "$OUT/sinfo.once" ]; then sed "s/^n0 allocated/n0 idle*/" "$OUT/states"; exit 0; fi' \
    'touch "$OUT/sinfo.once"; cat "$OUT/states"' > "$fake/sinfo"
  printf '%s\n' '#!/bin/sh' 'echo "$*" >> "$OUT/srun.args"' 'n=$(cat "$OUT/fail-runs")' \
    'echo $((n - 1)) > "$OUT/fail-runs"' '[ "$n" -le 0 ]' > "$fake/srun"
  chmod +x "$fake/sinfo" "$fake/srun"
  nodes_run() { # FAILS "STATE;STATE;..." MPICKPT-RUN OPTIONS...: its log in $out/nodes.out
    echo "$1" > "$out/fail-runs"
    printf '%s\n' "$2" | tr ';' '\n' > "$out/states"
    shift 2
    rm -f "$out/srun.args" "$out/sinfo.once"
    OUT=$out PATH=$fake:$PATH SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[0-4]' \
      "$MPICKPT_RUN" --launcher srun "$@" -- true >"$out/nodes.out" 2>&1
  }
  line() { sed -n "$1p" "$out/srun.args"; }
  nodes_run 1 "n0 allocated;n1 down*;n2 mixed;n2 mixed;n3 drained;n4 idle" --nodes 3 --max-runs 3
  rc=$?
  check "$([ $rc = 0 ] && [ "$(line 1)" = "--mpi=pmix -N 3 true" ] &&
           [ "$(line 2)" = "--mpi=pmix -N 3 --exclude=n1,n3 true" ]; echo $?)" \
    "down and drained nodes not excluded: exit $rc, $(cat "$out/srun.args" "$out/nodes.out")"
  check "$(has '^mpickpt-run: node\(s\) n1,n3 of the allocation down \(n1=down\* n3=drained\): relaunching on 3 of the 3 node\(s\) still up \(srun -N 3 --exclude=n1,n3\)$' "$out/nodes.out"; echo $?)" \
    "no log line naming the nodes left out: $(cat "$out/nodes.out")"
  check "$(has ' -n n\[0-4\] ' "$out/sinfo.args"; echo $?)" "sinfo not asked about SLURM_JOB_NODELIST"
  # a second loss (n0 not responding at the second look): 2 up, --min-nodes 2: -N 2, both
  # losses excluded
  touch "$out/n0-dies"
  nodes_run 2 "n0 allocated;n1 down*;n2 mixed;n3 drained;n4 idle" --nodes 3 --min-nodes 2 --max-runs 3
  rc=$?
  check "$([ $rc = 0 ] && [ "$(line 2)" = "--mpi=pmix -N 3 --exclude=n1,n3 true" ] &&
           [ "$(line 3)" = "--mpi=pmix -N 2 --exclude=n1,n3,n0 true" ]; echo $?)" \
    "a second loss: exit $rc, $(cat "$out/srun.args" "$out/nodes.out")"
  rm -f "$out/n0-dies"
  # fewer nodes up than --min-nodes: no relaunch, the job's status
  nodes_run 1 "n0 allocated;n1 down*;n2 allocated;n3 allocated;n4 down" --max-runs 3 --min-nodes 4
  rc=$?
  check "$([ $rc = 1 ] && [ "$(count . "$out/srun.args")" = 1 ] &&
           has 'node\(s\) n1,n4 of the allocation down .*: 3 node\(s\) still up, fewer than 4 \(--min-nodes\): not relaunching' "$out/nodes.out"; echo $?)" \
    "--min-nodes: exit $rc, $(cat "$out/nodes.out")"
  # sinfo failing: a warning, the same line again; no node down: the same line, no such message
  nodes_run 1 "fail" --max-runs 2
  rc=$?
  check "$([ $rc = 0 ] && [ "$(line 2)" = "--mpi=pmix true" ] &&
           has 'cannot list the allocation' "$out/nodes.out"; echo $?)" \
    "sinfo failing: exit $rc, $(cat "$out/srun.args" "$out/nodes.out")"
  nodes_run 1 "n0 allocated;n1 allocated" --max-runs 2
  rc=$?
  check "$([ $rc = 0 ] && [ "$(line 2)" = "--mpi=pmix true" ] &&
           ! has 'of the allocation down' "$out/nodes.out"; echo $?)" \
    "no node down: exit $rc, $(cat "$out/srun.args" "$out/nodes.out")"
  ;;
*)
  echo "test_run: unknown case '$case_'" >&2
  exit 2
  ;;
esac
if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$out"/*.log 2>/dev/null; then
  check 1 "sanitizer report"
fi
echo "test_run $case_: $((checks - failures))/$checks checks passed"
[ $failures -eq 0 ]
