#!/bin/bash
# Cluster tests on real nodes (tests/cluster/cluster.sh; docs/testing-faults.md, "Real nodes"):
# the demo (mpickpt-demo, which checks every value it restores, exactly, on any rank count) on 3
# nodes of 2 ranks, each node with its own hostname and /dev/shm, Open MPI across them over TCP.
#
#   test_cluster.sh CASE BIN_DIR OUTDIR
#
#   pernode       per-node layout: 6 ranks on 3 nodes write one data file per node (3 files, the
#                 nodes found by MPI_Comm_split_type); 3 ranks on 2 nodes restore them exactly
#   hier          the hierarchical merge (MPICKPT_HIER_MERGE=1) on the same nodes, then a restore
#                 on 4 ranks of 2 nodes
#   partner       the cache level with partner copies; node 1 killed with its /dev/shm, a
#                 replacement joins: the newest checkpoint (in the caches only) is rebuilt on the
#                 new node from its partner's copy and restored exactly
#   partner_lost  nodes 1 and 2 killed (a node and its partner): the cache's newest checkpoint
#                 cannot be made whole; the restore falls back to the persistent level's, never
#                 wrong values
#   drain_kill    a rank of node 1 killed inside the drain to the persistent level, then node 1
#                 dies: no torn checkpoint in the persistent directory; the relaunch rebuilds the
#                 checkpoint from the partner, restores it exactly and drains it
#   drain_node    a node dies during a drain, no rank killed first: a resumed run's first drain
#                 (ckpt-4, step 8) holds on rank 4 (MPICKPT_FAULT=4:drain:hold, node 2) and node 1
#                 is killed meanwhile; the persistent directory keeps its ckpt-2, nothing of ckpt-4
#                 (verify, list --json); on node 0, 2 and a replacement node 1 the relaunch rebuilds
#                 ckpt-4 from the partner, restores it exactly and drains it
#   drain_node_async  drain_node with async saves (--async): the drain holds on rank 4's writer
#                 thread while training goes on; the same checks
#   drain_node_rest  the same death, then the relaunch on the 2 remaining nodes only (4 ranks):
#                 the caches' ckpt-4 and ckpt-3 are of the 6-rank job on 3 nodes, so it restores
#                 the persistent ckpt-2 exactly (the newest on a level that survived for it)
#   coop          the cooperative restore (tests/mpi/test_coop_restore.c, PROG: the 4th argument):
#                 6 ranks on 3 nodes save 3 replicated tensors of 4 MiB, one split by rows and one
#                 by columns (per-node layout); restored on the 6 ranks and on 4 ranks of 2 nodes
#                 (an N->M reshard): every value exact on every rank (the program checks), the
#                 bytes read (rchar less TCP received, summed) <= 1.25x the data (it checks), and
#                 per node: the replicated tensors' readers spread over the nodes as the plan
#                 says (the least loaded node first: each node reads floor(3/nodes) to
#                 ceil(3/nodes) of them, plus at most its share of the rest), and each node
#                 reads less than the 12 MiB of replicated data it restored exactly: the rest was
#                 forwarded to it from another node (Open MPI's tcp BTL between namespaces). The
#                 same restore with the per-rank layout (its saver knows the nodes too). Then a
#                 byte of 'rep' flipped in its file: the restore fails on every rank with the
#                 checksum message, forwarded from its reader, no hang; put back, it succeeds.
#
#   test_cluster.sh coop BIN_DIR OUTDIR PROG
#
# Exit 77 (ctest: skipped) where namespaces are not permitted. The cluster is taken down at the
# end, whatever happens (and by the cluster_cleanup fixture after a test that was killed).
set -u
case_=$1
bin=$2
out=$3
here=$(cd "$(dirname "$0")" && pwd)
C=$here/cluster.sh
"$C" check || exit $?

# MPICKPT_CLUSTER_TAG (up to 5 of [a-z0-9], from the build directory): another test run on the
# machine has other names, so neither takes down the other's nodes
case $case_ in
  pernode) name=cpn ;; hier) name=chm ;; partner) name=cpa ;; partner_lost) name=cpl ;;
  drain_kill) name=cdk ;; drain_node) name=cdn ;; drain_node_rest) name=cdr ;;
  drain_node_async) name=cda ;; coop) name=cco ;; *) echo "unknown case '$case_'" >&2; exit 2 ;;
esac
name=$name${MPICKPT_CLUSTER_TAG:-}
"$C" down "$name"
trap '"$C" down "$name"' EXIT
rm -rf "$out" && mkdir -p "$out" || exit 1
dir=$out/ckpt
log=$out/log

fail() { echo "FAIL ($case_): $*" >&2; echo "--- last run:" >&2; tail -30 "$log" >&2; exit 1; }

# run HOSTS NP ARGS...: the demo across the cluster; its output in $log; returns its status
run() {
  local hosts=$1 np=$2
  shift 2
  local xs=(-x MPICKPT_LOG=info -x MPICKPT_HIER_MERGE)
  [ -n "${MPICKPT_FAULT:-}" ] && xs+=(-x MPICKPT_FAULT)
  echo "+ mpirun --host $hosts -np $np mpickpt-demo $*" >&2
  timeout 180 "$C" mpirun "$name" "$hosts" -np "$np" "${xs[@]}" "$bin/mpickpt-demo" --dir "$dir" --mb 1 --steps-per-epoch 6 --ckpt-every 2 "$@" \
    > "$log" 2>&1
  local rc=$?
  # the sanitizer build (ASAN_OPTIONS and LSAN_OPTIONS reach the ranks of every node: the agent
  # passes mpirun's environment on to each node's orted): a report fails the test at its end,
  # also one from a run that was meant to fail
  grep -Eq 'AddressSanitizer|LeakSanitizer|runtime error:' "$log" && cat "$log" >> "$out/sanitizer.log"
  return $rc
}

expect() { # expect REGEX WHAT: the last run's output has a line matching REGEX
  grep -Eq "$1" "$log" || fail "$2 (no line matching '$1')"
}

resumed_step() {
  sed -n 's/^resumed epoch=[0-9]* step=\([0-9]*\) from=.*/\1/p' "$log"
}

"$C" up "$name" 3 || exit 1
# real nodes: 6 ranks report 3 hostnames, 2 each
# (mpirun's own warnings on stderr left out)
got=$(timeout 60 "$C" mpirun "$name" 0:2,1:2,2:2 -np 6 hostname 2>/dev/null | sort | uniq -c |
      awk '{print $2 "x" $1}' | tr '\n' ' ')
[ "$got" = "${name}n0x2 ${name}n1x2 ${name}n2x2 " ] || { echo "FAIL: hostnames: $got" >&2; exit 1; }
export MPICKPT_HIER_MERGE=0
cache=(--cache-dir /dev/shm/mpkc/ck --redundancy partner --cache-keep 3)

case $case_ in
  coop)
    prog=$(readlink -f "${4:?usage: test_cluster.sh coop BIN_DIR OUTDIR PROG}")
    # runp HOSTS NP ARGS...: test_coop_restore across the cluster, its output in $log
    runp() {
      local hosts=$1 np=$2
      shift 2
      echo "+ mpirun --host $hosts -np $np test_coop_restore $*" >&2
      timeout 120 "$C" mpirun "$name" "$hosts" -np "$np" "$prog" "$out" "$@" > "$log" 2>&1
      local rc=$?
      grep -Eq 'AddressSanitizer|LeakSanitizer|runtime error:' "$log" && cat "$log" >> "$out/sanitizer.log"
      return $rc
    }
    # spread NODES: the bytes each node read (its ranks' rchar, from the coop_reads lines);
    # the 3 replicated tensors of 4 MiB each have one reader, on the least loaded node first:
    # a node reads floor(3/NODES) to ceil(3/NODES) of them plus at most the 5 MiB of the rest,
    # and less than the 12 MiB of them it restored (what it did not read came from another node)
    spread() {
      awk -v n="$1" -v rep=$((4 << 20)) -v rest=$((5 << 20)) '
        $1 == "coop_reads:" { b[$5] += $7; k++ }
        END {
          lo = int(3 / n) * rep; hi = int((3 + n - 1) / n) * rep + rest; bad = 0; m = 0
          for (h in b) {
            m++
            printf "node %s read %.2f MiB\n", h, b[h] / 1048576
            if (b[h] < lo || b[h] > hi || b[h] >= 3 * rep) bad = 1
          }
          if (m != n) { print "want " n " nodes, got " m; bad = 1 }
          if (bad) printf "want each node within %.0f..%.0f MiB and below 12 MiB\n", lo / 1048576, hi / 1048576
          exit bad
        }' "$log"
    }
    t0=$SECONDS
    runp 0:2,1:2,2:2 6 save per-node || fail "the save on 6 ranks failed"
    n=$(ls "$out" | grep -c '^coop\.data-')
    [ "$n" = 3 ] || fail "the checkpoint has $n data files, want 3 (one per node)"
    runp 0:2,1:2,2:2 6 restore per-node 6 || fail "the restore on 6 ranks of 3 nodes failed"
    expect '^coop_restore: 6->6 ranks, cooperative on: ' "no restore on 6 ranks"
    grep '^coop_restore:' "$log"
    spread 3 || fail "the readers are not spread over the 3 nodes"
    runp 0:2,1:2 4 restore per-node 6 || fail "the restore on 4 ranks of 2 nodes failed"
    expect '^coop_restore: 6->4 ranks, cooperative on: ' "no restore on 4 ranks"
    grep '^coop_restore:' "$log"
    spread 2 || fail "the readers are not spread over the 2 nodes"
    runp 0:2,1:2,2:2 6 restore per-rank 6 || fail "the per-rank saver's restore on 6 ranks failed"
    grep '^coop_restore:' "$log"
    spread 3 || fail "per-rank: the readers are not spread over the 3 nodes"
    runp 0:2,1:2,2:2 6 corrupt per-node 6 || fail "the flipped byte: the test failed"
    expect "checksum mismatch .*\(read for it by rank [0-9]+\)" "no forwarded checksum error"
    grep 'corrupt restore' "$log"
    echo "coop: $((SECONDS - t0)) s of MPI runs"
    ;;
  pernode|hier)
    [ "$case_" = hier ] && export MPICKPT_HIER_MERGE=1
    run 0:2,1:2,2:2 6 --layout per-node --epochs 1 || fail "the 6-rank run failed"
    expect '^done epoch=0 step=6' "the 6-rank run did not finish"
    n=$(ls "$dir/chief" | grep -c '^ckpt-3\.data-')
    [ "$n" = 3 ] || fail "ckpt-3 has $n data files, want 3 (one per node)"
    if [ "$case_" = pernode ]; then hosts=0:2,1:1 np=3; else hosts=0:2,1:2 np=4; fi
    run $hosts $np --layout per-node --epochs 2 || fail "the $np-rank resume failed"
    expect "^resumed epoch=0 step=6 from=$dir/chief/ckpt-3\$" "not resumed from ckpt-3"
    expect "^verified every restored value at step 6: .* of ranks 0-$((np - 1))\$" \
      "restored values not verified"
    expect '^done epoch=1 step=12' "the resumed run did not finish"
    ;;
  partner)
    # persist every 4th: ckpt-1..3 are in the nodes' caches only
    run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 4 --epochs 1 || fail "the first run failed"
    expect '^done epoch=0 step=6' "the first run did not finish"
    ls "$dir/chief" | grep -q '\.index$' && fail "a checkpoint reached the persistent level"
    "$C" exec "$name" 1 sh -c 'find /dev/shm/mpkc -name "ckpt-3*" | grep -q .' ||
      fail "node 1's cache has no file of ckpt-3"
    "$C" kill "$name" 1 && "$C" replace "$name" 1 || fail "node 1 not replaced"
    "$C" exec "$name" 1 sh -c '[ -z "$(ls -A /dev/shm)" ]' || fail "the new node's /dev/shm is not empty"
    run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 4 --epochs 2 || fail "the relaunch failed"
    expect "host ${name}n1\] info: node 1: [0-9]+ files of ckpt-3 rebuilt" "node 1 not rebuilt"
    expect '^resumed epoch=0 step=6 from=/dev/shm/mpkc/ck/[^ ]*/ckpt-3$' "not resumed from the cache's ckpt-3"
    expect '^verified every restored value at step 6: .* of ranks 0-5$' "restored values not verified"
    expect '^done epoch=1 step=12' "the relaunch did not finish"
    ;;
  partner_lost)
    # persist every 2nd: ckpt-2 (step 4) on the persistent level, ckpt-3 (step 6) cache only
    run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 1 || fail "the first run failed"
    expect '^done epoch=0 step=6' "the first run did not finish"
    [ -e "$dir/chief/ckpt-2.index" ] && [ ! -e "$dir/chief/ckpt-3.index" ] ||
      fail "want ckpt-2 and not ckpt-3 on the persistent level: $(ls "$dir/chief")"
    for i in 1 2; do "$C" kill "$name" $i && "$C" replace "$name" $i || fail "node $i not replaced"; done
    run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 2 || fail "the relaunch failed"
    expect "^resumed epoch=0 step=4 from=$dir/chief/ckpt-2\$" "not resumed from the persistent ckpt-2"
    expect '^verified every restored value at step 4: .* of ranks 0-5$' "restored values not verified"
    expect '^done epoch=1 step=12' "the relaunch did not finish"
    ;;
  drain_kill)
    # rank 2 (node 1) killed at the drain of ckpt-2, the first checkpoint to persist
    MPICKPT_FAULT=2:drain:kill run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 1 &&
      fail "the run with a rank killed in the drain succeeded"
    expect 'killing this rank at drain' "the fault did not fire"
    [ -e "$dir/chief/ckpt-2.index" ] && fail "a torn ckpt-2 committed on the persistent level"
    ls "$dir/chief" | grep -q '^ckpt-2\.data' && fail "ckpt-2's data in the persistent directory"
    "$C" kill "$name" 1 && "$C" replace "$name" 1 || fail "node 1 not replaced"
    run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 1 || fail "the relaunch failed"
    expect "host ${name}n1\] info: node 1: [0-9]+ files of ckpt-2 rebuilt" "node 1 not rebuilt"
    expect '^resumed epoch=0 step=4 from=/dev/shm/mpkc/ck/[^ ]*/ckpt-2$' "not resumed from the cache's ckpt-2"
    expect '^verified every restored value at step 4: .* of ranks 0-5$' "restored values not verified"
    expect "drained ckpt-2 to $dir/chief" "ckpt-2 not drained again"
    expect '^done epoch=0 step=6' "the relaunch did not finish"
    [ -e "$dir/chief/ckpt-2.index" ] || fail "ckpt-2 not on the persistent level after the relaunch"
    ls "$dir/chief" | grep -q '_temp$' && fail "an in-flight directory left: $(ls "$dir/chief")"
    ;;
  drain_node|drain_node_rest|drain_node_async)
    # async: the drain runs on the writer thread of each rank, training goes on meanwhile
    [ "$case_" = drain_node_async ] && cache+=(--async)
    # ckpt-1..3 (steps 2, 4, 6); ckpt-2 drained: the persistent level's newest
    run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 1 || fail "the first run failed"
    expect '^done epoch=0 step=6' "the first run did not finish"
    [ -e "$dir/chief/ckpt-2.index" ] && [ ! -e "$dir/chief/ckpt-3.index" ] ||
      fail "want ckpt-2 and not ckpt-3 on the persistent level: $(ls "$dir/chief")"
    # the resumed run commits ckpt-4 (step 8) in the caches; its drain holds on rank 4 (node 2):
    # the other ranks wait for it in the drain's first vote, rank 0's in-flight directory made
    MPICKPT_FAULT=4:drain:hold run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 2 &
    pid=$!
    end=$((SECONDS + 120))
    until grep -q 'holding this rank at drain' "$log"; do
      kill -0 $pid 2>/dev/null || fail "the run ended before its drain held"
      [ $SECONDS -lt $end ] || { kill $pid; fail "the drain did not hold"; }
      sleep 0.2
    done
    expect '^resumed epoch=0 step=6 from=/dev/shm/mpkc/ck/[^ ]*/ckpt-3$' "not resumed from ckpt-3"
    "$C" kill "$name" 1 || fail "kill node 1"
    wait $pid && fail "the run whose node 1 died succeeded"
    cp "$log" "$out/log.held" && ls -a "$dir/chief" > "$out/chief.after-kill"
    expect 'holding this rank at drain' "the hold did not fire"
    grep -q '^checkpoint prefix=[^ ]*/ckpt-4 ' "$log" && fail "ckpt-4's save returned (its drain ran through)"
    # nothing torn in the persistent directory: ckpt-2 whole and listed, nothing of ckpt-4
    [ -e "$dir/chief/ckpt-4.index" ] && fail "ckpt-4 committed on the persistent level"
    ls "$dir/chief" | grep -q '^ckpt-4\.data' && fail "ckpt-4's data in the persistent directory"
    "$bin/mpickpt" verify "$dir/chief" > "$out/verify" 2>&1 || { cat "$out/verify" >&2; fail "verify"; }
    grep -q "ckpt-2: ok" "$out/verify" && ! grep -q "ckpt-4" "$out/verify" ||
      fail "verify: $(cat "$out/verify")"
    "$bin/mpickpt" list --json "$dir" > "$out/list.json" || fail "list --json"
    /usr/bin/python3 - "$out/list.json" <<'PY' || fail "list --json: $(cat "$out/list.json")"
import json, sys
d = json.load(open(sys.argv[1]))
lv = {c["prefix"].rsplit("/", 1)[1]: c["levels"] for c in d["checkpoints"]}
assert "persistent" in lv.get("ckpt-2", []), lv
assert all("persistent" not in lv[k] for k in lv if k != "ckpt-2"), lv
PY
    if [ "$case_" != drain_node_rest ]; then
      "$C" replace "$name" 1 || fail "node 1 not replaced"
      run 0:2,1:2,2:2 6 "${cache[@]}" --persist-every 2 --epochs 2 || fail "the relaunch failed"
      expect "host ${name}n1\] info: node 1: [0-9]+ files of ckpt-4 rebuilt" "node 1 not rebuilt"
      expect '^resumed epoch=1 step=8 from=/dev/shm/mpkc/ck/[^ ]*/ckpt-4$' "not resumed from the cache's ckpt-4"
      expect '^verified every restored value at step 8: .* of ranks 0-5$' "restored values not verified"
      expect "drained ckpt-4 to $dir/chief" "ckpt-4 not drained again"
      expect '^done epoch=1 step=12' "the relaunch did not finish"
      [ -e "$dir/chief/ckpt-4.index" ] || fail "ckpt-4 not on the persistent level after the relaunch"
      ls "$dir/chief" | grep -q '_temp$' && fail "an in-flight directory left: $(ls "$dir/chief")"
      "$bin/mpickpt" verify "$dir/chief" > "$out/verify" 2>&1 || { cat "$out/verify" >&2; fail "verify at the end"; }
    else
      run 0:2,2:2 4 "${cache[@]}" --persist-every 2 --epochs 2 || fail "the relaunch on 2 nodes failed"
      expect "^resumed epoch=0 step=4 from=$dir/chief/ckpt-2\$" "not resumed from the persistent ckpt-2"
      expect '^verified every restored value at step 4: .* of ranks 0-3$' "restored values not verified"
      expect '^done epoch=1 step=12' "the relaunch did not finish"
      # the caches' ckpt-4 (6 ranks) is never drained by the 4-rank job: nothing of it, nor an
      # in-flight directory, in the persistent directory; what is there reads back whole
      ls "$dir/chief" | grep -Eq '^ckpt-4\.|_temp$' && fail "ckpt-4 or debris persisted: $(ls "$dir/chief")"
      "$bin/mpickpt" verify "$dir/chief" > "$out/verify" 2>&1 || { cat "$out/verify" >&2; fail "verify at the end"; }
    fi
    ;;
  *) echo "unknown case '$case_'" >&2; exit 2 ;;
esac
[ -e "$out/sanitizer.log" ] && { echo "FAIL ($case_): a sanitizer report:" >&2; head -40 "$out/sanitizer.log" >&2; exit 1; }
if [ "$case_" = coop ]; then
  echo "ok: coop (exact values, each byte read once, readers spread over real nodes)"
else
  echo "ok: $case_ (step $(resumed_step) restored exactly on real nodes)"
fi
