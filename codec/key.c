#include "key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool valid_len(size_t n)
{
    return n == 16 || n == 24 || n == 32;
}

/* A key file must be private: anyone who can read it can read the model,
 * and anyone who can write it can make the next save use their key. */
static int check_private(const char *path, const struct stat *st, ck_error *err)
{
    if (!S_ISREG(st->st_mode))
        return ck_fail(err, EINVAL, "%s: key file is not a regular file", path);
    if (st->st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH))
        return ck_fail(err, EACCES, "%s: key file is %s by group or others (mode %04o); a key "
                       "must be private: chmod 600 it", path,
                       st->st_mode & (S_IRGRP | S_IROTH) ? "readable" : "writable",
                       (unsigned)(st->st_mode & 07777));
    return 0;
}

static int load_file(const char *path, ck_key *key, ck_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open the key file", path);
    struct stat st;
    unsigned char buf[sizeof key->bytes + 1];
    ssize_t n = -1;
    int rc = -1;
    if (fstat(fd, &st) < 0)
        ck_fail_errno(err, errno, "%s: cannot stat the key file", path);
    else if (check_private(path, &st, err) == 0) {
        do
            n = read(fd, buf, sizeof buf);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            ck_fail_errno(err, errno, "%s: cannot read the key file", path);
        else if (!valid_len((size_t)n))
            ck_fail(err, EINVAL, "%s: key file holds %s%zd bytes; a key is 16, 24 or 32 raw "
                    "bytes (AES-128, -192, -256)%s", path, n > 32 ? "over " : "",
                    n > 32 ? (ssize_t)32 : n,
                    n > 0 && buf[n - 1] == '\n' ? " (a trailing newline? write it with "
                                                  "printf, not echo)" : "");
        else {
            memcpy(key->bytes, buf, (size_t)n);
            key->len = (size_t)n;
            rc = 1;
        }
    }
    explicit_bzero(buf, sizeof buf);
    close(fd);
    return rc;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int load_hex(const char *hex, ck_key *key, ck_error *err)
{
    size_t n = strlen(hex);
    if (n % 2 != 0 || !valid_len(n / 2))
        return ck_fail(err, EINVAL, "%s: %zu hex digits; a key is 32, 48 or 64 hex digits "
                       "(16, 24 or 32 bytes: AES-128, -192, -256)", CK_KEY_ENV, n);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            ck_key_wipe(key);
            return ck_fail(err, EINVAL, "%s: character %zu is not a hex digit", CK_KEY_ENV,
                           (size_t)(hi < 0 ? 2 * i : 2 * i + 1) + 1);
        }
        key->bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    key->len = n / 2;
    return 1;
}

int ck_key_load(const char *key_file, ck_key *key, ck_error *err)
{
    *key = (ck_key){0};
    if (key_file != NULL)
        return load_file(key_file, key, err);
    const char *hex = getenv(CK_KEY_ENV);
    if (hex == NULL || *hex == '\0')
        return 0;
    return load_hex(hex, key, err);
}

void ck_key_wipe(ck_key *key)
{
    explicit_bzero(key, sizeof *key);
}
