// tpu_mxu: matrix unit. Executes LOAD_WEIGHTS and MATMUL (start/done protocol), drives SRAM
// requester 2, contains tpu_systolic_array and tpu_acc_buffer (read port exported for the VPU).
//
// Ports:
//   input  logic                clk_i, rst_ni
//   input  logic                start_i          // high during cycle s (after start edge s)
//   input  logic [255:0]        instr_i          // stable from start_i until the next start_i
//   output logic                free_o           // high during cycle f-1 (next start at >= f+1)
//   output logic                done_o           // high during cycle c-1
//   output logic                sram_req_o       // -> tpu_sram requester 2
//   output logic [16:0]         sram_len_o
//   output logic [Banks-1:0]    sram_mask_o
//   input  logic                sram_gnt_i
//   output logic [15:0]         sram_addr_o
//   output logic                sram_we_o        // always 0
//   output logic [WordBits-1:0] sram_wdata_o     // always 0
//   input  logic [WordBits-1:0] sram_rdata_i
//   input  logic [15:0]         acc_rd_addr_i    // accumulator read port (VPU): row in cycle t
//   output logic [Cols*32-1:0]  acc_rd_data_o    //   -> data in cycle t+1
//
// Timing (docs/architecture.md): request from start_i, grant g.
//   LOAD_WEIGHTS: D = Cols words sram_addr.., access n in cycle g+n, word n -> column n
//     (loaded at edge g+n+2); c = g + Cols.
//   MATMUL: D = M = count_x*count_y, access i in cycle g+i reads vector i at
//     act_addr + x*stride_x + y*stride_y (i = y*count_x + x); its data enters the array in cycle
//     g+i+1, column n's result is written to acc row acc_addr+i at edge g+i+Rows+n+2; the last
//     write (i = M-1, n = Cols-1) is at edge g+M+Rows+Cols = c. M == 0: no request, as if g = s+1.
//     Drain overlap: the MXU is free at f = c - Cols = g+M+Rows (the last vector's tag is at
//     chain stage Rows-2 during cycle f-1): the next instruction may start at s' >= f+1 while
//     the results drain; its own results follow in the same pipeline, so completions stay in
//     order and an accumulate into the same rows sees the earlier writes. A LOAD_WEIGHTS started
//     at s' writes column n at edge >= f+n+4, after the last vector has used PE(k, n) (edge
//     g+M+k+n+1 <= f+n); it completes at g'+Cols >= c+2.
//   LOAD_WEIGHTS: f = c. Any other opcode (NOP): f = c = s + 1.
`default_nettype none

module tpu_mxu
  import tpu_isa_pkg::*;
#(
  parameter int unsigned Rows      = tpu_cfg_pkg::ROWS,
  parameter int unsigned Cols      = tpu_cfg_pkg::COLS,
  parameter int unsigned Banks     = tpu_cfg_pkg::SRAM_BANKS,
  parameter int unsigned BankWords = tpu_cfg_pkg::BANK_WORDS,
  parameter int unsigned AccDepth  = tpu_cfg_pkg::ACC_DEPTH,
  localparam int unsigned WordBits = Rows * 8
) (
  input  logic                 clk_i,
  input  logic                 rst_ni,
  input  logic                 start_i,
  input  logic [255:0]         instr_i,
  output logic                 free_o,
  output logic                 done_o,
  output logic                 sram_req_o,
  output logic [16:0]          sram_len_o,
  output logic [Banks-1:0]     sram_mask_o,
  input  logic                 sram_gnt_i,
  output logic [15:0]          sram_addr_o,
  output logic                 sram_we_o,
  output logic [WordBits-1:0]  sram_wdata_o,
  input  logic [WordBits-1:0]  sram_rdata_i,
  input  logic [15:0]          acc_rd_addr_i,
  output logic [Cols*32-1:0]   acc_rd_data_o
);

  // ---------------------------------------------------------------- instruction fields
  logic [7:0]    opcode;
  logic          is_lw, is_mm;
  load_weights_t lw;
  matmul_t       mm;
  logic [31:0]   m_vec;

  assign opcode = opcode_of(instr_i);
  assign is_lw  = opcode == OP_LOAD_WEIGHTS;
  assign is_mm  = opcode == OP_MATMUL;
  assign lw     = load_weights_fields(instr_i);
  assign mm     = matmul_fields(instr_i);
  assign m_vec  = mm.count_x * mm.count_y;

  // ---------------------------------------------------------------- request: len and bank mask
  logic [33:0] first_w, last_w;
  logic [16:0] len;
  logic        need_req;

  always_comb begin
    if (is_lw) begin
      len     = 17'(Cols);
      first_w = 34'(lw.sram_addr);
      last_w  = 34'(lw.sram_addr) + 34'(Cols - 1);
    end else begin
      len     = m_vec[16:0];
      first_w = 34'(mm.act_addr);
      last_w  = 34'(mm.act_addr)
              + ((mm.count_x != '0) ? 34'(mm.count_x - 16'd1) * 34'(mm.stride_x) : 34'd0)
              + ((mm.count_y != '0) ? 34'(mm.count_y - 16'd1) * 34'(mm.stride_y) : 34'd0);
    end
  end
  assign need_req = is_lw || (is_mm && m_vec != '0);

  logic [33:0] first_bank, last_bank;
  assign first_bank = first_w / 34'(BankWords);
  assign last_bank  = last_w / 34'(BankWords);
  always_comb begin
    for (int b = 0; b < int'(Banks); b++) begin
      sram_mask_o[b] = (34'(b) >= first_bank) && (34'(b) <= last_bank);
    end
  end
  assign sram_len_o = len;

  logic pend_q, pend_d;
  assign pend_d     = (pend_q || (start_i && need_req)) && !sram_gnt_i;
  assign sram_req_o = (start_i && need_req) || pend_q;

  // ---------------------------------------------------------------- access sequencer
  logic        zero_gnt_q;          // MATMUL with M == 0: pseudo grant in cycle s+1
  logic        xfer_q, xfer_d;      // accesses 1 .. D-1 in progress
  logic        acc_on;              // an access is driven this cycle
  logic [16:0] k_q, k_d;            // index of the access driven this cycle
  logic [15:0] addr_q, addr_d, row_q, row_d, x_q, x_d;
  logic        last_acc;

  assign acc_on   = sram_gnt_i || xfer_q;
  assign last_acc = (k_q + 17'd1) == len;

  always_comb begin
    xfer_d = xfer_q;
    k_d    = k_q;
    addr_d = addr_q;
    row_d  = row_q;
    x_d    = x_q;
    if (start_i) begin
      xfer_d = 1'b0;
      k_d    = '0;
      addr_d = is_lw ? lw.sram_addr : mm.act_addr;
      row_d  = mm.act_addr;
      x_d    = '0;
    end else if (acc_on) begin
      xfer_d = !last_acc;
      k_d    = k_q + 17'd1;
      if (is_lw) begin
        addr_d = addr_q + 16'd1;
      end else if (x_q + 16'd1 == mm.count_x) begin
        x_d    = '0;
        row_d  = row_q + mm.stride_y;
        addr_d = row_q + mm.stride_y;
      end else begin
        x_d    = x_q + 16'd1;
        addr_d = addr_q + mm.stride_x;
      end
    end
  end

  assign sram_addr_o  = addr_q;
  assign sram_we_o    = 1'b0;
  assign sram_wdata_o = '0;

  // ---------------------------------------------------------------- read data side
  logic        rd_v_q, rd_lw_q, rd_last_q;
  logic [16:0] rd_k_q;
  logic [15:0] acc_row_q;           // accumulator row of the vector whose data arrives next

  logic [Cols-1:0] w_load;
  for (genvar n = 0; n < Cols; n++) begin : g_wload
    assign w_load[n] = rd_v_q && rd_lw_q && (rd_k_q == 17'(n));
  end

  logic [WordBits-1:0] act;
  assign act = (rd_v_q && !rd_lw_q) ? sram_rdata_i : '0;

  // Tag travelling with each vector: {valid, last, accumulate, acc row}; all zero without a
  // vector (accumulate and row only matter with valid).
  localparam int unsigned TagW  = 19;
  localparam int unsigned Chain = Rows + Cols - 1;
  logic            vec_in;
  logic [TagW-1:0] tag_in;
  logic [TagW-1:0] tag_q [Chain];
  assign vec_in = rd_v_q && !rd_lw_q;
  assign tag_in = {vec_in, (vec_in && rd_last_q) || zero_gnt_q,
                   vec_in && mm.accumulate, vec_in ? acc_row_q : 16'd0};

  // Activity gate (simulation speed only, no timing effect): the array and the tag chain advance
  // while a vector or a zero-size MATMUL's done tag is entering and for Rows+Cols+1 edges after
  // the last one. Once that has passed, every skew, activation, psum and tag register is zero
  // (zeros entered behind the last vector), which is also what the ungated registers would hold:
  // holding them is exactly equivalent. Weights load independently of the gate.
  localparam int unsigned Flush = Rows + Cols + 1;
  logic [15:0] busy_q;
  logic        pipe_en;
  assign pipe_en = vec_in || zero_gnt_q || (busy_q != '0);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pend_q     <= 1'b0;
      zero_gnt_q <= 1'b0;
      xfer_q     <= 1'b0;
      k_q        <= '0;
      addr_q     <= '0;
      row_q      <= '0;
      x_q        <= '0;
      rd_v_q     <= 1'b0;
      rd_lw_q    <= 1'b0;
      rd_last_q  <= 1'b0;
      rd_k_q     <= '0;
      acc_row_q  <= '0;
      busy_q     <= '0;
      for (int j = 0; j < int'(Chain); j++) tag_q[j] <= '0;
    end else begin
      pend_q     <= pend_d;
      zero_gnt_q <= start_i && is_mm && m_vec == '0;
      xfer_q     <= xfer_d;
      k_q        <= k_d;
      addr_q     <= addr_d;
      row_q      <= row_d;
      x_q        <= x_d;
      rd_v_q     <= acc_on;
      rd_lw_q    <= is_lw;
`ifdef TPU_BUG_KSTALL
      rd_last_q  <= last_acc && k_q[0];  // injected bug kstall: last vector only seen at odd k
`else
      rd_last_q  <= last_acc;
`endif
      rd_k_q     <= k_q;
      if (start_i)                     acc_row_q <= mm.acc_addr;
      else if (rd_v_q && !rd_lw_q)     acc_row_q <= acc_row_q + 16'd1;
      if (vec_in || zero_gnt_q) busy_q <= 16'(Flush);
      else if (busy_q != '0)    busy_q <= busy_q - 16'd1;
      if (pipe_en) begin
        tag_q[0] <= tag_in;
        for (int j = 1; j < int'(Chain); j++) tag_q[j] <= tag_q[j-1];
      end
    end
  end

  // ---------------------------------------------------------------- array and accumulator
  logic [Cols*32-1:0] psum;
  logic [Cols-1:0]    wr_en, wr_acc;
  logic [Cols*16-1:0] wr_addr;

  tpu_systolic_array #(
    .Rows (Rows),
    .Cols (Cols)
  ) u_array (
    .clk_i,
    .rst_ni,
    .en_i     (pipe_en),
    .w_load_i (w_load),
    .w_data_i (sram_rdata_i),
    .act_i    (act),
    .psum_o   (psum)
  );

  for (genvar n = 0; n < Cols; n++) begin : g_wr
    assign wr_en[n]            = tag_q[Rows + n - 1][18];
    assign wr_acc[n]           = tag_q[Rows + n - 1][16];
    assign wr_addr[n*16 +: 16] = tag_q[Rows + n - 1][15:0];
  end

  tpu_acc_buffer #(
    .Cols  (Cols),
    .Depth (AccDepth)
  ) u_acc (
    .clk_i,
    .rst_ni,
    .wr_en_i   (wr_en),
    .wr_addr_i (wr_addr),
    .wr_acc_i  (wr_acc),
    .wr_data_i (psum),
    .rd_addr_i (acc_rd_addr_i),
    .rd_data_o (acc_rd_data_o)
  );

  // ---------------------------------------------------------------- free and done
  logic lw_done, mm_free, mm_done, other_done;
  assign lw_done    = is_lw && acc_on && last_acc;
  assign mm_free    = tag_q[Rows - 2][17];
  assign mm_done    = tag_q[Chain - 1][17];
  assign other_done = start_i && !is_lw && !is_mm;
  assign free_o     = lw_done || mm_free || other_done;
  assign done_o     = lw_done || mm_done || other_done;

endmodule

`default_nettype wire
