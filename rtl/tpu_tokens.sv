// Dependency tokens between the four engines (docs/architecture.md, "Engines and tokens").
//
// One 8-bit token count per (sender, receiver) pair, split into a sent counter in the sender's
// domain and a taken counter in the receiver's domain; the count the receiver sees is
// sent_visible - taken (mod 256). A token sent at the sender's completion edge c (send_i high
// during the cycle before c) is visible to the receiver at cdc(c -> receiver): the sent counter
// crosses gray-coded through tpu_cdc_sync; within one domain it is visible at c+1. A token taken
// at the receiver's start edge s (take_i high during the cycle before s) is gone from s+1 on.
// Engines LOAD and STORE run on clk_dma_i, MXU and VPU on clk_core_i.
// Overflow (device error token_overflow, docs/architecture.md "Device errors"): the taken
// counter crosses back into the sender's domain the same way (gray, tpu_cdc_sync; same domain:
// the register itself), so a consumption at receiver edge s is seen by the sender at
// cdc(s -> sender). A send at c while sent - taken_seen == TOKEN_MAX (255) is not counted (the token is
// dropped) and raises ovf_o[sender] during the cycle before c; the receiver's count
// sent_visible - taken therefore never exceeds TOKEN_MAX and the TOKEN_COUNTER_BITS-bit counters never wrap wrongly.

`default_nettype none

module tpu_tokens
  import tpu_isa_pkg::*;
(
  input  wire logic clk_core_i,
  input  wire logic clk_dma_i,
  input  wire logic rst_ni,
  // [sender][receiver]: sender completes at the coming edge and signals receiver
  input  wire logic [NUM_ENGINES-1:0][NUM_ENGINES-1:0] send_i,
  // [receiver][sender]: receiver starts at the coming edge and takes a token from sender
  input  wire logic [NUM_ENGINES-1:0][NUM_ENGINES-1:0] take_i,
  // [receiver][sender]: at least one token from sender is visible to receiver
  output      logic [NUM_ENGINES-1:0][NUM_ENGINES-1:0] avail_o,
  // [sender]: a token sent at the coming edge overflows (and is dropped), sender's domain
  output      logic [NUM_ENGINES-1:0]                  ovf_o
);

  localparam int unsigned TokenBits = TOKEN_COUNTER_BITS;
  typedef logic [TokenBits-1:0] cnt_t;

  function automatic cnt_t gray2bin(cnt_t g);
    return cnt_t'(tpu_gray_pkg::gray2bin(tpu_gray_pkg::gray_word_t'(g)));
  endfunction

  function automatic bit is_dma(int unsigned e);
    return (e == ENG_LOAD) || (e == ENG_STORE);
  endfunction

  logic [NUM_ENGINES-1:0][NUM_ENGINES-1:0] ovf_w;   // [sender][receiver]

  for (genvar gs = 0; gs < NUM_ENGINES; gs++) begin : g_snd
    for (genvar gr = 0; gr < NUM_ENGINES; gr++) begin : g_rcv
      logic clk_s, clk_r;
      cnt_t sent_q, sent_gray_q, taken_q, taken_gray_q, sent_vis, taken_seen;

      if (is_dma(gs)) begin : g_clk_s_dma
        assign clk_s = clk_dma_i;
      end else begin : g_clk_s_core
        assign clk_s = clk_core_i;
      end
      if (is_dma(gr)) begin : g_clk_r_dma
        assign clk_r = clk_dma_i;
      end else begin : g_clk_r_core
        assign clk_r = clk_core_i;
      end

      // sender domain; an overflowing token is not counted
      assign ovf_w[gs][gr] = send_i[gs][gr] && (cnt_t'(sent_q - taken_seen) == cnt_t'(TOKEN_MAX));
      always_ff @(posedge clk_s or negedge rst_ni) begin
        if (!rst_ni) begin
          sent_q      <= '0;
          sent_gray_q <= '0;
        end else if (send_i[gs][gr] && !ovf_w[gs][gr]) begin
          sent_q      <= sent_q + 1'b1;
          sent_gray_q <= cnt_t'(tpu_gray_pkg::bin2gray(tpu_gray_pkg::gray_word_t'(cnt_t'(sent_q + 1'b1))));
        end
      end

      // crossing
      if (is_dma(gs) == is_dma(gr)) begin : g_same
        assign sent_vis   = sent_q;
        assign taken_seen = taken_q;
        logic unused_gray;
        assign unused_gray = ^{sent_gray_q, taken_gray_q};
      end else begin : g_cdc
        cnt_t sent_gray_r, taken_gray_s;
        tpu_cdc_sync #(.Width(TokenBits)) u_sync (
          .clk_i(clk_r), .rst_ni, .d_i(sent_gray_q), .q_o(sent_gray_r)
        );
        tpu_cdc_sync #(.Width(TokenBits)) u_sync_taken (
          .clk_i(clk_s), .rst_ni, .d_i(taken_gray_q), .q_o(taken_gray_s)
        );
        assign sent_vis   = gray2bin(sent_gray_r);
        assign taken_seen = gray2bin(taken_gray_s);
      end

      // receiver domain
      always_ff @(posedge clk_r or negedge rst_ni) begin
        if (!rst_ni) begin
          taken_q      <= '0;
          taken_gray_q <= '0;
        end else if (take_i[gr][gs]) begin
          taken_q      <= taken_q + 1'b1;
          taken_gray_q <= cnt_t'(tpu_gray_pkg::bin2gray(tpu_gray_pkg::gray_word_t'(cnt_t'(taken_q + 1'b1))));
        end
      end

      assign avail_o[gr][gs] = (sent_vis != taken_q);
    end
  end

  always_comb begin
    for (int unsigned gs = 0; gs < NUM_ENGINES; gs++) begin
      ovf_o[gs] = 1'b0;
      for (int unsigned gr = 0; gr < NUM_ENGINES; gr++) ovf_o[gs] |= ovf_w[gs][gr];
    end
  end

endmodule

`default_nettype wire
