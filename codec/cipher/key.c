/* SPDX-License-Identifier: Apache-2.0 */
#include "key.h"
#include "../core/model_dir.h"

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
 * and anyone who can write it can make the next save use their key.  So
 * it is ours (another user could change it, or swap it), and it is not a
 * symlink (its target's owner and mode are not what we checked). */
static int check_private(const char *path, const struct stat *st, ck_error *err)
{
    if (!S_ISREG(st->st_mode))
        return ck_fail(err, EINVAL, "%s: key file is not a regular file", path);
    if (st->st_uid != geteuid())
        return ck_fail(err, EACCES, "%s: key file is owned by uid %u, not by the user "
                       "mounting (uid %u); a key must be private", path,
                       (unsigned)st->st_uid, (unsigned)geteuid());
    if (st->st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH))
        return ck_fail(err, EACCES, "%s: key file is %s by group or others (mode %04o); a key "
                       "must be private: chmod 600 it", path,
                       st->st_mode & (S_IRGRP | S_IROTH) ? "readable" : "writable",
                       (unsigned)(st->st_mode & 07777));
    return 0;
}

static int load_file(const char *path, ck_key *key, ck_error *err)
{
    struct stat st;
    int fd = ck_open_regular(AT_FDCWD, path, O_RDONLY | O_NOFOLLOW, 0, &st);
    if (fd < 0 && st.st_mode != 0)
        return ck_fail(err, EINVAL, "%s: key file is %s, not a regular file", path,
                       ck_file_kind(st.st_mode));
    if (fd < 0 && errno == ELOOP)
        return ck_fail(err, EACCES, "%s: key file is a symbolic link; give the file itself", path);
    if (fd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open the key file", path);
    unsigned char buf[sizeof key->bytes + 1];
    ssize_t n = -1;
    int rc = -1;
    if (check_private(path, &st, err) == 0) {
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

extern char **environ;

/* Take CKPTFS_KEY_HEX out of the environment.  unsetenv() alone is not
 * enough: /proc/PID/environ shows the block the process started with,
 * where the string stays, so it is overwritten there: the value first,
 * then (once unsetenv, which never frees the strings, has dropped it) the
 * name. */
static void forget_env_key(void)
{
    size_t name_len = strlen(CK_KEY_ENV);
    char *hits[8];
    size_t n = 0;
    for (char **e = environ; *e != NULL; e++)
        if (strncmp(*e, CK_KEY_ENV "=", name_len + 1) == 0) {
            explicit_bzero(*e + name_len + 1, strlen(*e + name_len + 1));
            if (n < sizeof hits / sizeof hits[0])
                hits[n++] = *e;
        }
    unsetenv(CK_KEY_ENV);
    for (size_t i = 0; i < n; i++)
        explicit_bzero(hits[i], name_len + 1);
}

int ck_key_load(const char *key_file, ck_key *key, ck_error *err)
{
    *key = (ck_key){0};
    if (key_file != NULL)
        return load_file(key_file, key, err);
    const char *hex = getenv(CK_KEY_ENV);
    if (hex == NULL)
        return 0;
    int rc = *hex == '\0' ? 0 : load_hex(hex, key, err);
    forget_env_key();
    return rc;
}

void ck_key_wipe(ck_key *key)
{
    explicit_bzero(key, sizeof *key);
}
