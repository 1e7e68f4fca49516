#ifndef SHARELEDGER_CLMDB_SHIM_H
#define SHARELEDGER_CLMDB_SHIM_H
#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of the rows in derived/: with the SSE 4.2
   instruction where the CPU has it, else bitwise (8 steps per byte, the same answer). Starts from
   `crc` (0 for a fresh checksum); no pre- or post-inversion beyond the standard ~ below. */

static inline uint32_t sl_crc32c_portable(uint32_t crc, const unsigned char *bytes, size_t count) {
    crc = ~crc;
    for (size_t i = 0; i < count; i++) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <cpuid.h>

__attribute__((target("sse4.2")))
static inline uint32_t sl_crc32c_sse42(uint32_t crc, const unsigned char *bytes, size_t count) {
    uint64_t c = ~crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        c = __builtin_ia32_crc32di(c, word);
        bytes += 8;
        count -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (count > 0) {
        c32 = __builtin_ia32_crc32qi(c32, *bytes);
        bytes++;
        count--;
    }
    return ~c32;
}

/* 1: SSE 4.2 present, 0: absent, -1: not asked yet. Relaxed atomics: threads that ask at once all
   compute and store the same answer. */
static int sl_crc32c_hardware = -1;

static inline uint32_t sl_crc32c(uint32_t crc, const void *bytes, size_t count) {
    int hardware = __atomic_load_n(&sl_crc32c_hardware, __ATOMIC_RELAXED);
    if (hardware < 0) {
        unsigned int a = 0, b = 0, c = 0, d = 0;
        hardware = (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2)) ? 1 : 0;
        __atomic_store_n(&sl_crc32c_hardware, hardware, __ATOMIC_RELAXED);
    }
    return hardware ? sl_crc32c_sse42(crc, (const unsigned char *)bytes, count)
                    : sl_crc32c_portable(crc, (const unsigned char *)bytes, count);
}
#else
static inline uint32_t sl_crc32c(uint32_t crc, const void *bytes, size_t count) {
    return sl_crc32c_portable(crc, (const unsigned char *)bytes, count);
}
#endif

#endif
