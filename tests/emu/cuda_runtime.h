// Just enough CUDA to run torchweld's generated kernels on CPU threads (tests/cuda_emu.py).
// A block's threads are std::threads (blocks run one after another, so `__shared__` may be a
// static); __syncthreads and warp shuffles are barriers. Launches are rewritten to tw_emu_launch.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
typedef void* cudaStream_t;
typedef int cudaError_t;
inline int cudaGetLastError() { return 0; }
inline const char* cudaGetErrorString(int) { return "emulated"; }

struct tw_emu_block {
  std::barrier<>* block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<unsigned long long> slots;
};
inline tw_emu_block* tw_emu_cur = nullptr;

inline void __syncthreads() { tw_emu_cur->block->arrive_and_wait(); }

template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
  const unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
  auto& slots = tw_emu_cur->slots;
  std::memcpy(&slots[t], &v, sizeof(T));
  tw_emu_cur->warps[w]->arrive_and_wait();
  T r;
  std::memcpy(&r, &slots[w * 32 + (lane ^ (unsigned)mask)], sizeof(T));
  tw_emu_cur->warps[w]->arrive_and_wait();
  return r;
}

template <typename T> T tw_emu_shfl(T v, unsigned src) {
  const unsigned t = threadIdx.x, w = t / 32;
  auto& slots = tw_emu_cur->slots;
  std::memcpy(&slots[t], &v, sizeof(T));
  tw_emu_cur->warps[w]->arrive_and_wait();
  T r;
  std::memcpy(&r, &slots[w * 32 + src], sizeof(T));
  tw_emu_cur->warps[w]->arrive_and_wait();
  return r;
}
template <typename T> T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned lane = threadIdx.x % 32, seg = lane % width;
  return tw_emu_shfl(v, seg >= delta ? lane - delta : lane);
}
template <typename T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const unsigned lane = threadIdx.x % 32;
  return tw_emu_shfl(v, (lane / width) * width + (unsigned)src % width);
}

template <typename F> void tw_emu_launch(unsigned blocks, unsigned threads, F&& body) {
  gridDim.x = blocks;
  blockDim.x = threads;
  std::barrier<> bar(threads);
  tw_emu_block blk{&bar, {}, std::vector<unsigned long long>(threads)};
  for (unsigned w = 0; w * 32 < threads; ++w)
    blk.warps.emplace_back(new std::barrier<>(std::min(32u, threads - w * 32)));
  tw_emu_cur = &blk;
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned b = 0; b < blocks; ++b) {  // one block at a time: `__shared__` statics are the block's
        blockIdx.x = b;
        body();
        bar.arrive_and_wait();
      }
    });
  for (auto& th : ts) th.join();
}

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }

struct __half { _Float16 h; };
inline float __half2float(__half x) { return (float)x.h; }
inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
struct __nv_bfloat16 { unsigned short b; };
inline float __bfloat162float(__nv_bfloat16 x) {
  unsigned u = (unsigned)x.b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(unsigned short)(u >> 16)};
}
