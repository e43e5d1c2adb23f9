// Registration and shape functions of the parameter-server ops. The kernels
// (cc/kernels/ps_kernels.cc) call libtfx_embedding's PsClient by its id.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfx {

using ::tensorflow::shape_inference::InferenceContext;

// A lookup's output: one row of `dim` floats per id of the 1-D input `ids_input`.
static absl::Status RowsOfIds(InferenceContext* c, int ids_input) {
  int64_t dim;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  ::tensorflow::shape_inference::ShapeHandle ids;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(ids_input), 1, &ids));
  c->set_output(0, c->Matrix(c->Dim(ids, 0), dim));
  return absl::OkStatus();
}

REGISTER_OP("TfxPsLookup")
    .Input("ids: int64")
    .Output("rows: float")
    .Attr("client_id: int")
    .Attr("table_id: int")
    .Attr("dim: int")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return RowsOfIds(c, 0); })
    .Doc("Rows of distinct ids (1-D) of a table on the parameter servers, [n, dim].");

// The same lookup taking the table's anchor variable as its first input, so
// that the op alone is differentiable: its registered gradient (Python,
// tables/on_servers.py) gives the anchor the rows' gradient as IndexedSlices over
// ids, as ResourceGather does for a variable. No ReadVariableOp, identity or
// tf.custom_gradient around it (each costs a call: see docs/parameter_server.md).
REGISTER_OP("TfxPsTableLookup")
    .Input("anchor: resource")
    .Input("ids: int64")
    .Output("rows: float")
    .Attr("client_id: int")
    .Attr("table_id: int")
    .Attr("dim: int")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return RowsOfIds(c, 1); })
    .Doc("TfxPsLookup with the table's anchor variable as an input (never read): the op's gradient "
         "for the anchor is the rows' gradient as IndexedSlices over ids.");

REGISTER_OP("TfxPsPush")
    .Input("ids: int64")
    .Input("gradients: float")
    .Input("learning_rate: float")
    .Attr("client_id: int")
    .Attr("table_id: int")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return absl::OkStatus(); })
    .Doc("Sends the gradient rows of ids to the servers that hold them (applied by their optimizer).");

REGISTER_OP("TfxPsStepDone")
    .Attr("client_id: int")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return absl::OkStatus(); })
    .Doc("Ends this worker's training step on every server, if it pushed anything.");

}  // namespace tfx
