/* test_sha256.c - deftsim_sha256 against FIPS 180-4's example vectors and, for lengths around
 * the padding's edges, digests computed by Python's hashlib; fed whole and in pieces. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_sha256.h"

static void expect_hex(const void *data, size_t len, const char *want)
{
    char hex[65];
    deftsim_sha256_hex(data, len, hex);
    cr_expect_str_eq(hex, want, "SHA-256 of %zu bytes", len);
}

Test(sha256, fips_180_examples)
{
    expect_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    expect_hex(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *a = malloc(1000000);
    cr_assert(a);
    memset(a, 'a', 1000000);
    expect_hex(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

/* Bytes i * 7 mod 256; expected digests from hashlib.sha256(bytes(i*7%256 for i in range(n))). */
Test(sha256, padding_edges_whole_and_in_pieces)
{
    static const struct {
        size_t n;
        const char *hex;
    } v[] = {
        {55, "576a1bf8d4478657e6dc4af9398544765c2a92cde28478b019235cfed315fc09"},
        {56, "9b20501dfd1d99161c257950f3444f3e49230c351c5c8e0943ef369f85f5205d"},
        {63, "30b345906b493f06f69444b6521113511c242f30e29840462950035043682f1e"},
        {64, "d8bc63b4fc1156e5e7d95a418b9bf54cd3174bedbc2db40f74895349b229b3c0"},
        {65, "1ee23b0fbcaecc1aff4a9e8f1645f35ab2c8e13609cd73b68df8b5e3f63ce073"},
        {119, "7a6589821178918ca8d9edaba5abfc1e9b2669564f4469b66885379c1530b2c8"},
        {120, "655250427d56b1b0eeb8497d21428704273458a01772d6881b65c0abac0f8a98"},
        {1000, "89f4ff56a25dd1db06a4ce6033603775d705fb96f30f8693733fef602a1ca532"},
    };
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 % 256);
    for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
        expect_hex(buf, v[t].n, v[t].hex);
        /* The same bytes in pieces of 1, 3, 63 and 64: the digest does not depend on them. */
        static const size_t pieces[] = {1, 3, 63, 64};
        for (size_t p = 0; p < 4; p++) {
            deftsim_sha256_ctx c;
            deftsim_sha256_init(&c);
            for (size_t o = 0; o < v[t].n; o += pieces[p])
                deftsim_sha256_update(&c, buf + o, v[t].n - o < pieces[p] ? v[t].n - o : pieces[p]);
            unsigned char d[32];
            deftsim_sha256_final(&c, d);
            char hex[65];
            for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
            cr_expect_str_eq(hex, v[t].hex, "%zu bytes in pieces of %zu", v[t].n, pieces[p]);
        }
    }
}
