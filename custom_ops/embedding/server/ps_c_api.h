/* The C interface of the parameter server (libtfx_ps), for Python (ctypes)
 * and the TensorFlow kernels (_ps_ops.so links this library, so a client
 * created from Python is found by its id in the kernels).
 *
 * Status codes are tfx::Code (TensorFlow's numbering, 0 = OK);
 * an error's message goes to (err, err_len). Table configurations use the
 * embedding store's tfx_emb_table_config (custom_ops/embedding/core/c_api.h;
 * shard_index and num_shards are the servers' to fill in).
 */
#ifndef TFX_PS_C_API_H_
#define TFX_PS_C_API_H_

#include <stdint.h>

#include "custom_ops/embedding/core/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TFX_PS_API __attribute__((visibility("default")))

/* Serves the tables of one parameter server until every worker has said
 * goodbye (returns 0), or a worker vanishes or the serve fails (returns the
 * code; err names the worker). service_server: a tfx_service server id whose
 * clients are the workers, in worker order; it is not destroyed here. */
TFX_PS_API int32_t tfx_ps_serve(int64_t service_server, int32_t server_index, int32_t num_servers,
                                int32_t num_workers, int32_t synchronous, double timeout_s, char* err,
                                int32_t err_len);

/* A parameter server that outlives its workers' connections (elastic jobs): one session per
 * generation of workers, the tables and steps carried over. create returns an id > 0; begin
 * starts a session of num_workers (note: what became of the step the last session left open,
 * "" if none; apply_ended: apply it whole when a worker ended it, else drop it; a server that
 * keeps an undo log always drops it: the workers roll back to a commit before it); serve serves it until its workers are gone (returns 0 when every one said
 * goodbye, else the code of the first loss: err names the worker). */
TFX_PS_API int64_t tfx_ps_server_create(int32_t server_index, int32_t num_servers, int32_t synchronous,
                                        double timeout_s);
TFX_PS_API int32_t tfx_ps_server_begin(int64_t id, int32_t num_workers, int32_t apply_ended, char* note,
                                       int32_t note_len);
TFX_PS_API int32_t tfx_ps_server_serve(int64_t id, int64_t service_server, char* err, int32_t err_len);
TFX_PS_API int64_t tfx_ps_server_version(int64_t id);
TFX_PS_API int32_t tfx_ps_server_destroy(int64_t id);

/* A worker's client over a tfx_service client id connected to every server
 * in server order (not owned). Returns an id > 0. */
TFX_PS_API int64_t tfx_ps_client_create(int64_t service_client, int32_t num_servers, int32_t worker);
TFX_PS_API int32_t tfx_ps_client_destroy(int64_t id);
/* The client joins a new session of the servers (elastic jobs) as `worker` over service_client;
 * its next step becomes the servers'. */
TFX_PS_API int32_t tfx_ps_client_rejoin(int64_t id, int64_t service_client, int32_t worker, int64_t generation,
                                        char* err, int32_t err_len);
/* Commits (elastic jobs): the client's worker commits its state at its closed steps, having
 * committed at `held` before (-1: never); returns once every server has applied them. rollback:
 * every server goes back to the commit at `step` (the state the workers restored), and so does
 * the client's step count. */
TFX_PS_API int32_t tfx_ps_client_commit(int64_t id, int64_t held, char* err, int32_t err_len);
TFX_PS_API int32_t tfx_ps_client_rollback(int64_t id, int64_t step, char* err, int32_t err_len);
TFX_PS_API int32_t tfx_ps_create_table(int64_t id, const tfx_emb_table_config* config, char* err,
                                       int32_t err_len);
/* Lays the table's slots out for optimizer (sent when the model's optimizer
 * is known; rows keep their values). */
TFX_PS_API int32_t tfx_ps_set_optimizer(int64_t id, int64_t table_id, const tfx_emb_optimizer* optimizer,
                                        char* err, int32_t err_len);
TFX_PS_API int32_t tfx_ps_lookup(int64_t id, int64_t table_id, const int64_t* ids, int64_t n, float* out,
                                 char* err, int32_t err_len);
TFX_PS_API int32_t tfx_ps_push(int64_t id, int64_t table_id, const int64_t* ids, int64_t n, const float* grads,
                               float learning_rate, char* err, int32_t err_len);
TFX_PS_API int32_t tfx_ps_step_done(int64_t id, char* err, int32_t err_len);
/* Steps this worker has closed. */
TFX_PS_API int64_t tfx_ps_steps(int64_t id);
/* Every server writes its shard of the table to prefix.shard-<s>-of-<S>;
 * *applies: the table's optimizer step count (the most of any server). */
TFX_PS_API int32_t tfx_ps_save(int64_t id, int64_t table_id, const char* prefix, int64_t* applies, char* err,
                               int32_t err_len);
/* Every server restores its rows of the table from paths (the files of any
 * number of shards) and sets the step count to applies. */
TFX_PS_API int32_t tfx_ps_restore(int64_t id, int64_t table_id, const char* const* paths, int32_t n,
                                  int64_t applies, char* err, int32_t err_len);
/* Sets the table to exactly these n rows (values: dim floats per id) on every
 * server, over the connections (no file), in requests of at most about
 * max_chunk_bytes; slots restart, the step count becomes applies. */
TFX_PS_API int32_t tfx_ps_assign(int64_t id, int64_t table_id, const int64_t* ids, int64_t n, const float* values,
                                 int64_t applies, int64_t max_chunk_bytes, char* err, int32_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* TFX_PS_C_API_H_ */
