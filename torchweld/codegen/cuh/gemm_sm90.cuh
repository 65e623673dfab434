// torchweld GEMM, Hopper main loop (sm_90a). One block = 1 producer warpgroup + BM/64 consumer
// warpgroups (64 rows x BN columns each).
//   warp 0, one thread:  TMA copies of the A and B tiles into a STAGES-deep ring, one mbarrier per stage
//                        (`full`: bytes landed; `empty`: every reader done);
//   warps 1-3:           the converter, when B needs it: fp32 B to K-major TF32 tiles in a 2-deep ring
//                        (`cfull`/`cempty`), the TF32 transposed copy (hi) where B is N-major and the
//                        3xTF32 remainder (lo) always; then fence.proxy.async so wgmma sees the stores;
//   consumers:           wgmma.mma_async, fp32 accumulators in registers. A comes from shared memory
//                        through a descriptor, or from registers where it must be split (3xTF32) or
//                        is TF32 but M-major (TF32 wgmma reads only K-major shared tiles).
// Tiles use the 128-byte swizzle (gemm_tile.cuh); edges and K tails are TMA's zero fill.
#ifndef TWG_SM90_CUH
#define TWG_SM90_CUH

// A wgmma shared-memory matrix descriptor: start address, leading/stride byte offsets, 128-byte swizzle.
TWG_DEV uint64_t twg_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((twg_smem_u32(smem) & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
// Descriptor of k-step j of a tile (32 bytes of k per step): K-major rows are 128 bytes, 8-row groups
// 1024 apart; an MN-major step is 32 / ES = BK / 4 k-rows of 128 bytes (8-row groups 1024 apart), its
// 128-byte-wide boxes BK * 128 apart.
template <bool KMAJ, int BK> TWG_DEV uint64_t twg_desc_step(const unsigned char* tile, int j) {
  return KMAJ ? twg_desc(tile + 32 * j, 16, 1024) : twg_desc(tile + 32 * BK * j, BK * 128, 1024);
}

template <bool RANK3>
TWG_DEV void twg_tma(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int batch) {
  if (RANK3) twg_tma_load_3d(dst, map, bar, c0, c1, batch);
  else twg_tma_load_2d(dst, map, bar, c0, c1);
}

// B's TF32 high part: RNA false: x itself, which the tensor core reads as trunc(x) (its low 13 bits
// ignored); RNA true: rna(x), written by the converter. The remainder: rna(x - hi), 0 for inf/NaN.
template <bool RNA> TWG_DEV float twg_hi(float x) {
  return RNA ? __uint_as_float(twg_tf32(x)) : __uint_as_float(__float_as_uint(x) & 0xffffe000u);
}
template <bool RNA> TWG_DEV float twg_lo(float x) {
  return fabsf(x) < __int_as_float(0x7f800000) ? __uint_as_float(twg_tf32(x - twg_hi<RNA>(x))) : 0.0f;
}
template <bool RNA> TWG_DEV float4 twg_hi4(float4 x) {
  return RNA ? make_float4(twg_hi<true>(x.x), twg_hi<true>(x.y), twg_hi<true>(x.z), twg_hi<true>(x.w)) : x;
}
template <bool RNA> TWG_DEV float4 twg_lo4(float4 x) {
  return make_float4(twg_lo<RNA>(x.x), twg_lo<RNA>(x.y), twg_lo<RNA>(x.z), twg_lo<RNA>(x.w));
}

template <class S, int BM, int BN, int STAGES> struct twg_sm90_cfg {
  using T = typename S::T;
  static constexpr int ES = sizeof(T), BK = 128 / ES, E = 128 / ES, KS = ES == 4 ? BK / 8 : BK / 16;
  static constexpr int KT = (S::K + BK - 1) / BK, TILES_M = (S::M + BM - 1) / BM, TILES_N = (S::N + BN - 1) / BN;
  static constexpr int CWG = BM / 64, THREADS = 128 * (CWG + 1), CONS_WARPS = 4 * CWG, CONV_WARPS = 3;
  static constexpr bool A_REGS = S::PREC == 3 || (ES == 4 && !S::A_KMAJ);
  // NOTE: B_HI_RNA (GemmSpec.tf32_hi = "rna") also writes B's hi part for a K-major B, rounded.
  static constexpr bool HI_RNA = S::PREC == 3 && S::B_HI_RNA;
  static constexpr bool CONV_HI = ES == 4 && (!S::B_KMAJ || HI_RNA), CONV_LO = S::PREC == 3, CONVERT = CONV_HI || CONV_LO;
  static constexpr bool FOLD = S::FOLD != 0, PIPE = !A_REGS && !FOLD;
  static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE = A_BYTES + B_BYTES;
  static constexpr int CBUF = ((CONV_HI ? 1 : 0) + (CONV_LO ? 1 : 0)) * B_BYTES;
  static constexpr int SMEM = STAGES * STAGE + 2 * CBUF + 1024;  // + slack to align the ring to 1024
  static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups");
  static_assert(BN % 64 == 0 && BN <= 256, "wgmma N and the 64-wide MN-major boxes");
};

template <class S, int BM, int BN, int STAGES>
TWG_DEV void twg_sm90_produce(const CUtensorMap* ma, const CUtensorMap* mb, unsigned char* smem, uint64_t* full,
                              uint64_t* empty, int b, int m0, int tn0, int total) {
  using C = twg_sm90_cfg<S, BM, BN, STAGES>;
  for (int it = 0; it < total; ++it) {
    const int s = it % STAGES, k0 = (it % C::KT) * C::BK, n0 = (tn0 + it / C::KT) * BN;
    unsigned char* st = smem + s * C::STAGE;
    twg_mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
    twg_mbar_arrive_tx(&full[s], C::STAGE);  // NOTE: TMA counts whole boxes, zero-filled parts included
    if (S::A_KMAJ) twg_tma<S::A_RANK3>(st, ma, &full[s], k0, m0, b);
    else
      for (int j = 0; j < BM / C::E; ++j) twg_tma<S::A_RANK3>(st + j * C::BK * 128, ma, &full[s], m0 + j * C::E, k0, b);
    if (S::B_KMAJ) twg_tma<S::B_RANK3>(st + C::A_BYTES, mb, &full[s], k0, n0, b);
    else
      for (int j = 0; j < BN / C::E; ++j)
        twg_tma<S::B_RANK3>(st + C::A_BYTES + j * C::BK * 128, mb, &full[s], n0 + j * C::E, k0, b);
  }
}

template <class S, int BM, int BN, int STAGES>
TWG_DEV void twg_sm90_convert(unsigned char* smem, unsigned char* conv, uint64_t* full, uint64_t* empty,
                              uint64_t* cfull, uint64_t* cempty, int ct, int lane, int total) {
  using C = twg_sm90_cfg<S, BM, BN, STAGES>;
  constexpr int NTH = 32 * C::CONV_WARPS;
  for (int it = 0; it < total; ++it) {
    const int s = it % STAGES, c = it & 1;
    twg_mbar_wait(&full[s], (it / STAGES) & 1);
    twg_mbar_wait(&cempty[c], ((it >> 1) & 1) ^ 1);
    const unsigned char* src = smem + s * C::STAGE + C::A_BYTES;
    unsigned char* hi = conv + c * C::CBUF;
    unsigned char* lo = hi + (C::CONV_HI ? C::B_BYTES : 0);
    if constexpr (S::B_KMAJ) {  // already K-major: each 16-byte chunk's parts to the same place
      for (int q = ct; q < BN * 8; q += NTH) {
        const float4 x = *reinterpret_cast<const float4*>(src + q * 16);
        if (C::CONV_HI) *reinterpret_cast<float4*>(hi + q * 16) = twg_hi4<C::HI_RNA>(x);
        *reinterpret_cast<float4*>(lo + q * 16) = twg_lo4<C::HI_RNA>(x);
      }
    } else {  // N-major boxes to K-major rows, a 4 x 4 block at a time
      for (int q = ct; q < (BN / 4) * (C::BK / 4); q += NTH) {
        const int n = (q % (BN / 4)) * 4, k = (q / (BN / 4)) * 4;
        float4 r[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) r[i] = *reinterpret_cast<const float4*>(src + twg_tile_off<false, C::BK, 4>(n, k + i));
        const float4 col[4] = {make_float4(r[0].x, r[1].x, r[2].x, r[3].x), make_float4(r[0].y, r[1].y, r[2].y, r[3].y),
                               make_float4(r[0].z, r[1].z, r[2].z, r[3].z), make_float4(r[0].w, r[1].w, r[2].w, r[3].w)};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t o = twg_tile_off<true, C::BK, 4>(n + j, k);
          if (C::CONV_HI) *reinterpret_cast<float4*>(hi + o) = twg_hi4<C::HI_RNA>(col[j]);
          if (C::CONV_LO) *reinterpret_cast<float4*>(lo + o) = twg_lo4<C::HI_RNA>(col[j]);
        }
      }
    }
    twg_fence_proxy_async();
    __syncwarp();
    if (lane == 0) {
      twg_mbar_arrive(&cfull[c]);
      twg_mbar_arrive(&empty[s]);
    }
  }
}

// The wgmmas of one k-tile into acc; `first` is the scale of acc at the first (0: overwrite).
// 3xTF32 order: every lo*hi, then every hi*lo, then every hi*hi, so the small terms are summed
// before the accumulator grows (docs/gemm.md, "Numerics").
template <class S, int BM, int BN, int STAGES>
TWG_DEV void twg_sm90_mma(float (&acc)[BN / 2], const uint32_t (&ah)[twg_sm90_cfg<S, BM, BN, STAGES>::KS][4],
                          const uint32_t (&al)[twg_sm90_cfg<S, BM, BN, STAGES>::KS][4], const unsigned char* st,
                          const unsigned char* bhi, const unsigned char* blo, int cw, int first) {
  using C = twg_sm90_cfg<S, BM, BN, STAGES>;
  constexpr bool BHI_K = S::B_KMAJ || C::CONV_HI;
  if constexpr (C::A_REGS) {
#pragma unroll
    for (int j = 0; j < C::KS; ++j)
      twg_wgmma_rs_tf32<BN>(acc, S::PREC == 3 ? al[j] : ah[j], twg_desc_step<BHI_K, C::BK>(bhi, j), j == 0 ? first : 1);
    if constexpr (S::PREC == 3) {
#pragma unroll
      for (int j = 0; j < C::KS; ++j) twg_wgmma_rs_tf32<BN>(acc, ah[j], twg_desc_step<true, C::BK>(blo, j), 1);
#pragma unroll
      for (int j = 0; j < C::KS; ++j) twg_wgmma_rs_tf32<BN>(acc, ah[j], twg_desc_step<BHI_K, C::BK>(bhi, j), 1);
    }
  } else {
    const unsigned char* a = st + cw * (S::A_KMAJ ? 64 * 128 : C::BK * 128);  // this warpgroup's 64 rows
#pragma unroll
    for (int j = 0; j < C::KS; ++j) {
      const uint64_t da = twg_desc_step<S::A_KMAJ, C::BK>(a, j), db = twg_desc_step<BHI_K, C::BK>(bhi, j);
      if constexpr (C::ES == 4) twg_wgmma_ss_tf32<BN>(acc, da, db, j == 0 ? first : 1);
      else if constexpr (twg_same<typename S::T, __half>::value)
        twg_wgmma_ss_f16<BN, !S::A_KMAJ, !S::B_KMAJ>(acc, da, db, j == 0 ? first : 1);
      else twg_wgmma_ss_bf16<BN, !S::A_KMAJ, !S::B_KMAJ>(acc, da, db, j == 0 ? first : 1);
    }
  }
}

// A consumer warp is done with k-tile `it`: its stage (and conversion buffer) may be refilled.
template <bool CONVERT>
TWG_DEV void twg_sm90_release(uint64_t* empty, uint64_t* cempty, int it, int stages, int lane) {
  __syncwarp();
  if (lane == 0) {
    twg_mbar_arrive(&empty[it % stages]);
    if (CONVERT) twg_mbar_arrive(&cempty[it & 1]);
  }
}

// Accumulator i of a thread (lane = 4g + t, warp w of its warpgroup) is row 16w + g + 8 ((i / 2) % 2),
// column 8 (i / 4) + 2t + i % 2.
template <class S, int BN>
TWG_DEV void twg_sm90_out(const typename S::Ptrs& p, int b, int row, int n0, int t, const float (&x)[BN / 2],
                          float (&red)[2]) {
#pragma unroll
  for (int i = 0; i < BN / 2; ++i)
    twg_out<S>(p, b, row + 8 * ((i / 2) % 2), n0 + 8 * (i / 4) + 2 * t + i % 2, x[i], red[(i / 2) % 2]);
}

// This thread's A fragments of k-tile `st` (rows r0, r0 + 8; k = 8j + t, 8j + t + 4), split for 3xTF32.
template <class S, int BK, int KS>
TWG_DEV void twg_sm90_load_a(const unsigned char* st, int r0, int t, uint32_t (&ah)[KS][4], uint32_t (&al)[KS][4]) {
#pragma unroll
  for (int j = 0; j < KS; ++j) {
    const int k = 8 * j + t;
    const float x[4] = {twg_ld32<S::A_KMAJ, BK>(st, r0, k), twg_ld32<S::A_KMAJ, BK>(st, r0 + 8, k),
                        twg_ld32<S::A_KMAJ, BK>(st, r0, k + 4), twg_ld32<S::A_KMAJ, BK>(st, r0 + 8, k + 4)};
#pragma unroll
    for (int q = 0; q < 4; ++q) twg_split<S::PREC>(x[q], ah[j][q], al[j][q]);
  }
}

// Column tiles (all of them with a row reduction, else one) of k-tiles each; `it` counts k-tiles
// across them as the producer and the converter do. With A from registers, the next k-tile's
// fragments are loaded into a second set while this k-tile's wgmmas run, and moved over after the
// wait (a copy, so every register index stays a constant and no wait sits in a branch).
template <class S, int BM, int BN, int STAGES>
TWG_DEV void twg_sm90_consume(const typename S::Ptrs& p, unsigned char* smem, unsigned char* conv, uint64_t* full,
                              uint64_t* empty, uint64_t* cfull, uint64_t* cempty, int cw, int warp, int lane, int b,
                              int tm, int tn0) {
  using C = twg_sm90_cfg<S, BM, BN, STAGES>;
  constexpr int NA = C::A_REGS ? C::KS : 1;  // fragment sets sized 1 where A is not in registers
  const int g = lane / 4, t = lane % 4, r0 = cw * 64 + warp * 16 + g;  // rows r0 and r0 + 8 of the tile
  const int total = (S::REDUCE ? C::TILES_N : 1) * C::KT;
  float acc[BN / 2], sum[C::FOLD ? BN / 2 : 1];
  uint32_t ah[C::KS][4], al[C::KS][4], nh[NA][4], nl[NA][4];
  float red[2] = {twg_red_init<S::REDUCE ? S::REDUCE : 1>(), twg_red_init<S::REDUCE ? S::REDUCE : 1>()};
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  if constexpr (C::A_REGS) {
    twg_mbar_wait(&full[0], 0);
    twg_sm90_load_a<S, C::BK, C::KS>(smem, r0, t, ah, al);
  }
  int it = 0;
  for (int tile = 0; tile < (S::REDUCE ? C::TILES_N : 1); ++tile) {
    for (int kt = 0; kt < C::KT; ++kt, ++it) {
      const int s = it % STAGES, c = it & 1;
      const unsigned char* st = smem + s * C::STAGE;
      if constexpr (!C::A_REGS) twg_mbar_wait(&full[s], (it / STAGES) & 1);  // else waited when A was loaded
      if constexpr (C::CONVERT) twg_mbar_wait(&cfull[c], (it >> 1) & 1);
      const unsigned char* cb = conv + c * C::CBUF;
      twg_wgmma_fence();
      twg_sm90_mma<S, BM, BN, STAGES>(acc, ah, al, st, C::CONV_HI ? cb : st + C::A_BYTES,
                                      cb + (C::CONV_HI ? C::B_BYTES : 0), cw, (C::FOLD || kt == 0) ? 0 : 1);
      twg_wgmma_commit();
      if constexpr (C::PIPE) {
        // NOTE: with A and the accumulators untouched between k-tiles (no registers A, no fold) a
        // k-tile's wgmmas stay in flight while the next are issued; the stage they read is released
        // one iteration later. No wait sits in a branch and nothing reads the accumulators before
        // the wait after the loop, so ptxas inserts no waits of its own.
        twg_wgmma_wait<1>();
        if (kt != 0) twg_sm90_release<C::CONVERT>(empty, cempty, it - 1, STAGES, lane);
      } else {
        if constexpr (C::A_REGS) {
          if (it + 1 < total) {
            const int s1 = (it + 1) % STAGES;
            twg_mbar_wait(&full[s1], ((it + 1) / STAGES) & 1);
            twg_sm90_load_a<S, C::BK, NA>(smem + s1 * C::STAGE, r0, t, nh, nl);
          }
        }
        twg_wgmma_wait<0>();
        twg_keep(acc);
#pragma unroll
        for (int j = 0; j < C::KS; ++j) {
          if (C::A_REGS) twg_keep(ah[j]);
          if (S::PREC == 3) twg_keep(al[j]);
        }
        twg_sm90_release<C::CONVERT>(empty, cempty, it, STAGES, lane);
        if constexpr (C::A_REGS) {
#pragma unroll
          for (int j = 0; j < NA; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) ah[j][q] = nh[j][q], al[j][q] = nl[j][q];
        }
        if constexpr (C::FOLD) {
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) sum[i] = (kt == 0 ? 0.0f : sum[i]) + acc[i];
        }
      }
    }
    if constexpr (C::PIPE) {
      twg_wgmma_wait<0>();
      twg_keep(acc);
      twg_sm90_release<C::CONVERT>(empty, cempty, it - 1, STAGES, lane);
    }
    const int n0 = (tn0 + tile) * BN;
    if constexpr (C::FOLD) twg_sm90_out<S, BN>(p, b, tm * BM + r0, n0, t, sum, red);
    else twg_sm90_out<S, BN>(p, b, tm * BM + r0, n0, t, acc, red);
  }
  if (S::REDUCE) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float r = twg_red_quad<S::REDUCE ? S::REDUCE : 1>(red[h]);
      if (t == 0) twg_out_row<S>(p, b, tm * BM + r0 + 8 * h, r);
    }
  }
}

template <class S, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(128 * (BM / 64 + 1), 1)
twg_sm90(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b, const typename S::Ptrs p) {
#if defined(TWG_SM90A)
  using C = twg_sm90_cfg<S, BM, BN, STAGES>;
  // NOTE: the barriers are static shared memory, which marks a build for sm_90a: the launcher reads
  // cudaFuncAttributes::sharedSizeBytes before it chooses this kernel (the body is empty otherwise).
  __shared__ __align__(8) uint64_t bars[2 * STAGES + 4];
  uint64_t *full = bars, *empty = bars + STAGES, *cfull = bars + 2 * STAGES, *cempty = bars + 2 * STAGES + 2;
  unsigned char* smem = twg_align1024(twg_dyn_smem());
  unsigned char* conv = smem + STAGES * C::STAGE;
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, b = blockIdx.y;
  int tm, tn0;
  if (S::REDUCE) tm = blockIdx.x, tn0 = 0;
  else twg_tile_of<8>(blockIdx.x, C::TILES_M, C::TILES_N, tm, tn0);
  const int total = (S::REDUCE ? C::TILES_N : 1) * C::KT;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      twg_mbar_init(&full[s], 1);
      twg_mbar_init(&empty[s], C::CONS_WARPS + (C::CONVERT ? C::CONV_WARPS : 0));
    }
    for (int c = 0; c < 2; ++c) {
      twg_mbar_init(&cfull[c], C::CONV_WARPS);
      twg_mbar_init(&cempty[c], C::CONS_WARPS);
    }
    twg_fence_mbar_init();
  }
  __syncthreads();
  // NOTE: register budgets: at entry 168 each (384 threads, 1 block per SM); the producer warpgroup
  // gives back what the consumers take (4 x 40 + 8 x 232 = 4 x 56 + 8 x 224 = 12 x 168 warps' worth).
  if (wg == 0) {
    if constexpr (C::CWG > 1) twg_setmaxnreg_dec<C::CONVERT ? 56 : 40>();
    if (warp == 0) {
      if (lane == 0) twg_sm90_produce<S, BM, BN, STAGES>(&tma_a, &tma_b, smem, full, empty, b, tm * BM, tn0, total);
    } else if constexpr (C::CONVERT) {
      twg_sm90_convert<S, BM, BN, STAGES>(smem, conv, full, empty, cfull, cempty, threadIdx.x - 32, lane, total);
    }
  } else {
    if constexpr (C::CWG > 1) twg_setmaxnreg_inc<C::CONVERT ? 224 : 232>();
    twg_sm90_consume<S, BM, BN, STAGES>(p, smem, conv, full, empty, cfull, cempty, wg - 1, warp, lane, b, tm, tn0);
  }
#endif
}
#endif  // TWG_SM90_CUH
