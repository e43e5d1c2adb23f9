/* The C interface of libtfx_comm, used by Python (ctypes) and by the
 * TensorFlow kernels (_comm_ops.so links this library; both share one copy,
 * so a communicator created from Python is found by its id in the kernels).
 *
 * Codes: dtype 1 float16, 2 bfloat16, 3 float32, 4 float64, 5 int32,
 * 6 int64, 7 uint8; reduction 0 sum, 1 mean, 2 min, 3 max; compression
 * 0 none, 1 float16, 2 bfloat16; op 1 allreduce, 2 allgather, 3 broadcast.
 * Status codes are tfx::comm::Code (0 = OK).
 */
#ifndef TFX_COMM_C_API_H_
#define TFX_COMM_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TFX_API __attribute__((visibility("default")))

typedef struct {
  double timeout_s;
  int64_t bucket_bytes;
  double cycle_time_ms;
  int32_t use_shm;
  int64_t chunk_bytes;
} tfx_comm_options;

/* Called once per entry with the outcome (code 0 = OK), from the runtime thread. */
typedef void (*tfx_done_fn)(void* arg, int32_t code, const char* message);
/* All-gather: returns the output buffer for dim0 rows in total. */
typedef void* (*tfx_alloc_fn)(void* arg, int64_t dim0);

typedef struct {
  const char* name;
  int32_t op;
  int32_t dtype;
  int32_t reduction;
  int32_t compression;
  int32_t root;
  int32_t ndims;
  const int64_t* dims;
  const void* input;
  void* output;
  tfx_alloc_fn alloc;
  void* alloc_arg;
  tfx_done_fn done;
  void* done_arg;
} tfx_entry;

/* Creates a communicator; takes ownership of every fd. data_fds[size] (-1 at
 * rank), ctrl_fds[size] (rank 0: one per other rank; others: [0] = rank 0),
 * same_host[size]. Returns an id > 0, or 0 with the error in err. */
TFX_API int64_t tfx_comm_create(int32_t rank, int32_t size, const int32_t* data_fds,
                                const int32_t* ctrl_fds, const int32_t* same_host,
                                const tfx_comm_options* options, char* err, int32_t err_len);
TFX_API int32_t tfx_comm_destroy(int64_t id);
/* "tcp", "shm", "self" into out. */
TFX_API int32_t tfx_comm_transport(int64_t id, int32_t peer, char* out, int32_t out_len);
/* Counters: out[0] collectives executed, [1] all-reduce buckets, [2] tensors
 * in them, [3] bytes all-reduced, [4] ns from submission to running, [5] ns
 * running, summed over collectives. Writes min(n, 6) values. */
TFX_API int32_t tfx_comm_stats(int64_t id, int64_t* out, int32_t n);
TFX_API int32_t tfx_comm_rank(int64_t id);
TFX_API int32_t tfx_comm_size(int64_t id);

/* Submits n entries; each entry's done is called exactly once. Returns 0, or
 * a nonzero code (and calls no done) when id is unknown or an entry is
 * invalid; err then says why. */
TFX_API int32_t tfx_comm_submit(int64_t id, const tfx_entry* entries, int32_t n, char* err, int32_t err_len);
/* Like tfx_comm_submit, then runs the runtime's loop on the calling thread
 * for up to drive_us microseconds or until these entries are done (their
 * done may then run on this thread, before it returns). The loop thread
 * finishes what is left. For callers that would otherwise only wait. */
TFX_API int32_t tfx_comm_submit_drive(int64_t id, const tfx_entry* entries, int32_t n, int32_t drive_us,
                                      char* err, int32_t err_len);

/* Submits and waits (for Python; the caller releases the GIL). Returns the
 * first failing code (0 = OK) and its message in err. For allgather, entry
 * alloc may be NULL: the output is malloc'ed, returned in *gathered and
 * *gathered_dim0, and freed with tfx_comm_free. */
TFX_API int32_t tfx_comm_run(int64_t id, const tfx_entry* entries, int32_t n, void** gathered,
                             int64_t* gathered_dim0, char* err, int32_t err_len);
TFX_API void tfx_comm_free(void* p);

#ifdef __cplusplus
}
#endif

#endif  /* TFX_COMM_C_API_H_ */
