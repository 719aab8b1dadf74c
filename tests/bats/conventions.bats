#!/usr/bin/env bats
# SPDX-License-Identifier: Apache-2.0
# The conventions people type by habit (issue 39), for every program the
# build makes: -h/--help and -V/--version, a bad option's one line ending
# in "try --help", -o a,b lists in the tools as in ckptfs (libfuse's
# cutting, its escapes too), -q silencing warnings, ckptfs --help naming
# every format of the registry, the refusal of a run directory mounted
# inside itself, the mount helpers in build/, and the bash completion.

load helpers

LENET=$MS/mindarmour_checkpoint_lenet-10_1875.ckpt
# The version is the source's, not what a program prints.
VERSION=$(sed -n 's/^#define CKPTFS_VERSION "\(.*\)"$/\1/p' "$REPO/codec/core/version.h")
PROGS="ckptfs ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert ckptfs-reencode ckptfs-umount
       mount.ckptfs"
TOOLS="ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert"

setup() {
    T=$BATS_TEST_TMPDIR
    cd "$T"
}

# answers PROG ARG...: PROG ARG... exits 0 with something on stdout and
# nothing on stderr; its stdout in $T/out.
answers() {
    local rc=0
    "$BUILD/$1" "${@:2}" >"$T/out" 2>"$T/err" || rc=$?
    [ "$rc" -eq 0 ] || { echo "$* exited $rc: $(cat "$T/err")"; return 1; }
    [ -s "$T/out" ] || { echo "$*: nothing on stdout"; return 1; }
    [ ! -s "$T/err" ] || { echo "$*: on stderr: $(cat "$T/err")"; return 1; }
}

# helps PROG: -h and --help print PROG's usage on stdout, exit 0, nothing
# on stderr.
helps() {
    for h in -h --help; do
        answers "$1" "$h"
        head -1 "$T/out" | grep -q "^usage: $1 " || { echo "$1 $h: $(head -1 "$T/out")"; return 1; }
    done
}

# versions PROG: -V and --version print "PROG VERSION", one line (ckptfs
# adds libfuse's versions below its own), exit 0.
versions() {
    [ -n "$VERSION" ]
    for v in -V --version; do
        answers "$1" "$v"
        [ "$(head -1 "$T/out")" = "$1 $VERSION" ] || { echo "$1 $v: $(cat "$T/out")"; return 1; }
        [ "$1" = ckptfs ] || [ "$(wc -l <"$T/out")" -eq 1 ] || { echo "$1 $v: more lines"; return 1; }
    done
}

# refuses PROG: a bad option prints nothing on stdout and one line on
# stderr naming it and ending in "(try --help)" (ckptfs: libfuse names it
# on a line of its own first), exit 2.
refuses() {
    local rc=0
    # real paths, so that ckptfs gets as far as libfuse reading its options
    mkdir -p "$T/mnt"
    "$BUILD/$1" --no-such-option "$LENET" "$T/mnt" >"$T/out" 2>"$T/err" || rc=$?
    if [ "$rc" -eq 0 ] && mountpoint -q "$T/mnt"; then
        fusermount3 -u "$T/mnt" # taken, and mounted: not left behind
    fi
    [ "$rc" -eq 2 ] || { echo "$1: exit $rc"; return 1; }
    [ ! -s "$T/out" ]
    [ "$1" = ckptfs ] || [ "$(wc -l <"$T/err")" -eq 1 ] || { cat "$T/err"; return 1; }
    tail -1 "$T/err" | grep -q "(try --help)$" || { echo "$1: $(cat "$T/err")"; return 1; }
    grep -q -- "--no-such-option" "$T/err"
}

@test "ckptfs -h, --help: the usage on stdout, exit 0" { helps ckptfs; }
@test "ckptfs -V, --version: its name and version" { versions ckptfs; }
@test "ckptfs --no-such-option: one line, (try --help), exit 2" { refuses ckptfs; }
@test "ckptfs-dump -h, --help: the usage on stdout, exit 0" { helps ckptfs-dump; }
@test "ckptfs-dump -V, --version: its name and version" { versions ckptfs-dump; }
@test "ckptfs-dump --no-such-option: one line, (try --help), exit 2" { refuses ckptfs-dump; }
@test "ckptfs-stat -h, --help: the usage on stdout, exit 0" { helps ckptfs-stat; }
@test "ckptfs-stat -V, --version: its name and version" { versions ckptfs-stat; }
@test "ckptfs-stat --no-such-option: one line, (try --help), exit 2" { refuses ckptfs-stat; }
@test "ckptfs-diff -h, --help: the usage on stdout, exit 0" { helps ckptfs-diff; }
@test "ckptfs-diff -V, --version: its name and version" { versions ckptfs-diff; }
@test "ckptfs-diff --no-such-option: one line, (try --help), exit 2" { refuses ckptfs-diff; }
@test "ckptfs-convert -h, --help: the usage on stdout, exit 0" { helps ckptfs-convert; }
@test "ckptfs-convert -V, --version: its name and version" { versions ckptfs-convert; }
@test "ckptfs-convert --no-such-option: one line, (try --help), exit 2" { refuses ckptfs-convert; }
@test "ckptfs-reencode -h, --help: the usage on stdout, exit 0" { helps ckptfs-reencode; }
@test "ckptfs-reencode -V, --version: its name and version" { versions ckptfs-reencode; }
@test "ckptfs-reencode --no-such-option: one line, (try --help), exit 2" { refuses ckptfs-reencode; }
@test "ckptfs-umount -h, --help: the usage on stdout, exit 0" { helps ckptfs-umount; }
@test "ckptfs-umount -V, --version: its name and version" { versions ckptfs-umount; }
@test "ckptfs-umount --no-such-option: one line, (try --help), exit 2" { refuses ckptfs-umount; }
@test "mount.ckptfs -h, --help: the usage on stdout, exit 0" { helps mount.ckptfs; }
@test "mount.ckptfs -V, --version: its name and version" { versions mount.ckptfs; }
@test "mount.ckptfs --no-such-option: one line, (try --help), exit 2" { refuses mount.ckptfs; }

# key FILE: a 16-byte AES key in FILE, 0600 as ckptfs requires.
key() { (umask 077 && printf '0123456789ABCDEF' >"$1"); }

@test "-o takes a comma-separated list in every tool: -o key_file=K,nocrc opens an encrypted model" {
    key k
    # ckptfs-convert's own -o options in the same list as the shared ones
    "$BUILD/ckptfs-convert" -q -o enc_mode=AES-GCM,key_file=k "$LENET" enc.ckpt
    # encrypted: without the key it does not open
    run "$BUILD/ckptfs-stat" enc.ckpt
    [ "$status" -eq 1 ]
    [[ $output == *"encrypted (AES-GCM)"* ]]
    "$BUILD/ckptfs-stat" "$LENET" >plain.txt
    "$BUILD/ckptfs-stat" -o key_file=k,nocrc enc.ckpt >got.txt
    [ -s got.txt ] && cmp plain.txt got.txt
    "$BUILD/ckptfs-stat" -o key_file=k,nocrc,noindex --json enc.ckpt >/dev/null
    # dump: the same tensors as the plain model (the first line names the file)
    "$BUILD/ckptfs-dump" "$LENET" | tail -n +2 >plain.dump
    "$BUILD/ckptfs-dump" -o noindex,key_file=k enc.ckpt | tail -n +2 >got.dump
    [ -s got.dump ] && cmp plain.dump got.dump
    # diff and convert take it too
    "$BUILD/ckptfs-diff" -q -o key_file=k,nocrc "$LENET" enc.ckpt
    "$BUILD/ckptfs-convert" -q -o key_file=k,nocrc enc.ckpt back.safetensors
    "$BUILD/ckptfs-diff" -q back.safetensors "$LENET"
    # the attached form, -oLIST, as mount(8) and libfuse take it
    "$BUILD/ckptfs-stat" -okey_file=k,nocrc enc.ckpt >got2.txt
    cmp plain.txt got2.txt
}

@test "-o lists: a comma in a value is escaped as ckptfs escapes it (\\,); an unknown item is refused by name" {
    key 'k,1'
    "$BUILD/ckptfs-convert" -q -o 'enc_mode=AES-CBC,key_file=k\,1' "$LENET" enc.ckpt
    "$BUILD/ckptfs-stat" "$LENET" >plain.txt
    "$BUILD/ckptfs-stat" -o 'key_file=k\,1' enc.ckpt >got.txt
    cmp plain.txt got.txt
    # without the escape, the file "k" does not exist
    run "$BUILD/ckptfs-stat" -o 'key_file=k,1' enc.ckpt
    [ "$status" -eq 2 ]
    [ "$output" = "ckptfs-stat: bad option -o 1; usage: ckptfs-stat [OPTIONS] MODEL [TENSOR...] (try --help)" ]
    run "$BUILD/ckptfs-dump" -o noindex,bogus "$LENET"
    [ "$status" -eq 2 ]
    [[ $output == "ckptfs-dump: bad option -o bogus; "* ]]
}

@test "-q silences the tools' warnings (an index directory others may write), and nothing else" {
    mkdir idx
    chmod 0777 idx
    for p in ckptfs-dump ckptfs-stat; do
        "$BUILD/$p" -o index_dir=idx "$LENET" >loud.out 2>loud.err
        grep -q "^$p: warning: .*cannot save its index in idx" loud.err
        "$BUILD/$p" -q -o index_dir=idx "$LENET" >quiet.out 2>quiet.err
        [ ! -s quiet.err ] || { echo "$p -q: $(cat quiet.err)"; false; }
        cmp loud.out quiet.out
    done
    "$BUILD/ckptfs-diff" --json -o index_dir=idx "$LENET" "$LENET" >/dev/null 2>loud.err
    grep -q "^ckptfs-diff: warning: " loud.err
    "$BUILD/ckptfs-diff" -q -o index_dir=idx "$LENET" "$LENET" >quiet.out 2>quiet.err
    [ ! -s quiet.out ] && [ ! -s quiet.err ]
    "$BUILD/ckptfs-convert" -o index_dir=idx "$LENET" a.safetensors 2>loud.err
    grep -q "^ckptfs-convert: warning: " loud.err
    "$BUILD/ckptfs-convert" --quiet -o index_dir=idx "$LENET" b.safetensors 2>quiet.err
    [ ! -s quiet.err ]
    cmp a.safetensors b.safetensors
}

@test "ckptfs --help lists every format and directory of the registry, PyTorch, DCP and Hugging Face folders included" {
    answers ckptfs --help
    # the formats by their -o format / ckptfs-dump names, as the sources name them
    for name in ckpt onnx mindir safetensors safetensors-set oneflow pytorch; do
        grep -q "^  $name  *" "$T/out" || { echo "no format $name"; false; }
    done
    for name in distributed iteration oneflow dcp hf; do
        grep -q "^  $name  *" "$T/out" || { echo "no directory $name"; false; }
    done
    grep -q "^  pytorch  *PyTorch, \*\.pt \*\.pth \*\.bin$" "$T/out"
    grep -q "^  dcp  *a PyTorch distributed checkpoint$" "$T/out"
    grep -q "^  hf  *a Hugging Face model folder$" "$T/out"
    # ckptfs-dump names a PyTorch file's format as --help does
    "$BUILD/ckptfs-convert" -q "$LENET" lenet.pt
    "$BUILD/ckptfs-dump" lenet.pt | head -1 | grep -q ": format pytorch,"
}

@test "a run directory mounted on itself or inside it is refused before mounting, naming both" {
    mkdir -p run/mnt run-sibling
    cp "$LENET" run/a.ckpt
    real=$(realpath run)
    # Without -f, so that a mount that is not refused returns (and is
    # unmounted here) rather than serving forever.
    for mnt in run/mnt run run/./mnt/../mnt; do
        run "$CKPTFS" run "$mnt"
        [ "$status" -ne 0 ] || { fusermount3 -u "$mnt"; false; }
        [ "${#lines[@]}" -eq 1 ]
        [[ $output == *"mount point $(realpath "$mnt") "*"run directory $real "* ]]
        ! mountpoint -q "$mnt" || false
    done
    # through a link, and with relative and absolute spellings mixed
    ln -s "$real/mnt" link
    run "$CKPTFS" "$real" link
    [ "$status" -ne 0 ] || { fusermount3 -u link; false; }
    [[ $output == *"$real/mnt"*"$real"* ]]
    ! mountpoint -q run/mnt || false
    # a sibling whose name starts with the run's is not inside it
    mount_fg run run-sibling -o ro
    [ -f run-sibling/a/fc3.bias/meta ]
}

@test "the build puts ckptfs-umount and mount.ckptfs in build/: the README's tour works before make install" {
    [ -x "$BUILD/ckptfs-umount" ] && [ -x "$BUILD/mount.ckptfs" ]
    cp "$LENET" m.ckpt
    chmod 0644 m.ckpt
    mkdir mnt
    echo "0 $T/mnt" >>"$T/mounts"
    # no CKPTFS in the environment: the build's mount.ckptfs runs the build's ckptfs
    env -u CKPTFS "$BUILD/mount.ckptfs" m.ckpt mnt -o rw,noauto
    mountpoint -q mnt
    pid=$(getfattr --only-values -n user.ckptfs.pid mnt)
    [ "$(readlink "/proc/$pid/exe")" = "$(realpath "$BUILD/ckptfs")" ]
    cat mnt/fc3.bias/meta >/dev/null
    "$BUILD/ckptfs-umount" mnt
    ! mountpoint -q mnt || false
}

# complete_words WORD...: COMPREPLY, one a line, for a command line whose
# words (as bash splits them, COMP_WORDBREAKS's '=' included) are WORDS,
# the last the word being completed, after sourcing the completion in a
# fresh bash with the build's programs first on PATH.
complete_words() {
    PATH=$BUILD:$PATH bash -c '
        source "$1"; shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
        COMP_LINE=$(IFS=" "; echo "$*"); COMP_LINE=${COMP_LINE// = /=}
        COMP_POINT=${#COMP_LINE}
        _ckptfs_complete "$1"
        printf "%s\n" "${COMPREPLY[@]}"' bash "$REPO/mount-helpers/bash-completion/ckptfs" "$@"
}

@test "bash completion: every command has one; options, -o keys and -o lists complete from --help" {
    run bash -c "source '$REPO/mount-helpers/bash-completion/ckptfs' && complete -p ckptfs-dump"
    [ "$status" -eq 0 ]
    [ "$output" = "complete -F _ckptfs_complete ckptfs-dump" ]
    for p in $PROGS; do
        bash -c "source '$REPO/mount-helpers/bash-completion/ckptfs' && complete -p $p" >/dev/null
    done
    [ "$(complete_words ckptfs-dump --no | sort | tr '\n' ' ')" = "--no-index --nocrc " ]
    [ "$(complete_words ckptfs-stat -o key_)" = key_file= ]
    [ "$(complete_words ckptfs -o commit= | sort | tr '\n' ' ')" = \
      "commit=auto commit=manual " ]
    # after a comma, the next item of the list; bash replaces only what
    # follows the '=' it split the word at
    [ "$(complete_words ckptfs-stat -o key_file = k,noc)" = k,nocrc ]
    [ "$(complete_words ckptfs-diff --vers)" = --version ]
    [ "$(complete_words ckptfs-convert -)" != "" ]
    complete_words ckptfs-convert - | grep -qx -- --into
    # a file name where a model goes
    touch model-one.ckpt
    [ "$(complete_words ckptfs-stat model-o)" = model-one.ckpt ]
}

@test "make install puts the completion in COMPDIR: one file, a link to it per command" {
    root=$T/root
    make -s -C "$REPO" BUILD="$BUILD" install DESTDIR="$root" PREFIX=/opt/ck SBINDIR=/sbin
    dir=$root/opt/ck/share/bash-completion/completions
    [ -f "$dir/ckptfs" ] && [ ! -L "$dir/ckptfs" ]
    cmp "$dir/ckptfs" "$REPO/mount-helpers/bash-completion/ckptfs"
    for p in ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert ckptfs-umount mount.ckptfs; do
        [ "$(readlink "$dir/$p")" = ckptfs ]
    done
    # the installed helpers say the version too
    [ "$("$root/opt/ck/bin/ckptfs-umount" --version)" = "ckptfs-umount $VERSION" ]
    [ "$("$root/sbin/mount.ckptfs" -V)" = "mount.ckptfs $VERSION" ]
    make -s -C "$REPO" BUILD="$BUILD" uninstall DESTDIR="$root" PREFIX=/opt/ck SBINDIR=/sbin
    [ -z "$(find "$root" ! -type d)" ]
}
