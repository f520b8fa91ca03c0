#!/bin/bash
# Real nodes on one machine, for the cluster tests (docs/testing-faults.md, "Real nodes"): each
# node is a network namespace plus a mount and UTS namespace held by one process, with its own
# hostname, its own tmpfs on /dev/shm, its own /etc/hosts and an address on a bridge that lives in
# a namespace of its own (nothing is added to the machine's own network). Open MPI runs across
# them through an rsh agent that enters a node's namespaces. /tmp and the rest of the file system
# stay shared: a directory there is the parallel file system.
#
#   cluster.sh check                      exit 0 when namespaces work here, else 77 saying why
#   cluster.sh up NAME N                  nodes NAME-0 .. NAME-(N-1) (hostnames NAMEn0 ...)
#   cluster.sh mpirun NAME HOSTS ARGS...  mpirun ARGS from inside node 0 over HOSTS
#                                         (e.g. "0:2,1:2,2:2": node index:slots)
#   cluster.sh exec NAME I CMD...         CMD inside node I (its hostname, /dev/shm)
#   cluster.sh kill NAME I                node I dies: every process in it killed, its /dev/shm
#                                         gone with its mount namespace
#   cluster.sh replace NAME I             a new node I (fresh /dev/shm) in the dead one's place
#   cluster.sh down NAME                  everything of NAME gone (idempotent)
#   cluster.sh down-tag TAG               every cluster whose name ends with TAG (one test run's)
#   cluster.sh down-all                   every cluster this script made on the machine
#
# Names: NAME is [a-z0-9]{1,8}; the namespaces are mpkc-NAME-br and mpkc-NAME-I; the state
# (pids, /etc/hosts, the agent) is in /run/mpickpt-cluster/NAME. The subnet is 10.231.X.0/24
# with X from NAME, used only inside these namespaces. Needs root (ip netns, unshare, nsenter).
set -u
ROOT=/run/mpickpt-cluster

die() { echo "cluster.sh: $*" >&2; exit 1; }
skip() { echo "cluster.sh: SKIP: $*" >&2; exit 77; }

check_name() {
  [[ $1 =~ ^[a-z0-9]{1,8}$ ]] || die "cluster name '$1': use 1-8 of [a-z0-9]"
}

subnet_of() { # a /24 of 10.231.X from the name
  local x
  x=$(( $(printf '%s' "$1" | cksum | cut -d' ' -f1) % 250 + 1 ))
  echo "10.231.$x"
}

cmd_check() {
  [ "$(id -u)" = 0 ] || skip "not root (ip netns and unshare need root)"
  for t in ip unshare nsenter mpirun; do
    command -v "$t" >/dev/null || skip "'$t' is not installed"
  done
  local ns=mpkc-probe-$$
  ip netns add "$ns" 2>/dev/null || skip "'ip netns add' is not permitted here"
  local ok=0
  ip netns exec "$ns" unshare --mount --uts --propagation private \
    sh -c 'hostname mpkcprobe && mount -t tmpfs tmpfs /dev/shm' 2>/dev/null && ok=1
  ip netns del "$ns"
  [ $ok = 1 ] || skip "'unshare --mount --uts' or a tmpfs mount is not permitted here"
}

# holder NAME I: starts node I's holder process; waits until its namespaces are set up.
holder() {
  local name=$1 i=$2 st=$ROOT/$1
  rm -f "$st/$i.ready"
  # setsid: the holder outlives the shell that started it (and its process group's signals);
  # exec chain: the pid of $! is the process that holds the mount and UTS namespaces; nsenter,
  # not `ip netns exec`, which would remount /sys (and lose /sys/fs/cgroup, which slurmd needs)
  setsid nsenter --net="/run/netns/mpkc-$name-$i" unshare --mount --uts --propagation private \
    bash -c "hostname ${name}n$i && mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm &&
             mount --bind '$st/hosts' /etc/hosts && touch '$st/$i.ready' && exec sleep infinity" \
    </dev/null >/dev/null 2>"$st/$i.err" &
  echo $! > "$st/$i.pid"
  local t
  for t in $(seq 1 100); do
    [ -e "$st/$i.ready" ] && return 0
    kill -0 "$(cat "$st/$i.pid")" 2>/dev/null || break
    sleep 0.1
  done
  die "node $i of $name did not come up: $(cat "$st/$i.err" 2>/dev/null)"
}

cmd_up() {
  local name=$1 n=$2 st=$ROOT/$1 sub i
  check_name "$name"
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || die "node count '$n': 1 to 16"
  cmd_check
  cmd_down "$name"
  sub=$(subnet_of "$name")
  mkdir -p "$st" && chmod 700 "$st"
  echo "$n" > "$st/nodes"
  echo "$sub" > "$st/subnet"
  { echo "127.0.0.1 localhost"
    for i in $(seq 0 $((n - 1))); do echo "$sub.$((i + 1)) ${name}n$i"; done
  } > "$st/hosts"
  ip netns add "mpkc-$name-br" || die "ip netns add failed"
  ip -n "mpkc-$name-br" link set lo up
  ip -n "mpkc-$name-br" link add br0 type bridge
  ip -n "mpkc-$name-br" link set br0 up
  for i in $(seq 0 $((n - 1))); do
    ip netns add "mpkc-$name-$i" || die "ip netns add failed"
    ip -n "mpkc-$name-br" link add "v$i" type veth peer name eth0 netns "mpkc-$name-$i"
    ip -n "mpkc-$name-br" link set "v$i" master br0 up
    ip -n "mpkc-$name-$i" addr add "$sub.$((i + 1))/24" dev eth0
    ip -n "mpkc-$name-$i" link set eth0 up
    ip -n "mpkc-$name-$i" link set lo up
    holder "$name" "$i"
  done
  # Open MPI's rsh agent: `agent [ssh options] HOST CMD...` runs CMD in HOST's namespaces
  cat > "$st/agent" <<EOF
#!/bin/bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
i=\${host#${name}n}
pid=\$(cat "$st/\$i.pid" 2>/dev/null) || { echo "agent: no node '\$host'" >&2; exit 255; }
exec nsenter -t "\$pid" -n -m -u -- bash -c "\$*"
EOF
  chmod 700 "$st/agent"
}

pid_of() { # pid_of NAME I: node I's holder, alive
  local p
  p=$(cat "$ROOT/$1/$2.pid" 2>/dev/null) || die "no node $2 in cluster $1"
  kill -0 "$p" 2>/dev/null || die "node $2 of cluster $1 is dead"
  echo "$p"
}

cmd_exec() {
  local name=$1 i=$2
  shift 2
  exec nsenter -t "$(pid_of "$name" "$i")" -n -m -u -- "$@"
}

cmd_mpirun() {
  local name=$1 spec=$2 st=$ROOT/$1 hosts="" part sub
  shift 2
  for part in ${spec//,/ }; do
    hosts+="${hosts:+,}${name}n${part%%:*}:${part##*:}"
  done
  sub=$(cat "$st/subnet")
  exec nsenter -t "$(pid_of "$name" 0)" -n -m -u -- \
    mpirun --host "$hosts" --mca plm_rsh_agent "$st/agent" \
      --mca btl tcp,self,vader --mca btl_tcp_if_include "$sub.0/24" \
      --mca oob_tcp_if_include "$sub.0/24" "$@"
}

# kill_ns NS: every process in network namespace NS killed (a few rounds: a dying launcher may
# still start one); 0 when none is left
kill_ns() {
  local p t
  for t in 1 2 3 4 5; do
    p=$(ip netns pids "$1" 2>/dev/null)
    [ -z "$p" ] && return 0
    kill -9 $p 2>/dev/null
    sleep 0.2
  done
  [ -z "$(ip netns pids "$1" 2>/dev/null)" ]
}

cmd_kill() {
  local name=$1 i=$2
  kill_ns "mpkc-$name-$i" || die "node $i of $name: processes left"
  rm -f "$ROOT/$name/$i.pid" "$ROOT/$name/$i.ready"
}

cmd_replace() {
  local name=$1 i=$2
  ip netns list | grep -q "^mpkc-$name-$i\b" || die "no node $i in cluster $name"
  cmd_kill "$name" "$i"
  holder "$name" "$i"
}

cmd_down() {
  local name=$1 ns
  check_name "$name"
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^mpkc-$name-"); do
    kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null
  done
  # a holder whose network namespace is gone already (its pid file remains)
  local f
  for f in "$ROOT/$name"/*.pid; do
    [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  rm -rf "${ROOT:?}/$name"
}

cmd_down_all() { # [TAG]: only the clusters whose name ends with TAG
  local name
  for name in $( { ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^mpkc-\([a-z0-9]*\)-.*/\1/p'
                   ls "$ROOT" 2>/dev/null; } | sort -u); do
    [ -n "${1:-}" ] && [ "${name%"$1"}" = "$name" ] && continue
    cmd_down "$name"
  done
  rmdir "$ROOT" 2>/dev/null
  return 0
}

case "${1:-}" in
  check) cmd_check ;;
  up) [ $# = 3 ] || die "usage: up NAME N"; cmd_up "$2" "$3" ;;
  mpirun) [ $# -ge 4 ] || die "usage: mpirun NAME HOSTS ARGS..."; shift; cmd_mpirun "$@" ;;
  exec) [ $# -ge 4 ] || die "usage: exec NAME I CMD..."; shift; cmd_exec "$@" ;;
  kill) [ $# = 3 ] || die "usage: kill NAME I"; cmd_kill "$2" "$3" ;;
  replace) [ $# = 3 ] || die "usage: replace NAME I"; cmd_replace "$2" "$3" ;;
  down) [ $# = 2 ] || die "usage: down NAME"; cmd_down "$2" ;;
  down-tag) [ $# = 2 ] && [[ $2 =~ ^[a-z0-9]{1,6}$ ]] || die "usage: down-tag TAG"; cmd_down_all "$2" ;;
  down-all) cmd_down_all ;;
  *) sed -n '2,25p' "$0" >&2; exit 2 ;;
esac
