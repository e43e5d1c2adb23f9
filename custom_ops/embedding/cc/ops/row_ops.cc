// Registration of the row ops the embedding layers run on every step, beside
// their table ops: dense math over rows of a batch, no table and no server.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfx {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfxSumRowsByIndex")
    .Input("rows: float")
    .Input("index: Tindex")
    .Input("num_segments: Tindex")
    .Output("sums: float")
    .Attr("Tindex: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle rows, index;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &rows));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &index));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(rows, 0), c->Dim(index, 0), &n));
      DimensionHandle segments;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &segments));
      c->set_output(0, c->Matrix(segments, c->Dim(rows, 1)));
      return absl::OkStatus();
    })
    .Doc(R"doc(
sums[s] = the sum of rows[i] over every i with index[i] == s, in the order of i
(tf.math.unsorted_segment_sum of 2-D rows, every index in [0, num_segments)).
Segments no row names are zero. An index out of range is an error naming it.
)doc");

}  // namespace tfx
