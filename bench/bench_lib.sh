# SPDX-License-Identifier: Apache-2.0
# Helpers shared by the benchmark scripts (sourced; they set CKPTFS and W).

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# mount_timed MODEL MNT -> prints seconds; the daemonized command returns
# when the mount is live, so its run time is the mount time.
mount_timed() {
    local t0 t1
    t0=$(now)
    "$CKPTFS" -o ro "$1" "$2" || return
    t1=$(now)
    MOUNTS+=("$2")
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f\n", b - a}'
}
daemon_pid() { pgrep -n -f -- "$CKPTFS -o ro $1 $2"; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
timed() { local t0; t0=$(now); "$@" >/dev/null; awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f\n", b - a}'; }

# read_round_robin DIR P: P cats at once over DIR's outs, dealt round-robin.
read_round_robin() {
    local dir=$1 p=$2 i j outs
    outs=("$dir"/*/out)
    for ((i = 0; i < p; i++)); do
        local mine=()
        for ((j = i; j < ${#outs[@]}; j += p)); do mine+=("${outs[j]}"); done
        cat "${mine[@]}" >/dev/null &
    done
    wait
}

# Mounts on $M of models under $W, timed, their daemons tracked by pid (set
# W, M, CKPTFS and PIDS=() first; `trap cleanup_mounts EXIT`).
# mnt OPTS MODEL: mount on $M; sets T_MOUNT (seconds) and PID.  Not in a
# subshell, so that PIDS keeps the daemon for the cleanup.
mnt() {
    local t0
    t0=$(now)
    "$CKPTFS" -o "$1" "$2" "$M"
    T_MOUNT=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.6f", b - a}')
    PID=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$M" 2>/dev/null ||
          pgrep -n -f -- "$CKPTFS -o $1 $2 $M")
    PIDS+=("$PID")
}
# umnt: unmount $M and wait for the daemon ($PID) to exit.
umnt() {
    fusermount3 -u "$M"
    while kill -0 "$PID" 2>/dev/null; do sleep 0.02; done
}
# cleanup_mounts: unmount $M, end only the daemons mnt started (by pid, if
# one outlived its mount), remove $W.
cleanup_mounts() {
    mountpoint -q "$M" && fusermount3 -u "$M"
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        [[ "$(tr '\0' ' ' <"/proc/$p/cmdline")" == "$CKPTFS -o "*" $W/"* ]] && kill "$p"
    done
    rm -rf "$W"
}

