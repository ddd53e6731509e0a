// Performance counters (docs/architecture.md, "Performance counters").
//
// Holds the `cycles` counter (core edges 0 .. h-1 counted, so it reads h after the halt edge h)
// and the per-engine `queue_full_cycles` (core edges at which tpu_decoder's q_full_stall_o held),
// and multiplexes every counter onto perf_val_o by perf_sel_i, at the indices PERF_<NAME> of
// tpu_isa_pkg (generated from tpusim.arch.perf.COUNTERS); other indices read 0.
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
  input  wire logic [NUM_ENGINES-1:0]        q_full_stall_i,   // decoder held by a full queue
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

  localparam int unsigned SelBits = $clog2(NUM_PERF_COUNTERS);

  logic [63:0] cycles_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni)                       cycles_q <= '0;
    else if (!halted_i && !halt_now_i) cycles_q <= cycles_q + 64'd1;
  end

  logic [NUM_ENGINES-1:0][63:0] queue_full_cycles_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      queue_full_cycles_q <= '0;
    end else begin
      for (int unsigned e = 0; e < NUM_ENGINES; e++) begin
        if (q_full_stall_i[e]) queue_full_cycles_q[e] <= queue_full_cycles_q[e] + 64'd1;
      end
    end
  end

  logic [NUM_PERF_COUNTERS-1:0][63:0] cnt;
  always_comb begin
    cnt = '0;
    cnt[PERF_CYCLES] = cycles_q;
    for (int unsigned e = 0; e < NUM_ENGINES; e++) begin
      cnt[PERF_LOAD_BUSY_CYCLES + PERF_PER_ENGINE*e]       = busy_cycles_i[e];
      cnt[PERF_LOAD_TOKEN_WAIT_CYCLES + PERF_PER_ENGINE*e] = token_wait_cycles_i[e];
      cnt[PERF_LOAD_RETIRED + PERF_PER_ENGINE*e]           = retired_i[e];
      cnt[PERF_LOAD_QUEUE_FULL_CYCLES + PERF_PER_ENGINE*e] = queue_full_cycles_q[e];
    end
    cnt[PERF_SRAM_CONFLICTS]       = sram_conflicts_i;
    cnt[PERF_SRAM_CONFLICT_CYCLES] = sram_conflict_cycles_i;
    cnt[PERF_DDR_READ_BYTES]       = ddr_read_bytes_i;
    cnt[PERF_DDR_WRITE_BYTES]      = ddr_write_bytes_i;
    cnt[PERF_FETCH_BYTES]          = fetch_bytes_i;
    cnt[PERF_DDR_BUSY_CYCLES]      = ddr_busy_cycles_i;
    cnt[PERF_DDR_ARB_WAIT_CYCLES]  = ddr_arb_wait_cycles_i;
  end

  assign perf_val_o = (32'(perf_sel_i) < NUM_PERF_COUNTERS) ? cnt[perf_sel_i[SelBits-1:0]] : 64'd0;

endmodule

`default_nettype wire
