/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model: one mounted model file, whatever its format.
 *
 * ck_model_open() (registry.h: it picks the format and the envelopes from
 * the registry's tables) recognises the file (by its leading bytes first,
 * its name second), refuses what ckptfs cannot read with a one-line
 * reason, and ck_model_open_file() here opens the byte sources and runs
 * the format's reader into a finalized tensor index.
 * This is the whole public face of codec/ for the front-ends: they list the
 * index and read tensor bytes with ck_model_read() or, when a source is a
 * plain file, straight from its extents.  ck_model_open (or ck_open_path,
 * open_path.h, for collections too) is all a front-end calls;
 * ckptfs-dump is a second front-end with no FUSE, like squashfuse_ls.
 *
 * A model has at most CK_MAX_SOURCES (4096) byte sources (sources[]),
 * each an open descriptor: ONNX external data files are extra sources,
 * one per file however many tensors it holds, and so are a split
 * MindIR's _variables/data_N files; an extent names its source by number.
 * A data file (a shard, a DCP data file, ck_model_open_data_file) is
 * opened beneath the model's directory with no link followed, a regular
 * file and not a second name of a file already open, through the open's
 * overrides; one that does not exist yet (or is a link the save's rename
 * replaces) is found through the overrides by name, as the read-back
 * check finds every file a save creates.
 *
 * Changed on disk.  The writer lock does not stop other programs.  Each
 * byte source records its file's identity when opened (dev, inode, size,
 * mtime in ns); the model file's is ck_model.st.  A save's new model is
 * its new files as read back, so the identity is the mount's, then each
 * save's.  Before encoding and again before a save's commit point,
 * ck_model_check_unchanged compares it, by fstatat through the model's
 * directory descriptor (no link followed), for the model and each data
 * file: another inode or size, or another mtime with a write seen
 * (core/file_watch.h), refuses the save with ESTALE ("PATH: changed on
 * disk since it was mounted (WHAT)", to which mount/tree_save.c adds that the
 * edits are kept), and nothing is written.  A model to create must still
 * not exist.  The ctime is not compared (chmod and chown change only
 * that).  Between the check and the rename a few system calls remain: a
 * rewrite in that window is not seen.
 *
 * Before a read served straight from the model's plain file sources,
 * ck_model_check_extents fstats each source the tensor lives in (one
 * fstat per request and run of extents in a source): smaller than the
 * tensor's end, another size than at open, or another mtime with a write
 * seen fails the read with EIO (a read-only mount used to splice past the
 * end of a truncated file and return 0 bytes, cat succeeding).  A file
 * renamed over the model does not matter: the mount reads the inode it
 * opened.  The same check guards the copy into a spill file at an out's
 * first write, so an edit never starts from rewritten bytes; the
 * encrypted and seekable-zstd sources run it (ck_source_check_fd) on a
 * page-cache miss.
 */
#ifndef CK_MODEL_H
#define CK_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "byte_source.h"
#include "ck_error.h"
#include "../envelope.h"
#include "file_override.h"
#include "../format.h"
#include "model_dir.h"
#include "tensor_index.h"

struct ck_index_store;
struct ck_saved_index;
struct ck_model;

/* What an open does with saved indexes (saved_index.h), handed down by the
 * registry's open (registry.c) so that the model never calls the saved
 * index, which is above it (it reads the model's fields): load one
 * instead of the reader's pass (1 loaded, 0 not, the model untouched),
 * store one after a full read; and for an index loaded (ck_model.saved),
 * the record header checks before a tensor's bytes are read (0 or -1
 * with err) and its release. */
typedef struct ck_index_hooks {
    int (*load)(struct ck_model *m, const struct ck_open_opts *o);
    void (*store)(const struct ck_model *m, const struct ck_open_opts *o);
    int (*check)(const struct ck_model *m, const ck_tensor *t, ck_error *err);
    int (*check_all)(const struct ck_model *m, ck_error *err);
    void (*free)(struct ck_saved_index *s);
} ck_index_hooks;

typedef struct ck_open_opts {
    bool skip_crc;          /* do not verify a .ckpt CRC trailer */
    /* What the user gave the envelopes (-o key_file=, enc_mode=,
     * zstd_level=: envelope_kind.h), each kind's own and opaque here;
     * borrowed; NULL: nothing. */
    const ck_envelope_args *envelope;
    /* A directory of models: a key is for those that are encrypted, and
     * a plain one opens as it is (one model given a key must be encrypted,
     * or be encrypted on save). */
    bool key_if_encrypted;
    size_t cache_size;      /* bytes of decrypted/decompressed pages (0: the default) */
    uint64_t max_shard_size; /* a new sharded set's largest shard (0: the default) */
    /* The "__metadata__" (compact JSON) of the safetensors files a save
     * writes anew, a model created empty being given its tensors (convert:
     * what IN had, ck_st_metadata_for); NULL: none.  Copied. */
    const char *new_metadata;
    uint64_t tmp_max;       /* most a non-seekable zstd model may decompress to in
                             * $TMPDIR (0: the default, see zstd_source.h) */
    /* Where a long step of the open draws its progress bar: the
     * decompression of a non-seekable zstd model (progress.h).  stderr
     * when it is a terminal and the user did not ask for quiet; NULL:
     * none.  Only for an open that a person waits on: a mount's later
     * reopens and a run directory's checkpoints leave it NULL. */
    FILE *progress;
    const ck_file_override *overrides; /* files to read from other descriptors */
    size_t n_overrides;     /* (a save's new files, read back before the rename) */
    const ck_format *format; /* read as this format whatever the file's name (NULL:
                              * by its extension); a save written to another name */
    /* Keep the model's index in this store, and load it from there instead
     * of reading the model when it matches (saved_index.h); NULL: always
     * read.  A collection's member files never use it: their bytes are
     * read through the collection's model. */
    struct ck_index_store *index;
} ck_open_opts;

#define CK_CACHE_SIZE_DEFAULT (16u << 20)

/* The model file, its external data files and a temp file of decoded
 * typed fields: each an open descriptor, so the count is capped. */
#define CK_MAX_SOURCES 4096

typedef struct ck_model {
    char *path;                     /* for messages; files are reached through dir */
    ck_model_dir *dir;              /* the model's directory (a reference) */
    const ck_format *format;        /* its reader (format.h) */
    void *state;                    /* what that reader keeps beyond the index */
    struct stat st;                 /* of the model file, at open (a touch's mtime adopted) */
    int file_wd;                    /* its watch in dir->watch, or -1 */
    bool unplaced;                  /* a save's read-back: its mtimes are not yet the placed
                                     * files' (ck_model_watch_files) */
    ck_source **sources;
    uint32_t n_sources, cap_sources; /* sources[0] is the model file */
    ck_index index;
    ck_envelope env;                /* how the model file is wrapped, and will be saved */
    uint64_t max_shard_size;        /* of a new sharded set (ck_open_opts) */
    char *new_metadata;             /* of new safetensors files (ck_open_opts), or NULL */
    ck_page_cache *cache;           /* pages of the wrapped sources */
    /* Serializes what changes after the open: the decoding sources'
     * reads (their page cache is this model's) and the adoption of a
     * touched file's mtime by the checks below.  A save reads the model
     * on its own thread while requests are answered. */
    pthread_mutex_t lock;
    const ck_file_override *overrides; /* the open's, while ck_model_open runs */
    size_t n_overrides;
    /* The index came from a saved index, whose record header checks are
     * still to pass (saved_index.h), through ix; NULL: it was read from
     * the file. */
    struct ck_saved_index *saved;
    const ck_index_hooks *ix;       /* the open's (ck_model_open_file), or NULL */
    char *mapped_by;                /* its names are this map's (codec/map/map_model.h):
                                     * not saved in place; NULL: its own */
} ck_model;

/* Take ownership of src; returns its id, or -1 (src closed) on failure. */
long ck_model_add_source(ck_model *m, ck_source *src, ck_error *err);
/* The same for a data file of a split MindIR: decrypted, and required to
 * be encrypted, when the model is. */
long ck_model_add_data_file(ck_model *m, ck_source *src, ck_error *err);

/* Open rel, beneath the model's directory (no link followed, a regular
 * file, not another name of a file the model has open), as a data file of
 * m (ck_model_add_data_file); an override's descriptor when one stands
 * for it.  Returns its source id, or -1. */
long ck_model_open_data_file(ck_model *m, const char *rel, ck_error *err);

/* Open dir->base in dir as format f, its envelope one of kinds (in order,
 * NULL-terminated), and its data files beneath dir; path names it in
 * messages.  The model keeps a reference to dir.  The caller chooses f
 * and kinds: the registry's ck_model_open_at (registry.h) by the file's
 * name and its tables, which is what the rest of ckptfs calls; ix, the
 * saved indexes' hooks (NULL: none loaded or stored). */
ck_model *ck_model_open_file(ck_model_dir *dir, const char *path, const ck_format *f,
                             const ck_envelope_kind *const *kinds, const ck_index_hooks *ix,
                             const ck_open_opts *opts, ck_error *err);
/* Watch the files of a model opened from a save's new files (an open
 * through overrides watches none: they were temporary), once they are in
 * place under their names; on shared storage, which has no watch, take
 * their mtimes as placed instead (model.c says why). */
void ck_model_watch_files(ck_model *m);

/* Whether source i is a data file of the model (an ONNX external data
 * file, a split MindIR's data file), not the model file or a temporary
 * file of decoded values. */
bool ck_model_is_data_file(const ck_model *m, uint32_t i);

/* A model of format f with no tensors for a file that does not exist yet
 * (mount -o create), which its first save wraps as wrap (NULL: plain);
 * the first commit creates dir->base.  The registry's ck_model_empty
 * (registry.h) chooses f and wrap and refuses what cannot be created. */
ck_model *ck_model_new(ck_model_dir *dir, const char *path, const ck_format *f,
                       const ck_envelope_kind *wrap, const ck_open_opts *opts, ck_error *err);
/* A model that codec/ assembles from other models' tensors (a merged
 * distributed checkpoint, dist_merge.h) instead of reading a file of its
 * own: empty, of format f (registered nowhere: nothing opens or saves it
 * by name), in dir.  Its sources, index, state and st are the
 * assembler's to fill. */
ck_model *ck_model_assembled(ck_model_dir *dir, const char *path, const ck_format *f,
                             ck_error *err);
void ck_model_close(ck_model *m);

/* The format's own name of a type, as xattrs show it ("Float32" in a
 * .ckpt, "FLOAT" in ONNX): t's spelling in the file when t is given (its
 * type unchanged), else the name the format's writer gives dt.  The two
 * below ask m's format (format.h). */
const char *ck_model_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt);

/* The model's own metadata as text (format.h), or NULL. */
const char *ck_model_metadata(const ck_model *m);

/* Whether tensor id may be deleted or renamed: 0, or -1 (EBUSY) with the
 * reason, naming it as shown (its directory name) and what needs it.  A
 * checkpoint's tensors always may; a graph's may not while a node reads
 * or holds them, since the runtime would refuse the saved model. */
int ck_model_may_remove(ck_model *m, uint32_t id, const char *shown, ck_error *err);

/* An option's size, "16M" and the like: bytes; K, M, G, T or KiB, MiB,
 * GiB, TiB (binary); KB, MB, GB, TB (decimal, Hugging Face's "5GB"); more
 * than 0.  -1 for anything else. */
int ck_parse_size(const char *text, size_t *out);

/* Copy bytes [off, off + size) of tensor t's `out` into buf; returns the
 * number of bytes copied (short only at the end of the tensor), or -1. */
long ck_model_read(const ck_model *m, const ck_tensor *t, void *buf, size_t size,
                   uint64_t off, ck_error *err);

/* The file holding byte off of t's extents when the extent's source
 * stands for several files (format.h, extent_file): its path relative to
 * the model's directory, off's place in it in *in.  NULL otherwise. */
const char *ck_model_extent_file(const ck_model *m, const ck_tensor *t, uint64_t off,
                                 uint64_t *in);

/* Whether who (another user of an allow_other mount) may read every
 * file t is read from, as on disk: every directory from the mount's root
 * to the file searchable, the file readable (ck_dir_may_read).  -1 with
 * EACCES and the file's name otherwise. */
int ck_model_may_read(const ck_model *m, const ck_tensor *t, const ck_cred *who,
                      ck_error *err);

/* Before tensor t's bytes are read straight from its plain file sources:
 * fail with EIO and the reason when such a file was truncated below t's
 * extents or rewritten since it was opened (ck_source_check_fd), or, for
 * an index loaded from a saved index, when t's record header is not the
 * one the index was made from (saved_index.h; ck_model_read checks that
 * too). */
int ck_model_check_extents(const ck_model *m, const ck_tensor *t, ck_error *err);

/* Before a save replaces the files: fail (ESTALE, naming the file and what
 * changed) when the model file or one of its data files is no longer what
 * was opened, because another program renamed a file over it, resized it
 * or wrote to it (inode, size; an mtime that another program's write
 * changed: touch, chmod and chown are not changes, see file_watch.h);
 * EIO when the index came from a saved index and a tensor's record header
 * is not the one it was made from (saved_index.h).
 * For a model not yet created (-o create), when the file now exists. */
int ck_model_check_unchanged(ck_model *m, ck_error *err);

#endif
