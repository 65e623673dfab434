// torchweld GEMM: shared-memory tile layouts, epilogue operand views, row reductions, tile order.
// Used by both main loops (gemm_sm80.cuh, gemm_sm90.cuh) and by the host launchers.
#ifndef TWG_TILE_CUH
#define TWG_TILE_CUH

// A tile is made of 128-byte rows. The 128-byte swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B, wgmma's
// layout type 1) stores 16-byte chunk c of row r at chunk c ^ (r % 8): with the tile 1024-byte aligned
// this is the hardware's rule (address bits [4,7) ^= bits [7,10)), and a warp reading one column
// chunk of 8 rows hits 8 different bank groups.
__host__ __device__ __forceinline__ uint32_t twg_swz(uint32_t row, uint32_t byte) {
  return row * 128u + ((((byte >> 4) ^ row) & 7u) << 4) + (byte & 15u);
}

// Byte offset of element (mn, k) of an operand tile holding BK k-values (BK * ES == 128 bytes).
// K-major (k contiguous in memory): one row per mn. MN-major (mn contiguous): boxes of E = 128 / ES
// mn-values, each box BK rows of k, box after box; this is what one TMA box per E mn-values writes
// and what wgmma's MN-major descriptor reads (leading byte offset = one box, BK * 128 bytes).
template <bool KMAJ, int BK, int ES>
__host__ __device__ __forceinline__ uint32_t twg_tile_off(int mn, int k) {
  if (KMAJ) return twg_swz((uint32_t)mn, (uint32_t)(k * ES));
  constexpr int E = 128 / ES;
  return (uint32_t)(mn / E) * (BK * 128u) + twg_swz((uint32_t)k, (uint32_t)((mn % E) * ES));
}

// Epilogue operands: `bias[col]`, `scale[row]`, `res(row, col)` in the site's expression read the
// operand (already offset to the batch) through its strides and convert it to float.
template <typename T> struct twg_vec {
  const T* p;
  long long s;
  TWG_DEV float operator[](long long i) const { return twg_f(p[i * s]); }
};
template <typename T> struct twg_mat {
  const T* p;
  long long sr, sc;
  TWG_DEV float operator()(long long r, long long c) const { return twg_f(p[r * sr + c * sc]); }
};

// Row reductions: 1 sum, 2 max, 3 min (NaN-propagating, as torch.amax/amin).
template <int OP> TWG_DEV float twg_red_init() {
  return OP == 1 ? 0.0f : OP == 2 ? -__int_as_float(0x7f800000) : __int_as_float(0x7f800000);
}
template <int OP> TWG_DEV float twg_red(float a, float b) {
  if (OP == 1) return a + b;
  if (OP == 2) return (a != a || a > b) ? a : b;
  return (a != a || a < b) ? a : b;
}
// Combine a per-thread row value across the 4 lanes that share a row in an mma/wgmma fragment.
template <int OP> TWG_DEV float twg_red_quad(float v) {
  v = twg_red<OP>(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return twg_red<OP>(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Tile order: blocks take (tile_m, tile_n) in groups of G tile-rows, so the blocks running together
// share A rows and B columns in L2.
template <int G> TWG_DEV void twg_tile_of(int id, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = G * tiles_n;
  const int first = (id / per_group) * G;
  const int rows = min(tiles_m - first, G);
  const int in_group = id % per_group;
  tm = first + in_group % rows;
  tn = in_group / rows;
}
template <typename A, typename B> struct twg_same { static constexpr bool value = false; };
template <typename A> struct twg_same<A, A> { static constexpr bool value = true; };

TWG_DEV unsigned char* twg_align1024(unsigned char* p) {
  return p + ((1024u - (twg_smem_u32(p) & 1023u)) & 1023u);
}

template <bool KMAJ, int BK>
TWG_DEV float twg_ld32(const unsigned char* tile, int mn, int k) {
  return *reinterpret_cast<const float*>(tile + twg_tile_off<KMAJ, BK, 4>(mn, k));
}

// x as a TF32 (hi) and, for 3xTF32, the TF32 of what it leaves (lo); lo is 0 for inf/NaN (hi carries them).
template <int PREC> TWG_DEV void twg_split(float x, uint32_t& hi, uint32_t& lo) {
  hi = twg_tf32(x);
  if (PREC == 3) lo = fabsf(x) < __int_as_float(0x7f800000) ? twg_tf32(x - __uint_as_float(hi)) : 0u;
}

// The element (row, col) of the output: the site's epilogue, the store, the row reduction.
template <class S>
TWG_DEV void twg_out(const typename S::Ptrs& p, int b, int row, int col, float acc, float& red) {
  if (row < S::M && col < S::N) {
    const float v = S::value(p, b, row, col, acc);
    if (S::STORE) p.out[b * S::SO_B + (long long)row * S::SO_M + (long long)col * S::SO_N] = twg_to<typename S::TO>(v);
    if (S::REDUCE) red = twg_red<S::REDUCE>(red, v);
  }
}
template <class S> TWG_DEV void twg_out_row(const typename S::Ptrs& p, int b, int row, float r) {
  if (row < S::M) p.red[b * S::SR_B + (long long)row * S::SR_M] = twg_to<typename S::TO>(S::row_value(p, b, row, r));
}
#endif  // TWG_TILE_CUH
