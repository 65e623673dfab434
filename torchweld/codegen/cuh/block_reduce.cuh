// Block reductions over the threads that share an output: `ty` in the low bits of threadIdx.x
// (RM: one row's threads side by side) or in the high bits (inner-dim columns side by side).
template <int OP> __device__ __forceinline__ float tw_comb(float a, float b) {
  return OP == 0 ? a + b : OP == 1 ? tw_max(a, b) : OP == 2 ? tw_min(a, b) : a * b;
}
template <int OP, int NT, int TX, int TY, bool RM>
__device__ __forceinline__ float tw_block_reduce(float v) {
  __shared__ float sm[NT];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (RM) {
#pragma unroll
    for (int o = (TY < 32 ? TY : 32) / 2; o > 0; o >>= 1) v = tw_comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (TY <= 32) return v;
    constexpr int WPR = TY > 32 ? TY / 32 : 1;  // warps per row
    __syncthreads();  // NOTE: sm may still be read by the previous call
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    float r = sm[first];
#pragma unroll
    for (int k = 1; k < WPR; ++k) r = tw_comb<OP>(r, sm[first + k]);
    return r;
  } else {
#pragma unroll
    for (int o = 16; o >= TX; o >>= 1) v = tw_comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    constexpr int NW = NT / 32;
    if (NW == 1) return v;
    __syncthreads();
    if (lane < TX) sm[warp * 32 + lane] = v;
    __syncthreads();
    const int tx = lane % TX;
    float r = sm[tx];
#pragma unroll
    for (int k = 1; k < NW; ++k) r = tw_comb<OP>(r, sm[k * 32 + tx]);
    return r;
  }
}
// Online softmax step: running max m and sum s of exp(x - m). Equal values add 1 so that a row
// of -inf (or +inf) never computes inf - inf here; NaN inputs make s NaN.
__device__ __forceinline__ void tw_online(float x, float& m, float& s) {
  if (x > m) { s = s * expf(m - x) + 1.0f; m = x; }
  else if (x == m) { s += 1.0f; }
  else { s += expf(x - m); }
}
// Two (max, sum of exp) pairs as one, by the same rule.
__device__ __forceinline__ void tw_merge(float& m, float& s, float m2, float s2) {
  if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
  else if (m2 == m) { s += s2; }
  else { s += s2 * expf(m2 - m); }
}
// PyTorch's arg-max/min order: NaN wins, then the larger (smaller) value, ties to the lower index.
template <bool MAX> __device__ __forceinline__ bool tw_better(float a, int ia, float b, int ib) {
  if (a != a) return b != b ? ia < ib : true;
  if (b != b) return false;
  return a == b ? ia < ib : (MAX ? a > b : a < b);
}
template <bool MAX, int NT, int TX, int TY, bool RM>
__device__ __forceinline__ void tw_block_argreduce(float& v, int& ix) {
  __shared__ float sv[NT];
  __shared__ int si[NT];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (RM) {
#pragma unroll
    for (int o = (TY < 32 ? TY : 32) / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, ix, o);
      if (tw_better<MAX>(ov, oi, v, ix)) { v = ov; ix = oi; }
    }
    if (TY <= 32) return;
    constexpr int WPR = TY > 32 ? TY / 32 : 1;
    __syncthreads();
    if (lane == 0) { sv[warp] = v; si[warp] = ix; }
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    v = sv[first]; ix = si[first];
#pragma unroll
    for (int k = 1; k < WPR; ++k) if (tw_better<MAX>(sv[first + k], si[first + k], v, ix)) { v = sv[first + k]; ix = si[first + k]; }
  } else {
#pragma unroll
    for (int o = 16; o >= TX; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, ix, o);
      if (tw_better<MAX>(ov, oi, v, ix)) { v = ov; ix = oi; }
    }
    constexpr int NW = NT / 32;
    if (NW == 1) return;
    __syncthreads();
    if (lane < TX) { sv[warp * 32 + lane] = v; si[warp * 32 + lane] = ix; }
    __syncthreads();
    const int tx = lane % TX;
    v = sv[tx]; ix = si[tx];
#pragma unroll
    for (int k = 1; k < NW; ++k) if (tw_better<MAX>(sv[k * 32 + tx], si[k * 32 + tx], v, ix)) { v = sv[k * 32 + tx]; ix = si[k * 32 + tx]; }
  }
}
