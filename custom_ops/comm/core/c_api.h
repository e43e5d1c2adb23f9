/* The C interface of libtfx_comm, used by Python (ctypes) and by the
 * TensorFlow kernels (_comm_ops.so links this library; both share one copy,
 * so a communicator created from Python is found by its id in the kernels).
 *
 * This header is the one declaration of the interface's codes and structs:
 * the C++ core checks its enums against them at compile time, the kernels use
 * the names, and tfx_dist/comm/_native.py checks its copies against the
 * loaded library (tfx_comm_abi_value) before the first call.
 */
#ifndef TFX_COMM_C_API_H_
#define TFX_COMM_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TFX_API __attribute__((visibility("default")))

/* Element types (tfx_entry.dtype). */
enum {
  TFX_DTYPE_FLOAT16 = 1,
  TFX_DTYPE_BFLOAT16 = 2,
  TFX_DTYPE_FLOAT32 = 3,
  TFX_DTYPE_FLOAT64 = 4,
  TFX_DTYPE_INT32 = 5,
  TFX_DTYPE_INT64 = 6,
  TFX_DTYPE_UINT8 = 7 /* bytes: all-gather and broadcast only */
};

/* Reductions (tfx_entry.reduction; all-reduce and reduce-scatter). */
enum { TFX_REDUCE_SUM = 0, TFX_REDUCE_MEAN = 1, TFX_REDUCE_MIN = 2, TFX_REDUCE_MAX = 3 };

/* Wire compression of float32 all-reduces (tfx_entry.compression). */
enum { TFX_COMPRESSION_NONE = 0, TFX_COMPRESSION_FLOAT16 = 1, TFX_COMPRESSION_BFLOAT16 = 2 };

/* Collectives (tfx_entry.op). A new one also needs a row in
 * core/protocol/op_traits.cc (see custom_ops/comm/README.md). */
enum {
  TFX_OP_ALLREDUCE = 1,
  TFX_OP_ALLGATHER = 2,
  TFX_OP_BROADCAST = 3,
  TFX_OP_ALLTOALL = 4,     /* with splits: rows [off_j, off_j + splits[j]) go to rank j */
  TFX_OP_REDUCESCATTER = 5, /* rank r gets the reduction of block r of dimension 0 */
  TFX_OP_JOIN = 6           /* Horovod's join: one int32 output, the last rank to join; until every
                               rank joined, a joined rank adds zeros to the others' all-reduces */
};

/* Outcome codes (return values, tfx_done_fn's code): TensorFlow's canonical
 * error codes, the numbering of every tfx_dist C API (custom_ops/common/status.h). */
enum {
  TFX_STATUS_OK = 0,
  TFX_STATUS_CANCELLED = 1, /* SIGINT (Ctrl-C) while waiting in a collective */
  TFX_STATUS_INVALID_ARGUMENT = 3,
  TFX_STATUS_DEADLINE_EXCEEDED = 4,
  TFX_STATUS_FAILED_PRECONDITION = 9, /* ranks disagree on a collective */
  TFX_STATUS_ABORTED = 10,            /* the communicator is broken by an earlier error, or closed */
  TFX_STATUS_INTERNAL = 13,
  TFX_STATUS_UNAVAILABLE = 14, /* the peer closed the connection or died */
  TFX_STATUS_DATA_LOSS = 15,   /* unexpected bytes on a connection */
  TFX_STATUS_UNAUTHENTICATED = 16
};

/* TFX_HIERARCHICAL: all-reduce within hosts, across them, within them again
 * (core/topology.h); auto: when there are two hosts or more and one has two
 * ranks or more. */
enum { TFX_HIERARCHICAL_OFF = 0, TFX_HIERARCHICAL_ON = 1, TFX_HIERARCHICAL_AUTO = 2 };

/* TFX_WIRE_PROTECTION of TCP data connections (core/transport/frame_protection.h):
 * none, integrity (AES-GCM tag, payload in clear), encrypt (AES-GCM). */
enum { TFX_WIRE_NONE = 0, TFX_WIRE_INTEGRITY = 1, TFX_WIRE_ENCRYPT = 2 };

/* Every field is used as given: start from tfx_comm_default_options(). */
typedef struct {
  double timeout_s;      /* bound on every wait */
  int64_t bucket_bytes;  /* cross-process fusion bucket (TFX_COMM_FUSION_BYTES) */
  double cycle_time_ms;  /* minimum time between negotiation cycles */
  int32_t use_shm;       /* shared memory between same-host ranks */
  int64_t chunk_bytes;   /* ring pipelining granularity */
  int32_t hierarchical;  /* a TFX_HIERARCHICAL_ code */
  const char* timeline_path;    /* NULL or "": no timeline; else this rank's Chrome trace file */
  int32_t timeline_mark_cycles; /* timeline: mark negotiation cycles */
  /* auto only: a bucket goes through hosts when each process of a host
   * carries at least this many bytes of it across (TFX_HIERARCHICAL_MIN_STRIPE_BYTES) */
  int64_t hierarchical_min_stripe_bytes;
  int32_t wire_protection;  /* a TFX_WIRE_ code */
  /* With wire protection: 64 bytes per rank (size * 64, indexed by peer): the
   * key this rank sends with, then the one it receives with, on the data
   * connection to that peer (derived by the rendezvous). Read during create only. */
  const uint8_t* wire_keys;
  int32_t alltoall_fusion; /* all-to-alls ready together share one exchange (TFX_ALLTOALL_FUSION) */
  /* With wire protection: the control connections' keys, laid out as
   * wire_keys (size * 64, indexed by peer; only rank 0's entries are used on
   * other ranks). NULL: control connections unprotected. Read during create only. */
  const uint8_t* ctrl_wire_keys;
} tfx_comm_options;

/* The runtime's defaults, for C callers (the C++ tests). Python passes every
 * field from tfx_dist/settings.py, which owns the user-facing defaults. */
TFX_API tfx_comm_options tfx_comm_default_options(void);

/* The library's value of an interface constant, for the loader's check:
 * "sizeof(tfx_entry)", "sizeof(tfx_comm_options)", or a code's name as
 * spelled above ("TFX_OP_ALLGATHER"). -1 for an unknown name. */
TFX_API int64_t tfx_comm_abi_value(const char* name);

/* Called once per entry with the outcome (a TFX_STATUS_ code), from the runtime thread. */
typedef void (*tfx_done_fn)(void* arg, int32_t code, const char* message);
/* All-gather, all-to-all, reduce-scatter (the ops whose output's first
 * dimension is known after negotiation): returns the output buffer for dim0
 * rows (each row as the input's). */
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
  /* All-to-all only: nsplits (= size) rows to send to each rank, summing to
   * dims[0]; received_splits (size values) gets the rows from each rank. */
  int32_t nsplits;
  const int64_t* splits;
  int64_t* received_splits;
  /* TFX_REDUCE_MEAN: the sum over ranks is divided by this (0: by the number
   * of ranks); every rank must pass the same. */
  int64_t mean_divisor;
} tfx_entry;

/* Creates a communicator; takes ownership of every fd. data_fds[size] (-1 at
 * rank), ctrl_fds[size] (rank 0: one per other rank; others: [0] = rank 0),
 * same_host[size]; options NULL: tfx_comm_default_options(). Returns an
 * id > 0, or 0 with the error in err (also for invalid options). */
TFX_API int64_t tfx_comm_create(int32_t rank, int32_t size, const int32_t* data_fds,
                                const int32_t* ctrl_fds, const int32_t* same_host,
                                const tfx_comm_options* options, char* err, int32_t err_len);
TFX_API int32_t tfx_comm_destroy(int64_t id);
/* "tcp", "shm", "self" into out. */
TFX_API int32_t tfx_comm_transport(int64_t id, int32_t peer, char* out, int32_t out_len);
/* Counters: out[0] collectives executed, [1] all-reduce buckets, [2] tensors
 * in them, [3] bytes all-reduced, [4] ns from submission to running, [5] ns
 * running, summed over collectives, [6] all-reduce buckets run
 * hierarchically, [7] names the runtime holds state for (0 once every
 * collective completed: nothing is kept per call), [8] the status code that
 * broke the communicator (0 while it works: a lost peer, a timeout or a closed
 * connection breaks it for good). Writes min(n, 9) values. */
TFX_API int32_t tfx_comm_stats(int64_t id, int64_t* out, int32_t n);
/* How this communicator all-reduces, into out: "hierarchical striped (2 hosts
 * x 2 ranks)", "hierarchical leaders (2 hosts of 2+3 ranks)" or
 * "ring (1 host x 4 ranks)". The same on every rank. */
TFX_API int32_t tfx_comm_allreduce_algorithm(int64_t id, char* out, int32_t out_len);
/* Starts the timeline (core/timeline.h) into path, or stops it (path NULL or
 * ""), closing the file. Returns 0, or a nonzero code with the error in err. */
TFX_API int32_t tfx_comm_timeline(int64_t id, const char* path, int32_t mark_cycles, char* err,
                                  int32_t err_len);
TFX_API int32_t tfx_comm_rank(int64_t id);
TFX_API int32_t tfx_comm_size(int64_t id);
/* The call that the collectives submitted from now on belong to, in this
 * process (e.g. "predict call 2"; NULL or "": none): sent with each request,
 * and ranks must agree on it as on the shape (at most 256 bytes are kept). */
TFX_API void tfx_comm_set_call(const char* call);

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
 * first failing code (0 = OK) and its message in err. For allgather, alltoall
 * and reducescatter, entry alloc may be NULL (one such entry per call): the
 * output is malloc'ed, returned in *gathered and
 * *gathered_dim0, and freed with tfx_comm_free. */
TFX_API int32_t tfx_comm_run(int64_t id, const tfx_entry* entries, int32_t n, void** gathered,
                             int64_t* gathered_dim0, char* err, int32_t err_len);
TFX_API void tfx_comm_free(void* p);

/* Ctrl-C (core/interrupt.h): puts the runtime's SIGINT hook in front of the
 * process's handler (Python's), so that a SIGINT while a collective waits
 * fails it (TFX_STATUS_CANCELLED, the peers told) before the handler runs.
 * Returns 1 if the hook is in place, 0 if SIGINT is ignored or has its
 * default action. Call again after the handler was replaced. */
TFX_API int32_t tfx_comm_install_interrupt_hook(void);
/* The message of the latest collective a SIGINT interrupted, into out (""
 * if none since the last call); returns its length. */
TFX_API int32_t tfx_comm_take_interrupt_message(char* out, int32_t out_len);

#ifdef __cplusplus
}
#endif

#endif  /* TFX_COMM_C_API_H_ */
