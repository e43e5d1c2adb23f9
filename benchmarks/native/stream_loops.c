/* Plain C loops that put numbers on what the memory system allows, for the
 * local all-reduce benchmark (benchmarks/native_loops.py builds and loads this
 * with the machine's C compiler, -O3 -march=native):
 *
 *   read_once:  reads K float32 arrays once and nothing else: no reduction of
 *               K inputs can take less time than this.
 *   sum_stream: out = x[0] + ... + x[K-1] in one pass, with streaming stores,
 *               the way TfxFusedReduce's CPU kernel does it, but with no
 *               TensorFlow around it.
 *
 * Each splits [0, n) into `threads` contiguous parts, one per thread. */

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>

#define MAX_INPUTS 16
#define MAX_THREADS 64

typedef struct {
  const float* const* x;
  int k;
  float* out; /* NULL: read only */
  int64_t begin, end;
  float sink; /* keeps the reads from being optimized away */
} Part;

/* 32 independent accumulators (four 8-float vectors under AVX): the adds never
 * wait on each other, so the loop is limited by memory, not by the latency of
 * one chain of adds. */
static void ReadPart(Part* p) {
  float acc[32] = {0};
  int64_t i = p->begin;
  for (; i + 32 <= p->end; i += 32) {
    for (int s = 0; s < p->k; ++s) {
      const float* xs = p->x[s] + i;
      for (int j = 0; j < 32; ++j) acc[j] += xs[j];
    }
  }
  for (; i < p->end; ++i)
    for (int s = 0; s < p->k; ++s) acc[0] += p->x[s][i];
  float total = 0;
  for (int j = 0; j < 32; ++j) total += acc[j];
  p->sink = total;
}

#if defined(__AVX__)
#define LANE 8
typedef __m256 Vec;
#define VLOAD _mm256_loadu_ps
#define VADD _mm256_add_ps
#define VSTREAM _mm256_stream_ps
#else
#define LANE 4
typedef __m128 Vec;
#define VLOAD _mm_loadu_ps
#define VADD _mm_add_ps
#define VSTREAM _mm_stream_ps
#endif

/* out[i] for i in [from, to), one element at a time with plain stores. */
static void SumScalar(Part* p, int64_t from, int64_t to) {
  for (int64_t i = from; i < to; ++i) {
    float v = 0;
    for (int s = 0; s < p->k; ++s) v += p->x[s][i];
    p->out[i] = v;
  }
}

static void SumPart(Part* p) {
  /* Plain stores up to the first aligned output lane, then streaming stores. */
  int64_t i = p->begin;
  while (i < p->end && ((uintptr_t)(p->out + i) % (LANE * 4)) != 0) ++i;
  SumScalar(p, p->begin, i);
  for (; i + LANE <= p->end; i += LANE) {
    Vec v = VLOAD(p->x[0] + i);
    for (int s = 1; s < p->k; ++s) v = VADD(v, VLOAD(p->x[s] + i));
    VSTREAM(p->out + i, v);
  }
  SumScalar(p, i, p->end);
  _mm_sfence();
}

static void* RunPart(void* arg) {
  Part* p = (Part*)arg;
  if (p->out) SumPart(p);
  else ReadPart(p);
  return NULL;
}

/* Returns 0, or -1 for arguments out of range. */
static int RunParts(const float* const* x, int k, float* out, int64_t n, int threads) {
  if (k < 1 || k > MAX_INPUTS || threads < 1 || threads > MAX_THREADS) return -1;
  Part parts[MAX_THREADS];
  pthread_t ids[MAX_THREADS];
  const int64_t step = (n / threads + 63) / 64 * 64; /* parts start on cache lines */
  for (int t = 0; t < threads; ++t) {
    int64_t begin = t * step < n ? t * step : n;
    int64_t end = (t + 1) * step < n ? (t + 1) * step : n;
    parts[t] = (Part){x, k, out, begin, t == threads - 1 ? n : end, 0};
  }
  int created[MAX_THREADS] = {0};
  for (int t = 1; t < threads; ++t)
    created[t] = pthread_create(&ids[t], NULL, RunPart, &parts[t]) == 0;
  RunPart(&parts[0]);
  for (int t = 1; t < threads; ++t) {
    if (created[t]) pthread_join(ids[t], NULL);
    else RunPart(&parts[t]); /* no thread: do its part here */
  }
  return 0;
}

int read_once(const float* const* x, int k, int64_t n, int threads) {
  return RunParts(x, k, NULL, n, threads);
}

int sum_stream(const float* const* x, int k, float* out, int64_t n, int threads) {
  return RunParts(x, k, out, n, threads);
}
