// Registration and shape functions of the cross-process collective ops.
// The kernels (cc/kernels/comm_kernels.cc) hand the work to libtfx_comm.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfx {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

static absl::Status SameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// Output 0 is input 0 with its first dimension unknown: the row counts of the
// other processes (all-gather, all-to-all, reduce-scatter).
static absl::Status FirstDimUnknown(InferenceContext* c) {
  ShapeHandle in = c->input(0);
  if (!c->RankKnown(in)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(in, 1, &in));
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

REGISTER_OP("TfxAllReduce")
    .Input("tensors: T")
    .Output("reduced: T")
    .Attr("T: list({half, bfloat16, float, double, int32, int64})")
    .Attr("communicator_id: int")
    .Attr("reduction: {'sum', 'mean', 'min', 'max'} = 'sum'")
    .Attr("mean_divisor: int >= 0 = 0")
    .Attr("names: list(string)")
    .Attr("compression: {'none', 'float16', 'bfloat16'} = 'none'")
    .SetIsStateful()
    .SetShapeFn(SameShapes)
    .Doc(R"doc(
All-reduces a list of tensors across the processes of a tfx_dist communicator.
Every process must run an op with the same names (one per tensor, made by
tfx_dist.comm.naming), dtypes, shapes and mean_divisor; the
runtime negotiates, fuses and executes them asynchronously.
mean_divisor: 'mean' divides the sum by it (0: by the number of processes);
floats by a true division, integers rounding down, as TensorFlow's / and //.
)doc");

REGISTER_OP("TfxAllGather")
    .Input("tensor: T")
    .Output("gathered: T")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8}")
    .Attr("communicator_id: int")
    .Attr("names: list(string)")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown)
    .Doc(R"doc(
Concatenates every process's tensor on dimension 0 (the first dimension may
differ between processes, the others may not).
)doc");

REGISTER_OP("TfxBroadcast")
    .Input("tensors: T")
    .Output("broadcast: T")
    .Attr("T: list({half, bfloat16, float, double, int32, int64, uint8})")
    .Attr("communicator_id: int")
    .Attr("root: int = 0")
    .Attr("names: list(string)")
    .SetIsStateful()
    .SetShapeFn(SameShapes)
    .Doc(R"doc(
Every process receives the root process's tensors.
)doc");

REGISTER_OP("TfxAllToAll")
    .Input("tensor: T")
    .Input("splits: Tsplits")
    .Output("output: T")
    .Output("received_splits: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8}")
    .Attr("Tsplits: {int32, int64}")
    .Attr("communicator_id: int")
    .Attr("names: list(string)")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle splits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &splits));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return FirstDimUnknown(c);
    })
    .Doc(R"doc(
All-to-all with splits: rows [off_j, off_j + splits[j]) of `tensor` go to
process j; `output` is what every process sent this one, in rank order, and
`received_splits` how many rows came from each.
)doc");

REGISTER_OP("TfxReduceScatter")
    .Input("tensor: T")
    .Output("reduced: T")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("communicator_id: int")
    .Attr("reduction: {'sum', 'mean', 'min', 'max'} = 'sum'")
    .Attr("names: list(string)")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown)
    .Doc(R"doc(
Reduce-scatter: process r receives the reduction of block r of dimension 0
(the first dim0 % size processes one row more, as Horovod's reducescatter).
)doc");

}  // namespace tfx
