// torchweld GEMM, host side shared by every site's launcher: which main loop a device runs, tensor maps.
#ifndef TWG_HOST_CUH
#define TWG_HOST_CUH
#define TWG_MAX_DEVICES 64

static inline twg_encode_fn twg_encoder() {
  static const twg_encode_fn fn = twg_find_encoder();
  return fn;
}

// A 128-byte-swizzled tensor map over `base` (dims innermost first, strides in bytes of dims 1..),
// zero-filling whatever a box reaches outside the tensor.
static inline bool twg_encode(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base,
                              const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box) {
  const twg_encode_fn enc = twg_encoder();
  const cuuint32_t ones[3] = {1u, 1u, 1u};
  return enc && enc(map, type, (cuuint32_t)rank, const_cast<void*>(base), dims, strides, box, ones,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The main loop a site runs on the current device, found once per device (cache[dev] = path + 1):
// 90 where the device is sm_90, this build holds the sm_90a kernel (its static shared memory is the
// mark: the body is empty in a build without sm_90a) and the driver encodes tensor maps; 80 on
// compute capability 8.0 and later; 0 below that (the caller must take another way).
static inline int twg_path(int* cache, const void* const* k80, int smem80, const void* k90, int smem90) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= TWG_MAX_DEVICES) {
    (void)cudaGetLastError();
    return 0;
  }
  if (cache[dev]) return cache[dev] - 1;
  int major = 0, optin = 0, path = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (major >= 8 && smem80 <= optin &&
      cudaFuncSetAttribute(k80[0], cudaFuncAttributeMaxDynamicSharedMemorySize, smem80) == cudaSuccess &&
      cudaFuncSetAttribute(k80[1], cudaFuncAttributeMaxDynamicSharedMemorySize, smem80) == cudaSuccess)
    path = 80;
  cudaFuncAttributes fa;
  if (path && k90 && major == 9 && twg_encoder() && cudaFuncGetAttributes(&fa, k90) == cudaSuccess &&
      fa.sharedSizeBytes > 0 && smem90 + (int)fa.sharedSizeBytes <= optin &&
      cudaFuncSetAttribute(k90, cudaFuncAttributeMaxDynamicSharedMemorySize, smem90) == cudaSuccess)
    path = 90;
  (void)cudaGetLastError();  // a probe that failed leaves no error behind for the next launch
  cache[dev] = path + 1;
  return path;
}
#endif  // TWG_HOST_CUH
