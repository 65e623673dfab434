__device__ __forceinline__ float tw_ld(__half x) { return __half2float(x); }
__device__ __forceinline__ float tw_ld(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ __half tw_st<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 tw_st<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
