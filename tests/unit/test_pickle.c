/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of oneflow_pickle: pickles written opcode by opcode here, in
 * the shapes Python's pickler gives a OneFlow state dict at protocols 2
 * and 4 (the oracle-driven tests in tests/bats/oneflow_dir.bats use
 * Python's own pickler), then every truncation of them, hostile globals,
 * bad paths and duplicates, each refused with the offending offset.  And
 * oneflow_dir's on-demand reads: a tensor's `out` replaced after the open
 * is not read as the tensor.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../codec/oneflow/oneflow_dir.h"
#include "../../codec/oneflow/oneflow_pickle.h"
#include "unit.h"

typedef struct pk {
    unsigned char b[4096];
    size_t n;
    int proto;
    unsigned memo;
} pk;

static void raw(pk *p, const void *s, size_t n)
{
    if (p->n + n <= sizeof p->b)
        memcpy(p->b + p->n, s, n);
    p->n += n;
}

#define RAW(p, lit) raw(p, lit, sizeof lit - 1)

static void op(pk *p, unsigned char c)
{
    raw(p, &c, 1);
}

static void memoize(pk *p)
{
    if (p->proto >= 4) {
        op(p, 0x94);
    } else {
        op(p, 'q');
        op(p, (unsigned char)p->memo);
    }
    p->memo++;
}

static void str(pk *p, const char *s)
{
    size_t n = strlen(s);
    if (p->proto >= 4 && n < 256) {
        op(p, 0x8c);
        op(p, (unsigned char)n);
    } else {
        op(p, 'X');
        unsigned char l[4] = {(unsigned char)n, (unsigned char)(n >> 8), 0, 0};
        raw(p, l, 4);
    }
    raw(p, s, n);
    memoize(p);
}

static void global(pk *p, const char *mod, const char *name)
{
    if (p->proto >= 4) {
        str(p, mod);
        str(p, name);
        op(p, 0x93);
    } else {
        op(p, 'c');
        raw(p, mod, strlen(mod));
        op(p, '\n');
        raw(p, name, strlen(name));
        op(p, '\n');
    }
    memoize(p);
}

/* One entry: name -> cls() with state {"path": path}. */
static void entry(pk *p, const char *name, const char *path)
{
    str(p, name);
    global(p, "oneflow.nn", "Parameter");
    op(p, ')');
    op(p, 0x81);
    memoize(p);
    op(p, '}');
    memoize(p);
    str(p, "path");
    str(p, path);
    op(p, 's');
    op(p, 'b');
}

/* {"protocol_version": version, "data": OrderedDict(entries)}; names and
 * paths alternate in the NULL-ended list. */
static void state_dict(pk *p, int proto, int version, const char *const *np)
{
    *p = (pk){.proto = proto};
    op(p, 0x80);
    op(p, (unsigned char)proto);
    op(p, '}');
    memoize(p);
    op(p, '(');
    str(p, "protocol_version");
    op(p, 'K');
    op(p, (unsigned char)version);
    str(p, "data");
    global(p, "collections", "OrderedDict");
    op(p, ')');
    op(p, 'R');
    memoize(p);
    op(p, '(');
    for (; np[0] != NULL; np += 2)
        entry(p, np[0], np[1]);
    op(p, 'u');
    op(p, 'u');
    op(p, '.');
}

static int parse(const pk *p, ck_pickle_names *out, ck_error *err)
{
    return ck_pickle_names_parse(p->b, p->n, "pickled_data", out, err);
}

static bool refused(const pk *p, const char *needle)
{
    ck_pickle_names names;
    ck_error err = {0};
    int rc = parse(p, &names, &err);
    ck_pickle_names_free(&names);
    bool ok = rc < 0 && strncmp(err.msg, "pickled_data: offset ", 21) == 0 &&
              (needle == NULL || strstr(err.msg, needle) != NULL);
    if (!ok)
        fprintf(stderr, "# %s\n", err.msg);
    return ok;
}

static void test_accepted(void)
{
    static const char *const np[] = {"weight", "tensor_5", "a/b.c", "tensor_6",
                                     "\xc3\xa9t\xc3\xa9", "tensor_7", NULL};
    for (int proto = 2; proto <= 5; proto++) {
        pk p;
        ck_pickle_names names;
        ck_error err = {0};
        state_dict(&p, proto, 1, np);
        int rc = parse(&p, &names, &err);
        check(rc == 0 && names.n == 3 && strcmp(names.v[0].name, "weight") == 0 &&
              strcmp(names.v[1].name, "a/b.c") == 0 && strcmp(names.v[2].path, "tensor_7") == 0,
              "pickle: protocol %d state dict read in order (%s)", proto, err.msg);
        ck_pickle_names_free(&names);
    }
    static const char *const none[] = {NULL};
    pk p;
    ck_pickle_names names;
    ck_error err = {0};
    state_dict(&p, 4, 1, none);
    check(parse(&p, &names, &err) == 0 && names.n == 0, "pickle: an empty state dict");
    ck_pickle_names_free(&names);
}

static void test_truncated(void)
{
    static const char *const np[] = {"weight", "tensor_5", "bias", "tensor_6", NULL};
    pk p;
    state_dict(&p, 4, 1, np);
    size_t bad = 0;
    for (size_t n = 0; n < p.n; n++) {
        ck_pickle_names names;
        ck_error err = {0};
        if (ck_pickle_names_parse(p.b, n, "pickled_data", &names, &err) == 0 ||
            strstr(err.msg, "pickled_data: offset ") == NULL)
            bad++;
        ck_pickle_names_free(&names);
    }
    check(bad == 0, "pickle: each of its %zu truncations refused with an offset", p.n);
}

static void test_refused(void)
{
    static const char *const dup_name[] = {"w", "tensor_1", "w", "tensor_2", NULL};
    static const char *const dup_path[] = {"w", "tensor_1", "b", "tensor_1", NULL};
    static const char *const slash[] = {"w", "a/b", NULL};
    static const char *const dotdot[] = {"w", "..", NULL};
    pk p;
    state_dict(&p, 4, 2, dup_name + 4);
    check(refused(&p, "protocol_version"), "pickle: protocol_version 2 refused");
    state_dict(&p, 4, 1, dup_name);
    check(refused(&p, "the name 'w' is given twice"), "pickle: a duplicate name refused");
    state_dict(&p, 3, 1, dup_path);
    check(refused(&p, "tensor directory 'tensor_1' is given twice"),
          "pickle: a duplicate tensor directory refused");
    state_dict(&p, 4, 1, slash);
    check(refused(&p, "one directory name"), "pickle: a path with '/' refused");
    state_dict(&p, 2, 1, dotdot);
    check(refused(&p, "one directory name"), "pickle: the path '..' refused");

    /* os.system("true"): refused at the GLOBAL, which is never resolved. */
    p = (pk){.proto = 2};
    RAW(&p, "\x80\x02" "cos\nsystem\n" "X\x04\0\0\0true" "\x85R.");
    check(refused(&p, "offset 2: global os.system is not one of"),
          "pickle: GLOBAL os.system refused at its offset");
    p = (pk){.proto = 4};
    RAW(&p, "\x80\x04" "\x8c\x08" "builtins" "\x8c\x04" "eval" "\x93");
    check(refused(&p, "offset 18: global builtins.eval"), "pickle: STACK_GLOBAL builtins.eval "
          "refused");
    /* An allowed class called with an argument. */
    p = (pk){.proto = 2};
    RAW(&p, "\x80\x02" "ccollections\nOrderedDict\n" "K\x01\x85R.");
    check(refused(&p, "offset 30: a class called with arguments"),
          "pickle: OrderedDict(1) refused");
    /* 100 marks. */
    p = (pk){.proto = 2};
    RAW(&p, "\x80\x02");
    for (int i = 0; i < 100; i++)
        op(&p, '(');
    check(refused(&p, "offset 66: marks nested deeper"), "pickle: deep MARK nesting refused");
    /* A BINUNICODE8 length of 2^63. */
    p = (pk){.proto = 4};
    RAW(&p, "\x80\x04\x8d\0\0\0\0\0\0\0\x80" "abc.");
    check(refused(&p, "offset 2: truncated"), "pickle: a huge length refused");
    p = (pk){.proto = 4};
    RAW(&p, "\x80\x04}h\x05.");
    check(refused(&p, "offset 3: a memo index that was never stored"),
          "pickle: BINGET of an unknown memo index refused");
    p = (pk){.proto = 4};
    RAW(&p, "\x80\x04}\x94.x");
    check(refused(&p, "offset 5: bytes after STOP"), "pickle: bytes after STOP refused");
    p = (pk){.proto = 4};
    RAW(&p, "\x80\x04" "i" "os\nsystem\n" ".");
    check(refused(&p, "offset 2: opcode 0x69"), "pickle: INST refused");
}

/* The real pickled_data of OneFlow's test data, read in place, and every
 * truncation of it. */
static void test_fixture(void)
{
    const char *path = "../shared/fixtures/oneflow/new_pickled_3x3_i3o3_conv2d_params/"
                       "pickled_data";
    unsigned char buf[4096];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    ck_pickle_names names;
    ck_error err = {0};
    int rc = ck_pickle_names_parse(buf, n, path, &names, &err);
    check(rc == 0 && names.n == 2 && strcmp(names.v[0].name, "weight") == 0 &&
          strcmp(names.v[0].path, "tensor_5") == 0 && strcmp(names.v[1].name, "bias") == 0 &&
          strcmp(names.v[1].path, "tensor_6") == 0,
          "pickle: the fixture's pickled_data is weight/tensor_5, bias/tensor_6 (%s)", err.msg);
    ck_pickle_names_free(&names);
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) {
        if (ck_pickle_names_parse(buf, k, path, &names, &err) == 0 ||
            strstr(err.msg, ": offset ") == NULL)
            bad++;
        ck_pickle_names_free(&names);
    }
    check(n == 190 && bad == 0, "pickle: each truncation of the fixture's refused with an offset");
}

static void put(const char *dir, const char *rel, const void *bytes, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "wb");
    if (f == NULL || fwrite(bytes, 1, n, f) != n || fclose(f) != 0)
        check(0, "write %s", p);
}

static void test_replaced_out(void)
{
    char dir[300], p[400], q[400];
    snprintf(dir, sizeof dir, "%s/oneflow-snap", tmpdir);
    snprintf(p, sizeof p, "%s/w", dir);
    if (mkdir(dir, 0700) < 0 || mkdir(p, 0700) < 0) {
        check(0, "oneflow_dir: make %s", p);
        return;
    }
    static const char meta[] = "shape {\n  dim: 2\n}\ndata_type: kFloat\n";
    put(dir, "w/meta", meta, sizeof meta - 1);
    put(dir, "w/out", "abcdefgh", 8);
    put(dir, "snapshot_done", "", 0);
    ck_error err = {0};
    char buf[8];
    ck_model *m = ck_oneflow_open(dir, &err);
    const ck_tensor *t = m ? &m->index.tensors[m->index.live[0]] : NULL;
    check(t != NULL && ck_model_read(m, t, buf, 8, 0, &err) == 8 && memcmp(buf, "abcdefgh", 8) == 0,
          "oneflow_dir: a legacy snapshot's tensor read from its out (%s)", err.msg);
    put(dir, "w/new", "ABCDEFGH", 8);
    snprintf(p, sizeof p, "%s/w/new", dir);
    snprintf(q, sizeof q, "%s/w/out", dir);
    rename(p, q);
    check(t != NULL && ck_model_read(m, t, buf, 8, 0, &err) < 0 &&
          strstr(err.msg, "w/out: changed since the snapshot was opened") != NULL,
          "oneflow_dir: an out renamed over after the open is refused (%s)", err.msg);
    ck_model_close(m);
}

void test_pickle(void)
{
    test_replaced_out();
    test_fixture();
    test_accepted();
    test_truncated();
    test_refused();
}
