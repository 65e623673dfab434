// Layout unit check, appended after the GEMM prelude in emulated builds: for every element of K-major
// and MN-major tiles, the kernels' address function (twg_tile_off) against (1) where the emulated TMA
// puts a box's element and (2) where wgmma reads it through the descriptors the kernels build
// (twg_desc_step), both by the documented layouts in gemm_emu_sm90.h. Returns the mismatches.
#pragma once
template <bool KMAJ, int ES> long twg_emu_check_tile(unsigned char* tile, int rows) {
  constexpr int BK = 128 / ES, E = 128 / ES, KSTEP = 32 / ES;
  const uint32_t base = twg_smem_u32(tile);
  long bad = 0;
  for (int mn = 0; mn < rows; ++mn)
    for (int k = 0; k < BK; ++k) {
      const uint32_t mine = base + twg_tile_off<KMAJ, BK, ES>(mn, k);
      const uint32_t tma = KMAJ ? twg_emu_swz128(base + (uint32_t)(mn * BK + k) * ES)  // one box BK x rows
                                : twg_emu_swz128(base + (uint32_t)(mn / E) * BK * 128 + (uint32_t)(k * E + mn % E) * ES);
      const uint64_t desc = twg_desc_step<KMAJ, BK>(tile, k / KSTEP);
      const uint32_t mma = twg_emu_desc_addr(desc, mn, k % KSTEP, !KMAJ, ES);
      bad += (mine != tma) + (mine != mma);
    }
  return bad;
}
extern "C" long twg_emu_check_layouts() {
  TwgEmuBlock blk(1, 256 * 128 + 2048);
  twg_emu_blk = &blk;
  unsigned char* tile = twg_align1024(blk.smem);
  long bad = 0;
  for (int rows : {64, 128, 256}) {
    bad += twg_emu_check_tile<true, 4>(tile, rows) + twg_emu_check_tile<false, 4>(tile, rows);
    bad += twg_emu_check_tile<true, 2>(tile, rows) + twg_emu_check_tile<false, 2>(tile, rows);
  }
  twg_emu_blk = nullptr;
  return bad;
}
