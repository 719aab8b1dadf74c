/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of codec/map: the map language (every rule, its settings,
 * the refusals of hostile maps by line) and maps applied to names,
 * checked against names written out by hand from the reference note
 * (../shared/reference/framework-names.md), not from the code.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../codec/map/map.h"
#include "unit.h"

static ck_map *parse(const char *text, ck_error *err)
{
    memset(err, 0, sizeof *err);
    return ck_map_parse(text, strlen(text), "t.map", err);
}

/* Map names and compare with want (NULL: dropped); every name freed. */
static bool maps_to(const ck_map *m, const char *const *names, const char *const *want,
                    size_t n)
{
    char *out[64] = {0};
    ck_error err = {0};
    if (ck_map_names(m, names, n, out, &err) < 0) {
        fprintf(stderr, "# %s\n", err.msg);
        return false;
    }
    bool same = true;
    for (size_t i = 0; i < n; i++) {
        bool eq = want[i] == NULL ? out[i] == NULL : out[i] != NULL && strcmp(out[i], want[i]) == 0;
        if (!eq)
            fprintf(stderr, "# %s: got %s, want %s\n", names[i], out[i] ? out[i] : "(dropped)",
                    want[i] ? want[i] : "(dropped)");
        same &= eq;
        free(out[i]);
    }
    return same;
}

/* The refusal of text, or of applying it to names, names line. */
static bool refused_at(const char *text, const char *const *names, size_t n, const char *line)
{
    ck_error err;
    ck_map *m = parse(text, &err);
    char *out[8] = {0};
    if (m != NULL && ck_map_names(m, names, n, out, &err) == 0) {
        for (size_t i = 0; i < n; i++)
            free(out[i]);
        ck_map_free(m);
        return false;
    }
    ck_map_free(m);
    bool ok = strstr(err.msg, line) != NULL && strchr(err.msg, '\n') == NULL;
    if (!ok)
        fprintf(stderr, "# refusal '%s' lacks '%s'\n", err.msg, line);
    return ok;
}

static void test_rules(void)
{
    ck_error err;
    /* MindSpore's BatchNorm family to torch (the reference's §2): a group
     * with a moving_mean is a BatchNorm; BatchNorm3d's bn2d level goes. */
    ck_map *m = parse("# BN\nnot-invertible \"drops\" optimizer state\n"
                      "drop moments.* global_step learning_rate momentum\n"
                      "segment bn2d - if bn2d.moving_mean\n"
                      "segment gamma weight if moving_mean\n"
                      "segment beta bias if moving_mean\n"
                      "segment moving_mean running_mean\n"
                      "segment moving_variance running_var\n"
                      "segment gamma weight   # LayerNorm, GroupNorm\n"
                      "segment beta bias\n"
                      "segment embedding_table weight\n", &err);
    check(m != NULL, "map: a BatchNorm map parses (%s)", err.msg);
    const char *in[] = {"conv1.weight", "bn1.gamma", "bn1.beta", "bn1.moving_mean",
                        "bn1.moving_variance", "moments.conv1.weight", "global_step",
                        "c.bn.bn2d.gamma", "c.bn.bn2d.moving_mean", "ln.gamma", "ln.beta",
                        "em.embedding_table", "x.gamma_not"};
    const char *want[] = {"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                          "bn1.running_var", NULL, NULL, "c.bn.weight", "c.bn.running_mean",
                          "ln.weight", "ln.bias", "em.weight", "x.gamma_not"};
    check(m && maps_to(m, in, want, 13), "map: BatchNorm 1d/2d/3d, LayerNorm, Embedding and "
          "optimizer state as the reference gives them");
    check(m && !ck_map_invertible(m) && ck_map_reverse(m, &err) == NULL &&
              strstr(err.msg, "drops optimizer state") != NULL,
          "map: a not-invertible map has no reverse, and says why (%s)", err.msg);
    ck_map_free(m);

    /* MindFormers' substring list, in order (§4.3), and its derived reverse. */
    m = parse("name hf-to-mf\nreverse mf-to-hf\ninvertible\n"
              "replace embed_tokens.weight tok_embeddings.embedding_weight\n"
              "replace .self_attn.q_proj. .attention.wq.\n"
              "replace .mlp.gate_proj. .feed_forward.w1.\n"
              "replace .norm. .norm_out.\n", &err);
    check(m != NULL, "map: a replace list parses (%s)", err.msg);
    const char *hf[] = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                        "model.layers.0.mlp.gate_proj.weight", "model.norm.weight",
                        "lm_head.weight"};
    const char *mf[] = {"model.tok_embeddings.embedding_weight",
                        "model.layers.0.attention.wq.weight",
                        "model.layers.0.feed_forward.w1.weight", "model.norm_out.weight",
                        "lm_head.weight"};
    check(m && maps_to(m, hf, mf, 5), "map: substring replacements in order");
    ck_map *r = m ? ck_map_reverse(m, &err) : NULL;
    check(r != NULL && strcmp(ck_map_name(r), "mf-to-hf") == 0 && maps_to(r, mf, hf, 5),
          "map: the derived reverse gives the names back, under its reverse name");
    ck_map_free(r);
    ck_map_free(m);

    m = parse("not-invertible regex\nregex ^layer([0-9]+)\\.(.*)$ blocks.\\1.\\2\n"
              "rename blocks.0.w \"odd name #1\"\nkeep blocks.*\nkeep odd*\n", &err);
    const char *rin[] = {"layer12.conv.weight", "head.w", "layer0.w"};
    const char *rout[] = {"blocks.12.conv.weight", NULL, "odd name #1"};
    check(m && maps_to(m, rin, rout, 3), "map: regex groups, a quoted name with '#', and "
          "consecutive keep lines as one set (%s)", err.msg);
    ck_map_free(m);
}

static void test_refusals(void)
{
    const char *two[] = {"a.gamma", "a.weight"};
    check(refused_at("not-invertible x\nsegment gamma weight\n", two, 2, "line 2"),
          "map: two names made one are refused at the rule's line");
    const char *ab[] = {"ab", "b"};
    check(refused_at("invertible\nreplace a \"\"\n", ab, 2, "line 2"),
          "map: a replace to an empty string is refused");
    check(refused_at("invertible\nreplace a b\n", ab, 2, "line 2"),
          "map: an 'invertible' map whose reverse does not give a name back is refused");
    check(refused_at("invertible\ndrop x*\n", ab, 2, "line 2"),
          "map: a drop in an invertible map is refused at its line");
    check(refused_at("not-invertible x\nregex (a b\n", ab, 2, "line 2"),
          "map: a bad regex is refused at its line");
    check(refused_at("not-invertible x\nregex a \\3\n", ab, 2, "line 2"),
          "map: a regex naming a group it lacks is refused");
    check(refused_at("not-invertible x\nregex (a+)++ b\n", ab, 2, "quantifier on a quantifier") &&
              refused_at("not-invertible x\nregex ((a{32}){32}){32} b\n", ab, 2, "interval") &&
              refused_at("not-invertible x\nregex (a)\\1 b\n", ab, 2, "back-reference") &&
              refused_at("not-invertible x\nregex a{99} b\n", ab, 2, "interval"),
          "map: a regex that would take memory or time without end is refused (the fuzzer's "
          "findings)");
    check(refused_at("not-invertible x\n\ncast * float32\n", ab, 2, "line 3: 'cast'"),
          "map: a layout or type rule is refused by name until it is built");
    check(refused_at("not-invertible x\nfrobnicate a\n", ab, 2, "line 2"),
          "map: an unknown word is refused at its line");
    check(refused_at("rename a b\n", ab, 2, "invertible"),
          "map: a map that says neither invertible nor why not is refused");
    check(refused_at("not-invertible x\nrename \"a b\n", ab, 2, "line 2"),
          "map: an unended quote is refused at its line");
    check(refused_at("not-invertible x\nsegment a.b c\n", ab, 2, "line 2"),
          "map: a segment with a dot is refused");
    const char *one[] = {"a"};
    check(refused_at("not-invertible x\nsegment a -\n", one, 1, "empty name"),
          "map: a name made empty is refused");
    /* A name doubled by every rule would grow past any bound: refused. */
    char big[4096] = "not-invertible x\n";
    for (int i = 0; i < 20; i++)
        strcat(big, "replace a aa\n");
    check(refused_at(big, one, 1, "longer than"), "map: a name grown past the bound is "
          "refused at the rule that grew it");
    ck_error err = {0};
    size_t huge = CK_MAP_TEXT_MAX + 1;
    char *text = malloc(huge);
    memset(text, '#', huge);
    check(text && ck_map_parse(text, huge, "big.map", &err) == NULL && err.errnum == EFBIG,
          "map: a map past %u bytes is refused whole", CK_MAP_TEXT_MAX);
    free(text);
    check(ck_map_parse("a\0b", 3, "nul.map", &err) == NULL && strstr(err.msg, "offset 1"),
          "map: a NUL byte is refused at its offset");
}

static void test_find(void)
{
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/maps", tmpdir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/fwd.map", dir);
    FILE *f = fopen(path, "w");
    fputs("about test map\ninvertible\nreverse bwd\nrename a b\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/bwd.map", dir);
    f = fopen(path, "w");
    fputs("reverse-of fwd\n", f);
    fclose(f);
    setenv("CKPTFS_MAPS", dir, 1);
    ck_error err = {0};
    ck_map *m = ck_map_load("bwd", &err);
    const char *b[] = {"b"}, *a[] = {"a"};
    check(m != NULL && strcmp(ck_map_name(m), "bwd") == 0 && maps_to(m, b, a, 1) &&
              strcmp(ck_map_about(m), "test map") == 0,
          "map: a reverse-of map found by name in $CKPTFS_MAPS is the other's reverse (%s)",
          err.msg);
    ck_map_free(m);
    check(ck_map_load("no-such-map", &err) == NULL && err.errnum == ENOENT,
          "map: an unknown name is refused");
    check(ck_map_load("../etc/x", &err) == NULL, "map: a path that is no file is refused");
    unsetenv("CKPTFS_MAPS");
}

void test_map(void)
{
    test_rules();
    test_refusals();
    test_find();
}
