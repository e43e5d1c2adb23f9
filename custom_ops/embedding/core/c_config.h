// The C API's configuration structs (c_api.h) as the store's C++ types; used
// by both C interfaces of libtfx_embedding (the store's and the parameter
// server's).
#pragma once

#include "custom_ops/embedding/core/c_api.h"
#include "custom_ops/embedding/core/table.h"

namespace tfx::embedding {

OptimizerConfig OptimizerFromC(const tfx_emb_optimizer& in);
TableConfig ConfigFromC(const tfx_emb_table_config& in);

}  // namespace tfx::embedding
