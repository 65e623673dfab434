// CPU emulation, part 2 (included by gemm_emu.h): mbarriers, TMA, wgmma, setmaxnreg, the launch.
#pragma once

// ---- mbarrier ------------------------------------------------------------------------------------
inline TwgEmuMbar& twg_emu_mbar(const void* bar) {
  auto it = twg_emu_blk->mbars.find(bar);
  if (it == twg_emu_blk->mbars.end()) twg_emu_fail("mbarrier used before mbarrier.init");
  return it->second;
}
inline void twg_emu_mbar_check(TwgEmuMbar& b) {
  if (b.pending < 0) twg_emu_fail("mbarrier: more arrivals than its count in one phase");
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase, b.pending = b.expected;
    twg_emu_blk->cv.notify_all();
  }
}
inline void twg_mbar_init(uint64_t* bar, int count) {
  std::lock_guard<std::mutex> l(twg_emu_blk->m);
  twg_emu_blk->mbars[bar] = TwgEmuMbar{count, count, 0, 0};
}
inline void twg_fence_mbar_init() {}
inline void twg_mbar_arrive(uint64_t* bar) {
  twg_emu_jitter();
  std::lock_guard<std::mutex> l(twg_emu_blk->m);
  auto& b = twg_emu_mbar(bar);
  --b.pending;
  twg_emu_mbar_check(b);
}
inline void twg_mbar_arrive_tx(uint64_t* bar, uint32_t bytes) {
  std::lock_guard<std::mutex> l(twg_emu_blk->m);
  auto& b = twg_emu_mbar(bar);
  b.tx += bytes;
  --b.pending;
  twg_emu_mbar_check(b);
}
// try_wait.parity: done once the phase of that parity has completed, i.e. the current phase's parity differs.
inline void twg_mbar_wait(uint64_t* bar, uint32_t parity) {
  twg_emu_jitter();
  std::unique_lock<std::mutex> l(twg_emu_blk->m);
  auto& b = twg_emu_mbar(bar);
  twg_emu_wait(l, twg_emu_blk->cv, [&] { return (b.phase & 1u) != (parity & 1u); }, "an mbarrier");
}
inline void twg_fence_proxy_async() {}

// ---- TMA -----------------------------------------------------------------------------------------
inline void twg_emu_tma(unsigned char* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2, int rank) {
  if ((int)map->opaque[1] != rank) twg_emu_fail("TMA: instruction rank " + std::to_string(rank) + " differs from the tensor map's " + std::to_string(map->opaque[1]));
  if (twg_smem_u32(dst) % 128) twg_emu_fail("TMA: shared destination not 128-byte aligned");
  std::lock_guard<std::mutex> l(twg_emu_blk->m);
  twg_emu_blk->jobs.push_back(TwgEmuTma{dst, *map, bar, {c0, c1, c2}});
  twg_emu_blk->cv.notify_all();
}
inline void twg_tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  twg_emu_tma((unsigned char*)dst, map, bar, c0, c1, 0, 2);
}
inline void twg_tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  twg_emu_tma((unsigned char*)dst, map, bar, c0, c1, c2, 3);
}
// The copy engine: a box in the map's element order, zeros outside the tensor, 128-byte swizzle on the
// shared address, then the bytes are counted on the mbarrier.
inline void twg_emu_tma_engine_run(TwgEmuBlock* blk, unsigned seed) {
  std::mt19937 rng(seed);
  std::unique_lock<std::mutex> l(blk->m);
  for (;;) {
    blk->cv.wait_for(l, std::chrono::milliseconds(5), [&] { return blk->stop || !blk->jobs.empty(); });
    if (blk->jobs.empty()) {
      if (blk->stop) return;
      continue;
    }
    const size_t pick = rng() % blk->jobs.size();  // copies complete in any order
    TwgEmuTma job = blk->jobs[pick];
    blk->jobs.erase(blk->jobs.begin() + pick);
    l.unlock();
    if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    const uint64_t* o = job.map.opaque;
    const int rank = (int)o[1];
    const uint64_t es = o[2];
    int box[3] = {1, 1, 1};
    for (int i = 0; i < rank; ++i) box[i] = (int)((o[13] >> (12 * i)) & 0xfff);
    const uint32_t base = twg_smem_u32(job.dst);
    if (base + (uint32_t)(box[0] * box[1] * box[2] * es) > TwgEmuBlock::BASE + blk->bytes)
      twg_emu_fail("TMA box at shared " + std::to_string(base) + " of " + std::to_string(box[0]) + " x " +
                   std::to_string(box[1]) + " x " + std::to_string(box[2]) + " elements passes the window's end");
    for (int i2 = 0; i2 < box[2]; ++i2)
      for (int i1 = 0; i1 < box[1]; ++i1)
        for (int i0 = 0; i0 < box[0]; ++i0) {
          const long long c[3] = {(long long)job.c[0] + i0, (long long)job.c[1] + i1, (long long)job.c[2] + i2};
          bool in = true;
          uint64_t off = 0;
          for (int d = 0; d < rank; ++d) {
            in = in && c[d] >= 0 && c[d] < (long long)o[3 + d];
            off += (uint64_t)c[d] * o[8 + d];
          }
          const uint32_t lin = (uint32_t)(((i2 * box[1] + i1) * box[0] + i0) * es);
          unsigned char* to = twg_emu_at(twg_emu_swz128(base + lin), (uint32_t)es);
          if (in) std::memcpy(to, (const unsigned char*)o[0] + off, es);
          else std::memset(to, 0, es);
        }
    l.lock();
    auto it = blk->mbars.find(job.bar);
    if (it == blk->mbars.end()) {
      blk->stop = true;  // reported by the waiters' deadline
      continue;
    }
    it->second.tx -= (long long)box[0] * box[1] * box[2] * es;
    twg_emu_mbar_check(it->second);
  }
}

inline void twg_emu_tma_engine(TwgEmuBlock* blk, unsigned seed, std::string* err) {
  try {
    twg_emu_tma_engine_run(blk, seed);
  } catch (const std::exception& e) {
    *err = std::string("TMA: ") + e.what();
    twg_emu_abort = true;
  }
}

// ---- wgmma ---------------------------------------------------------------------------------------
enum { TWG_RS_TF32, TWG_SS_TF32, TWG_SS_F16, TWG_SS_BF16 };
inline void twg_emu_wg_push(TwgEmuWgOp op) { twg_emu_blk->th[twg_tid()].wg_open.push_back(op); }
template <int N> void twg_wgmma_rs_tf32(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  twg_emu_wg_push({TWG_RS_TF32, N, false, false, 0, db, a, d, scale_d});
}
template <int N> void twg_wgmma_ss_tf32(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  twg_emu_wg_push({TWG_SS_TF32, N, false, false, da, db, nullptr, d, scale_d});
}
template <int N, bool TA, bool TB> void twg_wgmma_ss_f16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  twg_emu_wg_push({TWG_SS_F16, N, TA, TB, da, db, nullptr, d, scale_d});
}
template <int N, bool TA, bool TB> void twg_wgmma_ss_bf16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  twg_emu_wg_push({TWG_SS_BF16, N, TA, TB, da, db, nullptr, d, scale_d});
}
inline void twg_wgmma_fence() {}
inline void twg_wgmma_commit() {
  auto& t = twg_emu_blk->th[twg_tid()];
  t.wg_groups.push_back(std::move(t.wg_open));
  t.wg_open.clear();
}
template <int N> void twg_keep(float (&)[N]) {}
template <int N> void twg_keep(uint32_t (&)[N]) {}
template <int R> void twg_setmaxnreg_inc() { static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg range"); }
template <int R> void twg_setmaxnreg_dec() { static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg range"); }

// Shared address of element (mn, k) of a descriptor's operand, by the canonical layouts of the 128-byte
// swizzle mode (CuTe make_gmma_desc; T = 16 bytes, es the element size):
//   K-major  ((8,m),(T,2)):((8T,SBO),(1,T))          row mn % 8 of an 8-row group, groups SBO apart
//   MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))    128 bytes of mn per k-row, LBO to the next 128, SBO per 8 k
inline uint32_t twg_emu_desc_addr(uint64_t desc, int mn, int k, bool mn_major, uint32_t es) {
  if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0) twg_emu_fail("wgmma descriptor: not a 128-byte swizzle with base offset 0");
  const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4;
  const uint32_t sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4, per = 128 / es;
  const uint32_t off = mn_major ? (mn % per) * es + (mn / per) * lbo + (k % 8) * 128 + (k / 8) * sbo
                                : (mn % 8) * 128 + (mn / 8) * sbo + k * es;
  return twg_emu_swz128(start + off);
}
inline double twg_emu_desc_elem(uint64_t desc, int mn, int k, bool mn_major, int kind) {
  const uint32_t es = kind == TWG_SS_F16 || kind == TWG_SS_BF16 ? 2 : 4;
  const unsigned char* p = twg_emu_at(twg_emu_desc_addr(desc, mn, k, mn_major, es), es);
  if (es == 4) { uint32_t u; std::memcpy(&u, p, 4); return twg_emu_tf32(u); }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return kind == TWG_SS_BF16 ? (double)__bfloat162float({h}) : (double)__half2float({h});
}
// One wgmma for the warpgroup whose first thread is t0: every thread's op i of its group.
inline void twg_emu_wgmma_exec(int t0, size_t grp, size_t i) {
  auto& th = twg_emu_blk->th;
  const TwgEmuWgOp& op = th[t0].wg_groups[grp][i];
  const int n = op.n, K = (op.kind == TWG_SS_F16 || op.kind == TWG_SS_BF16) ? 16 : 8;
  std::vector<double> A(64 * K), B((size_t)n * K), D(64 * (size_t)n);
  for (int x = 0; x < 128; ++x) {
    const TwgEmuWgOp& o = th[t0 + x].wg_groups[grp][i];
    if (o.kind != op.kind || o.n != n || o.da != op.da || o.db != op.db || o.ta != op.ta || o.tb != op.tb || o.scale_d != op.scale_d)
      twg_emu_fail("wgmma: the warpgroup's threads disagree on the instruction");
    const int w = x / 32, g = (x % 32) / 4, q = x % 4, r = 16 * w + g;
    if (op.kind == TWG_RS_TF32) {  // ALayout_64x8
      A[r * K + q] = twg_emu_tf32(o.a[0]), A[(r + 8) * K + q] = twg_emu_tf32(o.a[1]);
      A[r * K + q + 4] = twg_emu_tf32(o.a[2]), A[(r + 8) * K + q + 4] = twg_emu_tf32(o.a[3]);
    }
    for (int j = 0; j < n / 2; ++j) D[(r + 8 * ((j / 2) % 2)) * n + 8 * (j / 4) + 2 * q + j % 2] = o.scale_d ? o.d[j] : 0.0;
  }
  if (op.kind != TWG_RS_TF32)
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < K; ++k) A[m * K + k] = twg_emu_desc_elem(op.da, m, k, op.ta, op.kind);
  for (int nn = 0; nn < n; ++nn)
    for (int k = 0; k < K; ++k) B[nn * K + k] = twg_emu_desc_elem(op.db, nn, k, op.tb, op.kind);
  for (int m = 0; m < 64; ++m)
    for (int nn = 0; nn < n; ++nn) {
      double s = D[m * n + nn];
      for (int k = 0; k < K; ++k) s += A[m * K + k] * B[nn * K + k];
      D[m * n + nn] = twg_emu_round(s);
    }
  for (int x = 0; x < 128; ++x) {
    const TwgEmuWgOp& o = th[t0 + x].wg_groups[grp][i];
    const int w = x / 32, g = (x % 32) / 4, q = x % 4, r = 16 * w + g;
    for (int j = 0; j < n / 2; ++j) o.d[j] = (float)D[(r + 8 * ((j / 2) % 2)) * n + 8 * (j / 4) + 2 * q + j % 2];
  }
}
template <int N> void twg_wgmma_wait() {
  const int t = twg_tid(), t0 = t & ~127;
  auto& th = twg_emu_blk->th;
  twg_emu_blk->wgs[t / 128]->wait("wgmma.wait_group");
  if (t == t0) {
    for (int x = 1; x < 128; ++x)
      if (th[t0 + x].wg_groups.size() != th[t0].wg_groups.size()) twg_emu_fail("wgmma: uneven commit groups in a warpgroup");
    while (th[t0].wg_groups.size() > (size_t)N) {
      for (size_t i = 0; i < th[t0].wg_groups[0].size(); ++i) twg_emu_wgmma_exec(t0, 0, i);
      for (int x = 0; x < 128; ++x) th[t0 + x].wg_groups.erase(th[t0 + x].wg_groups.begin());
    }
  }
  twg_emu_blk->wgs[t / 128]->wait("wgmma.wait_group");
}

// ---- launch --------------------------------------------------------------------------------------
template <class F> void twg_emu_launch(dim3 grid, dim3 block, size_t smem, F fn) {
  const int n = (int)(block.x * block.y * block.z);
  if (n > 1024 || smem > 232448 || block.y != 1 || block.z != 1) {
    twg_emu_last = cudaErrorInvalidValue, twg_emu_msg = "emulated launch: bad block or shared memory size";
    return;
  }
  blockDim = block, gridDim = grid;
  twg_emu_abort = false;
  std::string err;
  for (unsigned bz = 0; bz < grid.z && err.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && err.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && err.empty(); ++bx) {
        TwgEmuBlock blk(n, smem);
        twg_emu_blk = &blk;
        twg_emu_named.clear();
        twg_emu_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        const unsigned seed = twg_emu_seed++;
        std::string engine_err;
        std::thread engine(twg_emu_tma_engine, &blk, seed, &engine_err);
        std::mutex em;
        std::vector<std::thread> ts;
        for (int t = 0; t < n; ++t)
          ts.emplace_back([&, t] {
            threadIdx = dim3(t), blockIdx = dim3(bx, by, bz);
            twg_emu_rng.seed(seed * 7919u + t);
            try {
              fn();
            } catch (const std::exception& e) {
              std::lock_guard<std::mutex> l(em);
              if (err.empty() || err == "aborted") err = e.what();
              twg_emu_abort = true;
              blk.cv.notify_all();
            }
          });
        for (auto& t : ts) t.join();
        {
          std::lock_guard<std::mutex> l(blk.m);
          blk.stop = true;
          if (err.empty() && !blk.jobs.empty()) err = "TMA copies left pending at exit";
        }
        blk.cv.notify_all();
        engine.join();
        if (!engine_err.empty()) err = engine_err;
        twg_emu_blk = nullptr;
      }
  if (!err.empty()) twg_emu_last = cudaErrorLaunchFailure, twg_emu_msg = err;
}

template <class K, class... A> void twg_emu_launch_args(dim3 grid, dim3 block, size_t smem, K kernel, A... args) {
  twg_emu_launch(grid, block, smem, [=]() { kernel(args...); });
}

// The harness's knobs: the device's compute capability, tensor-core rounding (1: toward zero), seed.
extern "C" void twg_emu_config(int cc, int rz, unsigned seed) { twg_emu_cc = cc, twg_emu_rz = rz, twg_emu_seed = seed; }
extern "C" const char* twg_emu_error() { return twg_emu_msg.c_str(); }
