/* The C interface of the request/response service (libtfx_comm), for Python
 * (ctypes) and for native layers above it (the parameter server installs its
 * handler as a function pointer through tfx_service_server_serve).
 *
 * Handles are int64 ids > 0 (servers and clients share one id space), as
 * tfx_comm_create's. Status codes are tfx::Code (0 = OK); an error's
 * message goes to (err, err_len). Request kinds are 0 .. 0xFEFF (the rest
 * are the service's own, see wire.h).
 */
#ifndef TFX_COMM_SERVICE_C_API_H_
#define TFX_COMM_SERVICE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TFX_SERVICE_API __attribute__((visibility("default")))
#define TFX_SERVICE_ABI_VERSION 3

typedef struct {
  double timeout_s;              /* bound on every wait; <= 0: 300 */
  int64_t max_frame_bytes;       /* largest payload accepted; <= 0: 1 GiB */
  int32_t use_shm;               /* same-host peers over shared memory; both ends must agree */
  int32_t abort_on_client_loss;  /* server: a vanished client ends the serve (default 1) */
  int32_t wire_protection;       /* TCP connections: a TFX_WIRE_ code of c_api.h (0: none) */
  /* With wire protection: 64 bytes per connection (n * 64, in fds' order):
   * the key this end sends with, then the one it receives with (from the
   * rendezvous). Read during create only. */
  const uint8_t* wire_keys;
} tfx_service_options;

/* The reply a handler builds; valid only during the handler call. */
typedef struct tfx_service_reply tfx_service_reply;

/* Runs on the client's own server thread (it may block: other clients are
 * served meanwhile). payload is valid until it returns. The reply is empty
 * unless the handler sizes it (tfx_service_reply_alloc); the request
 * succeeds unless it calls tfx_service_reply_fail. */
typedef void (*tfx_service_handler_fn)(void* arg, int32_t client, int32_t kind, const void* payload,
                                       int64_t payload_bytes, tfx_service_reply* reply);
/* A client was dropped (garbage) or lost (vanished, silent for timeout_s). */
typedef void (*tfx_service_lost_fn)(void* arg, int32_t client, int32_t code, const char* message);
/* Where a reply of len bytes goes (e.g. a TF output tensor); may return NULL only for len 0. */
typedef void* (*tfx_service_alloc_fn)(void* arg, int64_t len);

typedef struct {
  int32_t server;
  int32_t kind;
  const void* payload;
  int64_t payload_bytes;
  tfx_service_alloc_fn alloc; /* NULL: malloc'ed, free with tfx_service_free */
  void* alloc_arg;
  /* Optional, instead of alloc (used when scatter_base is not NULL): the reply
   * is scatter_count records of scatter_record_bytes each, and record k lands
   * at scatter_base + scatter_index[k] * scatter_record_bytes, straight from
   * the transport (no reply buffer, no second copy). A reply of another size
   * fails the request. reply is then scatter_base. */
  void* scatter_base;
  const int64_t* scatter_index;
  int64_t scatter_count;
  int64_t scatter_record_bytes;
  /* Filled by tfx_service_client_call: */
  int32_t code;               /* the handler's status, or why the round trip failed */
  int64_t reply_bytes;
  void* reply;                /* from alloc (code 0 only) */
} tfx_service_request;

/* Makes the reply len bytes long; returns its buffer (NULL if len < 0). */
TFX_SERVICE_API void* tfx_service_reply_alloc(tfx_service_reply* reply, int64_t len);
/* Fails the request: the client's call gets code (nonzero) and message. */
TFX_SERVICE_API void tfx_service_reply_fail(tfx_service_reply* reply, int32_t code, const char* message);
/* Writes bytes [offset, offset + len) of a streamed reply to dst. */
typedef void (*tfx_service_fill_fn)(void* arg, int64_t offset, void* dst, int64_t len);
/* Answers the request now, OK, with len bytes made by fill in pieces of whole
 * records of record_bytes (which divides len): over shared memory straight
 * into the transport's slots, no reply buffer and no copy (server.h,
 * Reply::Stream). At most once, after everything that can fail: later
 * alloc/fail calls are ignored. Returns 0, or the code of a failed send (the
 * client is then dropped). */
TFX_SERVICE_API int32_t tfx_service_reply_stream(tfx_service_reply* reply, int64_t len, int64_t record_bytes,
                                                 tfx_service_fill_fn fill, void* fill_arg);

/* A server over fds[n] (one connected, authenticated socket per client, from
 * the rendezvous; ownership taken, also on failure); same_host[n];
 * labels[n] names the clients in errors ("worker 1"; NULL: none). Runs the
 * shared-memory handshakes. Returns an id > 0, or 0 with the error in err. */
TFX_SERVICE_API int64_t tfx_service_server_create(int32_t n, const int32_t* fds, const int32_t* same_host,
                                                  const char* const* labels, const tfx_service_options* options,
                                                  char* err, int32_t err_len);
/* Serves until every client said GOODBYE (returns 0), or fails (a code, the
 * message in err), or tfx_service_server_stop. Blocking; call once. lost may
 * be NULL. */
TFX_SERVICE_API int32_t tfx_service_server_serve(int64_t id, tfx_service_handler_fn handler, void* handler_arg,
                                                 tfx_service_lost_fn lost, void* lost_arg, char* err,
                                                 int32_t err_len);
/* Thread-safe: a running serve tells the clients, stops and fails (ABORTED). */
TFX_SERVICE_API int32_t tfx_service_server_stop(int64_t id);
/* Stops and releases the server (after serve returns, if it runs). */
TFX_SERVICE_API int32_t tfx_service_server_destroy(int64_t id);

/* A client over fds[n] (one per server), as tfx_service_server_create. */
TFX_SERVICE_API int64_t tfx_service_client_create(int32_t n, const int32_t* fds, const int32_t* same_host,
                                                  const char* const* labels, const tfx_service_options* options,
                                                  char* err, int32_t err_len);
/* Sends requests[n] and receives their replies (thread-safe). Fills each
 * request's code/reply/reply_bytes; returns the first failing code (0 = all
 * OK), its message in err. */
TFX_SERVICE_API int32_t tfx_service_client_call(int64_t id, tfx_service_request* requests, int32_t n, char* err,
                                                int32_t err_len);
/* Says GOODBYE to every server; later calls fail. */
TFX_SERVICE_API int32_t tfx_service_client_close(int64_t id, char* err, int32_t err_len);
/* Releases the client (without GOODBYE: servers see it vanish). */
TFX_SERVICE_API int32_t tfx_service_client_destroy(int64_t id);

/* "tcp" or "shm" for a server's client / a client's server, into out. */
TFX_SERVICE_API int32_t tfx_service_transport(int64_t id, int32_t peer, char* out, int32_t out_len);
TFX_SERVICE_API void tfx_service_free(void* p);
/* For loaders: out[0] TFX_SERVICE_ABI_VERSION, [1] sizeof(tfx_service_options),
 * [2] sizeof(tfx_service_request), [3] the frame header's size. Writes min(n, 4). */
TFX_SERVICE_API int32_t tfx_service_abi(int64_t* out, int32_t n);

#ifdef __cplusplus
}
#endif

#endif /* TFX_COMM_SERVICE_C_API_H_ */
