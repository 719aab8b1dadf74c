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

#include "../../codec/core/tensor_index.h"
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

/* Apply text to tensors; each outcome's name and shape as "name[d,d]"
 * (or "name[d,d]=0" for an added one), joined by ' ', into got. */
static bool layout_to(const char *text, const ck_map_tensor *in, size_t n, char *got,
                      size_t cap, ck_error *err)
{
    ck_map *m = parse(text, err);
    ck_map_out *o = NULL;
    size_t k = 0;
    if (m == NULL || ck_map_apply(m, in, n, &o, &k, err) < 0) {
        ck_map_free(m);
        return false;
    }
    got[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        const int64_t *d = o[i].dims ? o[i].dims : in[o[i].from].dims;
        size_t len = strlen(got);
        len += (size_t)snprintf(got + len, cap - len, "%s%s[", i ? " " : "", o[i].name);
        for (uint32_t j = 0; j < o[i].ndim; j++)
            len += (size_t)snprintf(got + len, cap - len, "%s%lld", j ? "," : "",
                                    (long long)d[j]);
        snprintf(got + len, cap - len, "]%s%s", o[i].from < 0 ? "=" : "",
                 o[i].from < 0 ? ck_dtype_canonical_name(o[i].dtype) : "");
    }
    ck_map_out_free(o, k);
    ck_map_free(m);
    return true;
}

/* The order o gives its elements, as source element numbers: element x
 * (row-major over the view) is sum x_d * step[d], or x itself when in
 * order.  Into got (as "0,3,1,..."). */
static void order_text(const ck_map_out *o, uint64_t count, char *got, size_t cap)
{
    size_t len = 0;
    got[0] = '\0';
    for (uint64_t x = 0; x < count && len < cap; x++) {
        uint64_t q = x, at = 0;
        for (uint32_t d = o->view_n; d-- > 0;) {
            at += q % (uint64_t)o->view_dims[d] * (uint64_t)o->view_step[d];
            q /= (uint64_t)o->view_dims[d];
        }
        len += (size_t)snprintf(got + len, cap - len, "%s%llu", x ? "," : "",
                                (unsigned long long)(o->view_n ? at : x));
    }
}

/* Map text over one tensor w of shape dims: its outcome's shape and order. */
static bool order_to(const char *text, const char *args, const ck_dtype *dt,
                     const int64_t *dims, uint32_t nd, char *shape, char *order, size_t cap,
                     ck_error *err)
{
    memset(err, 0, sizeof *err);
    ck_map *m = ck_map_parse_args(text, strlen(text), "t.map", args, err);
    const ck_map_tensor in = {"w", dt, dims, nd};
    ck_map_out *o = NULL;
    size_t k = 0;
    if (m == NULL || ck_map_apply(m, &in, 1, &o, &k, err) < 0 || k != 1) {
        ck_map_free(m);
        return false;
    }
    const int64_t *d = o->dims ? o->dims : dims;
    uint64_t count = 1;
    for (uint32_t i = 0; i < nd; i++)
        count *= (uint64_t)dims[i];
    ck_dims_text(d, o->ndim, shape, 64);
    order_text(o, count, order, cap);
    ck_map_out_free(o, k);
    ck_map_free(m);
    return true;
}

static void test_order(void)
{
    const ck_dtype *f32 = ck_dtype_from_canonical("float32");
    char shape[64], order[512];
    ck_error err = {0};
    /* [[0,1,2],[3,4,5]] transposed is [[0,3],[1,4],[2,5]] */
    const int64_t m23[] = {2, 3};
    bool ok = order_to("not-invertible x\ntranspose w\n", NULL, f32, m23, 2, shape, order,
                       sizeof order, &err);
    check(ok && strcmp(shape, "[3,2]") == 0 && strcmp(order, "0,3,1,4,2,5") == 0,
          "map: transpose of a matrix (%s %s%s)", shape, order, err.msg);
    /* permute [2,0,1] of [2,3,4]: out[a][b][c] = in[b][c][a] */
    const int64_t t234[] = {2, 3, 4};
    char want[512];
    size_t len = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                len += (size_t)snprintf(want + len, sizeof want - len, "%s%d", len ? "," : "",
                                        b * 12 + c * 4 + a);
    ok = order_to("invertible\npermute w [2,0,1]\n", NULL, f32, t234, 3, shape, order,
                  sizeof order, &err);
    check(ok && strcmp(shape, "[4,2,3]") == 0 && strcmp(order, want) == 0,
          "map: an invertible permute (%s %s%s)", shape, order, err.msg);
    /* HF's permute of Meta's rows, 2 heads of 4 rows: each head's rows
     * 0,2,1,3 (w.view(2, 2, 2, 1).transpose(1, 2)) */
    const int64_t q81[] = {8, 1};
    ok = order_to("invertible\nparam h\nqk-permute w $h\n", "h=2", f32, q81, 2, shape, order,
                  sizeof order, &err);
    check(ok && strcmp(shape, "[8,1]") == 0 && strcmp(order, "0,2,1,3,4,6,5,7") == 0,
          "map: qk-permute by a param (%s %s%s)", shape, order, err.msg);
    const int64_t q42[] = {4, 2};
    ok = order_to("not-invertible x\nqk-unpermute w 1\n", NULL, f32, q42, 2, shape, order,
                  sizeof order, &err);
    check(ok && strcmp(order, "0,1,4,5,2,3,6,7") == 0,
          "map: qk-unpermute (%s%s)", order, err.msg);
    /* an order rule after a reshape, and two that undo each other */
    ok = order_to("not-invertible x\nreshape w [6]\nreshape w [3,2]\ntranspose w\n", NULL, f32,
                  m23, 2, shape, order, sizeof order, &err);
    check(ok && strcmp(shape, "[2,3]") == 0 && strcmp(order, "0,2,4,1,3,5") == 0,
          "map: transpose after a reshape (%s %s%s)", shape, order, err.msg);
    ok = order_to("not-invertible x\nqk-permute w 2\nqk-unpermute w 2\n", NULL, f32, q81, 2,
                  shape, order, sizeof order, &err);
    check(ok && strcmp(order, "0,1,2,3,4,5,6,7") == 0,
          "map: qk-permute then qk-unpermute leave the bytes in order (%s%s)", order, err.msg);
    ok = order_to("not-invertible x\ntranspose w\ntranspose w 1 0\n", NULL, f32, m23, 2, shape,
                  order, sizeof order, &err);
    check(ok && strcmp(shape, "[2,3]") == 0 && strcmp(order, "0,1,2,3,4,5") == 0,
          "map: two transposes leave the bytes in order (%s %s%s)", shape, order, err.msg);
    const struct {
        const char *text, *args, *want, *what;
        const int64_t *dims;
    } bad[] = {
        {"not-invertible x\nqk-permute w 2\n", NULL, "line 2: tensor 'w' [2,3]: its first dim",
         "a qk-permute whose rows are not whole heads", m23},
        {"not-invertible x\npermute w [0,0]\n", NULL, "line 2: permute: '[0,0]'",
         "a permutation naming an axis twice", m23},
        {"not-invertible x\npermute w [1,0,2]\n", NULL, "line 2: tensor 'w' [2,3]",
         "a permutation of another rank", m23},
        {"not-invertible x\ntranspose w 0 2\n", NULL, "line 2: tensor 'w' [2,3]",
         "a transpose past the last axis", m23},
        {"not-invertible x\nparam h\nqk-permute w $h\n", NULL, "line 2: the map needs h",
         "a param not given", m23},
        {"not-invertible x\nparam h 2\n", "h=2:g=3", "'g=3': the map has no such param",
         "an arg the map does not take", m23},
        {"not-invertible x\nqk-permute w $h\n", NULL, "line 2: '$h': no 'param' line",
         "a param not declared", m23},
        {"not-invertible x\nqk-permute w 0\n", NULL, "line 2: '0': a count",
         "a count of 0", m23},
        {"not-invertible x\nparam h\n", "h=x", "line 2: 'x': a count", "a param not a count",
         m23},
        {"not-invertible x\ntranspose w\nreshape w [6]\nreshape w [2,3]\ntranspose w\n", NULL,
         "line 5: tensor 'w' [2,3]: the elements, in the order an earlier rule gave them",
         "a transpose of a transposed tensor seen in a shape that order cannot take (torch "
         "would copy)", m23},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ok = order_to(bad[i].text, bad[i].args, f32, bad[i].dims, 2, shape, order,
                      sizeof order, &err);
        check(!ok && strstr(err.msg, bad[i].want) != NULL && strchr(err.msg, '\n') == NULL,
              "map: %s is refused in one line naming '%s' (%s)", bad[i].what, bad[i].want,
              err.msg);
    }
    {
        /* an added tensor transposed: zeros, whatever their order */
        ck_map *m = parse("not-invertible x\nadd z float32 [2,3]\ntranspose z\n", &err);
        const ck_map_tensor in = {"w", f32, m23, 2};
        ck_map_out *o = NULL;
        size_t k = 0;
        ok = m != NULL && ck_map_apply(m, &in, 1, &o, &k, &err) == 0 && k == 2;
        check(ok && o[1].from < 0 && o[1].ndim == 2 && o[1].dims[0] == 3 && o[1].view_n == 0,
              "map: an added tensor transposed takes the shape, and no order (%s)", err.msg);
        ck_map_out_free(o, k);
        ck_map_free(m);
    }
    ok = order_to("not-invertible x\ntranspose w\n", NULL, ck_dtype_from_canonical("str"), m23,
                  2, shape, order, sizeof order, &err);
    check(!ok && strstr(err.msg, "line 2: tensor 'w' [2,3]: its elements are not whole bytes"),
          "map: a transpose of text is refused (%s)", err.msg);
}

static void test_layout(void)
{
    const ck_dtype *f32 = ck_dtype_from_canonical("float32");
    check(f32 != NULL && ck_dtype_from_canonical("int64") != NULL &&
              ck_dtype_from_canonical("no-type") == NULL,
          "map: a type by its canonical name");
    /* MindSpore's Conv1d weight is [O, I/g, 1, K] where torch's is
     * [O, I/g, K] (the reference's §5); BatchNorm gains torch's
     * num_batches_tracked, a 0-d int64, beside its running_mean. */
    const int64_t w4[] = {8, 3, 1, 5}, b1[] = {8}, v[] = {16};
    const ck_map_tensor in[] = {
        {"conv.weight", f32, w4, 4}, {"bn.running_mean", f32, b1, 1},
        {"bn.running_var", f32, b1, 1}, {"fc.weight", f32, v, 1},
    };
    char got[512];
    ck_error err = {0};
    bool ok = layout_to("not-invertible adds\nsqueeze conv.weight 2\n"
                        "add num_batches_tracked int64 [] if running_mean\n"
                        "add fc.bias = [=0] if fc.weight\nreshape fc.w* [16] [4,-1]\n",
                        in, 4, got, sizeof got, &err);
    check(ok && strcmp(got, "conv.weight[8,3,5] bn.running_mean[8] "
                            "bn.num_batches_tracked[]=int64 bn.running_var[8] "
                            "fc.weight[4,4] fc.bias[16]=float32") == 0,
          "map: squeeze, add beside a sibling (its type and dim too) and reshape (%s%s)",
          got, err.msg);
    ok = layout_to("invertible\nunsqueeze conv.* 2\nreshape fc.weight [16] [2,8]\n", in, 4,
                   got, sizeof got, &err);
    check(ok && strcmp(got, "conv.weight[8,3,1,1,5] bn.running_mean[8] bn.running_var[8] "
                            "fc.weight[2,8]") == 0,
          "map: an invertible unsqueeze and reshape (the reverse checked) (%s%s)", got,
          err.msg);
    const struct {
        const char *text, *want, *what;
    } bad[] = {
        {"not-invertible x\nsqueeze conv.weight 1\n", "line 2: tensor 'conv.weight' [8,3,1,5]",
         "a squeeze of an axis that is not 1"},
        {"not-invertible x\nreshape fc.weight [3,-1]\n", "line 2: tensor 'fc.weight'",
         "a reshape that does not divide"},
        {"not-invertible x\nreshape fc.weight [17]\n", "line 2", "a reshape to another count"},
        {"not-invertible x\nunsqueeze bn.* 5\n", "line 2: tensor 'bn.running_mean'",
         "an unsqueeze past the last axis"},
        {"not-invertible x\nadd b = [=3] if fc.weight\n", "line 2: tensor 'fc.weight' has no dim 3",
         "an add naming a dim the sibling lacks"},
        {"invertible\nreshape fc.weight [4,4]\n", "line 2: a reshape with no FROM-SHAPE",
         "a reshape with no FROM-SHAPE in an invertible map"},
        {"invertible\nadd x int64 []\n", "line 2: an add", "an add in an invertible map"},
        {"not-invertible x\nadd x int3 []\n", "line 2: add: no type", "an unknown type"},
        {"not-invertible x\nadd x = []\n", "line 2", "'=' with no sibling"},
        {"not-invertible x\nreshape a [1,,2]\n", "line 2", "an empty dim"},
        {"not-invertible x\nreshape a [-1,-1]\n", "line 2", "two -1"},
        {"not-invertible x\nreshape a [2199023255553]\n", "line 2", "a dim past 2^40"},
        {"not-invertible x\nsqueeze a 64\n", "line 2: an axis", "an axis past 63"},
        {"not-invertible x\nadd num_batches_tracked int64 [] if running_mean\n"
         "rename bn.running_var bn.num_batches_tracked\n",
         "line 3", "an added name another tensor then takes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ok = layout_to(bad[i].text, in, 4, got, sizeof got, &err);
        check(!ok && strstr(err.msg, bad[i].want) != NULL && strchr(err.msg, '\n') == NULL,
              "map: %s is refused in one line naming '%s' (%s)", bad[i].what, bad[i].want,
              err.msg);
    }
    const char *names[] = {"a"};
    check(refused_at("not-invertible x\nsqueeze a 0\n", names, 1, "line 2: tensor 'a'"),
          "map: a layout rule on names alone (no shapes) is refused naming the tensor");
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
    test_layout();
    test_order();
    test_find();
}
