// Gray-code conversion for the counters that cross clock domains (queue pointers, token
// counters, DMA request/completion counters, retire counters). One definition for every user:
// counters of any width up to GrayBits are zero-extended, converted and truncated back, which
// gives the same bits as a conversion at their own width.
`default_nettype none

package tpu_gray_pkg;

  localparam int unsigned GrayBits = 32;
  typedef logic [GrayBits-1:0] gray_word_t;

  function automatic gray_word_t bin2gray(gray_word_t b);
    return b ^ (b >> 1);
  endfunction

  function automatic gray_word_t gray2bin(gray_word_t g);
    gray_word_t b;
    b = g;
    for (int s = 1; s < int'(GrayBits); s = s * 2) b = b ^ (b >> s);
    return b;
  endfunction

endpackage

`default_nettype wire
