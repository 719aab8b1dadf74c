#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The Debian package (`make deb`, debian/): what it holds and declares, and
# that it works once installed into a fresh Debian 12 root.
#
# The root is debootstrap's minbase of bookworm (plus man-db, to read the
# pages), made once and cached in $CKPTFS_ROOT_CACHE (default
# /var/cache/ckptfs-tests).  Each run mounts an overlay on it, so the
# cache stays untouched, and chroots into that: dpkg -i, apt-get -f install
# (only what the package declares comes in), then the installed ckptfs,
# man and mount(8) -> /sbin/mount.ckptfs, and a purge.  The packages apt
# fetches are kept in the cache too, so a warm run needs no network.
# Every mount (overlay, /proc, /dev/fuse, the apt cache, the FUSE mount) is
# listed as it is made and unmounted in teardown_file, even on failure.

load helpers

ROOT_CACHE=${CKPTFS_ROOT_CACHE:-/var/cache/ckptfs-tests}
BASE=$ROOT_CACHE/bookworm-minbase
MIRROR=http://deb.debian.org/debian
VERSION=$(sed -n 's/^#define CKPTFS_VERSION "\(.*\)"$/\1/p' "$REPO/codec/core/version.h")
DEB=$BUILD/ckptfs_${VERSION}_$(dpkg --print-architecture).deb
MODEL=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt

# in_root CMD...: CMD in the fresh root, with a plain environment (none of
# the host's or the sanitizers' variables).
in_root() {
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive chroot "$R" "$@"
}

# make_base DIR: debootstrap's minbase bookworm in DIR, with man-db.
make_base() {
    debootstrap --variant=minbase --include=man-db bookworm "$1" "$MIRROR" \
        >"$ROOT_CACHE/debootstrap.log" 2>&1 || { tail -20 "$ROOT_CACHE/debootstrap.log"; return 1; }
    # As an installed Debian 12 has it: the point and security updates too.
    printf 'deb %s %s main\n' "$MIRROR" bookworm "$MIRROR" bookworm-updates \
        http://deb.debian.org/debian-security bookworm-security >"$1/etc/apt/sources.list"
    chroot "$1" apt-get clean
}

# prepare_base: the cached root, made once (in a temporary directory renamed
# into place, so a half-made root is never used), its package lists fetched
# again when a day old; under a lock, for two runs at once.
prepare_base() {
    local lock tmp status=0
    mkdir -p "$ROOT_CACHE/archives"
    exec {lock}>"$ROOT_CACHE/lock"
    flock "$lock"
    if [ ! -e "$BASE/.complete" ]; then
        tmp=$(mktemp -d "$ROOT_CACHE/new.XXXXXX")
        chmod 0755 "$tmp"    # a root directory, for every user
        if make_base "$tmp" >&2; then
            rm -rf "$BASE"
            mv "$tmp" "$BASE"
            touch "$BASE/.complete"
        else
            rm -rf "$tmp"
            status=1
        fi
    fi
    # (apt keeps an unchanged list's old time: a stamp says when it asked.)
    if [ "$status" = 0 ] && [ -z "$(find "$BASE/.lists" -mtime -1 2>/dev/null)" ]; then
        chroot "$BASE" apt-get update -qq >&2 && touch "$BASE/.lists" || status=1
    fi
    exec {lock}>&-
    return "$status"
}

# exited PID: the process has exited (a zombie has too: whoever adopted
# the daemon has just not collected it yet).
exited() {
    [ ! -e "/proc/$1" ] || [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" = Z ]
}

# root_files: the names of the root's files, but for the kernel's, the
# scratch ones and package managers' records, caches and logs.
root_files() {
    (cd "$R" && find . -path ./proc -prune -o -path ./dev -prune -o -path ./tmp -prune \
        -o -path ./mnt -prune -o -path ./var/lib/dpkg -prune -o -path ./var/lib/apt -prune \
        -o -path ./var/cache -prune -o -path ./var/log -prune -o -print) | sort
}

# mounted TARGET: note a mount just made, for teardown_file.
mounted() { echo "$1" >>"$BATS_FILE_TMPDIR/mounts"; }

# fuse_mount MNT MOUNT-ARGS...: mount(8) in the root (MNT as the root sees
# it), noted first for teardown_file; sets $pid to the daemon's.
fuse_mount() {
    local mnt=$1
    shift
    mkdir -p "$R$mnt"
    echo "$R$mnt" >>"$BATS_FILE_TMPDIR/fuse"
    in_root mount "$@" 3>&-
    pid=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$R$mnt")
}

setup_file() {
    make -s -C "$REPO" BUILD="$BUILD" deb >"$BATS_FILE_TMPDIR/deb.log" 2>&1 ||
        { tail -30 "$BATS_FILE_TMPDIR/deb.log" >&2; return 1; }
    prepare_base
    export R=$BATS_FILE_TMPDIR/root
    mkdir -p "$R" "$BATS_FILE_TMPDIR/upper" "$BATS_FILE_TMPDIR/work"
    mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$BATS_FILE_TMPDIR/upper" \
        -o "workdir=$BATS_FILE_TMPDIR/work" "$R"
    mounted "$R"
    mount -t proc proc "$R/proc"
    mounted "$R/proc"
    touch "$R/dev/fuse"
    mount --bind /dev/fuse "$R/dev/fuse"
    mounted "$R/dev/fuse"
    mount --bind "$ROOT_CACHE/archives" "$R/var/cache/apt/archives"
    mounted "$R/var/cache/apt/archives"
    cp /etc/resolv.conf "$R/etc/resolv.conf"
    # What a booted Debian has (systemd-tmpfiles makes it); without it
    # libfuse keeps /etc/mtab itself, with a lock file beside it.
    ln -sfn ../proc/self/mounts "$R/etc/mtab"
}

# The FUSE mount first (its daemon, started by mount(8) in the root, holds
# the root: wait for it to exit), then the rest, newest first; each step
# runs even if one fails, a lazy unmount as the last resort.
teardown_file() {
    local pid mnt i failed=0
    if [ -f "$BATS_FILE_TMPDIR/fuse" ]; then
        while read -r mnt; do
            mountpoint -q "$mnt" || continue
            pid=$(getfattr --absolute-names --only-values -n user.ckptfs.pid "$mnt") || pid=
            fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" || failed=1
            [ -n "$pid" ] || continue
            for i in $(seq 1 200); do
                exited "$pid" && break
                sleep 0.05
            done
        done < <(tac "$BATS_FILE_TMPDIR/fuse")
    fi
    if [ -f "$BATS_FILE_TMPDIR/mounts" ]; then
        while read -r mnt; do
            mountpoint -q "$mnt" || continue
            umount "$mnt" || umount -l "$mnt" || failed=1
        done < <(tac "$BATS_FILE_TMPDIR/mounts")
    fi
    return "$failed"
}

@test "make deb: ckptfs_VERSION_ARCH.deb holds what make install installs, pages gzipped" {
    [ -f "$DEB" ]
    [ "$(dpkg-deb -f "$DEB" Package)" = ckptfs ]
    [ "$(dpkg-deb -f "$DEB" Version)" = "$VERSION" ]
    [ "$(dpkg-parsechangelog -l "$REPO/debian/changelog" -S Version)" = "$VERSION" ]
    # The same install, by hand, with the package's directories: the
    # package has those files (pages gzipped), its doc files and lintian
    # overrides, no other.
    make -s -C "$REPO" BUILD="$BUILD" install DESTDIR="$BATS_TEST_TMPDIR/want" PREFIX=/usr \
        SBINDIR=/sbin MANDIR=/usr/share/man
    (cd "$BATS_TEST_TMPDIR/want" && find . ! -type d | sed 's|/man/.*|&.gz|'
     echo ./usr/share/doc/ckptfs/changelog.gz; echo ./usr/share/doc/ckptfs/copyright
     echo ./usr/share/lintian/overrides/ckptfs) |
        sort >"$BATS_TEST_TMPDIR/expected"
    dpkg-deb -c "$DEB" | awk '$1 !~ /^d/ {print $6}' | sort >"$BATS_TEST_TMPDIR/got"
    diff "$BATS_TEST_TMPDIR/expected" "$BATS_TEST_TMPDIR/got"
    grep -qx ./usr/bin/ckptfs "$BATS_TEST_TMPDIR/got"
    grep -qx ./sbin/mount.ckptfs "$BATS_TEST_TMPDIR/got"
    # Each page is gzip data that is the page docs/man holds.
    dpkg-deb -x "$DEB" "$BATS_TEST_TMPDIR/x"
    for p in "$BATS_TEST_TMPDIR"/x/usr/share/man/man*/*.gz; do
        name=$(basename "$p" .gz)
        zcat "$p" | cmp - "$REPO/docs/man/$name"
    done
}

@test "make deb: the programs are stripped, their debug symbols in ckptfs-dbgsym" {
    dpkg-deb -x "$DEB" "$BATS_TEST_TMPDIR/x"
    dpkg-deb -x "$BUILD/ckptfs-dbgsym_${VERSION}_$(dpkg --print-architecture).deb" \
        "$BATS_TEST_TMPDIR/dbg"
    n=0
    for f in "$BATS_TEST_TMPDIR"/x/usr/bin/*; do
        file -b "$f" | grep -q '^ELF' || continue
        file -b "$f" | grep -q ', stripped'
        # The debug file is found by the program's build id.
        id=$(readelf -n "$f" | awk '/Build ID/ {print $3}')
        [ -f "$BATS_TEST_TMPDIR/dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" ]
        n=$((n + 1))
    done
    [ "$n" -ge 2 ]
}

@test "make deb: Depends names the package of every shared library, fuse3 and attr" {
    depends=$(dpkg-deb -f "$DEB" Depends)
    dpkg-deb -x "$DEB" "$BATS_TEST_TMPDIR/x"
    # Independently of dpkg-shlibdeps: each library a program was linked
    # against (NEEDED), the file the host's loader takes for it, and the
    # package that ships that file.
    for f in "$BATS_TEST_TMPDIR"/x/usr/bin/*; do
        file -b "$f" | grep -q '^ELF' || continue
        for name in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            ldd "$f" | awk -v n="$name" '$1 == n && $2 == "=>" {print $3; f = 1}
                                          END {if (!f) print "unresolved:" n}'
        done
    done | sort -u >"$BATS_TEST_TMPDIR/libs"
    ! grep unresolved "$BATS_TEST_TMPDIR/libs" || false
    n=0
    while read -r lib; do
        pkg=$(dpkg -S "*/$(basename "$(dirname "$lib")")/$(basename "$lib")") || pkg=
        pkg=${pkg%%:*}
        [ -n "$pkg" ] || { echo "no package has $lib"; false; }
        [[ ", $depends" == *", $pkg "* ]] || { echo "Depends lacks $pkg ($lib): $depends"; false; }
        n=$((n + 1))
    done <"$BATS_TEST_TMPDIR/libs"
    [ "$n" -ge 7 ]
    # What the programs and scripts run: fusermount3, getfattr and setfattr.
    [[ ", $depends," == *", fuse3,"* ]]
    [[ ", $depends," == *", attr,"* ]]
}

@test "make deb: lintian has nothing to say, not even at pedantic or experimental" {
    changes=$BUILD/ckptfs_${VERSION}_$(dpkg --print-architecture).changes
    [ -f "$changes" ]
    run lintian --display-info --display-experimental --pedantic "$changes"
    echo "$output"
    [ "$status" -eq 0 ]
    ! grep -E '^[EWIPXCO]: ' <<<"$output" || false
}

@test "in a fresh Debian 12 root, dpkg -i wants the dependencies and apt-get -f brings them" {
    in_root dpkg-query -W -f '${binary:Package}\n' | sort >"$BATS_FILE_TMPDIR/before"
    root_files >"$BATS_FILE_TMPDIR/files-before"
    ! in_root dpkg -s ckptfs >/dev/null 2>&1 || false
    ! in_root dpkg -s fuse3 >/dev/null 2>&1 || false
    cp "$DEB" "$R/tmp/"
    run in_root dpkg -i "/tmp/$(basename "$DEB")"
    [ "$status" -ne 0 ]
    [[ $output == *"ckptfs depends on fuse3; however"* ]]
    [[ $output == *"ckptfs depends on attr; however"* ]]
    in_root apt-get -f install -y -qq >"$BATS_TEST_TMPDIR/apt.log" 2>&1 ||
        { cat "$BATS_TEST_TMPDIR/apt.log"; false; }
    [ "$(in_root dpkg-query -W -f '${Status}' ckptfs)" = "install ok installed" ]
    # Every package apt brought in is one ckptfs depends on, directly or not.
    in_root dpkg-query -W -f '${binary:Package}\n' | sort >"$BATS_TEST_TMPDIR/after"
    comm -13 "$BATS_FILE_TMPDIR/before" "$BATS_TEST_TMPDIR/after" | sed 's/:.*//' |
        grep -vx ckptfs >"$BATS_TEST_TMPDIR/new"
    in_root apt-cache depends --recurse --important ckptfs | grep -v '^ ' | sort -u \
        >"$BATS_TEST_TMPDIR/closure"
    [ -z "$(comm -23 <(sort "$BATS_TEST_TMPDIR/new") "$BATS_TEST_TMPDIR/closure")" ]
    grep -qx fuse3 "$BATS_TEST_TMPDIR/new"
}

@test "the installed programs answer --version with the package's version" {
    [ "$(in_root ckptfs --version | head -1)" = "ckptfs $VERSION" ]
    n=0
    for f in $(in_root dpkg -L ckptfs | grep '^/usr/bin/'); do
        head -c 4 "$R$f" | grep -q 'ELF' || continue
        [ "$(in_root "$f" --version | head -1)" = "$(basename "$f") $VERSION" ]
        n=$((n + 1))
    done
    [ "$n" -ge 4 ]
    in_root ckptfs-umount --help | grep -q '^usage: ckptfs-umount MOUNTPOINT'
}

@test "man ckptfs and every installed page render from the installed files, without a warning" {
    [ "$(in_root man -w ckptfs)" = /usr/share/man/man1/ckptfs.1.gz ]
    [ "$(in_root man -w 8 mount.ckptfs)" = /usr/share/man/man8/mount.ckptfs.8.gz ]
    n=0
    for p in $(in_root dpkg -L ckptfs | grep '^/usr/share/man/'); do
        [ -f "$R$p" ] || continue
        sect=$(basename "$(dirname "$p")"); sect=${sect#man}
        name=$(basename "$p" ".$sect.gz")
        err=$(in_root env MANPAGER=cat MANWIDTH=80 man --warnings "$sect" "$name" 2>&1 \
              >"$BATS_TEST_TMPDIR/page") || { echo "man $sect $name: $err"; false; }
        [ -z "$err" ] || { echo "man $sect $name: $err"; false; }
        grep -q '^NAME' "$BATS_TEST_TMPDIR/page"
        grep -q "^ *$name" "$BATS_TEST_TMPDIR/page"
        n=$((n + 1))
    done
    [ "$n" -ge 6 ]
    in_root env MANPAGER=cat man ckptfs | grep -q '^SYNOPSIS'
}

# fc3_bias_sha PARSE_JSON: fc3.bias's sha256 in the oracle's parse.
fc3_bias_sha() {
    $PY -c 'import json, sys
print([t["sha256"] for t in json.load(open(sys.argv[1])) if t["dir"] == "fc3.bias"][0])' "$1"
}

@test "mount -t ckptfs runs the installed mount.ckptfs: ls shows the tensors; ckptfs-umount saves" {
    cp "$MODEL" "$R/tmp/model.ckpt"
    chmod 0644 "$R/tmp/model.ckpt"
    fuse_mount /mnt/m -t ckptfs /tmp/model.ckpt /mnt/m -o rw
    # The daemon is the installed program, started through /sbin/mount.ckptfs.
    [ "$(readlink "/proc/$pid/exe")" = "$R/usr/bin/ckptfs" ]
    in_root grep -q ' /mnt/m fuse.ckptfs rw,' /proc/mounts
    # ls lists every tensor the oracle reads from the file, and OneFlow's
    # snapshot_done, nothing else.
    in_root ls /mnt/m >"$BATS_TEST_TMPDIR/ls"
    $ORACLE parse "$MODEL" >"$BATS_TEST_TMPDIR/ref.json"
    { $PY -c 'import json, sys; print("\n".join(t["dir"] for t in json.load(sys.stdin)))' \
        <"$BATS_TEST_TMPDIR/ref.json"; echo snapshot_done; } | sort >"$BATS_TEST_TMPDIR/dirs"
    [ "$(wc -l <"$BATS_TEST_TMPDIR/dirs")" -ge 4 ]
    diff "$BATS_TEST_TMPDIR/dirs" <(sort "$BATS_TEST_TMPDIR/ls")
    $ORACLE check "$R/mnt/m" "$R/tmp/model.ckpt"
    # An edit, saved by the installed ckptfs-umount (getfattr, setfattr,
    # awk and fusermount3 from the root: its dependencies are enough).  The
    # oracle then reads the new bytes from the file.
    { printf '\000\000\200\077'; tail -c +5 "$R/mnt/m/fc3.bias/out"; } >"$BATS_TEST_TMPDIR/want"
    in_root sh -c 'printf "\000\000\200\077" | dd of=/mnt/m/fc3.bias/out conv=notrunc status=none'
    in_root ckptfs-umount /mnt/m
    ! mountpoint -q "$R/mnt/m" || false
    exited "$pid"
    want=$(sha256sum <"$BATS_TEST_TMPDIR/want" | cut -d' ' -f1)
    $ORACLE parse "$R/tmp/model.ckpt" >"$BATS_TEST_TMPDIR/saved.json"
    [ "$(fc3_bias_sha "$BATS_TEST_TMPDIR/saved.json")" = "$want" ]
    [ "$(fc3_bias_sha "$BATS_TEST_TMPDIR/ref.json")" != "$want" ]
}

@test "an fstab line of type ckptfs mounts with mount MNT, read-only as it says" {
    [ -f "$R/tmp/model.ckpt" ] || cp "$MODEL" "$R/tmp/model.ckpt"
    echo '/tmp/model.ckpt /mnt/f ckptfs noauto,ro 0 0' >>"$R/etc/fstab"
    fuse_mount /mnt/f /mnt/f
    [ "$(readlink "/proc/$pid/exe")" = "$R/usr/bin/ckptfs" ]
    in_root grep -q ' /mnt/f fuse.ckptfs ro,' /proc/mounts
    $ORACLE check "$R/mnt/f" "$R/tmp/model.ckpt"
    run in_root sh -c 'printf x >/mnt/f/fc3.bias/out'
    [[ $output == *"Read-only file system"* ]]
    in_root ckptfs-umount /mnt/f
    ! mountpoint -q "$R/mnt/f" || false
    exited "$pid"
}

@test "dpkg --purge removes every file it installed; autoremove leaves the root as it was" {
    in_root dpkg -L ckptfs >"$BATS_TEST_TMPDIR/files"
    in_root dpkg --purge ckptfs
    ! in_root dpkg -s ckptfs >/dev/null 2>&1 || false
    while read -r f; do
        [ -d "$R$f" ] && continue      # /usr, /usr/bin...: other packages' too
        [ ! -e "$R$f" ] || { echo "left behind: $f"; false; }
    done <"$BATS_TEST_TMPDIR/files"
    [ ! -e "$R/usr/share/doc/ckptfs" ]
    [ ! -e "$R/sbin/mount.ckptfs" ]
    mkdir -p "$R/mnt/gone"
    ! in_root mount -t ckptfs /tmp/model.ckpt /mnt/gone 2>/dev/null || false
    in_root apt-get autoremove --purge -y -qq >/dev/null
    in_root dpkg-query -W -f '${binary:Package}\n' | sort >"$BATS_TEST_TMPDIR/after"
    diff "$BATS_FILE_TMPDIR/before" "$BATS_TEST_TMPDIR/after"
    diff "$BATS_FILE_TMPDIR/files-before" <(root_files)
}
