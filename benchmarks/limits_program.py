"""The C program benchmarks.limits compiles and runs to measure this machine's limits (its text; the module that
builds, runs and caches it is benchmarks.limits): the FMA peak chains (CHAINS_VEC and CHAINS_SCALAR are filled in
per Target by benchmarks.limits.program_source) and the STREAM-like bandwidth loops."""

# Each row prints `name threads unit median best sample...`. Timing is wall clock around a barrier-fenced
# parallel region, so an all-thread figure is the whole team's work over the slowest thread's time.
SOURCE = r"""
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <sys/mman.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
/* CPU time of the calling thread: a rate over it is what a core does while it runs, whatever else the machine
   runs (the `_cpu` peak rows; wall-clock rows fall when other processes take the cores) */
static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static void report(const char *name, int threads, const char *unit, double *v, int n) {
  double s[64];
  memcpy(s, v, n * sizeof(double));
  qsort(s, n, sizeof(double), cmp_d);
  double med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  printf("%s %d %s %.4f %.4f", name, threads, unit, med, s[n - 1]);
  for (int i = 0; i < n; i++) printf(" %.4f", v[i]);
  printf("\n");
  fflush(stdout);
}

volatile float sink_f;
/* loaded at run time so the compiler cannot fold the chains: with constants, gcc finds a fixed point of
   a*b + c (1.0 for the values below) and deletes the loop */
volatile float vb = 0.999999f, vc = 1e-6f, va = 1.0f;

/* ---- peak: each function runs `iters` rounds of independent multiply-add chains and returns their sum (kept
   live); the chains are written out by benchmarks/limits.py for the target (CHAINS_VEC, CHAINS_SCALAR) */
typedef float vf __attribute__((vector_size(VEC_BYTES)));
#define VEC_LANES (VEC_BYTES / 4)

static float chains_vec(long iters) {
  vf b = (vf){0} + vb, c = (vf){0} + vc;
  CHAINS_VEC
}

/* gcc would otherwise pack the scalar chains into vectors (SLP), which is not the scalar figure */
__attribute__((optimize("no-tree-vectorize", "no-tree-slp-vectorize")))
static float chains_scalar(long iters) {
  float b = vb, c = vc;
  CHAINS_SCALAR
}

typedef float (*chain_fn)(long);

/* FLOP/s of `fn` on `threads` threads: calibrate the round count to ~target seconds, then `trials` timings */
static void peak(const char *name, chain_fn fn, double flop_per_iter, int threads, int trials, double target) {
  long iters = 1 << 16;
  for (;;) {
    double t0 = now();
    sink_f = fn(iters);
    if (now() - t0 > target / 4 || iters > (1L << 40)) break;
    iters *= 2;
  }
  iters *= 4;
  double v[64], vc[64];
  for (int t = 0; t < trials; t++) {
    double t0 = 0, t1 = 0, cmax = 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
      t0 = now();
      double c0 = thread_cpu();
      float r = fn(iters);
      double c = thread_cpu() - c0;
#pragma omp barrier
#pragma omp master
      t1 = now();
#pragma omp critical
      {
        sink_f += r;
        if (c > cmax) cmax = c;
      }
    }
    v[t] = flop_per_iter * (double)iters * threads / (t1 - t0) / 1e9;
    vc[t] = flop_per_iter * (double)iters * threads / cmax / 1e9;
  }
  report(name, threads, "GFLOP/s", v, trials);
  char cname[64];
  snprintf(cname, sizeof cname, "%s_cpu", name);
  report(cname, threads, "GFLOP/s", vc, trials);
}

/* ---- stream: three arrays of n floats, first touched by the thread that works on them later. Each is an anonymous
   private map aligned to 2 MiB and advised MADV_HUGEPAGE, as devices.memory allocates the cpu device's big buffers
   (and numpy its own), so the triad compares like with like with the kernels' figures */
#define HUGE_BYTES (2L << 20)
static float *huge_alloc(long bytes, void **base, size_t *len) {
  *len = (size_t)bytes + HUGE_BYTES;
  char *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, *len, MADV_HUGEPAGE);
#endif
  *base = p;
  return (float *)(p + (HUGE_BYTES - (long)((uintptr_t)p % HUGE_BYTES)) % HUGE_BYTES);
}

static void stream(long n, int threads, const char *tag, double min_bytes, int min_reps) {
  void *base[3];
  size_t len[3];
  float *a = huge_alloc(n * (long)sizeof(float), &base[0], &len[0]),
        *b = huge_alloc(n * (long)sizeof(float), &base[1], &len[1]),
        *c = huge_alloc(n * (long)sizeof(float), &base[2], &len[2]);
  if (!a || !b || !c) { fprintf(stderr, "out of memory\n"); exit(1); }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long i = 0; i < n; i++) { a[i] = 1.0f; b[i] = 2.0f; c[i] = 0.5f; }
  int reps = (int)(min_bytes / (12.0 * n)) + 1;
  if (reps < min_reps) reps = min_reps;
  if (reps > 64) reps = 64;
  double tri[64], cpy[64], rd[64], nt[64];
  int has_nt = 0;
  float s = 0.25f;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    double t1 = now();
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (long i = 0; i < n; i++) c[i] = a[i];
    double t2 = now();
    float acc = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc) num_threads(threads)
    for (long i = 0; i < n; i++) acc += b[i];
    double t3 = now();
    sink_f = acc;
#if defined(__x86_64__) && defined(__SSE2__)
    /* the triad again with streaming (non-temporal) stores, whole registers at aligned addresses, each thread's
       slice a multiple of 16 elements: no write-allocate read, what a kernel that streams its output can reach */
    has_nt = 1;
    double t4 = now();
#pragma omp parallel num_threads(threads)
    {
      int th = omp_get_thread_num(), nth = omp_get_num_threads();
      long per = (n / nth) & ~15L, lo = per * th, hi = th == nth - 1 ? n : lo + per, i = lo;
#if defined(__AVX512F__)
      __m512 vs = _mm512_set1_ps(s);
      for (; i + 16 <= hi; i += 16)
        _mm512_stream_ps(a + i, _mm512_add_ps(_mm512_load_ps(b + i), _mm512_mul_ps(vs, _mm512_load_ps(c + i))));
#elif defined(__AVX__)
      __m256 vs = _mm256_set1_ps(s);
      for (; i + 8 <= hi; i += 8)
        _mm256_stream_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(vs, _mm256_load_ps(c + i))));
#else
      __m128 vs = _mm_set1_ps(s);
      for (; i + 4 <= hi; i += 4)
        _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(vs, _mm_load_ps(c + i))));
#endif
      for (; i < hi; i++) a[i] = b[i] + s * c[i];
      _mm_sfence();
    }
    nt[r] = 12.0 * n / (now() - t4) / 1e9;
#endif
    tri[r] = 12.0 * n / (t1 - t0) / 1e9;
    cpy[r] = 8.0 * n / (t2 - t1) / 1e9;
    rd[r] = 4.0 * n / (t3 - t2) / 1e9;
  }
  char name[64];
  snprintf(name, sizeof name, "triad%s", tag);
  report(name, threads, "GB/s", tri, reps);
  if (has_nt) {
    snprintf(name, sizeof name, "triad_nt%s", tag);
    report(name, threads, "GB/s", nt, reps);
  }
  snprintf(name, sizeof name, "copy%s", tag);
  report(name, threads, "GB/s", cpy, reps);
  snprintf(name, sizeof name, "read%s", tag);
  report(name, threads, "GB/s", rd, reps);
  for (int k = 0; k < 3; k++) munmap(base[k], len[k]);
}

int main(int argc, char **argv) {
  int all = omp_get_max_threads();
  int counts[2] = {1, all};
  int nc = all > 1 ? 2 : 1;
  if (argc >= 2 && !strcmp(argv[1], "peak")) {
    int trials = argc >= 3 ? atoi(argv[2]) : 7;
    double target = argc >= 4 ? atof(argv[3]) : 0.1;
    for (int k = 0; k < nc; k++) {
      peak(VEC_ROW, chains_vec, N_VEC * VEC_LANES * 2, counts[k], trials, target);
      peak(SCALAR_ROW, chains_scalar, N_SCALAR * 2, counts[k], trials, target);
    }
    return 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "stream")) {
    long n = (long)(atof(argv[2]) * 1048576.0 / 12.0);  /* argv[2]: MiB in all three arrays */
    double min_bytes = atof(argv[3]) * 1e9;
    for (int k = 0; k < nc; k++) stream(n, counts[k], argc >= 5 ? argv[4] : "", min_bytes, 5);
    return 0;
  }
  fprintf(stderr, "usage: %s peak [trials] [seconds] | stream MIB GB [tag]\n", argv[0]);
  return 2;
}
"""
