// torchweld GEMM, portable main loop (sm_80 and later): cp.async into a STAGES-deep ring of swizzled
// tiles, mma.sync from registers (m16n8k8 TF32, m16n8k16 fp16/bf16), fp32 accumulators.
// 3xTF32: both fragments split in registers (hi = rna(x), lo = rna(x - hi)); the three products of a
// k-step go into a fresh 4-register accumulator that is then added to the running one, so the tensor
// core's own accumulation rounding only ever sees three terms (docs/gemm.md, "Numerics").
#ifndef TWG_SM80_CUH
#define TWG_SM80_CUH


// Loads the tile (ROWS mn-values from mn0) x (BK k-values from k0) of an operand, zero outside
// [0, MN) x [0, K). VEC: 16-byte cp.async chunks along the contiguous dimension, partial chunks at the
// edges zero-filled by the copy itself; else element loads (any strides, any alignment).
template <typename T, bool KMAJ, int ROWS, int BK, int NT, bool VEC>
TWG_DEV void twg_load_tile(unsigned char* dst, const T* src, int mn0, int k0, int MN, int K, long long s_mn,
                           long long s_k, int tid) {
  constexpr int ES = sizeof(T), V = 16 / ES;
  if (VEC) {
    constexpr int CHUNKS = ROWS * BK / V;
    static_assert(CHUNKS % NT == 0, "tile chunks must divide among the threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / NT; ++i) {
      const int c = tid + i * NT;
      int r, kk, valid;
      const T* g = src;
      if (KMAJ) {  // chunk = V consecutive k of one row
        r = c / (BK / V);
        kk = (c % (BK / V)) * V;
        const int mn = mn0 + r, k = k0 + kk;
        valid = mn < MN ? min(max(K - k, 0), V) : 0;
        if (valid) g = src + mn * s_mn + k;
      } else {  // chunk = V consecutive mn of one k
        kk = c / (ROWS / V);
        r = (c % (ROWS / V)) * V;
        const int mn = mn0 + r, k = k0 + kk;
        valid = k < K ? min(max(MN - mn, 0), V) : 0;
        if (valid) g = src + k * s_k + mn;
      }
      twg_cp_async16(dst + twg_tile_off<KMAJ, BK, ES>(r, kk), g, valid * ES);
    }
  } else {
    constexpr int ELEMS = ROWS * BK;
    static_assert(ELEMS % NT == 0, "tile elements must divide among the threads");
#pragma unroll 1  // NOTE: unrolled, ptxas keeps the tile's loads in flight and spills (this is the fallback loader)
    for (int i = 0; i < ELEMS / NT; ++i) {
      const int e = tid + i * NT;
      const int r = KMAJ ? e / BK : e % ROWS, kk = KMAJ ? e % BK : e / ROWS;
      const int mn = mn0 + r, k = k0 + kk;
      const T v = (mn < MN && k < K) ? src[mn * s_mn + k * s_k] : twg_to<T>(0.0f);
      *reinterpret_cast<T*>(dst + twg_tile_off<KMAJ, BK, ES>(r, kk)) = v;
    }
  }
}

// Two consecutive-k 16-bit elements (k, k+1) of a tile as one register, the lower k in the low half.
template <bool KMAJ, int BK>
TWG_DEV uint32_t twg_pair16(const unsigned char* tile, int mn, int k) {
  if (KMAJ) return *reinterpret_cast<const uint32_t*>(tile + twg_tile_off<true, BK, 2>(mn, k));
  const uint32_t lo = *reinterpret_cast<const uint16_t*>(tile + twg_tile_off<false, BK, 2>(mn, k));
  const uint32_t hi = *reinterpret_cast<const uint16_t*>(tile + twg_tile_off<false, BK, 2>(mn, k + 1));
  return lo | (hi << 16);
}

// One k-step (8 for TF32, 16 for fp16/bf16) of a warp's WM x WN tile.
template <class S, int WM, int WN, int BK>
TWG_DEV void twg_sm80_kstep(float (&acc)[WM / 16][WN / 8][4], const unsigned char* sa, const unsigned char* sb,
                            int wm0, int wn0, int kk, int g, int t) {
  using T = typename S::T;
  constexpr int MF = WM / 16, NF = WN / 8;
  uint32_t ah[MF][4], bh[NF][2];
  if constexpr (sizeof(T) == 4) {
    uint32_t al[MF][4], bl[NF][2];
#pragma unroll
    for (int i = 0; i < MF; ++i) {
      const int r = wm0 + 16 * i + g;
      const float x[4] = {twg_ld32<S::A_KMAJ, BK>(sa, r, kk + t), twg_ld32<S::A_KMAJ, BK>(sa, r + 8, kk + t),
                          twg_ld32<S::A_KMAJ, BK>(sa, r, kk + t + 4), twg_ld32<S::A_KMAJ, BK>(sa, r + 8, kk + t + 4)};
#pragma unroll
      for (int q = 0; q < 4; ++q) twg_split<S::PREC>(x[q], ah[i][q], al[i][q]);
    }
#pragma unroll
    for (int j = 0; j < NF; ++j) {
      const int n = wn0 + 8 * j + g;
      twg_split<S::PREC>(twg_ld32<S::B_KMAJ, BK>(sb, n, kk + t), bh[j][0], bl[j][0]);
      twg_split<S::PREC>(twg_ld32<S::B_KMAJ, BK>(sb, n, kk + t + 4), bh[j][1], bl[j][1]);
    }
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j) {
        if constexpr (S::PREC == 3) {
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          twg_mma_tf32(part, al[i], bh[j]);
          twg_mma_tf32(part, ah[i], bl[j]);
          twg_mma_tf32(part, ah[i], bh[j]);
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[i][j][q] += part[q];
        } else {
          twg_mma_tf32(acc[i][j], ah[i], bh[j]);
        }
      }
  } else {
#pragma unroll
    for (int i = 0; i < MF; ++i) {
      const int r = wm0 + 16 * i + g;
      ah[i][0] = twg_pair16<S::A_KMAJ, BK>(sa, r, kk + 2 * t);
      ah[i][1] = twg_pair16<S::A_KMAJ, BK>(sa, r + 8, kk + 2 * t);
      ah[i][2] = twg_pair16<S::A_KMAJ, BK>(sa, r, kk + 2 * t + 8);
      ah[i][3] = twg_pair16<S::A_KMAJ, BK>(sa, r + 8, kk + 2 * t + 8);
    }
#pragma unroll
    for (int j = 0; j < NF; ++j) {
      const int n = wn0 + 8 * j + g;
      bh[j][0] = twg_pair16<S::B_KMAJ, BK>(sb, n, kk + 2 * t);
      bh[j][1] = twg_pair16<S::B_KMAJ, BK>(sb, n, kk + 2 * t + 8);
    }
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j) {
        if constexpr (twg_same<T, __half>::value) twg_mma_f16(acc[i][j], ah[i], bh[j]);
        else twg_mma_bf16(acc[i][j], ah[i], bh[j]);
      }
  }
}

// Block: (BM / WM) x (BN / WN) warps. Grid: (tiles, batch); with a row reduction a block walks every
// column tile of its BM rows (grid (tiles_m, batch)) and its warps span all BN columns (WN == BN).
template <class S, int BM, int BN, int WM, int WN, int STAGES, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) twg_sm80(const typename S::Ptrs p) {
#if defined(TWG_SM80)
  using T = typename S::T;
  constexpr int ES = sizeof(T), BK = 128 / ES, NT = (BM / WM) * (BN / WN) * 32;
  constexpr int KT = (S::K + BK - 1) / BK, TILES_M = (S::M + BM - 1) / BM, TILES_N = (S::N + BN - 1) / BN;
  constexpr int MF = WM / 16, NF = WN / 8, KSTEP = ES == 4 ? 8 : 16;
  constexpr int A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  static_assert(!S::REDUCE || WN == BN, "a row reduction needs each warp to span the block's columns");
  unsigned char* smem = twg_align1024(twg_dyn_smem());
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int b = blockIdx.y;
  int tm, tn0;
  if (S::REDUCE) tm = blockIdx.x, tn0 = 0;
  else twg_tile_of<8>(blockIdx.x, TILES_M, TILES_N, tm, tn0);
  const int total = (S::REDUCE ? TILES_N : 1) * KT, m0 = tm * BM;
  const T* A = p.a + b * S::SA_B;
  const T* B = p.b + b * S::SB_B;

  auto load = [&](int it) {
    unsigned char* st = smem + (it % STAGES) * STAGE;
    const int k0 = (it % KT) * BK, n0 = (tn0 + it / KT) * BN;
    twg_load_tile<T, S::A_KMAJ, BM, BK, NT, VEC>(st, A, m0, k0, S::M, S::K, S::SA_M, S::SA_K, tid);
    twg_load_tile<T, S::B_KMAJ, BN, BK, NT, VEC>(st + A_BYTES, B, n0, k0, S::N, S::K, S::SB_N, S::SB_K, tid);
  };

  float acc[MF][NF][4];
  float red[MF][2];
#pragma unroll
  for (int i = 0; i < MF; ++i) {
    red[i][0] = red[i][1] = twg_red_init<S::REDUCE ? S::REDUCE : 1>();
#pragma unroll
    for (int j = 0; j < NF; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < total) load(s);
    twg_cp_commit();
  }
  for (int it = 0; it < total; ++it) {
    twg_cp_wait<STAGES - 2>();  // this thread's copies for `it` have landed...
    __syncthreads();             // ...and everyone's; the stage refilled below was read last iteration
    if (it + STAGES - 1 < total) load(it + STAGES - 1);
    twg_cp_commit();
    const unsigned char* sa = smem + (it % STAGES) * STAGE;
    // NOTE: not unrolled: unrolled, the compiler hoists every step's fragment loads and spills
#pragma unroll 1
    for (int kk = 0; kk < BK; kk += KSTEP) twg_sm80_kstep<S, WM, WN, BK>(acc, sa, sa + A_BYTES, wm0, wn0, kk, g, t);
    if (it % KT == KT - 1) {
      const int n0 = (tn0 + it / KT) * BN;
#pragma unroll
      for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            twg_out<S>(p, b, m0 + wm0 + 16 * i + g + 8 * (q / 2), n0 + wn0 + 8 * j + 2 * t + q % 2, acc[i][j][q],
                       red[i][q / 2]);
            acc[i][j][q] = 0.0f;
          }
    }
  }
  if (S::REDUCE) {
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float r = twg_red_quad<S::REDUCE ? S::REDUCE : 1>(red[i][h]);
        if (t == 0) twg_out_row<S>(p, b, m0 + wm0 + 16 * i + g + 8 * h, r);
      }
  }
#endif
}
#endif  // TWG_SM80_CUH
