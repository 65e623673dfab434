// torchweld convolution: implicit GEMM on the GEMM kind's portable main loop (gemm_sm80.cuh): the same
// swizzled tiles, cp.async ring, mma.sync k-steps and 3xTF32 split; only A's load differs: it gathers
// the tile's (output pixel, tap, channel) values from the input as it loads (im2col never exists).
// A site's struct S gives the geometry as constants (conv_source.py); the epilogue is S::value.
#ifndef TWC_SM80_CUH
#define TWC_SM80_CUH

// An output pixel (n, d, h, w); 1-d and 2-d convolutions have d = h = 0.
struct twc_pix {
  int n, d, h, w;
};
// Epilogue operands: `bias[c]` reads a per-channel vector, `res(q, c)` an output-shaped tensor through
// its strides over (n, c, d, h, w).
template <typename T> struct twc_chan {
  const T* p;
  long long s;
  TWG_DEV float operator[](long long c) const { return twg_f(p[c * s]); }
};
template <typename T> struct twc_full {
  const T* p;
  long long sn, sc, sd, sh, sw;
  TWG_DEV float operator()(const twc_pix& q, long long c) const {
    return twg_f(p[q.n * sn + c * sc + q.d * sd + q.h * sh + q.w * sw]);
  }
};

// Output pixel of GEMM row m. Phase-ordered sites (S::PHASED: transposed, every output size a multiple
// of its stride) order rows by o mod stride first, so that a tile's rows share one phase and with it
// the set of taps that reach them (twc_ktiles).
template <class S> TWG_DEV twc_pix twc_pixel(int m) {
  twc_pix q;
  if constexpr (S::POOL != 0) {  // window by window: a window's outputs are S::WIN consecutive rows
    const int ww = m % S::WW, wh = (m / S::WW) % S::WH, wd = (m / (S::WW * S::WH)) % S::WD, r = m / S::WIN;
    q.w = (r % S::PW_) * S::WW + ww;
    q.h = ((r / S::PW_) % S::PH_) * S::WH + wh;
    q.d = ((r / (S::PW_ * S::PH_)) % S::PD_) * S::WD + wd;
    q.n = r / (S::PW_ * S::PH_ * S::PD_);
    return q;
  }
  if constexpr (S::PHASED) {
    constexpr int QD = S::OD / S::STD, QH = S::OH / S::STH, QW = S::OW / S::STW;
    const int qw = m % QW, qh = (m / QW) % QH, qd = (m / (QW * QH)) % QD, r = m / (QW * QH * QD);
    const int a = r / S::NB;
    q.n = r % S::NB;
    q.w = qw * S::STW + a % S::STW;
    q.h = qh * S::STH + (a / S::STW) % S::STH;
    q.d = qd * S::STD + a / (S::STW * S::STH);
    return q;
  }
  q.w = m % S::OW;
  m /= S::OW;
  q.h = m % S::OH;
  m /= S::OH;
  q.d = m % S::OD;
  q.n = m / S::OD;
  return q;
}

// The taps of one dim a phase-a output reads: t = first + i * step, i < count ((a + PAD - t DIL) % ST == 0).
template <int K, int ST, int PAD, int DIL> TWG_DEV void twc_taps(int a, int& first, int& step, int& count) {
  step = 1;
  while ((step * DIL) % ST) ++step;  // the taps reaching one output repeat every `step`
  first = -1;
  for (int t = 0; t < step && t < K; ++t)
    if (first < 0 && (a + PAD - t * DIL) % ST == 0) first = t;
  count = first < 0 ? 0 : (K - 1 - first) / step + 1;
}

// The k-tiles a block runs, in order: every one (KT), or for a tile of one phase the k-tiles of the taps
// that reach it (channels of one tap fill whole k-tiles: CIG % BK == 0), at least one: a tile no tap
// reaches runs one k-tile of a tap that reads zero for it, so its outputs are the epilogue of 0.
template <class S, int BK> struct twc_ktiles {
  int total, fd, fh, fw, sd, sh, sw, ch, cw;  // NOTE: scalars, not arrays: an array here went to local memory
  TWG_DEV void init(int m0, int rows) {
    total = (S::K + BK - 1) / BK;
    fd = fh = fw = 0, sd = sh = sw = 1, ch = S::KH, cw = S::KW;
    if constexpr (S::PHASED) {
      constexpr int PER = S::NB * (S::OD / S::STD) * (S::OH / S::STH) * (S::OW / S::STW);
      const int last = min(m0 + rows, S::M) - 1;
      if (m0 / PER != last / PER) return;  // rows of two phases: every k-tile
      const int a = m0 / PER;
      int cd;
      twc_taps<S::KD, S::STD, S::PD, S::DD>(a / (S::STW * S::STH), fd, sd, cd);
      twc_taps<S::KH, S::STH, S::PH, S::DH>((a / S::STW) % S::STH, fh, sh, ch);
      twc_taps<S::KW, S::STW, S::PW, S::DW>(a % S::STW, fw, sw, cw);
      const int taps = cd * ch * cw;
      total = max(taps, 1) * (S::CIG / BK);
      if (!taps) fd = fh = fw = 0, ch = cw = 1;  // tap 0 reads zero for this phase
    }
  }
  TWG_DEV int k0(int it) const {
    if constexpr (!S::PHASED) return it * BK;
    constexpr int PER_TAP = S::CIG / BK > 0 ? S::CIG / BK : 1;
    const int j = it / PER_TAP, jw = j % cw, jh = (j / cw) % ch, jd = j / (cw * ch);
    const int tap = ((fd + jd * sd) * S::KH + (fh + jh * sh)) * S::KW + (fw + jw * sw);
    return tap * S::CIG + (it % PER_TAP) * BK;
  }
};

// The input coordinate tap t of output coordinate o reads along one dim, or -1 where it reads zero
// (outside the input; for a transposed convolution also where stride does not divide).
template <bool TR, int I, int ST, int PAD, int DIL> TWG_DEV int twc_coord(int o, int t) {
  if (TR) {
    const int x = o + PAD - t * DIL;
    if (x < 0 || x % ST) return -1;
    return x / ST < I ? x / ST : -1;
  }
  const int i = o * ST - PAD + t * DIL;
  return (i >= 0 && i < I) ? i : -1;
}

// Element offset in x of A[m, k] of group g (k = tap * CIG + channel), or -1 where it is zero.
template <class S> TWG_DEV long long twc_a_offset(int m, int k, int g) {
  if (m >= S::M || k >= S::K) return -1;
  const twc_pix q = twc_pixel<S>(m);
  const int tap = k / S::CIG, ic = k % S::CIG;
  const int tw = tap % S::KW, th = (tap / S::KW) % S::KH, td = tap / (S::KW * S::KH);
  const int iw = twc_coord<S::TR, S::IW, S::STW, S::PW, S::DW>(q.w, tw);
  const int ih = twc_coord<S::TR, S::IH, S::STH, S::PH, S::DH>(q.h, th);
  const int id = twc_coord<S::TR, S::ID, S::STD, S::PD, S::DD>(q.d, td);
  if ((iw | ih | id) < 0) return -1;
  return q.n * S::XN + (long long)(g * S::CIG + ic) * S::XC + id * S::XD + ih * S::XH + iw * S::XW;
}

// A's tile (ROWS output pixels from m0) x (BK of k from k0), K-major as gemm_tile.cuh lays it out.
// VEC: a 16-byte cp.async per V channels of one tap (the plan checked that chunks never straddle a
// tap and are aligned), zero-filled by the copy where the tap reads outside; else element loads.
template <class S, int ROWS, int BK, int NT, bool VEC, int UNROLL = 1>
TWG_DEV void twc_load_a(unsigned char* dst, const typename S::T* x, int m0, int k0, int g, int tid) {
  using T = typename S::T;
  constexpr int ES = sizeof(T), V = VEC ? 16 / ES : 1, PER_ROW = BK / V, CHUNKS = ROWS * PER_ROW;
  static_assert(CHUNKS % NT == 0, "tile chunks must divide among the threads");
  auto chunk = [&](int i) {
    const int c = tid + i * NT, r = c / PER_ROW, kk = (c % PER_ROW) * V;
    const long long off = twc_a_offset<S>(m0 + r, k0 + kk, g);
    unsigned char* d = dst + twg_tile_off<true, BK, ES>(r, kk);
    if (VEC) twg_cp_async16(d, off >= 0 ? x + off : x, off >= 0 ? 16 : 0);
    else *reinterpret_cast<T*>(d) = off >= 0 ? x[off] : twg_to<T>(0.0f);
  };
  if constexpr (UNROLL > 1) {
#pragma unroll UNROLL
    for (int i = 0; i < CHUNKS / NT; ++i) chunk(i);
  } else {
#pragma unroll 1  // NOTE: unrolled, ptxas keeps the tile's element loads in flight and spills (as gemm_sm80.cuh's),
                   // as it does the Hopper producer's addresses within its register budget
    for (int i = 0; i < CHUNKS / NT; ++i) chunk(i);
  }
}

// The element (output pixel m, group channel j) of group g: the epilogue and the store. Pooled, a
// window's S::WIN rows sit in lanes 4 apart (rows g of mma.sync's and wgmma's fragments, windows aligned
// to them): every lane takes part in the shuffles, the first of each window stores.
template <class S> TWG_DEV void twc_out(const typename S::Ptrs& p, int g, int m, int j, float acc) {
  const int c = g * S::N + j;
  if constexpr (S::POOL != 0) {
    const bool ok = m < S::M && j < S::N;
    const twc_pix q = twc_pixel<S>(ok ? m : 0);
    float v = ok ? S::value(p, q, c, acc) : 0.0f;
#pragma unroll
    for (int s = 4; s < 4 * S::WIN; s *= 2) v = twg_red<S::POOL == 1 ? 2 : 1>(v, __shfl_xor_sync(0xffffffffu, v, s));
    if (ok && (threadIdx.x / 4) % S::WIN == 0) {
      v = S::post(p, c, S::POOL == 2 ? v / S::DIV : v);
      p.out[q.n * S::ON + (long long)c * S::OC + (q.d / S::WD) * S::OSD + (q.h / S::WH) * S::OSH + (q.w / S::WW) * S::OSW] =
          twg_to<typename S::T>(v);
    }
  } else if (m < S::M && j < S::N) {
    const twc_pix q = twc_pixel<S>(m);
    const float v = S::value(p, q, c, acc);
    p.out[q.n * S::ON + (long long)c * S::OC + q.d * S::OSD + q.h * S::OSH + q.w * S::OSW] = twg_to<typename S::T>(v);
  }
}

// A reducing site's epilogue (cuh/conv_reduce.cuh, after this file).
template <class S, int BN> TWG_DEV void twc_red_put(float* tile, int m0, int n0, int m, int j, float acc);
template <class S, int BM, int BN, int NT>
TWG_DEV void twc_red_end(const typename S::Ptrs& p, float* tile, int g, int m0, int n0, int tid);

// Block: (BM / WM) x (BN / WN) warps over a BM x BN tile of one group's GEMM. Grid: (tiles, groups).
// NOTE: a reducing site asks for one block per SM at least (minBlocks 1): left to itself ptxas capped some of
// them at 128 registers and spilled a few bytes; minBlocks 0 (every other site) builds what no bound builds.
template <class S, int BM, int BN, int WM, int WN, int STAGES, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, S::RED ? 1 : 0) twc_sm80(const typename S::Ptrs p) {
#if defined(TWG_SM80)
  using T = typename S::T;
  constexpr int ES = sizeof(T), BK = 128 / ES, NT = (BM / WM) * (BN / WN) * 32;
  constexpr int TILES_M = (S::M + BM - 1) / BM, TILES_N = (S::N + BN - 1) / BN;
  constexpr int MF = WM / 16, NF = WN / 8, KSTEP = ES == 4 ? 8 : 16;
  constexpr int A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  // NOTE: the 16-byte gather unrolled whole up to 4 chunks a thread, else by 2: both ways ptxas spilled
  // a few bytes in some configurations otherwise (no spills in the nvcc test's set as chosen here)
  constexpr int A_CHUNKS = BM * 8 / NT, A_UNROLL = !VEC ? 1 : A_CHUNKS <= 4 ? A_CHUNKS : 2;
  unsigned char* smem = twg_align1024(twg_dyn_smem());
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, gq = lane / 4, t = lane % 4;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int g = blockIdx.y;
  int tm, tn;
  twg_tile_of<8>(blockIdx.x, TILES_M, TILES_N, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const T* W = p.w + (long long)g * S::N * S::K;
  twc_ktiles<S, BK> kt;
  kt.init(m0, BM);
  const int total = kt.total;

  auto load = [&](int it) {
    unsigned char* st = smem + (it % STAGES) * STAGE;
    const int k0 = kt.k0(it);
    twc_load_a<S, BM, BK, NT, VEC, A_UNROLL>(st, p.x, m0, k0, g, tid);
    twg_load_tile<T, true, BN, BK, NT, VEC>(st + A_BYTES, W, n0, k0, S::N, S::K, (long long)S::K, 1LL, tid);
  };

  float acc[MF][NF][4];
#pragma unroll
  for (int i = 0; i < MF; ++i)
#pragma unroll
    for (int j = 0; j < NF; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
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
#pragma unroll 1  // NOTE: as in gemm_sm80.cuh: unrolled, the compiler hoists every step's fragment loads and spills
    for (int kk = 0; kk < BK; kk += KSTEP) twg_sm80_kstep<S, WM, WN, BK>(acc, sa, sa + A_BYTES, wm0, wn0, kk, gq, t);
  }
  if constexpr (S::RED != 0) {  // the tile's values to shared memory (over the ring), then the reduction
    static_assert(BM * (BN + 1) * 4 <= STAGES * STAGE, "the reduction's value tile must fit in the ring");
    float* tile = reinterpret_cast<float*>(smem);
    twg_cp_wait<0>();
    __syncthreads();  // every warp's last k-steps have read the ring
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          twc_red_put<S, BN>(tile, m0, n0, m0 + wm0 + 16 * i + gq + 8 * (q / 2), n0 + wn0 + 8 * j + 2 * t + q % 2, acc[i][j][q]);
    __syncthreads();
    twc_red_end<S, BM, BN, NT>(p, tile, g, m0, n0, tid);
  } else {
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          twc_out<S>(p, g, m0 + wm0 + 16 * i + gq + 8 * (q / 2), n0 + wn0 + 8 * j + 2 * t + q % 2, acc[i][j][q]);
  }
#endif
}
#endif  // TWC_SM80_CUH
