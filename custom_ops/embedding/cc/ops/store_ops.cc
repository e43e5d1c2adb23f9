// Registration and shape functions of the in-process embedding store ops
// (HybridStrategy: each worker holds a shard of every table). The kernels
// (cc/kernels/store_kernels.cc) call libtfx_embedding's C API by table handle.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfx {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TfxStoreLookup")
    .Input("ids: int64")
    .Output("rows: float")
    .Attr("handle: int")
    .Attr("dim: int")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      int64_t dim;
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
      c->set_output(0, c->Matrix(c->Dim(c->input(0), 0), dim));
      return absl::OkStatus();
    })
    .Doc("Rows of ids (1-D, all held by this process's shard) of an in-process table shard, [n, dim].");

REGISTER_OP("TfxStoreApply")
    .Input("ids: int64")
    .Input("gradients: float")
    .Input("learning_rate: float")
    .Input("step: int64")
    .Attr("handle: int")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return absl::OkStatus(); })
    .Doc("Applies the shard's optimizer to the rows of ids (repeats summed); step is 1-based (Adam).");

}  // namespace tfx
