// CPU emulation of torchweld's GEMM primitives (torchweld/codegen/cuh/gemm_ptx.cuh) and of the CUDA
// runtime calls the launchers make, so g++ builds and runs the generated main loops unchanged: one
// std::thread per GPU thread, blocks one after another. Each instruction follows its documented
// semantics, written here independently of the kernels:
//   mma.sync m16n8k8 tf32 / m16n8k16 f16, bf16: the PTX ISA fragment layouts (also CuTe's SM80 traits);
//   wgmma m64nNk8 tf32 / k16 f16, bf16: A from registers (CuTe ALayout_64x8) or from shared memory and B
//     from shared memory through the matrix descriptor's canonical K-major / MN-major 128-byte-swizzle
//     layouts (CuTe's make_gmma_desc), accumulators in CLayout_64xN; executed at wgmma.wait_group, so
//     a kernel touching operands or accumulators before the wait reads stale values;
//   cp.async: applied at cp.async.wait_group; TMA: a separate engine thread copies boxes after random
//     delays (zero fill outside the tensor, 128-byte swizzle) and completes the mbarrier's tx count;
//   mbarrier: arrival counts, expect_tx, phases and parity waits.
// Tensor-core sums are exact (double) and rounded to fp32 to nearest, or toward zero (twg_emu_config).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define TWG_DEV inline
#define TWG_SM80 1
#define TWG_SM90A 1
// NOTE: the arguments are evaluated here, on the launching thread, as a GPU launch copies them.
#define TWG_LAUNCH(kernel, grid, block, smem, stream, ...) twg_emu_launch_args(grid, block, smem, kernel, __VA_ARGS__)

using std::max;
using std::min;
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
inline float __half2float(__half h) { _Float16 v; std::memcpy(&v, &h.x, 2); return (float)v; }
inline __half __float2half_rn(float f) { _Float16 v = (_Float16)f; __half h; std::memcpy(&h.x, &v, 2); return h; }
inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};
  return {(uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// ---- runtime -------------------------------------------------------------------------------------
typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorLaunchFailure = 719, cudaErrorNotSupported = 801 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor, cudaDevAttrMaxSharedMemoryPerBlockOptin };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
struct cudaFuncAttributes { size_t sharedSizeBytes; };
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess, cudaDriverEntryPointSymbolNotFound };
enum { cudaEnableDefault = 0 };
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;
typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };
typedef enum { CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 } CUtensorMapDataType;
typedef enum { CU_TENSOR_MAP_INTERLEAVE_NONE } CUtensorMapInterleave;
typedef enum { CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B } CUtensorMapSwizzle;
typedef enum { CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B } CUtensorMapL2promotion;
typedef enum { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE } CUtensorMapFloatOOBfill;
typedef struct { alignas(64) cuuint64_t opaque[16]; } CUtensorMap;

struct TwgEmuError : std::runtime_error { using std::runtime_error::runtime_error; };
inline int twg_emu_cc = 90, twg_emu_rz = 0, twg_emu_last = 0;
inline unsigned twg_emu_seed = 1;
inline std::string twg_emu_msg;
inline std::atomic<bool> twg_emu_abort{false};

inline int cudaGetDevice(int* d) { *d = 0; return 0; }
inline int cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? twg_emu_cc / 10 : (twg_emu_cc >= 90 ? 232448 : 101376);
  return 0;
}
inline int cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return 0; }
inline int cudaFuncGetAttributes(cudaFuncAttributes* fa, const void*) { fa->sharedSizeBytes = 96; return 0; }
inline int cudaGetLastError() { int e = twg_emu_last; twg_emu_last = 0; return e; }
inline const char* cudaGetErrorString(int) { return twg_emu_msg.c_str(); }

// The tensor map, emulated: the encoder checks what the driver documents and keeps the fields.
typedef CUresult (*twg_encode_fn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline CUresult twg_emu_encode(CUtensorMap* m, CUtensorMapDataType ty, cuuint32_t rank, void* addr, const cuuint64_t* dims,
                               const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* estr,
                               CUtensorMapInterleave, CUtensorMapSwizzle swz, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  const uint64_t es = ty == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
  bool ok = rank >= 1 && rank <= 5 && (uint64_t)addr % 16 == 0 && swz == CU_TENSOR_MAP_SWIZZLE_128B;
  for (cuuint32_t i = 0; ok && i < rank; ++i) {
    ok = dims[i] >= 1 && dims[i] <= (1ull << 32) && box[i] >= 1 && box[i] <= 256 && estr[i] == 1;
    if (i > 0) ok = ok && strides[i - 1] % 16 == 0 && strides[i - 1] < (1ull << 40);
  }
  ok = ok && box[0] * es % 16 == 0 && box[0] * es <= 128;
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  std::memset(m, 0, sizeof(*m));
  m->opaque[0] = (uint64_t)addr, m->opaque[1] = rank, m->opaque[2] = es;
  for (cuuint32_t i = 0; i < rank; ++i) {
    m->opaque[3 + i] = dims[i];
    m->opaque[8 + i] = i ? strides[i - 1] : es;
    m->opaque[13] |= (uint64_t)box[i] << (12 * i);
  }
  return CUDA_SUCCESS;
}
inline twg_encode_fn twg_find_encoder() { return twg_emu_encode; }

// ---- threads, barriers ---------------------------------------------------------------------------
inline auto twg_emu_deadline = std::chrono::steady_clock::now();
[[noreturn]] inline void twg_emu_fail(const std::string& why) {
  twg_emu_abort = true;
  throw TwgEmuError(why);
}
// Wait on `cv` until `done()`, failing on the block's deadline or when another thread failed.
template <class F> void twg_emu_wait(std::unique_lock<std::mutex>& l, std::condition_variable& cv, F done, const char* what) {
  while (!done()) {
    cv.wait_for(l, std::chrono::milliseconds(5));
    if (twg_emu_abort) throw TwgEmuError("aborted");
    if (std::chrono::steady_clock::now() > twg_emu_deadline) twg_emu_fail(std::string("deadlock waiting on ") + what);
  }
}
struct TwgEmuBarrier {
  int count;
  int arrived = 0;
  std::atomic<uint64_t> gen{0};
  std::mutex m;
  std::condition_variable cv;
  explicit TwgEmuBarrier(int n) : count(n) {}
  void wait(const char* what) {
    uint64_t my;
    {
      std::unique_lock<std::mutex> l(m);
      my = gen.load();
      if (++arrived == count) {
        arrived = 0, gen.store(my + 1);
        cv.notify_all();
        return;
      }
    }
    for (int i = 0; i < 64 && gen.load() == my; ++i) std::this_thread::yield();  // most waits are short
    std::unique_lock<std::mutex> l(m);
    twg_emu_wait(l, cv, [&] { return gen.load() != my; }, what);
  }
};
struct TwgEmuMbar { int expected = 0, pending = 0; long long tx = 0; unsigned phase = 0; };
struct TwgEmuWgOp { int kind, n; bool ta, tb; uint64_t da, db; const uint32_t* a; float* d; int scale_d; };
struct TwgEmuCopy { unsigned char* dst; unsigned char data[16]; };
struct TwgEmuThread {
  std::vector<std::vector<TwgEmuCopy>> cp_groups;
  std::vector<TwgEmuCopy> cp_open;
  std::vector<std::vector<TwgEmuWgOp>> wg_groups;
  std::vector<TwgEmuWgOp> wg_open;
  uint32_t ma[2][4], mb[2][2];  // mma.sync fragments, two sets
  unsigned calls = 0;
  float val;
};
struct TwgEmuTma { unsigned char* dst; CUtensorMap map; uint64_t* bar; int c[3]; };
struct TwgEmuBlock {
  static constexpr uint32_t BASE = 80;  // the dynamic window's shared address: not 1024-aligned, as on a GPU
  int nthreads;
  std::vector<unsigned char> store;
  unsigned char* smem;
  size_t bytes;
  TwgEmuBarrier all;
  std::vector<std::unique_ptr<TwgEmuBarrier>> warps, wgs;
  std::vector<TwgEmuThread> th;
  std::mutex m;
  std::condition_variable cv;
  std::map<const void*, TwgEmuMbar> mbars;
  std::deque<TwgEmuTma> jobs;
  bool stop = false;
  TwgEmuBlock(int n, size_t b) : nthreads(n), store(b + 64), bytes(b), all(n), th(n) {
    smem = store.data() + (64 - (uintptr_t)store.data() % 64) % 64;
    for (int w = 0; w < (n + 31) / 32; ++w) warps.emplace_back(new TwgEmuBarrier(std::min(32, n - 32 * w)));
    for (int w = 0; w < (n + 127) / 128; ++w) wgs.emplace_back(new TwgEmuBarrier(std::min(128, n - 128 * w)));
  }
};
inline TwgEmuBlock* twg_emu_blk = nullptr;
inline thread_local std::mt19937 twg_emu_rng;
inline void twg_emu_jitter() {
  if (twg_emu_rng() % 8 == 0) std::this_thread::yield();
}
inline int twg_tid() { return (int)threadIdx.x; }

inline void __syncthreads() { twg_emu_blk->all.wait("__syncthreads"); }
inline void __syncwarp(unsigned = 0xffffffffu) { twg_emu_blk->warps[twg_tid() / 32]->wait("__syncwarp"); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
  auto& th = twg_emu_blk->th;
  const int t = twg_tid();
  std::memcpy(&th[t].val, &v, sizeof(T));
  __syncwarp();
  T r;
  std::memcpy(&r, &th[(t & ~31) | ((t & 31) ^ mask)].val, sizeof(T));
  __syncwarp();
  return r;
}
inline std::map<int, std::unique_ptr<TwgEmuBarrier>> twg_emu_named;
inline void twg_bar_sync(int id, int count) {
  TwgEmuBarrier* b;
  {
    std::lock_guard<std::mutex> l(twg_emu_blk->m);
    auto& p = twg_emu_named[id];
    if (!p) p.reset(new TwgEmuBarrier(count));
    b = p.get();
  }
  b->wait("bar.sync");
}

// ---- memory, conversions -------------------------------------------------------------------------
inline unsigned char* twg_dyn_smem() { return twg_emu_blk->smem; }
inline uint32_t twg_smem_u32(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < twg_emu_blk->smem || c > twg_emu_blk->smem + twg_emu_blk->bytes) twg_emu_fail("shared address outside the window");
  return TwgEmuBlock::BASE + (uint32_t)(c - twg_emu_blk->smem);
}
inline unsigned char* twg_emu_at(uint32_t addr, uint32_t len) {
  if (addr < TwgEmuBlock::BASE || addr + len > TwgEmuBlock::BASE + twg_emu_blk->bytes)
    twg_emu_fail("shared access out of bounds: " + std::to_string(addr) + " + " + std::to_string(len) + " in a window of " + std::to_string(twg_emu_blk->bytes));
  return twg_emu_blk->smem + (addr - TwgEmuBlock::BASE);
}
inline uint32_t twg_emu_swz128(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }
inline float twg_f(float x) { return x; }
inline float twg_f(__half x) { return __half2float(x); }
inline float twg_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T twg_to(float x);
template <> inline float twg_to<float>(float x) { return x; }
template <> inline __half twg_to<__half>(float x) { return __float2half_rn(x); }
template <> inline __nv_bfloat16 twg_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
inline uint32_t twg_tf32(float x) {  // cvt.rna.tf32.f32
  const uint32_t u = __float_as_uint(x);
  return (u & 0x7f800000u) == 0x7f800000u ? u : ((u + 0x1000u) & 0xffffe000u);
}
inline double twg_emu_tf32(uint32_t u) { return (double)__uint_as_float(u & 0xffffe000u); }  // the unit ignores 13 bits
inline float twg_emu_round(double x) {
  float f = (float)x;
  if (twg_emu_rz && std::isfinite(f) && std::fabs((double)f) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return f;
}
inline double twg_emu_h(uint32_t r, int half, bool bf) {
  const uint16_t v = (uint16_t)(r >> (16 * half));
  return bf ? (double)__bfloat162float({v}) : (double)__half2float({v});
}

// ---- cp.async ------------------------------------------------------------------------------------
inline void twg_cp_async16(void* dst, const void* src, int src_bytes) {
  TwgEmuCopy c;
  c.dst = twg_emu_at(twg_smem_u32(dst), 16);
  if (twg_smem_u32(dst) % 16 || (uintptr_t)src % 16) twg_emu_fail("cp.async 16: misaligned address");
  if (src_bytes < 0 || src_bytes > 16) twg_emu_fail("cp.async: bad source size");
  std::memset(c.data, 0, 16);
  std::memcpy(c.data, src, src_bytes);
  twg_emu_blk->th[twg_tid()].cp_open.push_back(c);
}
inline void twg_cp_commit() {
  auto& t = twg_emu_blk->th[twg_tid()];
  t.cp_groups.push_back(std::move(t.cp_open));
  t.cp_open.clear();
}
template <int N> void twg_cp_wait() {
  auto& t = twg_emu_blk->th[twg_tid()];
  twg_emu_jitter();
  while ((int)t.cp_groups.size() > N) {
    for (auto& c : t.cp_groups.front()) std::memcpy(c.dst, c.data, 16);
    t.cp_groups.erase(t.cp_groups.begin());
  }
}

// ---- mma.sync ------------------------------------------------------------------------------------
// kind 0: m16n8k8 tf32, 1: m16n8k16 f16, 2: m16n8k16 bf16; d = a * b + d for the warp. Each lane puts
// its fragments in set (call parity), waits for the warp, and computes its own four outputs; two
// sets alternate, so a lane can refill a set only after the warp has read it.
inline double twg_emu_mma_a(int kind, int w0, int m, int k, int set) {  // A(m, k), 16 x K
  const auto& th = twg_emu_blk->th;
  if (kind == 0) {  // a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
    const uint32_t* ra = th[w0 + 4 * (m % 8) + k % 4].ma[set];
    return twg_emu_tf32(ra[(m / 8) + 2 * (k / 4)]);
  }  // register r holds (g + 8 (r % 2), 2t + 8 (r / 2) + h), h = 0 in the low half
  const uint32_t* ra = th[w0 + 4 * (m % 8) + (k % 8) / 2].ma[set];
  return twg_emu_h(ra[(m / 8) + 2 * (k / 8)], k % 2, kind == 2);
}
inline double twg_emu_mma_b(int kind, int w0, int k, int n, int set) {  // B(k, n), K x 8
  const auto& th = twg_emu_blk->th;
  if (kind == 0) {  // b0 (k = t, n = g), b1 (k = t + 4, n = g)
    const uint32_t* rb = th[w0 + 4 * n + k % 4].mb[set];
    return twg_emu_tf32(rb[k / 4]);
  }  // b0 (k = 2t + h, n = g), b1 (k = 2t + 8 + h, n = g)
  const uint32_t* rb = th[w0 + 4 * n + (k % 8) / 2].mb[set];
  return twg_emu_h(rb[k / 8], k % 2, kind == 2);
}
inline void twg_emu_mma(int kind, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  auto& me = twg_emu_blk->th[twg_tid()];
  const int set = me.calls++ % 2, w0 = twg_tid() & ~31, g = (twg_tid() % 32) / 4, q = twg_tid() % 4;
  const float c[4] = {d[0], d[1], d[2], d[3]};
  std::memcpy(me.ma[set], a, sizeof a);
  std::memcpy(me.mb[set], b, sizeof b);
  __syncwarp();
  const int K = kind ? 16 : 8;
  for (int i = 0; i < 4; ++i) {  // d0 (g, 2t), d1 (g, 2t + 1), d2 (g + 8, 2t), d3 (g + 8, 2t + 1)
    const int m = g + 8 * (i / 2), n = 2 * q + i % 2;
    double s = c[i];
    for (int k = 0; k < K; ++k) s += twg_emu_mma_a(kind, w0, m, k, set) * twg_emu_mma_b(kind, w0, k, n, set);
    d[i] = twg_emu_round(s);
  }
}
inline void twg_mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { twg_emu_mma(0, d, a, b); }
inline void twg_mma_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { twg_emu_mma(1, d, a, b); }
inline void twg_mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { twg_emu_mma(2, d, a, b); }

#include "gemm_emu_sm90.h"
