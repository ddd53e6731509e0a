// Two-flop synchroniser (docs/architecture.md, "Clock-domain crossing rule").
//
// A value launched by a source register at source edge t is captured by flop 1 at the 1st
// destination edge strictly after t and by flop 2 at the 2nd; q_o shows it during the cycle
// after the 2nd edge, so the consuming register (in the destination domain) acts on it at the
// 3rd destination edge strictly after t: Timebase.cdc(t, dst).
// Use it only on toggles and on gray-coded counters (one bit changes per source edge).

`default_nettype none

module tpu_cdc_sync #(
  parameter int unsigned      Width      = 1,
  parameter logic [Width-1:0] ResetValue = '0
) (
  input  wire logic             clk_i,   // destination clock
  input  wire logic             rst_ni,
  input  wire logic [Width-1:0] d_i,     // from a source-domain register
  output      logic [Width-1:0] q_o      // destination domain
);

  logic [Width-1:0] sync1_q, sync2_q;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      sync1_q <= ResetValue;
      sync2_q <= ResetValue;
    end else begin
      sync1_q <= d_i;
      sync2_q <= sync1_q;
    end
  end

  assign q_o = sync2_q;

endmodule

`default_nettype wire
