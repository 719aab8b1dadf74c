/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-reencode: write a model again through ckptfs's encoder, without
 * mounting it.
 *
 *   ckptfs-reencode MODEL OUT          the tree unchanged: OUT must equal MODEL
 *   ckptfs-reencode --all MODEL OUT    every tensor re-encoded as MindSpore
 *                                      >= 2.3 writes it (map parameters and
 *                                      replaced records aside)
 *
 * The first form checks that a commit of an untouched mount would be a
 * no-op; the second runs every tensor through the path an edit takes.  Both
 * write OUT atomically, holding its writer lock: OUT mounted writable is
 * refused.  MODEL is only read (its lock is not taken, so it may be
 * mounted); a save of it cut short past its commit point is refused in
 * one line, as a read-only mount refuses it.  An encrypted MODEL (key in CKPTFS_KEY_HEX) gives an
 * OUT encrypted the same way, with fresh IVs; a compressed one, seekable zstd.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/core/model.h"
#include "../codec/registry.h"
#include "cli_open.h"
#include "../codec/io/commit_group.h"
#include "../save/write_claim.h"

/* The model's tree as the writer takes it.  With all, every whole tensor
 * is given as new bytes, its own (its extents), so that each is encoded
 * anew; *pieces_out holds every piece. */
static ck_write_tensor *tree(const ck_model *m, bool all, ck_piece **pieces_out)
{
    const ck_index *ix = &m->index;
    size_t n_pieces = 0;
    for (size_t i = 0; all && i < ix->n_live; i++)
        n_pieces += ix->tensors[ix->live[i]].n_ext;
    ck_write_tensor *w = calloc(ix->n_live + 1, sizeof *w);
    ck_piece *pieces = calloc(n_pieces + 1, sizeof *pieces);
    if (w == NULL || pieces == NULL) {
        free(w);
        free(pieces);
        return NULL;
    }
    ck_piece *next = pieces;
    for (size_t i = 0; i < ix->n_live; i++) {
        uint32_t id = ix->live[i];
        const ck_tensor *t = &ix->tensors[id];
        w[i] = all && t->part == CK_PART_WHOLE ? ck_write_own(m, t, id, &next)
                                               : ck_write_unchanged(t, id);
    }
    *pieces_out = pieces;
    return w;
}

#define USAGE "usage: ckptfs-reencode [--all] MODEL OUT"

static void usage(FILE *to)
{
    fprintf(to, USAGE "\n"
            "Write MODEL again as OUT through ckptfs's encoder, without mounting it: the\n"
            "tree unchanged (OUT must then equal MODEL), or with --all every tensor\n"
            "re-encoded.  An encrypted MODEL takes its key from CKPTFS_KEY_HEX.\n"
            "  -h, --help; -V, --version\n");
}

/* --all (ck_cli_args): 1 taken, 0 not it. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    (void)argc;
    if (strcmp(argv[*i], "--all") != 0)
        return 0;
    *(bool *)ctx = true;
    return 1;
}

int main(int argc, char **argv)
{
    bool all = false;
    const char *pos[2] = {NULL, NULL};
    /* The shared reading (cli_open.h) for -h, -V, `--` and the one-line
     * errors; none of the options that open a model: the key is
     * CKPTFS_KEY_HEX's, as the mount's encoder takes it. */
    ck_cli_args args = {.prog = "ckptfs-reencode", .usage = usage, .own = own_arg, .ctx = &all,
                        .pos = pos, .max_pos = 2};
    int got = ck_cli_read_args(&args, argc, argv);
    if (got > 0)
        return 0; /* --help, --version */
    if (got < 0 || args.n_pos < 2) {
        if (got == 0)
            fprintf(stderr, "ckptfs-reencode: %s; ",
                    args.n_pos ? "no OUT given" : "no MODEL and OUT given");
        fprintf(stderr, USAGE " (try --help)\n");
        return 2;
    }
    const char *in = pos[0], *out = pos[1];
    ck_error err = {0};
    ck_envelope_args key = {0}; /* CKPTFS_KEY_HEX's, read by the envelopes */
    ck_open_opts opts = {.envelope = &key};
    ck_model *m = NULL;
    ck_model_dir *dir = NULL;
    ck_write_claim claim = CK_WRITE_CLAIM_NONE;
    /* MODEL is read, never written: a save of it cut short is told, as a
     * read-only mount tells it, and left for its writer to finish. */
    if (ck_envelope_args_ready(&key, &err) >= 0 && (dir = ck_dir_open(in, &err)) != NULL &&
        ck_group_recover(dir, true, &err) >= 0)
        m = ck_model_open_at(dir, in, &opts, &err);
    ck_envelope_args_free(&key);
    ck_dir_unref(dir);
    if (m == NULL) {
        fprintf(stderr, "ckptfs-reencode: %s\n", err.msg);
        return 1;
    }
    ck_piece *pieces = NULL;
    ck_write_tensor *w = tree(m, all, &pieces);
    int rc = 1;
    if (w == NULL) {
        fprintf(stderr, "ckptfs-reencode: out of memory\n");
    } else if (ck_write_claim_take(&claim, out, "ckptfs-reencode", &err) < 0 ||
               ck_write_claim_save(&claim, m, w, m->index.n_live, NULL, &err) < 0) {
        fprintf(stderr, "ckptfs-reencode: %s\n", err.msg);
    } else {
        rc = 0;
    }
    ck_write_claim_release(&claim);
    free(w);
    free(pieces);
    ck_model_close(m);
    return rc;
}
