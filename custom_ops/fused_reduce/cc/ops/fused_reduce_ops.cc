// Registration and shape function of TfxFusedReduce.

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfx_dist {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfxFusedReduce")
    .Input("inputs: T")
    .Output("outputs: Tout")
    .Output("block: Tblock")
    .Attr("T: list({half, bfloat16, float, double, int32, int64})")
    .Attr("Tout: list({half, bfloat16, float, double, int32, int64})")
    .Attr("Tblock: list({uint8}) >= 0 = []")
    .Attr("num_devices: int >= 1")
    .Attr("reduction: {'sum', 'mean', 'min', 'max'} = 'sum'")
    .Attr("bucket_bytes: int >= 1 = 4194304")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      int num_devices;
      TF_RETURN_IF_ERROR(c->GetAttr("num_devices", &num_devices));
      if (c->num_inputs() % num_devices != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TfxFusedReduce: expected num_devices (", num_devices,
            ") contributions of the same tensor list, got ", c->num_inputs(),
            " inputs in all, which is not a multiple of num_devices."));
      }
      const int num_tensors = c->num_inputs() / num_devices;
      std::vector<tensorflow::DataType> tout;
      TF_RETURN_IF_ERROR(c->GetAttr("Tout", &tout));
      if (static_cast<int>(tout.size()) != num_tensors) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TfxFusedReduce: Tout has ", tout.size(),
            " types, expected one per tensor (", num_tensors, ")."));
      }
      if (c->num_outputs() > num_tensors) c->set_output(num_tensors, c->Vector(c->UnknownDim()));
      for (int k = 0; k < num_tensors; ++k) {
        ShapeHandle merged = c->input(k);
        for (int d = 1; d < num_devices; ++d) {
          ShapeHandle other = c->input(d * num_tensors + k);
          if (!c->Merge(merged, other, &merged).ok()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "TfxFusedReduce: tensor ", k, " has shape ",
                c->DebugString(c->input(k)), " on device 0 but ",
                c->DebugString(other), " on device ", d,
                "; every device must contribute the same shapes."));
          }
        }
        c->set_output(k, merged);
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
Reduces a list of tensors across the devices of one process in one fused pass.

inputs: num_devices contributions of the same tensor list, device-major:
  [device 0: t_0 .. t_{K-1}, device 1: t_0 .. t_{K-1}, ...].
outputs: the K reduced tensors.
block: with Tblock = [uint8] (CPU only), the one buffer that holds every output
  (none takes over an input's buffer then), for TfxBlockViews on other devices.
bucket_bytes: the most bytes one unit of parallel work reduces.
)doc");

REGISTER_OP("TfxBlockViews")
    .Input("block: uint8")
    .Output("outputs: dtypes")
    .Attr("dtypes: list({half, bfloat16, float, double, int32, int64}) >= 1")
    .Attr("shapes: list(shape)")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      std::vector<tensorflow::PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("shapes", &shapes));
      if (static_cast<int>(shapes.size()) != c->num_outputs()) {
        return absl::InvalidArgumentError("TfxBlockViews: one shape per dtype expected");
      }
      for (int k = 0; k < c->num_outputs(); ++k) {
        ShapeHandle shape;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[k], &shape));
        c->set_output(k, shape);
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
The tensors of a TfxFusedReduce output block, as views of it (no copy).

Handing a reduction's K results to another device this way takes one
cross-device edge (the block) instead of K.
block: the block output of TfxFusedReduce.
dtypes, shapes: the reduced tensors' dtypes and shapes, in order.
)doc");

}  // namespace tfx_dist
