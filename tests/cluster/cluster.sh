#!/bin/bash
# A multi-host test cluster on this one machine, made of Linux network
# namespaces, and a command run on it.
#
#   cluster.sh [-n HOSTS] COMMAND [ARGS...]
#
# Builds, as root:
#
#   ppcl-n0            rank 0's "host": network namespace ppcl-n0 with a
#                      bridge (ppcl-br) at 10.203.77.1/24; COMMAND runs here
#   ppcl-n1..nHOSTS    one namespace per worker host (default 2, at most 3),
#                      each joined to the bridge by a veth pair: eth0 at
#                      10.203.77.1N/24 in the host, ppcl-nN-l on the bridge
#
# Loopback is up everywhere; nothing else reaches these namespaces, and they
# reach nothing else.  Every host name resolves through a hosts file this
# script writes, bind-mounted over /etc/hosts in a mount namespace private
# to COMMAND (the system's own /etc/hosts never changes); Open MPI's daemons
# and the workers inherit it.  Each host has its own UTS host name, set by
# the launch agent (netns-agent) that Open MPI starts its daemons with.
#
# COMMAND runs with this environment, besides what it had:
#
#   OMPI_MCA_plm_rsh_agent            this directory's netns-agent
#   OMPI_MCA_oob_tcp_if_include,
#   OMPI_MCA_btl_tcp_if_include       the cluster's subnet
#   OMPI_MCA_btl                      self,tcp (no shared memory: a worker
#                                     talks to rank 0 over the link)
#   PP_CLUSTER_HOSTS                  the worker hosts' names, space-separated
#   PP_CLUSTER_ADDRS                  their addresses, in the same order
#   PP_CLUSTER_RANK0                  rank 0's host name
#   PP_CLUSTER_UNUSED                 an address on the cluster's link that no
#                                     host holds: an unreachable host
#   PP_CLUSTER_DIR                    a scratch directory (the hosts file is
#                                     there), removed at the end
#   PP_CLUSTER_TCP_RETRIES2           net.ipv4.tcp_retries2 in the cluster's
#                                     namespaces (set to 5 where /proc/sys
#                                     lets it be set)
#
# A host's link is ppcl-nN-l in rank 0's namespace (`ip link set ppcl-n1-l
# down` cuts host ppcl-n1 off); `ip netns identify PID` tells which host a
# process runs on: every namespace shares this machine's process table.
#
# Everything is removed on every way out (namespaces, links, the scratch
# directory, Open MPI's session directories of the cluster's hosts; the
# private mount namespace ends with its last process), and
# every process left in the cluster's namespaces is killed.  A cluster left
# by a run that was itself killed with SIGKILL is removed by the next run.
# Runs are serialised by a lock: two clusters never overlap.
#
# Exit status: COMMAND's, or 77 (skip) where the cluster cannot be built
# here (not root, no ip netns, no unshare), with the reason on stderr.
set -u

PREFIX=ppcl
SUBNET_PREFIX=10.203.77
SUBNET=$SUBNET_PREFIX.0/24
BRIDGE=$PREFIX-br
RANK0=$PREFIX-n0
UNUSED=$SUBNET_PREFIX.99
# TCP's retransmissions before it gives a connection up (per namespace;
# Linux's default, 15, is about 15 minutes): an Open MPI daemon cut off
# with unacknowledged data to send learns its peer is gone only then.
TCP_RETRIES2=5
LOCK=/run/lock/ppdiffuse-cluster.lock
# Another cluster run may hold the lock for as long as its test runs.
LOCK_WAIT_S=600
SKIP=77
HERE=$(cd "$(dirname "$0")" && pwd)

n_hosts=2
if [ "${1:-}" = -n ]; then
  n_hosts=$2
  shift 2
fi
if [ $# -eq 0 ]; then
  echo "usage: $0 [-n HOSTS] COMMAND [ARGS...]" >&2
  exit 2
fi
case $n_hosts in
  1|2|3) ;;
  *) echo "$0: -n takes 1, 2 or 3 hosts" >&2; exit 2 ;;
esac

skip() {
  echo "SKIP: $*" >&2
  exit $SKIP
}

[ "$(id -u)" = 0 ] || skip "the test cluster needs root (network namespaces)"
for tool in ip unshare flock mount; do
  command -v $tool >/dev/null 2>&1 \
    || skip "the test cluster needs '$tool' (iproute2, util-linux)"
done
# Can this machine (a container, say) make network namespaces at all?
probe=$PREFIX-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then
  skip "cannot create a network namespace here (ip netns add failed)"
fi
ip netns del "$probe"
if ! unshare --mount --uts true 2>/dev/null; then
  skip "cannot create a mount or UTS namespace here (unshare failed)"
fi

mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
if ! flock -w "$LOCK_WAIT_S" 9; then
  echo "$0: another test cluster held $LOCK for $LOCK_WAIT_S s" >&2
  exit 1
fi

# Brings namespace $1's loopback up and bounds its TCP retransmissions.
setup_ns() {
  ip -n "$1" link set lo up
  echo $TCP_RETRIES2 | ip netns exec "$1" tee /proc/sys/net/ipv4/tcp_retries2 \
    >/dev/null || echo "$0: warning: cannot set tcp_retries2 in $1" >&2
}

# Kills every process in namespace $1, then removes the namespace (its
# veth ends go with it).
remove_ns() {
  pids=$(ip netns pids "$1" 2>/dev/null)
  # shellcheck disable=SC2086  # a list of pids
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns del "$1" 2>/dev/null
}

# Open MPI's session directories are named after the host: those of the
# cluster's hosts are the cluster's.
remove_cluster() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case $ns in
      $PREFIX-*) remove_ns "$ns" ;;
    esac
  done
  rm -rf "${TMPDIR:-/tmp}/ompi.$PREFIX-"* /tmp/ompi.$PREFIX-*
}

work=""
# shellcheck disable=SC2317  # called by the traps
cleanup() {
  trap - EXIT INT TERM
  remove_cluster
  [ -n "$work" ] && rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Whatever a run killed with SIGKILL left behind (this lock proves that
# run is over), its scratch directory included.
remove_cluster
rm -rf /tmp/$PREFIX.??????

work=$(mktemp -d /tmp/$PREFIX.XXXXXX)
hosts_file=$work/hosts
{
  echo "127.0.0.1 localhost"
  echo "$SUBNET_PREFIX.1 $RANK0"
} >"$hosts_file"

ip netns add "$RANK0" || exit 1
setup_ns "$RANK0"
ip -n "$RANK0" link add "$BRIDGE" type bridge
ip -n "$RANK0" addr add "$SUBNET_PREFIX.1/24" dev "$BRIDGE"
ip -n "$RANK0" link set "$BRIDGE" up
names="" addrs=""
i=1
while [ $i -le "$n_hosts" ]; do
  ns=$PREFIX-n$i addr=$SUBNET_PREFIX.$((10 + i))
  ip netns add "$ns" || exit 1
  setup_ns "$ns"
  ip link add "$ns-l" netns "$RANK0" type veth peer name eth0 netns "$ns" \
    || exit 1
  ip -n "$RANK0" link set "$ns-l" master "$BRIDGE"
  ip -n "$RANK0" link set "$ns-l" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  echo "$addr $ns" >>"$hosts_file"
  names="$names${names:+ }$ns" addrs="$addrs${addrs:+ }$addr"
  i=$((i + 1))
done

export OMPI_MCA_plm_rsh_agent="$HERE/netns-agent"
export OMPI_MCA_oob_tcp_if_include=$SUBNET
export OMPI_MCA_btl_tcp_if_include=$SUBNET
export OMPI_MCA_btl=self,tcp
export PP_CLUSTER_HOSTS="$names" PP_CLUSTER_ADDRS="$addrs"
export PP_CLUSTER_RANK0=$RANK0 PP_CLUSTER_UNUSED=$UNUSED
export PP_CLUSTER_DIR=$work
# What TCP's retransmission limit really is in the cluster's namespaces.
PP_CLUSTER_TCP_RETRIES2=$(ip netns exec "$RANK0" \
  cat /proc/sys/net/ipv4/tcp_retries2)
export PP_CLUSTER_TCP_RETRIES2

# Rank 0's host: its network namespace, a private mount namespace holding
# the cluster's /etc/hosts, its own host name.  Not exec'd: the trap above
# must run when COMMAND ends.  The lock stays with this shell.
# shellcheck disable=SC2016  # expanded by that shell, from its arguments
ip netns exec "$RANK0" unshare --mount --uts --propagation private \
  sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 \
    && exec "$@"' cluster "$hosts_file" "$RANK0" "$@" 9>&- &
child=$!
# Forward a termination to COMMAND, then clean up all the same.
trap 'kill -TERM $child 2>/dev/null; wait $child; exit 143' TERM
trap 'kill -INT $child 2>/dev/null; wait $child; exit 130' INT
wait $child
exit $?
