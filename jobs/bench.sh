#!/usr/bin/env bash
# The benchmark job: installs what is missing and builds (unless MPICKPT_BUILD_DIR is given), then
# runs mpickpt-bench (every scenario: large, small and its restore, restore warm/cold/resharded,
# async) at each rank count for each layout (shared with collective MPI-IO off and on), plus the
# merge/scale benchmark when build/bin/mpickpt-merge-bench exists, and prints one table of ratios
# against the goals; and the PyTorch rows (jobs/bench_python.py --scenario torch at 2 and 4 ranks:
# a replicated ~200 MB state against torch.save+fsync and torch.load; docs/scaling.md).
#
#   jobs/bench.sh            the full run (defaults: 256 MiB per rank, 5 reps, 4 and 2 ranks)
#   jobs/bench.sh --check    a quick self-check (ctest "bench"): tiny sizes, 2 ranks, every scenario,
#                            every layout; the JSON lines must parse and carry every field with
#                            positive numbers. It never asserts speed (times here are noisy).
#   jobs/bench.sh --check-scale   the same for the scale rows only (ctest "bench_scale_check"):
#                            collective calls, restore memory, files, fixed cost, at tiny sizes.
#   jobs/bench.sh --scale    only the scale rows, at the sizes below (a few minutes).
#
# The cache rows (issue 16; BENCH_CACHE=0 skips them): saves to a cache on /dev/shm, without and
# with partner copies, against a raw write+fsync there; BENCH_CACHE_NP=4, BENCH_CACHE_MB=64,
# BENCH_CACHE_RPN=2 (simulated ranks per node).
#
# The scale rows (issue 15; after the scenarios above, BENCH_SCALE=0 skips them):
#   collective calls per save/restore (PMPI counts; every np of BENCH_NP, every layout of
#   BENCH_CONFIGS plus per-node), files per checkpoint (every np; per-rank, shared, per-node,
#   per-node with BENCH_RANKS_PER_NODE simulated ranks per node), per-rank restore memory against
#   the total piece count, and the fixed cost of a small save/restore against raw write+fsync/pread.
#   per-node rows are skipped with the saver's message when this build has no such layout.
#   BENCH_RANKS_PER_NODE=2   files row: per-node with simulated nodes of this many ranks
#   BENCH_MEM_NP=4           memory row: rank count
#   BENCH_MEM_PIECES="1000 10000 100000 1000000"   memory row: total piece counts
#   BENCH_MEM_KIND=partitioned   or owned (full tensors; registration is quadratic past ~100k/rank)
#   BENCH_MEM_LAYOUTS=per-rank   memory row: layouts (shared: a dataset per tensor, slow past 10k)
#   BENCH_FIXED_NP="4 16"    fixed-cost rows: rank counts (16 oversubscribes 2 cores: fine)
#   BENCH_FIXED_MB=4         fixed-cost rows: MiB per rank
#   BENCH_FIXED_REPS=11      fixed-cost rows: reps (median and best reported)
#   BENCH_FIXED_LAYOUTS="per-rank per-node"
#
#   MPICKPT_BUILD_DIR=DIR    use this existing build (no package install, no build); default: build/
#                            (fio for the reference line and /usr/bin/python3 for --check: jobs/deps.sh test)
#   BENCH_DIR=DIR            checkpoints and baseline files (default <build>/bench); logs in DIR-logs/
#   BENCH_MB=M               MiB per rank of the large/restore/async model (default 256)
#   BENCH_REPS=R             reps per scenario, medians reported (default 5)
#   BENCH_TENSORS=K          small tensors per rank (default 2000)
#   BENCH_NP="4 2"           rank counts
#   BENCH_CONFIGS="per-rank shared:0 shared:1"   layouts (shared:<collective MPI-IO 0|1>; also per-node,
#                            with MPICKPT_RANKS_PER_NODE=k for nodes of k ranks on one machine)
#   BENCH_SCENARIOS=all      or large|small|restore|async
#   BENCH_ARGS="..."         extra mpickpt-bench arguments (e.g. --hint romio_cb_write=disable)
#   BENCH_FIO=0              skip the fio reference run (default: on when fio is installed)
#   BENCH_MERGE_ARGS="..."   arguments of mpickpt-merge-bench (default: --json); it runs as one process
#   BENCH_TORCH=0            skip the PyTorch rows (jobs/bench_python.py --scenario torch, issue 30:
#                            a replicated ~200 MB Transformer+AdamW state against torch.save+fsync
#                            and torch.load, and raw write+fsync/read of the same bytes, same run)
#   BENCH_TORCH_NP="2 4"     their rank counts; BENCH_TORCH_REPS=7; BENCH_TORCH_LAYOUTS=default,per-rank,per-node
#   BENCH_TORCH_ARGS="..."   more bench_python.py arguments (e.g. --torch-layers 1 --no-torch-async)
#
# Per-rep times (stderr of mpickpt-bench -v) are in DIR-logs/<np>-<layout>.err.
# Ratios are medians of measurements interleaved with their baseline in the same run (this disk's
# speed drifts 2-3x over minutes): speed_ratio = baseline_s / mpickpt_s (higher is better; the
# baseline is write(2)+fsync of the same bytes to one plain file per rank, read(2) for restores);
# async: blocking_over_memcpy = blocking time of an async save / memcpy of the same bytes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

check=0
check_scale=0
scale_only=0
case "${1:-}" in
  --check) check=1 ;;
  --check-scale) check_scale=1; scale_only=1 ;;
  --scale) scale_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--check|--check-scale|--scale]" >&2; exit 2 ;;
esac

if [ -n "${MPICKPT_BUILD_DIR:-}" ]; then
  bdir=$(cd "$MPICKPT_BUILD_DIR" && pwd)
  echo "== using the build in $bdir"
else
  bdir=$root/build
  "$root/jobs/deps.sh" build
  echo "== building (build/)"
  "$root/jobs/build.sh"
fi
bench=$bdir/bin/mpickpt-bench
[ -x "$bench" ] || { echo "bench.sh: $bench is missing (build first)" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_odls_base_sigkill_timeout=0

out=${BENCH_DIR:-$bdir/bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
logs=$out-logs
rm -rf "$logs"
mkdir -p "$logs"
# Only our own leftovers are removed (an interrupted run's checkpoints and baseline files).
rm -rf "$out"/bench-* "$out"/workertemp_* "$out"/fio
results=$logs/results.jsonl
: >"$results"

if [ "$check" = 1 ] || [ "$check_scale" = 1 ]; then
  mb=4; reps=2; tensors=40; nps="2"; scen=all
  configs="per-rank shared:0 shared:1 per-node"
else
  mb=${BENCH_MB:-256}; reps=${BENCH_REPS:-5}; tensors=${BENCH_TENSORS:-2000}
  nps=${BENCH_NP:-"4 2"}; scen=${BENCH_SCENARIOS:-all}
  configs=${BENCH_CONFIGS:-"per-rank shared:0 shared:1"}
fi
read -r -a extra <<<"${BENCH_ARGS:-}"

status=0
if [ "$scale_only" = 0 ]; then # (not indented: the loop as it was before the scale rows)
echo "== mpickpt-bench: $mb MiB/rank, $reps reps, $tensors small tensors/rank, ranks: $nps, layouts: $configs"
echo "   dir $out, logs $logs"
for np in $nps; do
  if [ "$check" = 0 ] && [ "${BENCH_FIO:-1}" != 0 ] && command -v fio >/dev/null 2>&1; then
    # A reference only: not interleaved with the runs below (the ratios are).
    mkdir -p "$out/fio"
    bw=$(fio --name=ref --directory="$out/fio" --rw=write --bs=4M --size="${mb}M" --numjobs="$np" \
           --end_fsync=1 --group_reporting --output-format=terse --terse-version=3 2>"$logs/fio-np$np.err" |
         awk -F';' 'NF > 50 { printf "%.3f", $48 * 1024 / 1e9 }') || bw=
    rm -rf "$out/fio"
    [ -n "$bw" ] && echo "{\"fio\":1,\"ranks\":$np,\"write_fsync_gbps\":$bw}" >>"$results"
  fi
  for cfg in $configs; do
    layout=${cfg%%:*}
    coll=0
    [ "$cfg" != "$layout" ] && coll=${cfg#*:}
    tag=np$np-$layout
    [ "$layout" = shared ] && tag=$tag-coll$coll
    echo
    echo "== $np ranks, layout $layout$([ "$layout" = shared ] && echo ", collective MPI-IO $coll")"
    set +e
    mpirun -np "$np" "$bench" --dir "$out" --scenario "$scen" --mb-per-rank "$mb" --reps "$reps" \
      --tensors "$tensors" --layout "$layout" --collective "$coll" --json -v ${extra[@]+"${extra[@]}"} \
      >"$logs/$tag.log" 2>"$logs/$tag.err"
    rc=$?
    set -e
    grep -v '^{' "$logs/$tag.log" | sed 's/^/   /'
    grep '^{' "$logs/$tag.log" >>"$results" || true
    if [ "$rc" -ne 0 ]; then
      echo "== FAILED ($rc): mpickpt-bench $tag (log: $logs/$tag.log, $logs/$tag.err)" >&2
      tail -20 "$logs/$tag.err" >&2
      status=1
    fi
  done
done
fi

# ---- the scale rows: collective calls, files per checkpoint, restore memory, fixed cost ----
# run_rows TAG NP ARGS...: one mpickpt-bench run; its JSON lines go to results.jsonl.
run_rows() {
  local tag=$1 np=$2
  shift 2
  set +e
  mpirun -np "$np" "$bench" --dir "$out" --json "$@" ${extra[@]+"${extra[@]}"} \
    >"$logs/$tag.log" 2>"$logs/$tag.err"
  local rc=$?
  set -e
  { grep -v '^{' "$logs/$tag.log" | grep -v '^times: medians' | sed 's/^/   /'; } || true
  grep '^{' "$logs/$tag.log" >>"$results" || true
  if [ "$rc" -ne 0 ]; then
    echo "== FAILED ($rc): mpickpt-bench $tag (log: $logs/$tag.log, $logs/$tag.err)" >&2
    tail -20 "$logs/$tag.err" >&2
    status=1
  fi
}
if [ "$check_scale" = 1 ]; then
  scale_nps="2"; coll_configs="per-rank shared:0 per-node"; rpn=1
  mem_np=2; mem_pieces="200 2000"; mem_kind=partitioned; mem_layouts=per-rank; mem_rank1=10
  fixed_nps="2"; fixed_mb=1; fixed_reps=3; fixed_layouts="per-rank per-node"
else
  scale_nps=$nps; coll_configs="$configs per-node"; rpn=${BENCH_RANKS_PER_NODE:-2}
  mem_np=${BENCH_MEM_NP:-4}; mem_pieces=${BENCH_MEM_PIECES:-"1000 10000 100000 1000000"}
  mem_kind=${BENCH_MEM_KIND:-partitioned}; mem_layouts=${BENCH_MEM_LAYOUTS:-per-rank}; mem_rank1=100
  fixed_nps=${BENCH_FIXED_NP:-"4 16"}; fixed_mb=${BENCH_FIXED_MB:-4}
  fixed_reps=${BENCH_FIXED_REPS:-11}; fixed_layouts=${BENCH_FIXED_LAYOUTS:-"per-rank per-node"}
fi
if [ "$check" = 0 ] && [ "${BENCH_SCALE:-1}" != 0 ]; then
  echo
  echo "== scale rows: collective calls and files at ranks $scale_nps; restore memory at $mem_np ranks" \
       "(pieces: $mem_pieces); fixed cost $fixed_mb MiB/rank at ranks $fixed_nps, $fixed_reps reps"
  for np in $scale_nps; do
    for cfg in $coll_configs; do
      layout=${cfg%%:*}
      coll=0
      [ "$cfg" != "$layout" ] && coll=${cfg#*:}
      run_rows "calls-np$np-$layout-coll$coll" "$np" --scenario collectives --layout "$layout" \
        --collective "$coll" --fixed-mb "$fixed_mb"
    done
    run_rows "files-np$np" "$np" --scenario files --fixed-mb "$fixed_mb" --ranks-per-node "$rpn"
  done
  for layout in $mem_layouts; do
    run_rows "memory-np$mem_np-$layout" "$mem_np" --scenario memory --layout "$layout" \
      --mem-pieces "${mem_pieces// /,}" --mem-kind "$mem_kind" --mem-rank1-pieces "$mem_rank1"
  done
  for np in $fixed_nps; do
    for layout in $fixed_layouts; do
      run_rows "fixed-np$np-$layout" "$np" --scenario fixed --layout "$layout" \
        --fixed-mb "$fixed_mb" --fixed-reps "$fixed_reps" -v
    done
  done
fi

# ---- the cache rows (issue 16, docs/levels.md): a save to a tmpfs cache, without and with
# partner copies, against a raw write+fsync of the same bytes into the same directory ----
if [ "$check" = 0 ] && [ "$check_scale" = 0 ] && [ "${BENCH_CACHE:-1}" != 0 ] && [ -d /dev/shm ]; then
  cache_np=${BENCH_CACHE_NP:-4}; cache_mb=${BENCH_CACHE_MB:-64}; cache_rpn=${BENCH_CACHE_RPN:-2}
  cache_out=$(mktemp -d /dev/shm/mpickpt-bench-cache.XXXXXX)
  echo
  echo "== cache rows: $cache_np ranks in simulated nodes of $cache_rpn, $cache_mb MiB per rank," \
       "cache on tmpfs ($cache_out/cache/%n)"
  for layout in per-rank per-node; do
    MPICKPT_RANKS_PER_NODE=$cache_rpn run_rows "cache-np$cache_np-$layout" "$cache_np" \
      --scenario cache --layout "$layout" --mb-per-rank "$cache_mb" --reps "$reps" \
      --dir "$cache_out"
  done
  rm -rf "$cache_out"
fi

# ---- the PyTorch rows (issue 30; jobs/bench_python.py --scenario torch): a replicated ~200 MB
# Transformer + AdamW state saved by mpickpt.CheckpointManager (sync per layout, async) and restored
# (warm, cold) against torch.save+fsync from rank 0 and torch.load on every rank, and raw
# write+fsync / read of the same bytes, in the same run; ratios printed, never asserted ----
if [ "$check" = 0 ] && [ "$scale_only" = 0 ] && [ "${BENCH_TORCH:-1}" != 0 ]; then
  torch_nps=${BENCH_TORCH_NP:-"2 4"}; torch_reps=${BENCH_TORCH_REPS:-7}
  torch_layouts=${BENCH_TORCH_LAYOUTS:-default,per-rank,per-node}
  read -r -a torch_args <<<"${BENCH_TORCH_ARGS:-}"
  if [ ! -x /usr/bin/python3 ] || [ ! -d "$bdir/python/mpickpt" ]; then
    echo
    echo "== PyTorch rows skipped: no /usr/bin/python3 or no $bdir/python (the Python package)"
  else
    for np in $torch_nps; do
      echo
      echo "== PyTorch rows: $np ranks, $torch_reps reps, layouts $torch_layouts"
      set +e
      PYTHONPATH=$bdir/python${PYTHONPATH:+:$PYTHONPATH} mpirun -np "$np" /usr/bin/python3 -B \
        "$root/jobs/bench_python.py" --dir "$out/torch" --scenario torch --reps "$torch_reps" \
        --torch-layouts "$torch_layouts" --json -v ${torch_args[@]+"${torch_args[@]}"} >"$logs/torch-np$np.log" 2>"$logs/torch-np$np.err"
      rc=$?
      set -e
      grep -v '^{' "$logs/torch-np$np.log" | sed 's/^/   /' || true
      grep '^{' "$logs/torch-np$np.log" >>"$results" || true
      if [ "$rc" -eq 77 ]; then
        echo "   skipped: $(head -1 "$logs/torch-np$np.log")"
      elif [ "$rc" -ne 0 ]; then
        echo "== FAILED ($rc): bench_python.py --scenario torch np$np (log: $logs/torch-np$np.log, $logs/torch-np$np.err)" >&2
        tail -20 "$logs/torch-np$np.err" >&2
        status=1
      fi
    done
    rm -rf "$out/torch"
  fi
fi

merge=$bdir/bin/mpickpt-merge-bench
if [ "$check" = 0 ] && [ "$scale_only" = 0 ] && [ -x "$merge" ]; then
  # A single process (it models the ranks' fragments itself): no mpirun.
  read -r -a margs <<<"${BENCH_MERGE_ARGS:---json}"
  echo
  echo "== merge/scale benchmark: $merge ${margs[*]}"
  set +e
  "$merge" "${margs[@]}" >"$logs/merge.log" 2>"$logs/merge.err"
  rc=$?
  set -e
  grep -v '^{' "$logs/merge.log" | sed 's/^/   /' || true
  grep '^{' "$logs/merge.log" | sed 's/^{/{"merge_bench":1,/' >>"$results" || true
  if [ "$rc" -ne 0 ]; then
    echo "== FAILED ($rc): mpickpt-merge-bench (log: $logs/merge.log, $logs/merge.err)" >&2
    tail -20 "$logs/merge.err" >&2
    status=1
  fi
elif [ "$check" = 0 ] && [ "$scale_only" = 0 ]; then
  echo
  echo "== no $merge: merge/scale benchmark skipped"
fi

if [ "$check" = 1 ]; then
  echo
  echo "== checking $(grep -c '^{' "$results") JSON lines ($results)"
  [ -x /usr/bin/python3 ] || { echo "bench.sh --check needs /usr/bin/python3 (jobs/deps.sh test)" >&2; exit 1; }
  /usr/bin/python3 -B "$root/jobs/lib/bench_check.py" "$results" "$nps" "$configs" || status=1
  exit $status
fi

# ---- the summary: one table of ratios, then the phases ----
echo
echo "== results ($results)"
awk -v configs="$configs" -v nps="$nps" '
function get(line, key,   m) {
  if (match(line, "\"" key "\":(\"[^\"]*\"|[-0-9.eE+]+)")) {
    m = substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
    gsub(/"/, "", m); return m
  }
  return ""
}
/"fio":1/ { fio[get($0, "ranks")] = get($0, "write_fsync_gbps"); next }
/"bench": *"python_torch"/ { next } # printed above, where it ran
/"merge_bench":1/ { merge[++nmerge] = $0; next }
/"scenario":"collectives"/ {
  k = get($0, "ranks") "|" get($0, "layout") "|" get($0, "collective")
  if (!(k in cseen)) { cseen[k] = 1; ck[++nck] = k }
  if (get($0, "skipped") != "") { cskip[k] = 1; next }
  op = get($0, "op")
  calls[op, k] = sprintf("%s/%s (%s)", get($0, "collective_max"), get($0, "collective_chief"), get($0, "agree_chief"))
  p2p[op, k] = get($0, "p2p_max")
  next
}
/"scenario":"files"/ {
  lab = get($0, "layout"); r = get($0, "ranks_per_node"); if (r + 0 > 0) lab = lab " (" r "/node)"
  n = get($0, "ranks")
  if (!(lab in flseen)) { flseen[lab] = 1; fl[++nfl] = lab }
  if (!(n in fnseen)) { fnseen[n] = 1; fn[++nfn] = n }
  files[lab, n] = (get($0, "skipped") != "") ? "skipped" : sprintf("%s (%s data)", get($0, "entries"), get($0, "data_files"))
  next
}
/"scenario":"restore_memory"/ { mem[++nmem] = $0; next }
/"scenario":"fixed_(save|restore)"/ {
  k = get($0, "ranks") "|" get($0, "layout")
  if (!(k in fkseen)) { fkseen[k] = 1; fk[++nfk] = k }
  s = get($0, "scenario")
  if (get($0, "skipped") != "") { fixed[s, k] = "skipped"; next }
  v = get($0, "over_raw"); g = get($0, "goal_over_raw")
  fixed[s, k] = sprintf("%.2f (best %.2f)%s", v, get($0, "over_raw_best"), (v + 0 <= g + 0) ? " ok" : " MISS")
  own = ""; if (match($0, /"own":\{[^}]*\}/)) own = substr($0, RSTART, RLENGTH)
  fixedown[s, k] = sprintf("%.2f (best %.2f)", get(own, "over_raw"), get(own, "over_raw_best"))
  fixedempty[k] = sprintf("%.5f", get($0, "empty_span_s"))
  next
}
{
  nold++
  k = get($0, "ranks") "|" get($0, "layout") "|" get($0, "collective")
  s = get($0, "scenario")
  if (get($0, "skipped") != "") { val[s, k] = "skip"; next }
  val[s, k] = (s == "async") ? get($0, "blocking_over_memcpy") : get($0, "speed_ratio")
  lo = get($0, "paired_ratio_p25"); hi = get($0, "paired_ratio_p75")
  if (s == "async" && lo > 0 && hi > 0) { t = 1 / hi; hi = 1 / lo; lo = t }
  spread[s, k] = sprintf("%.2f..%.2f", lo, hi)
  for (p = 1; p <= 4; p++) ph[s, k, p] = get($0, pn[p])
  tot[s, k] = get($0, "mpickpt_s")
  if (s == "async") bg[k] = get($0, "background_s")
}
BEGIN {
  split("large small restore_small restore_warm restore_cold restore_reshard_warm restore_reshard_cold async", sc, " ")
  split("write agree merge commit", pn, " ")
  goal["large"] = ">=0.9"; goal["small"] = ">=0.5"; goal["async"] = "<=1.2"
  goal["restore_warm"] = goal["restore_cold"] = goal["restore_reshard_warm"] = goal["restore_reshard_cold"] = ">=0.9"
}
END {
  nn = split(nps, N, " "); nc = split(configs, C, " "); ncol = 0
  for (i = 1; i <= nn; i++) for (j = 1; j <= nc; j++) {
    lay = C[j]; coll = 0
    if (index(lay, ":")) { coll = substr(lay, index(lay, ":") + 1); lay = substr(lay, 1, index(lay, ":") - 1) }
    ncol++; key[ncol] = N[i] "|" lay "|" coll
    head[ncol] = "np" N[i] " " (lay == "shared" ? "shared/" (coll + 0 ? "coll" : "ind") : lay)
  }
  if (nold) { # (the scenario tables; not indented: as they were before the scale rows)
  printf "%-22s %-6s", "ratio (goal)", ""
  for (c = 1; c <= ncol; c++) printf " %17s", head[c]
  printf "\n"
  for (i = 1; i <= 8; i++) {
    s = sc[i]; label = (s == "async") ? "async blk/memcpy" : s
    printf "%-22s %-6s", label, goal[s]
    for (c = 1; c <= ncol; c++) {
      v = val[s, key[c]]
      if (v == "") cell = "-"
      else if (v == "skip") cell = "skipped"
      else if (goal[s] == "") cell = sprintf("%.3f", v) # measured, no goal in the issue
      else {
        miss = (s == "async") ? (v + 0 > 1.2) : (v + 0 < substr(goal[s], 3) + 0)
        cell = sprintf("%.3f%s", v, miss ? " MISS" : " ok")
      }
      printf " %17s", cell
    }
    printf "\n"
  }
  printf "\nspread: quartiles (p25..p75) of the per-rep ratios (each rep ran the library and its baseline back to back)\n"
  printf "%-22s %-6s", "", ""
  for (c = 1; c <= ncol; c++) printf " %17s", head[c]
  printf "\n"
  for (i = 1; i <= 8; i++) {
    s = sc[i]; label = (s == "async") ? "async blk/memcpy" : s
    printf "%-22s %-6s", label, ""
    for (c = 1; c <= ncol; c++) printf " %17s", (spread[s, key[c]] == "") ? "-" : spread[s, key[c]]
    printf "\n"
  }
  printf "\nphases: medians of ckpt_saver_last_metrics (max over ranks), seconds: write/agree/merge/commit [total]\n"
  split("large small async", ps, " ")
  for (i = 1; i <= 3; i++) {
    s = ps[i]
    for (c = 1; c <= ncol; c++) {
      if (ph[s, key[c], 1] == "") continue
      printf "  %-6s %-20s %8.4f %8.4f %8.4f %8.4f  [%s %.4f]%s\n", s, head[c], ph[s, key[c], 1],
             ph[s, key[c], 2], ph[s, key[c], 3], ph[s, key[c], 4],
             (s == "async") ? "blocking" : "save", tot[s, key[c]],
             (s == "async") ? sprintf("  background %.4f", bg[key[c]]) : ""
    }
  }
  }
  nf = 0
  for (n in fio) { if (!nf) printf "\nfio reference (write + end_fsync, %s, not interleaved):", "aggregate"; nf++; printf " np%s %s GB/s;", n, fio[n] }
  if (nf) printf "\n"
  if (nmerge) {
    printf "\nmerge/scale benchmark (merge at the chief, one process; full lines in results.jsonl):\n"
    printf "  %8s %9s %10s %9s %9s %9s %9s %8s\n", "ranks", "per_rank", "pieces", "unpack_s", "merge_s", "pack_s", "total_s", "peak_MB"
    for (i = 1; i <= nmerge; i++)
      printf "  %8s %9s %10s %9s %9s %9s %9s %8s\n", get(merge[i], "ranks"), get(merge[i], "per_rank"),
             get(merge[i], "pieces"), get(merge[i], "unpack_s"), get(merge[i], "merge_s"),
             get(merge[i], "pack_s"), get(merge[i], "total_s"), get(merge[i], "peak_mb")
  }
  if (nck) {
    printf "\ncollective calls per operation (PMPI counts per rank: max over ranks/chief, (of them ckpt_mpi_agree, chief))\n"
    printf "  %-14s", "op"
    for (c = 1; c <= nck; c++) printf " %18s", khead(ck[c])
    printf "\n"
    split("save_first save_cached restore async", ops, " ")
    for (i = 1; i <= 4; i++) {
      printf "  %-14s", ops[i]
      for (c = 1; c <= nck; c++) printf " %18s", cskip[ck[c]] ? "skipped" : (calls[ops[i], ck[c]] == "" ? "-" : calls[ops[i], ck[c]])
      printf "\n"
    }
    printf "  %-14s", "p2p (max)"
    for (c = 1; c <= nck; c++) {
      t = ""
      for (i = 1; i <= 4; i++) if (p2p[ops[i], ck[c]] != "") t = t (t == "" ? "" : "/") p2p[ops[i], ck[c]]
      printf " %18s", t == "" ? "-" : t
    }
    printf "\n"
  }
  if (nfl) {
    printf "\nfiles per checkpoint: directory entries one save creates (data files)\n"
    printf "  %-22s", "layout"
    for (j = 1; j <= nfn; j++) printf " %16s", "np" fn[j]
    printf "\n"
    for (i = 1; i <= nfl; i++) {
      printf "  %-22s", fl[i]
      for (j = 1; j <= nfn; j++) printf " %16s", (files[fl[i], fn[j]] == "") ? "-" : files[fl[i], fn[j]]
      printf "\n"
    }
  }
  if (nmem) {
    printf "\nrestore memory per rank: peak VmHWM growth during ckpt_saver_restore (MiB); pieces: total, the chief, rank 1 (a fixed share)\n"
    printf "  %5s %-9s %-11s %10s %9s %8s %9s %9s | %10s %10s %10s\n", "ranks", "layout", "kind", "pieces", "chief", "rank 1",
           "index_MiB", "restore_s", "chief", "rank 1", "others max"
    for (i = 1; i <= nmem; i++) {
      if (get(mem[i], "skipped") != "") { printf "  %5s %-9s skipped: %s\n", get(mem[i], "ranks"), get(mem[i], "layout"), get(mem[i], "skipped"); continue }
      printf "  %5s %-9s %-11s %10s %9s %8s %9.2f %9.4f | %10s %10s %10s\n", get(mem[i], "ranks"), get(mem[i], "layout"),
             get(mem[i], "kind"), get(mem[i], "total_pieces"), get(mem[i], "pieces_chief"), get(mem[i], "pieces_rank1"),
             get(mem[i], "index_bytes") / 1048576, get(mem[i], "restore_s"), mib(get(mem[i], "peak_kb_chief")),
             mib(get(mem[i], "peak_kb_rank1")), mib(get(mem[i], "peak_kb_others_max"))
    }
  }
  if (nfk) {
    printf "\nfixed cost: mpickpt / raw of the same bytes in the same run, median (best of the reps); lower is better;\n"
    printf "times are spans (a barrier before, one after: first start to last finish); own: the duration of each rank alone, max over ranks\n"
    printf "  %-28s", "ratio (goal)"
    for (c = 1; c <= nfk; c++) { split(fk[c], a, "|"); printf " %24s", "np" a[1] " " a[2] }
    printf "\n"
    printf "  %-28s", "small save / raw (<= 1.5)"
    for (c = 1; c <= nfk; c++) printf " %24s", (fixed["fixed_save", fk[c]] == "") ? "-" : fixed["fixed_save", fk[c]]
    printf "\n  %-28s", "small restore / raw (<= 3)"
    for (c = 1; c <= nfk; c++) printf " %24s", (fixed["fixed_restore", fk[c]] == "") ? "-" : fixed["fixed_restore", fk[c]]
    printf "\n  %-28s", "  save, own durations"
    for (c = 1; c <= nfk; c++) printf " %24s", (fixedown["fixed_save", fk[c]] == "") ? "-" : fixedown["fixed_save", fk[c]]
    printf "\n  %-28s", "  restore, own durations"
    for (c = 1; c <= nfk; c++) printf " %24s", (fixedown["fixed_restore", fk[c]] == "") ? "-" : fixedown["fixed_restore", fk[c]]
    printf "\n  %-28s", "  barriers alone (s)"
    for (c = 1; c <= nfk; c++) printf " %24s", (fixedempty[fk[c]] == "") ? "-" : fixedempty[fk[c]]
    printf "\n"
  }
}
function mib(kb) { return (kb == "" || kb + 0 < 0) ? "-" : sprintf("%.1f", kb / 1024) }
function khead(k,   a) {
  split(k, a, "|")
  return "np" a[1] " " (a[2] == "shared" ? "shared/" (a[3] + 0 ? "coll" : "ind") : a[2])
}' "$results"
echo
echo "(per-scenario tables and absolute times above; raw JSON lines in $results)"
if [ "$check_scale" = 1 ]; then
  echo
  echo "== checking the scale rows: $(grep -c '^{' "$results") JSON lines ($results)"
  [ -x /usr/bin/python3 ] || { echo "bench.sh --check-scale needs /usr/bin/python3 (jobs/deps.sh test)" >&2; exit 1; }
  /usr/bin/python3 -B "$root/jobs/lib/bench_scale_check.py" "$results" "$scale_nps" "$coll_configs" \
    "$mem_np" "$mem_pieces" "$fixed_nps" "$fixed_layouts" || status=1
fi
exit $status
