// torchweld convolution, Hopper main loop (sm_90a): the GEMM kind's wgmma consumers (gemm_sm90.cuh:
// twg_sm90_mma, its 3xTF32 order and k-tile fold) fed by a gathering producer warpgroup.
//   warpgroup 0 (128 threads): for each k-tile, waits the stage's `empty` mbarrier, gathers A (the
//     tile's output pixels x (tap, channel)) and copies B (the packed weight, K-major) with 16-byte
//     cp.async, zero-filled where a tap reads outside; LAG k-tiles later, once its own copies have
//     landed (cp.async.wait_group), writes 3xTF32's B remainder tile (lo) from the chunks it copied,
//     fences them to the async proxy (wgmma reads through it) and arrives on the stage's `full`
//     mbarrier (128 arrivals complete it);
//   consumers (BM / 64 warpgroups): wait `full`, wgmma the k-tile, release the stage.
// TMA's im2col mode is not used: its box covers forward convolutions of one group only (no
// transposed gather, no dilation with output padding), and a cp.async gather serves every setting.
#ifndef TWC_SM90_CUH
#define TWC_SM90_CUH

template <class S, int BM, int BN, int STAGES> struct twc_sm90_cfg {
  using C = twg_sm90_cfg<S, BM, BN, STAGES>;  // BK, KS, A_REGS, FOLD, PIPE as the GEMM's
  static constexpr int LO_BYTES = S::PREC == 3 ? BN * 128 : 0;
  static constexpr int STAGE = BM * 128 + BN * 128 + LO_BYTES, A_BYTES = BM * 128, B_BYTES = BN * 128;
  static constexpr int RED_BYTES = S::RED ? BM * (BN + 1) * 4 : 0;  // a reducing site's value tile, over the ring
  static constexpr int SMEM = (STAGES * STAGE > RED_BYTES ? STAGES * STAGE : RED_BYTES) + 1024;
  static constexpr int LAG = STAGES > 3 ? 2 : 1;  // cp.async groups the producer keeps in flight
  static constexpr int THREADS = 128 * (BM / 64 + 1);
  static_assert(LAG < STAGES, "the producer must arrive on a stage before it waits for that stage again");
};

// 3xTF32's B remainder of the 16-byte chunks this producer thread copied into `hi` (their own copies
// have landed: nothing else is read), as twg_load_tile<.., VEC=true> assigned them.
template <int BN, int BK, int NT> TWG_DEV void twc_lo_tile(const unsigned char* hi, unsigned char* lo, int tid) {
  constexpr int V = 4, CHUNKS = BN * BK / V;
#pragma unroll
  for (int i = 0; i < CHUNKS / NT; ++i) {
    const int c = tid + i * NT;
    const uint32_t o = twg_tile_off<true, BK, 4>(c / (BK / V), (c % (BK / V)) * V);
    *reinterpret_cast<float4*>(lo + o) = twg_lo4<false>(*reinterpret_cast<const float4*>(hi + o));
  }
}

template <class S, int BM, int BN, int STAGES>
TWG_DEV void twc_sm90_finish(unsigned char* smem, uint64_t* full, int it, int tid) {
  using D = twc_sm90_cfg<S, BM, BN, STAGES>;
  unsigned char* st = smem + (it % STAGES) * D::STAGE;
  if constexpr (S::PREC == 3) twc_lo_tile<BN, D::C::BK, 128>(st + D::A_BYTES, st + D::A_BYTES + D::B_BYTES, tid);
  twg_fence_proxy_async();  // NOTE: cp.async and st.shared write through the generic proxy; wgmma reads through the async one
  twg_mbar_arrive(&full[it % STAGES]);
}

template <class S, int BM, int BN, int STAGES>
TWG_DEV void twc_sm90_produce(const typename S::Ptrs& p, unsigned char* smem, uint64_t* full, uint64_t* empty, int g,
                              int m0, int n0, int tid, const twc_ktiles<S, twg_sm90_cfg<S, BM, BN, STAGES>::BK>& kt) {
  using D = twc_sm90_cfg<S, BM, BN, STAGES>;
  using T = typename S::T;
  constexpr int BK = D::C::BK;
  const int KT = kt.total;
  const T* W = p.w + (long long)g * S::N * S::K;
  for (int it = 0; it < KT; ++it) {
    unsigned char* st = smem + (it % STAGES) * D::STAGE;
    const int k0 = kt.k0(it);
    twg_mbar_wait(&empty[it % STAGES], ((it / STAGES) & 1) ^ 1);
    twc_load_a<S, BM, BK, 128, true, 1>(st, p.x, m0, k0, g, tid);
    twg_load_tile<T, true, BN, BK, 128, true>(st + D::A_BYTES, W, n0, k0, S::N, S::K, (long long)S::K, 1LL, tid);
    twg_cp_commit();
    if (it >= D::LAG) {
      twg_cp_wait<D::LAG>();  // this thread's copies of k-tile it - LAG have landed
      twc_sm90_finish<S, BM, BN, STAGES>(smem, full, it - D::LAG, tid);
    }
  }
  twg_cp_wait<0>();
  for (int it = KT > D::LAG ? KT - D::LAG : 0; it < KT; ++it) twc_sm90_finish<S, BM, BN, STAGES>(smem, full, it, tid);
}

// As twg_sm90_consume for one column tile with no converter: A from shared memory (or registers for
// 3xTF32, the next k-tile's loaded during this one's wgmmas), B K-major, lo after hi in the stage.
template <class S, int BM, int BN, int STAGES>
TWG_DEV void twc_sm90_consume(const typename S::Ptrs& p, unsigned char* smem, uint64_t* full, uint64_t* empty, int cw,
                              int warp, int lane, int g, int m0, int n0, const int KT) {
  using D = twc_sm90_cfg<S, BM, BN, STAGES>;
  using C = typename D::C;  // NOTE: KT, the block's k-tiles (twc_ktiles), is at least 1
  constexpr int NA = C::A_REGS ? C::KS : 1;
  const int gq = lane / 4, t = lane % 4, r0 = cw * 64 + warp * 16 + gq;
  float acc[BN / 2], sum[C::FOLD ? BN / 2 : 1];
  uint32_t ah[C::KS][4], al[C::KS][4], nh[NA][4], nl[NA][4];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  if constexpr (C::A_REGS) {
    twg_mbar_wait(&full[0], 0);
    twg_sm90_load_a<S, C::BK, C::KS>(smem, r0, t, ah, al);
  }
  for (int it = 0; it < KT; ++it) {
    const unsigned char* st = smem + (it % STAGES) * D::STAGE;
    if constexpr (!C::A_REGS) twg_mbar_wait(&full[it % STAGES], (it / STAGES) & 1);
    twg_wgmma_fence();
    twg_sm90_mma<S, BM, BN, STAGES>(acc, ah, al, st, st + D::A_BYTES, st + D::A_BYTES + D::B_BYTES, cw,
                                    (C::FOLD || it == 0) ? 0 : 1);
    twg_wgmma_commit();
    if constexpr (C::PIPE) {
      twg_wgmma_wait<1>();  // NOTE: as the GEMM's: a k-tile stays in flight; its stage is released one iteration later
      if (it != 0) twg_sm90_release<false>(empty, nullptr, it - 1, STAGES, lane);
    } else {
      if constexpr (C::A_REGS) {
        if (it + 1 < KT) {
          twg_mbar_wait(&full[(it + 1) % STAGES], ((it + 1) / STAGES) & 1);
          twg_sm90_load_a<S, C::BK, NA>(smem + ((it + 1) % STAGES) * D::STAGE, r0, t, nh, nl);
        }
      }
      twg_wgmma_wait<0>();
      twg_keep(acc);
#pragma unroll
      for (int j = 0; j < C::KS; ++j) {
        if (C::A_REGS) twg_keep(ah[j]);
        if (S::PREC == 3) twg_keep(al[j]);
      }
      twg_sm90_release<false>(empty, nullptr, it, STAGES, lane);
      if constexpr (C::A_REGS) {
#pragma unroll
        for (int j = 0; j < NA; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) ah[j][q] = nh[j][q], al[j][q] = nl[j][q];
      }
      if constexpr (C::FOLD) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sum[i] = (it == 0 ? 0.0f : sum[i]) + acc[i];
      }
    }
  }
  if constexpr (C::PIPE) {
    twg_wgmma_wait<0>();
    twg_keep(acc);
    twg_sm90_release<false>(empty, nullptr, KT - 1, STAGES, lane);
  }
  // Accumulator i: row r0 + 8 ((i / 2) % 2), column 8 (i / 4) + 2t + i % 2 (gemm_sm90.cuh's twg_sm90_out).
  // NOTE: a reducing site's tile lies over the ring: every consumer's wgmmas have read it once all pass this
  // barrier (the producer's copies all landed before the last `full` completed)
  if constexpr (S::RED != 0) twg_bar_sync(1, 128 * (BM / 64));
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    const int m = m0 + r0 + 8 * ((i / 2) % 2), j = n0 + 8 * (i / 4) + 2 * t + i % 2;
    const float v = C::FOLD ? sum[C::FOLD ? i : 0] : acc[i];
    if constexpr (S::RED != 0) twc_red_put<S, BN>(reinterpret_cast<float*>(smem), m0, n0, m, j, v);
    else twc_out<S>(p, g, m, j, v);
  }
}

template <class S, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(128 * (BM / 64 + 1), 1) twc_sm90(const typename S::Ptrs p) {
#if defined(TWG_SM90A)
  using D = twc_sm90_cfg<S, BM, BN, STAGES>;
  // NOTE: static shared memory marks the sm_90a build (twg_path reads it before choosing this kernel)
  __shared__ __align__(8) uint64_t bars[2 * STAGES];
  uint64_t *full = bars, *empty = bars + STAGES;
  unsigned char* smem = twg_align1024(twg_dyn_smem());
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = blockIdx.y;
  int tm, tn;
  twg_tile_of<8>(blockIdx.x, D::C::TILES_M, D::C::TILES_N, tm, tn);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      twg_mbar_init(&full[s], 128);
      twg_mbar_init(&empty[s], 4 * (BM / 64));
    }
    twg_fence_mbar_init();
  }
  __syncthreads();
  twc_ktiles<S, D::C::BK> kt;
  kt.init(tm * BM, BM);
  // NOTE: register budgets: 168 each at entry (384 threads, 1 block per SM); the gathering producer keeps
  // 88 (its address arithmetic spills below that), the consumers take the rest (4 x 88 + 8 x 208 = 12 x 168).
  if (wg == 0) {
    if constexpr (BM > 64) twg_setmaxnreg_dec<88>();
    twc_sm90_produce<S, BM, BN, STAGES>(p, smem, full, empty, g, tm * BM, tn * BN, threadIdx.x, kt);
  } else {
    if constexpr (BM > 64) twg_setmaxnreg_inc<208>();
    twc_sm90_consume<S, BM, BN, STAGES>(p, smem, full, empty, wg - 1, warp, lane, g, tm * BM, tn * BN, kt.total);
  }
  if constexpr (S::RED != 0) {  // the consumers' values are in the tile: every thread reduces
    __syncthreads();
    twc_red_end<S, BM, BN, D::THREADS>(p, reinterpret_cast<float*>(smem), g, tm * BM, tn * BN, threadIdx.x);
  }
#endif
}
#endif  // TWC_SM90_CUH
