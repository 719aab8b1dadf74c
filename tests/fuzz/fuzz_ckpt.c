/*
 * libFuzzer target: any byte string given to the model opener must be
 * refused with a message or indexed into tensors whose every byte can be
 * read back — never a crash, a hang or an out-of-bounds access (built with
 * AddressSanitizer and UBSan by `make fuzz`).  Every accepted input must
 * also re-encode, unchanged, to exactly its own bytes.  The same bytes also
 * go through the meta parser.
 *
 * The input goes into a memfd and is opened through /proc/self/fd, the same
 * path-based entry point the mount uses.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../codec/model.h"
#include "../../codec/oneflow_meta.h"
#include "../../export/ckpt_writer.h"

static void read_everything(const ck_model *m)
{
    static unsigned char buf[65536];
    ck_error err;
    for (size_t i = 0; i < m->index.n_live; i++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[i]];
        char meta[CK_META_MAX];
        if (ck_meta_of_tensor(t, meta, sizeof meta) == 0)
            abort();
        for (uint64_t off = 0; off < t->nbytes; off += sizeof buf)
            if (ck_model_read(m, t, buf, sizeof buf, off, &err) <= 0)
                abort(); /* extents were checked against the file at open */
    }
}

/* The writer with every tensor unchanged must give back the input. */
static void check_identity(const ck_model *m, const uint8_t *data, size_t size)
{
    static int out = -1;
    if (out < 0 && (out = memfd_create("fuzz.out", 0)) < 0)
        abort();
    const ck_index *ix = &m->index;
    ck_write_tensor *w = calloc(ix->n_live + 1, sizeof *w);
    for (size_t i = 0; i < ix->n_live; i++)
        w[i] = (ck_write_tensor){.orig_id = ix->live[i], .unchanged = true};
    ck_error err;
    if (ftruncate(out, 0) < 0 || lseek(out, 0, SEEK_SET) < 0 ||
        ck_ckpt_write(m, w, ix->n_live, NULL, out, &err) < 0)
        abort();
    free(w);
    unsigned char *back = malloc(size + 1);
    if (pread(out, back, size + 1, 0) != (ssize_t)size || memcmp(back, data, size) != 0)
        abort();
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz.ckpt", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    ck_error err;
    /* The same bytes as a meta someone wrote: parsed or refused, one line. */
    ck_meta meta;
    if (ck_meta_parse((const char *)data, size, &meta, &err) < 0 &&
        (err.msg[0] == '\0' || strchr(err.msg, '\n')))
        abort();
    ck_model *m = ck_model_open(path, NULL, &err);
    if (m == NULL) {
        if (err.msg[0] == '\0' || strchr(err.msg, '\n'))
            abort(); /* every refusal is one line */
        return 0;
    }
    read_everything(m);
    check_identity(m, data, size);
    ck_model_close(m);
    return 0;
}
