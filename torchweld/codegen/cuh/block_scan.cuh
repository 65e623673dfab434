// Exclusive scan of v over the TY threads of each row (TY low bits of threadIdx.x); `total` is
// the row's sum (PROD: its product). No subtraction or division: a row of -inf stays -inf, a zero
// stays a zero. All threads of the block call it.
template <int NT, int TY, bool PROD = false> __device__ __forceinline__ float tw_block_scan(float v, float& total) {
  __shared__ float sm[NT / 32 + 1];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  constexpr int W = TY < 32 ? TY : 32;
#pragma unroll
  for (int o = 1; o < W; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, v, o, W);
    if ((lane % W) >= o) v = PROD ? v * n : v + n;
  }
  float exc = __shfl_up_sync(0xffffffffu, v, 1, W);
  if (lane % W == 0) exc = PROD ? 1.0f : 0.0f;
  if (TY <= 32) {
    total = __shfl_sync(0xffffffffu, v, (lane / W) * W + W - 1, 32);
    return exc;
  }
  constexpr int WPR = TY / 32;
  __syncthreads();  // NOTE: sm may still be read by the previous call
  if (lane == 31) sm[warp] = v;
  __syncthreads();
  const int first = (warp / WPR) * WPR;
  float before = PROD ? 1.0f : 0.0f, all = before;
#pragma unroll
  for (int k = 0; k < WPR; ++k) {
    const float s = sm[first + k];
    if (first + k < warp) before = PROD ? before * s : before + s;
    all = PROD ? all * s : all + s;
  }
  total = all;
  return warp == first ? exc : PROD ? before * exc : before + exc;
}
