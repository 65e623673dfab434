// Just enough CUDA to run torchweld's generated kernels on the CPU (tests/emulator.py).
// A launch runs its blocks one after another on the calling thread; a block's threads are fibers
// (a stack each) that run until they wait, at __syncthreads or a warp shuffle, and switch there.
// Even blocks run their threads in order, odd blocks in reverse, so a missing barrier shows either
// way. What a GPU would refuse or leave undefined is a launch error with a message: a deadlocked
// barrier, a launch over its __launch_bounds__, a shuffle naming absent lanes, a memory fault.
#pragma once
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // NOTE: blocks run one at a time; tests/emulator.py poisons each at a block's start
#define __align__(n) __attribute__((aligned(n)))

struct dim3 { unsigned x = 0, y = 0, z = 0; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;  // NOTE: static: each library its own
typedef void* cudaStream_t;
typedef int cudaError_t;

#if defined(__x86_64__) && defined(__ELF__) && !defined(TW_EMU_UCONTEXT)
#define TW_EMU_SWITCH
// Saves the callee-saved registers on the current stack, stores its pointer, loads another.
extern "C" void tw_emu_switch(void** save, void* load);
#endif

// NOTE: an unnamed namespace: two emulated libraries in one process share nothing (inline variables
// would be unified across them by the dynamic linker).
namespace tw_emu {
namespace {

constexpr unsigned MAX_THREADS = 1024;
constexpr size_t STACK = 256 * 1024;
constexpr int ERROR = 719;  // cudaErrorLaunchFailure

#ifdef TW_EMU_SWITCH
asm(R"(
  .text
  .globl tw_emu_switch
  .hidden tw_emu_switch
  .type tw_emu_switch, @function
tw_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tw_emu_switch, .-tw_emu_switch
)");
struct Context {
  void* sp = nullptr;
  void start(char* stack, void (*entry)()) {  // a frame tw_emu_switch pops into `entry`
    void** top = (void**)(stack + STACK);
    top[-1] = nullptr;
    top[-2] = (void*)entry;
    for (int i = 3; i <= 8; ++i) top[-i] = nullptr;
    sp = top - 8;
  }
  void to(Context& next) { tw_emu_switch(&sp, next.sp); }
};
#else
struct Context {  // portable and slower: swapcontext makes a system call each switch
  ucontext_t uc;
  void start(char* stack, void (*entry)()) {
    getcontext(&uc);
    uc.uc_stack.ss_sp = stack;
    uc.uc_stack.ss_size = STACK;
    uc.uc_link = nullptr;
    makecontext(&uc, entry, 0);
  }
  void to(Context& next) { swapcontext(&uc, &next.uc); }
};
#endif

struct Barrier {
  unsigned expected = 0, count = 0;
  unsigned long gen = 0;
  bool arrive() {  // true for the last thread to arrive, which releases the others
    if (++count < expected) return false;
    count = 0;
    ++gen;
    return true;
  }
};

struct Fiber {
  Context ctx;
  char* stack = nullptr;
  unsigned tid = 0;
  bool done = false;
  const Barrier* wait = nullptr;  // runnable again once wait->gen != gen
  unsigned long gen = 0;
};

struct Warp {
  Barrier bar;
  unsigned lanes = 0, src[32];
  unsigned long long in[32], out[32];
};

Context sched;
Fiber fibers[MAX_THREADS];
Warp warps[MAX_THREADS / 32];
Barrier block;
Fiber* cur = nullptr;
void (*body)(void*) = nullptr;
void* body_arg = nullptr;
const char* kernel = "";
unsigned long serial = 0;  // blocks run so far: a `__shared__` array is poisoned once each
int error = 0;
char message[512] = "no error";
char altstack[64 * 1024];

inline void fail(const char* what) {
  if (error) return;
  error = ERROR;
  if (cur) snprintf(message, sizeof message, "%s block %u thread %u: %s", kernel, blockIdx.x, cur->tid, what);
  else snprintf(message, sizeof message, "%s block %u: %s", kernel, blockIdx.x, what);
}

inline void yield() { cur->ctx.to(sched); }

inline void wait(const Barrier& b) {
  cur->wait = &b;
  cur->gen = b.gen;
  yield();
}

inline void entry() {
  body(body_arg);
  cur->done = true;
  yield();
}

inline void on_fault(int sig, siginfo_t* info, void*) {
  if (!cur) {  // not a kernel's thread: the default action
    signal(sig, SIG_DFL);
    return;
  }
  char what[96];
  snprintf(what, sizeof what, "memory fault at %p (outside every operand)", info->si_addr);
  fail(what);
  cur->done = true;
  yield();  // NOTE: never returns; SA_NODEFER leaves the signal mask as it was
}

inline char* new_stack() {
  char* s = (char*)mmap(nullptr, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) abort();
  mprotect(s, 4096, PROT_NONE);  // an overflowing thread faults instead of writing over its neighbour
  return s + 4096;
}

inline void deadlock(unsigned threads) {
  unsigned at_block = 0, at_warp = 0, returned = 0;
  for (unsigned t = 0; t < threads; ++t) {
    if (fibers[t].done) ++returned;
    else if (fibers[t].wait == &block) ++at_block;
    else ++at_warp;
  }
  char what[160];
  snprintf(what, sizeof what, "deadlock: %u threads wait at __syncthreads, %u at a warp shuffle, %u returned",
           at_block, at_warp, returned);
  cur = nullptr;
  fail(what);
}

// Runs one block to its end; false where it stopped on an error.
inline bool run_block(unsigned threads, bool reverse) {
  block = Barrier{threads};
  for (unsigned w = 0; w * 32 < threads; ++w) {
    warps[w].lanes = threads - w * 32 < 32 ? threads - w * 32 : 32;
    warps[w].bar = Barrier{warps[w].lanes};
  }
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& f = fibers[t];
    if (!f.stack) f.stack = new_stack();
    f.tid = t;
    f.done = false;
    f.wait = nullptr;
    f.ctx.start(f.stack, entry);
  }
  for (unsigned live = threads; live;) {
    bool ran = false;
    live = 0;
    for (unsigned i = 0; i < threads; ++i) {
      Fiber& f = fibers[reverse ? threads - 1 - i : i];
      if (f.done) continue;
      if (f.wait && f.wait->gen == f.gen) {
        ++live;
        continue;
      }
      f.wait = nullptr;
      cur = &f;
      threadIdx.x = f.tid;
      sched.to(f.ctx);
      if (error) return false;
      ran = true;
      live += !f.done;
    }
    if (live && !ran) {
      deadlock(threads);
      return false;
    }
  }
  cur = nullptr;
  return true;
}

// A launch of `fn` over blocks x threads, as `name<<<blocks, threads>>>` would run it.
template <typename F>
void launch(const char* name, unsigned bound, unsigned blocks, unsigned threads, F&& fn) {
  using G = std::remove_reference_t<F>;
  if (error) return;  // NOTE: as on a GPU, an error stops the launches after it until it is read
  kernel = name;
  blockIdx.x = 0;
  if (!blocks || !threads || threads > MAX_THREADS || threads > bound) {
    char what[96];
    snprintf(what, sizeof what, "invalid launch <<<%u, %u>>> (__launch_bounds__ %u)", blocks, threads, bound);
    fail(what);
    return;
  }
  gridDim.x = blocks;
  blockDim.x = threads;
  body = [](void* f) { (*(G*)f)(); };
  body_arg = (void*)&fn;
  struct sigaction act = {}, old_segv, old_bus;
  act.sa_sigaction = on_fault;
  act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  stack_t alt = {}, old_alt;
  alt.ss_sp = altstack;
  alt.ss_size = sizeof altstack;
  sigaltstack(&alt, &old_alt);
  sigaction(SIGSEGV, &act, &old_segv);
  sigaction(SIGBUS, &act, &old_bus);
  for (unsigned b = 0; b < blocks; ++b) {
    blockIdx.x = b;
    ++serial;
    if (!run_block(threads, b % 2)) break;
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaltstack(&old_alt, nullptr);
  cur = nullptr;
}

// Fills a `__shared__` array with 0xff bytes (NaN as any float type) at the first use in a block.
inline void fresh(void* p, size_t n, unsigned long& stamp) {
  if (stamp != serial) {
    memset(p, 0xff, n);
    stamp = serial;
  }
}

// Lane `lane` of the calling thread's warp receives v from lane src[lane].
template <typename T> T exchange(unsigned mask, T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  const unsigned lane = threadIdx.x % 32;
  Warp& w = warps[threadIdx.x / 32];
  if (w.lanes < 32 && (mask >> w.lanes)) {
    fail("a shuffle's mask names lanes past the block's last thread");
    cur->done = true;
    yield();
  }
  w.in[lane] = 0;
  memcpy(&w.in[lane], &v, sizeof(T));
  w.src[lane] = src;
  if (w.bar.arrive()) {
    for (unsigned l = 0; l < w.lanes; ++l) w.out[l] = w.src[l] < w.lanes ? w.in[w.src[l]] : ~0ull;
  } else {
    wait(w.bar);
  }
  T r;
  memcpy(&r, &w.out[lane], sizeof(T));
  return r;
}

}  // namespace
}  // namespace tw_emu

static inline int cudaGetLastError() {
  const int e = tw_emu::error;
  tw_emu::error = 0;
  return e;
}
static inline const char* cudaGetErrorString(int e) { return e ? tw_emu::message : "no error"; }

static inline void __syncthreads() {
  if (!tw_emu::block.arrive()) tw_emu::wait(tw_emu::block);
}

template <typename T> static T __shfl_xor_sync(unsigned mask, T v, int m) {
  return tw_emu::exchange(mask, v, (threadIdx.x % 32) ^ (unsigned)m);
}
template <typename T> static T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = threadIdx.x % 32;
  return tw_emu::exchange(mask, v, lane % width >= delta ? lane - delta : lane);
}
template <typename T> static T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const unsigned lane = threadIdx.x % 32;
  return tw_emu::exchange(mask, v, (lane / width) * width + (unsigned)src % width);
}

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }

struct __half { _Float16 h; };
static inline float __half2float(__half x) { return (float)x.h; }
static inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
struct __nv_bfloat16 { unsigned short b; };
static inline float __bfloat162float(__nv_bfloat16 x) {
  unsigned u = (unsigned)x.b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(unsigned short)(u >> 16)};
}
