#!/bin/bash
# The cache rows of mpickpt-bench (docs/levels.md, docs/scaling.md "cache") on real nodes
# (tests/cluster/cluster.sh), next to the same rows with simulated nodes on this host, in one run:
# a sync save to the node cache on /dev/shm, without ("cache") and with partner copies
# ("cache_partner"), each against a raw write+fsync of the same bytes into the same node
# directory, interleaved rep by rep (speed_ratio = raw / save, medians; higher is better).
#
#   bench_cluster.sh BIN_DIR [OUTDIR]
#   SCENARIO=coop_restore bench_cluster.sh BIN_DIR [OUTDIR]
#
#   BENCH_CACHE_MB=64   MiB per rank          BENCH_REPS=5   reps (medians)
#   NODES=2 RPN=2       real nodes and ranks per node (NODES*RPN ranks; the simulated rows use
#                       the same count with MPICKPT_RANKS_PER_NODE=RPN on this host)
#
# On real nodes each node's /dev/shm is its own: partner copies cross the private bridge over
# TCP (Open MPI's tcp BTL between the nodes' namespaces), where simulated nodes use shared
# memory. The drain rows of the cache scenario need a persistent directory every node reaches,
# which --dir on /dev/shm is not: they are skipped here (the host rows print them). Never asserts
# a speed; exit 0 when every run succeeded. Needs root (cluster.sh check: 77 otherwise).
#
# SCENARIO=coop_restore: the cooperative restore's rows instead (mpi/bench/bench_coop.c, docs/
# scaling.md "Restores read each byte once"): a replicated tensor of BENCH_COOP_MB (default 64)
# MiB saved once and a tensor split by rows saved on half the ranks, restored on every rank with
# cooperation on and off (interleaved, BENCH_REPS reps, default 3; the page cache dropped before
# each), the checkpoint in OUTDIR (on the shared file system, which every node reaches), on the
# real nodes and then with simulated nodes on this host. Prints the bytes read from storage over
# the checkpoint's size (rchar less what TCP sockets received, summed over ranks), the bytes the
# ranks received over TCP (forwarded between nodes) and the restore's time, on vs off.
set -u
bin=$(readlink -f "${1:?usage: bench_cluster.sh BIN_DIR [OUTDIR]}")
out=${2:-$(mktemp -d /tmp/mpickpt-bench-cluster.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
C=$here/cluster.sh
"$C" check || exit $?
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
mb=${BENCH_CACHE_MB:-64} reps=${BENCH_REPS:-5} nodes=${NODES:-2} rpn=${RPN:-2}
scenario=${SCENARIO:-cache}
np=$((nodes * rpn))
name=cbn${MPICKPT_CLUSTER_TAG:-}
shm=""
cleanup() {
  "$C" down "$name"
  [ -n "$shm" ] && rm -rf "$shm"
}
"$C" down "$name"
trap cleanup EXIT
mkdir -p "$out" || exit 1
"$C" up "$name" "$nodes" || exit 1
hosts=$(seq -s, 0 $((nodes - 1)) | sed "s/\([0-9]*\)/\1:$rpn/g")
status=0
if [ "$scenario" = coop_restore ]; then
  mb=${BENCH_COOP_MB:-64} reps=${BENCH_REPS:-3}
  args=(--scenario coop_restore --mb-per-rank "$mb" --reps "$reps" --json)
  mkdir -p "$out/ckpt" || exit 1
  echo "== coop_restore, $np ranks on $nodes real nodes of $rpn ($mb MiB, $reps reps); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  timeout 900 "$C" mpirun "$name" "$hosts" -np "$np" "$bin/mpickpt-bench" "${args[@]}" \
    --dir "$out/ckpt" > "$out/cluster-coop.log" 2> "$out/cluster-coop.err" ||
    { echo "FAILED: see $out/cluster-coop.err"; tail -5 "$out/cluster-coop.err"; status=1; }
  echo "== coop_restore, $np ranks in simulated nodes of $rpn on this host; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  MPICKPT_RANKS_PER_NODE=$rpn timeout 900 mpirun -np "$np" "$bin/mpickpt-bench" "${args[@]}" \
    --dir "$out/ckpt" > "$out/host-coop.log" 2> "$out/host-coop.err" ||
    { echo "FAILED: see $out/host-coop.err"; tail -5 "$out/host-coop.err"; status=1; }
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "case        ranks  where           read on  off   disk on  off   TCP MiB on  off   restore_s on  off"
  for f in "$out/cluster-coop.log" "$out/host-coop.log"; do
    [ -e "$f" ] || continue
    where=$(basename "$f" -coop.log)
    grep '^{' "$f" | /usr/bin/python3 -c '
import json, sys
where = sys.argv[1]
rows = {}
for line in sys.stdin:
    d = json.loads(line)
    if d.get("scenario") == "coop_restore":
        rows.setdefault(d["case"], {})[d["cooperative"]] = d
for case, r in rows.items():
    on, off = r.get(1), r.get(0)
    if not on or not off:
        continue
    print("%-11s %d->%-3d %-14s %5.2fx %5.2fx  %5.2fx %5.2fx  %7.1f %6.1f  %9.4f %7.4f" % (
        case, on["writers"], on["ranks"], where + (" nodes" if where == "cluster" else " (sim.)"),
        on["read_over_ckpt"], off["read_over_ckpt"], on["disk_over_ckpt"], off["disk_over_ckpt"],
        on.get("net_bytes", 0) / 1048576.0, off.get("net_bytes", 0) / 1048576.0,
        on["restore_s"], off["restore_s"]))
' "$where"
  done
  echo "(logs in $out)"
  exit $status
fi
args=(--scenario cache --mb-per-rank "$mb" --reps "$reps" --json)
for layout in per-rank per-node; do
  echo "== $layout, $np ranks on $nodes real nodes of $rpn ($mb MiB per rank, $reps reps)"
  timeout 900 "$C" mpirun "$name" "$hosts" -np "$np" "$bin/mpickpt-bench" "${args[@]}" \
    --layout "$layout" --dir /dev/shm/mpkb > "$out/cluster-$layout.log" 2> "$out/cluster-$layout.err" ||
    { echo "FAILED: see $out/cluster-$layout.err"; tail -5 "$out/cluster-$layout.err"; status=1; }
  echo "== $layout, $np ranks in simulated nodes of $rpn on this host"
  shm=$(mktemp -d /dev/shm/mpickpt-bench-cluster.XXXXXX)
  MPICKPT_RANKS_PER_NODE=$rpn timeout 900 mpirun -np "$np" "$bin/mpickpt-bench" "${args[@]}" \
    --layout "$layout" --dir "$shm" > "$out/host-$layout.log" 2> "$out/host-$layout.err" ||
    { echo "FAILED: see $out/host-$layout.err"; tail -5 "$out/host-$layout.err"; status=1; }
  rm -rf "$shm"
  shm=""
done
echo
echo "row            layout    where             save_s   raw_s  ratio (p25..p75)"
for f in "$out"/cluster-*.log "$out"/host-*.log; do
  [ -e "$f" ] || continue
  where=$(basename "$f" .log); where=${where%%-*}
  grep '^{' "$f" | /usr/bin/python3 -c '
import json, sys
where = sys.argv[1]
for line in sys.stdin:
    d = json.loads(line)
    if d.get("scenario") not in ("cache", "cache_partner"):
        continue
    if "skipped" in d:
        print("%-14s %-9s %-16s skipped: %s" % (d["scenario"], d["layout"], where, d["skipped"]))
        continue
    print("%-14s %-9s %-16s %7.4f %7.4f %6.3f (%.3f..%.3f)" % (d["scenario"], d["layout"],
          where + (" nodes" if where == "cluster" else " (sim.)"), d["mpickpt_s"], d["baseline_s"],
          d["speed_ratio"], d["paired_ratio_p25"], d["paired_ratio_p75"]))
' "$where"
done
echo "(logs in $out)"
exit $status
