// Scoped, time-windowed VCD writer of the tracing build (cocotb_tests/rtl_dump.py): a Verilator VCD
// writer separate from cocotb's full dump, restricted with dumpvars() to the requested scopes
// and written only when the cocotb test calls tb_waves_dump (after every clock edge inside the
// window, in its ReadOnly phase). Plain C functions for ctypes (the executable is linked
// -rdynamic). Compiled only into tracing builds (cocotb_tests/build.py, waves="vcd").
#include <cstdint>
#include <cstring>
#include <string>

#include "verilated.h"
#include "verilated_vcd_c.h"

namespace {
VerilatedVcdC* g_vcd = nullptr;
}

// scopes: hierarchical names separated by '\n' ("tb_top.u_tpu.u_vpu"); empty = everything.
extern "C" int tb_waves_open(const char* path, const char* scopes) {
    if (g_vcd) return 1;
    Verilated::traceEverOn(true);
    g_vcd = new VerilatedVcdC;
    std::string s(scopes ? scopes : "");
    size_t pos = 0;
    while (pos < s.size()) {
        size_t nl = s.find('\n', pos);
        if (nl == std::string::npos) nl = s.size();
        if (nl > pos) g_vcd->dumpvars(99, s.substr(pos, nl - pos));
        pos = nl + 1;
    }
    Verilated::threadContextp()->trace(g_vcd, 99, 0);
    g_vcd->open(path);
    if (!g_vcd->isOpen()) {
        delete g_vcd;
        g_vcd = nullptr;
        return 2;
    }
    return 0;
}

extern "C" void tb_waves_dump(uint64_t t_ps) {
    if (g_vcd) g_vcd->dump(t_ps);
}

extern "C" void tb_waves_close() {
    if (!g_vcd) return;
    g_vcd->close();
    delete g_vcd;
    g_vcd = nullptr;
}
