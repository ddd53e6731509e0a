// Dual-clock instruction FIFO with gray-coded pointers (DMA LOAD and STORE queues).
//
// Writer (core) pushes at edge p: the entry and the gray write pointer are registered at p; the
// reader sees the entry at its 3rd edge strictly after p (two tpu_cdc_sync flops, then the
// reader's own register acts), i.e. cdc(p -> reader). A pop at reader edge s frees the slot for
// the writer at cdc(s -> writer). The entry storage is written by the writer only and read by the
// reader only after the pointer crossing shows it, so it is stable when read.

`default_nettype none

module tpu_async_queue #(
  parameter int unsigned Depth = 4,   // power of two >= 2
  parameter int unsigned Width = 8
) (
  input  wire logic             rst_ni,
  // writer domain
  input  wire logic             clk_w_i,
  input  wire logic             push_i,
  input  wire logic [Width-1:0] wdata_i,
  output      logic             full_o,     // as seen by the writer
  // reader domain
  input  wire logic             clk_r_i,
  input  wire logic             pop_i,
  output      logic             rvalid_o,   // not empty, as seen by the reader
  output      logic [Width-1:0] rdata_o
);

  localparam int unsigned AW = $clog2(Depth);

  typedef logic [AW:0] ptr_t;

  function automatic ptr_t to_gray(ptr_t b);
    return ptr_t'(tpu_gray_pkg::bin2gray(tpu_gray_pkg::gray_word_t'(b)));
  endfunction

  function automatic ptr_t from_gray(ptr_t g);
    return ptr_t'(tpu_gray_pkg::gray2bin(tpu_gray_pkg::gray_word_t'(g)));
  endfunction

  logic [Width-1:0] mem_q [Depth];
  logic [AW:0]      wbin_q, wgray_q, rgray_w, rbin_w;   // writer domain
  logic [AW:0]      rbin_q, rgray_q, wgray_r;           // reader domain
  logic             do_push, do_pop;

  // ---- writer ----------------------------------------------------------------------------

  tpu_cdc_sync #(.Width(AW+1)) u_sync_rptr (
    .clk_i(clk_w_i), .rst_ni, .d_i(rgray_q), .q_o(rgray_w)
  );
  assign rbin_w  = from_gray(rgray_w);
  assign full_o  = ((wbin_q - rbin_w) == (AW+1)'(Depth));
  assign do_push = push_i && !full_o;

  always_ff @(posedge clk_w_i or negedge rst_ni) begin
    if (!rst_ni) begin
      wbin_q  <= '0;
      wgray_q <= '0;
    end else if (do_push) begin
      wbin_q  <= wbin_q + 1'b1;
      wgray_q <= to_gray(wbin_q + 1'b1);
    end
  end

  always_ff @(posedge clk_w_i) begin
    if (do_push) mem_q[wbin_q[AW-1:0]] <= wdata_i;
  end

  // ---- reader ----------------------------------------------------------------------------

  tpu_cdc_sync #(.Width(AW+1)) u_sync_wptr (
    .clk_i(clk_r_i), .rst_ni, .d_i(wgray_q), .q_o(wgray_r)
  );
  assign rvalid_o = (wgray_r != rgray_q);
  assign rdata_o  = mem_q[rbin_q[AW-1:0]];
  assign do_pop   = pop_i && rvalid_o;

  always_ff @(posedge clk_r_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rbin_q  <= '0;
      rgray_q <= '0;
    end else if (do_pop) begin
      rbin_q  <= rbin_q + 1'b1;
      rgray_q <= to_gray(rbin_q + 1'b1);
    end
  end

endmodule

`default_nettype wire
