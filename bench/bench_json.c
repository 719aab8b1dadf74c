/* SPDX-License-Identifier: Apache-2.0 */
/* Benchmark and behaviour probe of the JSON libraries ckptfs could parse
 * safetensors headers with: jansson, json-c and cJSON (Debian 12 packages).
 *
 *   bench_json_LIB bench FILE [REPS] [--header]  parse + walk + free
 *   bench_json_LIB behave                        hostile headers (a-g)
 *
 * Built once per library (-DUSE_JANSSON, -DUSE_JSONC or -DUSE_CJSON, see
 * bench_json.sh): jansson and json-c export the same symbol names
 * (json_object_get, json_object_iter...), so one process cannot hold both.
 * Each library (and each set of flags worth comparing) runs in a forked
 * child of its own, so that one's heap and peak RSS do not colour the
 * next's.  The
 * walk does what a reader does: every tensor's dtype, shape and
 * data_offsets read, each checked to be of the right JSON type, and the
 * byte size checked against the offsets. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 64

/* ---- counting allocator (jansson and cJSON take one; json-c does not) */

/* Each block carries its size in front, because the free hooks are not
 * given it; 16 bytes keep the block max_align_t aligned. */
static size_t hook_live, hook_peak;

__attribute__((unused)) static void *count_malloc(size_t n)
{
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    hook_live += n;
    if (hook_live > hook_peak)
        hook_peak = hook_live;
    return (char *)p + 16;
}

__attribute__((unused)) static void count_free(void *q)
{
    if (!q)
        return;
    size_t *p = (size_t *)((char *)q - 16);
    hook_live -= p[0];
    free(p);
}

/* ---- what a reader checks of each tensor, shared by the three walks */

static int itemsize(const char *dtype)
{
    static const struct { const char *name; int size; } t[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
        {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(dtype, t[i].name) == 0)
            return t[i].size;
    return -1;
}

/* Totals the walk keeps, so that the compiler cannot drop the reads. */
struct walk {
    long tensors;
    uint64_t bytes;
};

/* One tensor seen: shape product already taken; -1 if inconsistent. */
static int check_tensor(struct walk *w, const char *dtype, uint64_t elems,
                        uint64_t begin, uint64_t end)
{
    int size = itemsize(dtype);
    if (size < 0 || end < begin || end - begin != elems * (uint64_t)size)
        return -1;
    w->tensors++;
    w->bytes += end - begin;
    return 0;
}

#if defined(USE_JANSSON)
#include <jansson.h>
/* ---- jansson */

static int jn_uint(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int jn_tensor(json_t *t, struct walk *w)
{
    json_t *dt = json_object_get(t, "dtype");
    json_t *sh = json_object_get(t, "shape");
    json_t *off = json_object_get(t, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return -1;
    uint64_t elems = 1, d, begin, end;
    size_t i;
    json_t *v;
    json_array_foreach(sh, i, v) {
        if (jn_uint(v, &d) < 0)
            return -1;
        elems *= d;
    }
    if (jn_uint(json_array_get(off, 0), &begin) < 0 ||
        jn_uint(json_array_get(off, 1), &end) < 0)
        return -1;
    return check_tensor(w, json_string_value(dt), elems, begin, end);
}

static int jn_walk(void *doc, struct walk *w)
{
    const char *key;
    json_t *val;
    if (!json_is_object((json_t *)doc))
        return -1;
    json_object_foreach((json_t *)doc, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val))
                return -1;
            continue;
        }
        if (!json_is_object(val) || jn_tensor(val, w) < 0)
            return -1;
    }
    return 0;
}

static void *jn_parse_flags(const char *buf, size_t len, size_t flags,
                            char *err, size_t errlen)
{
    json_error_t e;
    json_t *doc = json_loadb(buf, len, flags, &e);
    if (!doc)
        snprintf(err, errlen, "position %d, line %d, column %d: %s",
                 e.position, e.line, e.column, e.text);
    return doc;
}

static void *jn_parse(const char *b, size_t n, char *err, size_t l)
{
    return jn_parse_flags(b, n, 0, err, l);
}

static void *jn_parse_rd(const char *b, size_t n, char *err, size_t l)
{
    return jn_parse_flags(b, n, JSON_REJECT_DUPLICATES, err, l);
}

static void jn_free(void *doc) { json_decref(doc); }
static void jn_hooks(void) { json_set_alloc_funcs(count_malloc, count_free); }

static void jn_describe(json_t *v, char *out, size_t n)
{
    size_t len = strlen(out);
    out += len;
    n -= len;
    if (json_is_integer(v))
        snprintf(out, n, "int %lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(out, n, "real %.17g", json_real_value(v));
    else if (json_is_string(v))
        snprintf(out, n, "string of %zu bytes", json_string_length(v));
    else if (json_is_array(json_object_get(v, "data_offsets")))
        snprintf(out, n, "tensor at %lld", (long long)json_integer_value(
                     json_array_get(json_object_get(v, "data_offsets"), 0)));
    else
        snprintf(out, n, "type %d", json_typeof(v));
}

/* Members as iterated (key length as the library keeps it), and the
 * value the library's own lookup of "a" returns. */
static void jn_dump(void *doc, char *out, size_t n)
{
    const char *key;
    size_t klen;
    json_t *val;
    if (!json_is_object((json_t *)doc)) {
        snprintf(out, n, "top: type %d", json_typeof((json_t *)doc));
        return;
    }
    snprintf(out, n, "%zu member(s)", json_object_size(doc));
    json_object_keylen_foreach((json_t *)doc, key, klen, val) {
        snprintf(out + strlen(out), n - strlen(out), "; key of %zu bytes: ",
                 klen);
        jn_describe(val, out, n);
    }
    json_t *a = json_object_get(doc, "a");
    snprintf(out + strlen(out), n - strlen(out), "; get(\"a\"): ");
    if (a)
        jn_describe(a, out, n);
    else
        snprintf(out + strlen(out), n - strlen(out), "none");
}

#elif defined(USE_JSONC)
#include <json-c/json.h>
/* ---- json-c */

static int jc_uint(struct json_object *v, uint64_t *out)
{
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
        return -1;
    *out = (uint64_t)json_object_get_int64(v);
    return 0;
}

static int jc_tensor(struct json_object *t, struct walk *w)
{
    struct json_object *dt, *sh, *off;
    if (!json_object_object_get_ex(t, "dtype", &dt) ||
        !json_object_object_get_ex(t, "shape", &sh) ||
        !json_object_object_get_ex(t, "data_offsets", &off))
        return -1;
    if (!json_object_is_type(dt, json_type_string) ||
        !json_object_is_type(sh, json_type_array) ||
        !json_object_is_type(off, json_type_array) ||
        json_object_array_length(off) != 2)
        return -1;
    uint64_t elems = 1, d, begin, end;
    size_t rank = json_object_array_length(sh);
    for (size_t i = 0; i < rank; i++) {
        if (jc_uint(json_object_array_get_idx(sh, i), &d) < 0)
            return -1;
        elems *= d;
    }
    if (jc_uint(json_object_array_get_idx(off, 0), &begin) < 0 ||
        jc_uint(json_object_array_get_idx(off, 1), &end) < 0)
        return -1;
    return check_tensor(w, json_object_get_string(dt), elems, begin, end);
}

static int jc_walk(void *doc, struct walk *w)
{
    if (!json_object_is_type(doc, json_type_object))
        return -1;
    json_object_object_foreach((struct json_object *)doc, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_object_is_type(val, json_type_object))
                return -1;
            continue;
        }
        if (!json_object_is_type(val, json_type_object) ||
            jc_tensor(val, w) < 0)
            return -1;
    }
    return 0;
}

/* The whole buffer is the document: a tokener still waiting for more
 * (json_tokener_continue) has been handed a truncated header. */
static void *jc_parse_flags(const char *buf, size_t len, int flags,
                            char *err, size_t errlen)
{
    if (len > INT32_MAX) {
        snprintf(err, errlen, "buffer over INT_MAX bytes");
        return NULL;
    }
    struct json_tokener *tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
    json_tokener_set_flags(tok, flags);
    struct json_object *doc = json_tokener_parse_ex(tok, buf, (int)len);
    enum json_tokener_error e = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    if (!doc)
        snprintf(err, errlen, "parse end %zu: %s", end,
                 json_tokener_error_desc(e));
    else if (end < len)
        snprintf(err, errlen, "parse end %zu of %zu", end, len);
    else
        err[0] = 0;
    json_tokener_free(tok);
    return doc;
}

static void *jc_parse(const char *b, size_t n, char *err, size_t l)
{
    return jc_parse_flags(b, n, 0, err, l);
}

static void *jc_parse_strict(const char *b, size_t n, char *err, size_t l)
{
    return jc_parse_flags(b, n, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8,
                          err, l);
}

static void jc_free(void *doc) { json_object_put(doc); }

static void jc_describe(struct json_object *v, char *out, size_t n)
{
    size_t len = strlen(out);
    out += len;
    n -= len;
    switch (json_object_get_type(v)) {
    case json_type_int:
        snprintf(out, n, "int, get_int64 %lld, get_uint64 %llu",
                 (long long)json_object_get_int64(v),
                 (unsigned long long)json_object_get_uint64(v));
        break;
    case json_type_double:
        snprintf(out, n, "double %.17g", json_object_get_double(v));
        break;
    case json_type_string:
        snprintf(out, n, "string of %d bytes", json_object_get_string_len(v));
        break;
    case json_type_object: {
        struct json_object *off;
        if (json_object_object_get_ex(v, "data_offsets", &off)) {
            snprintf(out, n, "tensor at %lld", (long long)json_object_get_int64(
                         json_object_array_get_idx(off, 0)));
            break;
        }
    }
        /* fall through */
    default:
        snprintf(out, n, "type %s", json_type_to_name(json_object_get_type(v)));
    }
}

static void jc_dump(void *doc, char *out, size_t n)
{
    if (!json_object_is_type(doc, json_type_object)) {
        snprintf(out, n, "top: ");
        jc_describe(doc, out, n);
        return;
    }
    snprintf(out, n, "%d member(s)", json_object_object_length(doc));
    json_object_object_foreach((struct json_object *)doc, key, val) {
        snprintf(out + strlen(out), n - strlen(out),
                 "; key of %zu bytes: ", strlen(key));
        jc_describe(val, out, n);
    }
    struct json_object *a;
    snprintf(out + strlen(out), n - strlen(out), "; get(\"a\"): ");
    if (json_object_object_get_ex(doc, "a", &a))
        jc_describe(a, out, n);
    else
        snprintf(out + strlen(out), n - strlen(out), "none");
}

#elif defined(USE_CJSON)
#include <cjson/cJSON.h>
/* ---- cJSON */

/* cJSON keeps every number as a double: an integer is one that is whole,
 * and exact only up to 2^53, which the reader must check itself. */
static int cj_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (d < 0 || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cj_tensor(const cJSON *t, struct walk *w)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        return -1;
    uint64_t elems = 1, d, begin, end;
    const cJSON *v;
    cJSON_ArrayForEach(v, sh) {
        if (cj_uint(v, &d) < 0)
            return -1;
        elems *= d;
    }
    if (cj_uint(off->child, &begin) < 0 || cj_uint(off->child->next, &end) < 0)
        return -1;
    return check_tensor(w, dt->valuestring, elems, begin, end);
}

static int cj_walk(void *doc, struct walk *w)
{
    const cJSON *val;
    if (!cJSON_IsObject((cJSON *)doc))
        return -1;
    cJSON_ArrayForEach(val, (cJSON *)doc) {
        if (strcmp(val->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(val))
                return -1;
            continue;
        }
        if (!cJSON_IsObject(val) || cj_tensor(val, w) < 0)
            return -1;
    }
    return 0;
}

static void *cj_parse(const char *buf, size_t len, char *err, size_t errlen)
{
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!doc)
        snprintf(err, errlen, "error pointer at offset %td",
                 end ? end - buf : (ptrdiff_t)-1);
    else if ((size_t)(end - buf) < len)
        snprintf(err, errlen, "parse end %td of %zu", end - buf, len);
    else
        err[0] = 0;
    return doc;
}

static void cj_free(void *doc) { cJSON_Delete(doc); }

static void cj_hooks(void)
{
    cJSON_Hooks h = {count_malloc, count_free};
    cJSON_InitHooks(&h);
}

static void cj_describe(const cJSON *v, char *out, size_t n)
{
    size_t len = strlen(out);
    out += len;
    n -= len;
    if (cJSON_IsNumber(v))
        snprintf(out, n, "number %.17g (valueint %d)", v->valuedouble,
                 v->valueint);
    else if (cJSON_IsString(v))
        snprintf(out, n, "string of %zu bytes", strlen(v->valuestring));
    else if (cJSON_GetObjectItemCaseSensitive(v, "data_offsets"))
        snprintf(out, n, "tensor at %.17g", cJSON_GetObjectItemCaseSensitive(
                     v, "data_offsets")->child->valuedouble);
    else
        snprintf(out, n, "type 0x%x", v->type & 0xff);
}

static void cj_dump(void *doc, char *out, size_t n)
{
    const cJSON *val;
    snprintf(out, n, "%d member(s)", cJSON_GetArraySize(doc));
    cJSON_ArrayForEach(val, (cJSON *)doc) {
        snprintf(out + strlen(out), n - strlen(out), "; %s of %zu bytes: ",
                 cJSON_IsObject((cJSON *)doc) ? "key" : "item",
                 val->string ? strlen(val->string) : 0);
        cj_describe(val, out, n);
    }
    if (!cJSON_IsObject((cJSON *)doc))
        return;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, "a");
    snprintf(out + strlen(out), n - strlen(out), "; get(\"a\"): ");
    if (a)
        cj_describe(a, out, n);
    else
        snprintf(out + strlen(out), n - strlen(out), "none");
}

#else
#error "build with -DUSE_JANSSON, -DUSE_JSONC or -DUSE_CJSON"
#endif

/* ---- the libraries and flags compared */

struct lib {
    const char *name;
    void *(*parse)(const char *buf, size_t len, char *err, size_t errlen);
    int (*walk)(void *doc, struct walk *w);
    void (*free)(void *doc);
    void (*hooks)(void); /* NULL: no allocator hooks */
    void (*dump)(void *doc, char *out, size_t n);
};

static const struct lib libs[] = {
#if defined(USE_JANSSON)
    {"jansson", jn_parse, jn_walk, jn_free, jn_hooks, jn_dump},
    {"jansson REJECT_DUPLICATES", jn_parse_rd, jn_walk, jn_free, jn_hooks, jn_dump},
#elif defined(USE_JSONC)
    {"json-c", jc_parse, jc_walk, jc_free, NULL, jc_dump},
    {"json-c STRICT+VALIDATE_UTF8", jc_parse_strict, jc_walk, jc_free, NULL, jc_dump},
#elif defined(USE_CJSON)
    {"cJSON", cj_parse, cj_walk, cj_free, cj_hooks, cj_dump},
#endif
};
#define NLIBS (sizeof libs / sizeof libs[0])

/* ---- bench */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static char *load(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(path);
        exit(1);
    }
    char *buf = malloc(st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, st.st_size - got);
        if (r <= 0) {
            perror(path);
            exit(1);
        }
        got += r;
    }
    close(fd);
    *len = got;
    return buf;
}

static long vm_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0)
            v = atol(line + n + 1);
    if (f)
        fclose(f);
    return v;
}

/* What a child sends its parent. */
struct result {
    int ok;
    long tensors;
    double parse, walk, free, total; /* medians, seconds */
    long base_kib;                   /* VmRSS with the buffer loaded */
    size_t heap_doc;                 /* mallinfo2 growth with the doc held */
    size_t hook_peak;                /* 0: no hooks */
};

static size_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* hooked: the library allocates through count_malloc, for the hook peak
 * only; the timed and RSS runs go without, as the hooks cost time and 16
 * bytes a block. */
static void bench_child(const struct lib *lib, const char *path, int reps,
                        int hooked, int fd)
{
    struct result r = {0};
    double tp[MAX_REPS], tw[MAX_REPS], tf[MAX_REPS], tt[MAX_REPS];
    char err[256];
    size_t len;
    char *buf = load(path, &len);
    if (hooked)
        lib->hooks();
    /* Peak RSS from here on only: clear_refs 5 resets VmHWM to VmRSS. */
    int cr = open("/proc/self/clear_refs", O_WRONLY);
    if (cr < 0 || write(cr, "5", 1) != 1)
        perror("clear_refs");
    close(cr);
    r.base_kib = vm_kib("VmRSS:");
    r.ok = 1;
    for (int i = 0; i < reps; i++) {
        struct walk w = {0};
        size_t h0 = heap_used();
        double t0 = now();
        void *doc = lib->parse(buf, len, err, sizeof err);
        double t1 = now();
        if (!doc || lib->walk(doc, &w) < 0) {
            fprintf(stderr, "%s: refused: %s\n", lib->name, doc ? "walk" : err);
            r.ok = 0;
        }
        double t2 = now();
        if (i == 0)
            r.heap_doc = heap_used() - h0;
        if (doc)
            lib->free(doc);
        double t3 = now();
        tp[i] = t1 - t0;
        tw[i] = t2 - t1;
        tf[i] = t3 - t2;
        tt[i] = t3 - t0;
        r.tensors = w.tensors;
    }
    r.parse = median(tp, reps);
    r.walk = median(tw, reps);
    r.free = median(tf, reps);
    r.total = median(tt, reps);
    r.hook_peak = hook_peak;
    if (write(fd, &r, sizeof r) != sizeof r)
        perror("write");
    _exit(0);
}

/* Runs bench_child in a child; its result, and its rusage in *ru. */
static int run_child(const struct lib *lib, const char *path, int reps,
                     int hooked, struct result *r, struct rusage *ru)
{
    int p[2], status;
    if (pipe(p) < 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        bench_child(lib, path, reps, hooked, p[1]);
    }
    close(p[1]);
    ssize_t got = read(p[0], r, sizeof *r);
    close(p[0]);
    wait4(pid, &status, 0, ru);
    return got == sizeof *r && WIFEXITED(status) ? 0 : -1;
}

static void print_header(const char *path, int reps)
{
    size_t len;
    free(load(path, &len));
    printf("# %s: %zu bytes, %d reps, medians; memory: peak RSS over the "
           "loaded buffer (ru_maxrss), heap held by the document "
           "(mallinfo2), peak bytes through the allocator hooks (own run)\n",
           path, len, reps);
    printf("| library | tensors | parse ms | walk ms | free ms | total ms "
           "| peak RSS MiB | heap MiB | hook peak MiB |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

static int bench(const char *path, int reps, int header)
{
    if (header)
        print_header(path, reps);
    for (size_t i = 0; i < NLIBS; i++) {
        struct result r, rh;
        struct rusage ru, ruh;
        if (run_child(&libs[i], path, reps, 0, &r, &ru) < 0) {
            printf("| %s | child failed |\n", libs[i].name);
            continue;
        }
        char hook[32] = "n/a";
        if (libs[i].hooks && run_child(&libs[i], path, 1, 1, &rh, &ruh) == 0)
            snprintf(hook, sizeof hook, "%.1f", rh.hook_peak / 1048576.0);
        printf("| %s | %ld%s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
               libs[i].name, r.tensors, r.ok ? "" : " (refused)",
               r.parse * 1e3, r.walk * 1e3, r.free * 1e3, r.total * 1e3,
               (ru.ru_maxrss - r.base_kib) / 1024.0, r.heap_doc / 1048576.0,
               hook);
    }
    return 0;
}

/* ---- behaviour */

/* Runs one probe in a child, so that a crash (a stack overflow in deep
 * nesting) is reported as such and not taken for the library's answer. */
static void probe(const struct lib *lib, const char *buf, size_t len,
                  char *out, size_t n)
{
    int p[2];
    if (pipe(p) < 0) {
        snprintf(out, n, "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        char msg[1024], err[256] = "";
        close(p[0]);
        void *doc = lib->parse(buf, len, err, sizeof err);
        if (!doc) {
            snprintf(msg, sizeof msg, "refused (%s)", err);
        } else {
            snprintf(msg, sizeof msg, "accepted%s%s%s: ", err[0] ? " (" : "",
                     err, err[0] ? ")" : "");
            lib->dump(doc, msg + strlen(msg), sizeof msg - strlen(msg));
        }
        if (write(p[1], msg, strlen(msg) + 1) < 0)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    ssize_t got = read(p[0], out, n - 1);
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    out[got > 0 ? got : 0] = 0;
    if (WIFSIGNALED(status))
        snprintf(out, n, "crashed (signal %d)", WTERMSIG(status));
}

/* One line per library: "NN|test|library|answer", NN the test's order,
 * so that bench_json.sh can merge the three binaries' answers by test. */
static int test_no;

static void show(const char *what, const char *buf, size_t len)
{
    char out[1024];
    test_no++;
    for (size_t i = 0; i < NLIBS; i++) {
        probe(&libs[i], buf, len, out, sizeof out);
        printf("%02d|%s|%s|%s\n", test_no, what, libs[i].name, out);
    }
}

#define SHOW(what, lit) show(what, lit, sizeof(lit) - 1)

/* "[[...]]" of depth d, balanced or not. */
static char *nested(size_t d, int balanced, size_t *len)
{
    char *s = malloc(2 * d + 1);
    memset(s, '[', d);
    if (balanced)
        memset(s + d, ']', d);
    *len = balanced ? 2 * d : d;
    return s;
}

static int accepts(const struct lib *lib, const char *buf, size_t len)
{
    char out[1024];
    probe(lib, buf, len, out, sizeof out);
    return strncmp(out, "accepted", 8) == 0;
}

/* Deepest balanced nesting accepted, by bisection up to 100000. */
static void depth_limits(void)
{
    test_no++;
    for (size_t i = 0; i < NLIBS; i++) {
        size_t lo = 0, hi = 100001, len;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            char *s = nested(mid, 1, &len);
            if (accepts(&libs[i], s, len))
                lo = mid;
            else
                hi = mid;
            free(s);
        }
        printf("%02d|(d) deepest balanced [[...]] accepted (bisection to 100000)"
               "|%s|%zu\n", test_no, libs[i].name, lo);
    }
}

static int behave(void)
{
    SHOW("(a) duplicate key: {\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2}");
    SHOW("(a) duplicate tensor name, other offsets",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}");
    SHOW("(b) invalid UTF-8: byte 0xff in a string", "{\"a\":\"x\xffy\"}");
    SHOW("(b) invalid UTF-8: overlong \"/\" (c0 af)", "{\"a\":\"\xc0\xaf\"}");
    SHOW("(b) invalid UTF-8: encoded surrogate (ed a0 80)",
         "{\"a\":\"\xed\xa0\x80\"}");
    SHOW("(b) invalid UTF-8: truncated sequence at the end of a key (e2 82)",
         "{\"\xe2\x82\":1}");
    SHOW("(b) escaped lone surrogate \\ud800", "{\"a\":\"\\ud800\"}");
    /* The error is the ']' after "1,", at byte 31. */
    SHOW("(c) error position: trailing comma, the bad ']' at byte 31",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}");
    SHOW("(c) error position: line 3, column 5, the bad token at byte 13",
         "{\n\"a\":1,\n\"b\":x}");
    SHOW("(c) truncated header (20 bytes)", "{\"a\":{\"dtype\":\"F32\",");
    size_t len;
    char *deep = nested(100000, 0, &len);
    show("(d) 100000 '[' unbalanced", deep, len);
    free(deep);
    deep = nested(100000, 1, &len);
    show("(d) 100000 '[' balanced", deep, len);
    free(deep);
    depth_limits();
    SHOW("(e) 2^53+1 = 9007199254740993", "{\"a\":9007199254740993}");
    SHOW("(e) 2^63-1 = 9223372036854775807", "{\"a\":9223372036854775807}");
    SHOW("(e) 2^63 = 9223372036854775808", "{\"a\":9223372036854775808}");
    SHOW("(e) 2^64-1 = 18446744073709551615", "{\"a\":18446744073709551615}");
    SHOW("(e) 2^64 = 18446744073709551616", "{\"a\":18446744073709551616}");
    SHOW("(e) -1", "{\"a\":-1}");
    SHOW("(e) 4.0", "{\"a\":4.0}");
    SHOW("(e) 4e0", "{\"a\":4e0}");
    SHOW("(f) NUL in a key: {\"a\\u0000b\":1,\"a\":2}",
         "{\"a\\u0000b\":1,\"a\":2}");
    SHOW("(f) NUL in a value: {\"a\":\"x\\u0000y\"}", "{\"a\":\"x\\u0000y\"}");
    SHOW("(g) trailing spaces (the writer's padding)", "{\"a\":1}   ");
    SHOW("(g) trailing garbage", "{\"a\":1} x");
    SHOW("(g) two documents", "{\"a\":1}{\"a\":2}");
    SHOW("(g) top level not an object", "[1]");
    SHOW("(g) NaN", "{\"a\":NaN}");
    SHOW("(g) single quotes", "{'a':1}");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "bench") == 0) {
        int reps = argc > 3 ? atoi(argv[3]) : 5;
        if (reps < 1 || reps > MAX_REPS)
            reps = 5;
        return bench(argv[2], reps, argc > 4 && strcmp(argv[4], "--header") == 0);
    }
    if (argc == 2 && strcmp(argv[1], "behave") == 0)
        return behave();
    fprintf(stderr, "usage: bench_json_LIB bench FILE [REPS [--header]] | bench_json_LIB behave\n");
    return 2;
}
