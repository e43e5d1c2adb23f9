/* The C interface of libtfx_embedding: table shards for ctypes (Python) and,
 * later, the parameter server and its TensorFlow ops.
 *
 * Every function returns a status code (tfx::Code: 0 OK,
 * 3 INVALID_ARGUMENT, 5 NOT_FOUND, 9 FAILED_PRECONDITION, 11 OUT_OF_RANGE,
 * 13 INTERNAL, 15 DATA_LOSS) and writes the message into err (err_len
 * bytes, NUL-terminated, may be NULL). Nothing aborts on bad input.
 * Tables are named by an id > 0; every function may be called from many
 * threads at once (a table destroyed while a call on it runs lives until
 * that call returns).
 *
 * Codes: initializer 0 zeros, 1 constant (a), 2 uniform (a = minval,
 * b = maxval), 3 normal (a = mean, b = stddev), 4 truncated normal (same);
 * optimizer 0 SGD, 1 Adagrad, 2 Adam, 3 FTRL, 4 RMSprop, 6 Adadelta, 7 Adamax,
 * 8 Lion, 9 Nadam.
 */
#ifndef TFX_EMBEDDING_C_API_H_
#define TFX_EMBEDDING_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TFX_EMB_API __attribute__((visibility("default")))

/* Bumped whenever a struct below or a signature changes (2: the PS client gained
 * tfx_ps_assign and servers the ASSIGN request; 3: RMSprop and weight decay;
 * 4: Adadelta, Adamax, Lion and Nadam, no external rule). */
#define TFX_EMB_ABI_VERSION 4

typedef struct {
  int32_t kind;
  int32_t nesterov; /* SGD */
  int32_t amsgrad;  /* Adam */
  int32_t centered; /* RMSprop */
  double momentum;                  /* SGD, RMSprop */
  double initial_accumulator_value; /* Adagrad, FTRL */
  double epsilon;                   /* Adagrad, Adam, RMSprop, Adadelta, Adamax, Nadam */
  double beta_1, beta_2;            /* Adam, Adamax, Lion, Nadam */
  double learning_rate_power;       /* FTRL, and the four below */
  double l1_regularization_strength;
  double l2_regularization_strength;
  double l2_shrinkage_regularization_strength;
  double beta;
  double rho;          /* RMSprop, Adadelta */
  double weight_decay; /* every kind, 0: none */
} tfx_emb_optimizer;

typedef struct {
  int64_t table_id;
  const char* name;
  int64_t dim;
  int64_t num_rows; /* > 0 fixed, 0 dynamic */
  int32_t shard_index;
  int32_t num_shards;
  uint64_t seed;
  int32_t initializer;
  int32_t reserved;
  double init_a, init_b;
  tfx_emb_optimizer optimizer;
} tfx_emb_table_config;

typedef struct {
  int64_t dim;
  int64_t num_slots;
  int64_t record_floats; /* dim * (1 + num_slots) */
  int64_t num_rows;      /* fixed: ids held by this shard; dynamic: rows created */
  int64_t stored_rows;   /* rows occupying memory */
} tfx_emb_table_info;

/* out[0] = TFX_EMB_ABI_VERSION, out[1] = sizeof(tfx_emb_optimizer),
 * out[2] = sizeof(tfx_emb_table_config), out[3] = sizeof(tfx_emb_table_info).
 * Writes min(n, 4) values; returns how many it has (4). */
TFX_EMB_API int32_t tfx_emb_abi(int64_t* out, int32_t n);

/* Creates a table shard; *id > 0 on success. */
TFX_EMB_API int32_t tfx_emb_create(const tfx_emb_table_config* config, int64_t* id, char* err, int32_t err_len);
TFX_EMB_API int32_t tfx_emb_destroy(int64_t id, char* err, int32_t err_len);
TFX_EMB_API int32_t tfx_emb_info(int64_t id, tfx_emb_table_info* info, char* err, int32_t err_len);

/* out: n * dim floats. */
TFX_EMB_API int32_t tfx_emb_lookup(int64_t id, const int64_t* ids, int64_t n, float* out, char* err,
                                   int32_t err_len);
/* grads: n * dim floats; ids may repeat (their gradients are summed). step:
 * the 1-based count of applies on this table (Adam's bias correction). */
TFX_EMB_API int32_t tfx_emb_apply(int64_t id, const int64_t* ids, int64_t n, const float* grads,
                                  float learning_rate, int64_t step, char* err, int32_t err_len);
/* Copies row row_id's record ([value | slots], record_floats floats) into out
 * (out_len floats at least). A dynamic row that does not exist: NOT_FOUND. */
TFX_EMB_API int32_t tfx_emb_read_record(int64_t id, int64_t row_id, float* out, int64_t out_len, char* err,
                                        int32_t err_len);
/* Batch forms: n records of record_floats floats each, row after row, in out
 * (out_len floats at least) or from records. write_records replaces the
 * whole record (value and slots) of each id; nothing changes on an error. */
TFX_EMB_API int32_t tfx_emb_read_records(int64_t id, const int64_t* ids, int64_t n, float* out, int64_t out_len,
                                         char* err, int32_t err_len);
TFX_EMB_API int32_t tfx_emb_write_records(int64_t id, const int64_t* ids, int64_t n, const float* records,
                                          int64_t records_len, char* err, int32_t err_len);

TFX_EMB_API int32_t tfx_emb_save(int64_t id, const char* path, char* err, int32_t err_len);
/* paths: the files of every shard of the writing job, any number of shards. */
TFX_EMB_API int32_t tfx_emb_restore(int64_t id, const char* const* paths, int32_t n_paths, char* err,
                                    int32_t err_len);

/* One shard file (tfx_emb_save's), read without a table (serving reads a table's
 * rows so). shard_file_shape: its dim and record count, from its header and size.
 * read_shard_file: its records' ids (n) and values (n * dim floats; the
 * optimizer slots left out), in file order, with n and dim as shard_file_shape
 * gave them (else FAILED_PRECONDITION: the file changed). Checks what
 * tfx_emb_restore checks of a file: a bad one is DATA_LOSS naming it, and the
 * outputs then hold nothing meaningful. */
TFX_EMB_API int32_t tfx_emb_shard_file_shape(const char* path, int64_t* dim, int64_t* records, char* err,
                                             int32_t err_len);
TFX_EMB_API int32_t tfx_emb_read_shard_file(const char* path, int64_t dim, int64_t n, int64_t* ids, float* values,
                                            char* err, int32_t err_len);

/* Replaces the table's optimizer: stored rows keep their values, every slot
 * restarts from the new optimizer's initial value. The handle stays. */
TFX_EMB_API int32_t tfx_emb_set_optimizer(int64_t id, const tfx_emb_optimizer* optimizer, char* err,
                                          int32_t err_len);

/* The sharding rule: out[i] = the shard of ids[i] among num_shards. */
TFX_EMB_API int32_t tfx_emb_shard_of(const int64_t* ids, int64_t n, int32_t num_shards, int32_t dynamic,
                                     int32_t* out, char* err, int32_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* TFX_EMBEDDING_C_API_H_ */
