// Performance counters (docs/architecture.md, "Performance counters").
//
// Holds the `cycles` counter (core edges 0 .. h-1 counted, so it reads h after the halt edge h)
// and multiplexes every counter onto perf_val_o by perf_sel_i, in the order of
// tpusim.models.perf.COUNTERS:
//   0 cycles,
//   1..3 load_{busy_cycles,token_wait_cycles,retired}, 4..6 store_*, 7..9 mxu_*, 10..12 vpu_*,
//   13 sram_conflicts, 14 sram_conflict_cycles, 15 ddr_read_bytes, 16 ddr_write_bytes,
//   17 fetch_bytes, 18 ddr_busy_cycles, 19 ddr_arb_wait_cycles; other indices read 0.
// The other counters live in their blocks' own clock domains; perf_val_o is a combinational mux
// meant to be read after the halt, when the device is quiet.

`default_nettype none

module tpu_perf
  import tpu_isa_pkg::*;
(
  input  wire logic                          clk_i,   // core clock
  input  wire logic                          rst_ni,
  input  wire logic                          halt_now_i,
  input  wire logic                          halted_i,
  // per engine, index = tpu_isa_pkg ENG_*
  input  wire logic [NUM_ENGINES-1:0][63:0]  busy_cycles_i,
  input  wire logic [NUM_ENGINES-1:0][63:0]  token_wait_cycles_i,
  input  wire logic [NUM_ENGINES-1:0][63:0]  retired_i,
  input  wire logic [63:0]                   sram_conflicts_i,
  input  wire logic [63:0]                   sram_conflict_cycles_i,
  input  wire logic [63:0]                   ddr_read_bytes_i,
  input  wire logic [63:0]                   ddr_write_bytes_i,
  input  wire logic [63:0]                   fetch_bytes_i,
  input  wire logic [63:0]                   ddr_busy_cycles_i,
  input  wire logic [63:0]                   ddr_arb_wait_cycles_i,
  input  wire logic [7:0]                    perf_sel_i,
  output      logic [63:0]                   perf_val_o
);

  localparam int unsigned NumCounters = 20;

  logic [63:0] cycles_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni)                       cycles_q <= '0;
    else if (!halted_i && !halt_now_i) cycles_q <= cycles_q + 64'd1;
  end

  logic [NumCounters-1:0][63:0] cnt;
  always_comb begin
    cnt[0] = cycles_q;
    for (int unsigned e = 0; e < NUM_ENGINES; e++) begin
      cnt[1 + 3*e]     = busy_cycles_i[e];
      cnt[1 + 3*e + 1] = token_wait_cycles_i[e];
      cnt[1 + 3*e + 2] = retired_i[e];
    end
    cnt[13] = sram_conflicts_i;
    cnt[14] = sram_conflict_cycles_i;
    cnt[15] = ddr_read_bytes_i;
    cnt[16] = ddr_write_bytes_i;
    cnt[17] = fetch_bytes_i;
    cnt[18] = ddr_busy_cycles_i;
    cnt[19] = ddr_arb_wait_cycles_i;
  end

  assign perf_val_o = (32'(perf_sel_i) < NumCounters) ? cnt[perf_sel_i[4:0]] : 64'd0;

endmodule

`default_nettype wire
