#!/bin/bash
# Does an MPI job under ULFM survive the loss of a remote Open MPI daemon
# (prted)? Two nodes on this machine: the second ("nodeB") is a daemon that
# PRRTE starts through ./fakessh in a UTS namespace of its own. Each run
# starts lost_daemon.c on 4 processes (2 per node), SIGKILLs what KIND says
# 4 s in, and prints when the survivors saw the failure, when mpirun ended and
# what the launcher said. Root; loopback only. See README.md.
#
#   run.sh chroot-setup         make $CHROOT: Debian sid with its Open MPI
#   run.sh newer KIND [RUNS]    the chroot's Open MPI (6.0.0~rc2, PRRTE 5.0.0~rc1)
#     B      nodeB's prted and its 2 processes (a node that crashed)
#     Bd     nodeB's prted alone
#     Bnoft  as B, without --with-ft ulfm
#     A1     one node, 4 processes, one process killed (plain ULFM)
#     A2     one process of nodeB, its prted alive
#   run.sh current KIND [RUNS]  the .venv's Open MPI 5.0.11 (PRRTE 3.0.14)
#     B      nodeB's launch session (fakessh), its prted and its 2 processes
#     Bi     nodeB's prted and its 2 processes, the launch session alive
#
# Settings: CHROOT (default /work/chroot-sid); LOGDIR (default a new
# directory from mktemp -d; one log per run, kept); MPI_BIN (for current,
# default <repository>/.venv/bin from scripts/bootstrap.sh).
# The script mounts /proc, /sys and /dev in the chroot when they are not
# mounted there, and unmounts those (and only those) when it ends; it kills
# only the processes of its own runs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
chroot_dir=${CHROOT:-/work/chroot-sid}
mpi_bin=${MPI_BIN:-$(cd "$here/../../.." && pwd)/.venv/bin}
limit=60        # seconds a run may take (a job without failure hangs in MPI_Finalize)
kill_after=4    # seconds from the start of mpirun to the kill

mounted=()  # mount points this script mounted
started=()  # pids of the current run: launcher, daemons, programs

usage() {
  sed -n '/^#   run.sh chroot-setup/,/^#     Bi/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# True if pid is alive, not a zombie, and one of the run's kind of process
# (a pid taken again by an unrelated process since is left alone).
ours() {
  local state
  state=$(ps -o stat= -p "$1" 2> /dev/null) || return 1
  [[ $state != Z* ]] || return 1
  tr '\0' ' ' < "/proc/$1/cmdline" 2> /dev/null | grep -qE 'prte|lost_daemon|mpirun'
}

# Kills what is left of the run's processes; prints their pids.
kill_leftovers() {
  local pid left=()
  for pid in "${started[@]}"; do
    if ours "$pid"; then
      left+=("$pid")
      kill -9 "$pid" 2> /dev/null
    fi
  done
  started=()
  echo "${left[*]}"
}

cleanup() {
  kill_leftovers > /dev/null
  local i
  for (( i = ${#mounted[@]} - 1; i >= 0; --i )); do
    umount -R "${mounted[i]}" 2> /dev/null || umount -l "${mounted[i]}"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_chroot() {
  local point
  for point in proc sys dev; do
    mountpoint -q "$chroot_dir/$point" && continue
    case $point in
      proc) mount -t proc proc "$chroot_dir/proc" ;;
      sys) mount -t sysfs sys "$chroot_dir/sys" ;;
      dev) mount --rbind /dev "$chroot_dir/dev" && mount --make-rslave "$chroot_dir/dev" ;;
    esac || { echo "run.sh: cannot mount $chroot_dir/$point" >&2; exit 1; }
    mounted+=("$chroot_dir/$point")
  done
}

in_chroot() {
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    chroot "$chroot_dir" /bin/bash -c "$1"
}

chroot_setup() {
  command -v debootstrap > /dev/null || apt-get install -y debootstrap || exit 1
  if [[ ! -d $chroot_dir/etc ]]; then
    debootstrap --variant=minbase sid "$chroot_dir" http://deb.debian.org/debian || exit 1
  fi
  mount_chroot
  cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
  in_chroot 'apt-get -o Acquire::Check-Valid-Until=false update &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev gcc libc6-dev' || exit 1
  # nodeB, the fake second node, is this machine
  printf '127.0.0.1 localhost %s\n127.0.0.1 nodeB\n' "$(hostname)" > "$chroot_dir/etc/hosts"
  in_chroot "dpkg-query -W -f '\${Package} \${Version}\n' openmpi-bin libprrte4 libpmix2t64 libc6"
}

now() { date +%s.%N; }

# pids of the processes whose parent is $1 and whose name is $2
children() { pgrep -P "$1" -x "$2" | tr '\n' ' '; }

# One run: $1 newer|current, $2 KIND, $3 number; prints one summary.
one_run() {
  local mode=$1 kind=$2 n=$3
  local log=$logdir/$mode-$kind-$n.log
  local host cmd bg
  host=$(hostname)
  if [[ $mode == newer ]]; then
    case $kind in
      A1) cmd="mpirun --with-ft ulfm --oversubscribe -np 4 ./lost_daemon 150 100" ;;
      A2) cmd="mpirun --with-ft ulfm --mca mpi_ft_detector false --prtemca plm_ssh_agent /lost_daemon/fakessh --host $host:2,nodeB:2 -np 4 ./lost_daemon --node-local 150 100" ;;
      Bnoft) cmd="mpirun --mca mpi_ft_enable 0 --mca mpi_ft_detector false --prtemca plm_ssh_agent /lost_daemon/fakessh --host $host:2,nodeB:2 -np 4 ./lost_daemon --node-local 150 100" ;;
      *) cmd="mpirun --with-ft ulfm --mca mpi_ft_detector false --prtemca plm_ssh_agent /lost_daemon/fakessh --host $host:2,nodeB:2 -np 4 ./lost_daemon --node-local --shrink-world 150 100" ;;
    esac
    echo "in $chroot_dir: $cmd" > "$log"
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      chroot "$chroot_dir" /bin/bash -c "cd /lost_daemon && exec timeout $limit $cmd" >> "$log" 2>&1 &
  else
    cmd="mpirun --with-ft ulfm --mca mpi_ft_detector false --prtemca plm_ssh_agent $here/fakessh --host $host:2,127.0.0.2:2 -np 4 $logdir/lost_daemon --node-local --shrink-world 150 100"
    echo "$cmd" > "$log"
    env -i PATH="$mpi_bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$HOME" LANG=C.UTF-8 \
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      timeout "$limit" $cmd >> "$log" 2>&1 &
  fi
  bg=$!  # timeout (env, chroot and bash exec it; not a subshell)
  sleep "$kill_after"

  # The launcher, nodeB's daemon(s) (found by the job's name, which holds the
  # launcher's pid), the programs.
  local prterun daemons=() d parent inner="" outer="" head_apps node_apps victims
  prterun=$(pgrep -P "$bg" -x prterun | head -1)
  if [[ -n $prterun ]]; then
    mapfile -t daemons < <(pgrep -f "ess_base_nspace prterun-[^ ]*-$prterun@0 .*ess_base_vpid 1 ")
  fi
  for d in "${daemons[@]}"; do
    parent=$(ps -o ppid= -p "$d" | tr -d ' ')
    if [[ $parent == "$prterun" ]]; then outer=$d; fi
    if printf '%s\n' "${daemons[@]}" | grep -qx "$parent"; then inner=$d; fi
  done
  if [[ -z $inner && ${#daemons[@]} -eq 1 ]]; then inner=${daemons[0]}; fi
  head_apps=$( [[ -n $prterun ]] && children "$prterun" lost_daemon)
  node_apps=$( [[ -n $inner ]] && children "$inner" lost_daemon)
  started=($prterun ${daemons[@]+"${daemons[@]}"} $head_apps $node_apps)
  {
    echo "--- at +${kill_after}s: prterun $prterun; nodeB daemons ${daemons[*]} (prted $inner, launch session ${outer:-none}); programs $head_apps| $node_apps"
    ps -o pid,ppid,args -p "$(echo "${started[@]}" | tr ' ' ',')" 2> /dev/null | cut -c1-200
  } >> "$log"

  case $mode-$kind in
    newer-A1) victims=$(echo $head_apps | tr ' ' '\n' | sort -n | tail -1) ;;
    newer-A2) victims=$(echo $node_apps | cut -d' ' -f1) ;;
    newer-Bd) victims=$inner ;;
    current-B) victims="$outer $inner $node_apps" ;;
    *) victims="$inner $node_apps" ;;
  esac
  local t_kill t_end rc
  if [[ -z ${victims// /} || ( $kind != A1 && -z $inner ) ]]; then
    echo "--- nothing to kill found: no kill" >> "$log"
    t_kill=$(now)
  else
    t_kill=$(now)
    echo "--- $t_kill kill -9 $victims" >> "$log"
    kill -9 $victims
  fi
  wait "$bg"
  rc=$?
  t_end=$(now)
  echo "--- $t_end mpirun exit status $rc (124: ended by timeout after ${limit}s)" >> "$log"
  sleep 1
  local left
  left=$(kill_leftovers)
  started=()
  [[ -n $left ]] && echo "--- still alive 1 s after mpirun ended, killed: $left" >> "$log"

  # The summary: exit status, times from the kill, the launcher's key lines.
  local first seen finished
  first=$(grep -ao 'wall=[0-9.]*' "$log" | cut -d= -f2 | sort -n | head -1)
  seen=$( [[ -n $first ]] && awk -v a="$t_kill" -v b="$first" 'BEGIN { printf "%.0f ms", (b - a) * 1000 }')
  finished=$(grep -ac FINISHED "$log")
  printf '%s %s run %d: killed %s; first survivor saw it %s after the kill; %d FINISHED; mpirun exit %d, %.3f s after the kill%s\n' \
    "$mode" "$kind" "$n" "${victims:-nothing}" "${seen:-(no wall= line)}" "$finished" "$rc" \
    "$(awk -v a="$t_kill" -v b="$t_end" 'BEGIN { print b - a }')" "${left:+; leftovers killed: $left}"
  grep -aE 'RESULT|Allreduce error|PRTE has lost communication|terminate the job|terminated unless|failed to report back|has exited due to|Unable to find reachable' "$log" |
    sed 's/^/    /'
  echo "    log: $log"
}

[[ $# -ge 1 ]] || usage
[[ $(id -u) == 0 ]] || { echo "run.sh: needs root (debootstrap, chroot, unshare)" >&2; exit 1; }
case $1 in
  chroot-setup)
    chroot_setup
    exit
    ;;
  newer | current)
    [[ $# -ge 2 ]] || usage
    mode=$1
    kind=$2
    runs=${3:-1}
    ;;
  *) usage ;;
esac
case $mode-$kind in
  newer-B | newer-Bd | newer-Bnoft | newer-A1 | newer-A2 | current-B | current-Bi) ;;
  *) usage ;;
esac
logdir=${LOGDIR:-$(mktemp -d)}
mkdir -p "$logdir"

if [[ $mode == newer ]]; then
  [[ -x $chroot_dir/usr/bin/mpirun.openmpi ]] || { echo "run.sh: no Open MPI in $chroot_dir: run.sh chroot-setup first" >&2; exit 1; }
  mount_chroot
  mkdir -p "$chroot_dir/lost_daemon"
  cp "$here/lost_daemon.c" "$here/fakessh" "$chroot_dir/lost_daemon/"
  in_chroot 'mpicc -O2 -Wall -o /lost_daemon/lost_daemon /lost_daemon/lost_daemon.c' || exit 1
  in_chroot 'mpirun --version | head -1; prterun --version | head -1'
else
  [[ -x $mpi_bin/mpicc ]] || { echo "run.sh: no $mpi_bin/mpicc (scripts/bootstrap.sh, or set MPI_BIN)" >&2; exit 1; }
  "$mpi_bin/mpicc" -O2 -Wall -o "$logdir/lost_daemon" "$here/lost_daemon.c" || exit 1
  "$mpi_bin/mpirun" --version | head -1
fi
for (( i = 1; i <= runs; ++i )); do
  one_run "$mode" "$kind" "$i"
done
echo "logs in $logdir"
