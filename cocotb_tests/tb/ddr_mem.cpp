// Sparse DDR memory for the tpusim testbench: 4 KiB pages allocated on first write, 40-bit byte
// addresses, unwritten bytes read as zero.
//
// Two interfaces onto the same memory:
//   * DPI-C, called by tb_top.sv once per beat (ddr_dpi_read_beat / ddr_dpi_write_beat);
//   * plain C (extern "C"), called from Python through ctypes for bulk preload and readback
//     (ddr_mem_write / ddr_mem_read / ddr_mem_clear / ddr_mem_stat). The simulator executable is
//     linked with -rdynamic so that ctypes.CDLL(None) finds these symbols.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "svdpi.h"

namespace {

constexpr uint64_t kPageBits = 12;
constexpr uint64_t kPageBytes = uint64_t(1) << kPageBits;
constexpr uint64_t kAddrLimit = uint64_t(1) << 40;

struct Page {
    uint8_t bytes[kPageBytes];
};

struct Mem {
    std::unordered_map<uint64_t, std::unique_ptr<Page>> pages;
    uint64_t read_beats = 0, write_beats = 0, bad_addr = 0;

    Page* get(uint64_t pn, bool create) {
        auto it = pages.find(pn);
        if (it != pages.end()) return it->second.get();
        if (!create) return nullptr;
        auto p = std::make_unique<Page>();
        std::memset(p->bytes, 0, kPageBytes);
        Page* raw = p.get();
        pages.emplace(pn, std::move(p));
        return raw;
    }
};

Mem& mem() {
    static Mem m;
    return m;
}

bool check(uint64_t addr, uint64_t len, const char* who) {
    if (addr >= kAddrLimit || len > kAddrLimit - addr) {
        mem().bad_addr++;
        std::fprintf(stderr, "ddr_mem: %s at 0x%llx + %llu bytes is outside the 40-bit space\n", who,
                     (unsigned long long)addr, (unsigned long long)len);
        return false;
    }
    return true;
}

}  // namespace

extern "C" {

// ---- ctypes API ------------------------------------------------------------------------------
// Returns 0 on success, -1 if the range passes 2^40.
int ddr_mem_write(uint64_t addr, const uint8_t* src, uint64_t len) {
    if (!check(addr, len, "ddr_mem_write")) return -1;
    while (len) {
        uint64_t off = addr & (kPageBytes - 1);
        uint64_t n = kPageBytes - off < len ? kPageBytes - off : len;
        std::memcpy(mem().get(addr >> kPageBits, true)->bytes + off, src, n);
        addr += n; src += n; len -= n;
    }
    return 0;
}

int ddr_mem_read(uint64_t addr, uint8_t* dst, uint64_t len) {
    if (!check(addr, len, "ddr_mem_read")) return -1;
    while (len) {
        uint64_t off = addr & (kPageBytes - 1);
        uint64_t n = kPageBytes - off < len ? kPageBytes - off : len;
        Page* p = mem().get(addr >> kPageBits, false);
        if (p) std::memcpy(dst, p->bytes + off, n); else std::memset(dst, 0, n);
        addr += n; dst += n; len -= n;
    }
    return 0;
}

void ddr_mem_clear(void) {
    mem().pages.clear();
    mem().read_beats = mem().write_beats = mem().bad_addr = 0;
}

// which: 0 pages allocated, 1 read beats served, 2 write beats taken, 3 out-of-range accesses
uint64_t ddr_mem_stat(int which) {
    switch (which) {
        case 0: return mem().pages.size();
        case 1: return mem().read_beats;
        case 2: return mem().write_beats;
        case 3: return mem().bad_addr;
        default: return ~uint64_t(0);
    }
}

// ---- DPI-C (tb_top.sv) ---------------------------------------------------------------------
// data/strb are svBitVecVal arrays: 32-bit chunks, chunk 0 = bits [31:0] = bytes 0..3 (the host
// is little endian, so beat byte i is byte i of the array).
void ddr_dpi_read_beat(long long addr, int nbytes, svBitVecVal* data) {
    mem().read_beats++;
    if (ddr_mem_read((uint64_t)addr, reinterpret_cast<uint8_t*>(data), (uint64_t)nbytes) != 0)
        std::memset(data, 0, (size_t)nbytes);
}

void ddr_dpi_write_beat(long long addr, int nbytes, const svBitVecVal* data,
                        const svBitVecVal* strb) {
    mem().write_beats++;
    const uint8_t* d = reinterpret_cast<const uint8_t*>(data);
    uint64_t a = (uint64_t)addr;
    if (!check(a, (uint64_t)nbytes, "ddr_dpi_write_beat")) return;
    bool all = true;
    for (int i = 0; i < nbytes && all; i++) all = (strb[i >> 5] >> (i & 31)) & 1;
    if (all) {
        ddr_mem_write(a, d, (uint64_t)nbytes);
        return;
    }
    for (int i = 0; i < nbytes; i++) {
        if ((strb[i >> 5] >> (i & 31)) & 1) {
            uint64_t b = a + (uint64_t)i;
            mem().get(b >> kPageBits, true)->bytes[b & (kPageBytes - 1)] = d[i];
        }
    }
}

}  // extern "C"
