/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envelope_args: the user's envelope options as the envelopes take them by
 * name (registry.h: ck_envelope_option, ck_envelope_args_ready,
 * ck_envelope_for_new), opaque to the caller: the refusals keep their
 * words, a key from CKPTFS_KEY_HEX is taken out of the environment, a
 * copy and the originals free apart (the ASan build checks the frees and
 * wipes for leaks and double frees), and a new model given a key and a
 * mode is encrypted in that mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codec/registry.h"
#include "unit.h"

/* The refusals a mount and the tools print, word for word. */
static void bad_values(void)
{
    ck_envelope_args a = {0};
    ck_error err = {0};
    check(ck_envelope_option("enc_mode", "AES-XTS", &a, &err) < 0 &&
              strcmp(err.msg, "-o enc_mode=AES-XTS: the modes are AES-GCM and AES-CBC") == 0,
          "envelope_args: a bad enc_mode is refused (%s)", err.msg);
    check(ck_envelope_option("zstd_level", "x", &a, &err) < 0 &&
              strncmp(err.msg, "-o zstd_level=x: zstd levels are ", 33) == 0,
          "envelope_args: a bad zstd_level is refused (%s)", err.msg);
    check(ck_envelope_option("nocrc", "1", &a, &err) == 0 && a.n == 0,
          "envelope_args: an option no envelope has is left, and nothing kept");
    ck_envelope_args_free(&a);
}

/* A mode without a key, for a new model: refused as ck_model_empty says. */
static void mode_without_key(void)
{
    ck_envelope_args a = {0};
    ck_error err = {0};
    const ck_envelope_kind *wrap = NULL;
    int took = ck_envelope_option("enc_mode", "AES-CBC", &a, &err);
    check(took == 1 && ck_envelope_for_new("new.ckpt", &a, &wrap, &err) < 0 &&
              strcmp(err.msg, "new.ckpt: -o enc_mode needs a key: -o key_file=PATH or "
                              "CKPTFS_KEY_HEX") == 0,
          "envelope_args: a mode without a key is refused for a new model (%s)", err.msg);
    check(ck_envelope_for_new("new.ckpt.zst", NULL, &wrap, &err) == 0 && wrap != NULL &&
              strcmp(wrap->name, "zstd") == 0,
          "envelope_args: without options a new model is wrapped as its name says");
    ck_envelope_args_free(&a);
}

/* A key and a mode: the new model is encrypted with them; a copy of the
 * options outlives the originals. */
static void key_and_mode(void)
{
    ck_envelope_args a = {0}, copy;
    ck_error err = {0};
    const ck_envelope_kind *wrap = NULL;
    setenv("CKPTFS_KEY_HEX", "30313233343536373839414243444546", 1);
    int ok = ck_envelope_option("enc_mode", "aes-cbc", &a, &err) == 1 &&
             ck_envelope_args_ready(&a, &err) == 0;
    check(ok && getenv("CKPTFS_KEY_HEX") == NULL,
          "envelope_args: the key is read from CKPTFS_KEY_HEX, and taken out of it (%s)",
          err.msg);
    check(ok && ck_envelope_args_copy(&a, NULL, &copy, &err) == 0,
          "envelope_args: the options copied");
    ck_envelope_args_free(&a);
    check(ck_envelope_for_new("new.ckpt", &copy, &wrap, &err) == 0 && wrap != NULL &&
              wrap->secret,
          "envelope_args: a key and a mode encrypt a new model (%s)", err.msg);
    check(ck_envelope_for_new("new.ckpt.zst", &copy, &wrap, &err) < 0 &&
              strcmp(err.msg, "new.ckpt.zst: a new model is encrypted or compressed, "
                              "not both") == 0,
          "envelope_args: a key and a compressed name are refused (%s)", err.msg);
    char path[512];
    snprintf(path, sizeof path, "%s/envelope_args.ckpt", tmpdir);
    ck_open_opts oo = {.envelope = &copy};
    ck_model_dir *dir = ck_dir_open(path, &err);
    ck_model *m = dir ? ck_model_empty(dir, path, NULL, &oo, &err) : NULL;
    check(m != NULL && m->env.fresh && ck_envelope_is_secret(&m->env) &&
              strcmp(ck_envelope_describe(&m->env), "AES-CBC") == 0,
          "envelope_args: the new model is to be saved with AES-CBC (%s)",
          m ? ck_envelope_describe(&m->env) : err.msg);
    ck_model_close(m);
    ck_dir_unref(dir);
    ck_envelope_args_free(&copy);
}

void test_envelope_args(void)
{
    bad_values();
    mode_without_key();
    key_and_mode();
}
