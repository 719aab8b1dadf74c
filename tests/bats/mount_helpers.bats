#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# mount-helpers/: ckptfs-umount (save, unmount, wait) and mount.ckptfs (the
# mount(8) helper), and what `make install` puts where.

load helpers

UMOUNT=$REPO/mount-helpers/ckptfs-umount

setup() {
    F=$BATS_TEST_TMPDIR/model.ckpt
    M=$BATS_TEST_TMPDIR/m
    cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$F"
    chmod 0644 "$F"
}

@test "ckptfs-umount saves, unmounts and returns after the daemon has exited" {
    mount_fg "$F" "$M" -o commit=manual
    pid=$(tail -1 "$BATS_TEST_TMPDIR/mounts" | cut -d' ' -f1)
    printf '\x00\x00\x80\x3f' | dd of="$M/linear1.bias/out" conv=notrunc status=none
    "$UMOUNT" "$M"
    ! mountpoint -q "$M" || false
    ! running_child "$pid" || false # exited (a zombie until bash reaps it)
    mount_fg "$F" "$BATS_TEST_TMPDIR/again" -o ro
    [ "$(od -A n -t f4 -N 4 "$BATS_TEST_TMPDIR/again/linear1.bias/out" | tr -d ' ')" = 1 ]
}

@test "ckptfs-umount: a failing save is reported with the daemon's reason and the mount stays" {
    mount_fg "$F" "$M" -o commit=manual
    before=$(sha "$F")
    truncate -s 3 "$M/linear2.bias/out"
    run "$UMOUNT" "$M"
    [ "$status" -eq 1 ]
    [[ $output == *"not unmounted, the save failed"*"tensor 'linear2.bias': out is 3 bytes"* ]]
    mountpoint -q "$M"
    [ "$(sha "$F")" = "$before" ]
    truncate -s 20 "$M/linear2.bias/out"
    "$UMOUNT" "$M"
    ! mountpoint -q "$M" || false
}

# umount_spelled SPELLING DIR: ckptfs-umount run from DIR with the mount
# point spelled SPELLING; sets $status and $output.
umount_spelled() {
    run sh -c 'cd "$2" && "$1" "$3"' sh "$UMOUNT" "$2" "$1"
}

@test "ckptfs-umount finds the mount however it is spelled: relative, trailing slash, a space" {
    for name in m "with space"; do
        for spelling in "$name" "$name/" "./$name//" "$BATS_TEST_TMPDIR/$name/"; do
            mnt=$BATS_TEST_TMPDIR/$name
            mount_fg "$F" "$mnt" -o commit=manual
            before=$(sha "$F")
            mkdir "$mnt/new"     # no meta, no out: the save must fail
            umount_spelled "$spelling" "$BATS_TEST_TMPDIR"
            [ "$status" -eq 1 ]
            [[ $output == *"not unmounted, the save failed: "*" $mnt: "*"tensor 'new' has no meta"* ]]
            mountpoint -q "$mnt"
            [ -d "$mnt/new" ]          # the edit is still there
            [ "$(sha "$F")" = "$before" ]
            rmdir "$mnt/new"
            printf '\x00\x00\x80\x3f' | dd of="$mnt/linear1.bias/out" conv=notrunc status=none
            umount_spelled "$spelling" "$BATS_TEST_TMPDIR"
            [ "$status" -eq 0 ]
            ! mountpoint -q "$mnt" || false
            [ "$(sha "$F")" != "$before" ]
            cp "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$F"
        done
    done
}

@test "ckptfs-umount: no edit can slip in between its save and the unmount; a busy mount stays editable" {
    mount_fg "$F" "$M" -o commit=manual
    # What ckptfs-umount asks for: save, then take no more edits...
    setfattr -n user.ckptfs.unmount -v 1 "$M"
    run sh -c "printf 'x' >'$M/linear1.bias/out'"
    [[ $output == *"Read-only file system"* ]]
    run mkdir "$M/new"
    [[ $output == *"Read-only file system"* ]]
    # ...until told the unmount did not happen.
    setfattr -n user.ckptfs.unmount -v 0 "$M"
    printf '\x00\x00\x80\x3f' | dd of="$M/linear1.bias/out" conv=notrunc status=none
    # A busy mount (a file open) is not unmounted, and stays editable.
    exec 5<"$M/linear1.weight/out"
    run "$UMOUNT" "$M"
    [ "$status" -eq 1 ]
    mountpoint -q "$M"
    printf '\x00\x00\x00\x40' | dd of="$M/linear2.bias/out" conv=notrunc status=none
    exec 5<&-
    "$UMOUNT" "$M"
    ! mountpoint -q "$M" || false
    mount_fg "$F" "$BATS_TEST_TMPDIR/again" -o ro
    [ "$(od -A n -t f4 -N 4 "$BATS_TEST_TMPDIR/again/linear1.bias/out" | tr -d ' ')" = 1 ]
    [ "$(od -A n -t f4 -N 4 "$BATS_TEST_TMPDIR/again/linear2.bias/out" | tr -d ' ')" = 2 ]
}

@test "ckptfs-umount --help" {
    run "$UMOUNT" --help
    [ "$status" -eq 0 ]
    [[ $output == "usage: ckptfs-umount MOUNTPOINT"* ]]
    [[ $output == *"Exit status"* ]]
    run "$UMOUNT"
    [ "$status" -eq 2 ]
    [[ $output == "usage: "* ]]
}

@test "ckptfs-umount on a read-only mount just unmounts; on anything else it refuses" {
    mount_fg "$MS/goldenstick_test_linears_woq_predict_2stage_fp32.ckpt" "$M"
    "$UMOUNT" "$M"
    ! mountpoint -q "$M" || false
    run "$UMOUNT" "$BATS_TEST_TMPDIR"
    [ "$status" -eq 2 ]
    [[ $output == *"is not a ckptfs mount"* ]]
}

@test "mount.ckptfs drops mount(8)'s own options and passes the rest to ckptfs" {
    mkdir "$M"
    echo "0 $M" >>"$BATS_TEST_TMPDIR/mounts"
    CKPTFS=$CKPTFS "$REPO/mount-helpers/mount.ckptfs" "$F" "$M" -o rw,noauto,nofail,x-gvfs-hide,ro
    grep -q " $M fuse.ckptfs ro," /proc/mounts
    [ -f "$M/linear1.bias/out" ]
    "$UMOUNT" "$M"
    chmod 0400 "$F"
    CKPTFS=$CKPTFS "$REPO/mount-helpers/mount.ckptfs" "$F" "$M" -o rw,defaults
    grep -q " $M fuse.ckptfs ro," /proc/mounts  # mount(8)'s implicit rw is not ckptfs's -o rw
    "$UMOUNT" "$M"
}

# install_into ROOT TARGET: make TARGET (install, uninstall) with DESTDIR=ROOT
# and the same PREFIX and SBINDIR each time, as uninstall requires.
install_into() {
    make -s -C "$REPO" BUILD="$BUILD" "$2" DESTDIR="$1" PREFIX=/opt/ck SBINDIR=/sbin
}

PAGES="man1/ckptfs.1 man1/ckptfs-dump.1 man1/ckptfs-stat.1 man1/ckptfs-diff.1 man1/ckptfs-convert.1
       man1/ckptfs-umount.1 man8/mount.ckptfs.8"

@test "make install puts the programs in PREFIX/bin, mount.ckptfs in SBINDIR, the pages in MANDIR" {
    root=$BATS_TEST_TMPDIR/root
    install_into "$root" install
    for f in ckptfs ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert ckptfs-umount; do
        [ -x "$root/opt/ck/bin/$f" ]
    done
    [ -x "$root/sbin/mount.ckptfs" ]
    grep -q 'CKPTFS=${CKPTFS:-/opt/ck/bin/ckptfs}' "$root/sbin/mount.ckptfs"
    for p in $PAGES; do
        [ -f "$root/opt/ck/share/man/$p" ]
    done
    # man finds them where they are, by name and section.
    [ "$(man -M "$root/opt/ck/share/man" -w ckptfs)" = "$root/opt/ck/share/man/man1/ckptfs.1" ]
    [ "$(man -M "$root/opt/ck/share/man" -w 8 mount.ckptfs)" = \
      "$root/opt/ck/share/man/man8/mount.ckptfs.8" ]
}

@test "every installed program answers --version with the mount's version and --help with its usage, exit 0" {
    want=$("$CKPTFS" --version | head -1 | awk '{print $2}')
    [ -n "$want" ]
    for p in ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert; do
        run "$BUILD/$p" --version
        [ "$status" -eq 0 ]
        [ "$output" = "$p $want" ]
        run "$BUILD/$p" --help
        [ "$status" -eq 0 ]
        [[ ${lines[0]} == "usage: $p "* ]]
    done
}

@test "the installed manual pages render without a warning from groff or man" {
    install_into "$BATS_TEST_TMPDIR/root" install
    for p in $PAGES; do
        page=$BATS_TEST_TMPDIR/root/opt/ck/share/man/$p
        # Warnings go to stderr, the page to stdout: only stderr is kept.
        err=$(groff -man -ww -z "$page" 2>&1) || { echo "groff: $p: $err"; false; }
        [ -z "$err" ] || { echo "groff: $p: $err"; false; }
        err=$(man --warnings -l "$page" 2>&1 >"$BATS_TEST_TMPDIR/out") ||
            { echo "man: $p: $err"; false; }
        [ -z "$err" ] || { echo "man: $p: $err"; false; }
        output=$(cat "$BATS_TEST_TMPDIR/out")
        [[ $output == *NAME*SYNOPSIS*DESCRIPTION*"SEE ALSO"* ]]
    done
}

@test "ckptfs.1 has an entry for every -o option ckptfs --help lists, spelled as --help spells it" {
    install_into "$BATS_TEST_TMPDIR/root" install
    # The page as man shows it, in plain ASCII and wide enough that no
    # entry is broken; an option's entry is its tag line, indented 7.
    LC_ALL=C MANWIDTH=250 man -l "$BATS_TEST_TMPDIR/root/opt/ck/share/man/man1/ckptfs.1" \
        >"$BATS_TEST_TMPDIR/page"
    # ckptfs's own options (libfuse's come after, and are libfuse's to
    # document): "    -o NAME[=METAVAR]  what it does".
    "$CKPTFS" --help | sed -n '/^ckptfs options:/,/^$/p' |
        grep -oE '^    -o [a-z_]+(=[A-Za-z]+)?' | sed 's/^ *//' >"$BATS_TEST_TMPDIR/opts"
    [ "$(wc -l <"$BATS_TEST_TMPDIR/opts")" -ge 20 ]   # the list was found
    missing=
    while read -r opt; do
        grep -qE "^ {7}$opt( |\$)" "$BATS_TEST_TMPDIR/page" || missing="$missing [$opt]"
    done <"$BATS_TEST_TMPDIR/opts"
    [ -z "$missing" ] || { echo "not in ckptfs.1:$missing"; false; }
}

@test "make uninstall removes every file make install put there and leaves other files" {
    root=$BATS_TEST_TMPDIR/root
    mkdir -p "$root/opt/ck/bin"
    echo mine >"$root/opt/ck/bin/other-tool"
    install_into "$root" install
    install_into "$root" uninstall
    [ "$(find "$root" -type f)" = "$root/opt/ck/bin/other-tool" ]
    [ "$(cat "$root/opt/ck/bin/other-tool")" = mine ]
    [ -z "$(find "$root" -type l)" ]
    # Without that file, nothing at all is left; a second uninstall has
    # nothing to do and does not fail.
    rm "$root/opt/ck/bin/other-tool"
    install_into "$root" install
    install_into "$root" uninstall
    [ -z "$(find "$root" ! -type d)" ]
    install_into "$root" uninstall
}
