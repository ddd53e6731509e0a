// Generic per-engine controller (docs/architecture.md, "Engines and tokens").
//
// At each edge of its own clock it starts the queue head if it is idle (completion edge c
// already past: start at s >= c+1), the head is visible (q_valid_i) and a token from every
// engine in the head's wait mask is visible (tok_avail_i). At the start edge s it pops the
// head, takes the tokens, registers start_o (high during cycle s) and instr_o (held until the
// completion). The engine raises done_i during the last cycle of the instruction; the
// controller registers it at the completion edge c: retire_o is high during cycle c with
// retire_pc_o, and the signal-mask tokens are sent at c. NOP is executed here (c = s + 1,
// no start_o). launch_o / launch_instr_o tell an engine that must act at s itself (the DMA
// channels launch their first request at s) that the head starts at the coming edge.
// An erroneous head (head_err_i, from the engine's device-error check) is executed as a NOP:
// it takes its wait tokens at s, does no work (no launch_o, no start_o), completes at s + 1,
// retires and sends its signal tokens (docs/architecture.md, "Device errors").
// Counters: busy_cycles (sum of c - s), token_wait_cycles (sum of s - r, r = first edge idle
// with the head visible), retired; retired_gray_o is the low byte of retired, gray-coded, for
// the decoder's HALT check across domains.

`default_nettype none

module tpu_engine_ctrl
  import tpu_isa_pkg::*;
#(
  parameter int unsigned PcBits = DDR_ADDR_BITS
) (
  input  wire logic                   clk_i,
  input  wire logic                   rst_ni,
  // queue head
  input  wire logic                   q_valid_i,
  input  wire logic [INSTR_BITS-1:0]  q_instr_i,
  input  wire logic [PcBits-1:0]      q_pc_i,
  output      logic                   q_pop_o,
  input  wire logic                   head_err_i,     // the head fails its device-error check
  // tokens
  input  wire logic [NUM_ENGINES-1:0] tok_avail_i,   // [sender]
  output      logic [NUM_ENGINES-1:0] tok_take_o,    // [sender], during the cycle before s
  output      logic [NUM_ENGINES-1:0] tok_send_o,    // [receiver], during the cycle before c
  // engine
  output      logic                   launch_o,       // head (not NOP) starts at the coming edge
  output      logic [INSTR_BITS-1:0]  launch_instr_o, // the head, while launch_o
  output      logic                   start_o,        // high during cycle s (not for NOP)
  output      logic [INSTR_BITS-1:0]  instr_o,        // from s until c
  output      logic [PcBits-1:0]      pc_o,           // PC of instr_o
  input  wire logic                   done_i,         // high during cycle c-1
  // retire
  output      logic                   retire_o,       // high during cycle c
  output      logic [PcBits-1:0]      retire_pc_o,
  // counters
  output      logic [63:0]            busy_cycles_o,
  output      logic [63:0]            token_wait_cycles_o,
  output      logic [63:0]            retired_o,
  output      logic [7:0]             retired_gray_o
);

  logic                  busy_q, nop_q, start_q, retire_q;
  logic [INSTR_BITS-1:0] instr_q;
  logic [PcBits-1:0]     pc_q, retire_pc_q;
  logic [63:0]           busy_cycles_q, token_wait_q, retired_q;
  logic [7:0]            retired_gray_q;

  logic [NUM_ENGINES-1:0] head_wait, cur_signal;
  logic                   head_nop, can_start, tokens_ok, start_now, done_now;

  assign head_wait  = wait_mask_of(q_instr_i);
  assign cur_signal = signal_mask_of(instr_q);
  assign head_nop   = (opcode_of(q_instr_i) == OP_NOP) || head_err_i;

  assign can_start = !busy_q && q_valid_i;
  assign tokens_ok = &(tok_avail_i | ~head_wait);
  assign start_now = can_start && tokens_ok;
  assign done_now  = busy_q && (nop_q || done_i);

  assign q_pop_o        = start_now;
  assign tok_take_o     = start_now ? head_wait : '0;
  assign tok_send_o     = done_now ? cur_signal : '0;
  assign launch_o       = start_now && !head_nop;
  assign launch_instr_o = q_instr_i;

  logic [63:0] retired_d;
  assign retired_d = retired_q + 64'd1;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      busy_q         <= 1'b0;
      nop_q          <= 1'b0;
      start_q        <= 1'b0;
      retire_q       <= 1'b0;
      instr_q        <= '0;
      pc_q           <= '0;
      retire_pc_q    <= '0;
      busy_cycles_q  <= '0;
      token_wait_q   <= '0;
      retired_q      <= '0;
      retired_gray_q <= '0;
    end else begin
      start_q  <= start_now && !head_nop;
      retire_q <= done_now;
      if (start_now) begin
        busy_q  <= 1'b1;
        nop_q   <= head_nop;
        instr_q <= q_instr_i;
        pc_q    <= q_pc_i;
      end else if (done_now) begin
        busy_q <= 1'b0;
        nop_q  <= 1'b0;
      end
      if (done_now) begin
        retire_pc_q    <= pc_q;
        retired_q      <= retired_d;
        retired_gray_q <= retired_d[7:0] ^ (retired_d[7:0] >> 1);
      end
      if (busy_q)                  busy_cycles_q <= busy_cycles_q + 64'd1;
      if (can_start && !tokens_ok) token_wait_q  <= token_wait_q + 64'd1;
    end
  end

  assign start_o             = start_q;
  assign instr_o             = instr_q;
  assign pc_o                = pc_q;
  assign retire_o            = retire_q;
  assign retire_pc_o         = retire_pc_q;
  assign busy_cycles_o       = busy_cycles_q;
  assign token_wait_cycles_o = token_wait_q;
  assign retired_o           = retired_q;
  assign retired_gray_o      = retired_gray_q;

endmodule

`default_nettype wire
