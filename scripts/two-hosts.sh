#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair. gonccl's
# host identity includes the network namespace, so ranks in different namespaces talk
# TCP (over the veth) and ranks in one namespace use shared memory: a 2-host job on
# one box. Needs root and iproute2 (`ip netns`).
#
#   scripts/two-hosts.sh up                 create host 0 and host 1 (idempotent)
#   scripts/two-hosts.sh down               remove them (idempotent)
#   scripts/two-hosts.sh status             show them
#   scripts/two-hosts.sh run I CMD [ARG..]  run CMD in host I (0 or 1); exec, same pid
#   scripts/two-hosts.sh bench [ARGS..]     up; `python -m gonccl.bench ARGS` under
#                                           torchrun, 2 hosts x 2 ranks; down (always)
#
# Host I is namespace ${GONCCL_2H_PREFIX}I with interface $IFNAME (the same name on
# both), address 10.77.0.(I+1)/24 (with GONCCL_2H_IPV6=1: fd77::(I+1)/64 and no IPv4
# address but loopback's), loopback up. Environment:
#   GONCCL_2H_PREFIX   namespace name prefix (default gonccl2h): several sets may exist
#   GONCCL_2H_IPV6     1: IPv6-only hosts (ULA addresses)
#   GONCCL_2H_NPROC    ranks per host for `bench` (default 2)
#   GONCCL_PYTHON      interpreter for `bench` (default: scripts/python-env.sh)
set -euo pipefail

PREFIX="${GONCCL_2H_PREFIX:-gonccl2h}"
IFNAME=gnc
SUBNET=10.77.0
IPV6="${GONCCL_2H_IPV6:-0}"
NPROC="${GONCCL_2H_NPROC:-2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

ns() { echo "${PREFIX}$1"; }
ip_of() { if [[ $IPV6 == 1 ]]; then echo "fd77::$(($1 + 1))"; else echo "${SUBNET}.$(($1 + 1))"; fi; }
cidr_of() { if [[ $IPV6 == 1 ]]; then echo "$(ip_of "$1")/64"; else echo "$(ip_of "$1")/24"; fi; }
have_ns() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

die() { echo "two-hosts: $*" >&2; exit 1; }

check_tools() {
  [[ $(id -u) -eq 0 ]] || die "needs root (ip netns)"
  command -v ip >/dev/null || die "needs iproute2 (ip)"
}

down() {
  for i in 0 1; do
    if have_ns "$(ns "$i")"; then
      ip netns del "$(ns "$i")"
    fi
  done
}

up() {
  check_tools
  # Complete and working: nothing to do. Half made (an earlier run died): start over.
  if have_ns "$(ns 0)" && have_ns "$(ns 1)" && linked; then
    return 0
  fi
  down
  make_hosts || { down; die "could not set up the two namespaces"; }
}

# make_hosts builds both hosts; every step is checked (set -e does not apply in a
# function called from a condition).
make_hosts() {
  ip netns add "$(ns 0)" || return 1
  ip netns add "$(ns 1)" || return 1
  ip link add "$IFNAME" netns "$(ns 0)" type veth peer name "$IFNAME" netns "$(ns 1)" || return 1
  local i
  for i in 0 1; do
    ip -n "$(ns "$i")" link set lo up || return 1
    # nodad: no duplicate address detection, so an IPv6 address is usable at once
    ip -n "$(ns "$i")" addr add "$(cidr_of "$i")" dev "$IFNAME" $([[ $IPV6 == 1 ]] && echo nodad) || return 1
    ip -n "$(ns "$i")" link set "$IFNAME" up || return 1
  done
  for i in $(seq 40); do
    linked && return 0
    sleep 0.05
  done
  echo "two-hosts: the veth did not come up" >&2
  return 1
}

# linked: on both hosts the veth is up (carrier too) and has its address.
linked() {
  local i
  for i in 0 1; do
    ip -n "$(ns "$i")" addr show dev "$IFNAME" 2>/dev/null | grep -q "LOWER_UP" || return 1
    ip -n "$(ns "$i")" addr show dev "$IFNAME" 2>/dev/null | grep -q "inet6\? $(cidr_of "$i")" || return 1
  done
}

status() {
  for i in 0 1; do
    if have_ns "$(ns "$i")"; then
      echo "host $i: netns $(ns "$i"), $(ip -n "$(ns "$i")" -br addr show dev "$IFNAME" 2>/dev/null || echo "no $IFNAME")"
    else
      echo "host $i: absent"
    fi
  done
}

run() {
  local i="${1:-}"
  [[ $i == 0 || $i == 1 ]] || die "run: host index must be 0 or 1, got '${i}'"
  shift
  [[ $# -gt 0 ]] || die "run: no command"
  have_ns "$(ns "$i")" || die "run: host $i does not exist (run '$0 up' first)"
  exec ip netns exec "$(ns "$i")" "$@"
}

# bench: torchrun on each host (--nnodes 2 --node_rank I, the store on host 0's veth
# address), both backends told to use the veth. Host 0's output is the tables; host
# 1's goes to stderr only if it fails.
bench() {
  local py="${GONCCL_PYTHON:-$("$HERE/python-env.sh")}"
  up
  local port=$((20000 + RANDOM % 20000))
  # global, not local: the EXIT trap runs after bench has returned
  log1="$(mktemp)"
  pids=()
  cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -f "$log1"
    down
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  local i
  for i in 0 1; do
    local cmd=(ip netns exec "$(ns "$i")" env GLOO_SOCKET_IFNAME="$IFNAME" GONCCL_SOCKET_IFNAME="=$IFNAME"
      OMP_NUM_THREADS=1 "$py" -m torch.distributed.run --nnodes 2 --node_rank "$i" --nproc_per_node "$NPROC"
      --master_addr "$(ip_of 0)" --master_port "$port" -m gonccl.bench "$@")
    if [[ $i == 0 ]]; then
      "${cmd[@]}" &
    else
      "${cmd[@]}" >"$log1" 2>&1 &
    fi
    pids+=("$!")
  done
  local rc=0
  wait "${pids[0]}" || rc=$?
  wait "${pids[1]}" || { rc=$?; echo "---- host 1:" >&2; cat "$log1" >&2; }
  pids=()
  return "$rc"
}

case "${1:-}" in
  up) up ;;
  down) check_tools; down ;;
  status) status ;;
  run) shift; run "$@" ;;
  bench) shift; bench "$@" ;;
  *) sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
