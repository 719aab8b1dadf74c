# SPDX-License-Identifier: Apache-2.0
# ckptfs — see README.md.  `make` builds build/ckptfs; `make test` installs
# what the tests need, builds and runs every test.

PREFIX    ?= /usr/local
BUILD     ?= build
CC        ?= gcc
OPTFLAGS  ?= -O2 -g
SANFLAGS  ?=

PKGS      := fuse3 libprotobuf-c zlib libzstd libcrypto jansson yajl
CFLAGS    += -std=gnu11 -Wall -Wextra -Werror -D_FILE_OFFSET_BITS=64 $(OPTFLAGS) $(SANFLAGS) \
             $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -I$(BUILD)/gen
LDFLAGS   += $(SANFLAGS)
LDLIBS    += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm

# Debian 12 packages for building, testing and benchmarking.
DEB_PKGS  := gcc make pkg-config libfuse3-dev fuse3 libprotobuf-c-dev protobuf-c-compiler \
             libzstd-dev libssl-dev zlib1g-dev libjansson-dev libyajl-dev bats attr rsync strace clang libclang-rt-14-dev \
             python3-protobuf protobuf-compiler \
             python3-numpy python3-onnx python3-cryptography python3-torch time zstd openssl parallel \
             groff-base man-db debhelper debootstrap lintian \
             s3fs curl bindfs nfs-ganesha nfs-ganesha-vfs libnfs-utils

# The library every program links, built once: the codec (formats, their
# readers and writers; envelopes; collections; the core) and save (commit,
# lock, conversion).  A source file added to one of these folders is in it.
LIB_SRC   := $(wildcard codec/*.c codec/*/*.c save/*.c)
# What only the command-line programs (and the unit tests) use: argument
# reading and how they open a model, the statistics of ckptfs-stat, and the
# threaded chunked reads of ckptfs-stat and ckptfs-diff.
TOOL_SRC  := tools/cli_open.c tools/tensor_stats.c tools/stats_elem.c tools/stats_isa.c \
             tools/stats_kernel.c tools/chunk_pass.c
# The mount: its logic with no libfuse in it (mount/: the tree, saves, run
# directories, views, every operation as a plain result), and the thin
# adapter that speaks FUSE (fuse/: requests, replies, the loop, main).
MOUNT_SRC := $(wildcard mount/*.c)
FUSE_SRC  := $(wildcard fuse/*.c)
FS_SRC    := $(MOUNT_SRC) $(FUSE_SRC)
UNIT_SRC  := $(wildcard tests/unit/*.c)
HEADERS   := $(wildcard codec/*.h codec/*/*.h save/*.h mount/*.h fuse/*.h tools/*.h tools/*.inc \
               tests/unit/*.h)
# The strategy file is decoded by protobuf-c's generated code (the codec
# uses it); checkpoint.proto's only serves the unit tests' encoder.
PROTOS    := codec/pb/proto/checkpoint.proto codec/pb/proto/node_strategy.proto
PROTO_C   := $(PROTOS:codec/pb/proto/%.proto=$(BUILD)/gen/%.pb-c.c)

LIB       := $(BUILD)/libckptfs.a
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/node_strategy.pb-c.o
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
FS_OBJ    := $(FS_SRC:%.c=$(BUILD)/%.o)
# mount/, which has no FUSE in it, the unit tests drive directly: the
# mounted tree and its unsaved edits, the operations, the run directory.
MOUNT_OBJ := $(MOUNT_SRC:%.c=$(BUILD)/%.o)
PROTO_OBJ := $(BUILD)/gen/checkpoint.pb-c.o

BINS      := $(BUILD)/ckptfs $(BUILD)/ckptfs-dump $(BUILD)/ckptfs-stat $(BUILD)/ckptfs-diff \
             $(BUILD)/ckptfs-reencode $(BUILD)/ckptfs-convert \
             $(BUILD)/unit-tests $(BUILD)/fhandle
# The version every program answers -V with (the scripts get it written in).
VERSION   := $(shell sed -n 's/^\#define CKPTFS_VERSION "\(.*\)"$$/\1/p' codec/core/version.h)
# mount-helpers/' scripts beside the programs, so that the README's tour
# works from build/ before make install: their version written in, and
# mount.ckptfs running this build's ckptfs.
HELPERS   := $(BUILD)/ckptfs-umount $(BUILD)/mount.ckptfs

.SECONDARY: $(PROTO_C) $(PROTO_C:.c=.h)
.PHONY: all deps deb-deps test check asan tsan demo programs install uninstall deb clean bench fuzz fuzz-corpus
all: $(BINS) $(HELPERS)

# A static pattern: not the ckptfs-% rule of the programs below.
$(HELPERS): $(BUILD)/%: mount-helpers/% codec/core/version.h
	@mkdir -p $(BUILD)
	sed -e 's|@BINDIR@|$(abspath $(BUILD))|' -e 's|@VERSION@|$(VERSION)|' $< >$@
	chmod 0755 $@

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: codec/pb/proto/%.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen -Icodec/pb/proto $<

$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

# Where an install's maps are, the last place a map's name is looked up.
$(BUILD)/codec/map/map.o: CPPFLAGS += -DCKPTFS_MAPS_DIR='"$(MAPDIR)"'

$(BUILD)/%.o: %.c $(HEADERS) | $(PROTO_C)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/ckptfs: $(FS_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# tools/NAME.c is the program ckptfs-NAME.
$(BUILD)/ckptfs-%: $(BUILD)/tools/%.o $(TOOL_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/unit-tests: $(UNIT_SRC:%.c=$(BUILD)/%.o) $(PROTO_OBJ) $(TOOL_OBJ) $(MOUNT_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# tests/bats/nfs_export.bats: NFS file handles taken and opened as the
# kernel's NFS server does (name_to_handle_at, open_by_handle_at).
$(BUILD)/fhandle: $(BUILD)/tests/tools/fhandle.o
	$(CC) $(LDFLAGS) -o $@ $^

# Install the Debian packages the build and the tests need (as root), or say
# which command would; then the tests' npm packages.  The demo needs only the
# Debian packages.
deps: deb-deps
	@# onnxruntime-node, the ONNX tests' real consumer; its default install
	@# step would download a GPU provider from outside the npm registry.
	@if [ ! -d tests/ort/node_modules/onnxruntime-node ]; then \
	  echo "deps: npm install onnxruntime-node"; \
	  cd tests/ort && npm install --no-audit --no-fund --onnxruntime-node-install=skip; fi
	@# s3rver, the fake S3 server the object-storage tests mount with s3fs
	@# (tests/s3/package-lock.json pins it and its dependencies).
	@if [ ! -d tests/s3/node_modules/s3rver ]; then \
	  echo "deps: npm install s3rver"; \
	  cd tests/s3 && npm install --no-audit --no-fund; fi

deb-deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "deps: all present"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "deps: run as root: apt-get install $$missing"; exit 1; fi

test: deps
	$(MAKE) all $(BUILD)/fuzz-ckpt
	tests/run-all.sh $(BUILD)

check: test

# The whole suite again under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	$(MAKE) BUILD=build-asan OPTFLAGS="-O1 -g -fno-omit-frame-pointer" \
	  SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" all build-asan/fuzz-ckpt
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 tests/run-all.sh build-asan

# The concurrency tests (a save beside the request loop, client threads
# racing saves, a run directory's watcher beside its requests and its
# checkpoints' savers, threaded readers of merged and iteration mounts, the
# threads of ckptfs-stat and ckptfs-diff (and the progress bar on a terminal
# they all count into), the threads that tell the kernel of a save's
# renames, the zstd writer's output thread) under ThreadSanitizer.  gcc's
# libtsan2 comes with gcc
# (libgcc-12-dev depends on it).  Every report fails the test that was
# running: TSAN_OPTIONS halts the process (exit 66) and writes the report to
# build-tsan/tsan-logs/tsan.PID, which tests/bats/helpers.bash checks in each
# test's teardown (daemons run in the background, their stderr may be gone).
TSAN_LOGS := $(CURDIR)/build-tsan/tsan-logs
tsan: deps
	$(MAKE) BUILD=build-tsan OPTFLAGS="-O1 -g -fno-omit-frame-pointer" SANFLAGS="-fsanitize=thread" all
	rm -rf $(TSAN_LOGS) && mkdir -p $(TSAN_LOGS)
	export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$(TSAN_LOGS)/tsan" \
	  CKPTFS_BUILD=$(CURDIR)/build-tsan CKPTFS_TSAN_LOGS=$(TSAN_LOGS); \
	  bats tests/bats/concurrent.bats; a=$$?; \
	  bats --filter 'client threads' tests/bats/random_ops.bats; b=$$?; \
	  bats tests/bats/run_mount.bats; c=$$?; \
	  bats tests/bats/dist_envelopes.bats; d=$$?; \
	  bats --filter 'threads|tracker names' tests/bats/iteration_dir.bats; e=$$?; \
	  bats tests/bats/run_rw.bats; f=$$?; \
	  bats tests/bats/stat.bats tests/bats/diff.bats; g=$$?; \
	  bats --filter 'ckptfs-stat|ckptfs-diff' tests/bats/progress_tools.bats || g=1; \
	  bats --filter 'commit=auto' tests/bats/pickled_copy.bats; h=$$?; \
	  bats --filter 'save|saved' tests/bats/zstd.bats; i=$$?; \
	  if [ -n "$$(ls -A $(TSAN_LOGS))" ]; then echo "tsan: reports in $(TSAN_LOGS)"; exit 1; fi; \
	  [ $$a -eq 0 ] && [ $$b -eq 0 ] && [ $$c -eq 0 ] && [ $$d -eq 0 ] && [ $$e -eq 0 ] && \
	  [ $$f -eq 0 ] && [ $$g -eq 0 ] && [ $$h -eq 0 ] && [ $$i -eq 0 ]

# The main job on the real checkpoint in tests/demo/, start to end
# (tests/demo.sh says what it shows).
demo: deb-deps
	$(MAKE) programs
	tests/demo.sh $(BUILD)

# Coverage-guided fuzzing of the readers and writers of every format
# (clang's libFuzzer + ASan + UBSan; one target, the format from
# CKPTFS_FUZZ_FORMAT), seeded with the real models in ../shared/fixtures,
# the regression inputs (tests/fuzz/regress/) and the coverage corpus
# (tests/fuzz/corpus/), each replayed whole first (tests/fuzz/run.sh).
# `make test` runs a short campaign per format (run-all.sh: 30 000 inputs,
# FUZZ_RUNS in the environment); `make fuzz` a longer one:
#   FUZZ_RUNS=N       inputs per format (a fixed seed: deterministic)
#   FUZZ_SECONDS=S    or S seconds per format instead
#   FUZZ_FORMATS="A B" only these formats (all by default)
#   FUZZ_JOBS=N       N formats side by side (1: they are page-fault bound)
# `make fuzz-corpus` (the same knobs) makes tests/fuzz/corpus/ again: each
# format's campaign minimized with -merge=1 (commit the result).
FUZZ_RUNS ?= 200000
FUZZ_FORMATS ?=
export FUZZ_SECONDS FUZZ_JOBS
FUZZ_CFLAGS := -std=gnu11 -Wall -Wextra -Werror -g -O1 -D_FILE_OFFSET_BITS=64 \
               -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
               $(shell pkg-config --cflags yajl 2>/dev/null) -I$(BUILD)/gen
# The library again, instrumented for the fuzzer: its own objects and archive.
$(BUILD)/fuzz/%.o: %.c $(HEADERS) | $(PROTO_C)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -c -o $@ $<

$(BUILD)/fuzz/libckptfs.a: $(LIB_SRC:%.c=$(BUILD)/fuzz/%.o) $(BUILD)/fuzz/gen/node_strategy.pb-c.o
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/fuzz/gen/node_strategy.pb-c.o: $(BUILD)/gen/node_strategy.pb-c.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -c -o $@ $<

$(BUILD)/fuzz-ckpt: $(BUILD)/fuzz/tests/fuzz/fuzz_ckpt.o $(BUILD)/fuzz/libckptfs.a
	clang -fsanitize=fuzzer,address,undefined -o $@ $^ \
	  -lz -lzstd -lcrypto -ljansson -lyajl -lprotobuf-c

fuzz: $(BUILD)/fuzz-ckpt
	tests/fuzz/run.sh $(BUILD)/fuzz-ckpt $(FUZZ_RUNS) $(FUZZ_FORMATS)

fuzz-corpus: $(BUILD)/fuzz-ckpt
	FUZZ_MERGE=1 tests/fuzz/run.sh $(BUILD)/fuzz-ckpt $(FUZZ_RUNS) $(FUZZ_FORMATS)

bench: all
	bench/bench_ckpt.sh $(BUILD)
	bench/bench_onnx.sh $(BUILD)
	bench/bench_envelope.sh $(BUILD)
	bench/bench_zstd.sh $(BUILD)
	bench/bench_commit.sh $(BUILD)
	bench/bench_verify.sh $(BUILD)
	bench/bench_bounded.sh $(BUILD)
	bench/bench_requests.sh $(BUILD)
	bench/bench_walk.sh $(BUILD)
	bench/bench_threads.sh $(BUILD)
	bench/bench_readahead.sh $(BUILD)
	bench/bench_save.sh $(BUILD)
	bench/bench_safetensors.sh $(BUILD)
	bench/bench_st_scale.sh $(BUILD)
	bench/bench_stat.sh $(BUILD)

# mount(8) looks for mount.<type> in /sbin only.
SBINDIR   ?= /sbin
MANDIR    ?= $(PREFIX)/share/man
# What install puts in place and uninstall takes away: the programs built in
# $(BUILD) and mount-helpers/' scripts, in PREFIX/bin, each with its manual
# page docs/man/NAME.1 (so a new program is one word here, and its page must
# exist); mount.ckptfs in SBINDIR with mount.ckptfs.8.  Pages go in plain,
# as most upstream installs do: man reads them so, and a Debian build's
# dh_installman/dh_compress gzips them (-9n) in the package.
INSTALL_BINS    := ckptfs ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert
INSTALL_SCRIPTS := ckptfs-umount
MAN1      := $(INSTALL_BINS:%=docs/man/%.1) $(INSTALL_SCRIPTS:%=docs/man/%.1)
MAN8      := docs/man/mount.ckptfs.8
# Bash completion: one script, mount-helpers/bash-completion/ckptfs, for
# every command; bash-completion loads a command's completion from the file
# of its name, so each other command is a link to it.
COMPDIR   ?= $(PREFIX)/share/bash-completion/completions
# The shipped maps (maps/, docs/maps.md): found there by name once
# installed, and in the source tree's maps/ beside build/ before.
MAPDIR    ?= $(PREFIX)/share/ckptfs/maps
MAPS      := $(wildcard maps/*.map)
COMP_CMDS := ckptfs-dump ckptfs-stat ckptfs-diff ckptfs-convert ckptfs-umount mount.ckptfs
INSTALLED := $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(INSTALL_BINS) $(INSTALL_SCRIPTS)) \
             $(DESTDIR)$(SBINDIR)/mount.ckptfs \
             $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1))) \
             $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(MAN8))) \
             $(addprefix $(DESTDIR)$(COMPDIR)/,ckptfs $(COMP_CMDS)) \
             $(addprefix $(DESTDIR)$(MAPDIR)/,$(notdir $(MAPS)))
INSTALL_DIRS := $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man1 \
                $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(COMPDIR) $(DESTDIR)$(MAPDIR)
programs: $(INSTALL_BINS:%=$(BUILD)/%)

install: programs $(MAN1) $(MAN8)
	install -d $(INSTALL_DIRS)
	install -m 0755 $(INSTALL_BINS:%=$(BUILD)/%) $(DESTDIR)$(PREFIX)/bin/
	for s in $(INSTALL_SCRIPTS); do \
	  sed 's|@VERSION@|$(VERSION)|' mount-helpers/$$s >$(DESTDIR)$(PREFIX)/bin/$$s && \
	  chmod 0755 $(DESTDIR)$(PREFIX)/bin/$$s || exit 1; done
	sed -e 's|@BINDIR@|$(PREFIX)/bin|' -e 's|@VERSION@|$(VERSION)|' mount-helpers/mount.ckptfs \
	  >$(DESTDIR)$(SBINDIR)/mount.ckptfs
	chmod 0755 $(DESTDIR)$(SBINDIR)/mount.ckptfs
	install -m 0644 $(MAN1) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(MAN8) $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 mount-helpers/bash-completion/ckptfs $(DESTDIR)$(COMPDIR)/ckptfs
	for c in $(COMP_CMDS); do ln -sf ckptfs $(DESTDIR)$(COMPDIR)/$$c || exit 1; done
	install -m 0644 $(MAPS) $(DESTDIR)$(MAPDIR)/

# Exactly the files install put there (give the same DESTDIR, PREFIX,
# SBINDIR and MANDIR); then each directory install wrote into, only if
# that left it empty and never through a link (Debian's /sbin is one).
# Never rm -r: other programs' files stay.
uninstall:
	rm -f $(INSTALLED)
	@for d in $(INSTALL_DIRS); do \
	  [ -L "$$d" ] || [ ! -d "$$d" ] || rmdir --ignore-fail-on-non-empty "$$d"; done

# The Debian package, $(BUILD)/ckptfs_VERSION_ARCH.deb (and its -dbgsym
# .deb, .buildinfo and .changes), built by dpkg-buildpackage from debian/:
# dh with `make programs` and `make install` above, so it holds whatever
# INSTALL_BINS and INSTALL_SCRIPTS list.  It compiles apart, in
# $(BUILD)/pkg, with Debian's hardening flags, and cleans up after itself.
# debian/changelog's version must be CKPTFS_VERSION: the .deb is named so.
DEB_OUT   := $(abspath $(BUILD))
DEB_VER   := $(VERSION)
DEB_PVA   := $(DEB_OUT)/ckptfs_$(DEB_VER)_$(shell dpkg --print-architecture 2>/dev/null)
deb:
	@c=$$(dpkg-parsechangelog -S Version); [ "$$c" = "$(DEB_VER)" ] || { \
	  echo "deb: debian/changelog is at $$c, codec/core/version.h at $(DEB_VER):" \
	    "add a debian/changelog entry for $(DEB_VER)" >&2; exit 1; }
	@mkdir -p $(DEB_OUT)
	CKPTFS_PKG_BUILD=$(DEB_OUT)/pkg CKPTFS_DEB_DIR=$(DEB_OUT) \
	  dpkg-buildpackage -us -uc -b --post-clean \
	  --buildinfo-option=-u$(DEB_OUT) --buildinfo-file=$(DEB_PVA).buildinfo \
	  --changes-option=-u$(DEB_OUT) --changes-file=$(DEB_PVA).changes

clean:
	rm -rf build build-asan build-tsan
