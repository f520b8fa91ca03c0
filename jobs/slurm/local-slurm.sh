#!/usr/bin/env bash
# A private single-node Slurm (munged + slurmctld + slurmd) living entirely in one directory: for
# trying the batch scripts of jobs/slurm/ and for the `slurm` tests, on a machine without a cluster.
#
#   jobs/slurm/local-slurm.sh start  DIR   start it (stopping a previous one in DIR first); returns
#                                          once sinfo shows the node idle
#   jobs/slurm/local-slurm.sh stop   DIR   cancel its jobs, stop the daemons (by PID), remove links
#   jobs/slurm/local-slurm.sh status DIR   daemons, node and queue
#   jobs/slurm/local-slurm.sh env    DIR   prints `export SLURM_CONF=DIR/etc/slurm.conf`
#
# Then:  eval "$(jobs/slurm/local-slurm.sh env DIR)"; sbatch ...; squeue; scontrol show job ...
#
# DIR holds everything: etc/slurm.conf, munge/ (key, socket, seed, pid, log), state/, spool/,
# log/ (slurmctld.log, slurmd.log, munged.log), run/ (pid files). Needs root (slurmd runs jobs as
# any user), the Debian packages slurmctld slurmd slurm-client munge (jobs/deps.sh slurm), and
# no accounting daemon (AccountingStorageType=accounting_storage/none: no sacct).
#
#   SLURMCTLD_PORT / SLURMD_PORT   ports (default: two free ones picked at start)
#   MPICKPT_SLURM_OWNER_PID=PID    stop this Slurm when process PID ends (a test's safety net against
#                                  being killed without running its cleanup)
#
# When the packages started Debian's own slurmctld/slurmd services (systemd), start stops and masks
# them, so that only this Slurm runs. Debian's munge service is left alone: ours has its own key and
# socket.
set -uo pipefail
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
usage() { echo "usage: $0 start|stop|status|env DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
say() { echo "local-slurm: $*" >&2; }
die() { say "$*"; exit 1; }

if [ "$action" = start ]; then
  mkdir -p "$2" || die "cannot create $2"
fi
[ -d "$2" ] || die "$2: no such directory"
dir=$(cd "$2" && pwd)
conf=$dir/etc/slurm.conf
run=$dir/run
export SLURM_CONF=$conf

# Unix socket paths (munge's, slurmstepd's in the spool directory) are limited to ~107 bytes: a
# long DIR is reached through a short symbolic link under /tmp, recorded in DIR/run/link.
short_dir() {
  if [ -f "$run/link" ] && [ -L "$(cat "$run/link")" ]; then
    cat "$run/link"
  elif [ "${#dir}" -le 48 ]; then
    echo "$dir"
  else
    local l
    l=$(mktemp -u /tmp/mpickpt-slurm.XXXXXX) && ln -s "$dir" "$l" && echo "$l" >"$run/link" &&
      echo "$l"
  fi
}

pid_of() { # name: the PID in run/<name>.pid when that process is alive
  local f=$run/$1.pid p
  [ -f "$f" ] || return 1
  p=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"
}

stop_pid() { # name: TERM, wait up to 10 s, then KILL
  local p i
  p=$(pid_of "$1") || { rm -f "$run/$1.pid"; return 0; }
  kill -TERM "$p" 2>/dev/null
  for ((i = 0; i < 100; i++)); do
    kill -0 "$p" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$p" 2>/dev/null; then
    say "$1 (pid $p) did not stop: killing it"
    kill -KILL "$p" 2>/dev/null
  fi
  rm -f "$run/$1.pid"
}

# Processes of this Slurm's jobs (they carry SLURM_JOB_ID and our SLURM_CONF in their environment)
# and its slurmstepd's: what is left when a daemon died before its jobs.
leftovers() {
  local e p env
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = $$ ] && continue
    env=$(tr '\0' '\n' 2>/dev/null <"$e") || continue
    grep -qxF "SLURM_CONF=$conf" <<<"$env" || continue
    if grep -q '^SLURM_JOB_ID=' <<<"$env" ||
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ]; then
      echo "$p"
    fi
  done
}

free_port() { # a TCP port nothing listens on (fallback: $1)
  /usr/bin/python3 -B "$(dirname "$self")/../lib/free_port.py" 2>/dev/null || echo "$1"
}

do_stop() {
  local p i
  # The safety net first, unless it is what runs this stop.
  if [ "${MPICKPT_SLURM_WATCHER:-}" != 1 ]; then
    stop_pid watcher
  else
    rm -f "$run/watcher.pid"
  fi
  if pid_of slurmctld >/dev/null; then
    if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
      scancel --quiet --user "$(id -un)" 2>/dev/null
      for ((i = 0; i < 100; i++)); do # KillWait=5: jobs are gone within seconds
        [ -z "$(squeue -h -o %i 2>/dev/null)" ] && [ -z "$(leftovers)" ] && break
        sleep 0.1
      done
    fi
  fi
  stop_pid slurmd
  stop_pid slurmctld
  p=$(leftovers)
  if [ -n "$p" ]; then
    say "killing processes left by jobs: $(tr '\n' ' ' <<<"$p")"
    # shellcheck disable=SC2086
    kill -KILL $p 2>/dev/null
  fi
  stop_pid munged
  if [ -f "$run/link" ]; then
    rm -f "$(cat "$run/link")" "$run/link"
  fi
  return 0
}

# Debian's packages enable slurmctld/slurmd services: make sure they do not run beside ours.
stop_system_services() {
  local s p
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for s in slurmctld slurmd; do
      if systemctl is-active --quiet "$s" 2>/dev/null; then
        say "stopping and masking the system's $s service (only this private Slurm may run)"
        systemctl stop "$s" 2>/dev/null
        systemctl mask "$s" >/dev/null 2>&1
      fi
    done
  elif command -v service >/dev/null 2>&1; then
    # No systemd: Debian's init scripts keep their PIDs in /run/<name>.pid.
    for s in slurmctld slurmd; do
      p=$(cat "/run/$s.pid" 2>/dev/null) || continue
      if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
        say "stopping the system's $s service (only this private Slurm may run)"
        service "$s" stop >/dev/null 2>&1
      fi
    done
  fi
}

do_start() {
  local cmd
  for cmd in mungekey munged slurmctld slurmd sinfo squeue scontrol sbatch; do
    command -v "$cmd" >/dev/null 2>&1 ||
      die "$cmd is missing: install slurmctld slurmd slurm-client munge (jobs/deps.sh slurm)"
  done
  [ "$(id -u)" -eq 0 ] || die "needs root (slurmd must be able to run jobs as their user)"
  mkdir -p "$run"
  do_stop # a previous instance in the same directory (or one killed without its cleanup)
  stop_system_services

  local d ctl_port slurmd_port cpus mem_mb i
  mkdir -p "$dir/etc" "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" "$run" "$dir/tmp"
  chmod 755 "$dir" "$dir/munge" # munged refuses a socket directory others may write to
  d=$(short_dir) || die "cannot link $dir from /tmp"

  # munge: a private key and socket.
  rm -f "$dir/munge/munge.key"
  mungekey --create --keyfile="$dir/munge/munge.key" || die "mungekey failed"
  chmod 600 "$dir/munge/munge.key"
  munged -F --key-file="$dir/munge/munge.key" --socket="$d/munge/munge.socket.2" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/log/munged.log" 2>&1 &
  echo $! >"$run/munged.pid"
  for ((i = 0; i < 100; i++)); do
    [ -S "$dir/munge/munge.socket.2" ] && break
    pid_of munged >/dev/null || die "munged exited (log: $dir/log/munged.log): $(tail -3 "$dir/log/munged.log")"
    sleep 0.1
  done
  [ -S "$dir/munge/munge.socket.2" ] || { do_stop; die "munged did not create its socket"; }

  ctl_port=${SLURMCTLD_PORT:-$(free_port 16817)}
  slurmd_port=${SLURMD_PORT:-$(free_port 16818)}
  [ "$ctl_port" != "$slurmd_port" ] || slurmd_port=$((ctl_port + 1))
  cpus=$(nproc)
  mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)
  [ "${mem_mb:-0}" -gt 0 ] || mem_mb=1000
  cat >"$conf" <<EOF
# Written by jobs/slurm/local-slurm.sh: a private single-node Slurm under $dir
ClusterName=mpickpt
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctl_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
TmpFS=$d/tmp
SlurmctldPidFile=$d/run/slurmctld-daemon.pid
SlurmdPidFile=$d/run/slurmd-daemon.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
Include $(dirname "$self")/private-slurm.conf
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

  slurmctld -D -f "$conf" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$run/slurmctld.pid"
  slurmd -D -N localhost -f "$conf" </dev/null >>"$dir/log/slurmd.out" 2>&1 &
  echo $! >"$run/slurmd.pid"

  if [ -n "${MPICKPT_SLURM_OWNER_PID:-}" ]; then
    # Detached (own session, no inherited output): stops this Slurm once the owner is gone.
    # shellcheck disable=SC2016 # expanded by the watcher's shell
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
                    MPICKPT_SLURM_WATCHER=1 "$2" stop "$3"' watcher \
      "$MPICKPT_SLURM_OWNER_PID" "$self" "$dir" </dev/null >>"$dir/log/watcher.log" 2>&1 &
    echo $! >"$run/watcher.pid"
  fi

  local state=""
  for ((i = 0; i < 300; i++)); do # up to 30 s
    for cmd in slurmctld slurmd; do
      pid_of "$cmd" >/dev/null || {
        do_stop
        die "$cmd exited at start (log: $dir/log/$cmd.log): $(tail -5 "$dir/log/$cmd.log" "$dir/log/$cmd.out" 2>/dev/null)"
      }
    done
    state=$(sinfo -h -n localhost -o %t 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.1
  done
  if [ "$state" != idle ]; then
    say "the node is not idle after 30 s (state '${state:-?}'); logs in $dir/log"
    sinfo -N -l >&2 2>/dev/null
    do_stop
    exit 1
  fi
  say "running in $dir (ports $ctl_port/$slurmd_port, $cpus CPUs): $(sinfo -h -o '%P %a %D %t %N')"
}

do_status() {
  local n rc=0
  for n in munged slurmctld slurmd watcher; do
    if p=$(pid_of $n); then
      echo "$n: running (pid $p)"
    elif [ $n != watcher ]; then
      echo "$n: not running"
      rc=1
    fi
  done
  [ -f "$conf" ] || { echo "no $conf"; return 1; }
  if pid_of slurmctld >/dev/null; then
    sinfo -N -o '%N %P %t %c %m' 2>&1
    squeue -o '%i %j %T %M %R' 2>&1
  fi
  return $rc
}

case "$action" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) usage ;;
esac
