/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs main: command line, mount, daemon.
 *
 *   ckptfs [-f] [-d] [-o OPTIONS] MODEL MOUNTPOINT
 *   ckptfs [-f] [-d] [-o OPTIONS] RUN_DIR MOUNTPOINT    (mount/run_mount.h)
 *
 * The model is opened and fully indexed before anything is mounted, so a bad
 * file is refused with its one-line reason and nothing appears at the mount
 * point.  Without -f the process detaches only after the mount is live.
 * The envelopes' options (-o key_file, enc_mode, zstd_level) are handed to
 * the envelopes by name (codec/registry.h, ck_envelope_option), unread here.
 *
 * Options: ckptfs takes its own (cli_opts) and libfuse's max_read (given
 * back capped) and allow_other (noted and given back); the rest goes to
 * libfuse.  Then: refuse a MOUNTPOINT that is not a directory; take the
 * writer lock when the mount will write; open the model's directory
 * once; finish an interrupted save (ck_group_recover); open and index the
 * model through that descriptor; a directory is a collection's
 * (mount_collection, read-only) or a run's (mount_run), a file one model
 * (mount_model); the open model becomes the tree through ckfs_attach
 * (mount/mount_setup.c).  Mounted ro or rw with
 * default_permissions,subtype=ckptfs,fsname=<model>.  The command returns
 * once INIT is answered; a refused INIT leaves a dead mount, which is
 * unmounted and the command exits 1 with libfuse's reason.  SIGTERM,
 * SIGINT and SIGHUP end the loop like an unmount; the pending edits are
 * saved in destroy, with those signals held (hold_signals), and the exit
 * status is 1 only if that save failed.  Errors before mounting are
 * printed as they are; after, every refusal goes through ckfs_refused
 * (mount/log.c).
 *
 * The kernel's side of a read (mount_max_read says the rule): a READ of
 * at most max_pages (256, 1 MiB), a read-ahead window of the FUSE bdi's
 * read_ahead_kb (128 KiB by default; INIT's max_readahead can only lower
 * it, so only an administrator raises it: echo 1024 >
 * /sys/class/bdi/0:N/read_ahead_kb, N from mountpoint -d MNT), and every
 * byte copied twice, model page cache to the FUSE file's pages and those
 * to the reader.  That copy is most of the daemon's time (perf: memcpy
 * and a per-page spin lock in fuse_copy_fill, ckptfs itself under 1%), so
 * larger requests gain little: 1 MiB read-ahead is 0-19% faster than 128
 * KiB.  Only FUSE passthrough (kernel >= 6.9, libfuse >= 3.17, not Debian
 * 12's 3.14, whole files only) would take the daemon off the read path.
 */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <syslog.h>
#include <unistd.h>

#include "../codec/map/map_model.h"
#include "../codec/core/saved_index.h"
#include "../codec/open_path.h"
#include "../codec/io/commit_group.h"
#include "../save/encoder.h"
#include "../save/write_claim.h"
#include "../mount/ckptfs.h"
#include "ll_ops.h"
#include "save_reply.h"
#include "session_loop.h"
#include "../mount/recovery.h"
#include "../mount/run_mount.h"
#include "../codec/run_path.h"
#include "../mount/file_view.h"

struct cli {
    char *model;
    int nocrc;
    int nosplice;
    int rw;
    int manual;
    double commit_delay;
    int create;
    char *format;
    char *key_file;
    char *enc_mode;
    char *cache_size;
    char *spill_max;
    char *tmp_max;
    int zstd_level;
    char *log;
    int threads;
    unsigned busy_poll; /* microseconds */
    unsigned max_read;  /* -o max_read=N; UINT_MAX: not given */
    double settle;      /* a run directory's, seconds */
    int watch;          /* a run directory's: ckrun_watch */
    double poll;        /* a run directory's listings on shared storage, seconds */
    char *index_cache;  /* a run directory's, a size */
    char *strategy;     /* a distributed checkpoint's strategy file */
    int noindex;        /* -o noindex: no saved index read or written */
    char *index_dir;    /* -o index_dir=DIR: where saved indexes are kept */
    int allow_other;    /* libfuse's option, also kept for libfuse */
    char *as;           /* -o as=NAME: the model as format NAME's files (mount/file_view.h) */
    const ck_view *view; /* that format's view (check_as) */
    char *max_shard_size; /* the view's shards, a new set's (-o create) */
    char *recover;      /* -o recover=DIR: a failed save's edits, applied (mount/recovery.h) */
    char *recovery_dir; /* -o recovery_dir=DIR: where such edits are kept */
    char *map;          /* -o map=NAME|FILE: the model's names as a map gives them */
    int list_maps;      /* --maps */
    ck_map *mapping;    /* that map, loaded (check_map) */
};

enum { KEY_ALLOW_OTHER = 1 };

static const struct fuse_opt cli_opts[] = {
    {"nocrc", offsetof(struct cli, nocrc), 1},
    {"nosplice", offsetof(struct cli, nosplice), 1},
    {"rw", offsetof(struct cli, rw), 1},
    {"ro", offsetof(struct cli, rw), 0},
    {"commit=manual", offsetof(struct cli, manual), 1},
    {"commit=auto", offsetof(struct cli, manual), 0},
    {"commit_delay=%lf", offsetof(struct cli, commit_delay), 0},
    {"create", offsetof(struct cli, create), 1},
    {"format=%s", offsetof(struct cli, format), 0},
    {"key_file=%s", offsetof(struct cli, key_file), 0},
    {"enc_mode=%s", offsetof(struct cli, enc_mode), 0},
    {"cache_size=%s", offsetof(struct cli, cache_size), 0},
    {"zstd_level=%d", offsetof(struct cli, zstd_level), 0},
    {"spill_max=%s", offsetof(struct cli, spill_max), 0},
    {"log=%s", offsetof(struct cli, log), 0},
    {"tmp_max=%s", offsetof(struct cli, tmp_max), 0},
    {"threads", offsetof(struct cli, threads), 1},
    {"busy_poll=%u", offsetof(struct cli, busy_poll), 0},
    /* libfuse's own option, taken here and given back capped (mount_max_read) */
    {"max_read=%u", offsetof(struct cli, max_read), 0},
    {"settle=%lf", offsetof(struct cli, settle), 0},
    {"watch=auto", offsetof(struct cli, watch), CKRUN_WATCH_AUTO},
    {"watch=inotify", offsetof(struct cli, watch), CKRUN_WATCH_INOTIFY},
    {"watch=poll", offsetof(struct cli, watch), CKRUN_WATCH_POLL},
    {"poll=%lf", offsetof(struct cli, poll), 0},
    {"index_cache=%s", offsetof(struct cli, index_cache), 0},
    {"strategy=%s", offsetof(struct cli, strategy), 0},
    {"recover=%s", offsetof(struct cli, recover), 0},
    {"recovery_dir=%s", offsetof(struct cli, recovery_dir), 0},
    {"noindex", offsetof(struct cli, noindex), 1},
    {"index_dir=%s", offsetof(struct cli, index_dir), 0},
    {"as=%s", offsetof(struct cli, as), 0},
    {"map=%s", offsetof(struct cli, map), 0},
    {"--maps", offsetof(struct cli, list_maps), 1},
    {"max_shard_size=%s", offsetof(struct cli, max_shard_size), 0},
    FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
    FUSE_OPT_END,
};

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    (void)outargs;
    struct cli *cli = data;
    if (key == FUSE_OPT_KEY_NONOPT && cli->model == NULL) {
        cli->model = strdup(arg);
        return 0; /* consumed: the next non-option is the mount point */
    }
    if (key == KEY_ALLOW_OTHER)
        cli->allow_other = 1;
    return 1;
}

/* The formats and directories the registry knows (codec/registry.c), from
 * its tables, so that --help cannot forget one a new folder adds: each
 * format's -o format name, title and extension, then each collection. */
static void list_formats(FILE *to)
{
    const ck_format *f;
    const ck_collection *c;
    fprintf(to, "Formats (name: what, files):\n");
    for (size_t i = 0; (f = ck_format_at(i)) != NULL; i++) {
        fprintf(to, "  %-17s %s", f->name, f->title);
        const char *sep = ", ";
        if (f->extension != NULL && f->extension[0] != '\0') {
            fprintf(to, "%s*%s", sep, f->extension);
            sep = " ";
        }
        for (const char *const *e = f->also; e != NULL && *e != NULL; e++)
            fprintf(to, "%s*%s", sep, *e);
        fputc('\n', to);
    }
    fprintf(to, "Directories mounted as one model:\n");
    for (size_t i = 0; (c = ck_collection_at(i)) != NULL; i++)
        fprintf(to, "  %-17s %s%s\n", c->name, c->title,
                c->probe == NULL ? " (with -o strategy)" : "");
}

/* The formats -o create starts a model of (their creatable flag), for
 * -o format=F: "ckpt, safetensors or pytorch". */
static void list_creatable(FILE *to)
{
    const ck_format *f;
    size_t n = 0, shown = 0;
    for (size_t i = 0; (f = ck_format_at(i)) != NULL; i++)
        n += f->creatable;
    for (size_t i = 0; (f = ck_format_at(i)) != NULL; i++) {
        if (!f->creatable)
            continue;
        shown++;
        fprintf(to, "%s%s", shown == 1 ? "" : shown == n ? " or " : ", ", f->name);
    }
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: ckptfs [-f] [-d] [-o OPTIONS] MODEL MOUNTPOINT\n"
            "       ckptfs [-f] [-d] [-o OPTIONS] RUN_DIR MOUNTPOINT\n"
            "\n"
            "Mount a model (any format below; encrypted or zstd-compressed too) as a\n"
            "OneFlow-style tree:\n"
            "  MOUNTPOINT/<tensor>/meta   OneFlow VariableMetaInfo text\n"
            "  MOUNTPOINT/<tensor>/out    raw tensor bytes\n"
            "  MOUNTPOINT/snapshot_done   empty: the tree equals the file\n"
            "A directory of checkpoints (a training run's) is mounted read-only (with\n"
            "-o rw each checkpoint is edited and saved as a model is), one such tree per\n"
            "complete checkpoint, and followed as the run writes:\n"
            "  MOUNTPOINT/<checkpoint>/   its file's name without the extension\n"
            "  MOUNTPOINT/latest          symbolic link to the newest\n"
            "With -o strategy=FILE, a directory of rank_<id>/ checkpoints (a distributed\n"
            "one) is mounted read-only as the one model FILE says they were cut from;\n"
            "a MindSpore Transformers iteration_<N>/ directory, as the one model of\n"
            "all its shard files; a OneFlow snapshot directory, as its model.  A Hugging\n"
            "Face model folder (config.json beside model.safetensors, its .index.json or\n"
            "pytorch_model.bin, taken in that order) is mounted as that file, writable as\n"
            "it is.\n"
            "\n");
    list_formats(to);
    fprintf(to,
            "\n"
            "ckptfs options:\n"
            "    -o ro              read-only\n"
            "    -o rw              writable (the default when MODEL's owner may write it):\n"
            "                       edits to meta and out are saved into MODEL on\n"
            "                       touch snapshot_done, fsync, unmount, and on their own\n"
            "    -o commit_delay=S  save S seconds after the last file written is closed\n"
            "                       (default 1)\n"
            "    -o commit=manual   no automatic save (-o commit=auto: the default)\n"
            "    -o recovery_dir=DIR  where the edits are kept when the save at unmount\n"
            "                       fails (default: beside MODEL; an encrypted model's\n"
            "                       only here): MODEL.recovery-<time>-<id>/\n"
            "    -o recover=DIR     apply the edits kept in DIR (with -o rw) before\n"
            "                       serving; they are then saved as any edit isn"
            "    -o create          MODEL may not exist yet: mount an empty model, the\n"
            "                       first save creates the file\n"
            "    -o format=F        the format of a model to create, one of\n"
            "                       ");
    list_creatable(to);
    fprintf(to,
            "\n"
            "                       (default: by extension)\n"
            "    -o key_file=PATH   the AES key of an encrypted model: 16, 24 or 32 raw bytes\n"
            "                       in a regular file of yours (no link) that only you may\n"
            "                       read or write (or the key in hex in the environment\n"
            "                       variable CKPTFS_KEY_HEX)\n"
            "    -o enc_mode=MODE   AES-GCM or AES-CBC: encrypt a plain model on save\n"
            "                       (an encrypted one keeps its own mode)\n"
            "    -o cache_size=N    memory for decrypted or decompressed pages, in bytes\n"
            "                       or with K, M, G (default 16M; at most 256 pages: 1M\n"
            "                       decrypted, 2M of zstd frames each)\n"
            "    -o zstd_level=N    the level a compressed model is saved with (default 3)\n"
            "    -o tmp_max=N       the most a zstd model without a seek table may\n"
            "                       decompress to in $TMPDIR (default 64 times its\n"
            "                       compressed size, at least 256M)\n"
            "    -o spill_max=N     edits of an encrypted model are kept in memory, never\n"
            "                       on disk: at most N bytes (default a quarter of the RAM)\n"
            "    -o nocrc           do not verify a CRC-32 trailer (saves reading the file)\n"
            "    -o nosplice        copy tensor bytes instead of splicing them\n"
            "    -o max_read=N      the largest read request (default and most: what fits\n"
            "                       the splice pipe, pipe-max-size less 32K)\n"
            "    -o log=PATH        also append the reason of every refused operation to\n"
            "                       PATH, with the time\n"
            "    -o threads         answer requests on several threads (libfuse's pool;\n"
            "                       -o clone_fd and max_idle_threads apply); one is the\n"
            "                       default, faster on few cores\n"
            "    -o busy_poll=US    after a request, look for the next one for US\n"
            "                       microseconds before sleeping (default 100; 0: sleep\n"
            "                       at once): walks cost half the wakeups\n"
            "    -o settle=S        a run directory's files still writable count as\n"
            "                       complete after S seconds unchanged (default 5;\n"
            "                       read-only files, as MindSpore leaves them, at once)\n"
            "    -o poll=S          list a run directory again every S seconds (default\n"
            "                       2) where inotify cannot see other machines' writes\n"
            "                       (NFS, SMB, Lustre, GPFS, CephFS, 9p, any FUSE: s3fs,\n"
            "                       sshfs...); its new files are then judged by settle\n"
            "                       time alone, whatever their mode\n"
            "    -o watch=MODE      how a run directory is followed: poll (wherever it\n"
            "                       is), inotify (never poll: no other machine writes\n"
            "                       there) or auto (the default: by the storage)\n"
            "    -o index_cache=N   memory for a run directory's open checkpoint indexes\n"
            "                       (default 32M): the least recently used are closed\n"
            "    -o strategy=FILE   MindSpore's parallel strategy file: MODEL, a directory\n"
            "                       of rank_<id>/ checkpoints, is shown merged\n"
            "    -o index_dir=DIR   where a .ckpt's index is saved after a full read, so\n"
            "                       that the next mount reads only its first 4K (default\n"
            "                       $XDG_CACHE_HOME/ckptfs, else ~/.cache/ckptfs)\n"
            "    -o noindex         neither read nor save an index\n"
            "    -o as=safetensors  show the model, read-only, as one file instead of the\n"
            "                       tree: MOUNTPOINT/model.safetensors, the bytes\n"
            "                       ckptfs-convert MODEL x.safetensors would write\n"
            "    -o map=MAP         the model's names as the map gives them, read-only:\n"
            "                       MAP a shipped map's name (--maps) or a map file\n"
            "    -o max_shard_size=SIZE  with as=safetensors: a Hugging Face sharded set\n"
            "                       when the model needs more than one shard of SIZE\n"
            "                       (model.safetensors.index.json, model-00001-of-...);\n"
            "                       with -o create: a new set's shards (default 5GB)\n"
            "    -f                 stay in the foreground\n"
            "    -d                 debug output (implies -f)\n"
            "    --maps             list the shipped maps (-o map=NAME): name, whether it\n"
            "                       has a reverse, where its rules come from, its file\n"
            "    --help, --version\n"
            "\n");
}

static void index_warning(const char *msg)
{
    fprintf(stderr, "ckptfs: warning: %s\n", msg);
}

/* Where saved indexes are kept (codec/core/saved_index.h), into store,
 * dir the buffer behind it; store->dir stays NULL with -o noindex or
 * without a default place. */
static void index_options(const struct cli *cli, ck_index_store *store, char *dir, size_t cap)
{
    *store = (ck_index_store){.warn = index_warning};
    if (cli->noindex)
        return;
    if (cli->index_dir == NULL) {
        if (ck_saved_index_default_dir(dir, cap) == 0)
            store->dir = dir;
        return;
    }
    /* The daemon changes directory to /. */
    char cwd[PATH_MAX];
    int n = cli->index_dir[0] == '/' || getcwd(cwd, sizeof cwd) == NULL
                ? snprintf(dir, cap, "%s", cli->index_dir)
                : snprintf(dir, cap, "%s/%s", cwd, cli->index_dir);
    if (n > 0 && (size_t)n < cap)
        store->dir = dir;
}

/* The options an envelope has, handed to the envelopes by name
 * (ck_envelope_option) without this file knowing what they mean. */
static int envelope_option(const char *name, const char *value, ck_envelope_args *ea)
{
    ck_error err = {0};
    if (value != NULL && ck_envelope_option(name, value, ea, &err) < 0) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* The open options of the mount's sizes, and the envelopes' options into ea
 * (oo->envelope: what -o key_file names is read last, as the envelopes
 * say). */
static int envelope_options(const struct cli *cli, ck_open_opts *oo, ck_envelope_args *ea)
{
    ck_error err = {0};
    if (cli->cache_size != NULL && ck_parse_size(cli->cache_size, &oo->cache_size) < 0) {
        fprintf(stderr, "ckptfs: -o cache_size=%s: give a size in bytes, or with K, M or G\n",
                cli->cache_size);
        return -1;
    }
    /* The envelopes' save options, read by the envelope that has each. */
    char level[16];
    snprintf(level, sizeof level, "%d", cli->zstd_level);
    if (envelope_option("zstd_level", cli->zstd_level != 0 ? level : NULL, ea) < 0 ||
        envelope_option("enc_mode", cli->enc_mode, ea) < 0)
        return -1;
    size_t tmp_max = 0;
    if (cli->tmp_max != NULL && ck_parse_size(cli->tmp_max, &tmp_max) < 0) {
        fprintf(stderr, "ckptfs: -o tmp_max=%s: give a size in bytes, or with K, M or G\n",
                cli->tmp_max);
        return -1;
    }
    oo->tmp_max = tmp_max;
    size_t shard = 0;
    if (cli->max_shard_size != NULL && ck_parse_size(cli->max_shard_size, &shard) < 0) {
        fprintf(stderr, "ckptfs: -o max_shard_size=%s: give a size in bytes, or with KB, MB, "
                "GB (decimal) or K, M, G (binary)\n", cli->max_shard_size);
        return -1;
    }
    oo->max_shard_size = shard;
    if (envelope_option("key_file", cli->key_file, ea) < 0)
        return -1;
    if (ck_envelope_args_ready(ea, &err) < 0) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        return -1;
    }
    oo->envelope = ea;
    return 0;
}

/* realpath() of a path whose last component may not exist yet (-o create). */
static char *absolute_path(const char *path)
{
    char *abs = realpath(path, NULL);
    if (abs != NULL)
        return abs;
    char *copy = strdup(path), *slash = copy ? strrchr(copy, '/') : NULL;
    if (copy == NULL)
        return NULL;
    const char *base = slash ? slash + 1 : copy;
    char *dir = slash ? (slash == copy ? "/" : (*slash = '\0', copy)) : ".";
    char *absdir = realpath(dir, NULL);
    char *out = NULL;
    if (absdir != NULL && asprintf(&out, "%s/%s", strcmp(absdir, "/") ? absdir : "", base) < 0)
        out = NULL;
    free(absdir);
    free(copy);
    return out;
}

/* -o log=PATH, opened before daemonizing (which changes directory to /).
 * Appended to; never through a symlink, which another user could have
 * pointed at a file of ours; a regular file, so that a FIFO put there
 * cannot hold the mount in its open. */
static int open_log(const char *path)
{
    struct stat st;
    int fd = ck_open_regular(AT_FDCWD, path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0600,
                             &st);
    if (fd < 0 && st.st_mode != 0)
        fprintf(stderr, "ckptfs: -o log=%s: is %s, not a regular file\n", path,
                ck_file_kind(st.st_mode));
    else if (fd < 0)
        fprintf(stderr, "ckptfs: -o log=%s: %s\n", path, strerror(errno));
    return fd;
}

/* The largest read request whose reply still fits libfuse's splice pipe.
 * libfuse splices a reply only when the pipe holds a page per buffer, one
 * for the header and one more, plus the data; a pipe may grow to
 * /proc/sys/fs/pipe-max-size (1 MiB by default; root may go past it, other
 * users may not).  A larger reply is copied through the daemon instead,
 * which made 1 MiB read-ahead 1.9x slower than 128 KiB (docs/benchmarks.md).
 * The kernel then never asks for more: it cuts read-ahead into requests of
 * at most max_read.  8 pages of slack cover replies of up to 5 extents. */
static unsigned mount_max_read(unsigned asked)
{
    unsigned long pipe_max = 1UL << 20;
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "re");
    if (f != NULL) {
        if (fscanf(f, "%lu", &pipe_max) != 1)
            pipe_max = 1UL << 20;
        fclose(f);
    }
    unsigned long slack = 8UL * 4096, cap = pipe_max > 2 * slack ? pipe_max - slack : slack;
    if (cap > 1UL << 30)
        cap = 1UL << 30;
    return asked < cap ? asked : (unsigned)cap;
}

/* Mount options every ckptfs mount gets. */
static int add_mount_opts(struct fuse_args *args, const char *model, bool rw, unsigned max_read)
{
    char *opts = NULL;
    char fsname[PATH_MAX + 16], mr[32];
    snprintf(fsname, sizeof fsname, "fsname=%s", model);
    snprintf(mr, sizeof mr, "max_read=%u", max_read);
    if (fuse_opt_add_opt(&opts, rw ? "rw" : "ro") < 0 ||
        fuse_opt_add_opt(&opts, mr) < 0 ||
        fuse_opt_add_opt(&opts, "default_permissions") < 0 ||
        fuse_opt_add_opt(&opts, "subtype=ckptfs") < 0 ||
        fuse_opt_add_opt_escaped(&opts, fsname) < 0)
        return -1;
    int rc = (fuse_opt_add_arg(args, "-o") < 0 || fuse_opt_add_arg(args, opts) < 0) ? -1 : 0;
    free(opts);
    return rc;
}

/* Requests on one thread, or on libfuse's pool (-o threads; -s wins).
 * One measured faster on 2 cores (docs/benchmarks.md): a request costs
 * a wakeup either way, and the pool adds its own; the one thread polls
 * before it sleeps (fuse/session_loop.c). */
static int run_loop(struct fuse_session *se, const struct fuse_cmdline_opts *opts,
                    const struct cli *cli, const ckfs_idle_work *work)
{
    if (!cli->threads || opts->singlethread)
        return ckfs_session_loop(se, cli->busy_poll, work);
    struct fuse_loop_config cfg = {.clone_fd = opts->clone_fd,
                                   .max_idle_threads = opts->max_idle_threads};
    return fuse_session_loop_mt(se, &cfg);
}

/* libfuse's error lines while the INIT is answered, kept for the one-line
 * reason; other lines go to stderr as libfuse's own logger writes them. */
static char init_error[512];

static void init_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
    if (level > FUSE_LOG_ERR) {
        vfprintf(stderr, fmt, ap);
        return;
    }
    vsnprintf(init_error, sizeof init_error, fmt, ap);
    init_error[strcspn(init_error, "\n")] = '\0';
}

/* Answer the kernel's INIT, the first request of every mount, before
 * detaching: libfuse refuses it when what op_init asked for does not hold
 * (a capability the kernel lacks, a max_read other than the mount's), and
 * the mount is then dead.  Say so in one line and fail, rather than
 * return 0 with a mount that answers nothing. */
static int answer_init(struct fuse_session *se, const char *model_path)
{
    struct fuse_buf buf = {0};
    int res;
    init_error[0] = '\0';
    fuse_set_log_func(init_log);
    do
        res = fuse_session_receive_buf(se, &buf);
    while (res == -EINTR && !fuse_session_exited(se));
    if (res > 0)
        fuse_session_process_buf(se, &buf);
    fuse_set_log_func(NULL); /* libfuse's own logger again */
    free(buf.mem);
    if (res > 0 && !fuse_session_exited(se)) {
        if (init_error[0]) /* a warning, the INIT went through */
            fprintf(stderr, "%s\n", init_error);
        return 0;
    }
    const char *why = init_error[0] ? init_error : res < 0 ? strerror(-res) : "the session ended";
    if (strncmp(why, "fuse: ", 6) == 0)
        why += 6;
    if (strncmp(why, "error: ", 7) == 0)
        why += 7;
    fprintf(stderr, "ckptfs: %s: the kernel's FUSE INIT failed, nothing is mounted: %s\n",
            model_path, why);
    return -1;
}

/* What differs between serving one model and a run directory: what
 * starts once the mount is live and the daemon detached, and what stops
 * when the loop ends, before the session goes. */
typedef struct mount_hooks {
    const char *model_path;     /* for messages */
    int (*live)(void *arg, struct fuse_session *se, bool daemonized);
    void (*ended)(void *arg, int loop);
    void *arg;
    const ckfs_idle_work *work; /* the request thread's, between requests (NULL: none) */
} mount_hooks;

/* A second Ctrl-C (or SIGTERM, SIGHUP) while the last save runs: the
 * save goes on, so that it ends with the new model or, failing, the edits
 * kept (mount/recovery.h), never with a half-written temporary file and the
 * edits gone.  kill -9 still ends it; the model is then the old one. */
static void during_last_save(int sig)
{
    static const char msg[] = "ckptfs: still saving; the edits are saved, or kept if the save "
                              "fails (kill -9 abandons them, the model stays as it was)\n";
    (void)sig;
    ssize_t unused = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)unused;
}

static void hold_signals(bool hold)
{
    struct sigaction sa = {.sa_handler = hold ? during_last_save : SIG_DFL};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static int serve(struct fuse_session *se, struct fuse_cmdline_opts *opts,
                 const struct cli *cli, const mount_hooks *h)
{
    int rc = 1;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_destroy;
    if (fuse_session_mount(se, opts->mountpoint) != 0)
        goto out_signals;
    if (answer_init(se, h->model_path) < 0)
        goto out_unmount;
    /* The mount is live: only now detach, so the caller can use the tree as
     * soon as we return.  Threads do not survive the fork: they start after
     * it.  A signal (SIGTERM, SIGINT, SIGHUP) ends the loop like an unmount. */
    if (fuse_daemonize(opts->foreground) != 0)
        goto out_unmount;
    if (!opts->foreground)
        openlog("ckptfs", LOG_PID, LOG_DAEMON);
    if (h->live(h->arg, se, !opts->foreground) != 0)
        goto out_unmount;
    int loop = run_loop(se, opts, cli, h->work);
    h->ended(h->arg, loop);
    rc = loop < 0 ? 1 : 0;
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_destroy:
    hold_signals(true);
    fuse_session_destroy(se); /* runs destroy: a model's final save */
    ckfs_save_handles_free(); /* RELEASEs still queued at the unmount */
    hold_signals(false);
    return rc;
}

/* One model: the saver, and the writer lock's note of the daemon. */
typedef struct model_mount {
    ckfs *fs;
    ck_writer_lock *lock;
    const char *where;
} model_mount;

static int model_live(void *arg, struct fuse_session *se, bool daemonized)
{
    model_mount *m = arg;
    (void)se;
    if (daemonized) {
        ck_writer_lock_note(m->lock, getpid(), m->where); /* the daemon's pid, not the parent's */
        m->fs->use_syslog = true;
    }
    return ckfs_saver_start(m->fs);
}

static void model_ended(void *arg, int loop)
{
    ckfs *fs = ((model_mount *)arg)->fs;
    ckfs_saver_unmounting(fs); /* not under the lock: the saver may need it to answer */
    pthread_rwlock_wrlock(&fs->lock);
    fs->se = NULL; /* unmounting: nothing left to invalidate */
    pthread_rwlock_unlock(&fs->lock);
    if (loop < 0)
        ckfs_log(fs, LOG_ERR, "%s: session loop failed: %s", fs->tr.model->path,
                 strerror(-loop));
}

#define SHORT_USAGE "usage: ckptfs [-f] [-d] [-o OPTIONS] MODEL MOUNTPOINT (try --help)"

/* libfuse's session, or NULL when it refused its options: it has named the
 * unknown one (it reads them only now, after the model was opened), and
 * the usage hint follows, as for any bad option. */
static struct fuse_session *new_session(struct fuse_args *args,
                                        const struct fuse_lowlevel_ops *ops, size_t size,
                                        void *data)
{
    struct fuse_session *se = fuse_session_new(args, ops, size, data);
    if (se == NULL)
        fprintf(stderr, SHORT_USAGE "\n");
    return se;
}

static int serve_model(ckfs *fs, struct fuse_args *args, struct fuse_cmdline_opts *opts,
                       const struct cli *cli, ck_writer_lock *lock, const char *where)
{
    struct fuse_session *se = new_session(args, &ckfs_ops, sizeof ckfs_ops, &fs->front);
    if (se == NULL) /* said: an option libfuse does not know, a usage error */
        return 2;
    fs->se = se;
    model_mount m = {.fs = fs, .lock = lock, .where = where};
    mount_hooks h = {.model_path = fs->tr.model->path, .live = model_live,
                     .ended = model_ended, .arg = &m};
    int rc = serve(se, opts, cli, &h);
    return fs->final_commit_failed ? 1 : rc;
}

static int run_live(void *arg, struct fuse_session *se, bool daemonized)
{
    return ckrun_start(arg, se, daemonized);
}

static void run_ended(void *arg, int loop)
{
    (void)loop; /* said by libfuse */
    ckrun_stop(arg);
}

/* Descriptors a run's open checkpoints may hold: half of what is left of
 * the limit, the rest for libfuse, the watcher and the splice pipes. */
static unsigned fd_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return 4096;
    rlim_t left = rl.rlim_cur > 64 ? rl.rlim_cur - 64 : 0;
    return left / 2 > 16 ? (unsigned)(left / 2 > 1u << 20 ? 1u << 20 : left / 2) : 16;
}

/* A run directory: its checkpoints as snapshots, read-only unless -o rw
 * (mount/run_mount.h). */
static int mount_run(const struct cli *cli, struct fuse_args *args,
                     struct fuse_cmdline_opts *opts, const char *path, const ck_open_opts *oo)
{
    if (cli->create) {
        fprintf(stderr, "ckptfs: %s: -o create is for one model, not a run directory\n", path);
        return 1;
    }
    if (cli->as != NULL) {
        fprintf(stderr, "ckptfs: %s: -o as=%s shows one model, not a run directory "
                "(mount one of its checkpoints)\n", path, cli->as);
        return 1;
    }
    if (cli->mapping != NULL) {
        fprintf(stderr, "ckptfs: %s: -o map=%s maps one model, not a run directory (mount "
                "one of its checkpoints)\n", path, cli->map);
        return 1;
    }
    if (cli->threads) {
        fprintf(stderr, "ckptfs: %s: a run directory is served on one thread (-o threads is "
                "for one model)\n", path);
        return 1;
    }
    if (!(cli->settle >= 0 && cli->settle <= 1e9)) {
        fprintf(stderr, "ckptfs: -o settle=%g: give a number of seconds, 0 or more\n",
                cli->settle);
        return 1;
    }
    if (!(cli->poll >= 0.1 && cli->poll <= 86400)) {
        fprintf(stderr, "ckptfs: -o poll=%g: give a number of seconds, from 0.1 to 86400\n",
                cli->poll);
        return 1;
    }
    /* Read-only unless asked: training saves its checkpoints 0400, and a
     * run being followed is another program's to write. */
    bool rw = cli->rw == 1;
    ckfs proto = {.timeout = 86400.0, .splice = !cli->nosplice, .mountpoint = opts->mountpoint,
                  .commit_delay = rw && !cli->manual ? cli->commit_delay : -1, .log_fd = -1,
                  .session_rw = rw, .others_read = cli->allow_other};
    ckfs_front_init(&proto);
    char *where = rw ? realpath(opts->mountpoint, NULL) : NULL;
    ckrun_opts ro = {.path = path, .mountpoint = opts->mountpoint, .settle = cli->settle,
                     .watch = (ckrun_watch)cli->watch, .poll = cli->poll,
                     .index_cache = 32u << 20, .max_fds = fd_budget(), .open_opts = *oo,
                     .proto = &proto, .writable = rw, .where = where};
    if (cli->index_cache != NULL && ck_parse_size(cli->index_cache, &ro.index_cache) < 0) {
        fprintf(stderr, "ckptfs: -o index_cache=%s: give a size in bytes, or with K, M or G\n",
                cli->index_cache);
        free(where);
        return 1;
    }
    if (cli->spill_max != NULL && ck_parse_size(cli->spill_max, &ro.spill_max) < 0) {
        fprintf(stderr, "ckptfs: -o spill_max=%s: give a size in bytes, or with K, M or G\n",
                cli->spill_max);
        free(where);
        return 1;
    }
    if (cli->log != NULL && (proto.log_fd = open_log(cli->log)) < 0) {
        free(where);
        return 1;
    }
    proto.max_read = mount_max_read(cli->max_read);
    ck_error err = {0};
    int rc = 1;
    ckrun *r = ckrun_new(&ro, &err);
    if (r == NULL) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
    } else if (add_mount_opts(args, path, rw, proto.max_read) < 0) {
        fprintf(stderr, "ckptfs: out of memory\n");
    } else {
        struct fuse_session *se = new_session(args, &ckfs_ops, sizeof ckfs_ops, ckrun_front(r));
        ckfs_idle_work work;
        ckrun_idle_work(r, &work);
        mount_hooks h = {.model_path = path, .live = run_live, .ended = run_ended, .arg = r,
                         .work = &work};
        rc = se != NULL ? serve(se, opts, cli, &h) : 2; /* as in serve_model */
        /* The last saves, once unmounted (as a model mount's destroy). */
        if (ckrun_close_all(r) < 0)
            rc = 1;
    }
    ckrun_free(r);
    free(where);
    if (proto.log_fd >= 0)
        close(proto.log_fd);
    return rc;
}

/* -o recover=DIR: the edits a failed save kept, made again in the tree
 * before it is served; they are then saved as the user's own would be
 * (commit_delay after the mount, touch snapshot_done, unmount). */
static int apply_recovery(ckfs *fs, const char *dir)
{
    ck_error err = {0};
    if (recovery_apply(&fs->tr, dir, &err) < 0) {
        fprintf(stderr, "ckptfs: %s; nothing is mounted, the model and %s are as they were\n",
                err.msg, dir);
        return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &fs->last_edit);
    fprintf(stderr, "ckptfs: %s: the edits kept in %s are applied; remove it once they are "
            "saved\n", fs->tr.model->path, dir);
    return 0;
}

/* Serve an open model (which this takes) until it is unmounted.  lock:
 * the writer lock, held when rw. */
static int serve_opened(ck_model *model, bool rw, const struct cli *cli, struct fuse_args *args,
                        struct fuse_cmdline_opts *opts, const ck_open_opts *oo,
                        ck_writer_lock *lock, const char *where, const char *path)
{
    ckfs fs = {.timeout = 86400.0, .splice = !cli->nosplice, .mountpoint = opts->mountpoint,
               .commit_delay = cli->manual ? -1 : cli->commit_delay, .log_fd = -1,
               .tell_renames = true, .session_rw = rw, .others_read = cli->allow_other};
    ckfs_front_init(&fs);
    ck_error err = {0};
    size_t spill_max = 0;
    int rc = 1;
    /* The daemon's working directory is / once detached. */
    char *recovery_dir = cli->recovery_dir ? realpath(cli->recovery_dir, NULL) : NULL;
    fs.recovery_dir = recovery_dir;
    if (cli->recovery_dir != NULL && recovery_dir == NULL) {
        fprintf(stderr, "ckptfs: -o recovery_dir=%s: %s\n", cli->recovery_dir, strerror(errno));
        ck_model_close(model);
    } else if (cli->log != NULL && (fs.log_fd = open_log(cli->log)) < 0) {
        ck_model_close(model);
    } else if (cli->spill_max != NULL && ck_parse_size(cli->spill_max, &spill_max) < 0) {
        fprintf(stderr, "ckptfs: -o spill_max=%s: give a size in bytes, or with K, M or G\n",
                cli->spill_max);
        ck_model_close(model);
    } else if (ckfs_attach(&fs, model, oo, rw, spill_max, &err) < 0) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        ck_model_close(model);
    } else if (cli->view != NULL &&
               (fs.view = ckfs_view_new(model, cli->view,
                                        &(ck_view_opts){.in = path,
                                                        .max_shard = oo->max_shard_size},
                                        &err)) == NULL) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        ckfs_detach(&fs);
    } else if (cli->recover != NULL && apply_recovery(&fs, cli->recover) < 0) {
        ckfs_detach(&fs);
    } else {
        fs.max_read = mount_max_read(cli->max_read);
        if (add_mount_opts(args, path, rw, fs.max_read) < 0)
            fprintf(stderr, "ckptfs: out of memory\n");
        else
            rc = serve_model(&fs, args, opts, cli, lock, where);
        /* The last save is done (in serve): a mount waiting for the model
         * goes on while this one tears down (closing its inotify instance
         * waits for an RCU grace period). */
        ck_writer_lock_release(lock);
        ckfs_detach(&fs);
    }
    if (fs.log_fd >= 0)
        close(fs.log_fd);
    free(recovery_dir);
    return rc;
}

/* The options of the open a person waits on at the mount command: that
 * open's progress bar (a non-seekable .zst decompressed) on stderr when it
 * is a terminal.  The mount has no -q; it opens before it detaches (serve),
 * so the bar is drawn and cleared before the command returns.  The options
 * the mount keeps (the tree's reopens after a save, a run directory's
 * checkpoints, opened later by the daemon) draw none. */
static ck_open_opts with_bar(const ck_open_opts *oo)
{
    ck_open_opts first = *oo;
    first.progress = isatty(STDERR_FILENO) ? stderr : NULL;
    return first;
}

/* model under -o map='s names (none: as it is); NULL with err, model
 * closed, when the map refuses its names. */
static ck_model *mapped(const struct cli *cli, ck_model *model, ck_error *err)
{
    if (model == NULL || cli->mapping == NULL || ck_map_model(model, cli->mapping, err) == 0)
        return model;
    ck_model_close(model);
    return NULL;
}

/* A collection, read-only: a directory that opens as one model (a
 * distributed checkpoint merged by its strategy file, an iteration
 * directory, a snapshot directory: codec/registry.h). */
static int mount_collection(const struct cli *cli, struct fuse_args *args,
                            struct fuse_cmdline_opts *opts, const char *path,
                            const ck_open_opts *oo, const ck_collection *c)
{
    if (cli->rw == 1 || cli->create) {
        fprintf(stderr, "ckptfs: %s: %s is mounted read-only (-o rw and -o create are for one "
                "model)\n", path, c->title);
        return 1;
    }
    ck_error err = {0};
    ck_collection_opts co = {.open = with_bar(oo), .strategy = cli->strategy, .watch = true};
    ck_model *model = mapped(cli, c->open(path, &co, &err), &err);
    if (model == NULL) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        return 1;
    }
    ck_writer_lock none = {.fd = -1};
    return serve_opened(model, false, cli, args, opts, oo, &none, opts->mountpoint, path);
}

/* A model mounted read-only without -o ro: a person at a terminal is
 * told so, and why, before a write fails with EROFS and nothing more
 * (scripts and logs are not: it is the documented default). */
static void say_read_only(const ck_model *model, const char *why)
{
    if (!isatty(STDERR_FILENO))
        return;
    if (why != NULL)
        fprintf(stderr, "ckptfs: %s: mounted read-only: %s\n", model->path, why);
    else
        fprintf(stderr, "ckptfs: %s: mounted read-only: its owner may not write it (mode "
                "%04o); -o rw mounts it writable\n", model->path,
                (unsigned)(model->st.st_mode & 07777));
}

/* Whether the mount will write the model, as far as can be told before
 * opening it (-o rw, the owner's write bit, a model to create): the lock
 * is taken before anything is written beside the model. */
static bool wants_writing(const struct cli *cli, const char *path)
{
    struct stat st;
    if (cli->rw != -1)
        return cli->rw == 1;
    if (stat(path, &st) < 0)
        return errno == ENOENT && cli->create;
    return (st.st_mode & S_IWUSR) != 0;
}

/* Claim the model's files when the mount will write (save/write_claim.h:
 * its directory, the writer lock, a cut-short save finished).  A mount
 * writable only by default (the owner's write bit) in a directory that
 * cannot hold the lock, on a read-only filesystem say, could never save
 * either: it is mounted read-only, as it would have been without the
 * write bit. */
static int take_claim(struct cli *cli, const char *path, const char *where,
                      ck_write_claim *claim)
{
    ck_error err = {0};
    if (!wants_writing(cli, path) || ck_write_claim_take(claim, path, where, &err) == 0)
        return 0;
    if (cli->rw == -1 && err.errnum == ENOTSUP) { /* storage with no rename */
        fprintf(stderr, "ckptfs: %s; mounted read-only\n", err.msg);
        cli->rw = 0;
        return 0;
    }
    if (cli->rw == -1 && access(path, F_OK) == 0 &&
        (err.errnum == EROFS || err.errnum == EACCES)) {
        fprintf(stderr, "ckptfs: %s: its directory is not writable (%s), so a save could not "
                "replace it: mounted read-only\n", path, strerror(err.errnum));
        cli->rw = 0;
        return 0;
    }
    fprintf(stderr, "ckptfs: %s\n", err.msg);
    return -1;
}

/* Open the model file path for a mount: its directory opened once, before
 * mounting (every file access of the mount goes through it, and the mount
 * point may be that very directory; a writable mount's is its claim's),
 * another program's write told from a touch, a save of several files that
 * a crash interrupted after its commit point finished first (by the
 * claim; a read-only mount changes nothing and says how to finish it),
 * created empty with -o create.  NULL: said. */
static ck_model *open_model(struct cli *cli, const char *path, const ck_write_claim *claim,
                            const ck_open_opts *oo)
{
    ck_open_opts first = with_bar(oo);
    oo = &first;
    ck_error err = {0};
    ck_model_dir *dir = claim->dir != NULL ? ck_dir_ref(claim->dir) : ck_dir_open(path, &err);
    if (dir == NULL) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        return NULL;
    }
    ck_dir_watch_files(dir);
    struct stat st;
    ck_model *model = NULL;
    if (claim->dir != NULL || ck_group_recover(dir, true, &err) >= 0)
        model = cli->create && ck_dir_stat(dir, dir->base, &st) < 0 && errno == ENOENT
                    ? ck_model_empty(dir, path, cli->format, oo, &err)
                    : ck_model_open_at(dir, path, oo, &err);
    ck_dir_unref(dir); /* the model holds it */
    model = mapped(cli, model, &err);
    if (model == NULL)
        fprintf(stderr, "ckptfs: %s\n", err.msg);
    else if (model->n_sources == 0)
        cli->rw = 1; /* a model to create is written, whatever its mode says */
    return model;
}

/* One model file: writable by the owner's write bit or -o rw, then under
 * its writer lock. */
static int mount_model(struct cli *cli, struct fuse_args *args, struct fuse_cmdline_opts *opts,
                       const char *path, const ck_open_opts *oo)
{
    /* One writer per model: a second writable mount would undo the first's
     * saves, and remove its temporary files as leftovers. */
    char *where = realpath(opts->mountpoint, NULL);
    const char *at = where ? where : opts->mountpoint;
    ck_write_claim claim = CK_WRITE_CLAIM_NONE;
    ck_error err = {0};
    int rc = 1;
    ck_model *model = take_claim(cli, path, at, &claim) == 0 ? open_model(cli, path, &claim, oo)
                                                             : NULL;
    /* The lock goes with the mount (serve_opened); the model holds the directory. */
    ck_writer_lock lock = claim.lock;
    claim.lock.fd = -1;
    ck_write_claim_release(&claim);
    bool savable = model != NULL && ck_model_may_save(model, &err) == 0;
    /* Training saves checkpoints 0400: such a file is not edited unless
     * asked for. */
    bool rw = model != NULL &&
              (cli->rw == -1 ? (model->st.st_mode & S_IWUSR) != 0 && savable : cli->rw);
    if (model == NULL) {
        /* said */
    } else if (!savable && cli->rw == 1) {
        fprintf(stderr, "ckptfs: %s: mount it without -o rw\n", err.msg);
        ck_model_close(model);
    } else if (rw && lock.fd < 0 && ck_writer_lock_take(&lock, path, at, &err) < 0) {
        fprintf(stderr, "ckptfs: %s\n", err.msg); /* made writable since the stat */
        ck_model_close(model);
    } else {
        if (!rw)
            ck_writer_lock_release(&lock); /* a read-only mount holds nothing */
        if (!rw && cli->rw == -1)
            say_read_only(model, savable ? NULL : err.msg);
        rc = serve_opened(model, rw, cli, args, opts, oo, &lock, at, path);
    }
    ck_writer_lock_release(&lock); /* if not released above */
    free(where);
    return rc;
}

/* The view -o as=name asks for: that of the format called name; else NULL,
 * refused in one line naming the formats that have one. */
static const ck_view *view_named(const char *name)
{
    const ck_format *named = ck_format_by_name(name);
    if (named != NULL && ck_format_view(named) != NULL)
        return ck_format_view(named);
    char list[256] = "";
    size_t n = 0;
    const ck_format *f;
    for (size_t i = 0; (f = ck_format_at(i)) != NULL; i++)
        if (ck_format_view(f) != NULL && n < sizeof list)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n > 0 ? ", " : "", f->name);
    fprintf(stderr, "ckptfs: -o as=%s: %s; the formats with a view: %s\n", name,
            named != NULL ? "that format has no view" : "no format is called that", list);
    return NULL;
}

/* -o as=NAME: files made from the model, which no edit can reach, so the
 * mount is read-only. */
static int check_as(struct cli *cli)
{
    if (cli->max_shard_size != NULL && cli->as == NULL && !cli->create) {
        fprintf(stderr, "ckptfs: -o max_shard_size cuts the shards of -o as=safetensors, or "
                "of a sharded set made with -o create\n");
        return -1;
    }
    if (cli->as == NULL)
        return 0;
    if ((cli->view = view_named(cli->as)) == NULL)
        return -1;
    if (cli->rw == 1 || cli->create) {
        fprintf(stderr, "ckptfs: -o as=%s is read-only: -o %s does not go with it\n", cli->as,
                cli->create ? "create" : "rw");
        return -1;
    }
    cli->rw = 0;
    return 0;
}

/* -o map=: the map loaded before anything is mounted, so that a bad one
 * is refused at once, naming its line.  A mapped model is read-only (its
 * names are the map's): -o create has no model to map. */
static int check_map(struct cli *cli)
{
    if (cli->map == NULL)
        return 0;
    if (cli->create) {
        fprintf(stderr, "ckptfs: -o map=%s maps a model's names: -o create has none\n",
                cli->map);
        return -1;
    }
    ck_error err = {0};
    if ((cli->mapping = ck_map_load(cli->map, &err)) == NULL) {
        fprintf(stderr, "ckptfs: -o map=%s: %s\n", cli->map, err.msg);
        return -1;
    }
    return 0;
}

/* Whether the real path mnt is dir or inside it (both real paths). */
static bool path_within(const char *mnt, const char *dir)
{
    size_t n = strlen(dir);
    if (strcmp(dir, "/") == 0)
        return true;
    return strncmp(mnt, dir, n) == 0 && (mnt[n] == '\0' || mnt[n] == '/');
}

/* A run directory mounted on itself or on a directory inside it: the
 * mount would hide the run it follows (or be listed in it as a new
 * checkpoint directory, its own tree inside its tree).  Refused, naming
 * both, before anything is mounted; real paths, so that no link or ".."
 * hides it.  -1: said. */
static int refuse_mount_in_run(const char *run, const char *mountpoint)
{
    char *mnt = realpath(mountpoint, NULL);
    int rc = 0;
    if (mnt != NULL && path_within(mnt, run)) {
        fprintf(stderr, "ckptfs: the mount point %s is inside the run directory %s it would "
                "follow: mount it elsewhere\n", mnt, run);
        rc = -1;
    }
    free(mnt);
    return rc;
}

/* Allow as many open files as the system lets this process have. */
static void raise_open_file_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* RUN/latest and RUN/NAME, a run's checkpoints as a mount of RUN shows
 * them (codec/run_path.h), mount that checkpoint, as the tools open it:
 * the one `latest` names now, not one that follows the run.  Only a path
 * not on disk is looked up so (a file really named latest wins; RUN
 * itself is a run mount), and never with -o create, whose path is new.
 * *path and *abs then name the checkpoint.  -1: said. */
static int run_checkpoint(const struct cli *cli, const char **path, char **abs,
                          const ck_open_opts *oo)
{
    struct stat st;
    if (cli->create || lstat(*path, &st) == 0 || errno != ENOENT)
        return 0;
    ck_error err = {0};
    char *real = NULL;
    int rc = ck_run_checkpoint_path(*path, oo, &real, &err);
    if (rc < 0) {
        fprintf(stderr, "ckptfs: %s\n", err.msg);
        return -1;
    }
    if (rc > 0) {
        free(*abs);
        *path = *abs = real;
    }
    return 0;
}

/* One line of --maps: a map that does not load says why instead. */
static void print_map(void *arg, const char *name, const char *path)
{
    (void)arg;
    ck_error err = {0};
    ck_map *m = ck_map_load_listing(name, &err);
    if (m == NULL)
        printf("%s\t-\t%s\t%s\n", name, err.msg, path);
    else if (ck_map_needs(m) != NULL)
        printf("%s\t%s\t%s (give %s: %s:%s=N)\t%s\n", name,
               ck_map_invertible(m) ? "invertible" : "one-way", ck_map_about(m),
               ck_map_needs(m), name, ck_map_needs(m), path);
    else
        printf("%s\t%s\t%s\t%s\n", name, ck_map_invertible(m) ? "invertible" : "one-way",
               ck_map_about(m), path);
    ck_map_free(m);
}

int main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    /* rw -1: by the owner write bit */
    struct cli cli = {.rw = -1, .commit_delay = 1.0, .max_read = UINT_MAX, .busy_poll = 100,
                      .settle = 5.0, .poll = 2.0};
    struct fuse_cmdline_opts opts = {0};
    ck_envelope_args env_args = {0}; /* -o key_file and the like: the envelopes' */
    int rc = 1;

    ckfs_kernel_set(&ckfs_fuse_kernel); /* how every mount tells the kernel (mount/invalidate.h) */
    if (fuse_opt_parse(&args, &cli, cli_opts, cli_proc) != 0 ||
        fuse_parse_cmdline(&args, &opts) != 0) {
        /* libfuse has said what is wrong (an unknown option, say). */
        fprintf(stderr, SHORT_USAGE "\n");
        rc = 2;
        goto out;
    }
    if (opts.show_help) {
        usage(stdout);
        fuse_cmdline_help();
        fuse_lowlevel_help();
        rc = 0;
        goto out;
    }
    if (opts.show_version) {
        printf("ckptfs %s\nFUSE library version %s\n", CKPTFS_VERSION, fuse_pkgversion());
        fflush(stdout); /* libfuse's lines come from a child process */
        fuse_lowlevel_version();
        rc = 0;
        goto out;
    }
    if (cli.list_maps) {
        ck_map_each(print_map, NULL);
        rc = 0;
        goto out;
    }
    if (cli.model == NULL || opts.mountpoint == NULL) {
        fprintf(stderr, "ckptfs: %s\n" SHORT_USAGE "\n",
                cli.model ? "missing MOUNTPOINT" : "missing MODEL");
        rc = 2;
        goto out;
    }

    /* libfuse would mount on a regular file too, and answer every access
     * with EIO. */
    struct stat mst;
    if (stat(opts.mountpoint, &mst) == 0 && !S_ISDIR(mst.st_mode)) {
        fprintf(stderr, "ckptfs: %s: the mount point is %s, not a directory\n",
                opts.mountpoint, ck_file_kind(mst.st_mode));
        goto out;
    }
    if (check_as(&cli) < 0 || check_map(&cli) < 0)
        goto out;
    /* The daemon changes directory to /: keep an absolute path. */
    char *abs = absolute_path(cli.model);
    const char *path = abs ? abs : cli.model;
    ck_index_store store;
    char store_dir[PATH_MAX];
    index_options(&cli, &store, store_dir, sizeof store_dir);
    ck_open_opts oo = {.skip_crc = cli.nocrc, .index = &store};
    if (envelope_options(&cli, &oo, &env_args) < 0) {
        free(abs);
        goto out;
    }
    /* External data files and a run's open checkpoints each hold a
     * descriptor (edits share one spill file, whatever their number). */
    raise_open_file_limit();
    if (run_checkpoint(&cli, &path, &abs, &oo) < 0) {
        free(abs);
        goto out;
    }
    struct stat model_st;
    bool is_dir = stat(path, &model_st) == 0 && S_ISDIR(model_st.st_mode);
    if (cli.strategy != NULL && !is_dir) {
        fprintf(stderr, "ckptfs: %s: -o strategy is for a directory of rank_<id>/ "
                "checkpoints\n", path);
        free(abs);
        goto out;
    }
    const ck_collection *c = is_dir ? ck_collection_of(path, cli.strategy) : NULL;
    /* A folder that stands for one model file (a Hugging Face model
     * folder's) mounts that file, writable as it is. */
    char *file = c != NULL ? ck_collection_file(c, path) : NULL;
    if (file != NULL) {
        free(abs);
        path = abs = file;
        is_dir = false;
        c = NULL;
    } else if (c != NULL && c->model_file != NULL) {
        fprintf(stderr, "ckptfs: %s: is no longer %s (or out of memory)\n", path, c->title);
        free(abs);
        goto out;
    }
    oo.key_if_encrypted = is_dir; /* a directory's plain models beside keyed ones */
    if (is_dir && c == NULL && refuse_mount_in_run(path, opts.mountpoint) < 0)
        rc = 1;
    else
        rc = c != NULL ? mount_collection(&cli, &args, &opts, path, &oo, c)
             : is_dir  ? mount_run(&cli, &args, &opts, path, &oo)
                       : mount_model(&cli, &args, &opts, path, &oo);
    free(abs);
out:
    ck_envelope_args_free(&env_args); /* wipes the key */
    free(opts.mountpoint);
    free(cli.model);
    free(cli.format);
    free(cli.key_file);
    free(cli.enc_mode);
    free(cli.cache_size);
    free(cli.spill_max);
    free(cli.recover);
    free(cli.recovery_dir);
    free(cli.log);
    free(cli.tmp_max);
    free(cli.max_shard_size);
    free(cli.index_cache);
    free(cli.strategy);
    free(cli.index_dir);
    free(cli.as);
    free(cli.map);
    ck_map_free(cli.mapping);
    fuse_opt_free_args(&args);
    return rc;
}
