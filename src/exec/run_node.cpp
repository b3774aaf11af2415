#include "exec/run_node.hpp"

#include <new>

#include "graph/op.hpp"

namespace kiln {

std::string describe_values(InputValues values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + (values[i].defined() ? values[i].str() : std::string("none"));
  return s;
}

std::string node_context(const Node& node, InputValues inputs) {
  return "\n  while running " + node.op->name() + " on " + describe_values(inputs) + ", " + node.origin();
}

void run_node(const Node& node, const Executable& executable, InputValues inputs, OutputValues outputs,
              std::span<std::byte> scratch) {
  try {
    executable.run(inputs, outputs, scratch);
  } catch (const Error& e) {
    e.rethrow_with(std::string(e.what()) + node_context(node, inputs));
  } catch (const std::bad_alloc&) {
    throw MemoryError("out of memory while running " + node.op->name() + " on " + describe_values(inputs) + ", " +
                      node.origin());
  } catch (const std::exception& e) {  // a standard library error from a kernel: kiln's own type, with the context
    throw Error(std::string("internal error: ") + e.what() + node_context(node, inputs) + " (please report it)");
  }
}

NodeShapes node_shapes(const Node& node, const Executable& executable, InputValues inputs) {
  NodeShapes shapes;
  std::vector<const Tensor*> values;
  for (const Tensor& t : inputs) {
    shapes.inputs.push_back(t.defined() ? t.shape() : Shape{});
    values.push_back(t.defined() ? &t : nullptr);
  }
  shapes.outputs = executable.infer_shapes(node, shapes.inputs, values);
  return shapes;
}

std::vector<Tensor> evaluate_node(const Node& node, const Executable& executable, InputValues inputs,
                                  const Backend& backend) {
  const NodeShapes shapes = node_shapes(node, executable, inputs);
  const std::vector<Shape>& out_shapes = shapes.outputs;
  std::vector<Tensor> outputs(node.outputs.size());
  std::vector<bool> is_view(outputs.size(), false);
  for (auto [out, in] : node.op->view_map()) is_view[static_cast<size_t>(out)] = true;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (is_view[o]) continue;
    const DType dtype = node.outputs[o]->type.dtype;
    outputs[o] = Tensor::view_of(backend.allocate(static_cast<size_t>(shape_nbytes(out_shapes[o], dtype))), dtype,
                                 out_shapes[o], contiguous_strides(out_shapes[o]), 0);
  }
  const int64_t scratch_bytes =
      executable.scratch_depends_on_values() ? executable.scratch_bytes_of(inputs) : executable.scratch_bytes(shapes.inputs, out_shapes);
  const std::shared_ptr<Storage> scratch = scratch_bytes > 0 ? backend.allocate(static_cast<size_t>(scratch_bytes)) : nullptr;
  run_node(node, executable, inputs, outputs,
           scratch ? std::span<std::byte>(scratch->data(), scratch->nbytes()) : std::span<std::byte>());
  return outputs;
}

}  // namespace kiln
