// cuda_shim.h: compile the CUDA C that minicomp emits with a host C++17 compiler.
//
// Used by minicomp/codegen/simulator.py: its translation unit is this header, the kernel
// source verbatim, then one generated launcher per kernel that calls mc_sim::launch().
// Blocks run one after another; the threads of a block run as cooperative fibers (one
// stack each, reused across the blocks of a launch) on the calling OS thread, so only
// __syncthreads() and the warp functions switch threads; every other statement runs as
// written. The runtime (fibers, barriers, launch) is the MC_SIM_IMPLEMENTATION part: compiled
// once and linked into each build, or defined in exactly one translation unit of it.
#pragma once
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
// Probe big stack frames page by page: a fiber overflowing its stack hits its own guard
// page instead of silently writing into a neighbouring fiber's stack.
#pragma GCC optimize("stack-clash-protection")
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
extern "C" void* realloc(void*, __SIZE_TYPE__) noexcept;   // (stdlib.h's abs would clash with the shim's)
#if !defined(__x86_64__) || defined(MC_SIM_UCONTEXT)
#include <ucontext.h>
#define MC_SIM_USE_UCONTEXT 1
#endif
#ifndef MC_SIM_STACK
#define MC_SIM_STACK 65536  // bytes of stack per CUDA thread (plus one guard page)
#endif

// ---- qualifiers, vector types, built-in variables ---------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static  // one instance, shared by every fiber (= thread) of the block
#define MC_DYNAMIC_SHARED_BYTES (227 * 1024)  // the dynamic shared array (simulator.py): sm_90's opt-in maximum
#define __constant__ static
#define __align__(n) __attribute__((aligned(n)))  // not alignas: `static alignas(16) T a;` is ill-formed
struct uint3 { unsigned int x, y, z; };  struct dim3 { unsigned int x, y, z; };
struct __align__(8) float2 { float x, y; };  struct float3 { float x, y, z; };
struct __align__(16) float4 { float x, y, z, w; };  struct __align__(16) double2 { double x, y; };
struct __align__(8) int2 { int x, y; };  struct int3 { int x, y, z; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) uint2 { unsigned int x, y; };  struct __align__(16) uint4 { unsigned int x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
#define MC_HIDDEN __attribute__((visibility("hidden")))
// Plain (not static) globals, so the compiler reloads them after every fiber switch; defined by the
// runtime (MC_SIM_IMPLEMENTATION below).
extern MC_HIDDEN uint3 threadIdx;  // the running fiber's index, set on every switch
extern MC_HIDDEN uint3 blockIdx;
extern MC_HIDDEN dim3 blockDim, gridDim;
constexpr int warpSize = 32;
// clock64(): the simulator has no clock. Each read advances one counter by 1,000 "cycles", so a kernel spinning
// until it has moved on by N (the GPU runtime's delay kernel, gpu_runtime.GpuDelay) ends after N / 1,000 reads.
inline long long clock64() { static long long t = 0; return t += 1000; }

// ---- math: libm declarations instead of <math.h> (which costs ~0.2 s of compile time) ----
extern "C" {
#define MC_F1(f) float f(float) noexcept;
#define MC_F2(f) float f(float, float) noexcept;
#define MC_D1(f) double f(double) noexcept;
#define MC_D2(f) double f(double, double) noexcept;
MC_F1(expf) MC_F1(logf) MC_F1(sqrtf) MC_F1(tanhf) MC_F1(erff) MC_F1(fabsf) MC_F1(floorf)
MC_F1(ceilf) MC_F1(exp2f) MC_F1(log2f) MC_F1(log10f) MC_F1(sinf) MC_F1(cosf) MC_F1(tanf)
MC_F1(truncf) MC_F1(roundf) MC_F1(rintf) MC_F1(log1pf) MC_F1(expm1f) MC_F1(erfcf) MC_F1(atanf)
MC_F1(asinf) MC_F1(acosf) MC_F1(sinhf) MC_F1(coshf) MC_F1(asinhf) MC_F1(acoshf) MC_F1(atanhf)
MC_F2(powf) MC_F2(fmaxf) MC_F2(fminf) MC_F2(fmodf) MC_F2(atan2f)
MC_D1(exp) MC_D1(log) MC_D1(sqrt) MC_D1(tanh) MC_D1(erf) MC_D1(fabs) MC_D1(floor) MC_D1(ceil)
MC_D1(exp2) MC_D1(log2) MC_D1(round) MC_D2(pow) MC_D2(fmax) MC_D2(fmin) MC_D2(fmod)
MC_D1(sin) MC_D1(cos) MC_D1(tan) MC_D1(asin) MC_D1(acos) MC_D1(atan) MC_D1(sinh) MC_D1(cosh) MC_D1(asinh)
MC_D1(acosh) MC_D1(atanh)
float fmaf(float, float, float) noexcept;
double fma(double, double, double) noexcept;
int abs(int) noexcept;
long long llabs(long long) noexcept;
}
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#ifndef FLT_MAX
#define FLT_MAX __FLT_MAX__
#endif
inline long long abs(long long x) { return llabs(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return fminf(fmaxf(x, 0.0f), 1.0f); }
#define MC_MINMAX(T) \
  inline T min(T a, T b) { return a < b ? a : b; } inline T max(T a, T b) { return a > b ? a : b; }
MC_MINMAX(int) MC_MINMAX(unsigned int) MC_MINMAX(long) MC_MINMAX(unsigned long)
MC_MINMAX(long long) MC_MINMAX(unsigned long long)
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
#define MC_MINMAX_MIXED(R, A, B) \
  inline R min(A a, B b) { return min((R)a, (R)b); } inline R max(A a, B b) { return max((R)a, (R)b); }
MC_MINMAX_MIXED(unsigned, int, unsigned) MC_MINMAX_MIXED(unsigned, unsigned, int)
MC_MINMAX_MIXED(double, float, double) MC_MINMAX_MIXED(double, double, float)
#ifdef __FLT16_MAX__
typedef _Float16 half;  // storage and conversions as in cuda_fp16.h
typedef _Float16 __half;
inline half __float2half(float x) { return (half)x; }
inline half __float2half_rn(float x) { return (half)x; }   // (round to nearest even, as the GPU's cvt.rn)
inline float __half2float(half x) { return (float)x; }
#endif
template <class To, class From> inline To mc_sim_bitcast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
  To r; __builtin_memcpy(&r, &v, sizeof r); return r;
}
struct __nv_bfloat16 { unsigned short x; };   // storage; conversions as minicomp's NVRTC header (codegen/nvrtc.py)
inline float __bfloat162float(__nv_bfloat16 h) { return mc_sim_bitcast<float>((unsigned)h.x << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u = mc_sim_bitcast<unsigned>(f); __nv_bfloat16 h;
  h.x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u) : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return h;
}
inline int __float_as_int(float x) { return mc_sim_bitcast<int>(x); }
inline float __int_as_float(int x) { return mc_sim_bitcast<float>(x); }
inline unsigned __float_as_uint(float x) { return mc_sim_bitcast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return mc_sim_bitcast<float>(x); }
inline long long __double_as_longlong(double x) { return mc_sim_bitcast<long long>(x); }
inline double __longlong_as_double(long long x) { return mc_sim_bitcast<double>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> inline T __ldg(const T* p) { return *p; }
// Fibers never preempt each other, so a read-modify-write is atomic as written.
#define MC_ATOMIC(T) \
  inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; } \
  inline T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
MC_ATOMIC(int) MC_ATOMIC(unsigned int) MC_ATOMIC(unsigned long long) MC_ATOMIC(float) MC_ATOMIC(double)
#define MC_ATOMIC_INT(T) \
  inline T atomicMax(T* p, T v) { T o = *p; *p = o > v ? o : v; return o; } \
  inline T atomicMin(T* p, T v) { T o = *p; *p = o < v ? o : v; return o; } \
  inline T atomicCAS(T* p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
MC_ATOMIC_INT(int) MC_ATOMIC_INT(unsigned int) MC_ATOMIC_INT(unsigned long long)

// ---- the runtime's interface: what kernel code calls (the definitions are below) ----------
namespace mc_sim __attribute__((visibility("hidden"))) {
constexpr int MAXT = 1024;
struct Warp { unsigned live, arrived, mask; };  // lane bitmasks
extern Warp warps[MAXT / 32];
extern unsigned long long slots[MAXT];  // per-lane values exchanged by shuffles and votes
extern int nthreads, cur;               // threads in the block; the running one
void syncthreads(int line);
void warp_sync(unsigned mask);
unsigned ballot(unsigned mask, int p);
[[noreturn]] void fail_msg(const char* msg);  // abandon the launch with an error naming the block and thread
extern unsigned long long block_serial;       // counts the blocks run (per-thread state of one block: cp.async)
int launch(const unsigned* cfg, void (*fn)(void**), void** a);
}  // namespace mc_sim
extern "C" const char* mc_sim_error();

// ---- the runtime: fibers, barriers, launch. Compiled once per shim, compiler and flags with
// MC_SIM_IMPLEMENTATION defined and linked into every build (simulator.py), so a kernel's build
// compiles only the kernel; defining MC_SIM_IMPLEMENTATION in the kernel's own file also works.
#ifdef MC_SIM_IMPLEMENTATION
MC_HIDDEN uint3 threadIdx;
MC_HIDDEN uint3 blockIdx;
MC_HIDDEN dim3 blockDim, gridDim;
// ---- fiber contexts ------------------------------------------------------------------------
#ifndef MC_SIM_USE_UCONTEXT
// x86-64 switch without swapcontext's sigprocmask system call: push the callee-saved
// registers on the old stack, swap stack pointers, pop them from the new stack.
extern "C" MC_HIDDEN void mc_sim_switch(void** save_sp, void* load_sp);
__asm__(".text\n.globl mc_sim_switch\n.hidden mc_sim_switch\n.type mc_sim_switch,@function\n"
        "mc_sim_switch:\n pushq %rbp\n pushq %rbx\n pushq %r12\n pushq %r13\n pushq %r14\n"
        " pushq %r15\n movq %rsp, (%rdi)\n movq %rsi, %rsp\n popq %r15\n popq %r14\n"
        " popq %r13\n popq %r12\n popq %rbx\n popq %rbp\n ret\n.size mc_sim_switch, .-mc_sim_switch\n");
#endif
namespace mc_sim __attribute__((visibility("hidden"))) {
#ifdef MC_SIM_USE_UCONTEXT
struct Ctx { ucontext_t uc; };
inline void ctx_init(Ctx* c, char* stack, size_t size, void (*fn)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack; c->uc.uc_stack.ss_size = size; c->uc.uc_link = nullptr;
  makecontext(&c->uc, fn, 0);
}
inline void ctx_switch(Ctx* from, Ctx* to) { swapcontext(&from->uc, &to->uc); }
#else
struct Ctx { void* sp; };
inline void ctx_init(Ctx* c, char* stack, size_t size, void (*fn)()) {
  void** top = (void**)((uintptr_t)(stack + size) & ~(uintptr_t)15);
  top[-1] = nullptr;    // fake return address: fn starts as if called (rsp % 16 == 8)
  top[-2] = (void*)fn;  // popped by `ret`
  for (int i = 3; i <= 8; ++i) top[-i] = nullptr;  // rbp rbx r12..r15
  c->sp = top - 8;
}
inline void ctx_switch(Ctx* from, Ctx* to) { mc_sim_switch(&from->sp, to->sp); }
#endif

// ---- the threads of one block: a FIFO of ready fibers, block and warp barriers -----------
constexpr size_t GUARD = 4096;
struct Fiber { Ctx ctx; uint3 tid; bool started; };
Fiber fib[MAXT];
char* stacks[MAXT];  // mapped at the start of a launch, reused by its blocks, unmapped at its end
Warp warps[MAXT / 32];
unsigned long long slots[MAXT];  // per-lane values exchanged by shuffles and votes
unsigned long long block_serial;
int waiters[MAXT], queue[MAXT];  // block-barrier arrivals; ready fibers (ring)
int nthreads, cur, live, arrived, bar_line, qhead, qlen, failed;
Ctx sched;  // the launching OS thread
void (*body)(void**);
void** args;
char errmsg[768];

inline void push(int t) { queue[(qhead + qlen++) % nthreads] = t; }
inline int pop() {
  if (!qlen) return -1;
  int t = queue[qhead]; qhead = (qhead + 1) % nthreads; --qlen; return t;
}
void entry();
inline void resume(Ctx* from, int t) {  // switch to fiber t, starting it if new
  cur = t; threadIdx = fib[t].tid;
  if (!fib[t].started) ctx_init(&fib[t].ctx, stacks[t] + GUARD, MC_SIM_STACK, entry);
  fib[t].started = true;
  ctx_switch(from, &fib[t].ctx);
}
inline int where(char* buf, size_t n) {
  return snprintf(buf, n, "block (%u,%u,%u) thread (%u,%u,%u): ", blockIdx.x, blockIdx.y,
                  blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
}
__attribute__((noreturn, format(printf, 1, 2))) inline void fail(const char* fmt, ...) {
  int n = where(errmsg, sizeof errmsg);
  va_list ap; va_start(ap, fmt); vsnprintf(errmsg + n, sizeof errmsg - n, fmt, ap); va_end(ap);
  failed = 1;
  ctx_switch(&fib[cur].ctx, &sched);  // abandon the block's fibers; never resumed
  __builtin_unreachable();
}
__attribute__((noreturn)) inline void deadlock() {
  int in_warp = 0;
  for (int w = 0; w < (nthreads + 31) / 32; ++w) in_warp += __builtin_popcount(warps[w].arrived);
  fail("deadlock: %d thread(s) wait at __syncthreads() (line %d), %d at a warp-level sync "
       "(__shfl*_sync/__syncwarp/vote) and %d exited; no thread can go on",
       arrived, arrived ? bar_line : 0, in_warp, nthreads - live);
}
inline void wait_here() {  // block the running fiber, run the next ready one
  int t = pop();
  if (t < 0) deadlock();
  resume(&fib[cur].ctx, t);
}
inline void release_warp(int w, int except) {
  unsigned a = warps[w].arrived;
  warps[w].arrived = 0;
  for (; a; a &= a - 1) if (w * 32 + __builtin_ctz(a) != except) push(w * 32 + __builtin_ctz(a));
}
inline bool warp_complete(const Warp& w) { return (w.arrived & w.mask & w.live) == (w.mask & w.live); }
// A block barrier completes when every thread that has not exited arrived (as bar.sync on
// sm_70+); the threads of one barrier instance must arrive at the same __syncthreads() line.
void syncthreads(int line) {
  if (arrived == 0) bar_line = line;
  else if (line != bar_line)
    fail("divergent __syncthreads(): reached the one on line %d while %d thread(s) wait at "
         "the one on line %d", line, arrived, bar_line);
  waiters[arrived++] = cur;
  if (arrived < live) return wait_here();
  for (int i = 0; i < arrived - 1; ++i) push(waiters[i]);  // the last arrival runs on
  arrived = 0;
}
void warp_sync(unsigned mask) {  // rendezvous of the live lanes in `mask`
  Warp& w = warps[cur >> 5];
  if (!w.arrived) w.mask = mask;
  w.arrived |= 1u << (cur & 31);
  if (warp_complete(w)) release_warp(cur >> 5, cur);
  else wait_here();
}
inline void exit_fiber() {  // an exited thread counts as arrived at every barrier
  --live;
  Warp& w = warps[cur >> 5];
  w.live &= ~(1u << (cur & 31));
  if (w.arrived && warp_complete(w)) release_warp(cur >> 5, -1);
  if (arrived && arrived == live) {
    for (int i = 0; i < arrived; ++i) push(waiters[i]);
    arrived = 0;
  }
  int t = pop();
  if (t >= 0) resume(&fib[cur].ctx, t);
  else if (live == 0) ctx_switch(&fib[cur].ctx, &sched);  // the block is done
  else deadlock();
}
inline void entry() { body(args); exit_fiber(); }
void fail_msg(const char* msg) { fail("%s", msg); }
unsigned ballot(unsigned mask, int p) {
  int me = cur;
  slots[me] = p != 0;
  warp_sync(mask);
  unsigned r = 0, lanes = warps[me >> 5].live & mask;
  for (int l = 0; l < 32 && (me & ~31) + l < nthreads; ++l)
    if ((lanes >> l & 1) && slots[(me & ~31) + l]) r |= 1u << l;
  warp_sync(mask);
  return r;
}

// ---- launch: the blocks of the grid in turn; faults become an error message --------------
sigjmp_buf fault_jb;
pthread_t owner;
const int fault_sigs[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
struct sigaction old_act[4];
stack_t old_ss;
char altstack[64 * 1024];  // the handler must run even when a fiber overflowed its stack
inline void on_fault(int sig, siginfo_t* si, void*) {
  if (!pthread_equal(pthread_self(), owner)) {  // another thread's fault: previous handler
    for (int i = 0; i < 4; ++i) if (fault_sigs[i] == sig) sigaction(sig, &old_act[i], nullptr);
    return;
  }
  char* a = (char*)si->si_addr;
  int n = where(errmsg, sizeof errmsg);
  if (sig == SIGFPE || sig == SIGILL)
    snprintf(errmsg + n, sizeof errmsg - n, "%s", sig == SIGFPE ? "arithmetic fault (SIGFPE: integer "
             "division by zero or overflow)" : "illegal instruction (SIGILL, e.g. a null pointer access)");
  else if (stacks[cur] && a >= stacks[cur] && a < stacks[cur] + GUARD)
    snprintf(errmsg + n, sizeof errmsg - n, "stack overflow: a thread may use at most %d bytes of "
             "stack (local arrays included)", MC_SIM_STACK);
  else
    snprintf(errmsg + n, sizeof errmsg - n, "memory fault at address %p (out-of-bounds index or "
             "invalid pointer)", (void*)a);
  siglongjmp(fault_jb, 1);
}
inline int run_grid() {
  unsigned long long nblocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
  for (unsigned long long b = 0; b < nblocks && !failed; ++b) {
    blockIdx = {(unsigned)(b % gridDim.x), (unsigned)(b / gridDim.x % gridDim.y),
                (unsigned)(b / ((unsigned long long)gridDim.x * gridDim.y))};
    live = nthreads; arrived = 0; qhead = 0; qlen = 0; ++block_serial;
    for (int w = 0; w < (nthreads + 31) / 32; ++w)
      warps[w] = {nthreads - 32 * w >= 32 ? ~0u : (1u << (nthreads - 32 * w)) - 1, 0u, 0u};
    for (int t = 0; t < nthreads; ++t) { fib[t].started = false; push(t); }
    resume(&sched, pop());  // returns when the block finished or failed
  }
  return failed;
}
int launch(const unsigned* cfg, void (*fn)(void**), void** a) {
  gridDim = {cfg[0], cfg[1], cfg[2]};
  blockDim = {cfg[3], cfg[4], cfg[5]};
  nthreads = (int)(cfg[3] * cfg[4] * cfg[5]);
  body = fn; args = a; failed = 0; errmsg[0] = 0;
  if (nthreads < 1 || nthreads > MAXT) { snprintf(errmsg, sizeof errmsg, "bad block size"); return 1; }
  for (int t = 0; t < nthreads; ++t) {
    if (!stacks[t]) {
      void* p = mmap(nullptr, GUARD + MC_SIM_STACK, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) { snprintf(errmsg, sizeof errmsg, "cannot map fiber stacks"); return 1; }
      mprotect(p, GUARD, PROT_NONE);
      stacks[t] = (char*)p;
    }
    fib[t].tid = {t % cfg[3], t / cfg[3] % cfg[4], t / (cfg[3] * cfg[4])};
  }
  owner = pthread_self();
  stack_t ss = {};
  ss.ss_sp = altstack; ss.ss_size = sizeof altstack;
  sigaltstack(&ss, &old_ss);
  struct sigaction sa = {};
  sa.sa_sigaction = on_fault; sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 4; ++i) sigaction(fault_sigs[i], &sa, &old_act[i]);
  int rc;
  if (sigsetjmp(fault_jb, 1)) rc = 1;  // a fault: errmsg says where
  else rc = run_grid();
  for (int i = 0; i < 4; ++i) sigaction(fault_sigs[i], &old_act[i], nullptr);
  sigaltstack(&old_ss, nullptr);
  // give the stacks back: each is two memory mappings (stack + guard page), and a process that
  // keeps many simulator modules loaded would otherwise run into the kernel's map-count limit
  for (int t = 0; t < MAXT && stacks[t]; ++t) { munmap(stacks[t], GUARD + MC_SIM_STACK); stacks[t] = nullptr; }
  return rc;
}
}  // namespace mc_sim

extern "C" const char* mc_sim_error() { return mc_sim::errmsg; }
#endif  // MC_SIM_IMPLEMENTATION

namespace mc_sim __attribute__((visibility("hidden"))) {
// PTX shfl.sync semantics: mode 0 idx, 1 up, 2 down, 3 bfly; c = clamp | segmask << 8.
template <class T> inline T shfl(unsigned mask, T v, int mode, int b, int c) {
  static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle of a type over 8 bytes");
  int me = cur, lane = me & 31, seg = (c >> 8) & 31, j;
  int maxl = (lane & seg) | (c & 31 & ~seg), minl = lane & seg;
  bool ok;
  switch (mode) {
    case 0: j = minl | (b & 31 & ~seg); ok = j <= maxl; break;
    case 1: j = lane - b; ok = j >= maxl; break;
    case 2: j = lane + b; ok = j <= maxl; break;
    default: j = lane ^ b; ok = j <= maxl; break;
  }
  __builtin_memcpy(&slots[me], &v, sizeof v);
  warp_sync(mask);
  T r = v;
  if (ok && (me & ~31) + j < nthreads) __builtin_memcpy(&r, &slots[(me & ~31) + j], sizeof r);
  warp_sync(mask);  // no lane overwrites its slot before every lane has read
  return r;
}
}  // namespace mc_sim

// ---- CUDA synchronisation and warp functions on top of the fibers -------------------------
#define __syncthreads() ::mc_sim::syncthreads(__LINE__)
inline void __syncwarp(unsigned mask = 0xffffffffu) { mc_sim::warp_sync(mask); }
inline unsigned __activemask() { return mc_sim::warps[mc_sim::cur >> 5].live; }  // non-exited lanes
template <class T> inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return mc_sim::shfl(m, v, 0, src, ((32 - w) << 8) | 31); }
template <class T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return mc_sim::shfl(m, v, 1, (int)d, (32 - w) << 8); }
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return mc_sim::shfl(m, v, 2, (int)d, ((32 - w) << 8) | 31); }
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int lm, int w = 32) { return mc_sim::shfl(m, v, 3, lm, ((32 - w) << 8) | 31); }
inline unsigned __ballot_sync(unsigned m, int p) { return mc_sim::ballot(m, p); }
inline int __any_sync(unsigned m, int p) { return mc_sim::ballot(m, p) != 0; }
inline int __all_sync(unsigned m, int p) { return mc_sim::ballot(m, !p) == 0; }

// ---- dot4 (minicomp/codegen/nvrtc.py DP4A_HEADER): dp4a as the sum it is; mc_dp4av_* is the same instruction
inline int mc_word(const void* p) { int w; __builtin_memcpy(&w, p, 4); return w; }
inline int mc_pack4(int a, int b, int c, int d) {
  return (int)((unsigned)(a & 255) | (unsigned)(b & 255) << 8 | (unsigned)(c & 255) << 16 | (unsigned)(d & 255) << 24);
}
#define MC_DP4A(name, A, B) \
  inline int name(int x, int y, int c) { for (int i = 0; i < 32; i += 8) c += (int)(A)(x >> i) * (int)(B)(y >> i); return c; }
MC_DP4A(mc_dp4a_ss, signed char, signed char) MC_DP4A(mc_dp4a_su, signed char, unsigned char)
MC_DP4A(mc_dp4a_us, unsigned char, signed char) MC_DP4A(mc_dp4a_uu, unsigned char, unsigned char)
MC_DP4A(mc_dp4av_ss, signed char, signed char) MC_DP4A(mc_dp4av_su, signed char, unsigned char)
MC_DP4A(mc_dp4av_us, unsigned char, signed char) MC_DP4A(mc_dp4av_uu, unsigned char, unsigned char)
#undef MC_DP4A

// ---- tensor cores: mma.sync, ldmatrix, cp.async (minicomp/codegen/tensor_core.py) ---------
// Each instruction as the PTX ISA defines it for the warp: mma.sync and ldmatrix exchange the
// lanes' registers / addresses through the warp's fibers; a cp.async copy lands in shared
// memory at the cp.async.wait_group that covers it, not before.
namespace mc_sim __attribute__((visibility("hidden"))) {
inline unsigned frag[MAXT][6];  // per lane: its A registers (0..3), then its B registers (4, 5)
inline void whole_warp(const char* what) {
  if ((nthreads & 31) || (warps[cur >> 5].live != ~0u)) {
    char m[160];
    snprintf(m, sizeof m, "%s needs all 32 lanes of the warp (a block of %d threads, or lanes that returned)",
             what, nthreads);
    fail_msg(m);
  }
}
inline float f16_value(unsigned short h) {  // IEEE binary16 -> float, exactly
  unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 31) return mc_sim_bitcast<float>(s | 0x7f800000u | (m << 13));
  if (e == 0) { float v = (float)m * 5.9604644775390625e-8f; return s ? -v : v; }  // m * 2^-24
  return mc_sim_bitcast<float>(s | ((e + 112u) << 23) | (m << 13));
}
inline unsigned short f16_bits(float f) {  // float -> binary16, round to nearest even (cvt.rn.f16.f32)
  unsigned u = mc_sim_bitcast<unsigned>(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(s | 0x7fffu);             // NaN (the GPU's canonical one)
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);            // >= 65520: infinity
  if (a < 0x38800000u)                                                   // below 2^-14: a multiple of 2^-24
    return (unsigned short)(s | (unsigned)__builtin_rintf(mc_sim_bitcast<float>(a) * 16777216.0f));
  return (unsigned short)(s | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10)));
}
inline unsigned tf32_bits(float x) {  // cvt.rna.tf32.f32: 10 mantissa bits, round to nearest, ties away
  unsigned u = mc_sim_bitcast<unsigned>(x);
  return (u & 0x7f800000u) == 0x7f800000u ? u : (u + 0x1000u) & ~0x1fffu;
}
// kind: 0 f16 (k16), 1 bf16 (k16), 2 f16 (k8), 3 tf32 (k8)
inline float element(int kind, unsigned reg, int half) {
  if (kind == 3) return mc_sim_bitcast<float>(reg & 0xffffe000u);   // (tf32: the 13 low mantissa bits ignored)
  unsigned short h = (unsigned short)(reg >> (16 * half));
  return kind == 1 ? mc_sim_bitcast<float>((unsigned)h << 16) : f16_value(h);
}
// A(row, col) and B(row = k, col = n) of the warp: the lane and register holding them, from the ISA's
// fragment figures for .m16n8k16 / .m16n8k8 (groupID = lane >> 2, threadID_in_group = lane % 4)
inline float a_at(int kind, int base, int row, int col) {
  int hi = row >> 3;
  if (kind == 3) return element(3, frag[base + (row & 7) * 4 + (col & 3)][hi + 2 * (col >> 2)], 0);
  int i = (col & 1) + 2 * hi + 4 * (col >> 3);
  return element(kind, frag[base + (row & 7) * 4 + ((col & 7) >> 1)][i >> 1], i & 1);
}
inline float b_at(int kind, int base, int row, int col) {
  if (kind == 3) return element(3, frag[base + col * 4 + (row & 3)][4 + (row >> 2)], 0);
  int i = (row & 1) + 2 * (row >> 3);
  return element(kind, frag[base + col * 4 + ((row & 7) >> 1)][4 + (i >> 1)], i & 1);
}
inline void mma(int kind, int k, float* d, const unsigned* a, int na, const unsigned* b, int nb) {
  whole_warp("mma.sync");
  int me = cur, lane = me & 31, base = me & ~31;
  for (int i = 0; i < na; ++i) frag[me][i] = a[i];
  for (int i = 0; i < nb; ++i) frag[me][4 + i] = b[i];
  warp_sync(~0u);
  float out[4];
  for (int c = 0; c < 4; ++c) {  // D's (row, col) of this lane: (groupID + 8 (c / 2), 2 threadID_in_group + c % 2)
    int row = (lane >> 2) + 8 * (c >> 1), col = 2 * (lane & 3) + (c & 1);
    float s = d[c];
    for (int kk = 0; kk < k; ++kk) s += a_at(kind, base, row, kk) * b_at(kind, base, kk, col);
    out[c] = s;
  }
  warp_sync(~0u);  // no lane overwrites its registers before every lane has read them
  for (int c = 0; c < 4; ++c) d[c] = out[c];
}
// m16n8k32 with 8-bit integers: A(row, col) is byte col % 4 of register (row >> 3) + 2 (col >> 4) of lane
// 4 (row & 7) + (col & 15) / 4; B(k, n) byte k % 4 of register 4 + (k >> 4) of lane 4 n + (k & 15) / 4. The
// products are summed in int32, wrapping (no .satfinite).
inline int byte_at(unsigned reg, int i, bool is_signed) {
  unsigned v = (reg >> (8 * i)) & 255u;
  return is_signed ? (int)(signed char)v : (int)v;
}
inline void mma_int8(bool a_signed, bool b_signed, int* d, const unsigned* a, const unsigned* b) {
  whole_warp("mma.sync");
  int me = cur, lane = me & 31, base = me & ~31;
  for (int i = 0; i < 4; ++i) frag[me][i] = a[i];
  for (int i = 0; i < 2; ++i) frag[me][4 + i] = b[i];
  warp_sync(~0u);
  int out[4];
  for (int c = 0; c < 4; ++c) {
    int row = (lane >> 2) + 8 * (c >> 1), col = 2 * (lane & 3) + (c & 1);
    unsigned s = (unsigned)d[c];
    for (int kk = 0; kk < 32; ++kk) {
      int x = byte_at(frag[base + (row & 7) * 4 + ((kk & 15) >> 2)][(row >> 3) + 2 * (kk >> 4)], kk & 3, a_signed);
      int y = byte_at(frag[base + col * 4 + ((kk & 15) >> 2)][4 + (kk >> 4)], kk & 3, b_signed);
      s += (unsigned)(x * y);
    }
    out[c] = (int)s;
  }
  warp_sync(~0u);
  for (int c = 0; c < 4; ++c) d[c] = out[c];
}
inline void ldmatrix(unsigned* r, const void* p, int count, bool trans) {
  whole_warp("ldmatrix");
  int me = cur, lane = me & 31, base = me & ~31;
  if (lane < 8 * count && ((uintptr_t)p & 15)) fail_msg("ldmatrix: a row address that is not 16-byte aligned");
  slots[me] = (unsigned long long)(uintptr_t)p;
  warp_sync(~0u);
  for (int j = 0; j < count; ++j) {  // matrix j's rows come from lanes 8j .. 8j + 7
    unsigned e[2];
    for (int h = 0; h < 2; ++h) {
      int row = trans ? 2 * (lane & 3) + h : lane >> 2, col = trans ? lane >> 2 : 2 * (lane & 3) + h;
      e[h] = ((const unsigned short*)(uintptr_t)slots[base + 8 * j + row])[col];
    }
    r[j] = e[0] | e[1] << 16;
  }
  warp_sync(~0u);
}
// a thread's copies in flight: as many as it issues before a wait covers them (PTX sets no limit; a block of one warp
// fetching three stages of tiles has over a hundred), in a queue that grows
struct CpCopy { void* dst; unsigned char data[16]; int n; unsigned group; };
struct CpState { unsigned long long block; unsigned committed, count, cap; CpCopy* q; };
inline CpState cp_state[MAXT];
inline CpState& cp_here() {  // this thread's copies in flight (none at the start of a block)
  CpState& s = cp_state[cur];
  if (s.block != block_serial) { s.block = block_serial; s.committed = 0; s.count = 0; }
  return s;
}
inline void cp_async(void* dst, const void* src, int n, bool valid) {
  if ((uintptr_t)dst % n || (uintptr_t)src % n) {
    char m[120];
    snprintf(m, sizeof m, "cp.async of %d bytes: an address not aligned to %d bytes", n, n);
    fail_msg(m);
  }
  CpState& s = cp_here();
  if (s.count == s.cap) {
    unsigned cap = s.cap ? 2 * s.cap : 64;
    CpCopy* q = (CpCopy*)realloc(s.q, cap * sizeof(CpCopy));
    if (!q) fail_msg("cp.async: out of memory for the copies in flight");
    s.q = q; s.cap = cap;
  }
  CpCopy& c = s.q[s.count++];
  c.dst = dst; c.n = n; c.group = s.committed;
  if (valid) __builtin_memcpy(c.data, src, n);
  else __builtin_memset(c.data, 0, n);
}
inline void cp_commit() { ++cp_here().committed; }
inline void cp_wait(unsigned pending) {  // every committed group but the `pending` most recent ones lands
  CpState& s = cp_here();
  unsigned keep = 0;
  for (unsigned i = 0; i < s.count; ++i) {
    CpCopy& c = s.q[i];
    if (c.group + pending < s.committed) __builtin_memcpy(c.dst, c.data, c.n);
    else s.q[keep++] = c;
  }
  s.count = keep;
}
}  // namespace mc_sim

inline unsigned mc_pack_f16(float lo, float hi) { return mc_sim::f16_bits(lo) | (unsigned)mc_sim::f16_bits(hi) << 16; }
#ifdef __FLT16_MAX__
inline unsigned mc_pack_h2(half lo, half hi) {
  return mc_sim_bitcast<unsigned short>(lo) | (unsigned)mc_sim_bitcast<unsigned short>(hi) << 16;
}
#endif
inline unsigned mc_pack_h2(__nv_bfloat16 lo, __nv_bfloat16 hi) { return lo.x | (unsigned)hi.x << 16; }
inline unsigned mc_pack_bf16(float lo, float hi) {
  return __float2bfloat16_rn(lo).x | (unsigned)__float2bfloat16_rn(hi).x << 16;
}
inline void mc_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b) { mc_sim::mma(0, 16, d, a, 4, b, 2); }
inline void mc_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b) { mc_sim::mma(1, 16, d, a, 4, b, 2); }
inline void mc_mma_m16n8k8_f16(float* d, const unsigned* a, const unsigned* b) { mc_sim::mma(2, 8, d, a, 2, b, 1); }
inline unsigned mc_tf32(float x) { return mc_sim::tf32_bits(x); }
inline void mc_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b) { mc_sim::mma(3, 8, d, a, 4, b, 2); }
#define MC_MMA_INT8(ab, sa, sb) \
  inline void mc_mma_m16n8k32_##ab(int* d, const unsigned* a, const unsigned* b) { mc_sim::mma_int8(sa, sb, d, a, b); }
MC_MMA_INT8(s8s8, true, true) MC_MMA_INT8(s8u8, true, false)
MC_MMA_INT8(u8s8, false, true) MC_MMA_INT8(u8u8, false, false)
#undef MC_MMA_INT8
inline void mc_ldmatrix_x1(unsigned* r, const void* p) { mc_sim::ldmatrix(r, p, 1, false); }
inline void mc_ldmatrix_x2(unsigned* r, const void* p) { mc_sim::ldmatrix(r, p, 2, false); }
inline void mc_ldmatrix_x4(unsigned* r, const void* p) { mc_sim::ldmatrix(r, p, 4, false); }
inline void mc_ldmatrix_x1_trans(unsigned* r, const void* p) { mc_sim::ldmatrix(r, p, 1, true); }
inline void mc_ldmatrix_x2_trans(unsigned* r, const void* p) { mc_sim::ldmatrix(r, p, 2, true); }
inline void mc_ldmatrix_x4_trans(unsigned* r, const void* p) { mc_sim::ldmatrix(r, p, 4, true); }
inline void mc_cp_async_4(void* dst, const void* src, bool valid) { mc_sim::cp_async(dst, src, 4, valid); }
inline void mc_cp_async_8(void* dst, const void* src, bool valid) { mc_sim::cp_async(dst, src, 8, valid); }
inline void mc_cp_async_16(void* dst, const void* src, bool valid) { mc_sim::cp_async(dst, src, 16, valid); }
inline void mc_cp_async_commit() { mc_sim::cp_commit(); }
template <int N> inline void mc_cp_async_wait() { mc_sim::cp_wait(N); }
