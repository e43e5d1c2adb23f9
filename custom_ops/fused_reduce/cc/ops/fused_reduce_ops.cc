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
    .Attr("T: list({half, bfloat16, float, double, int32, int64})")
    .Attr("Tout: list({half, bfloat16, float, double, int32, int64})")
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
      if (c->num_outputs() != num_tensors) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TfxFusedReduce: Tout has ", c->num_outputs(),
            " types, expected one per tensor (", num_tensors, ")."));
      }
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
bucket_bytes: the most bytes one unit of parallel work reduces.
)doc");

}  // namespace tfx_dist
