// torchweld GEMM, device primitives as PTX. tests/gemm_emu.h implements the same names in C++ on CPU
// threads (mma.sync, wgmma, cp.async, TMA and mbarriers by their documented semantics); the main loops
// (gemm_sm80.cuh, gemm_sm90.cuh) use nothing else, so the emulator runs them unchanged.
#ifndef TWG_PTX_CUH
#define TWG_PTX_CUH
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder is found at run time, nothing links libcuda
#include <stdint.h>

#define TWG_DEV __device__ __forceinline__
#define TWG_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)

// NOTE: TWG_SM80 guards the mma.sync main loop, TWG_SM90A the wgmma one; __CUDA_ARCH_FEAT_SM90_ALL is
// defined only when building for sm_90a (-gencode=arch=compute_90a,code=sm_90a).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TWG_SM80 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TWG_SM90A 1
#endif

TWG_DEV unsigned char* twg_dyn_smem() {
  extern __shared__ __align__(16) unsigned char twg_smem_raw[];
  return twg_smem_raw;
}
TWG_DEV uint32_t twg_smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// Element conversions (compute is fp32).
TWG_DEV float twg_f(float x) { return x; }
TWG_DEV float twg_f(__half x) { return __half2float(x); }
TWG_DEV float twg_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> TWG_DEV T twg_to(float x);
template <> TWG_DEV float twg_to<float>(float x) { return x; }
template <> TWG_DEV __half twg_to<__half>(float x) { return __float2half_rn(x); }
template <> TWG_DEV __nv_bfloat16 twg_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// x rounded to TF32 (10 mantissa bits, nearest, ties away), as an fp32 bit pattern.
TWG_DEV uint32_t twg_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

TWG_DEV void twg_bar_sync(int id, int count) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory"); }

// ---- sm_80: cp.async and mma.sync --------------------------------------------------------------
// 16 bytes global -> shared; bytes past src_bytes are zero-filled (0: nothing is read).
TWG_DEV void twg_cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(twg_smem_u32(dst)), "l"(src), "r"(src_bytes) : "memory");
}
TWG_DEV void twg_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> TWG_DEV void twg_cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// d += a * b, one warp: m16n8k8 TF32 and m16n8k16 fp16/bf16, fp32 accumulators (row.col fragments).
TWG_DEV void twg_mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
TWG_DEV void twg_mma_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
TWG_DEV void twg_mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- sm_90: mbarriers, TMA, wgmma ----------------------------------------------------------------
TWG_DEV void twg_mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(twg_smem_u32(bar)), "r"(count) : "memory");
}
TWG_DEV void twg_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
TWG_DEV void twg_mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(twg_smem_u32(bar)) : "memory");
}
// One arrival that also expects `bytes` more of asynchronous copies before the phase completes.
TWG_DEV void twg_mbar_arrive_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(twg_smem_u32(bar)), "r"(bytes) : "memory");
}
// Wait until the phase of parity `parity` has completed.
TWG_DEV void twg_mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(twg_smem_u32(bar)), "r"(parity) : "memory");
  } while (!done);
}
// Generic-proxy writes to shared memory (st.shared) made visible to the async proxy (wgmma, TMA).
TWG_DEV void twg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

TWG_DEV void twg_tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               :: "r"(twg_smem_u32(dst)), "l"((uint64_t)map), "r"(twg_smem_u32(bar)), "r"(c0), "r"(c1) : "memory");
}
TWG_DEV void twg_tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
               :: "r"(twg_smem_u32(dst)), "l"((uint64_t)map), "r"(twg_smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

TWG_DEV void twg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
TWG_DEV void twg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> TWG_DEV void twg_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// NOTE: wgmma reads its register operands and writes its accumulators asynchronously; the compiler
// does not know that. An empty asm that "uses and redefines" them after the wait keeps them in the
// same registers, untouched, until then.
template <int N> TWG_DEV void twg_keep(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}
template <int N> TWG_DEV void twg_keep(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i]) :: "memory");
}
template <int R> TWG_DEV void twg_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R)); }
template <int R> TWG_DEV void twg_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R)); }

// ---- host ----------------------------------------------------------------------------------------
typedef CUresult (*twg_encode_fn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry point (null where the driver lacks it).
static inline twg_encode_fn twg_find_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) return nullptr;
  return (twg_encode_fn)fn;
}
#endif  // TWG_PTX_CUH
