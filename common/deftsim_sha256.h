/* deftsim_sha256.h - SHA-256 (FIPS 180-4), self-contained: none of deftsim's dependencies
 * (SimGrid, GSL, inih, jansson, zlib) offers one. Used to record the bytes of a user's files
 * (a platform file) in a results folder's manifest. */
#ifndef DEFTSIM_SHA256_H
#define DEFTSIM_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;        /* message length so far */
    unsigned char buf[64]; /* a partial block */
    size_t nbuf;
} deftsim_sha256_ctx;

void deftsim_sha256_init(deftsim_sha256_ctx *c);
void deftsim_sha256_update(deftsim_sha256_ctx *c, const void *data, size_t len);
void deftsim_sha256_final(deftsim_sha256_ctx *c, unsigned char digest[32]);
/* The digest of data[0 .. len) as 64 lowercase hex digits and a NUL. */
void deftsim_sha256_hex(const void *data, size_t len, char hex[65]);

#endif
