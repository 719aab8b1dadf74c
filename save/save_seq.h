/* SPDX-License-Identifier: Apache-2.0 */
/*
 * save_seq: the one save sequence, which every writer of a model's files
 * runs: a commit group begun in the model's directory (codec/io/
 * commit_group.h), the encoder (refusals, the format's writer, the
 * read-back check: encoder.h), the commit point, then the renames left
 * after it.
 *
 * Its phases are explicit because a mount runs them split across its
 * threads (mount/tree_save.c, tree_save_*): begun and run on its saver
 * thread with no tree lock held, switched to the files read back under
 * the tree's lock, finished (the journal's renames) after the old model
 * is closed.
 * The tools run them one after the other (ck_write_claim_save).  Whoever
 * runs it holds the model's write claim (write_claim.h): its writer lock,
 * with the journal of an interrupted save recovered.
 */
#ifndef CK_SAVE_SEQ_H
#define CK_SAVE_SEQ_H

#include <stdbool.h>
#include <stddef.h>

#include "../codec/core/model.h"
#include "../codec/core/model_dir.h"
#include "../codec/core/progress.h"
#include "../codec/io/writer.h"

/* How a save runs. */
typedef struct ck_save_opts {
    ck_progress *progress;      /* counts the bytes written (NULL: none) */
    bool own_data;              /* commit_group.h: --into's data file of its own */
    bool data_replace;          /* replace such a file, or a new set's shards */
    /* Keep the new files as read back, opened with these options, for
     * ck_save_take_saved (NULL: not kept): what a mount switches to. */
    const ck_open_opts *keep_as;
    /* Run before encoding and again just before the commit point (NULL:
     * none): a mount refuses the save when another program changed the
     * model since it was opened (ck_model_check_unchanged). */
    int (*check)(void *arg, ck_error *err);
    void *check_arg;
} ck_save_opts;

typedef struct ck_save ck_save;

/* Begin saving m in its format over dir->base (dir: the claim's, or the
 * model's own; it and o's pointers must outlive the save).  NULL with the
 * reason: the storage cannot replace a file, the temporary file cannot be
 * made, out of memory. */
ck_save *ck_save_begin(const ck_model_dir *dir, const ck_model *m, const ck_save_opts *o,
                       ck_error *err);
/* Encode the tree w[0..n) (which must outlive the save), read it back and
 * check it, up to the commit point.  On failure nothing is replaced. */
int ck_save_run(ck_save *s, const ck_write_tensor *w, size_t n, ck_error *err);
/* The new files as read back (keep_as), now the caller's to close; NULL
 * when not kept or not run. */
ck_model *ck_save_take_saved(ck_save *s);
/* Whether the commit point has passed with renames still to do (false
 * for NULL). */
bool ck_save_pending(const ck_save *s);
/* Do the renames left past the commit point, if it was passed, and free
 * the save (its temporary files removed when it was not).  -1 when a
 * rename fails: the next claim's recovery finishes it, as err says.
 * NULL: nothing, 0. */
int ck_save_finish(ck_save *s, ck_error *err);
/* Free the save without its renames: its temporary files are removed
 * unless a journal lists them (NULL: nothing). */
void ck_save_abort(ck_save *s);

#endif
