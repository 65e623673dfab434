// torchweld convolution: reductions in the epilogue (S::RED, conv_spec.py's `reduce`). After the main
// loop a block writes its accumulators to a tile of floats in shared memory, rows of BN + 1 (the padding
// keeps column walks and row walks off one bank), applies the epilogue (S::value: bias, folded ops) to it
// in place, then
//   RED 1-4 (sum, mean, max, min over every output pixel of an image and channel): for each image its
//     rows reach and each column, the combine of those rows in a fixed order, to the workspace slot
//     (image, row tile - the image's first row tile, channel): no atomics, so the result does not depend
//     on which block runs first; twc_red_final combines an image's slots in order, divides a mean and
//     applies S::post. The full output is stored only where S::STORE (something else reads it).
//   RED 5-6 (softmax, log_softmax over the channels of a pixel; the block's tile holds every channel:
//     one group, BN >= N): one thread per row takes the max, the sum of exponentials and writes the
//     row, each value through S::post; RED 7-10 (the channels' sum, mean, max, min): one value a row.
// Rows are the plain (n, d, h, w) order (no pool, no phase order): an image's rows are consecutive.
#ifndef TWC_REDUCE_CUH
#define TWC_REDUCE_CUH

// Row tiles of height BM that can reach one image: the workspace slots per image and channel.
template <class S, int BM> TWG_DEV constexpr int twc_slots() { return (S::OD * S::OH * S::OW + BM - 1) / BM + 1; }

// twg_red's combine for a pixel or channel reduction: sum (and mean), max, min (max and min propagate NaN).
template <class S> TWG_DEV constexpr int twc_red_op() {
  return (S::RED == 3 || S::RED == 9) ? 2 : (S::RED == 4 || S::RED == 10) ? 3 : 1;
}

// One accumulator (row m, group column j) of a reducing site into the tile, as it is: the epilogue runs
// later over the whole tile, every thread of the block taking part (fewer live registers at the loop's end).
template <class S, int BN> TWG_DEV void twc_red_put(float* tile, int m0, int n0, int m, int j, float acc) {
  tile[(m - m0) * (BN + 1) + (j - n0)] = acc;
}

// The block's part once its tile is written (after a barrier): partials (RED 1-4) or rows (5-10).
template <class S, int BM, int BN, int NT>
TWG_DEV void twc_red_end(const typename S::Ptrs& p, float* tile, int g, int m0, int n0, int tid) {
  constexpr int HW = S::OD * S::OH * S::OW;
  const int last = min(m0 + BM, S::M) - 1;
  // The epilogue over the tile in place (and the full output where stored), consecutive threads on
  // consecutive rows: the captured (NCHW) layout's stores and operand reads are contiguous.
#pragma unroll 1  // NOTE: unrolled, ptxas spilled in some mma.sync builds
  for (int e = tid; e < BM * BN; e += NT) {
    const int r = e % BM, col = e / BM, m = m0 + r, j = n0 + col;
    if (m > last || j >= S::N) continue;
    const int c = g * S::N + j;
    const twc_pix q = twc_pixel<S>(m);
    const float v = S::value(p, q, c, tile[r * (BN + 1) + col]);
    if constexpr (S::STORE)
      p.out[q.n * S::ON + (long long)c * S::OC + q.d * S::OSD + q.h * S::OSH + q.w * S::OSW] = twg_to<typename S::T>(v);
    tile[r * (BN + 1) + col] = v;
  }
  __syncthreads();
  if constexpr (S::RED <= 4) {
    const int n_lo = m0 / HW, images = last / HW - n_lo + 1;
#pragma unroll 1
    for (int i = tid; i < BN * images; i += NT) {
      const int col = i % BN, n = n_lo + i / BN;
      if (n0 + col >= S::N) continue;
      const int r0 = max(n * HW, m0) - m0, r1 = min((n + 1) * HW - 1, last) - m0;
      float v = tile[r0 * (BN + 1) + col];
      for (int r = r0 + 1; r <= r1; ++r) v = twg_red<twc_red_op<S>()>(v, tile[r * (BN + 1) + col]);
      const int slot = m0 / BM - n * HW / BM;
      p.ws[((long long)n * twc_slots<S, BM>() + slot) * S::CO + g * S::N + n0 + col] = v;
    }
  } else {
    // TPR adjacent lanes share a row, each reading and writing only its columns j = part + TPR i, combined by
    // shuffles (a fixed order); every lane of a warp takes part (a row past the tile's last reads nothing)
    constexpr int TPR = NT / BM >= 4 ? 4 : NT / BM >= 2 ? 2 : 1, OP = twc_red_op<S>();
#pragma unroll 1
    for (int r0 = 0; r0 < BM; r0 += NT / TPR) {
      const int r = r0 + tid / TPR, part = tid % TPR;
      const bool ok = r < BM && m0 + r <= last;
      const int jn = ok ? S::N : 0;
      float* row = tile + (ok ? r : 0) * (BN + 1);
      const twc_pix q = twc_pixel<S>(ok ? m0 + r : 0);
      typename S::T* out = p.out + q.n * S::ON + q.d * S::OSD + q.h * S::OSH + q.w * S::OSW;
      if constexpr (S::RED >= 7) {  // one value per pixel: the channels' sum, mean, max or min
        float v = twg_red_init<OP>();
        for (int j = part; j < jn; j += TPR) v = twg_red<OP>(v, row[j]);
        for (int s = 1; s < TPR; s *= 2) v = twg_red<OP>(v, __shfl_xor_sync(0xffffffffu, v, s));
        if (ok && part == 0) out[0] = twg_to<typename S::T>(S::post(p, 0, S::RED == 8 ? v / (float)S::N : v));
      } else {
        float mx = twg_red_init<2>(), sum = 0.0f;
        for (int j = part; j < jn; j += TPR) mx = twg_red<2>(mx, row[j]);
        for (int s = 1; s < TPR; s *= 2) mx = twg_red<2>(mx, __shfl_xor_sync(0xffffffffu, mx, s));
        for (int j = part; j < jn; j += TPR) {  // softmax keeps each exponential in the row (one expf an element)
          const float e = expf(row[j] - mx);
          sum += e;
          if (S::RED == 5) row[j] = e;
        }
        for (int s = 1; s < TPR; s *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
        const float scale = 1.0f / sum, lse = logf(sum);  // NOTE: (x - max) - lse, not x - (max + lse): no cancellation
        for (int j = part; j < jn; j += TPR)
          out[(long long)j * S::OC] = twg_to<typename S::T>(S::post(p, j, S::RED == 5 ? row[j] * scale : (row[j] - mx) - lse));
      }
    }
  }
}

// RED 1-4: one thread per (image, channel) combines the image's slots in order (the blocks' row tiles of
// height BM), divides a mean by the pixels, applies S::post and writes the result.
template <class S, int BM> __global__ void twc_red_final(const typename S::Ptrs p) {
  constexpr int HW = S::OD * S::OH * S::OW;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)S::NB * S::CO) return;
  const int n = (int)(i / S::CO), c = (int)(i % S::CO);
  const int count = ((n + 1) * HW - 1) / BM - n * HW / BM + 1;
  const float* ws = p.ws + (long long)n * twc_slots<S, BM>() * S::CO + c;
  float v = ws[0];
  for (int s = 1; s < count; ++s) v = twg_red<twc_red_op<S>()>(v, ws[(long long)s * S::CO]);
  if (S::RED == 2) v /= (float)HW;
  p.red[n * S::RN + (long long)c * S::RC] = twg_to<typename S::T>(S::post(p, c, v));
}
#endif  // TWC_REDUCE_CUH
